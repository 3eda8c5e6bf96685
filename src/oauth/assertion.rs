//! `private_key_jwt` (RFC 7523 §2.2; OpenID Connect Core §9): a client that holds a private key
//! authenticates at the token endpoint with a short-lived JWT it signs, instead of a secret.
//! The key is the connector's `oauth_client` credential (field `private_key`, a PKCS#8 PEM,
//! sealed in the vault); its type picks the algorithm: P-256 → ES256, RSA → RS256, Ed25519 →
//! EdDSA.

use base64::Engine;
use ring::{
    rand::SystemRandom,
    signature::{self, EcdsaKeyPair, Ed25519KeyPair, RsaKeyPair},
};
use serde_json::json;
use zeroize::Zeroizing;

use crate::error::{Error, Result};

/// The `client_assertion_type` of a JWT client assertion.
pub const ASSERTION_TYPE: &str = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer";
/// The name of the credential field that holds the key.
pub const KEY_FIELD: &str = "private_key";
/// How long an assertion is valid (it is made for one request).
const LIFETIME_SECS: i64 = 60;
/// The longest PEM accepted (an RSA 4096 key is about 3.3 KB).
const MAX_PEM_BYTES: usize = 4096;

/// A client's signing key.
enum Key {
    Es256(EcdsaKeyPair),
    Rs256(RsaKeyPair),
    EdDsa(Ed25519KeyPair),
}

impl Key {
    fn alg(&self) -> &'static str {
        match self {
            Key::Es256(_) => "ES256",
            Key::Rs256(_) => "RS256",
            Key::EdDsa(_) => "EdDSA",
        }
    }

    fn sign(&self, message: &[u8]) -> Result<Vec<u8>> {
        let rng = SystemRandom::new();
        let failed = |_| Error::Internal(anyhow::anyhow!("signing a client assertion failed"));
        Ok(match self {
            Key::Es256(key) => key.sign(&rng, message).map_err(failed)?.as_ref().to_vec(),
            Key::Rs256(key) => {
                let mut out = vec![0; key.public().modulus_len()];
                key.sign(&signature::RSA_PKCS1_SHA256, &rng, message, &mut out).map_err(failed)?;
                out
            }
            Key::EdDsa(key) => key.sign(message).as_ref().to_vec(),
        })
    }
}

fn invalid(message: &str) -> Error {
    Error::invalid("invalid_private_key", Some(KEY_FIELD), message)
}

/// The key a PEM holds: PKCS#8 (`BEGIN PRIVATE KEY`) of a P-256, RSA (2048 to 8192 bits) or
/// Ed25519 key, unencrypted.
fn parse(pem: &str) -> Result<Key> {
    if pem.len() > MAX_PEM_BYTES {
        return Err(invalid("a private key is at most 4096 bytes of PEM"));
    }
    if pem.contains("-----BEGIN EC PRIVATE KEY-----") || pem.contains("-----BEGIN RSA PRIVATE KEY-----") {
        return Err(invalid("the key must be PKCS#8 (`BEGIN PRIVATE KEY`): convert it with `openssl pkcs8 -topk8 -nocrypt`"));
    }
    let body = pem
        .trim()
        .strip_prefix("-----BEGIN PRIVATE KEY-----")
        .and_then(|rest| rest.strip_suffix("-----END PRIVATE KEY-----"))
        .ok_or_else(|| invalid("a private key is one unencrypted PKCS#8 PEM block (`BEGIN PRIVATE KEY`)"))?;
    let body: String = body.chars().filter(|c| !c.is_ascii_whitespace()).collect();
    let der = Zeroizing::new(
        base64::engine::general_purpose::STANDARD.decode(body).map_err(|_| invalid("the PEM block is not base64"))?,
    );
    let rng = SystemRandom::new();
    if let Ok(key) = EcdsaKeyPair::from_pkcs8(&signature::ECDSA_P256_SHA256_FIXED_SIGNING, &der, &rng) {
        return Ok(Key::Es256(key));
    }
    if let Ok(key) = RsaKeyPair::from_pkcs8(&der) {
        return Ok(Key::Rs256(key));
    }
    if let Ok(key) = Ed25519KeyPair::from_pkcs8_maybe_unchecked(&der) {
        return Ok(Key::EdDsa(key));
    }
    Err(invalid("the key is none of P-256 (ES256), RSA of 2048 to 8192 bits (RS256) or Ed25519 (EdDSA)"))
}

/// Checks a private key as a credential value: what [`assertion`] can sign with.
pub fn check(pem: &str) -> Result<()> {
    parse(pem).map(|_| ())
}

/// A client assertion for one token request: `iss` and `sub` are the client id, `aud` the
/// authorization server (its issuer, else its token endpoint), valid [`LIFETIME_SECS`], with a
/// fresh `jti`.
pub fn assertion(pem: &str, client_id: &str, audience: &str) -> Result<String> {
    let key = parse(pem)?;
    let now = chrono::Utc::now().timestamp();
    let header = json!({ "alg": key.alg(), "typ": "JWT" });
    let claims = json!({
        "iss": client_id,
        "sub": client_id,
        "aud": audience,
        "jti": uuid::Uuid::new_v4().to_string(),
        "iat": now,
        "exp": now + LIFETIME_SECS,
    });
    jws(&header, &claims, |input| key.sign(input))
}

/// A compact JWS (RFC 7515 §7.1) of `header` and `claims`, signed by `sign`.
pub fn jws<E>(
    header: &serde_json::Value,
    claims: &serde_json::Value,
    sign: impl FnOnce(&[u8]) -> std::result::Result<Vec<u8>, E>,
) -> std::result::Result<String, E> {
    let b64 = |bytes: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes);
    let signing_input = format!("{}.{}", b64(header.to_string().as_bytes()), b64(claims.to_string().as_bytes()));
    let signature = sign(signing_input.as_bytes())?;
    Ok(format!("{signing_input}.{}", b64(&signature)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use ring::signature::KeyPair;

    fn pem(der: &[u8]) -> String {
        let body = base64::engine::general_purpose::STANDARD.encode(der);
        let lines: Vec<&str> = body.as_bytes().chunks(64).map(|c| std::str::from_utf8(c).unwrap()).collect();
        format!("-----BEGIN PRIVATE KEY-----\n{}\n-----END PRIVATE KEY-----\n", lines.join("\n"))
    }

    fn decode(part: &str) -> Vec<u8> {
        base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(part).unwrap()
    }

    #[test]
    fn an_es256_assertion_verifies_with_the_public_key_and_names_the_client() {
        let rng = SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&signature::ECDSA_P256_SHA256_FIXED_SIGNING, &rng).unwrap();
        let key = EcdsaKeyPair::from_pkcs8(&signature::ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref(), &rng).unwrap();
        let pem = pem(pkcs8.as_ref());
        check(&pem).unwrap();
        let jwt = assertion(&pem, "client-1", "https://as.example").unwrap();
        let parts: Vec<&str> = jwt.split('.').collect();
        assert_eq!(parts.len(), 3);
        let public = signature::UnparsedPublicKey::new(&signature::ECDSA_P256_SHA256_FIXED, key.public_key().as_ref());
        public.verify(format!("{}.{}", parts[0], parts[1]).as_bytes(), &decode(parts[2])).unwrap();
        let header: serde_json::Value = serde_json::from_slice(&decode(parts[0])).unwrap();
        assert_eq!(header["alg"], "ES256");
        let claims: serde_json::Value = serde_json::from_slice(&decode(parts[1])).unwrap();
        assert_eq!((claims["iss"].as_str(), claims["sub"].as_str()), (Some("client-1"), Some("client-1")));
        assert_eq!(claims["aud"], "https://as.example");
        assert_eq!(claims["exp"].as_i64().unwrap() - claims["iat"].as_i64().unwrap(), LIFETIME_SECS);
        // A fresh jti each time: an assertion is never replayable as another.
        let again = assertion(&pem, "client-1", "https://as.example").unwrap();
        let claims_again: serde_json::Value = serde_json::from_slice(&decode(again.split('.').nth(1).unwrap())).unwrap();
        assert_ne!(claims["jti"], claims_again["jti"]);
    }

    #[test]
    fn an_ed25519_key_signs_eddsa() {
        let pkcs8 = Ed25519KeyPair::generate_pkcs8(&SystemRandom::new()).unwrap();
        let key = Ed25519KeyPair::from_pkcs8(pkcs8.as_ref()).unwrap();
        let jwt = assertion(&pem(pkcs8.as_ref()), "c", "https://as.example/token").unwrap();
        let parts: Vec<&str> = jwt.split('.').collect();
        let public = signature::UnparsedPublicKey::new(&signature::ED25519, key.public_key().as_ref());
        public.verify(format!("{}.{}", parts[0], parts[1]).as_bytes(), &decode(parts[2])).unwrap();
    }

    #[test]
    fn keys_other_than_unencrypted_pkcs8_are_refused_with_a_stable_code() {
        for bad in [
            "",
            "not a key",
            "-----BEGIN EC PRIVATE KEY-----\nMHcCAQEE\n-----END EC PRIVATE KEY-----",
            "-----BEGIN RSA PRIVATE KEY-----\nMIIE\n-----END RSA PRIVATE KEY-----",
            "-----BEGIN ENCRYPTED PRIVATE KEY-----\nMIIE\n-----END ENCRYPTED PRIVATE KEY-----",
            "-----BEGIN PRIVATE KEY-----\n!!!\n-----END PRIVATE KEY-----",
            "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----",
        ] {
            assert_eq!(check(bad).unwrap_err().code(), "invalid_private_key", "{bad:?}");
        }
        let huge = format!("-----BEGIN PRIVATE KEY-----\n{}\n-----END PRIVATE KEY-----", "A".repeat(5000));
        assert_eq!(check(&huge).unwrap_err().code(), "invalid_private_key");
    }

    proptest! {
        /// Whatever is offered as a key, the parser answers a typed refusal or a key, and never
        /// panics.
        #[test]
        fn any_text_is_a_key_or_a_typed_refusal(body in "[A-Za-z0-9+/=\\s]{0,600}", wrap in any::<bool>()) {
            let text = if wrap { format!("-----BEGIN PRIVATE KEY-----\n{body}\n-----END PRIVATE KEY-----") } else { body };
            if let Err(e) = check(&text) {
                prop_assert_eq!(e.code(), "invalid_private_key");
            }
        }
    }
}
