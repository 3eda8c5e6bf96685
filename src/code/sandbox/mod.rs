//! One program in one fresh QuickJS runtime, on the calling (dedicated) thread.
//!
//! The runtime has a heap limit, a stack limit and an interrupt handler that stops the guest
//! when its thread has used its CPU time, when the wall clock runs out, or when a host-side
//! limit was crossed (the stop is QuickJS's uncatchable interrupt, so no `try` survives it).
//! Host calls leave the thread through `Dispatch` and come back on a channel; while the
//! thread waits for them it uses no CPU, so waiting does not count against the guest.

mod failure;
mod natives;
#[cfg(test)]
mod tests;

use std::{
    cell::{Cell, RefCell},
    collections::BTreeSet,
    rc::Rc,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
        mpsc::{self, RecvTimeoutError},
    },
    time::{Duration, Instant},
};

use rquickjs::{
    Context, Ctx, Function, Runtime, Value,
    context::{EvalOptions, intrinsic},
};
use serde_json::{Map, Value as Json};

use super::recover::Program;
use failure::{is_out_of_memory, outcome, thrown};
use natives::install;

const FILENAME: &str = "program.js";

/// The limits of one run.
#[derive(Clone, Debug)]
pub struct Limits {
    pub heap_bytes: usize,
    pub stack_bytes: usize,
    pub cpu: Duration,
    pub wall: Duration,
    pub host_calls: u32,
    pub log_chars: usize,
    pub emit_bytes: usize,
    pub emit_blocks: usize,
}

/// What a program asked the host for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Search,
    Describe,
    Call,
    Result,
    Skill,
}

impl Kind {
    fn parse(name: &str) -> Option<Kind> {
        Some(match name {
            "search" => Kind::Search,
            "describe" => Kind::Describe,
            "call" => Kind::Call,
            "result" => Kind::Result,
            "skill" => Kind::Skill,
            _ => return None,
        })
    }
}

#[derive(Debug)]
pub struct HostRequest {
    pub id: u32,
    pub kind: Kind,
    pub payload: Json,
}

/// The host's answer: a JSON value to resolve with (`ok`) or an error object
/// (`{"code", "message", …}`) to reject with; or a limit that ends the run.
#[derive(Debug)]
pub struct Reply {
    pub ok: bool,
    pub json: String,
    pub fatal: Option<Stop>,
}

/// Starts a host call; the answer goes back through the sender, tagged with the request's id.
pub type Dispatch = Box<dyn Fn(HostRequest, mpsc::Sender<(u32, Reply)>)>;

/// A run ended by a limit (or by the caller going away), with its typed code.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stop {
    pub code: &'static str,
    pub message: String,
}

/// Why a program failed.
#[derive(Clone, Debug, PartialEq)]
pub struct Failure {
    pub code: String,
    pub message: String,
    /// A line of what the caller sent.
    pub line: Option<usize>,
    pub hint: Option<&'static str>,
    /// Whatever else the error carried (a host refusal's `nextAction`, …).
    pub extra: Map<String, Json>,
}

impl Failure {
    fn stop(stop: Stop) -> Failure {
        Failure { code: stop.code.to_owned(), message: stop.message, line: None, hint: None, extra: Map::new() }
    }

    fn new(code: &str, message: impl Into<String>) -> Failure {
        Failure { code: code.to_owned(), message: message.into(), line: None, hint: None, extra: Map::new() }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum Emitted {
    Text(String),
    Image { data: String, mime_type: String },
    Audio { data: String, mime_type: String },
}

/// How a run ended.
#[derive(Debug)]
pub enum End {
    /// The program's value, serialized as JSON.
    Value(String),
    Failed(Failure),
}

#[derive(Debug)]
pub struct Report {
    pub end: End,
    pub logs: String,
    pub emitted: Vec<Emitted>,
    pub host_calls: u32,
    /// Host calls still unanswered when the run ended.
    pub pending: Vec<u32>,
    pub cpu: Duration,
    pub wall: Duration,
}

/// The state the native functions and the interrupt handler share (no JavaScript values, so
/// nothing here can keep the runtime's objects alive).
struct Shared {
    abort: RefCell<Option<Stop>>,
    calls: Cell<u32>,
    next_id: Cell<u32>,
    pending: RefCell<BTreeSet<u32>>,
    logs: RefCell<String>,
    log_chars: Cell<usize>,
    emitted: RefCell<Vec<Emitted>>,
    emitted_bytes: Cell<usize>,
    limits: Limits,
    dispatch: Dispatch,
    tx: mpsc::Sender<(u32, Reply)>,
}

impl Shared {
    fn stop(&self, code: &'static str, message: String) {
        let mut abort = self.abort.borrow_mut();
        if abort.is_none() {
            *abort = Some(Stop { code, message });
        }
    }

    fn aborted(&self) -> bool {
        self.abort.borrow().is_some()
    }
}

/// CPU time this thread has used.
fn thread_cpu() -> Duration {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_THREAD_CPUTIME_ID).map(Duration::from).unwrap_or_default()
}

/// Runs `program` to its end under `limits`. `cancel` ends it early (the caller went away).
pub fn run(program: &Program, limits: &Limits, dispatch: Dispatch, cancel: Arc<AtomicBool>) -> Report {
    let started = Instant::now();
    let cpu_start = thread_cpu();
    let (tx, rx) = mpsc::channel();
    let shared = Rc::new(Shared {
        abort: RefCell::new(None),
        calls: Cell::new(0),
        next_id: Cell::new(1),
        pending: RefCell::new(BTreeSet::new()),
        logs: RefCell::new(String::new()),
        log_chars: Cell::new(0),
        emitted: RefCell::new(Vec::new()),
        emitted_bytes: Cell::new(0),
        limits: limits.clone(),
        dispatch,
        tx,
    });
    let deadline = started + limits.wall;
    let end = match Runtime::new() {
        Err(e) => End::Failed(Failure::new("sandbox_failed", format!("the sandbox could not start: {e}"))),
        Ok(rt) => {
            rt.set_memory_limit(limits.heap_bytes);
            rt.set_max_stack_size(limits.stack_bytes);
            let (s, cpu_limit, stop_flag) = (shared.clone(), limits.cpu, cancel.clone());
            rt.set_interrupt_handler(Some(Box::new(move || {
                if s.aborted() {
                    return true;
                }
                if stop_flag.load(Ordering::Relaxed) {
                    s.stop("cancelled", "the caller went away".into());
                } else if Instant::now() >= deadline {
                    s.stop("wall_clock_exceeded", wall_message(s.limits.wall));
                } else if thread_cpu().saturating_sub(cpu_start) > cpu_limit {
                    s.stop("cpu_time_exceeded", cpu_message(cpu_limit));
                }
                s.aborted()
            })));
            type Intrinsics = (
                intrinsic::Date,
                intrinsic::Eval,
                intrinsic::RegExpCompiler,
                intrinsic::RegExp,
                intrinsic::Json,
                intrinsic::MapSet,
                intrinsic::TypedArrays,
                intrinsic::Promise,
            );
            match Context::custom::<Intrinsics>(&rt) {
                Err(e) => End::Failed(Failure::new("sandbox_failed", format!("the sandbox could not start: {e}"))),
                Ok(context) => context.with(|ctx| drive(&ctx, program, &shared, &rx, deadline, &cancel)),
            }
        }
    };
    let end = match (shared.abort.borrow_mut().take(), end) {
        // A limit crossed anywhere wins over what the program made of it.
        (Some(stop), _) => End::Failed(Failure::stop(stop)),
        (None, end) => end,
    };
    Report {
        end,
        logs: shared.logs.take(),
        emitted: shared.emitted.take(),
        host_calls: shared.calls.get(),
        pending: shared.pending.borrow().iter().copied().collect(),
        cpu: thread_cpu().saturating_sub(cpu_start),
        wall: started.elapsed(),
    }
}

fn wall_message(wall: Duration) -> String {
    format!("the program ran for longer than {} ms", wall.as_millis())
}

fn cpu_message(cpu: Duration) -> String {
    format!("the program used more than {} ms of CPU time (waiting for host calls does not count)", cpu.as_millis())
}

/// The bootstrap's interface.
struct Api<'js> {
    start: Function<'js>,
    settle: Function<'js>,
    poll: Function<'js>,
}

fn drive<'js>(
    ctx: &Ctx<'js>,
    program: &Program,
    shared: &Rc<Shared>,
    rx: &mpsc::Receiver<(u32, Reply)>,
    deadline: Instant,
    cancel: &AtomicBool,
) -> End {
    let api = match install(ctx, shared) {
        Ok(api) => api,
        Err(e) => {
            let caught = ctx.catch();
            if is_out_of_memory(ctx, &caught, &e) {
                return End::Failed(Failure::new("memory_exceeded", "the sandbox ran out of memory while starting"));
            }
            return End::Failed(Failure::new("sandbox_failed", format!("the sandbox could not start: {e}")));
        }
    };
    let mut options = EvalOptions::default();
    options.global = true;
    options.strict = true;
    options.backtrace_barrier = true;
    options.filename = Some(FILENAME.to_owned());
    // `(` on the program's first line keeps its line numbers.
    let wrapped = format!("({}\n)", program.source);
    let function: Value = match ctx.eval_with_options(wrapped, options) {
        Ok(f) => f,
        Err(e) => return End::Failed(thrown(ctx, program, e, true)),
    };
    if let Err(e) = api.start.call::<_, ()>((function,)) {
        return End::Failed(thrown(ctx, program, e, false));
    }
    loop {
        if shared.aborted() {
            return End::Failed(Failure::new("stopped", ""));
        }
        while ctx.execute_pending_job() {
            if shared.aborted() {
                break;
            }
        }
        if shared.aborted() {
            continue;
        }
        match api.poll.call::<_, Option<String>>(()) {
            Ok(Some(text)) => return outcome(program, &text),
            Ok(None) => {}
            Err(e) => return End::Failed(thrown(ctx, program, e, false)),
        }
        if shared.pending.borrow().is_empty() {
            return End::Failed(Failure {
                hint: Some(
                    "Every promise the program awaits must settle: await gatehouse calls, not promises that never resolve.",
                ),
                ..Failure::new("program_stalled", "the program waits for a promise that nothing will settle")
            });
        }
        let now = Instant::now();
        if now >= deadline {
            shared.stop("wall_clock_exceeded", wall_message(shared.limits.wall));
            continue;
        }
        // Wake now and then to notice a caller that went away.
        match rx.recv_timeout((deadline - now).min(Duration::from_millis(250))) {
            Ok((id, reply)) => {
                shared.pending.borrow_mut().remove(&id);
                if let Some(stop) = reply.fatal {
                    shared.stop(stop.code, stop.message);
                    continue;
                }
                if let Err(e) = api.settle.call::<_, ()>((id, reply.ok, reply.json)) {
                    return End::Failed(thrown(ctx, program, e, false));
                }
            }
            Err(RecvTimeoutError::Timeout) => {
                if cancel.load(Ordering::Relaxed) {
                    shared.stop("cancelled", "the caller went away".into());
                }
            }
            Err(RecvTimeoutError::Disconnected) => return End::Failed(Failure::new("sandbox_failed", "the host went away")),
        }
    }
}
