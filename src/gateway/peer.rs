//! Calls through a `peer` connector: the target workspace (see [`crate::peers`] for how it is
//! found) is called in-process, as the same caller, with the target's own configuration.
//!
//! - **Addresses.** The peer connector's tools are the target's, named
//!   `<target connector>.<tool>`, so a caller addresses `<peer connector>.<target connector>.<tool>`
//!   (the gateway splits an address at its first dot).
//! - **Never wider.** The calling workspace's grants and pool apply to the peer connector (as
//!   to any connector: `peer` or `peer.<target connector>.<tool>`); the target's own grants then
//!   apply to the target's tools for the same caller (role, member). A tool is reachable only
//!   if both allow it. A write needs approval if either workspace classifies it as one: the
//!   inner call may write only when the outer call could have (see [`call`]).
//! - **Depth.** At most [`crate::peers::MAX_DEPTH`] hops; a target already on the call's path
//!   (itself included) is a cycle, refused with `peer_cycle`.

use std::{sync::Arc, time::Instant};

use futures::future::BoxFuture;
use rmcp::model::{JsonObject, ToolAnnotations};
use serde_json::Value;

use super::{
    GatewayCtx, activity,
    catalogs::{Catalog, Listing},
    downstream::Failure,
    surface::{self, Outcome, Writes},
};
use crate::{
    AppState,
    peers::{self, MAX_DEPTH, Resolution},
    workspaces::{Bound, config::Class},
};

fn refuse(code: &'static str, message: String) -> Failure {
    Failure::Peer { code, message }
}

/// The target's configuration: this replica's copy while the tenant's epoch (read for this
/// request) still labels it, else read again. Peer bindings and workspace changes bump it.
async fn target_bound(state: &AppState, ctx: &GatewayCtx, slug: &str) -> Result<Arc<Bound>, Failure> {
    let key = (ctx.tenant.id, slug.to_owned());
    if let Some(bound) = state.bound.current(&key, Some(ctx.bound.epoch)) {
        return Ok(bound);
    }
    Box::pin(super::read_bound(state, key)).await.map_err(|e| {
        tracing::warn!(error = %e, "could not read a peer's configuration");
        Failure::Unavailable("the peer workspace's configuration could not be read".into())
    })
}

/// Where the peer connector leads: this replica's answer while the epoch validated for this
/// request still labels it, else resolved again (one transaction).
async fn resolution(state: &AppState, ctx: &GatewayCtx, id: &str, blueprint: &str) -> Result<Arc<Resolution>, Failure> {
    let key = (ctx.tenant.id, ctx.bound.workspace.id.0, id.to_owned(), blueprint.to_owned());
    if let Some(resolution) = state.peers.current(&key, Some(ctx.bound.epoch)) {
        return Ok(resolution);
    }
    let (resolution, epoch) = peers::resolve_labelled(&state.db, ctx.tenant.id, key.1, id, blueprint).await.map_err(|e| {
        tracing::warn!(error = %e, "could not resolve a peer connector");
        Failure::Unavailable("the peer connector could not be resolved".into())
    })?;
    let resolution = Arc::new(resolution);
    state.peers.put(key, resolution.clone(), epoch);
    Ok(resolution)
}

/// The context of a call made in the target of peer connector `id` (naming `blueprint`).
async fn enter(state: &AppState, ctx: &GatewayCtx, id: &str, blueprint: &str) -> Result<GatewayCtx, Failure> {
    if ctx.peer_path.len() >= MAX_DEPTH {
        return Err(refuse("peer_depth_exceeded", format!("a call may go through at most {MAX_DEPTH} peer connectors")));
    }
    let here = ctx.bound.workspace.id.0;
    let resolution = resolution(state, ctx, id, blueprint).await?;
    let target = match resolution.as_ref() {
        Resolution::Bound(t) | Resolution::Resolved(t) => t,
        other => return Err(refuse(other.code(), other.message(blueprint))),
    };
    if target.id == here || ctx.peer_path.contains(&target.id) {
        return Err(refuse(
            "peer_cycle",
            format!("peer connector `{id}` leads back to `{}`, already on this call's path", target.slug),
        ));
    }
    let bound = target_bound(state, ctx, &target.slug).await?;
    // Resolution only offers active workspaces; a binding may point at a suspended one.
    if bound.workspace.id.0 != target.id || bound.workspace.status != "active" {
        let (code, what) = match bound.workspace.status.as_str() {
            "suspended" => ("workspace_suspended", "is suspended"),
            _ => ("bound_unavailable", "is not active"),
        };
        return Err(refuse(code, format!("the peer workspace `{}` {what}", target.slug)));
    }
    let mut peer_path = ctx.peer_path.clone();
    peer_path.push(here);
    Ok(GatewayCtx {
        tenant: ctx.tenant.clone(),
        bound,
        actor_kind: ctx.actor_kind,
        actor_id: ctx.actor_id.clone(),
        request_id: ctx.request_id.clone(),
        caller: ctx.caller.clone(),
        // The calling endpoint's pool already narrowed the peer connector.
        pool: None,
        client: ctx.client.clone(),
        peer_path,
        // The target runs in this process: its downstream's notifications reach the caller.
        upstream: ctx.upstream.clone(),
        // A peer workspace is called on the handshake era (its downstreams cannot ask this
        // agent for input through it).
        input: None,
        // The target's tools are called by address, not with the agent's headers.
        param_headers: None,
    })
}

/// The peer connector's catalog: every tool of the target this caller may use there, named
/// `<target connector>.<tool>`, annotated with the target's fail-closed classification. A
/// target connector that cannot be listed is left out (it answers for itself when called).
pub fn catalog<'a>(
    state: &'a AppState,
    ctx: &'a GatewayCtx,
    id: &'a str,
    blueprint: &'a str,
) -> BoxFuture<'a, Result<Arc<Catalog>, Failure>> {
    Box::pin(async move {
        let inner = enter(state, ctx, id, blueprint).await?;
        let mut out = Vec::new();
        // Fresh as long as every target catalog it draws on.
        let (now, mut ttl_ms, mut private) = (chrono::Utc::now(), u64::MAX, false);
        for (tid, tc) in inner.bound.document.connectors.iter().filter(|(tid, _)| inner.visible(tid, None)) {
            let key = surface::key(&inner, tid, tc);
            let tools = match surface::catalog(state, &inner, tid, &key, tc).await {
                Ok(catalog) => catalog,
                Err(_) => continue,
            };
            ttl_ms = ttl_ms.min(tools.fresh_for(now));
            private |= tools.listing.private;
            for t in tools.tools.iter().filter(|t| inner.visible(tid, Some(&t.name))) {
                let read = surface::classify(&inner.bound.document, tid, t) == Class::Read;
                let mut shown = t.clone();
                shown.name = format!("{tid}.{}", t.name).into();
                shown.annotations = Some(ToolAnnotations::new().read_only(read).destructive(!read));
                out.push(shown);
            }
        }
        let listing = Listing { revision: None, ttl_ms: Some(if ttl_ms == u64::MAX { 0 } else { ttl_ms }), private };
        Ok(Arc::new(Catalog { tools: out, fetched_at: None, listing }))
    })
}

/// Calls `<target connector>.<tool>` (`name`) in the peer's target with `args`. With
/// `write_allowed` (the calling workspace would have made this call as a write: approved
/// through `call_destructive_tool`, or counted by a trusted program's gate) the target makes it
/// whatever it classifies it as; otherwise the target refuses it if it classifies it as a
/// write. The target records its own activity row (source `peer`).
pub fn call<'a>(
    state: &'a AppState,
    ctx: &'a GatewayCtx,
    id: &'a str,
    blueprint: &'a str,
    name: &'a str,
    args: JsonObject,
    write_allowed: bool,
) -> BoxFuture<'a, Outcome> {
    Box::pin(async move {
        let inner = match enter(state, ctx, id, blueprint).await {
            Ok(inner) => inner,
            Err(Failure::Peer { code, message }) => return Outcome::error(code, message, None),
            Err(Failure::Unavailable(message)) => {
                return Outcome::error("unavailable", message, Some(serde_json::json!({ "retryable": true })));
            }
            Err(_) => return Outcome::error("unavailable", "the peer workspace cannot be reached".into(), None),
        };
        let started = Instant::now();
        let mut wrapped = JsonObject::new();
        wrapped.insert("address".into(), Value::String(name.to_owned()));
        wrapped.insert("args".into(), Value::Object(args));
        let writes = if write_allowed { Writes::Allow } else { Writes::Refuse };
        let outcome = surface::call_with(state, &inner, &wrapped, writes).await;
        state.activity.record(activity::Row::of_call(&inner, "call_tool", &outcome, started, "peer"));
        outcome
    })
}
