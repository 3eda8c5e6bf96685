//! Downstream OAuth peers: a browser walk through the provider's login to Gatehouse's callback,
//! the provider's test counters, and a real MCP server (`server-everything`) behind a loopback
//! gate that publishes protected resource metadata (RFC 9728) and admits only tokens the
//! provider's introspection endpoint calls active for this resource (RFC 8707 audience).

use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use sqlx::{Connection, Executor};

use super::{PEER_CLIENT_ID, PEER_CLIENT_SECRET, Served, TestDb, browser::Browser, gatehouse, run_ok as ok};

/// Every bearer token the downstream was shown.
pub type Seen = Arc<Mutex<Vec<String>>>;

/// Walks from `start` through the provider's login and consent (as `login`) and stops at the
/// redirect back to Gatehouse's callback, which it returns without following.
pub async fn walk_to_callback(b: &Browser, start: &str, login: &str) -> String {
    let fill = |field: &str| match field {
        "login" => Some(login.to_owned()),
        "password" => Some("any".to_owned()),
        _ => None,
    };
    b.walk_until(start, &format!("{}/oauth/callback", b.base), fill).await
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

/// The rows of `sql`, run as the schema owner in platform context.
pub async fn platform_rows<T>(t: &TestDb, sql: &str) -> Vec<T>
where
    T: for<'r> sqlx::FromRow<'r, sqlx::postgres::PgRow> + Send + Unpin,
{
    let mut owner = t.owner_conn().await;
    let mut tx = owner.begin().await.unwrap();
    tx.execute("SELECT set_config('gatehouse.platform', 'on', true)").await.unwrap();
    sqlx::query_as(sqlx::AssertSqlSafe(sql.to_owned())).fetch_all(&mut *tx).await.unwrap()
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
    /// While set, the gate refuses every MCP request, whatever its token, with this status and
    /// `WWW-Authenticate` value (a downstream that starts refusing a grant it accepted).
    pub refuse: Refusal,
    /// Every request the gate let through, as (method, scheme): how a test sees that a GET or
    /// a DELETE carried a valid proof.
    pub admitted: Admitted,
}

/// What a gate admitted: `(method, scheme)` per request, the scheme lowercase.
pub type Admitted = Arc<Mutex<Vec<(String, String)>>>;

/// A switch that makes a gate refuse: `(status, WWW-Authenticate)`.
pub type Refusal = Arc<Mutex<Option<(u16, String)>>>;

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
    let refusal = options.refuse.clone();
    let admitted = options.admitted.clone();
    let jtis: Jtis = Default::default();
    let app = axum::Router::new().route(path, axum::routing::get(move || async move { axum::Json(metadata) })).fallback(
        move |request: Request| {
            let (log, issuer, upstream, own, challenge) =
                (log.clone(), issuer.clone(), upstream.clone(), own.clone(), challenge.clone());
            let (jtis, admitted) = (jtis.clone(), admitted.clone());
            let refusal = refusal.lock().unwrap().clone();
            async move {
                if let Some((status, value)) = refusal {
                    let mut r = (StatusCode::from_u16(status).unwrap(), "refused").into_response();
                    r.headers_mut().insert("www-authenticate", value.parse().unwrap());
                    return r;
                }
                let refuse = |why: &'static str| {
                    let mut r = (StatusCode::UNAUTHORIZED, why).into_response();
                    if let Some(c) = &challenge {
                        r.headers_mut().insert("www-authenticate", c.parse().unwrap());
                    }
                    r
                };
                let Some((scheme, token)) = presented(request.headers()) else { return refuse("bearer token required") };
                log.lock().unwrap().push(token.clone());
                let claims = introspect(&issuer, &token).await;
                if let Err(why) =
                    check_binding(&scheme, &claims, request.headers(), (request.method().as_str(), &own), &token, &jtis)
                {
                    return refuse(why);
                }
                let audience = match &claims["aud"] {
                    Value::String(a) => vec![a.clone()],
                    Value::Array(a) => a.iter().filter_map(|v| v.as_str().map(str::to_owned)).collect(),
                    _ => vec![],
                };
                if claims["active"] != true || !audience.contains(&own) {
                    return refuse("the provider does not vouch for this token for this resource");
                }
                admitted.lock().unwrap().push((request.method().to_string(), scheme));
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

/// Every DPoP proof `jti` a gate has admitted (a replayed proof is refused).
pub type Jtis = Arc<Mutex<std::collections::HashSet<String>>>;

/// The `Authorization` header's scheme (lowercase) and token.
pub fn presented(headers: &axum::http::HeaderMap) -> Option<(String, String)> {
    let (scheme, token) = headers.get("authorization")?.to_str().ok()?.split_once(' ')?;
    Some((scheme.to_ascii_lowercase(), token.to_owned()))
}

/// Whether a token is presented as its introspection `claims` say it must be: a DPoP-bound one
/// (RFC 9449: `cnf.jkt`) only with the DPoP scheme and a valid fresh proof of that key for
/// this request (`method`, `url`), any other with the Bearer scheme.
pub fn check_binding(
    scheme: &str,
    claims: &Value,
    headers: &axum::http::HeaderMap,
    (method, url): (&str, &str),
    token: &str,
    jtis: &Jtis,
) -> Result<(), &'static str> {
    let proof = headers.get("dpop").and_then(|v| v.to_str().ok());
    match (scheme, claims["cnf"]["jkt"].as_str()) {
        ("dpop", Some(jkt)) => check_proof(proof, method, url, token, jkt, jtis),
        ("bearer", None) => Ok(()),
        _ => Err("the token's binding and the Authorization scheme disagree"),
    }
}

/// Checks a DPoP proof as a resource server must (RFC 9449 §4.3, §7.1): an ES256 `dpop+jwt`
/// whose public JWK has the token's thumbprint (RFC 7638) and verifies the signature, for this
/// method and URL, hashing this token (`ath`), recent, and never seen before.
pub fn check_proof(
    proof: Option<&str>,
    method: &str,
    url: &str,
    token: &str,
    jkt: &str,
    jtis: &Jtis,
) -> Result<(), &'static str> {
    use base64::Engine;
    use sha2::Digest;
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let proof = proof.ok_or("a DPoP proof is required")?;
    let parts: Vec<&str> = proof.split('.').collect();
    let [header, claims, signature] = parts[..] else { return Err("a proof is a JWS") };
    let json = |part: &str| -> Option<Value> { serde_json::from_slice(&b64.decode(part).ok()?).ok() };
    let (header, claims) = (json(header).ok_or("a malformed proof")?, json(claims).ok_or("a malformed proof")?);
    if header["typ"] != "dpop+jwt" || header["alg"] != "ES256" || header["jwk"]["kty"] != "EC" {
        return Err("not an ES256 dpop+jwt proof");
    }
    let (x, y) = (header["jwk"]["x"].as_str().unwrap_or(""), header["jwk"]["y"].as_str().unwrap_or(""));
    let canonical = format!(r#"{{"crv":"P-256","kty":"EC","x":"{x}","y":"{y}"}}"#);
    if b64.encode(sha2::Sha256::digest(canonical.as_bytes())) != jkt {
        return Err("the proof's key is not the token's");
    }
    let point = [&[4u8][..], &b64.decode(x).unwrap_or_default(), &b64.decode(y).unwrap_or_default()].concat();
    let key = ring::signature::UnparsedPublicKey::new(&ring::signature::ECDSA_P256_SHA256_FIXED, point);
    let signed = &proof[..proof.rfind('.').unwrap_or(0)];
    key.verify(signed.as_bytes(), &b64.decode(signature).unwrap_or_default()).map_err(|_| "the proof's signature")?;
    let fresh = claims["iat"].as_i64().is_some_and(|iat| (chrono::Utc::now().timestamp() - iat).abs() <= 60);
    if claims["htm"] != method || claims["htu"] != url || !fresh {
        return Err("the proof is for another request");
    }
    if claims["ath"] != b64.encode(sha2::Sha256::digest(token.as_bytes())).as_str() {
        return Err("the proof hashes another token");
    }
    if !jtis.lock().unwrap().insert(claims["jti"].as_str().unwrap_or("").to_owned()) {
        return Err("a replayed proof");
    }
    Ok(())
}

/// A TLS-terminating proxy (`tests/peers/tls_proxy.mjs`) in front of `target`, with a fresh
/// self-signed certificate for 127.0.0.1 that peers trust through `NODE_EXTRA_CA_CERTS`.
pub struct TlsProxy {
    pub child: tokio::process::Child,
    /// `https://127.0.0.1:<port>`
    pub base: String,
    /// The certificate (PEM), to be trusted by peers.
    pub cert: std::path::PathBuf,
}

impl TlsProxy {
    pub async fn start(target: &str) -> TlsProxy {
        let dir = std::env::temp_dir().join(format!("gatehouse-tls-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).unwrap();
        let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
        let made = tokio::process::Command::new("openssl")
            .args(["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "1"])
            .args(["-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1", "-keyout"])
            .arg(&key)
            .arg("-out")
            .arg(&cert)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .await
            .expect("run openssl");
        assert!(made.success(), "openssl could not make a certificate");
        let port = super::free_port();
        let peers = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/peers");
        let child = tokio::process::Command::new("node")
            .arg("tls_proxy.mjs")
            .current_dir(&peers)
            .env("TARGET", target)
            .env("PORT", port.to_string())
            .env("CERT", &cert)
            .env("KEY", &key)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("start node (the TLS proxy)");
        assert!(super::listening(port, std::time::Duration::from_secs(20)).await, "the TLS proxy did not start");
        TlsProxy { child, base: format!("https://127.0.0.1:{port}"), cert }
    }
}

/// `gatehouse` against `t` with the vault key ring `keys`.
pub fn vault_cmd(t: &TestDb, keys: &str) -> tokio::process::Command {
    let mut c = gatehouse(Some(&t.url));
    c.env("GATEHOUSE_VAULT_KEYS", keys);
    c
}

/// A tenant `acme` (owner ann@example.test) with workspace `main`.
pub async fn tenant(t: &TestDb, keys: &str) {
    ok(vault_cmd(t, keys), &["tenant", "create", "acme", "--name", "Acme", "--owner-email", "ann@example.test"]).await;
    ok(vault_cmd(t, keys), &["workspace", "create", "--tenant", "acme", "main"]).await;
}

/// Adds a remote MCP connector at `url` with this OAuth configuration.
pub async fn add_remote(t: &TestDb, keys: &str, id: &str, url: &str, auth: Value) {
    let file = super::json_path(&json!({ "auth": auth }));
    let add = ["connector", "add", "--tenant", "acme", "--workspace", "main", "--id", id, "--kind", "remote_mcp"];
    let mut c = vault_cmd(t, keys);
    c.args(add).args(["--url", url, "--config", &file]);
    let (code, out, err) = super::run(c).await;
    assert_eq!(code, 0, "{out} {err}");
}

/// Mints a mailed connect link for `connector` with the CLI and reads it from the outbox: its
/// path (`/connect/acme/…`).
pub async fn mint_link(t: &TestDb, keys: &str, connector: &str) -> String {
    let args = [
        "connect-link",
        "create",
        "--tenant",
        "acme",
        "--workspace",
        "main",
        "--connector",
        connector,
        "--email",
        "it@example.test",
    ];
    let mail_id = ok(vault_cmd(t, keys), &args).await[1].clone();
    let mails = ok(vault_cmd(t, keys), &["outbox", "list", "--tenant", "acme"]).await;
    let mail: Value =
        mails.iter().map(|m| serde_json::from_str::<Value>(m).unwrap()).find(|m| m["id"] == mail_id.as_str()).unwrap();
    let body = mail["body"].as_str().unwrap();
    body[body.find("/connect/").unwrap()..].lines().next().unwrap().to_owned()
}

/// Follows a fresh connect link for `connector` on `served`; the response, not followed further.
pub async fn follow_link(t: &TestDb, keys: &str, served: &Served, connector: &str) -> reqwest::Response {
    let link = mint_link(t, keys, connector).await;
    let client = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
    client.get(format!("{}{link}", served.base)).send().await.unwrap()
}
