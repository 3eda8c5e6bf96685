//! `gatehouse doctor --url URL`: checks a running deployment end to end with the machine
//! credentials in `GATEHOUSE_CLIENT_ID`, `GATEHOUSE_CLIENT_SECRET` and `GATEHOUSE_TOKEN`
//! (never flags, so they stay out of shell history and process lists).
//!
//! Liveness, then the MCP endpoint on both protocol revisions: `tools/list` must be exactly the
//! gateway's surface, and one search must answer. Redirects are refused, as are URLs with user
//! information and plain http to anything but loopback; each request has 10 s.

use std::time::Duration;

use anyhow::{Context, anyhow, bail};
use serde_json::{Value, json};

use crate::{gateway::surface, secrets};

/// `gatehouse doctor`: [`run`] with the credentials from the environment.
pub async fn run_from_env(url: &str) -> anyhow::Result<String> {
    let var = |k: &str| std::env::var(k).map_err(|_| anyhow!("{k} is not set"));
    let (client_id, client_secret, token) =
        (var("GATEHOUSE_CLIENT_ID")?, var("GATEHOUSE_CLIENT_SECRET")?, var("GATEHOUSE_TOKEN")?);
    run(url, &client_id, &client_secret, &token).await.map_err(|e| anyhow!("doctor: {e:#}"))
}

/// Checks `url` (the workspace's MCP endpoint). Returns the one-line verdict.
pub async fn run(url: &str, client_id: &str, client_secret: &str, token: &str) -> anyhow::Result<String> {
    let parsed = url::Url::parse(url).context("not a URL")?;
    if !parsed.username().is_empty() || parsed.password().is_some() {
        bail!("the URL carries user information; pass credentials in the environment instead");
    }
    let loopback = matches!(parsed.host(), Some(url::Host::Ipv4(ip)) if ip.is_loopback())
        || matches!(parsed.host(), Some(url::Host::Ipv6(ip)) if ip.is_loopback())
        || parsed.host_str() == Some("localhost");
    match parsed.scheme() {
        "https" => {}
        "http" if loopback => {}
        "http" => bail!("refusing plain http to a non-loopback host (credentials would travel in clear)"),
        other => bail!("unsupported scheme {other}"),
    }
    if !secrets::well_formed(token, crate::tokens::PREFIX, crate::tokens::SECRET_CHARS) {
        bail!("GATEHOUSE_TOKEN is not a gth_ token");
    }
    crate::install_crypto();
    let http = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).timeout(Duration::from_secs(10)).build()?;

    let mut health = parsed.clone();
    health.set_path("/healthz");
    health.set_query(None);
    let r = http.get(health.as_str()).send().await.context("GET /healthz")?;
    if !r.status().is_success() {
        bail!("/healthz answered {}", r.status());
    }

    let to = Endpoint { http: &http, url, client_id, client_secret, token };
    let expected: Vec<String> = surface::tools().into_iter().map(|t| t.name.to_string()).collect();
    for revision in ["2025-11-25", "2026-07-28"] {
        let tools = rpc(&to, revision, "tools/list", json!({}), None).await?;
        let names: Vec<String> =
            tools["tools"].as_array().into_iter().flatten().filter_map(|t| t["name"].as_str().map(str::to_owned)).collect();
        if names != expected {
            bail!("{revision}: tools/list is {names:?}, expected {expected:?}");
        }
        let params = json!({ "name": "search_tools", "arguments": { "query": "", "limit": 1 } });
        let found = rpc(&to, revision, "tools/call", params, Some("search_tools")).await?;
        if found["isError"] == true {
            bail!("{revision}: search_tools failed: {}", found["content"][0]["text"]);
        }
    }
    Ok(format!("ok: {url} is live, authenticated, and serves the gateway surface on 2025-11-25 and 2026-07-28"))
}

/// The MCP endpoint a check talks to, and the machine credentials it presents.
struct Endpoint<'a> {
    http: &'a reqwest::Client,
    url: &'a str,
    client_id: &'a str,
    client_secret: &'a str,
    token: &'a str,
}

/// One JSON-RPC request on `revision` (`name` is the tool a `tools/call` names); its result.
async fn rpc(to: &Endpoint<'_>, revision: &str, method: &str, mut params: Value, name: Option<&str>) -> anyhow::Result<Value> {
    let Endpoint { http, url, client_id, client_secret, token } = *to;
    let stateless = revision >= "2026-07-28";
    if stateless {
        params["_meta"] = json!({
            "io.modelcontextprotocol/protocolVersion": revision,
            "io.modelcontextprotocol/clientInfo": { "name": "gatehouse-doctor", "version": env!("CARGO_PKG_VERSION") },
            "io.modelcontextprotocol/clientCapabilities": {},
        });
    }
    let mut request = http
        .post(url)
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", revision)
        .header("gatehouse-client-id", client_id)
        .header("gatehouse-client-secret", client_secret)
        .bearer_auth(token)
        .json(&json!({ "jsonrpc": "2.0", "id": 1, "method": method, "params": params }));
    if stateless {
        request = request.header("mcp-method", method);
        if let Some(name) = name {
            request = request.header("mcp-name", name);
        }
    }
    let response = request.send().await.with_context(|| format!("{revision} {method}"))?;
    let status = response.status();
    if status.is_redirection() {
        bail!("{revision} {method}: refused to follow a redirect");
    }
    let body: Value = response.json().await.map_err(|_| anyhow!("{revision} {method}: answered {status} without JSON"))?;
    if !status.is_success() {
        bail!("{revision} {method}: {status} {}", body["code"].as_str().unwrap_or(""));
    }
    if let Some(error) = body.get("error") {
        bail!("{revision} {method}: JSON-RPC error {error}");
    }
    Ok(body["result"].clone())
}
