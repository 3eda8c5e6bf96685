//! The MCP endpoint: `/t/{tenant}/w/{workspace}/mcp`, streamable HTTP, stateless (any replica
//! serves any request), machine-authenticated, over the workspace's connectors.

pub mod activity;
pub mod asks;
pub mod catalogs;
pub mod credentials;
pub mod direct;
pub mod downstream;
pub mod http_api_connector;
pub mod input;
pub mod jsonrpc;
pub mod listen;
pub mod mcp_client;
pub mod param_headers;
pub mod peer;
pub mod pins;
pub mod replay;
pub mod sse;
pub mod stash;
pub mod surface;
pub mod upstream;

use std::{sync::Arc, time::Instant};

use axum::{
    Router,
    extract::{FromRequestParts, RawPathParams, Request, State},
    http::{StatusCode, header},
    middleware::{self, Next},
    response::{IntoResponse, Response},
};
use rmcp::{
    ErrorData as McpError, RoleServer, ServerHandler,
    model::{
        CallToolRequestParams, CallToolResponse, CallToolResult, CompleteRequestParams, CompleteResult, DiscoverResult,
        ErrorCode, GetPromptRequestParams, GetPromptResponse, Implementation, InitializeRequestParams, InitializeResult,
        ListPromptsResult, ListResourceTemplatesResult, ListResourcesResult, ListToolsResult, PaginatedRequestParams,
        ProtocolVersion, ReadResourceRequestParams, ReadResourceResponse, ResultType, ServerCapabilities, ServerConfig,
    },
    service::RequestContext,
    transport::{StreamableHttpServerConfig, StreamableHttpService, streamable_http_server::session::never::NeverSessionManager},
};

use crate::{
    AppState,
    auth::{Actor, TenantCtx, TenantRef},
    error::{Error, problem},
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
    /// The MCP client's name and version, once the call's request is parsed.
    pub client: Option<(String, String)>,
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

/// The endpoint's routes, authenticated by [`authenticate`].
pub fn router(state: &AppState) -> Router<AppState> {
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
    let service = Arc::new(service);
    let endpoint = axum::routing::any(move |State(state): State<AppState>, request: Request| {
        let service = service.clone();
        async move { direct::endpoint(state, move || (*service).clone(), request.map(axum::body::Body::new)).await }
    });
    Router::new()
        .route("/t/{tenant}/w/{workspace}/mcp", endpoint.clone())
        .route("/t/{tenant}/w/{workspace}/mcp/{pool}", endpoint)
        .route_layer(middleware::from_fn_with_state(state.clone(), authenticate))
}

/// Origin check (DNS-rebinding protection), machine authentication, the caller's
/// `connector_access`, and the workspace's bound configuration, in that order.
async fn authenticate(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let (parts, body) = request.into_parts();
    match Box::pin(admit(&state, parts)).await {
        Ok(parts) => next.run(Request::from_parts(parts, body)).await,
        Err(mut refusal) => {
            // The refusal is sent with the request's body unread, so hyper closes the
            // connection after it. Saying so lets a client that keeps connections alive (the
            // Python SDK's httpx does) open a new one instead of sending its next request
            // (its OAuth discovery, say) on a connection being closed: "server disconnected".
            refusal.headers_mut().insert(header::CONNECTION, axum::http::HeaderValue::from_static("close"));
            refusal
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
    let (slug, pool_name) = match RawPathParams::from_request_parts(&mut parts, state).await {
        Ok(params) => {
            let get = |name: &str| params.iter().find(|(k, _)| *k == name).map(|(_, v)| v.to_owned());
            (get("workspace").unwrap_or_default(), get("pool"))
        }
        Err(_) => return Err(Error::NotFound { what: "workspace" }.into_response()),
    };
    let bound = match Box::pin(bound(state, &ctx, slug)).await {
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
async fn bound(state: &AppState, ctx: &TenantCtx, slug: String) -> crate::error::Result<Arc<Bound>> {
    let key = (ctx.tenant.id, slug);
    if let (Some(epoch), Some((bound, label))) = (ctx.epoch, state.bound.get(&key))
        && epoch == label
    {
        state.bound.count(true);
        return Ok(bound);
    }
    state.bound.count(false);
    let bound = Arc::new(workspaces::bound(&state.db, ctx.tenant.id, &key.1).await?);
    surface::configured(state, ctx.tenant.id, &bound);
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

/// The MCP server handler; one per request (stateless).
#[derive(Clone)]
pub struct Gateway {
    state: AppState,
}

fn gateway_ctx(cx: &RequestContext<RoleServer>) -> Result<GatewayCtx, McpError> {
    cx.extensions
        .get::<axum::http::request::Parts>()
        .and_then(|parts| parts.extensions.get::<GatewayCtx>())
        .cloned()
        .ok_or_else(|| McpError::internal_error("request not authenticated", None))
}

/// The context of a request that came through a native pool; anything else has only tools,
/// so the method is not found.
fn native_ctx(cx: &RequestContext<RoleServer>, method: &str) -> Result<GatewayCtx, McpError> {
    let ctx = gateway_ctx(cx)?;
    if ctx.pool.as_ref().is_some_and(|(_, p)| p.native) {
        Ok(ctx)
    } else {
        Err(McpError::new(ErrorCode::METHOD_NOT_FOUND, method.to_owned(), None))
    }
}

/// A relayed answer as the typed result rmcp sends. A downstream spoken to at a handshake-era
/// revision sends no `resultType`, which 2026-07-28 requires on every result: a result that
/// names none is complete. rmcp strips `"complete"` again for peers on older revisions, so
/// they see the downstream's shape unchanged.
fn relayed<T: serde::de::DeserializeOwned>(mut value: serde_json::Value) -> Result<T, McpError> {
    if let serde_json::Value::Object(map) = &mut value {
        map.entry("resultType").or_insert_with(|| serde_json::Value::String(ResultType::COMPLETE.as_str().to_owned()));
    }
    serde_json::from_value(value)
        .map_err(|e| McpError::internal_error(format!("the downstream's answer is not a valid result: {e}"), None))
}

/// A request's params as JSON, to relay them.
fn params(request: impl serde::Serialize) -> Result<serde_json::Value, McpError> {
    serde_json::to_value(request).map_err(|e| McpError::invalid_params(e.to_string(), None))
}

/// Whether the request is on 2026-07-28 or later, whose cacheable results carry caching hints.
fn hinted(cx: &RequestContext<RoleServer>) -> bool {
    cx.protocol_version().is_some_and(|v| v.as_str() >= ProtocolVersion::V_2026_07_28.as_str())
}

impl ServerHandler for Gateway {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("gatehouse", env!("CARGO_PKG_VERSION")))
            .with_instructions(surface::INSTRUCTIONS)
    }

    /// A native pool declares what its downstreams declare, with their instructions.
    async fn initialize(
        &self,
        request: InitializeRequestParams,
        cx: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, McpError> {
        cx.peer.set_peer_info(request.clone());
        let mut info = self.negotiate_initialize(&request)?;
        if let Ok(ctx) = native_ctx(&cx, "initialize") {
            let (capabilities, instructions) = Box::pin(surface::native_server(&self.state, &ctx)).await;
            info.capabilities = relayed(capabilities)?;
            info.instructions = instructions;
        }
        Ok(info)
    }

    /// `server/discover` (2026-07-28): what `initialize` declares, for a native pool its
    /// downstreams' capabilities and instructions.
    async fn discover(&self, cx: RequestContext<RoleServer>) -> Result<DiscoverResult, McpError> {
        let mut result = DiscoverResult::from_server_info(self.supported_protocol_versions().into_owned(), self.get_info());
        if let Ok(ctx) = native_ctx(&cx, "server/discover") {
            let (capabilities, instructions) = Box::pin(surface::native_server(&self.state, &ctx)).await;
            result.capabilities = relayed(capabilities)?;
            result.instructions = instructions;
        }
        Ok(result)
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        cx: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, McpError> {
        let ctx = native_ctx(&cx, "prompts/list")?;
        relayed(Box::pin(surface::native_list(&self.state, &ctx, "prompts/list", "prompts", hinted(&cx))).await)
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        cx: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, McpError> {
        let mut ctx = native_ctx(&cx, "prompts/get")?;
        let responses = request.input_responses.as_ref().map(serde_json::to_value).transpose().map_err(invalid)?;
        ctx.input = input::Agent::of(&cx, responses, request.request_state.clone());
        let answer = Box::pin(surface::native_request(&self.state, &ctx, "prompts/get", params(request)?)).await?;
        if answer["resultType"] == "input_required" {
            return Ok(GetPromptResponse::InputRequired(relayed(answer)?));
        }
        Ok(GetPromptResponse::Complete(relayed(answer)?))
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        cx: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, McpError> {
        let ctx = native_ctx(&cx, "resources/list")?;
        relayed(Box::pin(surface::native_list(&self.state, &ctx, "resources/list", "resources", hinted(&cx))).await)
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        cx: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, McpError> {
        let ctx = native_ctx(&cx, "resources/templates/list")?;
        let method = "resources/templates/list";
        relayed(Box::pin(surface::native_list(&self.state, &ctx, method, "resourceTemplates", hinted(&cx))).await)
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        cx: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, McpError> {
        let mut ctx = native_ctx(&cx, "resources/read")?;
        let responses = request.input_responses.as_ref().map(serde_json::to_value).transpose().map_err(invalid)?;
        ctx.input = input::Agent::of(&cx, responses, request.request_state.clone());
        let mut answer = Box::pin(surface::native_request(&self.state, &ctx, "resources/read", params(request)?)).await?;
        if answer["resultType"] == "input_required" {
            return Ok(ReadResourceResponse::InputRequired(relayed(answer)?));
        }
        // The downstream's own hints stand, but a read filtered per caller is theirs alone.
        if hinted(&cx) && surface::per_caller(&ctx) && answer.is_object() {
            answer["cacheScope"] = serde_json::Value::String("private".into());
        }
        Ok(ReadResourceResponse::Complete(relayed(answer)?))
    }

    /// Relayed to the downstream that has the resource; its updates are not relayed yet, so
    /// the pool does not declare `subscribe` (docs/decisions.md).
    async fn subscribe(
        &self,
        request: rmcp::model::SubscribeRequestParams,
        cx: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let ctx = native_ctx(&cx, "resources/subscribe")?;
        Box::pin(surface::native_request(&self.state, &ctx, "resources/subscribe", params(request)?)).await.map(|_| ())
    }

    async fn unsubscribe(
        &self,
        request: rmcp::model::UnsubscribeRequestParams,
        cx: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let ctx = native_ctx(&cx, "resources/unsubscribe")?;
        Box::pin(surface::native_request(&self.state, &ctx, "resources/unsubscribe", params(request)?)).await.map(|_| ())
    }

    async fn complete(&self, request: CompleteRequestParams, cx: RequestContext<RoleServer>) -> Result<CompleteResult, McpError> {
        let ctx = native_ctx(&cx, "completion/complete")?;
        relayed(Box::pin(surface::native_request(&self.state, &ctx, "completion/complete", params(request)?)).await?)
    }

    /// Relayed for the handshake era (deprecated by the 2026 revision, whose level is per request).
    #[allow(deprecated)]
    async fn set_level(
        &self,
        request: rmcp::model::SetLevelRequestParams,
        cx: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let ctx = native_ctx(&cx, "logging/setLevel")?;
        Box::pin(surface::native_request(&self.state, &ctx, "logging/setLevel", params(request)?)).await.map(|_| ())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        cx: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let ctx = gateway_ctx(&cx)?;
        if ctx.pool.as_ref().is_some_and(|(_, p)| p.native) {
            return Ok(ListToolsResult::with_all_items(Box::pin(surface::native_tools(&self.state, &ctx)).await));
        }
        Ok(ListToolsResult::with_all_items(surface::tools_for(ctx.pool.as_ref().is_some_and(|(_, p)| p.trusted))))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        cx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let mut ctx = gateway_ctx(&cx)?;
        ctx.client = cx.client_info().map(|c| (c.name.clone(), c.version.clone()));
        // One downstream call's notifications are relayed: a native tool's, call_tool's and
        // call_destructive_tool's (execute_code's host calls would interleave several).
        let native = ctx.pool.as_ref().is_some_and(|(_, p)| p.native);
        if native || matches!(request.name.as_ref(), "call_tool" | "call_destructive_tool") {
            ctx.upstream = Some(upstream_of(&cx));
        }
        let responses = request.input_responses.as_ref().map(serde_json::to_value).transpose().map_err(invalid)?;
        ctx.input = input::Agent::of(&cx, responses, request.request_state);
        if native && hinted(&cx) {
            let headers = cx.extensions.get::<axum::http::request::Parts>().map(|p| param_headers::of_request(&p.headers));
            match headers.transpose() {
                Ok(sent) => ctx.param_headers = sent.map(Arc::new),
                Err(reason) => return Err(McpError::header_mismatch(reason, None)),
            }
        }
        let mut outcome = call_outcome(&self.state, ctx, &request.name, request.arguments.unwrap_or_default()).await;
        if native && let Some(error) = outcome.jsonrpc.take() {
            return Err(error);
        }
        match outcome.interim {
            None => Ok(complete(outcome.result).into()),
            Some(surface::Interim::InputRequired(value)) => Ok(CallToolResponse::InputRequired(relayed(value)?)),
            Some(surface::Interim::Refused(refused)) => Err(refused.into_error()),
        }
    }
}

fn invalid(e: serde_json::Error) -> McpError {
    McpError::invalid_params(e.to_string(), None)
}

/// The request's response stream: its progress token, and the log messages it asks for (on
/// 2026-07-28 the request names its level; before, `logging/setLevel` told the downstream).
#[allow(deprecated)]
fn upstream_of(cx: &RequestContext<RoleServer>) -> upstream::Upstream {
    let per_request = cx.meta.protocol_version().is_some();
    let logs = match cx.meta.log_level() {
        Some(level) => upstream::Logs::AtLeast(level),
        None if per_request => upstream::Logs::Off,
        None => upstream::Logs::All,
    };
    upstream::Upstream::peer(cx.peer.clone(), cx.meta.get_progress_token(), logs)
}

/// One `tools/call` at the endpoint, recorded in the activity history: the handler of both
/// rmcp's path and the [`direct`] one. Through a native pool, a downstream's JSON-RPC error is
/// answered as that error (its code, message and data); the six-tool surface's own tools
/// answer it as a `downstream_error` result.
pub async fn call_tool(
    state: &AppState,
    ctx: GatewayCtx,
    name: &str,
    args: rmcp::model::JsonObject,
) -> Result<CallToolResult, McpError> {
    let native = ctx.pool.as_ref().is_some_and(|(_, p)| p.native);
    // The handshake era (the direct path) carries no agent input, so no call ends interim.
    let mut outcome = call_outcome(state, ctx, name, args).await;
    if native && let Some(error) = outcome.jsonrpc.take() {
        return Err(error);
    }
    Ok(complete(outcome.result))
}

/// [`call_tool`]'s outcome, which on 2026-07-28 may be an interim answer.
async fn call_outcome(state: &AppState, ctx: GatewayCtx, name: &str, args: rmcp::model::JsonObject) -> surface::Outcome {
    let started = Instant::now();
    let native = ctx.pool.as_ref().is_some_and(|(_, p)| p.native);
    let outcome = if native {
        Box::pin(surface::native_call(state, &ctx, name, args)).await
    } else {
        surface::dispatch(state, &ctx, name, args).await
    };
    state.activity.record(activity::Row::of_call(&ctx, name, &outcome, started, "mcp"));
    outcome
}

/// A result passed through from a downstream on a handshake-era revision carries no
/// `resultType`, which 2026-07-28 requires on every result. rmcp (and the direct path) strip
/// it again for peers on older revisions, so they see no change.
fn complete(mut result: CallToolResult) -> CallToolResult {
    result.result_type.get_or_insert(ResultType::COMPLETE);
    result
}
