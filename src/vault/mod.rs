//! The vault: AES-256-GCM envelopes under a key ring from the environment.
//!
//! - The key ring comes from `GATEHOUSE_VAULT_KEYS` (`kid:base64-of-32-bytes,…`); the first
//!   key seals, every key opens. Keys never enter the database and never print themselves.
//! - An envelope is text, `v1.<kid>.<nonce>.<ciphertext>` (nonce and ciphertext base64url):
//!   its format version, the key id that sealed it, a fresh 96-bit random nonce, and the
//!   ciphertext with its 128-bit tag.
//! - The associated data binds tenant, workspace, connector, owner and purpose, so an envelope
//!   copied onto another row does not open there.
//! - Anything that does not open — tampered, truncated, another key, another row's associated
//!   data, an unknown key id — is [`Unreadable`], never a panic and never other plaintext.

pub mod cli;
pub mod http;
pub mod slots;
mod store;

use std::{fmt, sync::Arc};

use aes_gcm::{
    Aes256Gcm, KeyInit, Nonce,
    aead::{Aead, Generate, Payload},
};
use base64::{
    Engine,
    engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD},
};
use zeroize::Zeroizing;

/// The envelope format this build writes (and the only one it reads).
pub const FORMAT: &str = "v1";
/// What connector credentials are sealed for (part of the associated data).
pub const PURPOSE_CONNECTOR: &str = "connector_credential";
/// A downstream OAuth grant's tokens.
pub const PURPOSE_OAUTH_GRANT: &str = "oauth_grant";
/// A pending OAuth flow's PKCE verifier.
pub const PURPOSE_OAUTH_FLOW: &str = "oauth_flow";
/// HKDF `info` of the key that signs connect links (never used for anything else).
const LINK_KEY_INFO: &[u8] = b"gatehouse connect-link hmac v1";
const NONCE_BYTES: usize = 12;
const TAG_BYTES: usize = 16;

/// An envelope that does not open under this key ring (typed `credential_unreadable`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the credential cannot be opened with this deployment's vault keys")]
pub struct Unreadable;

struct Key {
    kid: String,
    cipher: Aes256Gcm,
    /// HMAC-SHA256 key for signed links, derived from this key with HKDF-SHA256.
    link_key: Zeroizing<[u8; 32]>,
}

/// The key ring: the first key is active (seals); every key opens. Debug prints key ids only.
#[derive(Clone)]
pub struct KeyRing {
    keys: Arc<Vec<Key>>,
}

impl fmt::Debug for KeyRing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyRing").field("kids", &self.kids()).finish()
    }
}

/// Key ids: 1 to 32 characters of `A-Za-z0-9_-` (they appear in envelopes, between dots).
pub fn valid_kid(kid: &str) -> bool {
    (1..=32).contains(&kid.len()) && kid.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

impl KeyRing {
    /// Parses `kid:base64-of-32-bytes,…`. Errors name the entry by position and key id, never
    /// by its key material.
    pub fn parse(spec: &str) -> Result<KeyRing, String> {
        let mut keys: Vec<Key> = Vec::new();
        for (i, entry) in spec.split(',').map(str::trim).enumerate() {
            let n = i + 1;
            let Some((kid, material)) = entry.split_once(':') else {
                return Err(format!("entry {n} is not `kid:base64-of-32-bytes`"));
            };
            let kid = kid.trim();
            if !valid_kid(kid) {
                return Err(format!("entry {n}: a key id is 1 to 32 characters of A-Z, a-z, 0-9, '-' and '_'"));
            }
            if keys.iter().any(|k| k.kid == kid) {
                return Err(format!("entry {n}: key id `{kid}` appears twice"));
            }
            let material = material.trim();
            let bytes = Zeroizing::new(
                STANDARD
                    .decode(material)
                    .or_else(|_| URL_SAFE_NO_PAD.decode(material.trim_end_matches('=')))
                    .map_err(|_| format!("entry {n} (`{kid}`): the key is not base64"))?,
            );
            if bytes.len() != 32 {
                return Err(format!("entry {n} (`{kid}`): the key must be exactly 32 bytes (AES-256), base64-encoded"));
            }
            let cipher = Aes256Gcm::new_from_slice(&bytes).map_err(|_| format!("entry {n} (`{kid}`): unusable key"))?;
            let mut link_key = Zeroizing::new([0u8; 32]);
            hkdf::Hkdf::<sha2::Sha256>::new(None, &bytes)
                .expand(LINK_KEY_INFO, link_key.as_mut())
                .map_err(|_| format!("entry {n} (`{kid}`): unusable key"))?;
            keys.push(Key { kid: kid.to_owned(), cipher, link_key });
        }
        if keys.is_empty() {
            return Err("no keys".into());
        }
        Ok(KeyRing { keys: Arc::new(keys) })
    }

    /// The key id that seals.
    pub fn active(&self) -> &str {
        &self.keys[0].kid
    }

    pub fn kids(&self) -> Vec<&str> {
        self.keys.iter().map(|k| k.kid.as_str()).collect()
    }

    /// Signs `message` with the active key's link key: (key id, base64url HMAC-SHA256).
    pub fn sign_link(&self, message: &[u8]) -> (&str, String) {
        let key = &self.keys[0];
        use hmac::Mac;
        (&key.kid, URL_SAFE_NO_PAD.encode(link_mac(&key.link_key, message).finalize().into_bytes()))
    }

    /// Checks a link signature made by [`KeyRing::sign_link`] with any key of the ring
    /// (constant-time comparison).
    pub fn verify_link(&self, kid: &str, message: &[u8], signature: &str) -> bool {
        use hmac::Mac;
        let Some(key) = self.keys.iter().find(|k| k.kid == kid) else { return false };
        let Ok(tag) = URL_SAFE_NO_PAD.decode(signature) else { return false };
        link_mac(&key.link_key, message).verify_slice(&tag).is_ok()
    }

    /// Seals `plaintext` under the active key with a fresh random nonce.
    pub fn seal(&self, aad: &Aad<'_>, plaintext: &[u8]) -> String {
        let key = &self.keys[0];
        let nonce = Nonce::generate();
        let aad = aad.bytes();
        // AES-GCM encryption fails only for messages beyond 64 GiB, which nothing here sends.
        let ciphertext = key.cipher.encrypt(&nonce, Payload { msg: plaintext, aad: &aad }).unwrap_or_default();
        format!("{FORMAT}.{}.{}.{}", key.kid, URL_SAFE_NO_PAD.encode(nonce.as_slice()), URL_SAFE_NO_PAD.encode(ciphertext))
    }

    /// Opens an envelope sealed for exactly `aad` by any key of the ring.
    pub fn open(&self, aad: &Aad<'_>, envelope: &str) -> Result<Zeroizing<Vec<u8>>, Unreadable> {
        let parsed = Envelope::parse(envelope)?;
        let key = self.keys.iter().find(|k| k.kid == parsed.kid).ok_or(Unreadable)?;
        let nonce = Nonce::try_from(parsed.nonce.as_slice()).map_err(|_| Unreadable)?;
        let aad = aad.bytes();
        key.cipher.decrypt(&nonce, Payload { msg: &parsed.ciphertext, aad: &aad }).map(Zeroizing::new).map_err(|_| Unreadable)
    }
}

fn link_mac(key: &[u8; 32], message: &[u8]) -> hmac::Hmac<sha2::Sha256> {
    use hmac::Mac;
    // HMAC takes keys of any length, so this never fails.
    let mut mac = <hmac::Hmac<sha2::Sha256> as Mac>::new_from_slice(key).unwrap_or_else(|_| unreachable!());
    mac.update(message);
    mac
}

/// A parsed envelope (nothing checked but its shape).
#[derive(Debug, PartialEq, Eq)]
pub struct Envelope<'a> {
    pub kid: &'a str,
    pub nonce: Vec<u8>,
    pub ciphertext: Vec<u8>,
}

impl<'a> Envelope<'a> {
    pub fn parse(text: &'a str) -> Result<Envelope<'a>, Unreadable> {
        let mut parts = text.split('.');
        let (Some(FORMAT), Some(kid), Some(nonce), Some(ciphertext), None) =
            (parts.next(), parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(Unreadable);
        };
        if !valid_kid(kid) {
            return Err(Unreadable);
        }
        let nonce = URL_SAFE_NO_PAD.decode(nonce).map_err(|_| Unreadable)?;
        let ciphertext = URL_SAFE_NO_PAD.decode(ciphertext).map_err(|_| Unreadable)?;
        if nonce.len() != NONCE_BYTES || ciphertext.len() < TAG_BYTES {
            return Err(Unreadable);
        }
        Ok(Envelope { kid, nonce, ciphertext })
    }

    /// The key id of an envelope, if it is well formed.
    pub fn kid_of(text: &str) -> Option<&str> {
        Envelope::parse(text).ok().map(|e| e.kid)
    }
}

/// Whose credential: the workspace's, one member's, or (for an OAuth connector with a static
/// confidential client) the client's own secret, which no caller ever uses as a credential.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Owner {
    Shared,
    Member(uuid::Uuid),
    OauthClient,
}

impl Owner {
    /// As stored and bound into associated data: `shared`, `member:<uuid>` or `oauth_client`.
    pub fn as_text(&self) -> String {
        match self {
            Owner::Shared => "shared".into(),
            Owner::Member(id) => format!("member:{id}"),
            Owner::OauthClient => "oauth_client".into(),
        }
    }

    pub fn member_id(&self) -> Option<uuid::Uuid> {
        match self {
            Owner::Shared | Owner::OauthClient => None,
            Owner::Member(id) => Some(*id),
        }
    }
}

/// What an envelope is bound to. Each part is length-prefixed, so no two bindings share bytes.
#[derive(Clone, Copy, Debug)]
pub struct Aad<'a> {
    pub tenant: uuid::Uuid,
    pub workspace: uuid::Uuid,
    pub connector: &'a str,
    pub owner: Owner,
    pub purpose: &'a str,
}

impl Aad<'_> {
    pub fn bytes(&self) -> Vec<u8> {
        let owner = self.owner.as_text();
        let (tenant, workspace) = (self.tenant.to_string(), self.workspace.to_string());
        let parts: [&[u8]; 6] = [
            b"gatehouse-vault",
            tenant.as_bytes(),
            workspace.as_bytes(),
            self.connector.as_bytes(),
            owner.as_bytes(),
            self.purpose.as_bytes(),
        ];
        let mut out = Vec::with_capacity(128);
        out.extend_from_slice(FORMAT.as_bytes());
        for part in parts {
            out.extend_from_slice(&(part.len() as u32).to_be_bytes());
            out.extend_from_slice(part);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const K1: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";
    const K2: &str = "HxcaGxwdHh8QERITFBUWFwgJCgsMDQ4PAAECAwQFBgc=";

    fn ring(spec: &str) -> KeyRing {
        KeyRing::parse(spec).unwrap()
    }

    fn aad(connector: &str, owner: Owner) -> Aad<'_> {
        Aad { tenant: uuid::Uuid::nil(), workspace: uuid::Uuid::max(), connector, owner, purpose: PURPOSE_CONNECTOR }
    }

    #[test]
    fn key_rings_parse_and_never_echo_key_material() {
        let r = ring(&format!("new:{K2}, old:{K1}"));
        assert_eq!(r.kids(), ["new", "old"]);
        assert_eq!(r.active(), "new");
        assert!(!format!("{r:?}").contains(K1) && !format!("{r:?}").contains(K2));
        for bad in [
            "nokid".to_owned(),
            format!("a:{K1},a:{K2}"),
            "a:not base64!".to_owned(),
            "a:AAAA".to_owned(),
            format!("bad kid:{K1}"),
            format!("a:{K1},"),
        ] {
            let e = KeyRing::parse(&bad).unwrap_err();
            assert!(!e.contains(K1) && !e.contains(K2) && !e.contains("AAAA"), "{e}");
        }
        // URL-safe base64 is accepted too.
        let urlsafe = URL_SAFE_NO_PAD.encode(STANDARD.decode(K2).unwrap());
        assert!(KeyRing::parse(&format!("u:{urlsafe}")).is_ok());
    }

    #[test]
    fn seal_and_open_bind_every_part_of_the_associated_data() {
        let r = ring(&format!("k1:{K1}"));
        let sealed = r.seal(&aad("gh", Owner::Shared), b"{\"token\":\"s3cret\"}");
        assert!(sealed.starts_with("v1.k1."));
        assert_eq!(&*r.open(&aad("gh", Owner::Shared), &sealed).unwrap(), b"{\"token\":\"s3cret\"}");
        assert_ne!(sealed, r.seal(&aad("gh", Owner::Shared), b"{\"token\":\"s3cret\"}"), "a fresh nonce per seal");
        let member = Owner::Member(uuid::Uuid::nil());
        assert_eq!(r.open(&aad("gl", Owner::Shared), &sealed), Err(Unreadable), "another connector");
        assert_eq!(r.open(&aad("gh", member), &sealed), Err(Unreadable), "another owner");
        let mut other = aad("gh", Owner::Shared);
        other.tenant = uuid::Uuid::max();
        assert_eq!(r.open(&other, &sealed), Err(Unreadable), "another tenant");
        let mut other = aad("gh", Owner::Shared);
        other.workspace = uuid::Uuid::nil();
        assert_eq!(r.open(&other, &sealed), Err(Unreadable), "another workspace");
        let mut other = aad("gh", Owner::Shared);
        other.purpose = "oauth_refresh";
        assert_eq!(r.open(&other, &sealed), Err(Unreadable), "another purpose");
    }

    #[test]
    fn link_signatures_verify_under_their_key_only() {
        let r = ring(&format!("k1:{K1}"));
        let (kid, sig) = r.sign_link(b"tenant|workspace|connector");
        assert_eq!(kid, "k1");
        assert!(r.verify_link("k1", b"tenant|workspace|connector", &sig));
        assert!(!r.verify_link("k1", b"tenant|workspace|other", &sig));
        assert!(!r.verify_link("k2", b"tenant|workspace|connector", &sig));
        assert!(!r.verify_link("k1", b"tenant|workspace|connector", "not base64!"));
        assert!(!ring(&format!("k1:{K2}")).verify_link("k1", b"tenant|workspace|connector", &sig), "another key");
        let rotated = ring(&format!("k2:{K2},k1:{K1}"));
        assert!(rotated.verify_link("k1", b"tenant|workspace|connector", &sig), "an older key still verifies");
    }

    #[test]
    fn wrong_keys_and_unknown_key_ids_do_not_open() {
        let sealed = ring(&format!("k1:{K1}")).seal(&aad("gh", Owner::Shared), b"x");
        assert_eq!(ring(&format!("k1:{K2}")).open(&aad("gh", Owner::Shared), &sealed), Err(Unreadable), "same id, other key");
        assert_eq!(ring(&format!("k2:{K2}")).open(&aad("gh", Owner::Shared), &sealed), Err(Unreadable), "unknown id");
        let both = ring(&format!("k2:{K2},k1:{K1}"));
        assert_eq!(&*both.open(&aad("gh", Owner::Shared), &sealed).unwrap(), b"x", "an older key still opens");
        assert!(both.seal(&aad("gh", Owner::Shared), b"x").starts_with("v1.k2."), "the first key seals");
    }

    #[test]
    fn every_single_tamper_is_refused() {
        let r = ring(&format!("k1:{K1}"));
        let a = aad("gh", Owner::Shared);
        let sealed = r.seal(&a, b"the plaintext");
        let parsed = Envelope::parse(&sealed).unwrap();
        for i in 0..parsed.ciphertext.len() {
            let mut ct = parsed.ciphertext.clone();
            ct[i] ^= 0x01;
            let forged = format!("v1.k1.{}.{}", URL_SAFE_NO_PAD.encode(&parsed.nonce), URL_SAFE_NO_PAD.encode(&ct));
            assert_eq!(r.open(&a, &forged), Err(Unreadable));
        }
        let mut nonce = parsed.nonce.clone();
        nonce[0] ^= 0x80;
        let forged = format!("v1.k1.{}.{}", URL_SAFE_NO_PAD.encode(&nonce), URL_SAFE_NO_PAD.encode(&parsed.ciphertext));
        assert_eq!(r.open(&a, &forged), Err(Unreadable));
        for bad in
            ["", "v1", "v2.k1.AAAA.AAAA", &sealed.replacen("v1.", "v0.", 1), &format!("{sealed}."), &sealed[..sealed.len() - 4]]
        {
            assert_eq!(r.open(&a, bad), Err(Unreadable), "{bad}");
        }
    }

    proptest! {
        #[test]
        fn arbitrary_text_never_panics_and_never_opens(text in "\\PC{0,120}") {
            let r = ring(&format!("k1:{K1}"));
            prop_assert_eq!(r.open(&aad("gh", Owner::Shared), &text), Err(Unreadable));
        }

        #[test]
        fn random_tampering_never_yields_plaintext(
            plaintext in proptest::collection::vec(any::<u8>(), 0..64),
            at in any::<prop::sample::Index>(),
            flip in 1u8..=255,
        ) {
            let r = ring(&format!("k1:{K1}"));
            let a = aad("gh", Owner::Shared);
            let sealed = r.seal(&a, &plaintext);
            prop_assert_eq!(&*r.open(&a, &sealed).unwrap(), plaintext.as_slice());
            let mut bytes = sealed.clone().into_bytes();
            let i = at.index(bytes.len());
            bytes[i] ^= flip;
            if let Ok(text) = String::from_utf8(bytes) {
                // Base64 may decode a changed last character to the same bytes; anything
                // that opens must then be the very same plaintext, never another.
                match r.open(&a, &text) {
                    Ok(opened) => prop_assert_eq!(&*opened, plaintext.as_slice()),
                    Err(e) => prop_assert_eq!(e, Unreadable),
                }
            }
        }
    }
}
