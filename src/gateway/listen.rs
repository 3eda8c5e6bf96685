//! The endpoint's GET stream (handshake era): the notifications that belong to no request.
//! Today that is `notifications/tools/list_changed` when a workspace's configuration or grants
//! change the tools a native pool shows this caller.
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

fn event(method: &str) -> Bytes {
    Bytes::from(format!("event: message\ndata: {{\"jsonrpc\":\"2.0\",\"method\":\"{method}\"}}\n\n"))
}

/// The GET stream for this caller.
pub fn stream(state: AppState, ctx: GatewayCtx) -> Response {
    let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(8);
    tokio::spawn(async move {
        let mut ctx = ctx;
        let mut epoch = ctx.bound.epoch;
        let mut last = seen(&state, &ctx).await;
        let mut quiet = Duration::ZERO;
        loop {
            let closing = CLOSING.notified();
            if CLOSED.load(Ordering::SeqCst) {
                return;
            }
            tokio::select! {
                _ = tx.closed() => return,
                _ = closing => return,
                _ = tokio::time::sleep(POLL) => {}
            }
            quiet += POLL;
            let Ok(Some(now)) = crate::epochs::read(&state.db, ctx.tenant.id).await else { continue };
            if now != epoch {
                let Some(fresh) = current(&state, &ctx, now).await else { return };
                (ctx, epoch) = (fresh, now);
                let digest = seen(&state, &ctx).await;
                if digest != last {
                    last = digest;
                    if tx.send(event("notifications/tools/list_changed")).await.is_err() {
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
