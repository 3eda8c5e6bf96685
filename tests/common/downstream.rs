//! Downstream OAuth peers: a browser walk through the provider's login to Gatehouse's callback,
//! the provider's test counters, and a real MCP server (`server-everything`) behind a loopback
//! gate that publishes protected resource metadata (RFC 9728) and admits only tokens the
//! provider's introspection endpoint calls active for this resource (RFC 8707 audience).

use std::sync::{Arc, Mutex};

use reqwest::Method;
use serde_json::{Value, json};
use sqlx::{Connection, Executor};

use super::{PEER_CLIENT_ID, PEER_CLIENT_SECRET, TestDb, browser::Browser};

/// Every bearer token the downstream was shown.
pub type Seen = Arc<Mutex<Vec<String>>>;

/// Walks from `start` through the provider's login and consent (as `login`) and stops at the
/// redirect back to Gatehouse's callback, which it returns without following.
pub async fn walk_to_callback(b: &Browser, start: &str, login: &str) -> String {
    let mut method = Method::GET;
    let mut url = url::Url::parse(start).unwrap();
    let mut form: Vec<(String, String)> = Vec::new();
    for _ in 0..25 {
        let request = b.client.request(method.clone(), url.clone());
        let request = if method == Method::POST { request.form(&form) } else { request };
        let response = request.send().await.unwrap();
        let status = response.status();
        if status.is_redirection() {
            let location = response.headers()["location"].to_str().unwrap().to_owned();
            url = url.join(&location).unwrap();
            method = Method::GET;
            if url.as_str().starts_with(&format!("{}/oauth/callback", b.base)) {
                return url.to_string();
            }
            continue;
        }
        let body = response.text().await.unwrap();
        let (action, fields) = super::browser::first_form(&body).unwrap_or_else(|| panic!("no form at {url}: {status} {body}"));
        url = url.join(&action).unwrap();
        method = Method::POST;
        form = fields
            .into_iter()
            .map(|(k, v)| {
                let value = match k.as_str() {
                    "login" => login.to_owned(),
                    "password" => "any".to_owned(),
                    _ => v,
                };
                (k, value)
            })
            .collect();
    }
    panic!("the authorization walk did not reach the callback");
}

/// The provider's counters (`OIDC_TEST_STATS=1`).
pub async fn stats(issuer: &str) -> Value {
    super::http().get(format!("{issuer}/_stats")).send().await.unwrap().json().await.unwrap()
}

/// Runs `sql` as the schema owner in platform context.
pub async fn as_owner(t: &TestDb, sql: &str) {
    let mut owner = t.owner_conn().await;
    let mut tx = owner.begin().await.unwrap();
    tx.execute("SELECT set_config('gatehouse.platform', 'on', true)").await.unwrap();
    tx.execute(sqlx::AssertSqlSafe(sql.to_owned())).await.unwrap();
    tx.commit().await.unwrap();
}

/// One number from `sql` (run as the schema owner in platform context).
pub async fn count(t: &TestDb, sql: &str) -> i64 {
    let mut owner = t.owner_conn().await;
    let mut tx = owner.begin().await.unwrap();
    tx.execute("SELECT set_config('gatehouse.platform', 'on', true)").await.unwrap();
    let n: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(sql.to_owned())).fetch_one(&mut *tx).await.unwrap();
    n
}

/// Moves every grant's access-token expiry into the past (as the schema owner), as if an
/// hour had passed; the trigger bumps the tenant's epoch like any grant change.
pub async fn expire_access_tokens(t: &TestDb) {
    as_owner(t, "UPDATE oauth_grants SET access_expires_at = now() - interval '1 minute'").await;
}

/// Whether the provider calls `token` active, and its audience.
pub async fn introspect(issuer: &str, token: &str) -> Value {
    super::http()
        .post(format!("{issuer}/token/introspection"))
        .basic_auth(PEER_CLIENT_ID, Some(PEER_CLIENT_SECRET))
        .form(&[("token", token)])
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

/// How the gate publishes its protected resource metadata.
#[derive(Clone, Default)]
pub struct GateOptions {
    /// Serve the metadata at this path instead of the well-known one, and name it in the
    /// `WWW-Authenticate` header of every 401.
    pub challenge_path: Option<&'static str>,
    /// The `resource` the metadata names (default: the gate's own /mcp URL).
    pub resource: Option<String>,
}

/// The gate in front of `upstream` (an MCP server's base URL). Answers (its /mcp URL, tokens
/// shown).
pub async fn protected_mcp(issuer: &str, upstream: &str, options: GateOptions) -> (String, Seen) {
    use axum::{body::Body, extract::Request, http::StatusCode, response::IntoResponse};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let own = format!("{base}/mcp");
    let seen: Seen = Default::default();
    let metadata =
        json!({ "resource": options.resource.clone().unwrap_or_else(|| own.clone()), "authorization_servers": [issuer] });
    let path = options.challenge_path.unwrap_or("/.well-known/oauth-protected-resource/mcp");
    let challenge = options.challenge_path.map(|p| format!("Bearer realm=\"mcp\", resource_metadata=\"{base}{p}\""));
    let (log, issuer, upstream) = (seen.clone(), issuer.to_owned(), upstream.to_owned());
    let app = axum::Router::new().route(path, axum::routing::get(move || async move { axum::Json(metadata) })).fallback(
        move |request: Request| {
            let (log, issuer, upstream, own, challenge) =
                (log.clone(), issuer.clone(), upstream.clone(), own.clone(), challenge.clone());
            async move {
                let refuse = |why: &'static str| {
                    let mut r = (StatusCode::UNAUTHORIZED, why).into_response();
                    if let Some(c) = &challenge {
                        r.headers_mut().insert("www-authenticate", c.parse().unwrap());
                    }
                    r
                };
                let token = request
                    .headers()
                    .get("authorization")
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.strip_prefix("Bearer "))
                    .map(str::to_owned);
                let Some(token) = token else { return refuse("bearer token required") };
                log.lock().unwrap().push(token.clone());
                let claims = introspect(&issuer, &token).await;
                let audience = match &claims["aud"] {
                    Value::String(a) => vec![a.clone()],
                    Value::Array(a) => a.iter().filter_map(|v| v.as_str().map(str::to_owned)).collect(),
                    _ => vec![],
                };
                if claims["active"] != true || !audience.contains(&own) {
                    return refuse("the provider does not vouch for this token for this resource");
                }
                let (parts, body) = request.into_parts();
                let body = axum::body::to_bytes(body, 1 << 20).await.unwrap();
                let mut forward = super::http().request(parts.method, format!("{upstream}{}", parts.uri.path()));
                for name in ["content-type", "accept", "mcp-session-id", "mcp-protocol-version", "last-event-id"] {
                    if let Some(v) = parts.headers.get(name) {
                        forward = forward.header(name, v);
                    }
                }
                let answer = forward.body(body).send().await.unwrap();
                let mut response = axum::http::Response::builder().status(answer.status().as_u16());
                for name in ["content-type", "mcp-session-id"] {
                    if let Some(v) = answer.headers().get(name) {
                        response = response.header(name, v.as_bytes());
                    }
                }
                response.body(Body::from_stream(answer.bytes_stream())).unwrap().into_response()
            }
        },
    );
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("{base}/mcp"), seen)
}
