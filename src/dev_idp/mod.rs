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
                let mut file = OpenOptions::new().create_new(true).write(true).mode(0o600).open(&path)?;
                file.write_all(pem.as_bytes())?;
                pem
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
