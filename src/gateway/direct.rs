//! The endpoint's direct path for the one request agents send most: a lone `tools/call` POST
//! in the handshake-era revisions (no per-request protocol metadata, no SEP-2243 headers).
//!
//! rmcp's stateless server answers such a request by parsing it into its message model,
//! spawning a service task with its own channels and cancellation token, and serializing the
//! reply back. That machinery was most of the gateway's own CPU per call. This path parses
//! the same body into a small struct, runs the very same handler ([`super::call_tool`]), and
//! writes the JSON-RPC response rmcp would have written, byte for byte (tested in
//! `tests/gateway.rs`). Anything it does not recognise exactly (another method, a batch,
//! `_meta`, an unknown field, the 2026 revision, a `Mcp-Method` header, an event-stream-only
//! client…) is handed to rmcp unchanged, so the protocol's checks stay rmcp's.

use std::sync::atomic::{AtomicU64, Ordering};

use axum::{
    body::{Body, Bytes},
    extract::Request,
    http::{HeaderMap, HeaderValue, Method, StatusCode, header, request::Parts},
    response::{IntoResponse, Response},
};
use rmcp::model::{JsonObject, ProtocolVersion, ServerResult};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::GatewayCtx;
use crate::{
    AppState,
    error::{Error, problem},
};

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
}

#[derive(Serialize)]
struct CallResponse<'a> {
    jsonrpc: &'static str,
    id: &'a Value,
    result: &'a ServerResult,
}

/// Whether the request's headers let rmcp serve it statelessly with no checks beyond the
/// ones this path repeats: JSON in, a client that accepts both JSON and event streams, no
/// session, and a handshake-era revision (or none) with no SEP-2243 headers.
fn plain(headers: &HeaderMap) -> bool {
    let json_body = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(';').next().unwrap_or("").trim().eq_ignore_ascii_case("application/json"));
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
    let handshake_era = match headers.get("mcp-protocol-version") {
        None => true,
        Some(v) => v.to_str().is_ok_and(|v| {
            v < ProtocolVersion::V_2026_07_28.as_str() && ProtocolVersion::KNOWN_VERSIONS.iter().any(|k| k.as_str() == v)
        }),
    };
    let other_mcp_headers = headers.keys().any(|k| k.as_str().starts_with("mcp-") && k.as_str() != "mcp-protocol-version");
    json_body && accepts_json && accepts_sse && handshake_era && !other_mcp_headers
}

/// The endpoint: a plain `tools/call` here, everything else by rmcp (`rmcp` makes its service).
pub async fn endpoint<S, B>(state: AppState, rmcp: impl FnOnce() -> S, request: Request) -> Response
where
    S: tower::Service<Request, Response = axum::http::Response<B>, Error = std::convert::Infallible>,
    B: axum::body::HttpBody<Data = Bytes> + Send + 'static,
    B::Error: Into<axum::BoxError>,
{
    use tower::ServiceExt;
    if request.method() != Method::POST || !plain(request.headers()) {
        if request.method() == Method::POST {
            RMCP.fetch_add(1, Ordering::Relaxed);
        }
        return rmcp().oneshot(request).await.unwrap_or_else(|never| match never {}).map(Body::new);
    }
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
    match serde_json::from_slice::<CallRequest>(&bytes) {
        Ok(call) if call.jsonrpc == "2.0" && call.method == "tools/call" && (call.id.is_i64() || call.id.is_string()) => {
            DIRECT.fetch_add(1, Ordering::Relaxed);
            answer(&state, parts, call).await
        }
        _ => {
            RMCP.fetch_add(1, Ordering::Relaxed);
            rmcp()
                .oneshot(Request::from_parts(parts, Body::from(bytes)))
                .await
                .unwrap_or_else(|never| match never {})
                .map(Body::new)
        }
    }
}

async fn answer(state: &AppState, mut parts: Parts, call: CallRequest<'_>) -> Response {
    // The request is answered here, so its context is taken, not copied.
    let Some(mut ctx) = parts.extensions.remove::<GatewayCtx>() else {
        return Error::Internal(anyhow::anyhow!("request not authenticated")).into_response();
    };
    // What rmcp reports as a stateless request's client: its default implementation.
    let client = rmcp::model::Implementation::default();
    ctx.client = Some((client.name, client.version));
    let result = super::call_tool(state, ctx, &call.params.name, call.params.arguments.unwrap_or_default()).await;
    // The shape rmcp's handler gives a peer on a revision before 2026-07-28 (the only ones
    // this path takes): no `resultType: "complete"`, structured content only as an object.
    let mut result = ServerResult::CallToolResult(result);
    result.strip_result_type_for_legacy_peer();
    result.strip_non_object_output_for_legacy_peer();
    let body = CallResponse { jsonrpc: "2.0", id: &call.id, result: &result };
    match serde_json::to_vec(&body) {
        Ok(bytes) => ([(header::CONTENT_TYPE, HeaderValue::from_static("application/json"))], Bytes::from(bytes)).into_response(),
        Err(e) => Error::Internal(anyhow::anyhow!("the result could not be serialized: {e}")).into_response(),
    }
}
