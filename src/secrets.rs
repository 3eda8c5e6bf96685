//! Random secrets and their digests. Every secret Gatehouse issues carries 256 random bits,
//! so a SHA-256 digest is the right thing to store (a slow password hash buys nothing).

use base64::{Engine, engine::general_purpose::URL_SAFE_NO_PAD};
use rand::RngCore;
use sha2::{Digest, Sha256};

/// `bytes` random bytes, base64url without padding.
pub fn random_b64(bytes: usize) -> String {
    let mut buf = vec![0u8; bytes];
    rand::rng().fill_bytes(&mut buf);
    URL_SAFE_NO_PAD.encode(buf)
}

/// SHA-256 of a secret's exact text: what the database stores and looks up.
pub fn digest(secret: &str) -> Vec<u8> {
    Sha256::digest(secret.as_bytes()).to_vec()
}

/// base64url(SHA-256(text)): the PKCE S256 transform.
pub fn s256(text: &str) -> String {
    URL_SAFE_NO_PAD.encode(Sha256::digest(text.as_bytes()))
}

/// True when `s` is exactly `prefix` followed by `len` base64url characters.
pub fn well_formed(s: &str, prefix: &str, len: usize) -> bool {
    s.strip_prefix(prefix)
        .is_some_and(|rest| rest.len() == len && rest.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'))
}

/// Checks a client secret someone else issued (an OAuth client's, an OpenID connection's): 1
/// to 4096 bytes without control characters.
pub fn check_client_secret(value: &str) -> crate::error::Result<()> {
    if value.is_empty() || value.len() > 4096 || value.chars().any(char::is_control) {
        return Err(crate::error::Error::invalid(
            "invalid_client_secret",
            Some("client_secret"),
            "a client secret is 1 to 4096 bytes without control characters",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn shapes() {
        let t = format!("gth_{}", random_b64(32));
        assert_eq!(t.len(), 47);
        assert!(well_formed(&t, "gth_", 43));
        assert!(!well_formed(&t[..46], "gth_", 43));
        assert!(!well_formed("gth_!!!", "gth_", 3));
        // Computed independently with Python's hashlib and base64.urlsafe_b64encode.
        assert_eq!(s256("dBjftJeZ4CVP-mJ0z1ua3dk0MK0Pv2xYbQ3khUKQa7c"), "T9oWNOoAbO1tAXY6z5OCcox4RyHmYfTHPKfBxEmpQ3s");
    }

    proptest! {
        #[test]
        fn well_formed_never_panics(s in "\\PC{0,80}") {
            let _ = well_formed(&s, "gth_", 43);
        }
    }
}
