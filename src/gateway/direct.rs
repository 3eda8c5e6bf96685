//! The endpoint's direct path for the requests agents send most, and for those whose
//! downstream may talk back to the agent while they run: on the handshake-era revisions (no
//! per-request protocol metadata, no SEP-2243 headers), a lone `tools/call` POST, and a
//! native pool's `prompts/get` and `resources/read`; `_meta` may carry a progress token.
//!
//! rmcp's stateless server answers such a request by parsing it into its message model,
//! spawning a service task with its own channels and cancellation token, and serializing the
//! reply back. That machinery was most of the gateway's own CPU per call. This path parses
//! the same body into a small struct, runs the very same handler ([`super::call_tool`],
//! [`super::surface::native_request`]), and writes the JSON-RPC response rmcp would have
//! written, byte for byte (tested in `tests/gateway.rs`). Anything it does not recognise
//! exactly (another method, a batch, other `_meta`, an unknown field, the 2026 revision, a
//! `Mcp-Method` header, an event-stream-only client…) is handed to rmcp unchanged, so the
//! protocol's checks stay rmcp's. When the downstream sends progress or log messages, or asks
//! the agent something (sampling, elicitation, roots: [`super::asks`]) while the request
//! runs, the answer becomes an event stream, as rmcp's would; rmcp's own stateless path
//! cannot carry the agent's answers to such requests, which is why these requests come here.

use std::sync::{
    Arc,
    atomic::{AtomicU64, Ordering},
};

use axum::{
    body::{Body, Bytes},
    extract::Request,
    http::{HeaderMap, HeaderValue, Method, StatusCode, header, request::Parts},
    response::{IntoResponse, Response},
};
use rmcp::model::{
    GetPromptRequestParams, GetPromptResponse, JsonObject, ProgressToken, ProtocolVersion, ReadResourceRequestParams,
    ReadResourceResponse, ServerResult,
};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{
    GatewayCtx,
    upstream::{Queue, Upstream},
};
use crate::{
    AppState,
    error::{Error, problem},
};

/// The request header that names the agent's protocol revision, parsed once (a lookup by text
/// parses the name on every request).
const PROTOCOL_VERSION: axum::http::HeaderName = axum::http::HeaderName::from_static("mcp-protocol-version");

/// What rmcp reports as a stateless request's client: its default implementation (made once).
static STATELESS_CLIENT: std::sync::LazyLock<Arc<(String, String)>> = std::sync::LazyLock::new(|| {
    let client = rmcp::model::Implementation::default();
    Arc::new((client.name, client.version))
});

/// POSTs answered by this path, and by rmcp (for `/metrics`).
pub static DIRECT: AtomicU64 = AtomicU64::new(0);
pub static RMCP: AtomicU64 = AtomicU64::new(0);

/// A `tools/call` request exactly as this path takes it; any other field sends the request
/// to rmcp.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CallRequest<'a> {
    #[serde(borrow)]
    jsonrpc: &'a str,
    id: Value,
    #[serde(borrow)]
    method: &'a str,
    params: CallParams,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CallParams {
    name: String,
    #[serde(default)]
    arguments: Option<JsonObject>,
    #[serde(rename = "_meta", default)]
    meta: Option<PlainMeta>,
}

/// A request's `_meta` as this path takes it: a progress token and nothing else (any other key
/// may be protocol metadata, which rmcp judges).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PlainMeta {
    #[serde(rename = "progressToken")]
    progress_token: ProgressToken,
}

/// A native pool's `prompts/get` or `resources/read` as this path takes it (handshake era):
/// relayed with the agent's response stream, so a downstream may ask the agent during it.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RelayRequest<'a> {
    #[serde(borrow)]
    jsonrpc: &'a str,
    id: Value,
    #[serde(borrow)]
    method: &'a str,
    params: JsonObject,
}

/// What this path runs for a request.
enum Work {
    Call {
        name: String,
        arguments: Option<JsonObject>,
    },
    /// `prompts/get` or `resources/read` of a native pool, its params as rmcp's typed
    /// params serialize them.
    Relay {
        method: &'static str,
        params: Value,
    },
}

#[derive(Serialize)]
struct CallResponse<'a> {
    jsonrpc: &'static str,
    id: &'a Value,
    #[serde(skip_serializing_if = "Option::is_none")]
    result: Option<&'a ServerResult>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<&'a rmcp::ErrorData>,
}

/// A request's answer: its result, or the downstream's JSON-RPC error (a native pool's).
type Answered = Result<ServerResult, rmcp::ErrorData>;

/// Whether the request says its body is JSON (any other body is rmcp's to refuse, with 415).
fn json_body(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(';').next().unwrap_or("").trim().eq_ignore_ascii_case("application/json"))
}

/// Whether the headers of a JSON POST let rmcp serve it statelessly with no checks beyond the
/// ones this path repeats: a client that accepts both JSON and event streams, no session, and
/// a handshake-era revision (or none) with no SEP-2243 headers.
fn plain(headers: &HeaderMap) -> bool {
    // Only the plain spelling of Accept is taken here (no weights, no parameters); rmcp judges
    // every other spelling.
    let mut accepts_json = false;
    let mut accepts_sse = false;
    for value in headers.get_all(header::ACCEPT) {
        let Ok(value) = value.to_str() else { return false };
        for entry in value.split(',') {
            match entry.trim() {
                e if e.eq_ignore_ascii_case("application/json") => accepts_json = true,
                e if e.eq_ignore_ascii_case("text/event-stream") => accepts_sse = true,
                e if e.contains(';') || e.contains('"') => return false,
                _ => {}
            }
        }
    }
    let handshake_era = match headers.get(PROTOCOL_VERSION) {
        None => true,
        Some(v) => v.to_str().is_ok_and(|v| {
            v < ProtocolVersion::V_2026_07_28.as_str() && ProtocolVersion::KNOWN_VERSIONS.iter().any(|k| k.as_str() == v)
        }),
    };
    // The session id is the one this endpoint gave at `initialize`; nothing looks it up.
    let other_mcp_headers = headers
        .keys()
        .any(|k| k.as_str().starts_with("mcp-") && !matches!(k.as_str(), "mcp-protocol-version" | super::listen::SESSION_ID));
    accepts_json && accepts_sse && handshake_era && !other_mcp_headers
}

/// The endpoint: a plain `tools/call` here, everything else by rmcp (`rmcp` makes its service).
/// A JSON body that is no JSON-RPC message is answered here too, as the protocol says
/// ([`super::jsonrpc`]); rmcp would answer it 415.
#[tracing::instrument(name = "gateway::endpoint", skip_all, fields(tenant, workspace))]
pub async fn endpoint<S, B>(state: AppState, rmcp: impl FnOnce() -> S, request: Request) -> Response
where
    S: tower::Service<Request, Response = axum::http::Response<B>, Error = std::convert::Infallible>,
    B: axum::body::HttpBody<Data = Bytes> + Send + 'static,
    B::Error: Into<axum::BoxError>,
{
    use tower::ServiceExt;
    if let Some(ctx) = request.extensions().get::<GatewayCtx>() {
        let span = tracing::Span::current();
        span.record("tenant", tracing::field::display(ctx.tenant.id));
        span.record("workspace", ctx.bound.workspace.slug.as_str());
    }
    if request.method() == Method::GET && event_stream_wanted(request.headers()) {
        let (mut parts, _) = request.into_parts();
        let Some(ctx) = parts.extensions.remove::<GatewayCtx>() else {
            return Error::Internal(anyhow::anyhow!("request not authenticated")).into_response();
        };
        let session = super::listen::session_id(&parts.headers).map(|id| super::subscriptions::listener(id, &ctx));
        return super::listen::stream(state, ctx, super::listen::Listener::Get { session });
    }
    if request.method() != Method::POST || !json_body(request.headers()) {
        if request.method() == Method::POST {
            RMCP.fetch_add(1, Ordering::Relaxed);
        }
        return rmcp().oneshot(request).await.unwrap_or_else(|never| match never {}).map(Body::new);
    }
    let direct = plain(request.headers());
    let (parts, body) = request.into_parts();
    let bytes = match axum::body::to_bytes(body, usize::MAX).await {
        Ok(bytes) => bytes,
        Err(e) => {
            let e = e.into_inner();
            let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(&*e);
            while let Some(c) = cause {
                if c.is::<http_body_util::LengthLimitError>() {
                    return Error::PayloadTooLarge.into_response();
                }
                cause = c.source();
            }
            return problem(StatusCode::BAD_REQUEST, "bad_request", "the request body could not be read", None);
        }
    };
    if direct && let Some(call) = plain_call(&bytes) {
        DIRECT.fetch_add(1, Ordering::Relaxed);
        let CallRequest { id, params: CallParams { name, arguments, meta }, .. } = call;
        return answer(state, parts, id, meta.map(|m| m.progress_token), Work::Call { name, arguments }).await;
    }
    if direct && let Some((id, progress, work)) = relayable(&parts, &bytes) {
        DIRECT.fetch_add(1, Ordering::Relaxed);
        return answer(state, parts, id, progress, work).await;
    }
    // 2026-07-28's notification stream: served here, since rmcp's stateless JSON answers
    // cannot stay open (after the direct path, which takes only handshake-era requests, so a
    // plain call pays nothing for it).
    if let Some((id, lists, uris)) = super::listen::subscription(&parts.headers, &bytes) {
        let mut parts = parts;
        let Some(ctx) = parts.extensions.remove::<GatewayCtx>() else {
            return Error::Internal(anyhow::anyhow!("request not authenticated")).into_response();
        };
        return super::listen::stream(state, ctx, super::listen::Listener::Subscription { id, lists, uris });
    }
    // An agent's answer to a request the gateway relayed to it during a call.
    // Boxed: rare, and kilobytes that every plain call's future would otherwise carry.
    if let Some(answered) = Box::pin(super::asks::answered(&state, &parts, &bytes)).await {
        return answered;
    }
    RMCP.fetch_add(1, Ordering::Relaxed);
    // Checked only here, off the direct path: a body it took is a JSON-RPC request.
    if let Some(refusal) = super::jsonrpc::refusal(&bytes) {
        return refusal.into_response();
    }
    let initialize = serde_json::from_slice::<MethodOnly>(&bytes).is_ok_and(|m| m.method == Some("initialize"))
        && !parts.headers.contains_key(super::listen::SESSION_ID);
    // Bytes share their buffer: the handshake's session id reads what the agent declared.
    let body = initialize.then(|| bytes.clone());
    let mut response =
        rmcp().oneshot(Request::from_parts(parts, Body::from(bytes))).await.unwrap_or_else(|never| match never {}).map(Body::new);
    // A handshake gets a session id, which names the connection (the GET stream)
    // and nothing more: every replica serves every request of it.
    if initialize && response.status() == StatusCode::OK {
        response.headers_mut().insert(super::listen::SESSION_ID, super::asks::session_id(body.as_deref().unwrap_or_default()));
    }
    response
}

/// The body as this path takes it: a lone handshake-era `tools/call` with an integer or string
/// id; `None` sends it to rmcp.
fn plain_call(bytes: &[u8]) -> Option<CallRequest<'_>> {
    serde_json::from_slice::<CallRequest>(bytes)
        .ok()
        .filter(|call| call.jsonrpc == "2.0" && call.method == "tools/call" && (call.id.is_i64() || call.id.is_string()))
}

/// Just a request's method, to see an `initialize`.
#[derive(Deserialize)]
struct MethodOnly<'a> {
    #[serde(borrow, default)]
    method: Option<&'a str>,
}

/// A GET the endpoint serves itself: one that asks for an event stream on a handshake-era
/// revision (2026-07-28 has no GET stream; rmcp answers 405 to it and to any other GET).
fn event_stream_wanted(headers: &HeaderMap) -> bool {
    let sse = headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.split(',').any(|e| e.split(';').next().unwrap_or("").trim().eq_ignore_ascii_case("text/event-stream")));
    let handshake_era =
        headers.get(PROTOCOL_VERSION).is_none_or(|v| v.to_str().is_ok_and(|v| v < ProtocolVersion::V_2026_07_28.as_str()));
    sse && handshake_era
}

/// A native pool's `prompts/get` or `resources/read` this path serves: its id, progress
/// token and params (typed as rmcp types them, so what goes down is what rmcp's path sends).
/// Anything else, or anything unusual about it, is rmcp's.
fn relayable(parts: &Parts, bytes: &[u8]) -> Option<(Value, Option<ProgressToken>, Work)> {
    let native = parts.extensions.get::<GatewayCtx>()?.pool.as_ref().is_some_and(|(_, p)| p.native);
    if !native {
        return None;
    }
    relay_work(bytes)
}

/// A `prompts/get` or `resources/read` body as [`relayable`] takes it (for a native pool).
fn relay_work(bytes: &[u8]) -> Option<(Value, Option<ProgressToken>, Work)> {
    let request = serde_json::from_slice::<RelayRequest>(bytes).ok()?;
    if request.jsonrpc != "2.0" || !(request.id.is_i64() || request.id.is_string()) {
        return None;
    }
    let progress = match request.params.get("_meta") {
        None => None,
        Some(meta) => Some(serde_json::from_value::<PlainMeta>(meta.clone()).ok()?.progress_token),
    };
    let params = Value::Object(request.params);
    let (method, params) = match request.method {
        "prompts/get" => {
            ("prompts/get", super::handler::params(serde_json::from_value::<GetPromptRequestParams>(params).ok()?).ok()?)
        }
        "resources/read" => {
            ("resources/read", super::handler::params(serde_json::from_value::<ReadResourceRequestParams>(params).ok()?).ok()?)
        }
        _ => return None,
    };
    Some((request.id, progress, Work::Relay { method, params }))
}

/// What `work` answers, as rmcp's handler answers it ([`super::Gateway`]).
async fn run(state: AppState, ctx: GatewayCtx, work: Work) -> Answered {
    match work {
        Work::Call { name, arguments } => {
            super::call_tool(&state, ctx, &name, arguments.unwrap_or_default()).await.map(ServerResult::CallToolResult)
        }
        Work::Relay { method, params } => {
            let answer = Box::pin(super::surface::native_request(&state, &ctx, method, params)).await?;
            Ok(if method == "prompts/get" {
                ServerResult::from(GetPromptResponse::Complete(super::handler::relayed(answer)?))
            } else {
                ServerResult::from(ReadResourceResponse::Complete(super::handler::relayed(answer)?))
            })
        }
    }
}

async fn answer(state: AppState, mut parts: Parts, id: Value, progress: Option<ProgressToken>, work: Work) -> Response {
    // The request is answered here, so its context is taken, not copied.
    let Some(mut ctx) = parts.extensions.remove::<GatewayCtx>() else {
        return Error::Internal(anyhow::anyhow!("request not authenticated")).into_response();
    };
    ctx.client = Some(STATELESS_CLIENT.clone());
    // The downstream's notifications and requests for this call wait here until written to
    // the agent.
    let queue = Arc::new(Queue::default());
    let asker = super::asks::Asker::of(&state, &ctx, super::asks::Declared::of_headers(&parts.headers));
    let session = super::listen::session_id(&parts.headers).map(|id| {
        let listener = super::subscriptions::listener(id, &ctx);
        super::log_levels::SessionLevel::new(state.log_levels.clone(), ctx.tenant.id, listener)
    });
    ctx.upstream = Some(Upstream::queue(queue.clone(), asker, progress).in_session(session));
    let mut running = Box::pin(run(state, ctx, work));
    let first = tokio::select! {
        biased;
        result = &mut running => {
            let pending = queue.drain();
            if pending.is_empty() {
                return json_response(&id, result);
            }
            // Messages came just before the result: they go first, on an event stream.
            let events = pending.iter().map(Vec::as_slice).map(event).chain(std::iter::once(response_event(&id, result)));
            return event_stream(futures::stream::iter(events.map(Ok::<_, std::convert::Infallible>).collect::<Vec<_>>()));
        }
        first = queue.next() => first,
    };
    // A message before the result: the answer becomes an event stream that carries the call's
    // messages as they come, then the result.
    let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(16);
    tokio::spawn(async move {
        let _ = tx.send(event(&first)).await;
        let result = loop {
            tokio::select! {
                biased;
                result = &mut running => break result,
                message = queue.next() => { let _ = tx.send(event(&message)).await; }
            }
        };
        for message in queue.drain() {
            let _ = tx.send(event(&message)).await;
        }
        let _ = tx.send(response_event(&id, result)).await;
    });
    let events =
        futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|e| (Ok::<_, std::convert::Infallible>(e), rx)) });
    event_stream(events)
}

/// The answer as rmcp's handler gives it to a peer on a revision before 2026-07-28 (the only
/// ones this path takes): no `resultType: "complete"`, structured content only as an object;
/// a JSON-RPC error as such (HTTP 200).
fn legacy(answered: Answered) -> (Option<ServerResult>, Option<rmcp::ErrorData>) {
    match answered {
        Ok(mut result) => {
            result.strip_result_type_for_legacy_peer();
            result.strip_non_object_output_for_legacy_peer();
            (Some(result), None)
        }
        Err(error) => (None, Some(error)),
    }
}

fn json_response(id: &Value, answered: Answered) -> Response {
    let (result, error) = legacy(answered);
    let body = CallResponse { jsonrpc: "2.0", id, result: result.as_ref(), error: error.as_ref() };
    match serde_json::to_vec(&body) {
        Ok(bytes) => ([(header::CONTENT_TYPE, HeaderValue::from_static("application/json"))], Bytes::from(bytes)).into_response(),
        Err(e) => Error::Internal(anyhow::anyhow!("the result could not be serialized: {e}")).into_response(),
    }
}

/// One event of an event-stream answer.
fn sse(json: &[u8]) -> Bytes {
    let mut out = Vec::with_capacity(json.len() + 20);
    out.extend_from_slice(b"event: message\ndata: ");
    out.extend_from_slice(json);
    out.extend_from_slice(b"\n\n");
    Bytes::from(out)
}

fn event(message: &[u8]) -> Bytes {
    sse(message)
}

fn response_event(id: &Value, answered: Answered) -> Bytes {
    let (result, error) = legacy(answered);
    sse(&serde_json::to_vec(&CallResponse { jsonrpc: "2.0", id, result: result.as_ref(), error: error.as_ref() })
        .unwrap_or_default())
}

fn event_stream(events: impl futures::Stream<Item = Result<Bytes, std::convert::Infallible>> + Send + 'static) -> Response {
    let body = Body::from_stream(events);
    (
        [
            (header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream")),
            (header::CACHE_CONTROL, HeaderValue::from_static("no-cache")),
        ],
        body,
    )
        .into_response()
}

/// The direct path's parsers and writers, reached by the fuzz targets (`fuzz/`) only.
#[doc(hidden)]
pub mod fuzzing {
    use rmcp::model::{JsonObject, ProgressToken, ServerResult};
    use serde_json::Value;

    use super::Work;

    /// A plain `tools/call` as the path takes it: (id, tool name, arguments, progress token).
    pub fn call(bytes: &[u8]) -> Option<(Value, String, Option<JsonObject>, Option<ProgressToken>)> {
        super::plain_call(bytes).map(|c| (c.id, c.params.name, c.params.arguments, c.params.meta.map(|m| m.progress_token)))
    }

    /// A relayed request as the path takes it: (id, progress token, method, params as sent down).
    pub fn relay(bytes: &[u8]) -> Option<(Value, Option<ProgressToken>, &'static str, Value)> {
        let (id, progress, Work::Relay { method, params }) = super::relay_work(bytes)? else { return None };
        Some((id, progress, method, params))
    }

    /// The JSON body and the event-stream event the path answers `id` with.
    pub fn answers(id: &Value, answered: Result<ServerResult, rmcp::ErrorData>) -> (Vec<u8>, Vec<u8>) {
        let event = super::response_event(id, answered.clone()).to_vec();
        let (result, error) = super::legacy(answered);
        let body = super::CallResponse { jsonrpc: "2.0", id, result: result.as_ref(), error: error.as_ref() };
        (serde_json::to_vec(&body).unwrap_or_default(), event)
    }
}
