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

const REVISION: &str = "2026-07-28";

impl Downstreams {
    /// Whether the connector's server speaks 2026-07-28: it answers `server/discover` listing
    /// that revision. Remembered per catalog key; an unreachable server is asked again next
    /// time (and meanwhile spoken to as before, through the handshake).
    pub async fn modern(&self, tenant: uuid::Uuid, key: &str, connector: &Connector, credential: Option<&Credential>) -> bool {
        if !matches!(connector, Connector::RemoteMcp { transport: RemoteTransport::StreamableHttp, .. }) {
            return false;
        }
        if let Some(known) = self.revisions.lock().unwrap_or_else(|p| p.into_inner()).get(key) {
            return *known;
        }
        let params = json!({ "_meta": {
            "io.modelcontextprotocol/protocolVersion": REVISION,
            "io.modelcontextprotocol/clientInfo": { "name": "gatehouse", "version": env!("CARGO_PKG_VERSION") },
            "io.modelcontextprotocol/clientCapabilities": {},
        } });
        let modern = match self.stateless(tenant, connector, credential, ("server/discover", None, &[]), &params, None).await {
            // An error or another revision: the server speaks the handshake era.
            Ok(message) => message["result"]["supportedVersions"].as_array().is_some_and(|v| v.iter().any(|v| v == REVISION)),
            Err(Failure::Rejected(_)) => false,
            Err(_) => return false,
        };
        self.revisions.lock().unwrap_or_else(|p| p.into_inner()).insert(key.to_owned(), modern);
        modern
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
