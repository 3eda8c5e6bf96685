//! One program in one fresh QuickJS runtime, on the calling (dedicated) thread.
//!
//! The runtime has a heap limit, a stack limit and an interrupt handler that stops the guest
//! when its thread has used its CPU time, when the wall clock runs out, or when a host-side
//! limit was crossed (the stop is QuickJS's uncatchable interrupt, so no `try` survives it).
//! Host calls leave the thread through `Dispatch` and come back on a channel; while the
//! thread waits for them it uses no CPU, so waiting does not count against the guest.

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
    Context, Ctx, Exception, Function, Object, Runtime, Value,
    context::{EvalOptions, intrinsic},
};
use serde_json::{Map, Value as Json, json};

use super::recover::{self, Mistake, Program};

const BOOTSTRAP: &str = include_str!("bootstrap.js");
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

/// Evaluates the bootstrap with the native functions.
fn install<'js>(ctx: &Ctx<'js>, shared: &Rc<Shared>) -> rquickjs::Result<Api<'js>> {
    let mut options = EvalOptions::default();
    options.strict = true;
    options.filename = Some("gatehouse.js".to_owned());
    let install: Function = ctx.eval_with_options(BOOTSTRAP, options)?;
    let s = shared.clone();
    let host = Function::new(ctx.clone(), move |ctx: Ctx<'js>, kind: String, payload: String| -> rquickjs::Result<u32> {
        host_call(&ctx, &s, &kind, &payload)
    })?;
    let s = shared.clone();
    let log = Function::new(ctx.clone(), move |ctx: Ctx<'js>, level: String, text: String| -> rquickjs::Result<()> {
        log_line(&ctx, &s, &level, &text)
    })?;
    let s = shared.clone();
    let emit =
        Function::new(ctx.clone(), move |ctx: Ctx<'js>, block: String| -> rquickjs::Result<()> { emit_block(&ctx, &s, &block) })?;
    let api: Object = install.call((host, log, emit))?;
    Ok(Api { start: api.get("start")?, settle: api.get("settle")?, poll: api.get("poll")? })
}

fn host_call(ctx: &Ctx<'_>, s: &Shared, kind: &str, payload: &str) -> rquickjs::Result<u32> {
    let Some(kind) = Kind::parse(kind) else { return Err(Exception::throw_type(ctx, "no such host call")) };
    let calls = s.calls.get() + 1;
    s.calls.set(calls);
    if calls > s.limits.host_calls {
        let message = format!("the program made more than {} host calls", s.limits.host_calls);
        s.stop("budget_exceeded", message.clone());
        return Err(Exception::throw_internal(ctx, &message));
    }
    let payload: Json = serde_json::from_str(payload).unwrap_or(Json::Null);
    let id = s.next_id.get();
    s.next_id.set(id + 1);
    s.pending.borrow_mut().insert(id);
    (s.dispatch)(HostRequest { id, kind, payload }, s.tx.clone());
    Ok(id)
}

fn log_line(ctx: &Ctx<'_>, s: &Shared, level: &str, text: &str) -> rquickjs::Result<()> {
    let line = if level == "log" { format!("{text}\n") } else { format!("{level}: {text}\n") };
    let chars = line.chars().count();
    let used = s.log_chars.get();
    if used + chars > s.limits.log_chars {
        let room = s.limits.log_chars.saturating_sub(used);
        s.logs.borrow_mut().extend(line.chars().take(room));
        s.log_chars.set(s.limits.log_chars);
        let message = format!("the program logged more than {} characters", s.limits.log_chars);
        s.stop("log_limit", message.clone());
        return Err(Exception::throw_internal(ctx, &message));
    }
    s.log_chars.set(used + chars);
    s.logs.borrow_mut().push_str(&line);
    Ok(())
}

fn emit_block(ctx: &Ctx<'_>, s: &Shared, block: &str) -> rquickjs::Result<()> {
    let block: Json = serde_json::from_str(block).unwrap_or(Json::Null);
    let field = |name: &str| block.get(name).and_then(Json::as_str).map(str::to_owned);
    let media = |prefix: &str| -> Option<(String, String)> {
        let (data, mime_type) = (field("data")?, field("mimeType")?);
        use base64::Engine;
        let valid = mime_type.starts_with(prefix) && base64::engine::general_purpose::STANDARD.decode(&data).is_ok();
        valid.then_some((data, mime_type))
    };
    let emitted = match block.get("type").and_then(Json::as_str) {
        Some("text") => field("text").map(Emitted::Text),
        Some("image") => media("image/").map(|(data, mime_type)| Emitted::Image { data, mime_type }),
        Some("audio") => media("audio/").map(|(data, mime_type)| Emitted::Audio { data, mime_type }),
        _ => None,
    };
    let Some(emitted) = emitted else {
        return Err(Exception::throw_type(
            ctx,
            "emit takes {type: \"text\", text} or {type: \"image\"|\"audio\", data: <base64>, mimeType: \"image/…\"|\"audio/…\"}",
        ));
    };
    let bytes = match &emitted {
        Emitted::Text(text) => text.len(),
        Emitted::Image { data, .. } | Emitted::Audio { data, .. } => data.len(),
    };
    let count = s.emitted.borrow().len() + 1;
    let total = s.emitted_bytes.get() + bytes;
    if count > s.limits.emit_blocks || total > s.limits.emit_bytes {
        let message = format!("the program emitted more than {} blocks or {} bytes", s.limits.emit_blocks, s.limits.emit_bytes);
        s.stop("emit_limit", message.clone());
        return Err(Exception::throw_internal(ctx, &message));
    }
    s.emitted_bytes.set(total);
    s.emitted.borrow_mut().push(emitted);
    Ok(())
}

/// The program's outcome as `poll` gave it: `{"ok":true,"value":…}` (built by the bootstrap,
/// so the value is the text between the two) or `{"ok":false,"error":{…}}`.
fn outcome(program: &Program, text: &str) -> End {
    const OK: &str = "{\"ok\":true,\"value\":";
    if let Some(value) = text.strip_prefix(OK).and_then(|rest| rest.strip_suffix('}')) {
        return End::Value(value.to_owned());
    }
    let parsed: Json = serde_json::from_str(text).unwrap_or(Json::Null);
    End::Failed(failure(program, &parsed["error"], false))
}

/// An exception that escaped to the host: described by its properties.
fn thrown<'js>(ctx: &Ctx<'js>, program: &Program, e: rquickjs::Error, compiling: bool) -> Failure {
    let caught = ctx.catch();
    if is_out_of_memory(ctx, &caught, &e) {
        return Failure::new("memory_exceeded", memory_message());
    }
    let Some(object) = caught.as_object() else {
        return Failure::new("runtime_error", format!("the program failed: {e}"));
    };
    let text = |name: &str| object.get::<_, Option<rquickjs::Coerced<String>>>(name).ok().flatten().map(|c| c.0);
    let described = json!({
        "name": text("name").unwrap_or_default(),
        "message": text("message").unwrap_or_default(),
        "stack": text("stack").unwrap_or_default(),
    });
    failure(program, &described, compiling)
}

fn memory_message() -> String {
    "the program ran out of memory".into()
}

fn is_out_of_memory<'js>(_ctx: &Ctx<'js>, caught: &Value<'js>, e: &rquickjs::Error) -> bool {
    if matches!(e, rquickjs::Error::Allocation) {
        return true;
    }
    caught
        .as_object()
        .and_then(|o| Exception::from_object(o.clone()))
        .and_then(|x| x.message())
        .is_some_and(|m| m == "out of memory")
}

/// The typed failure of a described error `{name, message, stack, host?, code?, …}`.
fn failure(program: &Program, error: &Json, compiling: bool) -> Failure {
    let name = error["name"].as_str().unwrap_or("Error");
    let message = error["message"].as_str().unwrap_or("");
    let stack = error["stack"].as_str().unwrap_or("");
    let line = line_of(stack).map(|l| l + program.line_offset);
    if name == "InternalError" && message == "out of memory" {
        return Failure::new("memory_exceeded", memory_message());
    }
    if (name == "InternalError" && message == "string too long")
        || (name == "RangeError" && (message == "invalid string length" || message == "invalid array length"))
    {
        return Failure {
            line,
            ..Failure::new("memory_exceeded", "the program built a string or array larger than the sandbox allows")
        };
    }
    if name == "RangeError" && message.contains("call stack size exceeded") {
        return Failure {
            line,
            hint: Some("Recursion went too deep: use a loop, or recurse less deeply."),
            ..Failure::new("stack_overflow", "the program's recursion went deeper than its stack allows")
        };
    }
    if error["host"] == true {
        let mut extra: Map<String, Json> = error.as_object().cloned().unwrap_or_default();
        for k in ["name", "message", "stack", "host", "code"] {
            extra.remove(k);
        }
        return Failure {
            code: error["code"].as_str().unwrap_or("host_error").to_owned(),
            message: format!("not caught by the program: {}", super::cap(message)),
            line,
            hint: None,
            extra,
        };
    }
    if name == "NotAFunction" {
        return Failure { hint: Some(Mistake::NotAFunction.hint()), ..Failure::new("invalid_program", message) };
    }
    let code = if compiling && name == "SyntaxError" { "syntax_error" } else { "runtime_error" };
    Failure {
        code: code.to_owned(),
        message: super::cap(&format!("{name}: {message}")),
        line,
        hint: recover::diagnose(&program.source, name, message).map(Mistake::hint),
        extra: Map::new(),
    }
}

/// The first line of the program named in a stack (`program.js:LINE[:COL]`).
fn line_of(stack: &str) -> Option<usize> {
    stack.match_indices(FILENAME).find_map(|(i, _)| {
        let rest = stack[i + FILENAME.len()..].strip_prefix(':')?;
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        digits.parse().ok()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> Limits {
        Limits {
            heap_bytes: 64 << 20,
            stack_bytes: 1 << 20,
            cpu: Duration::from_millis(250),
            wall: Duration::from_secs(5),
            host_calls: 20,
            log_chars: 4000,
            emit_bytes: 4_000_000,
            emit_blocks: 32,
        }
    }

    /// Runs on a thread of its own (like the executor) with host calls answered by `answer`.
    fn run_with(code: &str, limits: Limits, answer: fn(Kind, &Json) -> Reply) -> Report {
        let program = recover::recover(code).unwrap();
        std::thread::Builder::new()
            .stack_size(8 << 20)
            .spawn(move || {
                let dispatch: Dispatch = Box::new(move |req, tx| {
                    let reply = answer(req.kind, &req.payload);
                    let _ = tx.send((req.id, reply));
                });
                run(&program, &limits, dispatch, Arc::new(AtomicBool::new(false)))
            })
            .unwrap()
            .join()
            .unwrap()
    }

    fn echo(_: Kind, payload: &Json) -> Reply {
        Reply { ok: true, json: payload.to_string(), fatal: None }
    }

    fn value(code: &str) -> String {
        match run_with(code, limits(), echo).end {
            End::Value(v) => v,
            End::Failed(f) => panic!("{code}: {f:?}"),
        }
    }

    fn failed(code: &str) -> Failure {
        failed_with(code, limits())
    }

    fn failed_with(code: &str, limits: Limits) -> Failure {
        match run_with(code, limits, echo).end {
            End::Value(v) => panic!("{code}: answered {v}"),
            End::Failed(f) => f,
        }
    }

    #[test]
    fn values_come_back_as_json() {
        assert_eq!(value("async () => 42"), "42");
        assert_eq!(value("async () => undefined"), "null");
        assert_eq!(value("() => ({ a: [1, 'é'] })"), "{\"a\":[1,\"é\"]}");
        assert_eq!(value("async () => (await gatehouse.call('a.b', { x: 1 })).args.x"), "1");
        let all = "async () => (await Promise.all([1, 2, 3].map((n) => gatehouse.call('a.b', { n })))).map((r) => r.args.n)";
        assert_eq!(value(all), "[1,2,3]");
    }

    #[test]
    fn syntax_and_runtime_errors_carry_the_line_and_a_hint() {
        let f = failed("async () => {\n  const x = ;\n}");
        assert_eq!((f.code.as_str(), f.line), ("syntax_error", Some(2)), "{f:?}");
        let f = failed("```js\nasync () => {\n\n  return fetch('x');\n}\n```");
        assert_eq!((f.code.as_str(), f.line), ("runtime_error", Some(4)), "{f:?}");
        assert_eq!(f.hint, Some(Mistake::InventedGlobal.hint()));
        let f = failed("import fs from 'fs'\nasync () => 1");
        assert_eq!((f.code.as_str(), f.hint), ("syntax_error", Some(Mistake::Modules.hint())), "{f:?}");
        let f = failed("async () => require('fs')");
        assert_eq!(f.hint, Some(Mistake::Modules.hint()), "{f:?}");
        let f = failed("async (x: string): Promise<number> => 1");
        assert_eq!((f.code.as_str(), f.hint), ("syntax_error", Some(Mistake::TypeScript.hint())), "{f:?}");
        let f = failed("async (gatehouse) => gatehouse.search({})");
        assert_eq!((f.code.as_str(), f.hint), ("runtime_error", Some(Mistake::ShadowedGatehouse.hint())), "{f:?}");
        assert_eq!(failed("42").code, "invalid_program");
        assert_eq!(failed("async () => { throw new Error('boom') }").message, "Error: boom");
    }

    #[test]
    fn limits_end_runs_with_their_own_codes() {
        assert_eq!(failed("async () => { while (true) {} }").code, "cpu_time_exceeded");
        assert_eq!(failed("async () => { for (;;) { try { while (true) {} } catch (e) {} } }").code, "cpu_time_exceeded");
        let bomb = "async () => { const a = []; for (;;) a.push(new Array(100000).fill(1)); }";
        let mut big_cpu = limits();
        big_cpu.cpu = Duration::from_secs(10);
        assert_eq!(failed_with(bomb, big_cpu.clone()).code, "memory_exceeded");
        for huge in
            ["async () => { let s = 'x'; for (;;) s += s; }", "async () => 'x'.repeat(1 << 29)", "async () => new Array(2 ** 32)"]
        {
            assert_eq!(failed_with(huge, big_cpu.clone()).code, "memory_exceeded", "{huge}");
        }
        assert_eq!(failed("async () => { const f = (n) => f(n + 1) + 1; return f(0); }").code, "stack_overflow");
        let calls =
            "async () => { for (let i = 0; i < 21; i++) { try { await gatehouse.skill('usage'); } catch {} } return 'caught'; }";
        assert_eq!(failed(calls).code, "budget_exceeded");
        assert_eq!(failed("async () => { for (;;) console.log('spam'); }").code, "log_limit");
        let emit = "async () => { for (let i = 0; i < 33; i++) gatehouse.emit({ type: 'text', text: 'x' }); }";
        assert_eq!(failed(emit).code, "emit_limit");
        assert_eq!(failed("async () => await new Promise(() => {})").code, "program_stalled");
    }

    #[test]
    fn the_sandbox_has_no_ambient_authority_and_frozen_builtins() {
        for probe in [
            "async () => eval('1')",
            "async () => Function('return 1')()",
            "async () => (() => {}).constructor('return this')()",
            "async () => (async () => {}).constructor('return 1')()",
            "async () => { Object.prototype.polluted = 1 }",
            "async () => { Array.prototype.push = () => 0 }",
            "async () => { gatehouse.call = () => 1 }",
            "async () => { JSON.parse = () => 1 }",
            "async () => { globalThis.leak = 1 }",
            "async () => setTimeout(() => {}, 1)",
            "async () => await import('os')",
            "async () => process.env",
            "async () => std.loadFile('/etc/passwd')",
        ] {
            let f = failed(probe);
            assert!(f.code == "runtime_error" || f.code == "syntax_error", "{probe}: {f:?}");
        }
        let globals = value("async () => Object.getOwnPropertyNames(globalThis).filter((n) => !/^[A-Z]/.test(n)).sort()");
        let globals: Vec<String> = serde_json::from_str(&globals).unwrap();
        for name in &globals {
            assert!(
                ["console", "gatehouse", "globalThis", "undefined", "queueMicrotask"].contains(&name.as_str())
                    || ["parse", "is", "decode", "encode", "escape", "unescape"].iter().any(|p| name.starts_with(p)),
                "unexpected global {name}: {globals:?}"
            );
        }
    }

    #[test]
    fn host_refusals_reject_and_uncaught_ones_keep_their_code() {
        fn refuse(_: Kind, _: &Json) -> Reply {
            let error = json!({ "code": "destructive_tool_requires_approval", "message": "no", "nextAction": { "tool": "call_destructive_tool" } });
            Reply { ok: false, json: error.to_string(), fatal: None }
        }
        let program = "async () => {\n  await gatehouse.call('a.write', {});\n}";
        let Report { end: End::Failed(f), .. } = run_with(program, limits(), refuse) else { panic!() };
        assert_eq!(f.code, "destructive_tool_requires_approval");
        assert_eq!(f.extra["nextAction"]["tool"], "call_destructive_tool");
        assert_eq!(f.line, Some(2), "{f:?}");
        let caught = "async () => { try { await gatehouse.call('a.w', {}) } catch (e) { return [e.name, e.code] } }";
        let Report { end: End::Value(v), .. } = run_with(caught, limits(), refuse) else { panic!() };
        assert_eq!(v, "[\"GatehouseError\",\"destructive_tool_requires_approval\"]");
    }

    #[test]
    fn logs_and_emitted_blocks_are_captured() {
        let r = run_with(
            "async () => { console.log('a', { b: 1 }); console.warn('w'); gatehouse.emit({ type: 'image', data: 'aGk=', mimeType: 'image/png' }); return 1 }",
            limits(),
            echo,
        );
        assert_eq!(r.logs, "a {\"b\":1}\nwarn: w\n");
        assert_eq!(r.emitted, [Emitted::Image { data: "aGk=".into(), mime_type: "image/png".into() }]);
        assert!(matches!(failed("async () => gatehouse.emit({ type: 'video' })").code.as_str(), "runtime_error"));
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(48))]

        /// Whatever the text (malformed code, any unicode, fences, huge literals), a run ends in
        /// a value or a typed failure, never a panic or a hang.
        #[test]
        fn any_program_ends_in_a_value_or_a_typed_failure(
            body in "(\\PC|[(){};=>`'\"\n]|async|await|gatehouse\\.call\\('a\\.b'\\)|while\\(1\\)|return){0,40}",
            wrap in 0usize..3,
        ) {
            let code = match wrap {
                0 => body.clone(),
                1 => format!("async () => {{ {body} }}"),
                _ => format!("```js\nasync () => {body}\n```"),
            };
            let Ok(program) = recover::recover(&code) else { return Ok(()) };
            let report = std::thread::spawn(move || {
                let dispatch: Dispatch = Box::new(|req, tx| { let _ = tx.send((req.id, echo(req.kind, &req.payload))); });
                run(&program, &limits(), dispatch, Arc::new(AtomicBool::new(false)))
            }).join().unwrap();
            match report.end {
                End::Value(v) => { serde_json::from_str::<Json>(&v).unwrap(); }
                End::Failed(f) => proptest::prop_assert!(
                    ["syntax_error", "runtime_error", "invalid_program", "cpu_time_exceeded", "program_stalled",
                     "memory_exceeded", "stack_overflow", "budget_exceeded"].contains(&f.code.as_str()),
                    "{f:?}"
                ),
            }
            proptest::prop_assert!(report.wall < Duration::from_secs(5));
        }
    }
}
