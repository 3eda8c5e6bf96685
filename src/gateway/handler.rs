//! The MCP endpoint's handler for what rmcp serves (everything but the [`super::direct`]
//! path's plain calls and notification streams): the six-tool surface, or a native pool's
//! relayed tools, prompts, resources, completion and logging, on both revisions.

use std::{sync::Arc, time::Instant};

use rmcp::{
    ErrorData as McpError, RoleServer, ServerHandler,
    model::{
        CallToolRequestParams, CallToolResponse, CallToolResult, CompleteRequestParams, CompleteResult, DiscoverResult,
        ErrorCode, GetPromptRequestParams, GetPromptResponse, Implementation, InitializeRequestParams, InitializeResult,
        ListPromptsResult, ListResourceTemplatesResult, ListResourcesResult, ListToolsResult, PaginatedRequestParams,
        ProtocolVersion, ReadResourceRequestParams, ReadResourceResponse, ResultType, ServerCapabilities, ServerConfig,
    },
    service::RequestContext,
};

use super::{GatewayCtx, activity, input, param_headers, subscriptions, surface, upstream};
use crate::AppState;

/// The MCP server handler; one per request (stateless).
#[derive(Clone)]
pub struct Gateway {
    pub(super) state: AppState,
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
pub(super) fn relayed<T: serde::de::DeserializeOwned>(mut value: serde_json::Value) -> Result<T, McpError> {
    if let serde_json::Value::Object(map) = &mut value {
        map.entry("resultType").or_insert_with(|| serde_json::Value::String(ResultType::COMPLETE.as_str().to_owned()));
    }
    serde_json::from_value(value)
        .map_err(|e| McpError::internal_error(format!("the downstream's answer is not a valid result: {e}"), None))
}

/// A request's params as JSON, to relay them.
pub(super) fn params(request: impl serde::Serialize) -> Result<serde_json::Value, McpError> {
    serde_json::to_value(request).map_err(|e| McpError::invalid_params(e.to_string(), None))
}

/// The `Mcp-Session-Id` the endpoint gave the handshake-era agent at `initialize`, if the
/// request presents one.
fn session_of(cx: &RequestContext<RoleServer>) -> Option<&str> {
    cx.extensions.get::<axum::http::request::Parts>().and_then(|p| super::listen::session_id(&p.headers))
}

/// The listener of the request's session ([`subscriptions::listener`]): subscriptions need the
/// `Mcp-Session-Id` the endpoint gave at `initialize`, which the GET stream presents too.
fn listener_of(cx: &RequestContext<RoleServer>, ctx: &GatewayCtx) -> Result<[u8; 32], McpError> {
    match session_of(cx) {
        Some(session) => Ok(subscriptions::listener(session, ctx)),
        None => Err(McpError::invalid_request(
            "a subscription belongs to a session: send the Mcp-Session-Id given at initialize (2026-07-28 subscribes with subscriptions/listen)",
            None,
        )),
    }
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
        // What the downstream sends during the request (its notifications; its requests for
        // input, answered by replayed rounds for a 2026-07-28 agent) has a stream to go to.
        ctx.upstream = Some(upstream_of(&self.state, &cx, &ctx));
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
        ctx.upstream = Some(upstream_of(&self.state, &cx, &ctx));
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

    /// Kept for the agent's session ([`subscriptions`]), for whichever replica holds its GET
    /// stream: that replica subscribes at the downstream that holds the resource and passes
    /// its updates on. Only a resource some pooled downstream takes subscriptions for and the
    /// caller may see can be subscribed.
    async fn subscribe(
        &self,
        request: rmcp::model::SubscribeRequestParams,
        cx: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let ctx = native_ctx(&cx, "resources/subscribe")?;
        let listener = listener_of(&cx, &ctx)?;
        let uri = request.uri.to_string();
        if surface::subscribable(&self.state, &ctx, std::slice::from_ref(&uri)).await.is_empty() {
            let data = serde_json::json!({ "uri": uri });
            return Err(McpError::invalid_params("no resource here by that URI takes subscriptions", Some(data)));
        }
        let (tenant, workspace) = (ctx.tenant.id, ctx.bound.workspace.id.0);
        match subscriptions::subscribe(&self.state.db, tenant, workspace, &listener, &uri).await {
            Ok(true) => Ok(()),
            Ok(false) => Err(McpError::invalid_params(
                format!("this session has {} subscriptions, the most it may hold", subscriptions::MAX_PER_LISTENER),
                None,
            )),
            Err(e) => Err(McpError::internal_error(e.to_string(), None)),
        }
    }

    async fn unsubscribe(
        &self,
        request: rmcp::model::UnsubscribeRequestParams,
        cx: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let ctx = native_ctx(&cx, "resources/unsubscribe")?;
        let listener = listener_of(&cx, &ctx)?;
        subscriptions::unsubscribe(&self.state.db, ctx.tenant.id, &listener, &request.uri)
            .await
            .map_err(|e| McpError::internal_error(e.to_string(), None))
    }

    async fn complete(&self, request: CompleteRequestParams, cx: RequestContext<RoleServer>) -> Result<CompleteResult, McpError> {
        let ctx = native_ctx(&cx, "completion/complete")?;
        relayed(Box::pin(surface::native_request(&self.state, &ctx, "completion/complete", params(request)?)).await?)
    }

    /// The handshake era's level (deprecated by the 2026 revision, whose level is per
    /// request). With a session it is kept for every replica ([`super::log_levels`]): the
    /// gateway passes on only the messages at or above it, and sends it with each request to a
    /// 2026-07-28 downstream. It is not relayed to handshake-era downstreams then, whose pooled
    /// sessions other agents share; without a session, it is (nothing else could keep it).
    #[allow(deprecated)]
    async fn set_level(
        &self,
        request: rmcp::model::SetLevelRequestParams,
        cx: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let ctx = native_ctx(&cx, "logging/setLevel")?;
        let Some(session) = session_of(&cx) else {
            let relayed = surface::native_request(&self.state, &ctx, "logging/setLevel", params(request)?);
            return Box::pin(relayed).await.map(|_| ());
        };
        let listener = subscriptions::listener(session, &ctx);
        let (tenant, workspace) = (ctx.tenant.id, ctx.bound.workspace.id.0);
        self.state
            .log_levels
            .set(tenant, workspace, &listener, request.level)
            .await
            .map_err(|e| McpError::internal_error(e.to_string(), None))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        cx: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let ctx = gateway_ctx(&cx)?;
        let (tools, hints) = if ctx.pool.as_ref().is_some_and(|(_, p)| p.native) {
            Box::pin(surface::native_tools(&self.state, &ctx)).await?
        } else {
            // The six tools: the same for every caller of the pool, changed only with its
            // configuration (which listening agents are told of).
            let mut hints = surface::Hints::new(false);
            hints.fresh_for(crate::workspaces::CATALOG_TTL.as_millis() as u64);
            (surface::tools_for(ctx.pool.as_ref().is_some_and(|(_, p)| p.trusted)), hints)
        };
        let listed = ListToolsResult::with_all_items(tools);
        Ok(if hinted(&cx) { hints.apply(listed) } else { listed })
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        cx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let mut ctx = gateway_ctx(&cx)?;
        ctx.client = cx.client_info().map(|c| Arc::new((c.name.clone(), c.version.clone())));
        // One downstream call's notifications are relayed: a native tool's, call_tool's and
        // call_destructive_tool's (execute_code's host calls would interleave several).
        let native = ctx.pool.as_ref().is_some_and(|(_, p)| p.native);
        if native || matches!(request.name.as_ref(), "call_tool" | "call_destructive_tool") {
            ctx.upstream = Some(upstream_of(&self.state, &cx, &ctx));
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
        if let Some(error) = outcome.jsonrpc.take_if(|e| native || e.code == surface::URL_ELICITATION_REQUIRED) {
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
/// 2026-07-28 the request names its level; before, the session set it with `logging/setLevel`).
#[allow(deprecated)]
fn upstream_of(state: &AppState, cx: &RequestContext<RoleServer>, ctx: &GatewayCtx) -> upstream::Upstream {
    let per_request = cx.meta.protocol_version().is_some();
    let logs = match cx.meta.log_level() {
        Some(level) => upstream::Logs::AtLeast(level),
        None if per_request => upstream::Logs::Off,
        None => upstream::Logs::All,
    };
    let session = session_of(cx).filter(|_| !per_request).map(|session| {
        super::log_levels::SessionLevel::new(state.log_levels.clone(), ctx.tenant.id, subscriptions::listener(session, ctx))
    });
    upstream::Upstream::peer(cx.peer.clone(), cx.meta.get_progress_token(), logs).in_session(session)
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
    // A held-back write is answered as URLElicitationRequired on every surface when the agent
    // declared URL-mode elicitation (see `surface::hold`).
    if let Some(error) = outcome.jsonrpc.take_if(|e| native || e.code == surface::URL_ELICITATION_REQUIRED) {
        return Err(error);
    }
    Ok(complete(outcome.result))
}

/// [`call_tool`]'s outcome, which on 2026-07-28 may be an interim answer.
#[tracing::instrument(name = "gateway::call_tool", skip_all, fields(tenant = %ctx.tenant.id, workspace = %ctx.bound.workspace.slug, tool = name))]
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
