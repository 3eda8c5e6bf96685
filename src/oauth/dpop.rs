//! DPoP (RFC 9449; MCP's SEP-1932): a grant whose authorization server advertises
//! `dpop_signing_alg_values_supported` with ES256 gets its own P-256 key when it is made. The
//! key (PKCS#8, sealed with the grant's tokens by the vault) signs a fresh proof for every
//! request that uses the grant: the token requests (code exchange, refresh) and every HTTP
//! request to the downstream, which then carries `Authorization: DPoP <token>`. A server that
//! answers `use_dpop_nonce` with a `DPoP-Nonce` is asked once more with that nonce, and the
//! nonce is kept for the binding's later requests.

use std::sync::Mutex;

use axum::http::{HeaderMap, HeaderName, HeaderValue};
use base64::Engine;
use ring::{
    rand::SystemRandom,
    signature::{self, EcdsaKeyPair, KeyPair},
};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use zeroize::Zeroizing;

/// The only algorithm Gatehouse signs proofs with.
pub const ALG: &str = "ES256";
/// The request header that carries a proof.
pub const PROOF: HeaderName = HeaderName::from_static("dpop");
/// The response header that carries a server's nonce.
const NONCE: &str = "dpop-nonce";
/// The longest nonce kept (RFC 9449 gives none; a server's nonce is an opaque short string).
const MAX_NONCE: usize = 512;

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// A grant's proof key.
pub struct Key {
    pair: EcdsaKeyPair,
    pkcs8: Zeroizing<Vec<u8>>,
}

impl Key {
    /// A new random P-256 key.
    pub fn generate() -> Option<Key> {
        let rng = SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&signature::ECDSA_P256_SHA256_FIXED_SIGNING, &rng).ok()?;
        Key::from_pkcs8(pkcs8.as_ref())
    }

    fn from_pkcs8(der: &[u8]) -> Option<Key> {
        let pair = EcdsaKeyPair::from_pkcs8(&signature::ECDSA_P256_SHA256_FIXED_SIGNING, der, &SystemRandom::new()).ok()?;
        Some(Key { pair, pkcs8: Zeroizing::new(der.to_vec()) })
    }

    /// The key as stored with the grant's tokens (base64url PKCS#8; sealed with them).
    pub fn stored(&self) -> String {
        b64(&self.pkcs8)
    }

    /// The key a grant stored, if it is one.
    pub fn from_stored(text: &str) -> Option<Key> {
        let der = Zeroizing::new(base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(text).ok()?);
        Key::from_pkcs8(&der)
    }

    /// The public key as a JWK (RFC 7518 §6.2: the uncompressed point's coordinates).
    fn jwk(&self) -> Value {
        let point = self.pair.public_key().as_ref();
        json!({ "kty": "EC", "crv": "P-256", "x": b64(&point[1..33]), "y": b64(&point[33..65]) })
    }

    /// A proof for one request (RFC 9449 §4.2): `htu` without query or fragment, `ath` the
    /// access token's SHA-256 where one is presented, the server's nonce where it gave one.
    pub fn proof(&self, method: &str, url: &reqwest::Url, access_token: Option<&str>, nonce: Option<&str>) -> Option<String> {
        let mut htu = url.clone();
        htu.set_query(None);
        htu.set_fragment(None);
        let header = json!({ "typ": "dpop+jwt", "alg": ALG, "jwk": self.jwk() });
        let mut claims = json!({
            "jti": uuid::Uuid::new_v4().to_string(),
            "htm": method,
            "htu": htu.as_str(),
            "iat": chrono::Utc::now().timestamp(),
        });
        if let Some(token) = access_token {
            claims["ath"] = Value::String(b64(&Sha256::digest(token.as_bytes())));
        }
        if let Some(nonce) = nonce {
            claims["nonce"] = Value::String(nonce.to_owned());
        }
        super::assertion::jws(&header, &claims, |input| self.pair.sign(&SystemRandom::new(), input).map(|s| s.as_ref().to_vec()))
            .ok()
    }
}

/// Whether an authorization server's metadata offers DPoP with an algorithm Gatehouse signs.
pub fn offered(algs: Option<&[String]>) -> bool {
    algs.is_some_and(|a| a.iter().any(|a| a == ALG))
}

/// The nonce a response asks for (`DPoP-Nonce`), if it is a short visible-ASCII string.
fn nonce_of(headers: &HeaderMap) -> Option<String> {
    let v = headers.get(NONCE)?.to_str().ok()?;
    (!v.is_empty() && v.len() <= MAX_NONCE && v.bytes().all(|b| b.is_ascii_graphic())).then(|| v.to_owned())
}

/// A key and the nonce its server last gave: what signs a sequence of requests to one server.
pub struct Signer {
    key: Key,
    nonce: Mutex<Option<String>>,
}

impl Signer {
    pub fn new(key: Key) -> Signer {
        Signer { key, nonce: Mutex::new(None) }
    }

    pub fn key(&self) -> &Key {
        &self.key
    }

    /// Sets the `DPoP` header of a request to a fresh proof.
    pub fn stamp(&self, headers: &mut HeaderMap, method: &str, url: &reqwest::Url, access_token: Option<&str>) {
        let nonce = self.nonce.lock().unwrap_or_else(|p| p.into_inner()).clone();
        match self.key.proof(method, url, access_token, nonce.as_deref()).and_then(|p| HeaderValue::from_str(&p).ok()) {
            Some(proof) => {
                headers.insert(PROOF, proof);
            }
            None => {
                headers.remove(PROOF);
            }
        }
    }

    /// Keeps the nonce a response gives; true when the response is a `use_dpop_nonce` refusal
    /// (an authorization server's 400, a resource server's 401) with a nonce other than the one
    /// just sent: the request is worth sending once more.
    pub fn learn(&self, status: u16, headers: &HeaderMap, body_error: Option<&str>) -> bool {
        let Some(nonce) = nonce_of(headers) else { return false };
        let mut kept = self.nonce.lock().unwrap_or_else(|p| p.into_inner());
        let fresh = kept.as_deref() != Some(nonce.as_str());
        *kept = Some(nonce);
        let asked = match status {
            400 => body_error == Some("use_dpop_nonce"),
            401 => headers
                .get_all(axum::http::header::WWW_AUTHENTICATE)
                .iter()
                .filter_map(|v| v.to_str().ok())
                .any(|v| v.contains("use_dpop_nonce")),
            _ => false,
        };
        asked && fresh
    }
}

/// A grant's binding as its credential carries it: the signer and the access token the proofs
/// hash (`ath`).
pub struct Binding {
    signer: Signer,
    access_token: Zeroizing<String>,
}

impl std::fmt::Debug for Binding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Binding").finish_non_exhaustive()
    }
}

impl Binding {
    pub fn new(key: Key, access_token: &str) -> Binding {
        Binding { signer: Signer::new(key), access_token: Zeroizing::new(access_token.to_owned()) }
    }

    /// Sets the `DPoP` header of a request to the downstream.
    pub fn stamp(&self, headers: &mut HeaderMap, method: &str, url: &reqwest::Url) {
        self.signer.stamp(headers, method, url, Some(&self.access_token));
    }

    /// See [`Signer::learn`]: true when the downstream asked for a nonce it now has.
    pub fn learn(&self, status: u16, headers: &HeaderMap) -> bool {
        self.signer.learn(status, headers, None)
    }
}

/// The signer of a grant's token requests: its stored key, else a new one where the server
/// offers DPoP (`offered`); None: the requests carry no proof.
pub fn signer(stored: Option<&str>, offered: bool) -> anyhow::Result<Option<Signer>> {
    match stored.and_then(Key::from_stored) {
        Some(key) => Ok(Some(Signer::new(key))),
        None if offered => Ok(Some(Signer::new(Key::generate().ok_or_else(|| anyhow::anyhow!("no DPoP key could be made"))?))),
        None => Ok(None),
    }
}

/// The OAuth HTTP client with a proof on every token request where there is a signer, asked
/// once more with the server's nonce when it answers `use_dpop_nonce` (RFC 9449 §8).
pub struct Http<'a> {
    pub inner: &'a crate::oidc::Http,
    pub signer: Option<&'a Signer>,
}

impl<'c> openidconnect::AsyncHttpClient<'c> for Http<'_> {
    type Error = reqwest::Error;
    type Future = futures::future::BoxFuture<'c, std::result::Result<openidconnect::HttpResponse, reqwest::Error>>;

    fn call(&'c self, request: openidconnect::HttpRequest) -> Self::Future {
        let Some(signer) = self.signer else { return self.inner.call(request) };
        Box::pin(async move {
            let url = reqwest::Url::parse(&request.uri().to_string()).ok();
            let (parts, body) = request.into_parts();
            let mut asked_again = false;
            loop {
                let mut request = openidconnect::HttpRequest::new(body.clone());
                *request.method_mut() = parts.method.clone();
                *request.uri_mut() = parts.uri.clone();
                *request.headers_mut() = parts.headers.clone();
                if let Some(url) = &url {
                    signer.stamp(request.headers_mut(), parts.method.as_str(), url, None);
                }
                let response = self.inner.call(request).await?;
                let error = serde_json::from_slice::<Value>(response.body()).ok();
                let error = error.as_ref().and_then(|e| e["error"].as_str());
                if !asked_again && signer.learn(response.status().as_u16(), response.headers(), error) {
                    asked_again = true;
                    continue;
                }
                return Ok(response);
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn part(jwt: &str, n: usize) -> Value {
        let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(jwt.split('.').nth(n).unwrap()).unwrap();
        serde_json::from_slice(&bytes).unwrap()
    }

    #[test]
    fn a_proof_verifies_with_its_jwk_and_binds_method_url_token_and_nonce() {
        let key = Key::generate().unwrap();
        let url = reqwest::Url::parse("https://mcp.example/mcp?x=1#f").unwrap();
        let proof = key.proof("POST", &url, Some("tok"), Some("n-1")).unwrap();
        let (header, claims) = (part(&proof, 0), part(&proof, 1));
        assert_eq!((header["typ"].as_str(), header["alg"].as_str()), (Some("dpop+jwt"), Some("ES256")));
        assert!(header["jwk"].get("d").is_none(), "the JWK carries no private part");
        assert_eq!(claims["htu"], "https://mcp.example/mcp");
        assert_eq!(claims["htm"], "POST");
        assert_eq!(claims["nonce"], "n-1");
        assert_eq!(claims["ath"], b64(&Sha256::digest(b"tok")));
        let x = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(header["jwk"]["x"].as_str().unwrap()).unwrap();
        let y = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(header["jwk"]["y"].as_str().unwrap()).unwrap();
        let point = [&[4u8][..], &x, &y].concat();
        let public = signature::UnparsedPublicKey::new(&signature::ECDSA_P256_SHA256_FIXED, point);
        let (input, sig) = proof.rsplit_once('.').unwrap();
        public.verify(input.as_bytes(), &base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(sig).unwrap()).unwrap();
        // Fresh per request.
        let again = key.proof("POST", &url, Some("tok"), Some("n-1")).unwrap();
        assert_ne!(part(&again, 1)["jti"], claims["jti"]);
        // A token request's proof hashes no token.
        assert!(part(&key.proof("POST", &url, None, None).unwrap(), 1).get("ath").is_none());
    }

    #[test]
    fn a_stored_key_is_the_same_key_and_garbage_is_none() {
        let key = Key::generate().unwrap();
        let back = Key::from_stored(&key.stored()).unwrap();
        assert_eq!(back.jwk(), key.jwk());
        for bad in ["", "!!", "AAAA", &b64(b"not a key")] {
            assert!(Key::from_stored(bad).is_none(), "{bad:?}");
        }
    }

    #[test]
    fn a_nonce_challenge_is_followed_once_per_new_nonce() {
        let signer = Signer::new(Key::generate().unwrap());
        let mut h = HeaderMap::new();
        h.insert("dpop-nonce", HeaderValue::from_static("abc"));
        h.insert("www-authenticate", HeaderValue::from_static(r#"DPoP error="use_dpop_nonce""#));
        assert!(signer.learn(401, &h, None));
        // The same nonce again: the retry already carried it, so no loop.
        assert!(!signer.learn(401, &h, None));
        let mut as_h = HeaderMap::new();
        as_h.insert("dpop-nonce", HeaderValue::from_static("def"));
        assert!(signer.learn(400, &as_h, Some("use_dpop_nonce")));
        as_h.insert("dpop-nonce", HeaderValue::from_static("ghi"));
        assert!(!signer.learn(400, &as_h, Some("invalid_grant")), "another error is not a nonce challenge");
        // The nonce is kept and sent.
        let mut out = HeaderMap::new();
        signer.stamp(&mut out, "POST", &reqwest::Url::parse("https://as.example/token").unwrap(), None);
        assert_eq!(part(out[PROOF].to_str().unwrap(), 1)["nonce"], "ghi");
        let mut bad = HeaderMap::new();
        bad.insert("dpop-nonce", HeaderValue::from_static(""));
        assert!(!signer.learn(401, &bad, None));
    }
}
