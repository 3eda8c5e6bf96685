//! The host side of a program's calls: each one runs on the tokio runtime through the same
//! surface functions as the top-level tools, under the per-call deadline, and records one
//! activity row with `source = execute_code`. Writes are refused unless the request came
//! through a trusted pool, where they are counted and tracked until their outcome is known.

use std::{
    sync::Mutex,
    time::{Duration, Instant},
};

use rmcp::model::JsonObject;
use serde_json::{Value, json};

use super::sandbox::{HostRequest, Kind, Reply, Stop};
use crate::{
    AppState,
    config::CodeConfig,
    gateway::{
        GatewayCtx,
        activity::Row,
        surface::{self, Outcome, Writes},
    },
};

/// Pages a program may read at once from a stashed result.
pub const MAX_PAGE_BYTES: usize = 1 << 20;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum WriteState {
    Running,
    Done,
    Failed,
    Unknown,
}

#[derive(Debug, Default)]
struct WriteLog {
    /// The run is over: no write may start any more.
    closed: bool,
    entries: Vec<(u32, String, WriteState)>,
}

/// What a program's host calls share.
pub struct Env {
    state: AppState,
    ctx: GatewayCtx,
    pub config: CodeConfig,
    trusted: bool,
    writes: Mutex<WriteLog>,
}

impl Env {
    pub fn new(state: AppState, mut ctx: GatewayCtx, config: CodeConfig) -> Env {
        // A program's host calls cannot answer a downstream's request for input: on
        // 2026-07-28 such a request becomes `input_required_unsupported` for the program.
        if ctx.input.is_some() {
            ctx.input = Some(crate::gateway::input::Agent::program());
        }
        let trusted = ctx.pool.as_ref().is_some_and(|(_, p)| p.trusted);
        Env { state, ctx, config, trusted, writes: Mutex::default() }
    }

    fn log(&self) -> std::sync::MutexGuard<'_, WriteLog> {
        self.writes.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Admits write `id` to `address` (`None`), or says why not (the run is over; the budget
    /// is spent).
    fn begin_write(&self, id: u32, address: &str) -> Option<Outcome> {
        let mut log = self.log();
        if log.closed {
            return Some(Outcome::error("run_ended", "the program's run ended before this write started".into(), None));
        }
        if log.entries.len() >= self.config.writes as usize {
            let message = format!("the program tried more than {} writes", self.config.writes);
            return Some(Outcome::error("write_budget_exceeded", message, None));
        }
        log.entries.push((id, address.to_owned(), WriteState::Running));
        None
    }

    fn is_write(&self, id: u32) -> bool {
        self.log().entries.iter().any(|(i, _, _)| *i == id)
    }

    fn end_write(&self, id: u32, state: WriteState) {
        if let Some(entry) = self.log().entries.iter_mut().find(|(i, _, _)| *i == id) {
            entry.2 = state;
        }
    }

    /// Ends the run: no write starts after this; one still running is unknown. Answers every
    /// write the program made, `{address, outcome}`.
    pub fn close(&self) -> Vec<Value> {
        let mut log = self.log();
        log.closed = true;
        log.entries
            .iter_mut()
            .map(|(_, address, state)| {
                if *state == WriteState::Running {
                    *state = WriteState::Unknown;
                }
                let outcome = match state {
                    WriteState::Done => "ok",
                    WriteState::Failed => "error",
                    WriteState::Running | WriteState::Unknown => "unknown",
                };
                json!({ "address": address, "outcome": outcome })
            })
            .collect()
    }

    /// Runs one host call to its reply, recording its activity row.
    pub async fn serve(&self, request: HostRequest) -> Reply {
        let started = Instant::now();
        let HostRequest { id, kind, payload } = request;
        let args: JsonObject = match payload {
            Value::Object(map) => map,
            _ => JsonObject::new(),
        };
        let mut deadline = self.config.host_call_timeout_ms;
        if kind == Kind::Call
            && let Some(ms) = args.get("timeoutMs").and_then(Value::as_u64)
        {
            deadline = ms.clamp(1, deadline);
        }
        let outcome = match tokio::time::timeout(Duration::from_millis(deadline), self.run(id, kind, &args)).await {
            Ok(outcome) => outcome,
            Err(_) => Outcome::error("timeout", format!("the host call did not finish within {deadline} ms"), None),
        };
        let outcome = if self.is_write(id) { self.settle_write(id, outcome, &args) } else { outcome };
        let name = match kind {
            Kind::Search => "search_tools",
            Kind::Describe => "describe_tools",
            Kind::Call => "call_tool",
            Kind::Result => surface::RESULT_ADDRESS,
            Kind::Skill => "skills",
        };
        self.state.activity.record(Row::of_call(&self.ctx, name, &outcome, started, "execute_code"));
        reply(kind, &outcome)
    }

    async fn run(&self, id: u32, kind: Kind, args: &JsonObject) -> Outcome {
        let (state, ctx) = (&self.state, &self.ctx);
        match kind {
            Kind::Search => surface::search(state, ctx, args).await,
            Kind::Describe => surface::describe(state, ctx, args).await,
            Kind::Skill => surface::skill(args.get("name").and_then(Value::as_str).unwrap_or("usage")),
            Kind::Result => {
                let mut page = args.clone();
                page.retain(|k, v| k != "maxBytes" || !v.is_null());
                surface::result_page_within(state, ctx, &page, MAX_PAGE_BYTES).await
            }
            Kind::Call => {
                let mut call = JsonObject::new();
                for k in ["address", "args"] {
                    if let Some(v) = args.get(k) {
                        call.insert(k.into(), v.clone());
                    }
                }
                if !self.trusted {
                    return surface::call_with(state, ctx, &call, Writes::Refuse).await;
                }
                let gate = |address: &str| self.begin_write(id, address);
                surface::call_with(state, ctx, &call, Writes::Gated(&gate)).await
            }
        }
    }

    /// A write's outcome: a timeout or a broken connection leaves it unknown (it may or may
    /// not have happened), and the program is told so; it is never retried.
    fn settle_write(&self, id: u32, outcome: Outcome, args: &JsonObject) -> Outcome {
        match outcome.error_code.as_deref() {
            None => {
                self.end_write(id, WriteState::Done);
                outcome
            }
            Some(code @ ("timeout" | "unavailable")) => {
                self.end_write(id, WriteState::Unknown);
                let address = args.get("address").and_then(Value::as_str).unwrap_or("");
                let mut out = Outcome::error(
                    "write_outcome_unknown",
                    format!("the write to `{}` may or may not have happened; check before retrying", surface::echo(address)),
                    Some(json!({ "cause": code })),
                );
                out.connector = outcome.connector;
                out.tool = outcome.tool;
                out.classification = Some("write");
                out
            }
            Some(_) => {
                self.end_write(id, WriteState::Failed);
                outcome
            }
        }
    }
}

/// What the program sees: a refusal rejects with its `{code, message, …}`; a call resolves
/// with the tool's MCP result (or the stash pointer of a long one); the rest with their JSON.
fn reply(kind: Kind, outcome: &Outcome) -> Reply {
    if let Some(error) = outcome.refusal() {
        let fatal = (error["code"] == "write_budget_exceeded")
            .then(|| Stop { code: "write_budget_exceeded", message: error["message"].as_str().unwrap_or("").to_owned() });
        return Reply { ok: false, json: error.to_string(), fatal };
    }
    let text = || outcome.result.content.first().and_then(|c| c.as_text()).map(|t| t.text.clone()).unwrap_or_default();
    let json = if kind == Kind::Call && !outcome.stashed {
        serde_json::to_string(&outcome.result).unwrap_or_else(|_| "null".into())
    } else {
        let text = text();
        if serde_json::from_str::<serde::de::IgnoredAny>(&text).is_ok() { text } else { Value::String(text).to_string() }
    };
    Reply { ok: true, json, fatal: None }
}
