//! A native pool: the downstream tools themselves instead of the six.

use rmcp::model::{JsonObject, Tool, ToolAnnotations};
use serde_json::Value;

use super::{Outcome, catalog, classify, echo, key};
use crate::{AppState, gateway::GatewayCtx, workspaces::config::Class};

/// A native pool's tools: the downstream tools themselves under their original names, with
/// the gateway's fail-closed classification as their annotations. A name two connectors share
/// is served from the first connector (by id) only.
pub async fn native_tools(state: &AppState, ctx: &GatewayCtx) -> Vec<Tool> {
    native_index(state, ctx).await.into_iter().map(|(_, _, t)| t).collect()
}

async fn native_index(state: &AppState, ctx: &GatewayCtx) -> Vec<(String, Tool, Tool)> {
    let mut out: Vec<(String, Tool, Tool)> = Vec::new();
    for (id, c) in ctx.bound.document.connectors.iter().filter(|(id, _)| ctx.visible(id, None)) {
        let Ok(tools) = catalog(state, ctx, id, &key(ctx, id, c), c).await else { continue };
        for t in tools.iter().filter(|t| ctx.visible(id, Some(&t.name))) {
            if out.iter().any(|(_, _, seen)| seen.name == t.name) {
                tracing::warn!(tool = %t.name, connector = %id, "native pool: a tool of this name is already served");
                continue;
            }
            let mut shown = t.clone();
            let read = classify(&ctx.bound.document, id, t) == Class::Read;
            shown.annotations = Some(ToolAnnotations::new().read_only(read).destructive(!read));
            out.push((id.clone(), t.clone(), shown));
        }
    }
    out
}

/// Calls a native pool's tool by its original name; the same checks as `call_destructive_tool`
/// (the annotations already told the client which tools change things).
pub async fn native_call(state: &AppState, ctx: &GatewayCtx, name: &str, args: JsonObject) -> Outcome {
    let index = native_index(state, ctx).await;
    let Some((id, _, _)) = index.iter().find(|(_, _, t)| t.name == name) else {
        return Outcome::error("unknown_tool", format!("this pool has no tool `{}`", echo(name)), None);
    };
    let mut wrapped = JsonObject::new();
    wrapped.insert("address".into(), Value::String(format!("{id}.{name}")));
    wrapped.insert("args".into(), Value::Object(args));
    super::call::call(state, ctx, &wrapped, true).await
}
