//! The built-in development OpenID provider, served under `/dev-idp` when no
//! `GATEHOUSE_OIDC_ISSUER` is set outside production. It exists so the default run signs in
//! with no setup; the relying party talks to it over HTTP exactly as to a real provider.
//!
//! Ed25519 (EdDSA) signing key in `GATEHOUSE_DATA_DIR/dev-idp-ed25519.pem` (0600), one client
//! (`gatehouse-dev`, secret derived from the key), authorization code with PKCE S256 only,
//! single-use codes in PostgreSQL (60 s), ID tokens valid 5 minutes.

pub mod http;

use std::{fs::OpenOptions, io::Write, os::unix::fs::OpenOptionsExt, path::Path};

use anyhow::Context;
use ed25519_dalek::{
    SigningKey,
    pkcs8::{EncodePrivateKey, spki::der::pem::LineEnding},
};
use openidconnect::{
    JsonWebKeyId, PrivateSigningKey,
    core::{CoreEdDsaPrivateSigningKey, CoreJsonWebKeySet},
};
use rand::RngCore;
use sha2::{Digest, Sha256};

pub const CLIENT_ID: &str = "gatehouse-dev";
pub const KEY_FILE: &str = "dev-idp-ed25519.pem";

pub struct DevIdp {
    pub issuer: String,
    pub redirect_uri: String,
    pub client_secret: String,
    key: CoreEdDsaPrivateSigningKey,
    jwks: serde_json::Value,
}

impl std::fmt::Debug for DevIdp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DevIdp").field("issuer", &self.issuer).finish_non_exhaustive()
    }
}

/// Writes `contents` at `path` unless a file is there already, and answers what `path` holds
/// then. The whole file is written under a private name first and linked into place, so
/// replicas starting at once on one data directory agree on the first key written and never
/// read a half-written one.
fn publish_once(path: &Path, contents: &[u8]) -> anyhow::Result<String> {
    let mut suffix = [0u8; 8];
    rand::rng().fill_bytes(&mut suffix);
    let private = path.with_extension(format!("{}.partial", hex::encode(suffix)));
    let written = (|| {
        let mut file = OpenOptions::new().create_new(true).write(true).mode(0o600).open(&private)?;
        file.write_all(contents)?;
        file.sync_all()?;
        match std::fs::hard_link(&private, path) {
            Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => Err(e),
            _ => Ok(()),
        }
    })();
    let _ = std::fs::remove_file(&private);
    written.with_context(|| format!("cannot write {}", path.display()))?;
    std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))
}

impl DevIdp {
    /// Loads the signing key from the data dir, creating it on first use.
    pub fn load_or_create(data_dir: &Path, public_url: &str) -> anyhow::Result<DevIdp> {
        std::fs::create_dir_all(data_dir).with_context(|| format!("cannot create {}", data_dir.display()))?;
        let path = data_dir.join(KEY_FILE);
        let pem = match std::fs::read_to_string(&path) {
            Ok(pem) => pem,
            Err(_) => {
                let mut seed = [0u8; 32];
                rand::rng().fill_bytes(&mut seed);
                let pem =
                    SigningKey::from_bytes(&seed).to_pkcs8_pem(LineEnding::LF).map_err(|e| anyhow::anyhow!("{e}"))?.to_string();
                publish_once(&path, pem.as_bytes())?
            }
        };
        let fingerprint = hex::encode(Sha256::digest(pem.as_bytes()));
        let key = CoreEdDsaPrivateSigningKey::from_ed25519_pem(&pem, Some(JsonWebKeyId::new(fingerprint[..16].to_owned())))
            .map_err(|e| anyhow::anyhow!("unreadable development key {}: {e}", path.display()))?;
        let jwks = serde_json::to_value(CoreJsonWebKeySet::new(vec![key.as_verification_key()]))?;
        Ok(DevIdp {
            issuer: format!("{public_url}/dev-idp"),
            redirect_uri: format!("{public_url}/auth/callback"),
            client_secret: hex::encode(Sha256::digest(format!("gatehouse-dev-client:{pem}").as_bytes())),
            key,
            jwks,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Replicas starting at once on one data directory all load the same key, and none fails.
    #[test]
    fn replicas_starting_at_once_share_the_first_key() {
        for _ in 0..20 {
            let mut suffix = [0u8; 8];
            rand::rng().fill_bytes(&mut suffix);
            let dir = std::env::temp_dir().join(format!("gatehouse-dev-idp-{}", hex::encode(suffix)));
            let loaded: Vec<String> = std::thread::scope(|s| {
                let handles: Vec<_> = (0..8)
                    .map(|_| s.spawn(|| DevIdp::load_or_create(&dir, "http://127.0.0.1:1").map(|idp| idp.client_secret)))
                    .collect();
                handles.into_iter().map(|h| h.join().unwrap().unwrap()).collect()
            });
            assert!(loaded.windows(2).all(|w| w[0] == w[1]), "every replica has the same key");
            let left: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name()).collect();
            std::fs::remove_dir_all(&dir).unwrap();
            assert_eq!(left.len(), 1, "no partial file is left: {left:?}");
        }
    }
}
