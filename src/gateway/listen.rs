//! The notifications that belong to no request: the endpoint's GET stream (handshake era) and
//! a `subscriptions/listen` request's response stream (2026-07-28, which has no GET stream).
//! Today that is `notifications/tools/list_changed` when a workspace's configuration or grants
//! change the tools a native pool shows this caller. On 2026-07-28 the stream opens with
//! `notifications/subscriptions/acknowledged` naming what of the request's filter is honoured
//! (`toolsListChanged`, on a native pool), and every notification on it carries the request's
//! id as `_meta["io.modelcontextprotocol/subscriptionId"]`; at shutdown it ends with the
//! request's `complete` result.
//!
//! The endpoint stays stateless. The session id it gives at `initialize` ([`SESSION_ID`],
//! made by [`super::asks::session_id`]) names the agent's connection and what it declared,
//! and is not looked up anywhere: any replica serves the GET
//! stream, and the stream learns of changes the way every replica does, from the tenant's
//! epoch (one shared, batched primary-key read per [`POLL`]). When the epoch moves, the
//! stream derives what the caller sees again and says `list_changed` only if it differs.

use std::{
    sync::atomic::{AtomicBool, Ordering},
    time::Duration,
};

use axum::{
    body::{Body, Bytes},
    http::{HeaderValue, header},
    response::{IntoResponse, Response},
};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::GatewayCtx;
use crate::AppState;

/// The header a handshake-era `initialize` answer carries.
pub const SESSION_ID: &str = "mcp-session-id";
/// How often an open stream asks for its tenant's epoch.
const POLL: Duration = Duration::from_secs(2);
/// A comment line this often keeps proxies from closing an idle stream.
const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// Set at shutdown: open streams end, so the drain does not wait on them.
static CLOSED: AtomicBool = AtomicBool::new(false);
static CLOSING: tokio::sync::Notify = tokio::sync::Notify::const_new();

/// Ends every GET stream of this process (graceful shutdown: they would hold the drain open).
pub fn close_all() {
    CLOSED.store(true, Ordering::SeqCst);
    CLOSING.notify_waiters();
}

/// What a caller sees of the tools here, as a digest: the native pool's tools with their
/// annotations; the six-tool surface's list never changes.
async fn seen(state: &AppState, ctx: &GatewayCtx) -> Option<[u8; 32]> {
    if !ctx.pool.as_ref().is_some_and(|(_, p)| p.native) {
        return None;
    }
    let tools = Box::pin(super::surface::native_tools(state, ctx)).await;
    Some(Sha256::digest(serde_json::to_vec(&tools).unwrap_or_default()).into())
}

/// The caller's context under the workspace's current configuration; `None` when the
/// workspace or the pool is gone (or no longer active): the stream then ends.
async fn current(state: &AppState, ctx: &GatewayCtx, epoch: i64) -> Option<GatewayCtx> {
    let key = (ctx.tenant.id, ctx.bound.workspace.slug.clone());
    let bound = match state.bound.get(&key) {
        Some((bound, label)) if label == epoch => bound,
        _ => {
            let bound = std::sync::Arc::new(crate::workspaces::bound(&state.db, ctx.tenant.id, &key.1).await.ok()?);
            super::surface::configured(state, ctx.tenant.id, &bound);
            state.bound.put(key, bound.clone(), bound.epoch);
            bound
        }
    };
    if bound.workspace.status != "active" {
        return None;
    }
    let pool = match &ctx.pool {
        None => None,
        Some((name, _)) => Some((name.clone(), bound.document.pools.get(name)?.clone())),
    };
    Some(GatewayCtx { bound, pool, ..ctx.clone() })
}

/// The `_meta` key naming the subscription a notification belongs to (2026-07-28).
const SUBSCRIPTION_ID: &str = "io.modelcontextprotocol/subscriptionId";

/// Which stream this is: the handshake era's GET stream, or the response stream of a
/// `subscriptions/listen` request (its id; whether tool list changes were asked for and can
/// be honoured).
#[derive(Clone)]
pub enum Listener {
    Get,
    Subscription { id: Value, tools: bool },
}

impl Listener {
    /// One notification as an event, tagged with the subscription it belongs to.
    fn event(&self, method: &str, mut params: Value) -> Bytes {
        if let Listener::Subscription { id, .. } = self {
            params["_meta"] = json!({ SUBSCRIPTION_ID: id });
        }
        let message = match params.as_object().is_some_and(|p| p.is_empty()) {
            true => json!({ "jsonrpc": "2.0", "method": method }),
            false => json!({ "jsonrpc": "2.0", "method": method, "params": params }),
        };
        Bytes::from(format!("event: message\ndata: {message}\n\n"))
    }

    /// Whether tool list changes go out on this stream.
    fn tools(&self) -> bool {
        match self {
            Listener::Get => true,
            Listener::Subscription { tools, .. } => *tools,
        }
    }

    /// What the stream says first: the acknowledgement of a subscription.
    fn opening(&self) -> Option<Bytes> {
        let Listener::Subscription { tools, .. } = self else { return None };
        let honoured = if *tools { json!({ "toolsListChanged": true }) } else { json!({}) };
        Some(self.event("notifications/subscriptions/acknowledged", json!({ "notifications": honoured })))
    }

    /// What the stream says last when the server ends it: a subscription's final result.
    fn closing(&self) -> Option<Bytes> {
        let Listener::Subscription { id, .. } = self else { return None };
        let result = json!({ "resultType": "complete", "_meta": { SUBSCRIPTION_ID: id } });
        Some(Bytes::from(format!("event: message\ndata: {}\n\n", json!({ "jsonrpc": "2.0", "id": id, "result": result }))))
    }
}

/// A `subscriptions/listen` request (2026-07-28) as this endpoint takes it: its id and
/// whether it asks for tool list changes (the only change notification served here; the
/// acknowledgement omits the rest, as the protocol says). `None`: not such a request, or not
/// one this path takes, so rmcp judges it.
pub fn subscription(headers: &axum::http::HeaderMap, body: &[u8]) -> Option<(Value, bool)> {
    #[derive(serde::Deserialize)]
    struct Request<'a> {
        #[serde(borrow)]
        jsonrpc: &'a str,
        id: Value,
        #[serde(borrow)]
        method: &'a str,
        #[serde(default)]
        params: Params,
    }
    #[derive(serde::Deserialize, Default)]
    struct Params {
        #[serde(default)]
        notifications: Filter,
    }
    #[derive(serde::Deserialize, Default)]
    struct Filter {
        #[serde(rename = "toolsListChanged", default)]
        tools_list_changed: bool,
    }
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    if header("mcp-protocol-version") != Some(rmcp::model::ProtocolVersion::V_2026_07_28.as_str())
        || header("mcp-method") != Some("subscriptions/listen")
    {
        return None;
    }
    let request: Request = serde_json::from_slice(body).ok()?;
    (request.jsonrpc == "2.0" && request.method == "subscriptions/listen" && (request.id.is_i64() || request.id.is_string()))
        .then_some((request.id, request.params.notifications.tools_list_changed))
}

/// The GET stream, or a subscription's response stream, for this caller.
pub fn stream(state: AppState, ctx: GatewayCtx, listener: Listener) -> Response {
    let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(8);
    // Tool list changes are honoured on a native pool only (the six-tool surface's list never
    // changes).
    let listener = match listener {
        Listener::Subscription { id, tools } => {
            Listener::Subscription { id, tools: tools && ctx.pool.as_ref().is_some_and(|(_, p)| p.native) }
        }
        get => get,
    };
    tokio::spawn(async move {
        let mut ctx = ctx;
        let mut epoch = ctx.bound.epoch;
        if let Some(opening) = listener.opening()
            && tx.send(opening).await.is_err()
        {
            return;
        }
        let mut last = if listener.tools() { seen(&state, &ctx).await } else { None };
        let mut quiet = Duration::ZERO;
        loop {
            let closing = CLOSING.notified();
            let shutting_down = CLOSED.load(Ordering::SeqCst)
                || tokio::select! {
                    _ = tx.closed() => return,
                    _ = closing => true,
                    _ = tokio::time::sleep(POLL) => false,
                };
            if shutting_down {
                if let Some(last) = listener.closing() {
                    let _ = tx.send(last).await;
                }
                return;
            }
            quiet += POLL;
            let Ok(Some(now)) = crate::epochs::read(&state.db, ctx.tenant.id).await else { continue };
            if now != epoch {
                let Some(fresh) = current(&state, &ctx, now).await else { return };
                (ctx, epoch) = (fresh, now);
                let digest = if listener.tools() { seen(&state, &ctx).await } else { None };
                if digest != last {
                    last = digest;
                    if tx.send(listener.event("notifications/tools/list_changed", json!({}))).await.is_err() {
                        return;
                    }
                }
                // Says the change was looked at (a comment: clients ignore it).
                if tx.send(Bytes::from_static(b": checked\n\n")).await.is_err() {
                    return;
                }
                quiet = Duration::ZERO;
            } else if quiet >= KEEP_ALIVE {
                if tx.send(Bytes::from_static(b": keep-alive\n\n")).await.is_err() {
                    return;
                }
                quiet = Duration::ZERO;
            }
        }
    });
    let events =
        futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|e| (Ok::<_, std::convert::Infallible>(e), rx)) });
    (
        [
            (header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream")),
            (header::CACHE_CONTROL, HeaderValue::from_static("no-cache")),
        ],
        Body::from_stream(events),
    )
        .into_response()
}
