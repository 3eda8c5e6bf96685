//! Protocol fidelity (issue 19): what the endpoint answers is what each revision says, for the
//! six-tool surface and for a native pool, against server-everything as the downstream and
//! the official Python MCP SDK as the agent.

mod common;

use common::{Everything, Machine, Served, TestDb, cli, gatehouse, http, provision, python_agent_in};
use serde_json::{Value, json};

struct Setup {
    t: TestDb,
    machine: Machine,
    _everything: Everything,
}

/// A tenant `acme` with a workspace `main` whose connector `everything` is server-everything,
/// a native pool `native` over it, and machine credentials.
async fn setup() -> Setup {
    let everything = Everything::start().await;
    let t = TestDb::new().await;
    cli(&t.url, &["tenant", "create", "acme", "--name", "Acme"]).await;
    cli(&t.url, &["workspace", "create", "--tenant", "acme", "main"]).await;
    let args = ["connector", "add", "--tenant", "acme", "--workspace", "main", "--id", "everything", "--kind", "remote_mcp"];
    cli(&t.url, &[&args[..], &["--url", &everything.url]].concat()).await;
    let pools = json!({ "pools": { "native": { "tools": ["everything"], "native": true } } });
    let file = std::env::temp_dir().join(format!("gatehouse-test-{}.json", uuid::Uuid::new_v4().simple()));
    std::fs::write(&file, pools.to_string()).unwrap();
    cli(&t.url, &["workspace", "configure", "--tenant", "acme", "--workspace", "main", "--file", file.to_str().unwrap()]).await;
    let machine = provision(&t.url, "acme").await;
    Setup { t, machine, _everything: everything }
}

/// One raw JSON-RPC request on 2026-07-28: the per-request `_meta` and the routing headers.
async fn modern(url: &str, m: &Machine, method: &str, name: Option<&str>, params: Value) -> (u16, Value) {
    modern_with(url, m, method, name, params, &[]).await
}

/// [`modern`] with more headers (`Mcp-Param-*`).
async fn modern_with(
    url: &str,
    m: &Machine,
    method: &str,
    name: Option<&str>,
    params: Value,
    headers: &[(&str, &str)],
) -> (u16, Value) {
    let mut params = params;
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": { "name": "t", "version": "1" },
        "io.modelcontextprotocol/clientCapabilities": {}
    });
    let body = json!({ "jsonrpc": "2.0", "id": 1, "method": method, "params": params });
    let mut r = m
        .headers(http().post(url))
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", method);
    if let Some(name) = name {
        r = r.header("mcp-name", name);
    }
    for (header, value) in headers {
        r = r.header(*header, *value);
    }
    let r = r.json(&body).send().await.unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

/// The SDK client validates every result against the revision's schema, so a result without
/// `resultType` fails the call on the client's side.
#[tokio::test]
async fn the_python_sdk_on_2026_07_28_calls_through_the_surface_and_a_native_pool() {
    let s = setup().await;
    let served = Served::start(gatehouse(Some(&s.t.url))).await;
    let base = format!("{}/t/acme/w/main/mcp", served.base);
    // A pinned revision is adopted without asking; `auto` asks `server/discover` first.
    for mode in ["2026-07-28", "auto"] {
        let out = python_agent_in(
            &base,
            &s.machine,
            Some(mode),
            json!([
                ["call_tool", { "address": "everything.echo", "args": { "message": "modern" } }],
                ["skills", {}]
            ]),
        )
        .await;
        assert_eq!(out["protocol"], "2026-07-28", "{mode}: {out}");
        assert_eq!(out["calls"][0], json!({ "isError": false, "text": ["Echo: modern"] }), "{mode}: {out}");
        assert!(out["calls"][1]["text"][0].as_str().unwrap().contains("call_destructive_tool"), "{mode}: {out}");

        let out = python_agent_in(
            &format!("{base}/native"),
            &s.machine,
            Some(mode),
            json!([["echo", { "message": "native" }], ["get-sum", { "a": 2, "b": 3 }]]),
        )
        .await;
        assert_eq!(out["protocol"], "2026-07-28", "{mode}: {out}");
        assert_eq!(out["calls"][0], json!({ "isError": false, "text": ["Echo: native"] }), "{mode}: {out}");
        assert!(out["calls"][1]["text"][0].as_str().unwrap().contains('5'), "{mode}: {out}");
    }
    assert_eq!(served.terminate().await, 0);
}

#[tokio::test]
async fn every_result_on_2026_07_28_carries_its_result_type_and_older_revisions_none() {
    let s = setup().await;
    let served = Served::start(gatehouse(Some(&s.t.url))).await;
    let base = format!("{}/t/acme/w/main/mcp", served.base);

    let (status, discovered) = modern(&base, &s.machine, "server/discover", None, json!({})).await;
    assert_eq!(status, 200, "{discovered}");
    let result = &discovered["result"];
    assert_eq!(result["resultType"], "complete", "{discovered}");
    assert!(result["supportedVersions"].as_array().unwrap().contains(&json!("2026-07-28")), "{discovered}");
    assert!(result["capabilities"]["tools"].is_object(), "{discovered}");

    let echo = json!({ "name": "call_tool", "arguments": { "address": "everything.echo", "args": { "message": "m" } } });
    let native = json!({ "name": "echo", "arguments": { "message": "m" } });
    // A result passed through from the downstream, one the gateway makes itself, a refusal,
    // and a native pool's tool.
    let skills = json!({ "name": "skills", "arguments": {} });
    let refused = json!({ "name": "call_tool", "arguments": { "address": "everything.nope" } });
    for (url, params) in [(&base, &echo), (&base, &skills), (&base, &refused), (&format!("{base}/native"), &native)] {
        let name = params["name"].as_str();
        let (status, body) = modern(url, &s.machine, "tools/call", name, params.clone()).await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["result"]["resultType"], "complete", "{params}: {body}");

        // The same call on 2025-11-25 (the direct path) keeps that revision's shape.
        let r = common::mcp_post(url, &s.machine, "tools/call", params.clone()).await;
        assert_eq!(r.status(), 200);
        let body: Value = r.json().await.unwrap();
        assert!(body["result"].is_object(), "{body}");
        assert!(body["result"].get("resultType").is_none(), "{params}: {body}");
    }
    for url in [&base, &format!("{base}/native")] {
        let (status, listed) = modern(url, &s.machine, "tools/list", None, json!({})).await;
        assert_eq!(status, 200, "{listed}");
        assert_eq!(listed["result"]["resultType"], "complete", "{listed}");
    }
    assert_eq!(served.terminate().await, 0);
}

/// A tool list on 2026-07-28 says how long it stays fresh, drawn from the downstreams it lists:
/// a 2026-07-28 downstream is listed in its own revision and its `ttlMs` bounds the pool's
/// (counted from when it was listed); a handshake-era downstream gives no hint, so a list that
/// draws on it is stale at once. Grants make the list private. The revision and the hint are
/// kept with the catalog, and a refresh reports them. The six-tool surface's list is the same
/// for every caller and changes only with the configuration.
#[tokio::test]
async fn tool_lists_on_2026_07_28_carry_their_downstreams_freshness_and_catalogs_their_revision() {
    let s = setup().await;
    let (_downstream, url) = common::conformance_downstream().await;
    common::add_remote_mcp(&s.t.url, "acme", "main", "conformance", &url).await;
    let pools = json!({ "pools": {
        "modern": { "tools": ["conformance"], "native": true },
        "mixed": { "tools": ["conformance", "everything"], "native": true },
    } });
    configure(&s.t, pools).await;
    let served = Served::start(gatehouse(Some(&s.t.url))).await;
    let base = format!("{}/t/acme/w/main/mcp", served.base);
    let hints = |body: &Value| (body["result"]["ttlMs"].as_u64(), body["result"]["cacheScope"].as_str().map(str::to_owned));

    let (status, listed) = modern(&format!("{base}/modern"), &s.machine, "tools/list", None, json!({})).await;
    assert_eq!(status, 200, "{listed}");
    let (ttl, scope) = hints(&listed);
    // The downstream said 120 s; the list was fetched just now, so little of that is gone.
    assert!(ttl.is_some_and(|ms| (60_000..=120_000).contains(&ms)), "{listed}");
    assert_eq!(scope.as_deref(), Some("public"), "{listed}");
    let (_, mixed) = modern(&format!("{base}/mixed"), &s.machine, "tools/list", None, json!({})).await;
    assert!(mixed["result"]["tools"].as_array().is_some_and(|t| t.len() > 10), "{mixed}");
    assert_eq!(hints(&mixed), (Some(0), Some("public".into())), "server-everything gives no hint: {mixed}");
    let (_, six) = modern(&base, &s.machine, "tools/list", None, json!({})).await;
    assert_eq!(hints(&six), (Some(300_000), Some("public".into())), "{six}");
    // On 2025-11-25 a list carries no hints.
    let old: Value = common::mcp_post(&format!("{base}/modern"), &s.machine, "tools/list", json!({})).await.json().await.unwrap();
    assert_eq!(hints(&old), (None, None), "{old}");

    // The revision each server was listed in, with its hint, as a refresh reports it.
    let refresh = |id: &str| format!("{}/api/v1/tenants/acme/workspaces/main/connectors/{id}/refresh", served.base);
    for (id, revision, ttl) in [("conformance", "2026-07-28", json!(120_000)), ("everything", "2025-11-25", Value::Null)] {
        let r = s.machine.headers(http().post(refresh(id))).send().await.unwrap();
        assert_eq!(r.status(), 200, "{id}");
        let answer: Value = r.json().await.unwrap();
        assert_eq!((&answer["revision"], &answer["ttl_ms"]), (&json!(revision), &ttl), "{answer}");
    }

    // Grants filter what each caller sees: the list is the caller's own.
    configure(&s.t, json!({ "grants": [{ "to": "machines", "tools": ["conformance"] }] })).await;
    let (_, granted) = modern(&format!("{base}/modern"), &s.machine, "tools/list", None, json!({})).await;
    assert_eq!(hints(&granted).1.as_deref(), Some("private"), "{granted}");
    assert!(hints(&granted).0.is_some_and(|ms| ms > 0), "{granted}");
    assert_eq!(served.terminate().await, 0);
}

/// Progress and log notifications of a downstream call come back on the agent's response
/// stream, in both of the SDK's modes, through `call_tool` and through a native pool; the
/// progress token the agent gave is the one its notifications carry.
#[tokio::test]
async fn progress_and_log_notifications_reach_the_python_sdk_through_the_surface_and_a_native_pool() {
    let (_downstream, url) = common::conformance_downstream().await;
    let t = TestDb::new().await;
    cli(&t.url, &["tenant", "create", "acme", "--name", "Acme"]).await;
    cli(&t.url, &["workspace", "create", "--tenant", "acme", "main"]).await;
    common::add_remote_mcp(&t.url, "acme", "main", "conformance", &url).await;
    // Reads, so call_tool makes them (the downstream does not annotate them).
    let configure = json!({
        "pools": { "native": { "tools": ["conformance"], "native": true } },
        "classification": { "conformance.test_tool_with_progress": "read", "conformance.test_tool_with_logging": "read" },
    });
    let file = std::env::temp_dir().join(format!("gatehouse-test-{}.json", uuid::Uuid::new_v4().simple()));
    std::fs::write(&file, configure.to_string()).unwrap();
    cli(&t.url, &["workspace", "configure", "--tenant", "acme", "--workspace", "main", "--file", file.to_str().unwrap()]).await;
    let machine = provision(&t.url, "acme").await;
    let served = Served::start(gatehouse(Some(&t.url))).await;
    let base = format!("{}/t/acme/w/main/mcp", served.base);

    let logs = json!(["Tool execution started", "Tool processing data", "Tool execution completed"]);
    let steps = json!([[0.0, 100.0, "step 0"], [50.0, 100.0, "step 50"], [100.0, 100.0, "step 100"]]);
    let wrapped = |tool: &str| json!({ "address": format!("conformance.{tool}"), "args": {} });
    for mode in [None, Some("2026-07-28")] {
        let calls = json!([
            ["call_tool", wrapped("test_tool_with_progress"), { "progress": true }],
            ["call_tool", wrapped("test_tool_with_logging")],
            ["call_destructive_tool", wrapped("test_tool_with_progress"), { "progress": true }],
        ]);
        let out = python_agent_in(&base, &machine, mode, calls).await;
        assert_eq!(out["calls"][0]["progress"], steps, "{mode:?}: {out}");
        assert_eq!(out["calls"][0]["text"][0], "Tool with progress executed successfully", "{mode:?}: {out}");
        assert_eq!(out["calls"][1]["logs"], logs, "{mode:?}: {out}");
        assert_eq!(out["calls"][2]["progress"], steps, "{mode:?}: {out}");

        let calls = json!([
            ["test_tool_with_progress", {}, { "progress": true }],
            ["test_tool_with_logging", {}],
            // No token asked for: none is sent down, so the downstream reports none.
            ["test_tool_with_progress", {}],
        ]);
        let out = python_agent_in(&format!("{base}/native"), &machine, mode, calls).await;
        assert_eq!(out["calls"][0]["progress"], steps, "{mode:?}: {out}");
        assert_eq!(out["calls"][1]["logs"], logs, "{mode:?}: {out}");
        assert_eq!(out["calls"][1]["text"][0], "Tool with logging executed successfully", "{mode:?}: {out}");
        assert!(out["calls"][2].get("progress").is_none(), "{mode:?}: {out}");
    }
    assert_eq!(served.terminate().await, 0);
}

/// Applies `patch` to acme/main's configuration with the CLI.
async fn configure(t: &TestDb, patch: Value) {
    let file = std::env::temp_dir().join(format!("gatehouse-test-{}.json", uuid::Uuid::new_v4().simple()));
    std::fs::write(&file, patch.to_string()).unwrap();
    cli(&t.url, &["workspace", "configure", "--tenant", "acme", "--workspace", "main", "--file", file.to_str().unwrap()]).await;
}

/// Reads the event stream until a line satisfies `stop`; every line read, in order.
async fn read_until(r: &mut reqwest::Response, stop: impl Fn(&str) -> bool) -> Vec<String> {
    let mut lines = Vec::new();
    let mut buffer = String::new();
    let deadline = std::time::Duration::from_secs(30);
    loop {
        let chunk = tokio::time::timeout(deadline, r.chunk()).await.expect("an event within 30 s").unwrap().expect("open");
        buffer.push_str(&String::from_utf8_lossy(&chunk));
        while let Some(end) = buffer.find('\n') {
            let line = buffer[..end].to_owned();
            buffer.drain(..=end);
            let done = stop(&line);
            lines.push(line);
            if done {
                return lines;
            }
        }
    }
}

/// Two configuration changes seen on a native pool's notification stream: another pool's
/// (what this pool shows is the same: no `list_changed`), then a grant that narrows this
/// caller's tools; the `list_changed` message it brings.
async fn list_changed_only_on_a_change(t: &TestDb, stream: &mut reqwest::Response) -> Value {
    configure(
        t,
        json!({ "pools": {
        "native": { "tools": ["everything"], "native": true }, "other": { "tools": ["everything"] } } }),
    )
    .await;
    let lines = read_until(stream, |l| l == ": checked").await;
    assert!(!lines.iter().any(|l| l.contains("list_changed")), "{lines:?}");
    configure(t, json!({ "grants": [{ "to": "machines", "tools": ["everything.echo"] }] })).await;
    let lines = read_until(stream, |l| l.contains("list_changed")).await;
    serde_json::from_str(lines.last().unwrap().strip_prefix("data: ").unwrap()).unwrap()
}

/// The handshake gives a session id; the GET stream on it says `tools/list_changed` when a
/// configuration change alters the native pool's tools for this caller, and only then.
#[tokio::test]
async fn the_get_stream_says_list_changed_when_grants_change_what_a_caller_sees_and_only_then() {
    let s = setup().await;
    let served = Served::start(gatehouse(Some(&s.t.url))).await;
    let native = format!("{}/t/acme/w/main/mcp/native", served.base);
    let init = json!({ "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": { "name": "t", "version": "1" } } });
    let r = s
        .machine
        .headers(http().post(&native))
        .header("accept", "application/json, text/event-stream")
        .json(&init)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let session = r.headers().get("mcp-session-id").expect("a session id").to_str().unwrap().to_owned();
    assert!(session.len() >= 16 && session.bytes().all(|b| (0x21..=0x7e).contains(&b)), "{session}");

    let mut stream = s
        .machine
        .headers(http().get(&native))
        .header("accept", "text/event-stream")
        .header("mcp-session-id", &session)
        .header("mcp-protocol-version", "2025-11-25")
        .send()
        .await
        .unwrap();
    assert_eq!(stream.status(), 200);
    assert!(stream.headers()["content-type"].to_str().unwrap().starts_with("text/event-stream"));

    assert_eq!(
        list_changed_only_on_a_change(&s.t, &mut stream).await,
        json!({ "jsonrpc": "2.0", "method": "notifications/tools/list_changed" })
    );

    // On 2026-07-28 there is no GET stream.
    let r = s
        .machine
        .headers(http().get(&native))
        .header("accept", "text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 405);
    drop(stream);
    assert_eq!(served.terminate().await, 0);
}

/// On 2026-07-28, `subscriptions/listen` opens the stream: acknowledged first (on a native
/// pool tool list changes, and prompt list changes since server-everything declares them;
/// nothing on the six-tool surface), `tools/list_changed` tagged with
/// the subscription's id when a grant changes what this caller sees and never otherwise, and the
/// request's `complete` result when the server shuts down.
#[tokio::test]
async fn subscriptions_listen_acknowledges_says_list_changed_only_on_a_change_and_completes_at_shutdown() {
    let s = setup().await;
    let served = Served::start(gatehouse(Some(&s.t.url))).await;
    let listen = |url: String, id: Value| {
        let body = json!({ "jsonrpc": "2.0", "id": id, "method": "subscriptions/listen", "params": {
            "_meta": { "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientInfo": { "name": "t", "version": "1" },
                "io.modelcontextprotocol/clientCapabilities": {} },
            "notifications": { "toolsListChanged": true, "promptsListChanged": true } } });
        s.machine
            .headers(http().post(url))
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2026-07-28")
            .header("mcp-method", "subscriptions/listen")
            .json(&body)
            .send()
    };
    let data = |line: &str| serde_json::from_str::<Value>(line.strip_prefix("data: ").unwrap()).unwrap();

    // The six-tool surface's list never changes: acknowledged with nothing honoured.
    let mut surface = listen(format!("{}/t/acme/w/main/mcp", served.base), json!("s-1")).await.unwrap();
    assert_eq!(surface.status(), 200);
    let lines = read_until(&mut surface, |l| l.starts_with("data: ")).await;
    assert_eq!(
        data(lines.last().unwrap()),
        json!({ "jsonrpc": "2.0", "method": "notifications/subscriptions/acknowledged", "params": {
            "_meta": { "io.modelcontextprotocol/subscriptionId": "s-1" }, "notifications": {} } })
    );
    drop(surface);

    let mut stream = listen(format!("{}/t/acme/w/main/mcp/native", served.base), json!(7)).await.unwrap();
    assert_eq!(stream.status(), 200);
    assert!(stream.headers()["content-type"].to_str().unwrap().starts_with("text/event-stream"));
    let lines = read_until(&mut stream, |l| l.starts_with("data: ")).await;
    assert_eq!(
        data(lines.last().unwrap()),
        json!({ "jsonrpc": "2.0", "method": "notifications/subscriptions/acknowledged", "params": {
            "_meta": { "io.modelcontextprotocol/subscriptionId": 7 },
            "notifications": { "toolsListChanged": true, "promptsListChanged": true } } })
    );

    // Tagged with the subscription.
    assert_eq!(
        list_changed_only_on_a_change(&s.t, &mut stream).await,
        json!({ "jsonrpc": "2.0", "method": "notifications/tools/list_changed", "params": {
            "_meta": { "io.modelcontextprotocol/subscriptionId": 7 } } })
    );

    // The server shuts down: the subscription ends with its result.
    let stopping = tokio::spawn(served.terminate());
    let lines = read_until(&mut stream, |l| l.contains("resultType")).await;
    assert_eq!(
        data(lines.last().unwrap()),
        json!({ "jsonrpc": "2.0", "id": 7, "result": {
            "resultType": "complete", "_meta": { "io.modelcontextprotocol/subscriptionId": 7 } } })
    );
    drop(stream);
    assert_eq!(stopping.await.unwrap(), 0);
}

/// A native pool's relayed results (prompts, resources, completion) on 2026-07-28 carry
/// `resultType`; its lists carry caching hints, private once grants filter them per caller;
/// `server/discover` declares what the downstream does. On 2025-11-25 nothing of it shows.
#[tokio::test]
async fn a_native_pools_relayed_results_are_what_each_revision_says() {
    let s = setup().await;
    let served = Served::start(gatehouse(Some(&s.t.url))).await;
    let native = format!("{}/t/acme/w/main/mcp/native", served.base);

    let (status, discovered) = modern(&native, &s.machine, "server/discover", None, json!({})).await;
    assert_eq!(status, 200, "{discovered}");
    for capability in ["tools", "prompts", "resources", "completions"] {
        assert!(discovered["result"]["capabilities"][capability].is_object(), "{capability}: {discovered}");
    }

    let completion = json!({
        "ref": { "type": "ref/prompt", "name": "completable-prompt" },
        "argument": { "name": "department", "value": "Eng" }
    });
    let requests = [
        ("prompts/list", None, json!({})),
        ("resources/list", None, json!({})),
        ("resources/templates/list", None, json!({})),
        ("prompts/get", Some("simple-prompt"), json!({ "name": "simple-prompt" })),
        ("completion/complete", Some("completable-prompt"), completion),
    ];
    let lists = ["prompts/list", "resources/list", "resources/templates/list"];
    let mut uri = None;
    for (method, name, params) in &requests {
        let (status, body) = modern(&native, &s.machine, method, *name, params.clone()).await;
        assert_eq!(status, 200, "{method}: {body}");
        assert_eq!(body["result"]["resultType"], "complete", "{method}: {body}");
        if lists.contains(method) {
            // The downstream (spoken to at 2025-11-25) gives no hints: stale at once, and
            // the same for every caller of this workspace without grants.
            assert_eq!((&body["result"]["ttlMs"], &body["result"]["cacheScope"]), (&json!(0), &json!("public")), "{body}");
        }
        if *method == "resources/list" {
            uri = body["result"]["resources"][0]["uri"].as_str().map(str::to_owned);
        }
        if *method == "completion/complete" {
            assert_eq!(body["result"]["completion"]["values"], json!(["Engineering"]), "{body}");
        }

        let r = common::mcp_post(&native, &s.machine, method, params.clone()).await;
        assert_eq!(r.status(), 200, "{method}");
        let body: Value = r.json().await.unwrap();
        assert!(body["result"].is_object(), "{method}: {body}");
        for field in ["resultType", "ttlMs", "cacheScope"] {
            assert!(body["result"].get(field).is_none(), "{method} on 2025-11-25 has {field}: {body}");
        }
    }
    let uri = uri.expect("server-everything lists resources");
    let (status, read) = modern(&native, &s.machine, "resources/read", Some(&uri), json!({ "uri": uri })).await;
    assert_eq!(status, 200, "{read}");
    assert_eq!(read["result"]["resultType"], "complete", "{read}");

    // Grants filter what each caller sees: the lists and reads are the caller's own.
    let grants = json!({ "grants": [{ "to": "machines", "tools": ["everything"] }] });
    let file = std::env::temp_dir().join(format!("gatehouse-test-{}.json", uuid::Uuid::new_v4().simple()));
    std::fs::write(&file, grants.to_string()).unwrap();
    cli(&s.t.url, &["workspace", "configure", "--tenant", "acme", "--workspace", "main", "--file", file.to_str().unwrap()]).await;
    for method in lists {
        let (status, body) = modern(&native, &s.machine, method, None, json!({})).await;
        assert_eq!(status, 200, "{method}: {body}");
        assert_eq!(body["result"]["cacheScope"], "private", "{method}: {body}");
    }
    let (_, read) = modern(&native, &s.machine, "resources/read", Some(&uri), json!({ "uri": uri })).await;
    assert_eq!(read["result"]["cacheScope"], "private", "{read}");
    assert_eq!(served.terminate().await, 0);
}

/// Prompts and resources have grants of their own: a grant names a prompt or a resource's URI
/// singly (or a connector's prompts or resources whole), a granted tool grants none of them,
/// and what is not granted looks missing, in the lists, a get and a read alike.
#[tokio::test]
async fn prompts_and_resources_are_granted_singly_and_ungranted_ones_look_missing() {
    let s = setup().await;
    let served = Served::start(gatehouse(Some(&s.t.url))).await;
    let native = format!("{}/t/acme/w/main/mcp/native", served.base);
    let ask = |method: &'static str, params: Value| {
        let (native, machine) = (native.clone(), s.machine.clone());
        async move { common::mcp_post(&native, &machine, method, params).await.json::<Value>().await.unwrap() }
    };
    let names = |body: &Value, field: &str, key: &str| -> Vec<String> {
        body["result"][field].as_array().unwrap().iter().map(|i| i[key].as_str().unwrap().to_owned()).collect()
    };
    // Without grants: everything, to pick what to grant and what not.
    let all_prompts = names(&ask("prompts/list", json!({})).await, "prompts", "name");
    let all_resources = names(&ask("resources/list", json!({})).await, "resources", "uri");
    let all_templates = names(&ask("resources/templates/list", json!({})).await, "resourceTemplates", "uriTemplate");
    assert!(all_prompts.len() >= 2 && all_resources.len() >= 2 && !all_templates.is_empty(), "{all_prompts:?} {all_resources:?}");
    let (prompt, other_prompt) = (&all_prompts[0], &all_prompts[1]);
    let (uri, other_uri) = (&all_resources[0], &all_resources[1]);
    let missing = ask("resources/read", json!({ "uri": "test://absent" })).await;

    configure(
        &s.t,
        json!({ "grants": [{ "to": "machines", "tools": ["everything.echo"],
            "prompts": [format!("everything.{prompt}")], "resources": [format!("everything.{uri}")] }] }),
    )
    .await;
    assert_eq!(names(&ask("prompts/list", json!({})).await, "prompts", "name"), std::slice::from_ref(prompt));
    assert_eq!(names(&ask("resources/list", json!({})).await, "resources", "uri"), std::slice::from_ref(uri));
    assert_eq!(
        names(&ask("resources/templates/list", json!({})).await, "resourceTemplates", "uriTemplate"),
        Vec::<String>::new(),
        "templates need the connector's resources whole"
    );
    let got = ask("prompts/get", json!({ "name": prompt })).await;
    assert!(got["result"]["messages"].is_array(), "{got}");
    let refused = ask("prompts/get", json!({ "name": other_prompt })).await;
    let nowhere = ask("prompts/get", json!({ "name": "no-such-prompt" })).await;
    assert_eq!(refused["error"]["code"], nowhere["error"]["code"], "{refused} {nowhere}");
    assert_eq!(
        refused["error"]["message"].as_str().unwrap().replace(other_prompt.as_str(), "_"),
        nowhere["error"]["message"].as_str().unwrap().replace("no-such-prompt", "_")
    );
    let read = ask("resources/read", json!({ "uri": uri })).await;
    assert!(read["result"]["contents"].is_array(), "{read}");
    let unread = ask("resources/read", json!({ "uri": other_uri })).await;
    assert_eq!(unread["error"]["code"], missing["error"]["code"], "an ungranted resource looks missing: {unread} {missing}");

    // The connector whole in `tools`: everything of it again.
    configure(&s.t, json!({ "grants": [{ "to": "machines", "tools": ["everything"] }] })).await;
    assert_eq!(names(&ask("prompts/list", json!({})).await, "prompts", "name"), all_prompts);
    assert_eq!(names(&ask("resources/list", json!({})).await, "resources", "uri"), all_resources);
    let read = ask("resources/read", json!({ "uri": other_uri })).await;
    assert!(read["result"]["contents"].is_array(), "{read}");
    assert_eq!(served.terminate().await, 0);
}

/// A native pool lists its tools in one order on every replica and after a restart, whatever
/// order the downstream lists them in (by name).
#[tokio::test]
async fn a_native_pools_tools_list_is_in_one_order_across_replicas_and_restarts() {
    let s = setup().await;
    let names = |body: Value| -> Vec<String> {
        body["result"]["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap().to_owned()).collect()
    };
    let mut seen = Vec::new();
    for _ in 0..2 {
        let (a, b) = (Served::start(gatehouse(Some(&s.t.url))).await, Served::start(gatehouse(Some(&s.t.url))).await);
        for served in [&a, &b] {
            let url = format!("{}/t/acme/w/main/mcp/native", served.base);
            let r = common::mcp_post(&url, &s.machine, "tools/list", json!({})).await;
            seen.push(names(r.json().await.unwrap()));
            let (_, modern_list) = modern(&url, &s.machine, "tools/list", None, json!({})).await;
            seen.push(names(modern_list));
        }
        assert_eq!(a.terminate().await, 0);
        assert_eq!(b.terminate().await, 0);
    }
    let mut sorted = seen[0].clone();
    sorted.sort();
    assert!(sorted.len() > 3, "{sorted:?}");
    for list in &seen {
        assert_eq!(list, &sorted);
    }
}

/// A downstream's JSON-RPC error through a native pool stays that error, with its code, data
/// and, on 2026-07-28, the HTTP status the revision gives it; on 2025-11-25 (the direct path)
/// a JSON-RPC error with 200. The six-tool surface still answers a `downstream_error` result.
#[tokio::test]
async fn a_downstreams_json_rpc_error_stays_that_error_through_a_native_pool() {
    let (_refusing, refusing_url) = common::python_downstream("refusing_server.py", common::free_port(), None).await;
    let t = TestDb::new().await;
    cli(&t.url, &["tenant", "create", "acme", "--name", "Acme"]).await;
    cli(&t.url, &["workspace", "create", "--tenant", "acme", "main"]).await;
    common::add_remote_mcp(&t.url, "acme", "main", "refusing", &refusing_url).await;
    let pools = json!({ "pools": { "native": { "tools": ["refusing"], "native": true } } });
    let file = std::env::temp_dir().join(format!("gatehouse-test-{}.json", uuid::Uuid::new_v4().simple()));
    std::fs::write(&file, pools.to_string()).unwrap();
    cli(&t.url, &["workspace", "configure", "--tenant", "acme", "--workspace", "main", "--file", file.to_str().unwrap()]).await;
    let machine = provision(&t.url, "acme").await;
    let served = Served::start(gatehouse(Some(&t.url))).await;
    let base = format!("{}/t/acme/w/main/mcp", served.base);
    let native = format!("{base}/native");

    for (code, status) in [(-32020, 400), (-32021, 400), (-32022, 400), (-32602, 200)] {
        let params = json!({ "name": "refuse", "arguments": { "code": code } });
        let (got, body) = modern(&native, &machine, "tools/call", Some("refuse"), params.clone()).await;
        assert_eq!(got, status, "{code}: {body}");
        assert_eq!(body["error"]["code"], code, "{body}");
        assert_eq!(body["error"]["data"], json!({ "asked": code }), "{body}");
        assert!(body.get("result").is_none(), "{body}");

        let r = common::mcp_post(&native, &machine, "tools/call", params).await;
        assert_eq!(r.status(), 200, "{code}");
        let body: Value = r.json().await.unwrap();
        assert_eq!(body["error"]["code"], code, "{body}");
        assert_eq!(body["error"]["message"], format!("refused with {code}"), "{body}");
    }
    // The surface's call_tool is the gateway's own tool: its answer is a result.
    let call = json!({ "name": "call_tool", "arguments": { "address": "refusing.refuse", "args": { "code": -32021 } } });
    let (got, body) = modern(&base, &machine, "tools/call", Some("call_tool"), call).await;
    assert_eq!(got, 200, "{body}");
    assert_eq!(body["result"]["isError"], true, "{body}");

    // A resource no downstream has: -32602 on 2026-07-28 with its URI, the handshake era's
    // -32002 before it.
    let missing = json!({ "uri": "test://absent" });
    let (got, body) = modern(&native, &machine, "resources/read", Some("test://absent"), missing.clone()).await;
    assert_eq!((got, &body["error"]["code"]), (200, &json!(-32602)), "{body}");
    let r = common::mcp_post(&native, &machine, "resources/read", missing).await;
    let body: Value = r.json().await.unwrap();
    assert!(body["error"]["code"] == -32002 || body["error"]["code"] == -32602, "{body}");
    assert_eq!(served.terminate().await, 0);
}

/// What a downstream's own log (`conformance_downstream_logging`) says reached it: each
/// request's (method, `Mcp-Name`, `Mcp-Param-*` headers).
fn reached(log: &std::path::Path) -> Vec<(String, String, Value)> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .map(|l| {
            (l["method"].as_str().unwrap_or("").to_owned(), l["name"].as_str().unwrap_or("").to_owned(), l["params"].clone())
        })
        .collect()
}

/// A native pool of two connectors whose downstreams share every name (two instances of the
/// conformance downstream, `alpha` and `beta`): tools, prompts and resources are listed as
/// `connector.name`, each call reaches its own downstream under its own name with the
/// `Mcp-Name`/`Mcp-Param-*` headers computed for that name, an unknown prefix answers what an
/// unknown tool does, grants and classification still apply per tool, and the instructions
/// are the downstreams', each under its connector. A pool of one connector keeps the names.
#[tokio::test]
async fn a_native_pool_of_two_connectors_prefixes_names_and_takes_the_prefix_off_on_the_way_down() {
    let log = |who: &str| std::env::temp_dir().join(format!("gatehouse-{who}-{}.jsonl", uuid::Uuid::new_v4().simple()));
    let (alpha_log, beta_log) = (log("alpha"), log("beta"));
    let (_alpha, alpha_url) = common::conformance_downstream_logging(Some(&alpha_log)).await;
    let (_beta, beta_url) = common::conformance_downstream_logging(Some(&beta_log)).await;
    let t = TestDb::new().await;
    cli(&t.url, &["tenant", "create", "acme", "--name", "Acme"]).await;
    cli(&t.url, &["workspace", "create", "--tenant", "acme", "main"]).await;
    common::add_remote_mcp(&t.url, "acme", "main", "alpha", &alpha_url).await;
    common::add_remote_mcp(&t.url, "acme", "main", "beta", &beta_url).await;
    let pools = json!({
        "pools": {
            "native": { "tools": ["alpha", "beta"], "native": true },
            "solo": { "tools": ["alpha"], "native": true },
        },
        "classification": { "alpha.test_simple_text": "read" },
    });
    configure(&t, pools).await;
    let machine = provision(&t.url, "acme").await;
    let served = Served::start(gatehouse(Some(&t.url))).await;
    let native = format!("{}/t/acme/w/main/mcp/native", served.base);
    let solo = format!("{}/t/acme/w/main/mcp/solo", served.base);
    let names = |body: &Value, field: &str| -> Vec<String> {
        body["result"][field].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap().to_owned()).collect()
    };

    // tools/list: every tool of both, prefixed, in name order; the pool of one keeps the names.
    let listed: Value = common::mcp_post(&native, &machine, "tools/list", json!({})).await.json().await.unwrap();
    let single: Value = common::mcp_post(&solo, &machine, "tools/list", json!({})).await.json().await.unwrap();
    let (tools, own) = (names(&listed, "tools"), names(&single, "tools"));
    assert!(own.contains(&"test_header_param".to_owned()), "{single}");
    let mut expected: Vec<String> =
        ["alpha", "beta"].iter().flat_map(|id| own.iter().map(move |n| format!("{id}.{n}"))).collect();
    expected.sort();
    assert_eq!(tools, expected, "{listed}");
    // Classification per tool, under the shown name.
    let annotations = |name: &str| {
        listed["result"]["tools"].as_array().unwrap().iter().find(|t| t["name"] == name).unwrap()["annotations"].clone()
    };
    assert_eq!(annotations("alpha.test_simple_text")["readOnlyHint"], true, "{listed}");
    assert_eq!(annotations("beta.test_simple_text")["readOnlyHint"], false, "{listed}");

    // A 2026-07-28 call of each: its own downstream answers, called by its own name with the
    // header its own schema asks for; the other downstream hears nothing of it.
    for (id, region) in [("alpha", "eu-west1"), ("beta", "us-east1")] {
        let name = format!("{id}.test_header_param");
        let params = json!({ "name": name, "arguments": { "region": region } });
        let (status, body) =
            modern_with(&native, &machine, "tools/call", Some(&name), params, &[("mcp-param-region", region)]).await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["result"]["content"][0]["text"], format!("region={region}"), "{body}");
    }
    let calls = |log: &std::path::Path| -> Vec<(String, Value)> {
        reached(log).into_iter().filter(|(m, _, _)| m == "tools/call").map(|(_, n, p)| (n, p)).collect()
    };
    assert_eq!(calls(&alpha_log), vec![("test_header_param".to_owned(), json!({ "mcp-param-region": "eu-west1" }))]);
    assert_eq!(calls(&beta_log), vec![("test_header_param".to_owned(), json!({ "mcp-param-region": "us-east1" }))]);

    // An unknown prefix answers what an unknown tool does (the name echoed aside), and nothing
    // goes down.
    let unknown = |name: &'static str| {
        let (machine, native) = (machine.clone(), native.clone());
        async move {
            let r = common::mcp_post(&native, &machine, "tools/call", json!({ "name": name, "arguments": {} })).await;
            r.json::<Value>().await.unwrap().to_string().replace(name, "NAME")
        }
    };
    let missing = unknown("alpha.no_such_tool").await;
    assert!(missing.contains("unknown_tool") || missing.contains("no tool"), "{missing}");
    assert_eq!(unknown("gamma.test_simple_text").await, missing);
    assert_eq!(unknown("test_simple_text").await, missing);
    assert_eq!(calls(&alpha_log).len() + calls(&beta_log).len(), 2);

    // The official Python SDK client, in both of its modes, lists and calls the prefixed names.
    for mode in [None, Some("2026-07-28")] {
        let out = python_agent_in(
            &native,
            &machine,
            mode,
            json!([
                ["alpha.test_simple_text", {}],
                ["beta.test_header_param", { "region": "sa-east1" }],
                ["@prompt", { "name": "beta.test_simple_prompt" }],
            ]),
        )
        .await;
        assert_eq!(out["tools"], json!(expected), "{mode:?}: {out}");
        assert_eq!(
            out["calls"][0],
            json!({ "isError": false, "text": ["This is a simple text response for testing."] }),
            "{out}"
        );
        assert_eq!(out["calls"][1], json!({ "isError": false, "text": ["region=sa-east1"] }), "{mode:?}: {out}");
        assert_eq!(out["calls"][2], json!({ "prompt": ["This is a simple prompt for testing."] }), "{mode:?}: {out}");
    }
    assert!(calls(&alpha_log).iter().chain(&calls(&beta_log)).all(|(name, _)| !name.contains('.')), "{alpha_log:?}");

    // Prompts and resources of both, prefixed (URIs stay the downstreams' own); a prompt's get
    // reaches its own downstream by its own name; an unknown prefix is an unknown prompt.
    let prompts: Value = common::mcp_post(&native, &machine, "prompts/list", json!({})).await.json().await.unwrap();
    let prompts = names(&prompts, "prompts");
    assert!(
        prompts.contains(&"alpha.test_simple_prompt".into()) && prompts.contains(&"beta.test_simple_prompt".into()),
        "{prompts:?}"
    );
    assert!(prompts.iter().all(|n| n.starts_with("alpha.") || n.starts_with("beta.")), "{prompts:?}");
    let (status, got) =
        modern(&native, &machine, "prompts/get", Some("alpha.test_simple_prompt"), json!({ "name": "alpha.test_simple_prompt" }))
            .await;
    assert_eq!(status, 200, "{got}");
    assert_eq!(got["result"]["messages"][0]["content"]["text"], "This is a simple prompt for testing.", "{got}");
    let gets = |log: &std::path::Path| {
        reached(log).into_iter().filter(|(m, _, _)| m == "prompts/get").map(|(_, n, _)| n).collect::<Vec<_>>()
    };
    assert_eq!(gets(&alpha_log), vec!["test_simple_prompt".to_owned()]);
    let no_prompt = |name: &str| json!({ "name": name });
    let (_, gamma) =
        modern(&native, &machine, "prompts/get", Some("gamma.test_simple_prompt"), no_prompt("gamma.test_simple_prompt")).await;
    assert_eq!(gamma["error"]["code"], -32602, "{gamma}");
    let resources: Value = common::mcp_post(&native, &machine, "resources/list", json!({})).await.json().await.unwrap();
    let static_text: Vec<&Value> =
        resources["result"]["resources"].as_array().unwrap().iter().filter(|r| r["uri"] == "test://static-text").collect();
    let mut shown: Vec<&str> = static_text.iter().filter_map(|r| r["name"].as_str()).collect();
    shown.sort_unstable();
    assert_eq!(shown, ["alpha.static-text", "beta.static-text"], "{resources}");
    let templates: Value = common::mcp_post(&native, &machine, "resources/templates/list", json!({})).await.json().await.unwrap();
    let templates = names(&templates, "resourceTemplates");
    assert!(
        templates.contains(&"alpha.template-data".into()) && templates.contains(&"beta.template-data".into()),
        "{templates:?}"
    );

    // Instructions: the downstreams', each under its connector; the pool of one: its own.
    let init = json!({ "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": { "name": "t", "version": "1" } });
    let own = "The conformance suite's downstream.";
    let instructions = |body: Value| body["result"]["instructions"].as_str().map(str::to_owned);
    let merged = instructions(common::mcp_post(&native, &machine, "initialize", init.clone()).await.json().await.unwrap());
    let merged = merged.expect("instructions");
    for id in ["alpha", "beta"] {
        assert!(
            merged.contains(&format!("Connector `{id}` (its tools, prompts and resources are named `{id}.<name>` here):\n{own}")),
            "{merged}"
        );
    }
    assert!(!merged.contains("search_tools"), "not the six-tool guide: {merged}");
    let (_, discovered) = modern(&native, &machine, "server/discover", None, json!({})).await;
    assert_eq!(instructions(discovered), Some(merged));
    let single = instructions(common::mcp_post(&solo, &machine, "initialize", init).await.json().await.unwrap());
    assert_eq!(single.as_deref(), Some(own));

    // Grants still apply per tool: an ungranted tool is neither listed nor callable, and looks
    // like one that does not exist.
    configure(&t, json!({ "grants": [{ "to": "machines", "tools": ["alpha", "beta.test_simple_text"] }] })).await;
    let ok = common::eventually(std::time::Duration::from_secs(30), || {
        let (native, machine) = (native.clone(), machine.clone());
        async move {
            let listed: Value = common::mcp_post(&native, &machine, "tools/list", json!({})).await.json().await.unwrap();
            let tools = names(&listed, "tools");
            tools.contains(&"beta.test_simple_text".into()) && !tools.contains(&"beta.test_header_param".into())
        }
    })
    .await;
    assert!(ok, "the grant narrows the pool's tools");
    let before = reached(&beta_log).len();
    assert_eq!(unknown("beta.test_header_param").await, missing);
    assert_eq!(reached(&beta_log).len(), before, "an ungranted tool is not called");
    assert_eq!(served.terminate().await, 0);
}

/// A tenant `acme` with a workspace `main` whose connector `listing` is
/// tests/peers/listing_server.py (handshake era only), configured with `patch`, and machine
/// credentials; the downstream's process lives as long as the first value.
async fn listing_setup(patch: Value) -> (tokio::process::Child, TestDb, Machine) {
    let (downstream, url) = common::python_downstream("listing_server.py", common::free_port(), None).await;
    let t = TestDb::new().await;
    cli(&t.url, &["tenant", "create", "acme", "--name", "Acme"]).await;
    cli(&t.url, &["workspace", "create", "--tenant", "acme", "main"]).await;
    common::add_remote_mcp(&t.url, "acme", "main", "listing", &url).await;
    configure(&t, patch).await;
    let machine = provision(&t.url, "acme").await;
    (downstream, t, machine)
}

/// A handshake-era downstream's own list changes reach the official Python SDK client (in its
/// handshake mode, every second request to the other replica) on its GET stream through a
/// native pool: the downstream tells each of its sessions, among them the one Gatehouse keeps
/// to listen to it on the replica serving the agent's GET stream; Gatehouse fetches the catalog
/// again and says once that the tools changed and once that the prompts did, and the lists the
/// agent then asks for show the new tool and prompt.
#[tokio::test]
async fn a_downstreams_own_list_changes_reach_the_python_sdk_on_its_get_stream_across_replicas() {
    let (_downstream, t, machine) =
        listing_setup(json!({ "pools": { "native": { "tools": ["listing"], "native": true } } })).await;
    let a = Served::start(gatehouse(Some(&t.url))).await;
    let b = Served::start(gatehouse(Some(&t.url))).await;
    let (native_a, native_b) = (format!("{}/t/acme/w/main/mcp/native", a.base), format!("{}/t/acme/w/main/mcp/native", b.base));

    let env = [("GATEHOUSE_ALT_URL", native_b.as_str()), ("GATEHOUSE_CHANGES", "tools,prompts")];
    let out = common::python_agent_with(&native_a, &machine, None, &env, json!([["grow", {}]])).await;
    assert_eq!(out["protocol"], "2025-11-25", "{out}");
    assert_eq!(out["tools"], json!(["ask_twice", "echo", "grow", "touch"]), "{out}");
    assert_eq!(out["calls"][0]["isError"], false, "{out}");
    let mut changes: Vec<String> = serde_json::from_value(out["changes"].clone()).unwrap();
    changes.sort();
    assert_eq!(changes, ["prompts", "tools"], "each list change said once: {out}");
    assert_eq!(
        out["after"],
        json!({ "tools": ["ask_twice", "echo", "grow", "grown_1", "touch"], "prompts": ["asking", "base", "grown_1"] }),
        "{out}"
    );
    assert_eq!(a.terminate().await, 0);
    assert_eq!(b.terminate().await, 0);
}

/// A 2026-07-28 agent (the official Python SDK client in that mode, answering) calls a tool of
/// a downstream that speaks only the handshake era and asks for sampling and then an
/// elicitation while the call is open. The gateway translates: each request becomes an
/// `InputRequiredResult` round, the agent's retries (every second request to the other
/// replica) replay the call with the answers so far, and the downstream completes with both
/// answers; through a native pool and through the six-tool surface's `call_tool`. A native
/// pool's `prompts/get` and `resources/read` are replayed alike (the prompt asks for sampling,
/// the resource template's read for a form).
#[tokio::test]
async fn a_2026_agent_answers_a_handshake_era_downstreams_requests_through_replayed_rounds_across_replicas() {
    let patch = json!({
        "pools": { "native": { "tools": ["listing"], "native": true } },
        "classification": { "listing.ask_twice": "read" },
    });
    let (_downstream, t, machine) = listing_setup(patch).await;
    // Both replicas hold the deployment's one key ring.
    let keys = common::vault_key("k1");
    let served = |_: ()| {
        let mut serve = gatehouse(Some(&t.url));
        serve.env("GATEHOUSE_VAULT_KEYS", &keys);
        Served::start(serve)
    };
    let (a, b) = (served(()).await, served(()).await);
    let answering = |other: &str| [("GATEHOUSE_ANSWER", "1".to_owned()), ("GATEHOUSE_ALT_URL", other.to_owned())];

    let native = |base: &str| format!("{base}/t/acme/w/main/mcp/native");
    let env = answering(&native(&b.base));
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let calls = json!([
        ["ask_twice", {}],
        ["@prompt", { "name": "asking" }],
        ["@resource", { "uri": "listing://asking/maps" }]
    ]);
    let out = common::python_agent_with(&native(&a.base), &machine, Some("2026-07-28"), &env, calls).await;
    assert_eq!(out["protocol"], "2026-07-28", "{out}");
    assert_eq!(out["calls"][0]["isError"], false, "{out}");
    assert_eq!(out["calls"][0]["text"][0], "sampled=Paris, says the agent; elicited=accept:Ann; runs=1", "{out}");
    assert_eq!(out["calls"][1]["prompt"], json!(["prompt sampled=Paris, says the agent"]), "{out}");
    assert_eq!(out["calls"][2]["resource"], json!(["maps read by accept:Ann"]), "{out}");
    // Each request was answered in rounds, whose retries went to both replicas.
    for (method, requests) in [("tools/call", 3), ("prompts/get", 2), ("resources/read", 2)] {
        let sent: Vec<&Value> = out["replicas"].as_array().unwrap().iter().filter(|r| r[0] == method).collect();
        assert!(sent.len() >= requests && sent.iter().any(|r| r[1] == 0) && sent.iter().any(|r| r[1] == 1), "{method}: {out}");
    }

    let surface = |base: &str| format!("{base}/t/acme/w/main/mcp");
    let env = answering(&surface(&b.base));
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let wrapped = json!([["call_tool", { "address": "listing.ask_twice", "args": {} }]]);
    let out = common::python_agent_with(&surface(&a.base), &machine, Some("2026-07-28"), &env, wrapped).await;
    assert_eq!(out["calls"][0]["text"][0], "sampled=Paris, says the agent; elicited=accept:Ann; runs=2", "{out}");

    assert_eq!(a.terminate().await, 0);
    assert_eq!(b.terminate().await, 0);
}

/// Resource subscriptions on 2026-07-28: the official Python SDK client in that mode opens a
/// `subscriptions/listen` stream on one replica subscribed to three URIs, then calls (every
/// second request to the other replica) a tool of each downstream that updates its resource:
/// the conformance downstream (2026-07-28: the gateway names the URI in its own
/// `subscriptions/listen` filter) and the listing downstream (handshake era only:
/// `resources/subscribe` on the gateway's own session with it). The acknowledgement honours
/// the granted URIs only, and exactly the granted updates arrive, once each; the ungranted
/// resource's update, said by its downstream all the same, is not passed on.
#[tokio::test]
async fn a_2026_agents_resource_subscriptions_hear_both_eras_downstreams_updates_across_replicas() {
    let (out, _t) = subscribed_across_replicas(Some("2026-07-28")).await;
    assert_eq!(out["protocol"], "2026-07-28", "{out}");
}

/// Resource subscriptions on the handshake era: the official Python SDK client in handshake
/// mode subscribes to three URIs with `resources/subscribe` and listens on its GET stream,
/// every second HTTP request (the subscriptions, the GET stream, the calls) going to the other
/// replica. The subscriptions are kept for the session in PostgreSQL, so the replica holding
/// the GET stream hears the granted updates of both eras' downstreams, once each; the
/// ungranted URI is refused at `resources/subscribe`, and its update is not passed on.
#[tokio::test]
async fn a_handshake_agents_resource_subscriptions_reach_its_get_stream_on_another_replica() {
    let (out, t) = subscribed_across_replicas(None).await;
    assert_eq!(out["protocol"], "2025-11-25", "{out}");
    assert_eq!(out["refused"].as_array().map(Vec::len), Some(1), "{out}");
    let sent = out["replicas"].as_array().unwrap();
    let subscribed: Vec<&Value> = sent.iter().filter(|r| r[0] == "resources/subscribe").collect();
    assert!(subscribed.iter().any(|r| r[1] == 0) && subscribed.iter().any(|r| r[1] == 1), "{out}");

    // The subscriptions are the session's: a row per granted URI, naming no one.
    use sqlx::{Connection, Executor};
    let mut db = sqlx::PgConnection::connect(t.url.expose()).await.unwrap();
    db.execute("SELECT set_config('gatehouse.platform', 'on', false)").await.unwrap();
    let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM agent_subscriptions").fetch_one(&mut db).await.unwrap();
    assert_eq!(rows, 2);
}

/// Two replicas over a native pool of the listing downstream (handshake era only: the gateway
/// sends `resources/subscribe` on its own session with it) and the conformance downstream
/// (2026-07-28: the gateway names the URI in its own `subscriptions/listen` filter), with two
/// of three URIs granted. The official Python SDK client in `mode` subscribes to all three on
/// one replica, calls (every second request to the other replica) a tool of each downstream
/// that updates its resource, and reports what it heard: exactly the granted updates, once
/// each, and only the granted URIs honoured.
async fn subscribed_across_replicas(mode: Option<&str>) -> (Value, TestDb) {
    let (_conformance, conformance_url) = common::conformance_downstream().await;
    let (_listing, t, machine) = listing_setup(json!({})).await;
    common::add_remote_mcp(&t.url, "acme", "main", "conf", &conformance_url).await;
    configure(
        &t,
        json!({
            "pools": { "native": { "tools": ["listing", "conf"], "native": true } },
            "classification": { "listing.touch": "read", "conf.test_touch_resource": "read" },
            "grants": [{ "to": "machines", "tools": ["listing.touch", "conf.test_touch_resource"],
                "resources": ["listing.listing://watched", "conf.test://watched-resource"] }]
        }),
    )
    .await;
    let a = Served::start(gatehouse(Some(&t.url))).await;
    let b = Served::start(gatehouse(Some(&t.url))).await;
    let (native_a, native_b) = (format!("{}/t/acme/w/main/mcp/native", a.base), format!("{}/t/acme/w/main/mcp/native", b.base));

    let watch = "listing://watched,test://watched-resource,test://static-text";
    let env = [("GATEHOUSE_ALT_URL", native_b.as_str()), ("GATEHOUSE_WATCH", watch)];
    let calls = json!([
        ["conf.test_touch_resource", { "uri": "test://watched-resource" }],
        ["conf.test_touch_resource", { "uri": "test://static-text" }],
        ["listing.touch", {}]
    ]);
    let out = common::python_agent_with(&native_a, &machine, mode, &env, calls).await;
    for call in out["calls"].as_array().unwrap() {
        assert_eq!(call["isError"], false, "{out}");
    }
    assert_eq!(out["honored"], json!(["listing://watched", "test://watched-resource"]), "only granted URIs: {out}");
    let mut updated: Vec<String> = serde_json::from_value(out["updated"].clone()).unwrap();
    updated.sort();
    assert_eq!(updated, ["listing://watched", "test://watched-resource"], "each granted update once, no other: {out}");
    assert_eq!(a.terminate().await, 0);
    assert_eq!(b.terminate().await, 0);
    (out, t)
}

/// A handshake-era agent's `logging/setLevel` holds for its session on every replica and for
/// every downstream of a native pool: `modern` speaks only 2026-07-28 (it refuses the
/// handshake), so each request to it carries the session's level in `_meta` (`debug` before
/// one is set); `both` is spoken to through pooled handshake sessions that other agents share,
/// so the level is not relayed to it and the gateway passes on only the messages at or above
/// it. The official Python SDK client in its handshake mode sends every second HTTP request to
/// the other replica, and waits out a replica's [`FRESH`] view after each level it sets.
///
/// [`FRESH`]: gatehouse::gateway::log_levels::FRESH
#[tokio::test]
async fn a_handshake_agents_log_level_holds_on_every_replica_and_reaches_a_2026_only_downstream() {
    let log = |who: &str| std::env::temp_dir().join(format!("gatehouse-{who}-{}.jsonl", uuid::Uuid::new_v4().simple()));
    let (modern_log, both_log) = (log("modern"), log("both"));
    let (_modern, modern_url) = common::conformance_downstream_modern_only(&modern_log).await;
    let (_both, both_url) = common::conformance_downstream_logging(Some(&both_log)).await;
    let t = TestDb::new().await;
    cli(&t.url, &["tenant", "create", "acme", "--name", "Acme"]).await;
    cli(&t.url, &["workspace", "create", "--tenant", "acme", "main"]).await;
    common::add_remote_mcp(&t.url, "acme", "main", "modern", &modern_url).await;
    common::add_remote_mcp(&t.url, "acme", "main", "both", &both_url).await;
    configure(
        &t,
        json!({
            "pools": { "native": { "tools": ["modern", "both"], "native": true } },
            "classification": { "modern.test_tool_with_logging": "read", "both.test_tool_with_logging": "read" },
        }),
    )
    .await;
    let machine = provision(&t.url, "acme").await;
    let a = Served::start(gatehouse(Some(&t.url))).await;
    let b = Served::start(gatehouse(Some(&t.url))).await;
    let (native_a, native_b) = (format!("{}/t/acme/w/main/mcp/native", a.base), format!("{}/t/acme/w/main/mcp/native", b.base));

    let level = |level: &str| json!(["@level", { "level": level, "settle": 2.5 }]);
    let both = |spec: &mut Vec<Value>| {
        spec.push(json!(["modern.test_tool_with_logging", {}]));
        spec.push(json!(["both.test_tool_with_logging", {}]));
    };
    let mut calls = Vec::new();
    both(&mut calls);
    calls.push(level("warning"));
    both(&mut calls);
    calls.push(level("info"));
    both(&mut calls);
    let env = [("GATEHOUSE_ALT_URL", native_b.as_str())];
    let out = common::python_agent_with(&native_a, &machine, None, &env, Value::Array(calls)).await;
    assert_eq!(out["protocol"], "2025-11-25", "{out}");
    let all = json!(["Tool execution started", "Tool processing data", "Tool execution completed"]);
    for (i, heard) in [(0, Some(&all)), (1, Some(&all)), (3, None), (4, None), (6, Some(&all)), (7, Some(&all))] {
        let call = &out["calls"][i];
        assert_eq!(call["isError"], false, "call {i}: {out}");
        assert_eq!(call.get("logs"), heard, "call {i}: {out}");
    }
    // The levels and the calls after them were served by both replicas.
    let sent = out["replicas"].as_array().unwrap();
    let served_by = |method: &str| sent.iter().filter(|r| r[0] == method).map(|r| r[1].as_u64().unwrap()).collect::<Vec<_>>();
    let (levels, called) = (served_by("logging/setLevel"), served_by("tools/call"));
    assert_eq!(levels.len(), 2, "{out}");
    assert!(called.contains(&0) && called.contains(&1), "{out}");

    // What reached the downstreams: the 2026-only one was asked at each level in turn; the
    // shared one was never told a level.
    let lines = |log: &std::path::Path| -> Vec<Value> {
        std::fs::read_to_string(log).unwrap_or_default().lines().filter_map(|l| serde_json::from_str(l).ok()).collect()
    };
    let asked: Vec<Value> =
        lines(&modern_log).iter().filter(|l| l["rpc"] == "tools/call").map(|l| l["logLevel"].clone()).collect();
    assert_eq!(asked, [json!("debug"), json!("warning"), json!("info")]);
    assert!(!lines(&both_log).iter().any(|l| l["rpc"] == "logging/setLevel"), "the shared session is not told a level");

    // The level is the session's, naming no one.
    use sqlx::{Connection, Executor};
    let mut db = sqlx::PgConnection::connect(t.url.expose()).await.unwrap();
    db.execute("SELECT set_config('gatehouse.platform', 'on', false)").await.unwrap();
    let rows: Vec<String> = sqlx::query_scalar("SELECT level FROM agent_log_levels").fetch_all(&mut db).await.unwrap();
    assert_eq!(rows, ["info"]);
    assert_eq!(a.terminate().await, 0);
    assert_eq!(b.terminate().await, 0);
}
