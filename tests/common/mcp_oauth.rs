//! Helpers of the MCP authorization tests: raw calls with an OAuth access token, the token
//! and registration endpoints, PKCE, and a signed-in person's consent walk.
#![allow(dead_code)]

use std::path::PathBuf;

use reqwest::StatusCode;
use serde_json::{Value, json};

use super::{
    Everything, TestDb,
    browser::{Browser, first_form},
    cli, http,
};

/// One raw JSON-RPC request with an OAuth access token only.
pub async fn rpc(url: &str, token: &str, method: &str, params: Value) -> reqwest::Response {
    let body = json!({ "jsonrpc": "2.0", "id": 1, "method": method, "params": params });
    http()
        .post(url)
        .bearer_auth(token)
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2025-11-25")
        .json(&body)
        .send()
        .await
        .unwrap()
}

pub async fn status_at(url: &str, token: &str) -> StatusCode {
    rpc(url, token, "tools/list", json!({})).await.status()
}

/// Runs tests/peers/oauth_agent.py (the Python SDK's OAuth client) against `url` as `email`.
pub async fn python_oauth_agent(url: &str, email: &str, calls: Value) -> Value {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/peers/oauth_agent.py");
    let out = super::python3()
        .arg(script)
        .arg(url)
        .arg(email)
        .arg(calls.to_string())
        .kill_on_drop(true)
        .output()
        .await
        .expect("run python3 (scripts/test.sh installs the Python peers)");
    assert!(out.status.success(), "oauth agent failed: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("agent prints JSON")
}

pub async fn token_request(base: &str, tenant: &str, form: &[(&str, &str)]) -> (StatusCode, Value) {
    let r = http().post(format!("{base}/t/{tenant}/oauth/token")).form(form).send().await.unwrap();
    let status = r.status();
    (status, r.json().await.unwrap_or(Value::Null))
}

pub async fn register(base: &str, tenant: &str, redirect: &str) -> (StatusCode, Value) {
    let r = http()
        .post(format!("{base}/t/{tenant}/oauth/register"))
        .json(&json!({ "client_name": "Test agent", "redirect_uris": [redirect] }))
        .send()
        .await
        .unwrap();
    let status = r.status();
    (status, r.json().await.unwrap_or(Value::Null))
}

/// A PKCE pair (verifier, S256 challenge).
pub fn pkce() -> (String, String) {
    let verifier = format!("{}{}", uuid::Uuid::new_v4().simple(), uuid::Uuid::new_v4().simple());
    let challenge = gatehouse::secrets::s256(&verifier);
    (verifier, challenge)
}

/// The authorization URL of `tenant` with `params`.
pub fn authorize_url(base: &str, tenant: &str, params: &[(&str, &str)]) -> String {
    let mut url = url::Url::parse(&format!("{base}/t/{tenant}/oauth/authorize")).unwrap();
    url.query_pairs_mut().extend_pairs(params);
    url.to_string()
}

/// The query of a redirect's Location, as pairs.
pub fn location_query(r: &reqwest::Response) -> Vec<(String, String)> {
    let location = r.headers()["location"].to_str().unwrap();
    url::Url::parse(location).unwrap().query_pairs().into_owned().collect()
}

pub fn get<'a>(q: &'a [(String, String)], key: &str) -> Option<&'a str> {
    q.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
}

/// A signed-in person's consent: GET the authorization URL (consent page), POST its first
/// form (Allow) from the same origin; the redirect's Location.
pub async fn consent(browser: &Browser, url: &str) -> reqwest::Response {
    let page = browser.client.get(url).send().await.unwrap();
    assert_eq!(page.status(), 200, "consent page");
    let body = page.text().await.unwrap();
    let (action, fields) = first_form(&body).expect("consent form");
    browser.client.post(format!("{}{action}", browser.base)).header("origin", &browser.base).form(&fields).send().await.unwrap()
}

/// A complete authorization for `client_id` at `resource`: (access, refresh).
pub async fn authorize(browser: &Browser, tenant: &str, client_id: &str, redirect: &str, resource: &str) -> (String, String) {
    let (verifier, challenge) = pkce();
    let url = authorize_url(
        &browser.base,
        tenant,
        &[
            ("response_type", "code"),
            ("client_id", client_id),
            ("redirect_uri", redirect),
            ("code_challenge", &challenge),
            ("code_challenge_method", "S256"),
            ("state", "s1"),
            ("scope", "mcp"),
            ("resource", resource),
        ],
    );
    let r = consent(browser, &url).await;
    assert_eq!(r.status(), 303, "{:?}", r.text().await);
    let q = location_query(&r);
    assert_eq!(get(&q, "state"), Some("s1"));
    let code = get(&q, "code").expect("a code").to_owned();
    let (status, tokens) = token_request(
        &browser.base,
        tenant,
        &[
            ("grant_type", "authorization_code"),
            ("code", &code),
            ("redirect_uri", redirect),
            ("client_id", client_id),
            ("code_verifier", &verifier),
            ("resource", resource),
        ],
    )
    .await;
    assert_eq!(status, 200, "{tokens}");
    (tokens["access_token"].as_str().unwrap().to_owned(), tokens["refresh_token"].as_str().unwrap().to_owned())
}

pub struct Setup {
    pub t: TestDb,
    pub _everything: Everything,
}

/// Tenant `acme` (owner alice, once signed in) with workspaces `main` (connector
/// `everything`, pool `reads`) and `other`; tenant `globex` with a workspace `main`.
pub async fn setup() -> Setup {
    let everything = Everything::start().await;
    let t = TestDb::new().await;
    cli(&t.url, &["tenant", "create", "acme", "--name", "Acme", "--owner-email", "alice@example.test"]).await;
    cli(&t.url, &["tenant", "create", "globex", "--name", "Globex"]).await;
    for (tenant, ws) in [("acme", "main"), ("acme", "other"), ("globex", "main")] {
        cli(&t.url, &["workspace", "create", "--tenant", tenant, ws]).await;
    }
    super::add_remote_mcp(&t.url, "acme", "main", "everything", &everything.url).await;
    let pools = super::json_path(&json!({ "pools": { "reads": { "tools": ["everything.echo"] } } }));
    cli(&t.url, &["workspace", "configure", "--tenant", "acme", "--workspace", "main", "--file", &pools]).await;
    Setup { t, _everything: everything }
}
