use super::*;
use serde_json::json;

use crate::code::recover::{self, Mistake};

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
