//! Requests on a revision without a handshake (2026-07-28): each on a POST of its own, with
//! the revision and routing headers, no session.

use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, header};
use serde_json::Value;

use super::{HttpSession, Outgoing, PROTOCOL_VERSION, not_a_url, unavailable};
use crate::{
    gateway::{
        downstream::Failure,
        outbound::{Outbound, Response},
        upstream::Upstream,
    },
    oauth::dpop::Binding,
};

/// Sends one stateless request (id 1; `request`: revision, method, `Mcp-Name`) with the
/// revision and routing headers added to `headers`.
/// The id of the next stateless request: unique across this process, so a retry (a
/// 2026-07-28 agent's answer to an `InputRequiredResult`) never reuses its first request's id,
/// as SEP-2322 asks.
static NEXT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// One stateless POST; answers the response and the request's id.
async fn stateless_post(
    http: Outbound,
    url: &str,
    headers: &mut HeaderMap,
    request: (&str, &str, Option<&str>),
    params: &Value,
    dpop: Option<&Binding>,
) -> Result<(Response, u64), Failure> {
    let (revision, method, name) = request;
    let target = http.target(url).ok_or_else(not_a_url)?;
    headers.insert(header::ACCEPT, HeaderValue::from_static("application/json, text/event-stream"));
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    let bad = || Failure::Rejected("a method, name or revision that cannot be a header".into());
    headers.insert(PROTOCOL_VERSION, HeaderValue::from_str(revision).map_err(|_| bad())?);
    headers.insert(HeaderName::from_static("mcp-method"), HeaderValue::from_str(method).map_err(|_| bad())?);
    if let Some(name) = name {
        // A name that cannot travel bare (non-ASCII, say) travels Base64-wrapped (SEP-2243).
        let name = crate::gateway::param_headers::encode(name);
        headers.insert(HeaderName::from_static("mcp-name"), HeaderValue::from_str(&name).map_err(|_| bad())?);
    }
    let id = NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let body =
        serde_json::to_vec(&Outgoing { jsonrpc: "2.0", id, method, params }).map_err(|e| Failure::Unavailable(e.to_string()))?;
    let r = super::send(&http, Method::POST, &target, headers.clone(), Some(body.into()), dpop).await.map_err(unavailable)?;
    Ok((r, id))
}

/// A `subscriptions/listen` request (2026-07-28) to a server, `params` carrying its `_meta`
/// and filter: its response stream, where the acknowledgement and the notifications arrive.
/// `Ok(None)`: the server answered with a single message instead (an error such as -32601:
/// it has nothing to listen to).
pub async fn listen(
    http: Outbound,
    url: &str,
    mut headers: HeaderMap,
    revision: &str,
    params: &Value,
    dpop: Option<&Binding>,
) -> Result<Option<Response>, Failure> {
    let (r, _) = stateless_post(http, url, &mut headers, (revision, "subscriptions/listen", None), params, dpop).await?;
    if r.status() == StatusCode::METHOD_NOT_ALLOWED || r.status() == StatusCode::NOT_FOUND {
        return Ok(None);
    }
    let streamed =
        r.headers().get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).is_some_and(|v| v.starts_with("text/event-stream"));
    if !streamed {
        return match Failure::refused(r.status().as_u16(), r.headers()) {
            Some(refused) => Err(refused),
            None => Ok(None),
        };
    }
    Ok(Some(r))
}

/// One stateless request (`request`: revision, method, `Mcp-Name`) on a revision without a
/// handshake (2026-07-28): the revision and routing headers on a POST of its own, no session.
/// The response message, with its `result` or the server's JSON-RPC `error` (passed on as it is); the
/// progress and log notifications before it go to `upstream`.
pub async fn stateless(
    http: Outbound,
    url: &str,
    mut headers: HeaderMap,
    request: (&str, &str, Option<&str>),
    params: &Value,
    upstream: Option<&Upstream>,
    dpop: Option<&Binding>,
) -> Result<Value, Failure> {
    let (r, id) = stateless_post(http, url, &mut headers, request, params, dpop).await?;
    let status = r.status();
    if let Some(refused) = Failure::refused(status.as_u16(), r.headers()) {
        return Err(refused);
    }
    let streamed =
        r.headers().get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).is_some_and(|v| v.starts_with("text/event-stream"));
    let message = if streamed {
        Box::pin(HttpSession::from_stream(r, id, upstream, None)).await?
    } else {
        let body = HttpSession::from_body(r).await?;
        match serde_json::from_slice::<Value>(&body) {
            Ok(message) if message.get("result").is_some() || message.get("error").is_some() => message,
            _ if !status.is_success() => return Err(Failure::Unavailable(format!("HTTP {}", status.as_u16()))),
            Ok(_) | Err(_) => return Err(Failure::Unavailable("the server's answer is not a JSON-RPC response".into())),
        }
    };
    // An error with a null id is the server's answer to a request it could not read as one
    // (JSON-RPC 2.0 §5: a handshake-era server refusing a request without a session, say).
    let unread = message.get("id").is_some_and(Value::is_null) && message.get("error").is_some();
    if message.get("id").and_then(Value::as_u64) != Some(id) && !unread {
        return Err(Failure::Unavailable("the server answered another request".into()));
    }
    Ok(message)
}
