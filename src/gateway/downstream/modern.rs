//! Downstreams spoken to on 2026-07-28: whether a connector's server speaks it (asked once
//! per configuration and replica with `server/discover`, else the handshake era is used),
//! and one stateless request to it.

use axum::http::{HeaderName, HeaderValue};
use serde_json::{Value, json};

use super::{Downstreams, Failure, session};
use crate::{
    gateway::credentials::Credential,
    workspaces::{Connector, config::RemoteTransport},
};

pub(super) const REVISION: &str = "2026-07-28";
/// The most pages of a 2026-07-28 server's tool list read (as for the handshake era).
const MAX_PAGES: usize = 64;

/// The `_meta` every 2026-07-28 request of Gatehouse carries: revision, client, capabilities.
pub(super) fn meta() -> Value {
    json!({ "_meta": client_meta(json!({})) })
}

/// What every 2026-07-28 request's `_meta` says: the revision, Gatehouse as the client, and
/// the `capabilities` declared for the agent.
fn client_meta(capabilities: Value) -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": REVISION,
        "io.modelcontextprotocol/clientInfo": { "name": "gatehouse", "version": env!("CARGO_PKG_VERSION") },
        "io.modelcontextprotocol/clientCapabilities": capabilities,
    })
}

/// A 2026-07-28 request's `_meta`: [`client_meta`], and the agent's progress token and log
/// level from its response stream (`upstream`), as the streams relay expects them.
pub async fn request_meta(capabilities: Value, upstream: Option<&crate::gateway::upstream::Upstream>) -> Value {
    let mut meta = client_meta(capabilities);
    if let Some(upstream) = upstream {
        if let Some(token) = upstream.progress_token() {
            meta["progressToken"] = serde_json::to_value(token).unwrap_or(Value::Null);
        }
        if let Some(level) = upstream.log_level().await {
            meta["io.modelcontextprotocol/logLevel"] = serde_json::to_value(level).unwrap_or(Value::Null);
        }
    }
    meta
}

/// The JSON-RPC error of an unsupported protocol version.
const UNSUPPORTED_VERSION: i64 = -32022;

/// Whether `message` refuses the request's protocol version (`-32022`) while its
/// `data.supported` names [`REVISION`]: a request worth sending once more in that revision.
fn retry_in_revision(message: &Value) -> bool {
    let error = &message["error"];
    error["code"].as_i64() == Some(UNSUPPORTED_VERSION)
        && error["data"]["supported"].as_array().is_some_and(|v| v.iter().any(|v| v == REVISION))
}

impl Downstreams {
    /// Whether the connector's server speaks 2026-07-28: it answers `server/discover` listing
    /// that revision. Remembered per catalog key; an unreachable server is asked again next
    /// time (and meanwhile spoken to as before, through the handshake). A server that refuses
    /// the credential (401, 403) says so to the request that asked: its challenge (a step-up's
    /// scopes) must reach the grant's repair, not be taken for a handshake-era server.
    pub async fn modern(
        &self,
        tenant: uuid::Uuid,
        key: &str,
        connector: &Connector,
        credential: Option<&Credential>,
    ) -> Result<bool, Failure> {
        if !matches!(connector, Connector::RemoteMcp { transport: RemoteTransport::StreamableHttp, .. }) {
            return Ok(false);
        }
        if let Some(known) = self.revisions.lock().unwrap_or_else(|p| p.into_inner()).get(key) {
            return Ok(known.is_some());
        }
        let params = meta();
        let discovered = match self.stateless(tenant, connector, credential, ("server/discover", None, &[]), &params, None).await
        {
            // An error or another revision: the server speaks the handshake era.
            Ok(mut message) => {
                let result = message["result"].take();
                let modern = result["supportedVersions"].as_array().is_some_and(|v| v.iter().any(|v| v == REVISION));
                modern.then(|| std::sync::Arc::new(result))
            }
            Err(Failure::Rejected(_)) => None,
            Err(refused @ Failure::Refused { .. }) => return Err(refused),
            Err(_) => return Ok(false),
        };
        let modern = discovered.is_some();
        self.revisions.lock().unwrap_or_else(|p| p.into_inner()).insert(key.to_owned(), discovered);
        Ok(modern)
    }

    /// Whether a request that may go either way goes to this server as a stateless
    /// 2026-07-28 request: it speaks 2026-07-28 and refuses the handshake. A server that
    /// speaks both eras keeps the handshake for a handshake-era agent's calls and relayed
    /// requests (its catalog is listed in 2026-07-28 all the same), so that what it asks the
    /// agent during them still reaches the agent on its response stream. Learnt once per catalog key and replica, by opening a
    /// pooled session (which then serves the request); after that, one map lookup (the
    /// learning is boxed, so a caller's future does not carry a session's opening).
    pub(super) async fn stateless_only(
        &self,
        tenant: uuid::Uuid,
        key: &str,
        connector: &Connector,
        credential: Option<&Credential>,
    ) -> Result<bool, Failure> {
        match self.stateless_only_known(key) {
            Some(known) => Ok(known),
            None => Box::pin(self.learn_stateless_only(tenant, key, connector, credential)).await,
        }
    }

    /// [`Downstreams::stateless_only`] asked of the server: its revision, then the handshake.
    async fn learn_stateless_only(
        &self,
        tenant: uuid::Uuid,
        key: &str,
        connector: &Connector,
        credential: Option<&Credential>,
    ) -> Result<bool, Failure> {
        if !self.modern(tenant, key, connector, credential).await? {
            return Ok(false);
        }
        if let Some(refused) = self.handshake_refused.lock().unwrap_or_else(|p| p.into_inner()).get(key) {
            return Ok(*refused);
        }
        let refused = match self.lease(key, connector, credential, false).await {
            Ok(_) => false,
            Err(f) => {
                tracing::info!(failure = ?f, "a 2026-07-28 downstream refused the handshake; speaking only its own revision");
                true
            }
        };
        self.handshake_refused.lock().unwrap_or_else(|p| p.into_inner()).insert(key.to_owned(), refused);
        Ok(refused)
    }

    /// [`Downstreams::stateless_only`] when it is already known for `key` (no request).
    fn stateless_only_known(&self, key: &str) -> Option<bool> {
        match self.revisions.lock().unwrap_or_else(|p| p.into_inner()).get(key)? {
            None => Some(false),
            Some(_) => self.handshake_refused.lock().unwrap_or_else(|p| p.into_inner()).get(key).copied(),
        }
    }

    /// What a 2026-07-28 server said of itself in its `server/discover` result (its
    /// capabilities and instructions as that revision states them); `None` for a server
    /// spoken to through the handshake, or not asked yet.
    pub(super) fn discovered(&self, key: &str) -> Option<std::sync::Arc<Value>> {
        self.revisions.lock().unwrap_or_else(|p| p.into_inner()).get(key).cloned().flatten()
    }

    /// One stateless 2026-07-28 request (`params` carries its `_meta`) under the connector's
    /// deadline; `call` is the method, the `Mcp-Name` header (tool, prompt or resource URI)
    /// and the `Mcp-Param-*` headers. The response message: its `result`, or its JSON-RPC
    /// `error`.
    pub async fn stateless(
        &self,
        tenant: uuid::Uuid,
        connector: &Connector,
        credential: Option<&Credential>,
        call: (&str, Option<&str>, &[(HeaderName, HeaderValue)]),
        params: &Value,
        upstream: Option<&crate::gateway::upstream::Upstream>,
    ) -> Result<Value, Failure> {
        let (method, name, param_headers) = call;
        let Connector::RemoteMcp { url, .. } = connector else {
            return Err(Failure::Rejected("only an MCP connector speaks MCP".into()));
        };
        let _slot = self.admit(tenant)?;
        let http = self.http.clone().ok_or_else(|| Failure::Unavailable("no HTTP client".into()))?;
        let deadline = std::time::Duration::from_millis(connector.timeout_ms());
        let mut headers = session::headers(connector, credential);
        for (name, value) in param_headers {
            headers.insert(name.clone(), value.clone());
        }
        let dpop = credential.and_then(|c| c.dpop.as_deref());
        let sent = async {
            let ask = || {
                let (http, headers) = (http.clone(), headers.clone());
                crate::gateway::mcp_client::stateless(http, url, headers, (REVISION, method, name), params, upstream, dpop)
            };
            let message = ask().await?;
            // A server that refuses the revision while naming it among those it supports is
            // asked once more, in it (the version retry of 2026-07-28's transport).
            if retry_in_revision(&message) { ask().await } else { Ok(message) }
        };
        match tokio::time::timeout(deadline, sent).await {
            Ok(answer) => answer,
            Err(_) => Err(Failure::Timeout(deadline.as_millis() as u64)),
        }
    }

    /// One stateless request to a 2026-07-28 server with Gatehouse's own `_meta` (no agent
    /// capabilities: the downstream must not ask for input), its `result`. A JSON-RPC error
    /// is [`Failure::JsonRpc`] with the server's code; a result that asks for input, or of a
    /// shape this gateway does not relay, is refused with a message saying so.
    pub(super) async fn request_modern(
        &self,
        tenant: uuid::Uuid,
        connector: &Connector,
        credential: Option<&Credential>,
        call: (&str, Option<&str>, &[(HeaderName, HeaderValue)]),
        params: Value,
        upstream: Option<&crate::gateway::upstream::Upstream>,
    ) -> Result<Value, Failure> {
        let mut params = if params.is_object() { params } else { json!({}) };
        params["_meta"] = request_meta(json!({}), upstream).await;
        let mut message = self.stateless(tenant, connector, credential, call, &params, upstream).await?;
        if let Some(error) = message.get("error") {
            let code = error["code"].as_i64().and_then(|c| i32::try_from(c).ok()).unwrap_or(-32603);
            return Err(Failure::json_rpc(code, error["message"].as_str().unwrap_or_default(), error.get("data").cloned()));
        }
        let result = message["result"].take();
        match result.get("resultType").and_then(Value::as_str) {
            None | Some("complete") => Ok(result),
            Some("input_required") => Err(Failure::Rejected(
                "the downstream asks the agent for input, which an agent on the handshake era (2025-11-25 or earlier) is not asked for by a 2026-07-28 downstream through this gateway".into(),
            )),
            Some(other) => Err(Failure::Rejected(format!(
                "the downstream answered a `{}` result, which this gateway does not relay",
                other.chars().take(32).collect::<String>()
            ))),
        }
    }

    /// A 2026-07-28 server's whole tool list: `tools/list`, page after page.
    pub(super) async fn list_modern(
        &self,
        tenant: uuid::Uuid,
        connector: &Connector,
        credential: Option<&Credential>,
    ) -> Result<(Vec<rmcp::model::Tool>, u64, bool), Failure> {
        let mut tools = Vec::new();
        // The list is fresh no longer than its shortest-lived page; a page without a hint is
        // stale at once.
        let (mut ttl_ms, mut private) = (u64::MAX, false);
        let mut cursor: Option<String> = None;
        for _ in 0..MAX_PAGES {
            let params = match &cursor {
                Some(cursor) => json!({ "cursor": cursor }),
                None => json!({}),
            };
            let mut page = self.request_modern(tenant, connector, credential, ("tools/list", None, &[]), params, None).await?;
            let listed: Vec<rmcp::model::Tool> = serde_json::from_value(page["tools"].take())
                .map_err(|e| Failure::Unavailable(format!("a malformed tool list: {}", super::cap(&e.to_string()))))?;
            tools.extend(listed);
            ttl_ms = ttl_ms.min(page["ttlMs"].as_u64().unwrap_or(0));
            private |= page["cacheScope"] == "private";
            match page["nextCursor"].as_str().filter(|c| !c.is_empty()) {
                Some(next) => cursor = Some(next.to_owned()),
                None => return Ok((tools, ttl_ms, private)),
            }
        }
        Err(Failure::Rejected(format!("the tool list has more than {MAX_PAGES} pages")))
    }

    /// A request other than tools (prompts, resources, completion, logging) to a 2026-07-28
    /// server, as [`Downstreams::relay`] sends it on the handshake era. `logging/setLevel`
    /// does not exist there (the level travels with each request), so it is answered here;
    /// `resources/subscribe` neither (subscriptions are a `subscriptions/listen` filter), so
    /// it is refused -32601 as such a server would.
    pub(super) async fn relay_modern(
        &self,
        tenant: uuid::Uuid,
        connector: &Connector,
        credential: Option<&Credential>,
        request: (&str, &Value),
        upstream: Option<&crate::gateway::upstream::Upstream>,
    ) -> Result<Value, Failure> {
        let (method, params) = request;
        let name = match method {
            "logging/setLevel" => return Ok(json!({})),
            "resources/subscribe" | "resources/unsubscribe" => {
                return Err(Failure::json_rpc(-32601, &format!("{method} is not a method of 2026-07-28"), None));
            }
            "prompts/get" => params["name"].as_str(),
            "resources/read" => params["uri"].as_str(),
            _ => None,
        };
        let mut result =
            self.request_modern(tenant, connector, credential, (method, name, &[]), params.clone(), upstream).await?;
        // What only 2026-07-28 says of a result; a handshake-era agent is given the result as
        // its own revision has it (rmcp adds them again for a 2026-07-28 agent).
        if let Some(result) = result.as_object_mut() {
            result.remove("resultType");
        }
        Ok(result)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_refused_version_whose_server_names_this_revision_is_asked_again() {
        let refusal = |code: i64, supported: Value| json!({ "jsonrpc": "2.0", "id": 1, "error": { "code": code, "message": "Unsupported protocol version", "data": { "supported": supported } } });
        assert!(retry_in_revision(&refusal(-32022, json!(["2025-11-25", REVISION]))));
        assert!(!retry_in_revision(&refusal(-32022, json!(["2025-11-25"]))), "a handshake-era server");
        assert!(!retry_in_revision(&refusal(-32022, json!(REVISION))), "not a list");
        assert!(!retry_in_revision(&refusal(-32602, json!([REVISION]))), "another error");
        assert!(!retry_in_revision(&json!({ "jsonrpc": "2.0", "id": 1, "result": {} })));
    }
}
