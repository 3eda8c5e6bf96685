//! The MCP endpoint: `/t/{tenant}/w/{workspace}/mcp`, streamable HTTP, stateless (any replica
//! serves any request), machine-authenticated, over the workspace's connectors.

pub mod activity;
pub mod asks;
pub mod catalogs;
pub mod credentials;
pub mod direct;
pub mod downstream;
pub mod handler;
pub mod http_api_connector;
pub mod input;
pub mod jsonrpc;
pub mod listen;
pub mod log_levels;
pub mod mcp_client;
pub mod outbound;
pub mod param_headers;
pub mod peer;
pub mod pins;
pub mod replay;
pub mod sse;
pub mod stash;
pub mod subscriptions;
pub mod surface;
pub mod upstream;

use std::sync::Arc;

use axum::{
    Router,
    extract::{FromRequestParts, Request},
    http::{StatusCode, header},
    response::{IntoResponse, Response},
};
use rmcp::transport::{
    StreamableHttpServerConfig, StreamableHttpService, streamable_http_server::session::never::NeverSessionManager,
};

pub use handler::{Gateway, call_tool};

use crate::{
    AppState,
    auth::{Actor, TenantCtx, TenantRef},
    error::{Error, problem},
    extract::EndpointPath,
    members::Permission,
    workspaces::{self, Bound},
};

/// What the authentication middleware hands to the tool handlers, through the request's
/// extensions (rmcp passes the HTTP request parts into every handler's context).
#[derive(Clone, Debug)]
pub struct GatewayCtx {
    pub tenant: TenantRef,
    /// The workspace and the configuration it runs, as this replica holds them for the
    /// tenant's current epoch.
    pub bound: Arc<Bound>,
    pub actor_kind: &'static str,
    pub actor_id: String,
    pub request_id: Option<String>,
    /// The caller as grants see it (the token's person, if any).
    pub caller: workspaces::config::Caller,
    /// The pool this request came through (`…/mcp/{pool}`), if any.
    pub pool: Option<(String, workspaces::config::Pool)>,
    /// The MCP client's name and version, once the call's request is parsed (shared, so the
    /// activity row takes it without a copy).
    pub client: Option<Arc<(String, String)>>,
    /// The workspaces this call came through by peer connectors, outermost first (empty for
    /// a call made at this workspace's own endpoint): bounds the depth and refuses cycles.
    pub peer_path: Vec<uuid::Uuid>,
    /// The agent's response stream while this call is open (`None` where nothing is relayed:
    /// listings, `execute_code`'s host calls).
    pub upstream: Option<upstream::Upstream>,
    /// On 2026-07-28: the agent's capabilities, answers and sealed state for the downstream
    /// (see [`input`]); `None` on the handshake era.
    pub input: Option<Arc<input::Agent>>,
    /// On 2026-07-28, a native pool's `tools/call`: the request's `Mcp-Param-*` headers, checked
    /// against the tool's schema ([`param_headers`]); `None` elsewhere.
    pub param_headers: Option<Arc<Vec<(String, String)>>>,
}

impl GatewayCtx {
    /// Whether the caller may see `connector` (`tool` `None`: any of its tools) here: the
    /// grants, narrowed by the pool. Never wider than either.
    pub fn visible(&self, connector: &str, tool: Option<&str>) -> bool {
        self.bound.document.granted(&self.caller, connector, tool)
            && self.pool.as_ref().is_none_or(|(_, p)| p.includes(connector, tool))
            // A connector of personal credentials is absent for callers who are no member.
            && (self.caller.member_id.is_some()
                || self.bound.document.connectors.get(connector).is_none_or(|c| !c.auth().personal()))
    }

    /// Whether the caller may see `connector`'s prompt or resource `name` here (a prompt's
    /// name, a resource's URI; `None`: a resource template): the connector is visible, and the
    /// grants name it whole or name this one. Ungranted looks missing.
    pub fn visible_part(&self, part: crate::workspaces::config::Part, connector: &str, name: Option<&str>) -> bool {
        self.visible(connector, None) && self.bound.document.granted_part(&self.caller, part, connector, name)
    }
}

/// The endpoint's routes, for a path with a percent sign, which axum's router decodes:
/// `crate::http` sends every other request for the endpoint to the same service directly.
pub fn router(endpoint: Endpoint) -> Router<AppState> {
    Router::new().route_service(EndpointPath::ROUTE, endpoint.clone()).route_service(EndpointPath::POOL_ROUTE, endpoint)
}

/// The endpoint as a service: every method, authenticated by [`authenticate`], answered by
/// [`direct::endpoint`] (or by rmcp, for what that does not answer itself).
pub fn endpoint(state: &AppState) -> Endpoint {
    let mut hosts = vec!["localhost".to_owned(), "127.0.0.1".to_owned(), "::1".to_owned()];
    if let Ok(u) = url::Url::parse(&state.config.public_url)
        && let Some(host) = u.host_str()
    {
        hosts.push(host.to_owned());
    }
    let config =
        StreamableHttpServerConfig::default().with_legacy_session_mode(false).with_json_response(true).with_allowed_hosts(hosts);
    let for_handlers = state.clone();
    let service = StreamableHttpService::new(
        move || Ok(Gateway { state: for_handlers.clone() }),
        Arc::new(NeverSessionManager::default()),
        config,
    );
    // Cloned only for a request that goes to rmcp: its clone copies the configuration.
    Endpoint { state: state.clone(), rmcp: Arc::new(service) }
}

/// See [`endpoint`].
#[derive(Clone)]
pub struct Endpoint {
    state: AppState,
    rmcp: Arc<StreamableHttpService<Gateway, NeverSessionManager>>,
}

impl tower::Service<Request> for Endpoint {
    type Response = Response;
    type Error = std::convert::Infallible;
    type Future = futures::future::BoxFuture<'static, Result<Response, std::convert::Infallible>>;

    fn poll_ready(&mut self, _: &mut std::task::Context<'_>) -> std::task::Poll<Result<(), Self::Error>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request) -> Self::Future {
        let (state, rmcp) = (self.state.clone(), self.rmcp.clone());
        // Authenticated here rather than by a layer: a layer would cost every request a clone
        // of the service below it and a boxed future.
        Box::pin(async move {
            Ok(match authenticate(&state, request).await {
                Ok(request) => direct::endpoint(state, move || (*rmcp).clone(), request).await,
                Err(refusal) => refusal,
            })
        })
    }
}

/// Origin check (DNS-rebinding protection), machine authentication, the caller's
/// `connector_access`, and the workspace's bound configuration, in that order: the request
/// with its [`GatewayCtx`], or the refusal to answer.
async fn authenticate(state: &AppState, request: Request) -> Result<Request, Response> {
    let (parts, body) = request.into_parts();
    match Box::pin(admit(state, parts)).await {
        Ok(parts) => Ok(Request::from_parts(parts, body)),
        Err(mut refusal) => {
            // The refusal is sent with the request's body unread, so hyper closes the
            // connection after it. Saying so lets a client that keeps connections alive (the
            // Python SDK's httpx does) open a new one instead of sending its next request
            // (its OAuth discovery, say) on a connection being closed: "server disconnected".
            refusal.headers_mut().insert(header::CONNECTION, axum::http::HeaderValue::from_static("close"));
            Err(refusal)
        }
    }
}

/// The checks of [`authenticate`]: the request's parts with a [`GatewayCtx`] inserted, or the
/// refusal to answer.
async fn admit(state: &AppState, mut parts: axum::http::request::Parts) -> Result<axum::http::request::Parts, Response> {
    if let Some(origin) = parts.headers.get(header::ORIGIN)
        && !allowed_origin(origin.to_str().unwrap_or(""), state.config.public_origin())
    {
        return Err(problem(StatusCode::FORBIDDEN, "origin_mismatch", "cross-origin request refused", None));
    }
    // An OAuth access token (MCP authorization) or machine credentials; a 401 names the
    // endpoint's protected resource metadata either way, so an MCP client can authorize.
    // The inner futures are boxed so this middleware's own future stays small: axum moves it
    // on every request, and unboxed it carried the largest of them inline (callgrind showed
    // kilobytes copied per call).
    let oauth = crate::mcp_auth::bearer(&parts.headers).map(str::to_owned);
    let authenticated = match &oauth {
        Some(token) => Box::pin(crate::mcp_auth::authenticate(state, &mut parts, token)).await,
        None => Box::pin(TenantCtx::from_request_parts(&mut parts, state)).await,
    };
    let ctx = match authenticated {
        Ok(ctx) => ctx,
        // A suspended tenant's endpoints answer like a suspended workspace's (issue 7 §2);
        // the management API keeps `tenant_suspended`.
        Err(Error::Forbidden { code: "tenant_suspended", .. }) => {
            let message = "this workspace's tenant is suspended".into();
            return Err(Error::Forbidden { code: "workspace_suspended", message }.into_response());
        }
        Err(e) => return Err(crate::mcp_auth::challenge(&state.config, parts.uri.path(), e, oauth.is_some())),
    };
    let (actor_id, caller) = match &ctx.actor {
        Actor::Machine { token_id, role, member_id, .. } => {
            (token_id.to_string(), workspaces::config::Caller { role: *role, member_id: *member_id })
        }
        Actor::Person { .. } => {
            return Err(Error::Forbidden {
                code: "machine_credentials_required",
                message: "the MCP endpoint takes machine credentials".into(),
            }
            .into_response());
        }
    };
    if let Err(e) = ctx.require(Permission::ConnectorAccess) {
        return Err(e.into_response());
    }
    let (slug, pool_name) = match crate::extract::path_params(&mut parts, ["workspace", "pool"]).await {
        Some([workspace, pool]) => (workspace.unwrap_or_default(), pool),
        None => return Err(Error::NotFound { what: "workspace" }.into_response()),
    };
    let bound = match bound(state, &ctx, slug).await {
        Ok(bound) => bound,
        Err(e) => return Err(e.into_response()),
    };
    match bound.workspace.status.as_str() {
        "active" => {}
        "suspended" => {
            return Err(
                Error::Forbidden { code: "workspace_suspended", message: "this workspace is suspended".into() }.into_response()
            );
        }
        _ => return Err(Error::NotFound { what: "workspace" }.into_response()),
    }
    let pool = match pool_name {
        None => None,
        Some(name) => match bound.document.pools.get(&name) {
            Some(p) => Some((name, p.clone())),
            None => return Err(Error::NotFound { what: "pool" }.into_response()),
        },
    };
    tracing::Span::current().record("tenant_id", tracing::field::display(ctx.tenant.id.0));
    parts.extensions.insert(GatewayCtx {
        tenant: ctx.tenant.clone(),
        bound,
        actor_kind: if oauth.is_some() { "oauth" } else { "token" },
        actor_id,
        request_id: ctx.audit.request_id.clone(),
        caller,
        pool,
        client: None,
        peer_path: Vec::new(),
        upstream: None,
        input: None,
        param_headers: None,
    });
    Ok(parts)
}

/// The workspace's bound configuration: this replica's copy while the tenant's epoch (read by
/// machine authentication for this very request) still matches, else read again.
#[tracing::instrument(name = "gateway::bound", skip_all, fields(tenant = %ctx.tenant.id, workspace = %slug))]
async fn bound(state: &AppState, ctx: &TenantCtx, slug: String) -> crate::error::Result<Arc<Bound>> {
    let key = (ctx.tenant.id, slug);
    if let Some(bound) = state.bound.current(&key, ctx.epoch) {
        return Ok(bound);
    }
    // Boxed, so the database read's future (5 KB) is allocated and moved only on a miss: inline,
    // every call moved it into a box of its own (callgrind: a fifth of the memcpy per call).
    Box::pin(read_bound(state, key)).await
}

/// [`bound`] on a miss (and a peer's target on one, `peer::target_bound`): the workspace's
/// bound configuration from the database, cached.
async fn read_bound(state: &AppState, key: (crate::ids::TenantId, String)) -> crate::error::Result<Arc<Bound>> {
    let bound = Arc::new(workspaces::bound(&state.db, key.0, &key.1).await?);
    surface::configured(state, key.0, &bound);
    state.bound.put(key, bound.clone(), bound.epoch);
    Ok(bound)
}

/// A browser-sent `Origin` must be the public URL's origin or a loopback one (a local tool);
/// anything else is a page elsewhere reaching in, as DNS rebinding would (refused).
pub fn allowed_origin(origin: &str, public_origin: &str) -> bool {
    if origin == public_origin {
        return true;
    }
    let Ok(url) = url::Url::parse(origin) else { return false };
    match url.host() {
        Some(url::Host::Domain(d)) => d == "localhost",
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        None => false,
    }
}
