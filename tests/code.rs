//! `execute_code` end to end: `gatehouse serve` with `@modelcontextprotocol/server-everything`
//! as the downstream, the official Python MCP SDK and raw JSON-RPC as agents.

mod common;

use std::time::Duration;

use common::{Everything, Machine, Served, TestDb, cli, gatehouse, http, provision, python_agent};
use futures::future::join_all;
use serde_json::{Value, json};
use sqlx::{Connection, Executor};

struct Setup {
    t: TestDb,
    machine: Machine,
    _everything: Everything,
}

/// Tenant `acme`, workspace `main` with connector `everything`, machine credentials.
async fn setup() -> Setup {
    let everything = Everything::start().await;
    let t = TestDb::new().await;
    cli(&t.url, &["tenant", "create", "acme", "--name", "Acme"]).await;
    cli(&t.url, &["workspace", "create", "--tenant", "acme", "main"]).await;
    let args = ["connector", "add", "--tenant", "acme", "--workspace", "main", "--id", "everything", "--kind", "remote_mcp"];
    cli(&t.url, &[&args[..], &["--url", &everything.url]].concat()).await;
    let machine = provision(&t.url, "acme").await;
    Setup { t, machine, _everything: everything }
}

/// Applies `patch` (pools, grants…) to acme/main.
async fn configure(t: &TestDb, patch: Value) {
    let file = std::env::temp_dir().join(format!("gatehouse-test-{}.json", uuid::Uuid::new_v4().simple()));
    std::fs::write(&file, patch.to_string()).unwrap();
    cli(&t.url, &["workspace", "configure", "--tenant", "acme", "--workspace", "main", "--file", file.to_str().unwrap()]).await;
}

/// One raw `tools/call` (protocol 2025-11-25, stateless): whether it is an error, and the JSON
/// of its first text block; plus the whole result.
async fn tool(url: &str, m: &Machine, name: &str, arguments: Value) -> (bool, Value, Value) {
    let r = common::mcp_post(url, m, "tools/call", json!({ "name": name, "arguments": arguments })).await;
    assert_eq!(r.status(), 200);
    let body: Value = r.json().await.unwrap();
    let result = body["result"].clone();
    let text = result["content"][0]["text"].as_str().unwrap_or("");
    (result["isError"] == true, serde_json::from_str(text).unwrap_or(Value::String(text.to_owned())), result)
}

async fn run(url: &str, m: &Machine, code: &str) -> (bool, Value) {
    let (err, body, _) = tool(url, m, "execute_code", json!({ "code": code })).await;
    (err, body)
}

/// (tool, source, outcome, error code) of every activity row, once there are at least `n`.
async fn activity(t: &TestDb, n: usize) -> Vec<(String, String, String, Option<String>)> {
    let mut db = sqlx::PgConnection::connect(t.url.expose()).await.unwrap();
    db.execute("SELECT set_config('gatehouse.platform', 'on', false)").await.unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let rows: Vec<(String, String, String, Option<String>)> =
            sqlx::query_as("SELECT tool, source, outcome, error_code FROM activity ORDER BY occurred_at, id")
                .fetch_all(&mut db)
                .await
                .unwrap();
        if rows.len() >= n || std::time::Instant::now() > deadline {
            return rows;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The official Python SDK runs a program that discovers a tool, calls it three times in
/// parallel and reduces the results server-side; each host call writes its own activity row.
#[tokio::test]
async fn the_python_sdk_agent_runs_a_program_over_the_workspace() {
    let s = setup().await;
    let served = Served::start(gatehouse(Some(&s.t.url))).await;
    let url = format!("{}/t/acme/w/main/mcp", served.base);
    let program = r#"
```javascript
async () => {
  const found = await gatehouse.search({ query: "sum" });
  const address = found.results[0].address;
  const sums = await Promise.all([[1, 2], [3, 4], [5, 6]].map(([a, b]) => gatehouse.call(address, { a, b })));
  console.log("called", address);
  return { address, texts: sums.map((r) => r.content[0].text) };
}
```"#;
    let out = python_agent(&url, &s.machine, json!([["execute_code", { "code": program }]])).await;
    assert!(out["tools"].as_array().unwrap().contains(&json!("execute_code")));
    let call = &out["calls"][0];
    assert_eq!(call["isError"], false, "{out}");
    let answer: Value = serde_json::from_str(call["text"][0].as_str().unwrap()).unwrap();
    assert_eq!(answer["result"]["address"], "everything.get-sum");
    let texts: Vec<&str> = answer["result"]["texts"].as_array().unwrap().iter().map(|t| t.as_str().unwrap()).collect();
    assert!(texts[0].contains('3') && texts[1].contains('7') && texts[2].contains("11"), "{texts:?}");
    assert_eq!(answer["logs"], "called everything.get-sum\n");
    assert_eq!(answer["hostCalls"], 4);

    let rows = activity(&s.t, 5).await;
    let host: Vec<_> = rows.iter().filter(|r| r.1 == "execute_code").collect();
    assert_eq!(host.len(), 4, "one row per host call: {rows:?}");
    assert_eq!(host.iter().filter(|r| r.0 == "get-sum" && r.2 == "ok").count(), 3, "{rows:?}");
    assert!(host.iter().any(|r| r.0 == "search_tools"), "{rows:?}");
    assert!(rows.iter().any(|r| r.0 == "execute_code" && r.1 == "mcp" && r.2 == "ok"), "the program's own row: {rows:?}");
    assert_eq!(served.terminate().await, 0);
}

/// Promise.all really runs host calls at once: three 1-second operations take about one second.
#[tokio::test]
async fn parallel_host_calls_run_concurrently() {
    let s = setup().await;
    let served = Served::start(gatehouse(Some(&s.t.url))).await;
    let url = format!("{}/t/acme/w/main/mcp", served.base);
    let code = r#"async () => {
      const slow = () => gatehouse.call("everything.trigger-long-running-operation", { duration: 1, steps: 1 });
      await gatehouse.describe({ addresses: ["everything.trigger-long-running-operation"] });
      const t = Date.now();
      const done = await Promise.all([slow(), slow(), slow()]);
      return { ms: Date.now() - t, errors: done.filter((r) => r.isError).length };
    }"#;
    let (err, body) = run(&url, &s.machine, code).await;
    assert!(!err, "{body}");
    assert_eq!(body["result"]["errors"], 0, "{body}");
    let ms = body["result"]["ms"].as_u64().unwrap();
    assert!((1000..2500).contains(&ms), "three 1 s calls in parallel took {ms} ms");
    assert_eq!(served.terminate().await, 0);
}

/// Each adversarial program ends in its own typed error; the replica stays healthy and keeps
/// serving another tenant in between.
#[tokio::test]
async fn adversarial_programs_end_in_typed_errors_and_the_replica_keeps_serving() {
    let s = setup().await;
    cli(&s.t.url, &["tenant", "create", "globex", "--name", "Globex"]).await;
    cli(&s.t.url, &["workspace", "create", "--tenant", "globex", "main"]).await;
    let globex = provision(&s.t.url, "globex").await;
    let mut cmd = gatehouse(Some(&s.t.url));
    cmd.env("GATEHOUSE_CODE_WALL_MS", "5000");
    let served = Served::start(cmd).await;
    let url = format!("{}/t/acme/w/main/mcp", served.base);
    let other = format!("{}/t/globex/w/main/mcp", served.base);
    let cases = [
        ("async () => { while (true) {} }", "cpu_time_exceeded"),
        ("async () => { for (;;) { try { for (;;) {} } catch (e) {} } }", "cpu_time_exceeded"),
        ("async () => { const a = []; for (;;) a.push('x'.repeat(1 << 20) + a.length); }", "memory_exceeded"),
        ("async () => { const f = (n) => f(n + 1) + 1; return f(0); }", "stack_overflow"),
        ("async () => 'x'.repeat(2 ** 30)", "memory_exceeded"),
        ("async () => { Object.prototype.polluted = true; return 1; }", "runtime_error"),
        ("async () => { Array.prototype.map = () => []; }", "runtime_error"),
        ("async () => { gatehouse.call = async () => 'forged'; }", "runtime_error"),
        ("async () => (() => {}).constructor('return globalThis')()", "runtime_error"),
        ("async () => eval('1 + 1')", "runtime_error"),
        ("async () => process.env", "runtime_error"),
        ("async () => require('fs')", "runtime_error"),
        ("import os from 'os'\nasync () => os", "syntax_error"),
        ("async () => { gatehouse.call('everything.echo', { message: 'never awaited' }); return 1; }", "unawaited_calls"),
        ("async () => await new Promise(() => {})", "program_stalled"),
        (
            "async () => { for (let i = 0; i < 21; i++) { try { await gatehouse.skill('usage'); } catch (e) {} } return 'survived'; }",
            "budget_exceeded",
        ),
        (
            "async () => { await Promise.all(Array.from({ length: 25 }, () => gatehouse.skill('usage').catch(() => 0))); }",
            "budget_exceeded",
        ),
        ("async () => { for (;;) console.log('x'.repeat(100)); }", "log_limit"),
        ("async () => { for (;;) gatehouse.emit({ type: 'text', text: 'x'.repeat(1000) }); }", "emit_limit"),
        ("async (x: number) => x", "syntax_error"),
        ("42", "invalid_program"),
    ];
    for (code, expected) in cases {
        let (err, body) = run(&url, &s.machine, code).await;
        assert!(err, "{code}: {body}");
        assert_eq!(body["error"]["code"], expected, "{code}: {body}");
        let (err, body) = run(&other, &globex, "async () => 42").await;
        assert!(!err && body["result"] == 42, "another tenant is still served after `{code}`: {body}");
    }
    let (_, body) = run(&url, &s.machine, "async (x: number) => x").await;
    assert!(body["error"]["hint"].as_str().unwrap().contains("TypeScript"), "{body}");
    let (_, body) = run(&url, &s.machine, "async () => {\n\n  return fetch('https://example.com');\n}").await;
    assert_eq!(body["error"]["line"], 3, "{body}");
    assert!(body["error"]["hint"].as_str().unwrap().contains("fetch"), "{body}");
    let (_, body) = run(&url, &s.machine, &format!("async () => '{}'", "x".repeat(70_000))).await;
    assert_eq!(body["error"]["code"], "code_too_large");
    let r = http().get(format!("{}/healthz", served.base)).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(served.terminate().await, 0);
}

/// Writes: refused in programs unless the pool is trusted (with the exact call to make
/// instead); on a trusted pool at most the configured number of writes, then the run ends.
#[tokio::test]
async fn writes_need_a_trusted_pool_and_are_counted() {
    let s = setup().await;
    configure(
        &s.t,
        json!({ "pools": { "ops": { "tools": ["everything"], "trusted": true }, "plain": { "tools": ["everything"] } } }),
    )
    .await;
    let mut cmd = gatehouse(Some(&s.t.url));
    cmd.env("GATEHOUSE_CODE_WRITES", "2");
    let served = Served::start(cmd).await;
    let base = format!("{}/t/acme/w/main/mcp", served.base);
    let write = "async () => (await gatehouse.call('everything.toggle-simulated-logging', {})).content[0].text";
    for url in [base.clone(), format!("{base}/plain")] {
        let (err, body) = run(&url, &s.machine, write).await;
        assert!(err, "{body}");
        assert_eq!(body["error"]["code"], "destructive_tool_requires_approval", "{body}");
        assert_eq!(body["error"]["nextAction"]["tool"], "call_destructive_tool");
        assert_eq!(body["error"]["nextAction"]["arguments"]["address"], "everything.toggle-simulated-logging");
    }
    let trusted = format!("{base}/ops");
    let (err, body) = run(&trusted, &s.machine, write).await;
    assert!(!err, "{body}");
    assert_eq!(body["writes"], json!([{ "address": "everything.toggle-simulated-logging", "outcome": "ok" }]));
    let three = "async () => { for (let i = 0; i < 3; i++) { try { await gatehouse.call('everything.toggle-simulated-logging', {}); } catch (e) {} } return 'done'; }";
    let (err, body) = run(&trusted, &s.machine, three).await;
    assert!(err && body["error"]["code"] == "write_budget_exceeded", "{body}");
    assert_eq!(body["error"]["writes"].as_array().unwrap().len(), 2, "{body}");
    assert_eq!(served.terminate().await, 0);
}

/// A host call's large result is stashed and paged from inside the program; a program's own
/// large result is stashed and paged by the agent with call_tool.
#[tokio::test]
async fn large_results_are_paged() {
    let s = setup().await;
    let served = Served::start(gatehouse(Some(&s.t.url))).await;
    let url = format!("{}/t/acme/w/main/mcp", served.base);
    let code = r#"async () => {
      const big = await gatehouse.call("everything.echo", { message: "é".repeat(20000) });
      let text = "", offset = 0, pages = 0;
      do {
        const page = await gatehouse.result(big.stashed.id, { offset, maxBytes: 16000 });
        text += page.chunk; offset = page.next_offset; pages++;
      } while (offset !== null);
      return { pages, length: JSON.parse(text).content[0].text.length };
    }"#;
    let (err, body) = run(&url, &s.machine, code).await;
    assert!(!err, "{body}");
    assert_eq!(body["result"], json!({ "pages": 3, "length": 20006 }));

    let (err, body) = run(&url, &s.machine, "async () => 'ü'.repeat(30000)").await;
    assert!(!err, "{body}");
    let id = body["stashed"]["id"].as_str().expect("a long result is stashed").to_owned();
    assert_eq!(body["stashed"]["nextAction"]["arguments"]["address"], "gatehouse.result");
    let mut text = String::new();
    let mut offset = Some(0);
    while let Some(o) = offset {
        let (err, page, _) =
            tool(&url, &s.machine, "call_tool", json!({ "address": "gatehouse.result", "args": { "id": id, "offset": o } }))
                .await;
        assert!(!err, "{page}");
        text.push_str(page["chunk"].as_str().unwrap());
        offset = page["next_offset"].as_u64();
    }
    assert_eq!(serde_json::from_str::<String>(&text).unwrap(), "ü".repeat(30000));
    let other = provision(&s.t.url, "acme").await;
    let (err, page, _) = tool(&url, &other, "call_tool", json!({ "address": "gatehouse.result", "args": { "id": id } })).await;
    assert!(err && page["error"]["code"] == "unknown_result", "only the same token reads it: {page}");
    assert_eq!(served.terminate().await, 0);
}

/// Past the replica's slots and queue a program is refused at once with executor_overloaded
/// and retryAfterMs; emitted blocks come back as content.
#[tokio::test]
async fn admission_refuses_when_every_slot_and_place_is_taken() {
    let s = setup().await;
    let mut cmd = gatehouse(Some(&s.t.url));
    cmd.env("GATEHOUSE_CODE_RUNNING", "1").env("GATEHOUSE_CODE_QUEUED", "1").env("GATEHOUSE_CODE_QUEUE_TIMEOUT_MS", "300");
    let served = Served::start(cmd).await;
    let url = format!("{}/t/acme/w/main/mcp", served.base);
    let slow =
        "async () => !!(await gatehouse.call('everything.trigger-long-running-operation', { duration: 2, steps: 1 })).isError";
    let runs = (0..3).map(|_| run(&url, &s.machine, slow));
    let results = join_all(runs).await;
    let overloaded: Vec<_> = results.iter().filter(|(_, b)| b["error"]["code"] == "executor_overloaded").collect();
    assert_eq!(overloaded.len(), 2, "one runs, one waits past the queue timeout, one finds the queue full: {results:?}");
    assert!(overloaded.iter().all(|(_, b)| b["error"]["retryAfterMs"].as_u64().is_some()));
    assert_eq!(results.iter().filter(|(err, b)| !*err && b["result"] == false).count(), 1, "{results:?}");

    let (err, _, whole) = tool(
        &url,
        &s.machine,
        "execute_code",
        json!({ "code": "async () => { gatehouse.emit({ type: 'text', text: 'hello' }); gatehouse.emit({ type: 'image', data: 'iVBORw0KGgo=', mimeType: 'image/png' }); return 'ok'; }" }),
    )
    .await;
    assert!(!err, "{whole}");
    assert_eq!(whole["content"][1], json!({ "type": "text", "text": "hello" }));
    assert_eq!(whole["content"][2]["type"], "image");
    assert_eq!(served.terminate().await, 0);
}

/// The two limits that need a slow downstream: the wall clock ends a program whose host calls
/// (each within its own deadline) add up past it, and a write whose host call times out is
/// reported as `write_outcome_unknown` (it may have happened), never retried.
#[tokio::test]
async fn wall_clock_and_unknown_write_outcomes() {
    let s = setup().await;
    configure(&s.t, json!({ "pools": { "ops": { "tools": ["everything"], "trusted": true } } })).await;
    let mut cmd = gatehouse(Some(&s.t.url));
    cmd.env("GATEHOUSE_CODE_WALL_MS", "2000").env("GATEHOUSE_CODE_HOST_CALL_TIMEOUT_MS", "2500");
    let served = Served::start(cmd).await;
    let trusted = format!("{}/t/acme/w/main/mcp/ops", served.base);
    // The downstream session and catalog first, so no host call below pays for them.
    let (err, body, _) = tool(&trusted, &s.machine, "search_tools", json!({ "query": "long" })).await;
    assert!(!err, "{body}");

    // Eight reads of half a second each: every one well inside its deadline, together twice
    // the wall clock.
    let started = std::time::Instant::now();
    let slow_reads = r#"async () => {
      for (let i = 0; i < 8; i++) await gatehouse.call("everything.trigger-long-running-operation", { duration: 0.5, steps: 1 });
      return "not reached";
    }"#;
    let (err, body) = run(&trusted, &s.machine, slow_reads).await;
    assert!(err && body["error"]["code"] == "wall_clock_exceeded", "{body}");
    assert!(started.elapsed() < Duration::from_millis(3800), "ended at the wall clock, not after the calls");

    // The same tool declared a write: its call outlives the host-call deadline.
    configure(
        &s.t,
        json!({
            "classification": { "everything.trigger-long-running-operation": "write" },
            "pools": { "ops": { "tools": ["everything"], "trusted": true } }
        }),
    )
    .await;
    let write = r#"async () => {
      try { await gatehouse.call("everything.trigger-long-running-operation", { duration: 6, steps: 1 }); } catch (e) { return "caught " + e.code; }
      return "not reached";
    }"#;
    let (err, body) = run(&trusted, &s.machine, write).await;
    assert!(err && body["error"]["code"] == "write_outcome_unknown", "{body}");
    assert_eq!(served.terminate().await, 0);
}
