//! A misbehaving OpenID provider on loopback: real EdDSA signatures from real keys, with one
//! chosen defect in the ID token, so every refusal of the relying party is exercised against
//! bytes it has to verify.
#![allow(dead_code)]

use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
};

use axum::{
    Form, Json, Router,
    extract::{Query, State},
    response::{IntoResponse, Redirect, Response},
    routing::{get, post},
};
use chrono::{Duration, Utc};
use ed25519_dalek::{SigningKey, pkcs8::EncodePrivateKey, pkcs8::spki::der::pem::LineEnding};
use openidconnect::{
    Audience, EmptyAdditionalClaims, EndUserEmail, IssuerUrl, JsonWebKeyId, Nonce, PrivateSigningKey, StandardClaims,
    SubjectIdentifier,
    core::{CoreEdDsaPrivateSigningKey, CoreIdToken, CoreIdTokenClaims, CoreJsonWebKeySet, CoreJwsSigningAlgorithm},
};
use serde_json::json;

pub const CLIENT_ID: &str = "rogue-client";
pub const CLIENT_SECRET: &str = "rogue-secret";

/// What is wrong with the next ID token.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Defect {
    None,
    WrongNonce,
    Expired,
    FutureIssued,
    WrongAudience,
    WrongIssuer,
    /// Signed by a key the provider never publishes.
    UnknownKey,
    /// Signed by a new key that the provider publishes from now on (rotation).
    RotatedKey,
}

struct Inner {
    issuer: String,
    defect: Mutex<Defect>,
    published_b: AtomicBool,
    key_a: CoreEdDsaPrivateSigningKey,
    key_b: CoreEdDsaPrivateSigningKey,
    key_unknown: CoreEdDsaPrivateSigningKey,
    nonces: Mutex<HashMap<String, String>>,
}

#[derive(Clone)]
pub struct Rogue(Arc<Inner>);

fn key(kid: &str) -> CoreEdDsaPrivateSigningKey {
    let seed: [u8; 32] = rand::random();
    let pem = SigningKey::from_bytes(&seed).to_pkcs8_pem(LineEnding::LF).unwrap();
    CoreEdDsaPrivateSigningKey::from_ed25519_pem(&pem, Some(JsonWebKeyId::new(kid.into()))).unwrap()
}

impl Rogue {
    /// Starts the provider on a free loopback port.
    pub async fn start() -> Rogue {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let issuer = format!("http://{}", listener.local_addr().unwrap());
        let rogue = Rogue(Arc::new(Inner {
            issuer,
            defect: Mutex::new(Defect::None),
            published_b: AtomicBool::new(false),
            key_a: key("key-a"),
            key_b: key("key-b"),
            key_unknown: key("key-a"),
            nonces: Mutex::new(HashMap::new()),
        }));
        let app = Router::new()
            .route("/.well-known/openid-configuration", get(discovery))
            .route("/jwks", get(jwks))
            .route("/authorize", get(authorize))
            .route("/token", post(token))
            .with_state(rogue.clone());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        rogue
    }

    pub fn issuer(&self) -> &str {
        &self.0.issuer
    }

    pub fn set(&self, defect: Defect) {
        if defect == Defect::RotatedKey {
            self.0.published_b.store(true, Ordering::SeqCst);
        }
        *self.0.defect.lock().unwrap() = defect;
    }
}

async fn discovery(State(r): State<Rogue>) -> Json<serde_json::Value> {
    let i = &r.0.issuer;
    Json(json!({
        "issuer": i,
        "authorization_endpoint": format!("{i}/authorize"),
        "token_endpoint": format!("{i}/token"),
        "jwks_uri": format!("{i}/jwks"),
        "response_types_supported": ["code"],
        "subject_types_supported": ["public"],
        "id_token_signing_alg_values_supported": ["EdDSA"],
    }))
}

async fn jwks(State(r): State<Rogue>) -> Json<serde_json::Value> {
    let mut keys = vec![r.0.key_a.as_verification_key()];
    if r.0.published_b.load(Ordering::SeqCst) {
        keys.push(r.0.key_b.as_verification_key());
    }
    Json(serde_json::to_value(CoreJsonWebKeySet::new(keys)).unwrap())
}

/// Signs the person straight in: redirects back with a code at once.
async fn authorize(State(r): State<Rogue>, Query(q): Query<HashMap<String, String>>) -> Response {
    let code: String = format!("code-{}", rand::random::<u64>());
    r.0.nonces.lock().unwrap().insert(code.clone(), q.get("nonce").cloned().unwrap_or_default());
    let mut target = url::Url::parse(&q["redirect_uri"]).unwrap();
    target.query_pairs_mut().append_pair("code", &code).append_pair("state", q.get("state").map_or("", |s| s));
    Redirect::to(target.as_str()).into_response()
}

async fn token(State(r): State<Rogue>, Form(f): Form<HashMap<String, String>>) -> Response {
    let Some(nonce) = r.0.nonces.lock().unwrap().remove(&f["code"]) else {
        return (axum::http::StatusCode::BAD_REQUEST, Json(json!({ "error": "invalid_grant" }))).into_response();
    };
    let defect = *r.0.defect.lock().unwrap();
    let now = Utc::now();
    let (iat, exp) = match defect {
        Defect::Expired => (now - Duration::hours(2), now - Duration::hours(1)),
        Defect::FutureIssued => (now + Duration::hours(1), now + Duration::hours(2)),
        _ => (now, now + Duration::minutes(5)),
    };
    let issuer = if defect == Defect::WrongIssuer { "http://127.0.0.1:1/other".to_owned() } else { r.0.issuer.clone() };
    let audience = if defect == Defect::WrongAudience { "someone-else" } else { CLIENT_ID };
    let nonce = if defect == Defect::WrongNonce { "not-the-nonce".to_owned() } else { nonce };
    let claims = CoreIdTokenClaims::new(
        IssuerUrl::new(issuer).unwrap(),
        vec![Audience::new(audience.into())],
        exp,
        iat,
        StandardClaims::new(SubjectIdentifier::new("rogue-subject".into()))
            .set_email(Some(EndUserEmail::new("rogue@example.test".into())))
            .set_email_verified(Some(true)),
        EmptyAdditionalClaims {},
    )
    .set_nonce(Some(Nonce::new(nonce)));
    let key = match defect {
        Defect::UnknownKey => &r.0.key_unknown,
        Defect::RotatedKey => &r.0.key_b,
        _ => &r.0.key_a,
    };
    let id_token = CoreIdToken::new(claims, key, CoreJwsSigningAlgorithm::EdDsa, None, None).unwrap();
    Json(json!({ "access_token": "at", "token_type": "Bearer", "expires_in": 300, "id_token": id_token.to_string() }))
        .into_response()
}
