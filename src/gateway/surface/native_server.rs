//! What a native pool says of itself and how it hears its downstreams: the capabilities and
//! instructions it declares (the pooled downstreams' own, merged), and the watches on them
//! that its notification streams listen to.

use serde_json::Value;

use super::native::{relayed, several};
use super::{credential, key};
use crate::{AppState, gateway::GatewayCtx, workspaces::Connector};

/// What the connector says of itself (its `server/discover` result on 2026-07-28, else its
/// `initialize` result); Null when it cannot be had (it then offers nothing beyond tools).
pub(super) async fn server_info(state: &AppState, ctx: &GatewayCtx, id: &str, c: &Connector) -> Value {
    let Ok(credential) = credential(state, ctx, id, c).await else { return Value::Null };
    state.downstreams.server_info(ctx.tenant.id.0, &key(ctx, id, c), c, credential.as_ref()).await.unwrap_or(Value::Null)
}

/// The relayed connectors that declare `capability` (`prompts`, `resources`, `completions`,
/// `logging`).
pub(super) async fn declaring<'c>(state: &AppState, ctx: &'c GatewayCtx, capability: &str) -> Vec<(&'c String, &'c Connector)> {
    let mut out = Vec::new();
    for (id, c) in relayed(ctx) {
        if server_info(state, ctx, id, c).await["capabilities"].get(capability).is_some_and(|v| !v.is_null()) {
            out.push((id, c));
        }
    }
    out
}

/// What a native pool declares at `initialize` and `server/discover`
/// alike: tools, plus prompts, resources, completions and logging where a pooled
/// downstream declares them, `listChanged` where it is relayed, and resource subscriptions
/// where they are relayed (through `subscriptions/listen` on 2026-07-28, and on the
/// handshake era `resources/subscribe` kept for the agent's session and heard on its GET
/// stream, see [`crate::gateway::subscriptions`]); and the downstreams' own instructions
/// instead of the six-tool guide. With several connectors each downstream's part says which connector it is
/// and how its names are shown here (its instructions name them without the prefix).
pub async fn native_server(state: &AppState, ctx: &GatewayCtx) -> (Value, Option<String>) {
    // The tool list's changes are told whatever the downstreams: a change of configuration or
    // grants is one too.
    let mut capabilities = serde_json::json!({ "tools": { "listChanged": true } });
    let mut instructions = Vec::new();
    let several = several(ctx);
    for (id, c) in relayed(ctx) {
        let info = server_info(state, ctx, id, c).await;
        for name in ["prompts", "resources", "completions", "logging"] {
            if info["capabilities"].get(name).is_some_and(|v| !v.is_null()) && capabilities.get(name).is_none() {
                capabilities[name] = serde_json::json!({});
            }
        }
        // A downstream's list changes are relayed where it can be listened to.
        for name in ["prompts", "resources"] {
            if info["capabilities"][name]["listChanged"] == true && watchable(c) {
                capabilities[name]["listChanged"] = Value::Bool(true);
            }
        }
        if info["capabilities"]["resources"]["subscribe"] == true && watchable(c) {
            capabilities["resources"]["subscribe"] = Value::Bool(true);
        }
        if let Some(text) = info["instructions"].as_str().filter(|t| !t.is_empty()) {
            instructions.push(if several { instructions_of(id, text) } else { text.to_owned() });
        }
    }
    (capabilities, (!instructions.is_empty()).then(|| instructions.join("\n\n")))
}

/// Whether Gatehouse listens to the connector for what it says outside any request
/// ([`crate::gateway::downstream::Watch`]): a streamable HTTP server.
fn watchable(c: &Connector) -> bool {
    matches!(c, Connector::RemoteMcp { transport: crate::workspaces::config::RemoteTransport::StreamableHttp, .. })
}

/// The watches on a native pool's downstreams that can be listened to, each with the id of
/// its connector (a connector whose credential cannot be had now is left out).
pub async fn native_watches(
    state: &AppState,
    ctx: &GatewayCtx,
) -> Vec<(String, std::sync::Arc<crate::gateway::downstream::Watch>)> {
    let mut out = Vec::new();
    for (id, c) in relayed(ctx).into_iter().filter(|(_, c)| watchable(c)) {
        let Ok(credential) = credential(state, ctx, id, c).await else { continue };
        if let Some(watch) = state.downstreams.watch(ctx.tenant.id.0, &key(ctx, id, c), c, credential.as_ref()) {
            out.push((id.clone(), watch));
        }
    }
    out
}

/// For each connector of a native pool that can hold resource subscriptions for this caller
/// (it declares them and is listened to), the URIs of `uris` the caller may see there.
pub async fn subscribable(state: &AppState, ctx: &GatewayCtx, uris: &[String]) -> Vec<(String, Vec<String>)> {
    let mut out = Vec::new();
    for (id, c) in declaring(state, ctx, "resources").await.into_iter().filter(|(_, c)| watchable(c)) {
        if server_info(state, ctx, id, c).await["capabilities"]["resources"]["subscribe"] != true {
            continue;
        }
        let seen: Vec<String> = uris.iter().filter(|u| may_see_resource(ctx, id, u)).cloned().collect();
        if !seen.is_empty() {
            out.push((id.clone(), seen));
        }
    }
    out
}

/// Whether the caller may see the resource `uri` of connector `id` (ungranted looks missing).
pub fn may_see_resource(ctx: &GatewayCtx, id: &str, uri: &str) -> bool {
    ctx.visible_part(crate::workspaces::config::Part::Resource, id, Some(uri))
}

/// Asks the connector for its catalog again, for every replica (it said its tools changed).
pub async fn native_refresh(state: &AppState, ctx: &GatewayCtx, id: &str) {
    let Some(c) = ctx.bound.document.connectors.get(id) else { return };
    let Ok(credential) = credential(state, ctx, id, c).await else { return };
    let key = key(ctx, id, c);
    if let Err(f) = state.downstreams.fetch(&state.db, super::target(ctx, id, &key), &key, c, credential.as_ref(), None).await {
        tracing::info!(connector = %id, failure = ?f, "could not fetch a catalog its server said changed");
    }
}

/// One connector's part of a pool's instructions.
fn instructions_of(id: &str, text: &str) -> String {
    format!("Connector `{id}` (its tools, prompts and resources are named `{id}.<name>` here):\n{text}")
}
