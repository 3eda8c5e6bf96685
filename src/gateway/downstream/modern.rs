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

/// The `_meta` every 2026-07-28 request of Gatehouse carries: revision, client, capabilities.
pub(super) fn meta() -> Value {
    json!({ "_meta": {
        "io.modelcontextprotocol/protocolVersion": REVISION,
        "io.modelcontextprotocol/clientInfo": { "name": "gatehouse", "version": env!("CARGO_PKG_VERSION") },
        "io.modelcontextprotocol/clientCapabilities": {},
    } })
}

impl Downstreams {
    /// Whether the connector's server speaks 2026-07-28: it answers `server/discover` listing
    /// that revision. Remembered per catalog key; an unreachable server is asked again next
    /// time (and meanwhile spoken to as before, through the handshake).
    pub async fn modern(&self, tenant: uuid::Uuid, key: &str, connector: &Connector, credential: Option<&Credential>) -> bool {
        if !matches!(connector, Connector::RemoteMcp { transport: RemoteTransport::StreamableHttp, .. }) {
            return false;
        }
        if let Some(known) = self.revisions.lock().unwrap_or_else(|p| p.into_inner()).get(key) {
            return known.is_some();
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
            Err(_) => return false,
        };
        let modern = discovered.is_some();
        self.revisions.lock().unwrap_or_else(|p| p.into_inner()).insert(key.to_owned(), discovered);
        modern
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
        let sent = crate::gateway::mcp_client::stateless(http, url, headers, (REVISION, method, name), params, upstream);
        match tokio::time::timeout(deadline, sent).await {
            Ok(answer) => answer,
            Err(_) => Err(Failure::Timeout(deadline.as_millis() as u64)),
        }
    }
}
