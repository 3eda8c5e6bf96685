//! `execute_code`: an agent's JavaScript program, run in a fresh QuickJS sandbox whose only
//! host object is `gatehouse`, over the workspace's tools. Every host call takes the same
//! path as the top-level tools (grants, fail-closed classification, deadlines, stashing) and
//! writes its own activity row (`source = execute_code`).
//!
//! Each program runs on a thread of its own (QuickJS runtimes cannot move between threads),
//! admitted by [`admission`]; host calls run on the tokio runtime and are answered back to the
//! program's thread, so `Promise.all` over host calls runs them concurrently.

pub mod admission;
mod host;
pub mod recover;
pub mod sandbox;

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use rmcp::model::{CallToolResult, ContentBlock, JsonObject};
use serde_json::{Map, Value, json};

pub use recover::MAX_CODE_BYTES;
use sandbox::{Dispatch, Emitted, End, Failure, Limits, Report};

use crate::{
    AppState,
    config::CodeConfig,
    gateway::{
        GatewayCtx, stash,
        surface::{self, Outcome, PROGRAM_ADDRESS},
    },
};

/// The stack of a program's thread, and the part of it QuickJS may use (deep recursion ends
/// in `stack_overflow` long before the thread's guard page).
const THREAD_STACK_BYTES: usize = 8 << 20;
const JS_STACK_BYTES: usize = 1 << 20;
/// A program's result over `result_chars` is stashed and paged, up to this size.
pub const MAX_STASHED_RESULT_BYTES: usize = 4 << 20;

/// This replica's program executor: its limits and admission.
#[derive(Debug)]
pub struct Executor {
    pub config: CodeConfig,
    pub admission: admission::Admission,
}

impl Executor {
    pub fn new(config: CodeConfig) -> Executor {
        Executor { admission: admission::Admission::new(&config), config }
    }

    fn limits(&self) -> Limits {
        let c = &self.config;
        Limits {
            heap_bytes: c.heap_bytes,
            stack_bytes: JS_STACK_BYTES,
            cpu: Duration::from_millis(c.cpu_ms),
            wall: Duration::from_millis(c.wall_ms),
            host_calls: c.host_calls,
            log_chars: c.log_chars,
            emit_bytes: c.emit_bytes,
            emit_blocks: c.emit_blocks,
        }
    }
}

/// Caps text echoed back from a program.
pub(crate) fn cap(text: &str) -> String {
    surface::echo(text)
}

/// Sets the flag when dropped: the request went away, so the program should stop.
struct CancelOnDrop(Arc<AtomicBool>);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// Runs `args.code` and answers with its result (or its typed failure).
pub async fn execute(state: &AppState, ctx: &GatewayCtx, args: &JsonObject) -> Outcome {
    let Some(code) = args.get("code").and_then(Value::as_str) else {
        return Outcome::error("invalid_args", "`code` (one async arrow function) is required".into(), None);
    };
    let program = match recover::recover(code) {
        Ok(p) => p,
        Err(recover::Refused::TooLarge(n)) => {
            return Outcome::error(
                "code_too_large",
                format!("the code is {n} bytes; at most {MAX_CODE_BYTES} are accepted"),
                Some(json!({ "limit": MAX_CODE_BYTES })),
            );
        }
        Err(recover::Refused::Empty) => {
            return Outcome::error(
                "syntax_error",
                "there is no program in `code`".into(),
                Some(json!({ "hint": recover::Mistake::NotAFunction.hint() })),
            );
        }
    };
    let executor = &state.code;
    let slot = match executor.admission.admit(ctx.tenant.id.0).await {
        Ok(slot) => slot,
        Err(refusal) => {
            let message = match refusal {
                admission::Refusal::QueueFull => "too many programs are running or waiting on this replica; retry shortly",
                admission::Refusal::Timeout => "no program slot freed up in time on this replica; retry shortly",
            };
            return Outcome::error(
                "executor_overloaded",
                message.into(),
                Some(json!({ "retryable": true, "retryAfterMs": admission::RETRY_AFTER_MS })),
            );
        }
    };
    let env = Arc::new(host::Env::new(state.clone(), ctx.clone(), executor.config.clone()));
    let cancel = Arc::new(AtomicBool::new(false));
    let _cancel_on_drop = CancelOnDrop(cancel.clone());
    let (tx, rx) = tokio::sync::oneshot::channel::<Report>();
    let handle = tokio::runtime::Handle::current();
    let limits = executor.limits();
    let dispatch_env = env.clone();
    let source = program.clone();
    let spawned = std::thread::Builder::new().name("gatehouse-code".into()).stack_size(THREAD_STACK_BYTES).spawn(move || {
        // The slot is freed when the program's thread is done, not when the request is.
        let _slot = slot;
        let dispatch: Dispatch = Box::new(move |request, answer| {
            let env = dispatch_env.clone();
            handle.spawn(async move {
                let id = request.id;
                let reply = env.serve(request).await;
                let _ = answer.send((id, reply));
            });
        });
        let _ = tx.send(sandbox::run(&source, &limits, dispatch, cancel));
    });
    if let Err(e) = spawned {
        tracing::error!(error = %e, "could not start a program thread");
        return Outcome::error("sandbox_failed", "the program could not be started".into(), None);
    }
    let Ok(report) = rx.await else {
        tracing::error!("a program thread ended without a report");
        return Outcome::error("sandbox_failed", "the program's sandbox failed".into(), None);
    };
    tracing::debug!(
        cpu_us = report.cpu.as_micros() as u64,
        wall_us = report.wall.as_micros() as u64,
        calls = report.host_calls,
        "program ran"
    );
    finish(state, ctx, &env, report).await
}

/// The program's answer: its value (inline, or stashed when long), logs and emitted blocks;
/// or its typed failure. A write whose outcome is unknown makes the whole answer
/// `write_outcome_unknown`, whatever else happened.
async fn finish(state: &AppState, ctx: &GatewayCtx, env: &host::Env, report: Report) -> Outcome {
    let writes = env.close();
    let unknown = writes.iter().any(|w| w["outcome"] == "unknown");
    let mut common = Map::new();
    common.insert("hostCalls".into(), json!(report.host_calls));
    if !report.logs.is_empty() {
        common.insert("logs".into(), json!(report.logs));
    }
    if !writes.is_empty() {
        common.insert("writes".into(), Value::Array(writes.clone()));
    }
    let classification = Some(if writes.is_empty() { "read" } else { "write" });
    let failed = |f: Failure, common: Map<String, Value>| {
        let mut extra = common;
        if let Some(line) = f.line {
            extra.insert("line".into(), json!(line));
        }
        if let Some(hint) = f.hint {
            extra.insert("hint".into(), json!(hint));
        }
        extra.extend(f.extra);
        Outcome::error(&f.code, f.message, Some(Value::Object(extra)))
    };
    let end = match report.end {
        End::Value(_) if !report.pending.is_empty() => End::Failed(Failure {
            code: "unawaited_calls".into(),
            message: format!(
                "the program returned while {} host call(s) were still running; await every gatehouse call (e.g. with Promise.all)",
                report.pending.len()
            ),
            line: None,
            hint: None,
            extra: Map::new(),
        }),
        end => end,
    };
    let mut out = match end {
        End::Failed(f) if unknown => {
            let mut extra = common;
            extra.insert("cause".into(), json!({ "code": f.code, "message": f.message }));
            Outcome::error("write_outcome_unknown", unknown_message(), Some(Value::Object(extra)))
        }
        End::Failed(f) => failed(f, common),
        End::Value(value) => {
            let body = if value.chars().count() > env.config.result_chars {
                match stash_result(state, ctx, &value).await {
                    Ok(pointer) => ("stashed", pointer),
                    Err(out) => return out,
                }
            } else {
                ("result", serde_json::from_str(&value).unwrap_or(Value::Null))
            };
            let mut answer = Map::new();
            answer.insert(body.0.into(), body.1);
            answer.extend(common);
            if unknown {
                return Outcome::error("write_outcome_unknown", unknown_message(), Some(Value::Object(answer)));
            }
            let text = Value::Object(answer).to_string();
            let bytes = text.len();
            let mut content = vec![ContentBlock::text(text)];
            content.extend(report.emitted.into_iter().map(|e| match e {
                Emitted::Text(text) => ContentBlock::text(text),
                Emitted::Image { data, mime_type } => ContentBlock::image(data, mime_type),
                Emitted::Audio { data, mime_type } => ContentBlock::audio(data, mime_type),
            }));
            let mut out = Outcome::ok(Value::Null);
            out.result = CallToolResult::success(content);
            out.result_bytes = bytes.min(i32::MAX as usize) as i32;
            out
        }
    };
    out.classification = classification;
    out
}

fn unknown_message() -> String {
    "a write the program started may or may not have happened (it was still running, or timed out, when the run ended); \
     check before retrying"
        .into()
}

/// Stashes a long result of the program itself, readable with `call_tool` on `gatehouse.result`.
async fn stash_result(state: &AppState, ctx: &GatewayCtx, value: &str) -> Result<Value, Outcome> {
    if value.len() > MAX_STASHED_RESULT_BYTES {
        return Err(Outcome::error(
            "result_too_large",
            format!("the program's result is {} bytes; at most {MAX_STASHED_RESULT_BYTES} can be paged", value.len()),
            None,
        ));
    }
    match stash::put(&state.db, ctx.tenant.id, ctx.bound.workspace.id.0, &ctx.actor_id, PROGRAM_ADDRESS, value).await {
        Ok(id) => Ok(json!({
            "id": id,
            "total_bytes": value.len(),
            "expires_in_s": stash::TTL_SECS as u64,
            "message": "The program's result is too long to return at once; read it in pages.",
            "nextAction": { "tool": "call_tool", "arguments": { "address": surface::RESULT_ADDRESS, "args": { "id": id, "offset": 0 } } },
        })),
        Err(e) => {
            tracing::error!(error = %e, "could not stash a program's result");
            Err(Outcome::error(
                "result_too_large",
                "the program completed, but its result was too long to return and could not be stashed".into(),
                None,
            ))
        }
    }
}
