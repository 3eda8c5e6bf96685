//! `call_tool` and `call_destructive_tool`: grants, classification, the schema check, the
//! downstream call, and stashing (and paging) a large result.

use rmcp::model::{CallToolResult, ContentBlock, JsonObject};
use serde_json::{Value, json};

use super::{
    ECHO_CAP, Interim, Outcome, PROGRAM_ADDRESS, RESULT_ADDRESS, catalog, class_name, classify, connector, credential, echo,
    failure, key, note,
};
use crate::{
    AppState,
    gateway::{
        GatewayCtx,
        downstream::{self, Failure},
        input::{self, Relayed, Stopped},
        stash,
    },
    quotas,
    workspaces::{Connector, config::Class},
};

/// What `call` does with a tool classified as a write.
pub enum Writes<'a> {
    /// Refuse it with `destructive_tool_requires_approval` and the call to make instead.
    Refuse,
    /// Make it (`call_destructive_tool`, native pools: the client asks the human).
    Allow,
    /// Make it unless the gate refuses (programs on a trusted pool): then the gate's refusal.
    Gated(&'a (dyn Fn(&str) -> Option<Outcome> + Sync)),
}

pub(super) async fn call(state: &AppState, ctx: &GatewayCtx, args: &JsonObject, destructive: bool) -> Outcome {
    call_with(state, ctx, args, if destructive { Writes::Allow } else { Writes::Refuse }).await
}

/// `call_tool`'s path, with `writes` deciding what happens to a write: grants, fail-closed
/// classification, schema check, the downstream call under its deadline, stashing.
pub async fn call_with(state: &AppState, ctx: &GatewayCtx, args: &JsonObject, writes: Writes<'_>) -> Outcome {
    let Some(address) = args.get("address").and_then(Value::as_str) else {
        return Outcome::error("invalid_args", "`address` (<connector>.<tool>) is required".into(), None);
    };
    // Borrowed, not copied: the schema check reads the object as a JSON value.
    let none = Value::Object(JsonObject::new());
    let instance = match args.get("args") {
        None | Some(Value::Null) => &none,
        Some(v) => v,
    };
    let Value::Object(tool_args) = instance else {
        return Outcome::error("invalid_args", "`args` must be an object".into(), None);
    };
    if address == RESULT_ADDRESS {
        return Box::pin(result_page(state, ctx, tool_args)).await;
    }
    let unknown = || Outcome::error("unknown_tool", format!("no tool `{}` here; use search_tools", echo(address)), None);
    let Some((id, name)) = address.split_once('.') else { return unknown() };
    let Some(c) = connector(ctx, id) else { return unknown() };
    // Ungranted is indistinguishable from missing, and asks nothing of the downstream.
    if !ctx.visible(id, Some(name)) {
        return unknown();
    }
    // The arguments are only counted (they go to the downstream as the agent sent them, and
    // nothing of them is recorded), unless a blocking detector refuses the call.
    let arg_hits = match ctx.bound.redactor() {
        None => 0,
        Some(r) => {
            let scan = r.scan(&mut instance.clone());
            if let Some(detector) = scan.blocked {
                return blocked(&detector, "arguments").about(id, name);
            }
            scan.masked
        }
    };
    let approval = match super::hold::named(args) {
        Ok(approval) => approval,
        Err(refused) => return (*refused).about(id, name),
    };
    let mut out = call_granted(state, ctx, address, (id, name, c), instance, (writes, approval)).await;
    out.redactions = out.redactions.saturating_add(arg_hits);
    out
}

/// [`call_with`] for a granted tool of a visible connector.
#[tracing::instrument(name = "gateway::relay_call", skip_all, fields(connector = id, tool = name))]
async fn call_granted(
    state: &AppState,
    ctx: &GatewayCtx,
    address: &str,
    (id, name, c): (&str, &str, &Connector),
    instance: &Value,
    (writes, approval): (Writes<'_>, Option<uuid::Uuid>),
) -> Outcome {
    let Value::Object(tool_args) = instance else {
        return Outcome::error("invalid_args", "`args` must be an object".into(), None);
    };
    let unknown = || Outcome::error("unknown_tool", format!("no tool `{}` here; use search_tools", echo(address)), None);
    let key = key(ctx, id, c);
    let tools = match catalog(state, ctx, id, &key, c).await {
        Ok(tools) => tools,
        Err(f) => return failure(f).about(id, name),
    };
    let Some(tool) = tools.tools.iter().find(|t| t.name == name) else { return unknown().about(id, name) };
    let class = classify(&ctx.bound.document, id, tool);
    if class == Class::Write && matches!(writes, Writes::Refuse) {
        return approval_required(address, tool_args).about(id, name);
    }
    // A peer's tools are checked by the target, against its own current schema.
    let issues = match c {
        Connector::Peer { .. } => Vec::new(),
        _ => match state.downstreams.validate(&key, tool, instance) {
            Ok(issues) => issues,
            Err(f) => {
                let mut out = failure(f).about(id, name);
                out.classification = Some(class_name(class));
                return out;
            }
        },
    };
    if !issues.is_empty() {
        let issues: Vec<Value> = issues.into_iter().map(|(path, message)| json!({ "path": path, "message": message })).collect();
        let mut out = Outcome::error(
            "invalid_args",
            format!("the arguments do not match {}'s input schema", echo(address)),
            Some(json!({ "issues": issues })),
        )
        .about(id, name);
        out.classification = Some(class_name(class));
        return out;
    }
    let credential = match credential(state, ctx, id, c).await {
        Ok(credential) => credential,
        Err(f) => {
            let mut out = failure(f).about(id, name);
            out.classification = Some(class_name(class));
            return out;
        }
    };
    // The tenant's quotas: the permit holds its concurrency slots until the call ends.
    let _permit = match admitted(state, ctx, (id, name), class).await {
        Ok(permit) => permit,
        Err(refused) => {
            let mut out = refused.about(id, name);
            out.classification = Some(class_name(class));
            return out;
        }
    };
    // A write the approval policy holds back runs only under an approval of exactly this call,
    // used (once) here, before anything goes downstream.
    let approval = match class {
        Class::Write => match Box::pin(super::hold::hold(state, ctx, (id, name), tool_args, approval)).await {
            Ok(approval) => approval,
            Err(held) => return (*held).about(id, name),
        },
        Class::Read => None,
    };
    // Counted only once the call is sure to be made.
    if class == Class::Write
        && let Writes::Gated(gate) = writes
        && let Some(refused) = gate(address)
    {
        let mut out = refused.about(id, name);
        out.classification = Some("write");
        return out;
    }
    if let Connector::Peer { blueprint } = c {
        // The target may write only if this call could: a write allowed here (approved, or
        // counted by the gate) is allowed there; anything else is refused there if it writes.
        let write_allowed = class == Class::Write || matches!(writes, Writes::Allow);
        let mut out = crate::gateway::peer::call(state, ctx, id, blueprint, name, tool_args.clone(), write_allowed).await;
        if out.error_code.as_deref() == Some("destructive_tool_requires_approval") {
            // The target's refusal names its own address; the caller needs this one.
            out = approval_required(address, tool_args);
        }
        match redact(ctx, &mut out.result) {
            Ok(hits) => out.redactions = hits,
            Err(detector) => out = blocked(&detector, "result"),
        }
        if out.error_code.is_none() || out.error_code.as_deref() == Some("tool_error") {
            let bytes = serialized_len(&out.result);
            out.stashed = stash_if_large(state, ctx, address, &mut out.result, bytes).await;
        }
        let mut out = out.about(id, name);
        out.classification = Some(class_name(class));
        out.approval_id = approval;
        return out;
    }
    // A 2026-07-28 agent's call goes to a downstream that speaks that revision on it, so the
    // downstream may ask the agent for input (an InputRequiredResult, sealed on its way up).
    let mut relayed = None;
    let mut replay = None;
    if let Some(agent) = ctx.input.as_deref() {
        let call = input::Call {
            connector: id,
            key: &key,
            c,
            credential: credential.as_ref(),
            method: "tools/call",
            target: name,
            schema: Some(&tool.input_schema),
        };
        match Box::pin(input::relay(state, ctx, agent, call, json!({ "name": name, "arguments": tool_args }))).await {
            // A downstream of the handshake era: its requests for input become rounds.
            Ok(None) => replay = input::replay_of(state, ctx, agent, id, ("tools/call", name)),
            Ok(Some(Relayed::Complete(value))) => {
                relayed = Some(
                    serde_json::from_value::<CallToolResult>(value)
                        .map_err(|e| Failure::Unavailable(format!("a malformed tool result: {}", echo(&e.to_string())))),
                )
            }
            Ok(Some(Relayed::InputRequired(value))) => {
                let mut out = Outcome::interim(Interim::InputRequired(value)).about(id, name);
                out.approval_id = approval;
                return out;
            }
            // A program is told in its own terms; so is the six-tool surface of a downstream's
            // JSON-RPC error (a native pool passes that on as it is).
            Err(Stopped::Refused(r))
                if r.code == "input_required_unsupported"
                    || (r.code == "downstream_error" && !ctx.pool.as_ref().is_some_and(|(_, p)| p.native)) =>
            {
                return Outcome::error(r.code, r.message, None).about(id, name);
            }
            Err(Stopped::Refused(r)) => return Outcome::interim(Interim::Refused(r)).about(id, name),
            Err(Stopped::Failed(f)) => relayed = Some(Err(f)),
        }
    }
    let called = match relayed {
        Some(called) => called,
        None => {
            let replaying = replay.as_ref().and_then(|r| ctx.upstream.as_ref().map(|u| u.replaying(r.clone())));
            let upstream = replaying.as_ref().or(ctx.upstream.as_ref());
            let call = downstream::ToolCall { tool: name, args: tool_args, schema: Some(&tool.input_schema), upstream };
            let called = state.downstreams.call(ctx.tenant.id.0, &key, c, call, credential.as_ref()).await;
            // The downstream asked for input no round answered: whatever it made of the
            // refusal, the agent is asked, and the call is made again with its answer.
            if let Some(round) = replay.as_deref().and_then(|r| input::replay_round(state, ctx, id, ("tools/call", name), r)) {
                return Outcome::interim(Interim::InputRequired(round)).about(id, name);
            }
            called
        }
    };
    let mut hits = 0;
    let mut out = match called.map(|mut result| redact(ctx, &mut result).map(|h| (h, result))) {
        Ok(Err(detector)) => blocked(&detector, "result"),
        Ok(Ok((masked, result))) => {
            hits = masked;
            let bytes = serialized_len(&result);
            let error_code = result.is_error.unwrap_or(false).then(|| "tool_error".to_owned());
            let mut result = result;
            let stashed = stash_if_large(state, ctx, address, &mut result, bytes).await;
            Outcome {
                error_code,
                stashed,
                result,
                connector: None,
                tool: None,
                classification: None,
                result_bytes: bytes.min(i32::MAX as usize) as i32,
                jsonrpc: None,
                interim: None,
                redactions: 0,
                quota: None,
                approval_id: None,
            }
        }
        Err(f) => {
            let f = Box::pin(super::repair(state, ctx, id, c, credential.as_ref(), f)).await;
            note(state, ctx, "downstream.call", id, c, &f);
            // A downstream's error text reaches the agent too.
            let mut out = failure(f);
            match redact(ctx, &mut out.result) {
                Ok(masked) => hits = masked,
                Err(detector) => out = blocked(&detector, "result"),
            }
            out
        }
    }
    .about(id, name);
    out.classification = Some(class_name(class));
    out.redactions = hits;
    out.approval_id = approval;
    out
}

/// Masks, in place, what the workspace's detectors find in a result on its way to the agent
/// (before any stash): its content blocks (all but their `type`), `structuredContent` and
/// `_meta`. The number masked, or the blocking detector that matched.
fn redact(ctx: &GatewayCtx, result: &mut CallToolResult) -> Result<u32, String> {
    let Some(r) = ctx.bound.redactor() else { return Ok(0) };
    let mut value = serde_json::to_value(&*result).map_err(|_| "unreadable".to_owned())?;
    let mut masked = 0u32;
    let mut stop = None;
    let mut add = |scan: crate::workspaces::config::redaction::Scan| {
        masked = masked.saturating_add(scan.masked);
        if stop.is_none() {
            stop = scan.blocked;
        }
    };
    if let Some(content) = value.get_mut("content").and_then(Value::as_array_mut) {
        for block in content.iter_mut().filter_map(Value::as_object_mut) {
            for (key, v) in block.iter_mut() {
                if key != "type" {
                    add(r.scan(v));
                }
            }
        }
    }
    for key in ["structuredContent", "_meta"] {
        if let Some(v) = value.get_mut(key) {
            add(r.scan(v));
        }
    }
    if let Some(detector) = stop {
        return Err(detector);
    }
    if masked > 0 {
        *result = serde_json::from_value(value).map_err(|_| "unreadable".to_owned())?;
    }
    Ok(masked)
}

/// The refusal of a call whose arguments or result a blocking detector matched.
fn blocked(detector: &str, what: &str) -> Outcome {
    Outcome::error(
        "redaction_blocked",
        format!("the {what} held something this workspace's redaction blocks (detector {detector})"),
        Some(json!({ "detector": detector })),
    )
}

/// The refusal of a write made through `call_tool` (or a program), naming the call to make.
fn approval_required(address: &str, tool_args: &JsonObject) -> Outcome {
    let call = json!({ "address": address, "args": tool_args });
    let mut next = json!({ "tool": "call_destructive_tool" });
    if call.to_string().len() <= ECHO_CAP {
        next["arguments"] = call;
    }
    let mut out = Outcome::error(
        "destructive_tool_requires_approval",
        format!("`{}` may change something; call it with call_destructive_tool after the human approves", echo(address)),
        Some(json!({ "nextAction": next })),
    );
    out.classification = Some("write");
    out
}

/// Replaces `result` (`bytes` long as JSON, [`serialized_len`]) by how to page it when it is
/// over the inline cap: only such a result is serialized, to stash. Through a peer, the
/// outermost workspace stashes (its caller pages it there). `true`: it was stashed.
async fn stash_if_large(state: &AppState, ctx: &GatewayCtx, address: &str, result: &mut CallToolResult, bytes: usize) -> bool {
    if bytes <= stash::INLINE_CAP_BYTES || !ctx.peer_path.is_empty() {
        return false;
    }
    let body = serde_json::to_string(result).unwrap_or_default();
    // Boxed: the stash's future stays out of every call's.
    *result = Box::pin(stashed(state, ctx, address, &body)).await;
    !result.is_error.unwrap_or(false)
}

/// Stashes a result over the inline cap and answers with how to page it. If it cannot be
/// stashed, the call still happened: say so rather than drop the answer silently.
async fn stashed(state: &AppState, ctx: &GatewayCtx, address: &str, body: &str) -> CallToolResult {
    match stash::put(&state.db, ctx.tenant.id, ctx.bound.workspace.id.0, &ctx.actor_id, address, body).await {
        Ok(id) => {
            let (_, _, next) = stash::page(body, 0);
            CallToolResult::success(vec![ContentBlock::text(
                json!({
                    "stashed": { "id": id, "total_bytes": body.len(), "expires_in_s": stash::TTL_SECS as u64 },
                    "message": "The result is larger than 24,000 bytes; read it in pages.",
                    "nextAction": { "tool": "call_tool", "arguments": { "address": RESULT_ADDRESS, "args": { "id": id, "offset": 0 } } },
                    "pages": next.map_or(1, |_| body.len().div_ceil(stash::PAGE_BYTES)),
                })
                .to_string(),
            )])
        }
        Err(e) => {
            tracing::error!(error = %e, "could not stash a large result");
            let error = json!({ "error": { "code": "result_too_large", "message": "the call completed, but its result was too large to return and could not be stashed" } });
            CallToolResult::error(vec![ContentBlock::text(error.to_string())])
        }
    }
}

async fn result_page(state: &AppState, ctx: &GatewayCtx, args: &JsonObject) -> Outcome {
    result_page_within(state, ctx, args, stash::PAGE_BYTES).await
}

/// A page of at most `max_bytes` (and of `args.maxBytes` when smaller) of a stashed result.
pub async fn result_page_within(state: &AppState, ctx: &GatewayCtx, args: &JsonObject, max_bytes: usize) -> Outcome {
    let Some(id) = args.get("id").and_then(Value::as_str).and_then(|s| s.parse::<uuid::Uuid>().ok()) else {
        return Outcome::error("invalid_args", "`args.id` is the stashed result's id".into(), None);
    };
    let offset = args.get("offset").and_then(Value::as_u64).unwrap_or(0) as usize;
    let missing = || Outcome::error("unknown_result", "no such stashed result (they last 15 minutes)".into(), None);
    let Ok(Some((address, body))) = stash::get(&state.db, ctx.tenant.id, ctx.bound.workspace.id.0, &ctx.actor_id, id).await
    else {
        return missing();
    };
    // The caller's grants are checked again on every page. A program's own result was made
    // from what the same caller could see when it ran.
    if address != PROGRAM_ADDRESS {
        let Some((connector, tool)) = address.split_once('.') else { return missing() };
        if !ctx.visible(connector, Some(tool)) {
            return missing();
        }
    }
    let max = args.get("maxBytes").and_then(Value::as_u64).map_or(max_bytes, |m| (m as usize).clamp(1, max_bytes));
    let (chunk, start, next) = stash::page_within(&body, offset, max);
    Outcome::ok(
        json!({ "id": id, "address": address, "offset": start, "next_offset": next, "total_bytes": body.len(), "chunk": chunk }),
    )
}

/// The length of `value`'s JSON text, counted as it is serialized, never held (0 if it
/// cannot be serialized, as an empty text would be).
fn serialized_len(value: &impl serde::Serialize) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0 += bytes.len();
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    serde_json::to_writer(&mut count, value).map_or(0, |()| count.0)
}

/// JSON-RPC's code for a refusal by rate limit (2026-07-28).
const RATE_LIMITED: i32 = -32029;

/// The tenant's quotas for this call: the permit it holds while it runs, or the refusal.
async fn admitted(state: &AppState, ctx: &GatewayCtx, (id, name): (&str, &str), class: Class) -> Result<quotas::Permit, Outcome> {
    let call = quotas::Call {
        connector: id,
        tool: name,
        write: class == Class::Write,
        token: (ctx.actor_kind, &ctx.actor_id),
        member: ctx.caller.member_id,
    };
    state.quotas.admit(ctx.tenant.id, ctx.bound.epoch, &call).await.map_err(|r| refused(ctx, r))
}

/// A quota's refusal: a tool error result with `retryAfterMs`, or on 2026-07-28 (an agent's
/// own call) the JSON-RPC error `-32029` for `rate_limited`.
fn refused(ctx: &GatewayCtx, r: quotas::Refusal) -> Outcome {
    let extra = json!({ "retryable": true, "retryAfterMs": r.retry_after_ms, "limit": r.limit });
    let modern = ctx.input.as_ref().is_some_and(|agent| !agent.program);
    let mut out = if modern && r.code == "rate_limited" {
        let mut data = extra;
        data["code"] = json!(r.code);
        let error = rmcp::ErrorData::new(rmcp::model::ErrorCode(RATE_LIMITED), r.message, Some(data));
        Outcome::interim(Interim::Refused(input::Refused::error(r.code, error)))
    } else {
        Outcome::error(r.code, r.message, Some(extra))
    };
    out.quota = Some(r.limit).filter(|l| !l.is_empty());
    out
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use rmcp::model::{CallToolResult, ContentBlock};

    use super::serialized_len;

    proptest! {
        /// The counted length is the serialized text's, escapes and multi-byte characters
        /// included: the stash threshold and the activity row's `result_bytes` depend on it.
        #[test]
        fn counts_what_serializing_writes(texts in prop::collection::vec("\\PC{0,40}|[\"\\\\\\n\\t\\u{0}-\\u{1f}]{0,8}", 0..4), error in any::<bool>()) {
            let blocks = texts.into_iter().map(ContentBlock::text).collect::<Vec<_>>();
            let result = if error { CallToolResult::error(blocks) } else { CallToolResult::success(blocks) };
            prop_assert_eq!(serialized_len(&result), serde_json::to_string(&result).unwrap().len());
        }
    }
}
