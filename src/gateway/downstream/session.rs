//! Sessions with downstream MCP servers: our lean streamable HTTP client, or rmcp's machinery
//! over the legacy HTTP+SSE transport; one per (catalog key, credential) and replica,
//! reconnected after a transport failure.

use std::{sync::Arc, time::Duration};

use axum::http::{HeaderMap, HeaderName, HeaderValue};
use rmcp::{
    ClientCacheConfig, RoleClient, ServiceExt,
    model::{
        CallToolRequestParams, CallToolResult, ClientCapabilities, ClientConfig, Implementation, JsonObject, ProtocolVersion,
        Tool,
    },
    service::{RunningService, ServiceError},
};

use super::{Downstreams, Failure, cap};
use crate::gateway::{credentials::Credential, sse::SseClientTransport, upstream::Upstream};
use crate::workspaces::{Connector, config::RemoteTransport};

/// A session with a downstream MCP server: our lean streamable HTTP client, or rmcp's
/// machinery over the legacy SSE transport.
#[derive(Clone)]
pub(super) enum Session {
    Http(Arc<crate::gateway::mcp_client::HttpSession>),
    Rmcp(Arc<RunningService<RoleClient, ClientConfig>>),
}

/// Why a session request failed.
pub(super) enum SessionError {
    /// The server no longer knows the session; the request was not processed.
    Gone,
    /// `drop`: the session is broken and must not be used again.
    Failed { failure: Failure, drop: bool },
}

impl SessionError {
    fn from_http(f: Option<Failure>) -> SessionError {
        match f {
            None => SessionError::Gone,
            Some(failure) => {
                // A refused credential's session is never used again either.
                let drop = matches!(failure, Failure::Unavailable(_) | Failure::Refused { .. });
                SessionError::Failed { failure, drop }
            }
        }
    }

    /// No session could be had: the request was not sent.
    pub(super) fn opening(failure: Failure) -> SessionError {
        SessionError::Failed { failure, drop: false }
    }

    /// The failure to report.
    pub(super) fn into_failure(self) -> Failure {
        match self {
            SessionError::Gone => {
                Failure::Unavailable("the server refused the request on a new session too (HTTP 400 or 404)".into())
            }
            SessionError::Failed { failure, .. } => failure,
        }
    }

    fn from_rmcp(e: ServiceError) -> SessionError {
        let drop = !matches!(e, ServiceError::McpError(_));
        SessionError::Failed { failure: service_failure(e), drop }
    }
}

impl Session {
    /// Whether the transport is known to be gone (the legacy SSE stream ended); a streamable
    /// HTTP session's liveness is learnt by asking ([`Session::ping`]).
    pub(super) fn is_closed(&self) -> bool {
        match self {
            Session::Http(_) => false,
            Session::Rmcp(s) => s.is_closed(),
        }
    }

    /// Whether the server still answers on the session: a `ping` answered with a result or a
    /// JSON-RPC error (alive, if it does not know `ping`). Over the legacy SSE transport, the
    /// open event stream is the sign of life.
    pub(super) async fn ping(&self) -> bool {
        match self {
            Session::Http(s) => {
                matches!(s.relay("ping", &serde_json::json!({}), None).await, Ok(_) | Err(Some(Failure::JsonRpc(_))))
            }
            Session::Rmcp(s) => !s.is_closed(),
        }
    }

    pub(super) async fn list_tools(&self) -> Result<Vec<Tool>, SessionError> {
        match self {
            Session::Http(s) => s.list_tools().await.map_err(SessionError::from_http),
            Session::Rmcp(s) => s.list_all_tools().await.map_err(SessionError::from_rmcp),
        }
    }

    /// A tool call; over the legacy SSE transport the call's notifications are not relayed.
    pub(super) async fn call_tool(
        &self,
        tool: &str,
        args: &JsonObject,
        upstream: Option<&Upstream>,
    ) -> Result<CallToolResult, SessionError> {
        match self {
            Session::Http(s) => s.call_tool(tool, args, upstream).await.map_err(SessionError::from_http),
            Session::Rmcp(s) => {
                let params = CallToolRequestParams::new(tool.to_owned()).with_arguments(args.clone());
                // Boxed: the legacy transport's call would otherwise size every HTTP call's future.
                Box::pin(s.call_tool(params)).await.map_err(SessionError::from_rmcp)
            }
        }
    }
}

impl Session {
    /// A request other than tools, relayed as it is. Over the legacy SSE transport only tools
    /// are relayed.
    pub(super) async fn relay(
        &self,
        method: &str,
        params: &serde_json::Value,
        upstream: Option<&Upstream>,
    ) -> Result<serde_json::Value, SessionError> {
        match self {
            Session::Http(s) => s.relay(method, params, upstream).await.map_err(SessionError::from_http),
            Session::Rmcp(_) => Err(SessionError::Failed {
                failure: Failure::Rejected("a connector over the legacy HTTP+SSE transport relays tools only".into()),
                drop: false,
            }),
        }
    }

    /// The revision the handshake agreed.
    pub(super) fn revision(&self) -> Option<String> {
        match self {
            Session::Http(s) => s.server()["protocolVersion"].as_str().map(str::to_owned),
            Session::Rmcp(s) => s.peer_info().map(|info| info.protocol_version.to_string()),
        }
    }

    /// The server's `initialize` result (Null over the legacy SSE transport: tools only).
    pub(super) fn server(&self) -> serde_json::Value {
        match self {
            Session::Http(s) => s.server().clone(),
            Session::Rmcp(_) => serde_json::Value::Null,
        }
    }
}

/// Opens a session with the connector's server under its deadline: the handshake over
/// streamable HTTP, or the legacy SSE transport's.
pub(super) async fn connect(
    http: crate::gateway::outbound::Outbound,
    connector: &Connector,
    credential: Option<&Credential>,
) -> Result<Session, Failure> {
    let Connector::RemoteMcp { url, transport, timeout_ms, .. } = connector else {
        return Err(Failure::Unavailable("not an MCP connector".into()));
    };
    let custom = headers(connector, credential);
    let deadline = Duration::from_millis(timeout_ms.unwrap_or(crate::workspaces::config::DEFAULT_TIMEOUT_MS));
    let timed_out = || Failure::Timeout(deadline.as_millis() as u64);
    match transport {
        RemoteTransport::StreamableHttp => {
            let connect =
                crate::gateway::mcp_client::HttpSession::connect(http, url, custom, credential.and_then(|c| c.dpop.clone()));
            let session = tokio::time::timeout(deadline, connect).await.map_err(|_| timed_out())??;
            Ok(Session::Http(Arc::new(session)))
        }
        RemoteTransport::Sse => {
            let info =
                ClientConfig::new(ClientCapabilities::default(), Implementation::new("gatehouse", env!("CARGO_PKG_VERSION")))
                    .with_protocol_version(ProtocolVersion::V_2025_11_25);
            let handshake = async {
                let sse = SseClientTransport::connect(http.general().clone(), url, custom).await.map_err(|e| e.to_string())?;
                info.serve(sse).await.map_err(|e| e.to_string())
            };
            let running = match tokio::time::timeout(deadline, handshake).await {
                Ok(Ok(running)) => running,
                Ok(Err(e)) => return Err(Failure::Unavailable(cap(&e))),
                Err(_) => return Err(timed_out()),
            };
            // A gateway must never serve a stale list when a refresh fails.
            running.set_response_cache_config(ClientCacheConfig::disabled()).await;
            Ok(Session::Rmcp(Arc::new(running)))
        }
    }
}

impl Downstreams {
    /// Lists the connector's tools over a fresh session that is not kept (`credentials/…/test`).
    pub async fn probe(&self, connector: &Connector, credential: Option<&Credential>) -> Result<usize, Failure> {
        let deadline = Duration::from_millis(connector.timeout_ms());
        let http = self.http.clone().ok_or_else(|| Failure::Unavailable("no HTTP client".into()))?;
        let session = connect(http, connector, credential).await?;
        let listed = match tokio::time::timeout(deadline, session.list_tools()).await {
            Ok(Ok(tools)) => Ok(tools.len()),
            Ok(Err(SessionError::Gone)) => Err(Failure::Unavailable("the server forgot the new session".into())),
            Ok(Err(SessionError::Failed { failure, .. })) => Err(failure),
            Err(_) => Err(Failure::Timeout(deadline.as_millis() as u64)),
        };
        if let Session::Rmcp(running) = session
            && let Ok(running) = Arc::try_unwrap(running)
        {
            let _ = running.cancel().await;
        }
        listed
    }

    /// Open downstream sessions on this replica.
    pub async fn session_count(&self) -> usize {
        self.pools.count()
    }
}

/// The headers every request to the connector carries: its configured ones, then the
/// credential's.
pub(super) fn headers(connector: &Connector, credential: Option<&Credential>) -> HeaderMap {
    let mut custom = HeaderMap::new();
    if let Connector::RemoteMcp { headers, .. } = connector {
        for (name, value) in headers {
            if let (Ok(n), Ok(v)) = (HeaderName::from_bytes(name.as_bytes()), HeaderValue::from_str(value)) {
                custom.insert(n, v);
            }
        }
    }
    for (name, value) in credential.map(|c| c.headers.as_slice()).unwrap_or_default() {
        custom.insert(name.clone(), value.clone());
    }
    custom
}

fn service_failure(e: ServiceError) -> Failure {
    match e {
        ServiceError::McpError(data) => Failure::json_rpc(data.code.0, &data.message, data.data),
        ServiceError::Timeout { timeout } => Failure::Timeout(timeout.as_millis() as u64),
        other => Failure::Unavailable(cap(&other.to_string())),
    }
}
