//! Requests from a downstream to the agent on 2026-07-28 (issue 19 item 5): a downstream's
//! `InputRequiredResult` reaches the agent with a `requestState` the gateway sealed, the retry
//! lands on the other replica, and a tampered, cross-tenant or expired state is refused
//! before anything is sent downstream (the downstream's own log of the requests it got shows
//! it). The downstream is the conformance downstream (official Python SDK). On the handshake
//! era, a downstream's sampling and elicitation reach the agent on the call's response stream
//! and the agent's answer, POSTed to either replica, reaches the downstream.

mod common;

use std::path::PathBuf;

use common::{Machine, Served, TestDb, cli, gatehouse, handshake, http, next_message, on_session, provision};
use serde_json::{Value, json};

/// A tenant with a workspace `main`, the downstream as connector `conformance` and a native
/// pool over it; its machine credentials.
async fn tenant(t: &TestDb, slug: &str, downstream: &str) -> Machine {
    cli(&t.url, &["tenant", "create", slug, "--name", slug]).await;
    cli(&t.url, &["workspace", "create", "--tenant", slug, "main"]).await;
    common::add_remote_mcp(&t.url, slug, "main", "conformance", downstream).await;
    // The input-required tools are classified reads, so `call_tool` and programs may call them.
    let reads: serde_json::Map<String, Value> = ["elicitation", "sampling"]
        .iter()
        .map(|t| (format!("conformance.test_input_required_result_{t}"), json!("read")))
        .collect();
    let pools = json!({
        "pools": { "native": { "tools": ["conformance"], "native": true } },
        "classification": reads,
    });
    let file = std::env::temp_dir().join(format!("gatehouse-test-{}.json", uuid::Uuid::new_v4().simple()));
    std::fs::write(&file, pools.to_string()).unwrap();
    cli(&t.url, &["workspace", "configure", "--tenant", slug, "--workspace", "main", "--file", file.to_str().unwrap()]).await;
    provision(&t.url, slug).await
}

/// One 2026-07-28 `tools/call` with the routing headers and per-request `_meta`.
async fn call(url: &str, m: &Machine, tool: &str, extra: Value) -> Value {
    let mut params = json!({ "name": tool, "arguments": {}, "_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": { "name": "t", "version": "1" },
        "io.modelcontextprotocol/clientCapabilities": { "elicitation": {} }
    } });
    for (k, v) in extra.as_object().cloned().unwrap_or_default() {
        params[k] = v;
    }
    let body = json!({ "jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": params });
    let r = m
        .headers(http().post(url))
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tools/call")
        .header("mcp-name", tool)
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    r.json().await.unwrap()
}

/// How many `tools/call` of `tool` reached the downstream.
fn calls_of(log: &PathBuf, tool: &str) -> usize {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|l| l["method"] == "tools/call" && l["name"] == tool)
        .count()
}

#[tokio::test]
async fn a_sealed_request_state_crosses_replicas_and_a_tampered_expired_or_foreign_one_is_refused() {
    let log = std::env::temp_dir().join(format!("gatehouse-calls-{}.jsonl", uuid::Uuid::new_v4().simple()));
    let (_downstream, downstream_url) = common::conformance_downstream_logging(Some(&log)).await;
    let t = TestDb::new().await;
    let acme = tenant(&t, "acme", &downstream_url).await;
    let beta = tenant(&t, "beta", &downstream_url).await;
    let (a, b, key) = two_replicas(&t).await;
    let pool = |served: &Served, slug: &str| format!("{}/t/{slug}/w/main/mcp/native", served.base);
    let tool = "test_input_required_result_request_state";

    // Round 1 on replica A: the downstream asks for a confirmation; its own state is sealed.
    let first = call(&pool(&a, "acme"), &acme, tool, json!({})).await;
    let result = &first["result"];
    assert_eq!(result["resultType"], "input_required", "{first}");
    assert_eq!(result["inputRequests"]["confirm"]["method"], "elicitation/create", "{first}");
    let sealed = result["requestState"].as_str().unwrap().to_owned();
    assert_ne!(sealed, "confirm-round-1", "the downstream's state is not handed out as it is");
    assert!(!sealed.contains("confirm-round-1"), "nor readable: {sealed}");
    assert_eq!(calls_of(&log, tool), 1);

    let answer = json!({ "confirm": { "action": "accept", "content": { "ok": true } } });
    let refused = |body: &Value, code: &str| {
        assert_eq!(body["error"]["code"], -32602, "{body}");
        assert_eq!(body["error"]["data"]["code"], code, "{body}");
        assert!(body.get("result").is_none(), "{body}");
    };
    // Tampered (one character of the ciphertext changed), on replica B.
    let mut tampered = sealed.clone().into_bytes();
    let last = tampered.len() - 1;
    tampered[last] = if tampered[last] == b'A' { b'B' } else { b'A' };
    let tampered = String::from_utf8(tampered).unwrap();
    let body = call(&pool(&b, "acme"), &acme, tool, json!({ "inputResponses": answer, "requestState": tampered })).await;
    refused(&body, "request_state_invalid");
    // Another tenant's call with acme's genuine state (same downstream, same tool).
    let body = call(&pool(&b, "beta"), &beta, tool, json!({ "inputResponses": answer, "requestState": sealed })).await;
    refused(&body, "request_state_invalid");
    // Genuinely sealed with the deployment's key for this very call, but expired.
    use sqlx::{Connection, Executor, Row};
    let mut c = t.owner_conn().await;
    let mut tx = c.begin().await.unwrap();
    // Row-level security is forced: the platform setting lets the owner read across tenants.
    tx.execute("SELECT set_config('gatehouse.platform', 'on', true)").await.unwrap();
    let row =
        sqlx::query("SELECT w.tenant_id, w.id FROM workspaces w JOIN tenants t ON t.id = w.tenant_id WHERE t.slug = 'acme'")
            .fetch_one(&mut *tx)
            .await
            .unwrap();
    tx.commit().await.unwrap();
    let (tenant_id, workspace_id): (uuid::Uuid, uuid::Uuid) = (row.get(0), row.get(1));
    let ring = gatehouse::vault::KeyRing::parse(&key).unwrap();
    let expired = gatehouse::gateway::input::seal_expired(
        &ring,
        (tenant_id, workspace_id, "conformance"),
        ("tools/call", tool, &acme.token_id),
        5,
    );
    let body = call(&pool(&b, "acme"), &acme, tool, json!({ "inputResponses": answer, "requestState": expired })).await;
    refused(&body, "request_state_expired");
    // None of the three reached the downstream.
    assert_eq!(calls_of(&log, tool), 1, "a refused state must not run anything downstream");

    // The genuine retry, on the other replica than round 1: the downstream gets its own state.
    let body = call(&pool(&b, "acme"), &acme, tool, json!({ "inputResponses": answer, "requestState": sealed })).await;
    assert_eq!(body["result"]["resultType"], "complete", "{body}");
    assert!(body["result"]["content"][0]["text"].as_str().unwrap().contains("state-ok"), "{body}");
    assert_eq!(calls_of(&log, tool), 2);
    // A state is bound to its call: on another tool of the same connector it is refused.
    let other = "test_input_required_result_multi_round";
    let body = call(&pool(&a, "acme"), &acme, other, json!({ "inputResponses": answer, "requestState": sealed })).await;
    refused(&body, "request_state_invalid");
    assert_eq!(calls_of(&log, other), 0);

    assert_eq!(a.terminate().await, 0);
    assert_eq!(b.terminate().await, 0);
}

/// The official Python SDK agent (tests/peers/agent.py) on 2026-07-28, answering sampling and
/// elicitation, its HTTP requests alternating between `url`'s replica and `alt`.
async fn agent(url: &str, alt: &str, m: &Machine, calls: Value) -> Value {
    agent_in(url, alt, m, Some("2026-07-28"), calls).await
}

/// [`agent`] in the SDK client's connect `mode` (`None`: the handshake).
async fn agent_in(url: &str, alt: &str, m: &Machine, mode: Option<&str>, calls: Value) -> Value {
    common::python_agent_with(url, m, mode, &[("GATEHOUSE_ANSWER", "1"), ("GATEHOUSE_ALT_URL", alt)], calls).await
}

/// Two replicas on one database with one vault key ring (returned too).
async fn two_replicas(t: &TestDb) -> (Served, Served, String) {
    let key = common::vault_key("k1");
    let start = || {
        let mut c = gatehouse(Some(&t.url));
        c.env("GATEHOUSE_VAULT_KEYS", &key);
        Served::start(c)
    };
    (start().await, start().await, key)
}

#[tokio::test]
async fn the_python_sdk_answers_sampling_and_elicitation_on_2026_07_28_with_each_retry_on_the_other_replica() {
    let log = std::env::temp_dir().join(format!("gatehouse-calls-{}.jsonl", uuid::Uuid::new_v4().simple()));
    let (_downstream, downstream_url) = common::conformance_downstream_logging(Some(&log)).await;
    let t = TestDb::new().await;
    let acme = tenant(&t, "acme", &downstream_url).await;
    let (a, b, _) = two_replicas(&t).await;
    let surface = format!("{}/t/acme/w/main/mcp", a.base);
    let (sampling, elicitation) = ("test_input_required_result_sampling", "test_input_required_result_elicitation");

    // A native pool: the downstream's tools themselves.
    let out = agent(&format!("{surface}/native"), &b.base, &acme, json!([[sampling, {}], [elicitation, {}]])).await;
    assert_eq!(out["protocol"], "2026-07-28", "{out}");
    assert_eq!(out["calls"][0], json!({ "isError": false, "text": ["Sampling answer: Paris, says the agent"] }), "{out}");
    assert_eq!(out["calls"][1], json!({ "isError": false, "text": ["Hello, Ann!"] }), "{out}");
    // Each call took two rounds, and each retry went to the other replica than its first round.
    let calls: Vec<i64> =
        out["replicas"].as_array().unwrap().iter().filter(|r| r[0] == "tools/call").map(|r| r[1].as_i64().unwrap()).collect();
    assert_eq!(calls.len(), 4, "{out}");
    assert!(calls[0] != calls[1] && calls[2] != calls[3], "{out}");
    assert_eq!(calls_of(&log, sampling), 2);

    // The six-tool surface: `call_tool` of the same tools, retried with the same address.
    let via = |tool: &str| json!(["call_tool", { "address": format!("conformance.{tool}"), "args": {} }]);
    let out = agent(&surface, &b.base, &acme, json!([via(sampling), via(elicitation)])).await;
    assert_eq!(out["calls"][0], json!({ "isError": false, "text": ["Sampling answer: Paris, says the agent"] }), "{out}");
    assert_eq!(out["calls"][1], json!({ "isError": false, "text": ["Hello, Ann!"] }), "{out}");
    assert_eq!(calls_of(&log, elicitation), 4);

    // A program cannot answer: its host call is refused in its own terms, not left waiting.
    let program = format!(
        "async () => {{ try {{ await gatehouse.call('conformance.{elicitation}', {{}}); return 'answered'; }} \
         catch (e) {{ return JSON.stringify(e); }} }}"
    );
    let out = agent(&surface, &b.base, &acme, json!([["execute_code", { "code": program }]])).await;
    let text = out["calls"][0]["text"][0].as_str().unwrap_or_default();
    assert!(text.contains("input_required_unsupported"), "{out}");

    assert_eq!(a.terminate().await, 0);
    assert_eq!(b.terminate().await, 0);
}

#[tokio::test]
async fn a_downstreams_sampling_request_reaches_a_handshake_era_agent_and_its_answer_crosses_replicas() {
    let log = std::env::temp_dir().join(format!("gatehouse-calls-{}.jsonl", uuid::Uuid::new_v4().simple()));
    let (_downstream, downstream_url) = common::conformance_downstream_logging(Some(&log)).await;
    let t = TestDb::new().await;
    let acme = tenant(&t, "acme", &downstream_url).await;
    let beta = tenant(&t, "beta", &downstream_url).await;
    let (a, b, _) = two_replicas(&t).await;
    let pool = |served: &Served, slug: &str| format!("{}/t/{slug}/w/main/mcp/native", served.base);
    let session = handshake(&pool(&a, "acme"), &acme, json!({ "sampling": {}, "elicitation": {} })).await;

    // Two calls open at once on replica A, each asking the agent for a completion.
    let call = |id: u64, prompt: &str| {
        json!({ "jsonrpc": "2.0", "id": id, "method": "tools/call",
                "params": { "name": "test_sampling", "arguments": { "prompt": prompt } } })
    };
    let mut one = on_session(&pool(&a, "acme"), &acme, &session, &call(1, "first")).send().await.unwrap();
    let mut two = on_session(&pool(&a, "acme"), &acme, &session, &call(2, "second")).send().await.unwrap();
    assert_eq!(one.headers()["content-type"], "text/event-stream");
    let (mut b1, mut b2) = (String::new(), String::new());
    let asked_one = next_message(&mut one, &mut b1).await;
    let asked_two = next_message(&mut two, &mut b2).await;
    assert_eq!(asked_one["method"], "sampling/createMessage", "{asked_one}");
    assert_eq!(asked_one["params"]["messages"][0]["content"]["text"], "first", "{asked_one}");
    assert_eq!(asked_two["params"]["messages"][0]["content"]["text"], "second", "{asked_two}");
    assert_ne!(asked_one["id"], asked_two["id"], "relayed ids never collide");
    let answer = |asked: &Value, text: &str| {
        json!({ "jsonrpc": "2.0", "id": asked["id"], "result": {
            "role": "assistant", "content": { "type": "text", "text": text }, "model": "m", "stopReason": "endTurn" } })
    };

    // Another tenant's caller cannot answer it (on either replica), nor can a forged id.
    let beta_session = handshake(&pool(&b, "beta"), &beta, json!({ "sampling": {} })).await;
    for served in [&a, &b] {
        let r = on_session(&pool(served, "beta"), &beta, &beta_session, &answer(&asked_one, "stolen")).send().await.unwrap();
        assert_eq!(r.status(), 404);
    }
    let mut forged = answer(&asked_one, "forged");
    forged["id"] = json!(format!("{}x", asked_one["id"].as_str().unwrap()));
    let r = on_session(&pool(&b, "acme"), &acme, &session, &forged).send().await.unwrap();
    assert_eq!(r.status(), 404);

    // The first answer goes to replica B (not the one holding the call), the second to A.
    let r = on_session(&pool(&b, "acme"), &acme, &session, &answer(&asked_one, "from B")).send().await.unwrap();
    assert_eq!(r.status(), 202);
    let r = on_session(&pool(&a, "acme"), &acme, &session, &answer(&asked_two, "from A")).send().await.unwrap();
    assert_eq!(r.status(), 202);
    let done_one = next_message(&mut one, &mut b1).await;
    let done_two = next_message(&mut two, &mut b2).await;
    assert_eq!(done_one["id"], 1, "{done_one}");
    assert_eq!(done_one["result"]["content"][0]["text"], "LLM response: from B", "{done_one}");
    assert_eq!(done_two["result"]["content"][0]["text"], "LLM response: from A", "{done_two}");
    // Answered once: a second answer finds nothing.
    let r = on_session(&pool(&a, "acme"), &acme, &session, &answer(&asked_two, "again")).send().await.unwrap();
    assert_eq!(r.status(), 404);

    // An agent that declared no sampling is never asked: the downstream is refused at once.
    let bare = handshake(&pool(&a, "acme"), &acme, json!({})).await;
    let r = on_session(&pool(&a, "acme"), &acme, &bare, &call(3, "nobody")).send().await.unwrap();
    let text = r.text().await.unwrap();
    assert!(!text.contains("sampling/createMessage"), "{text}");
    assert!(text.contains("\"isError\":true") || text.contains("\"error\""), "{text}");

    assert_eq!(a.terminate().await, 0);
    assert_eq!(b.terminate().await, 0);
}

/// The official Python SDK agent on the handshake era answers a downstream's sampling,
/// elicitation (form and URL mode) and `roots/list` during calls through a native pool and
/// `call_tool`, its HTTP requests
/// alternating between two replicas, so answers land on the replica not holding the call.
#[tokio::test]
async fn the_python_sdk_answers_sampling_and_elicitation_on_the_handshake_era_across_replicas() {
    let log = std::env::temp_dir().join(format!("gatehouse-calls-{}.jsonl", uuid::Uuid::new_v4().simple()));
    let (_downstream, downstream_url) = common::conformance_downstream_logging(Some(&log)).await;
    let t = TestDb::new().await;
    let acme = tenant(&t, "acme", &downstream_url).await;
    configure_reads(&t, &["test_sampling", "test_elicitation", "test_url_elicitation", "test_list_roots"]).await;
    let (a, b, _) = two_replicas(&t).await;
    let native = format!("{}/t/acme/w/main/mcp/native", a.base);
    let calls = json!([
        ["test_sampling", { "prompt": "What is the capital of France?" }],
        ["test_elicitation", { "message": "Who are you?" }],
        ["test_url_elicitation", {}],
        ["test_list_roots", {}],
    ]);
    let out = agent_in(&native, &b.base, &acme, None, calls).await;
    assert_eq!(out["protocol"], "2025-11-25", "{out}");
    assert_eq!(out["calls"][0]["text"][0], "LLM response: Paris, says the agent", "{out}");
    let elicited = out["calls"][1]["text"][0].as_str().unwrap_or_default();
    assert!(elicited.contains("action=accept") && elicited.contains("Ann"), "{out}");
    // URL-mode elicitation and roots/list go up and their answers down alike.
    assert_eq!(out["calls"][2]["text"][0], "URL elicitation: action=accept", "{out}");
    assert_eq!(out["calls"][3]["text"][0], "Roots: file:///work/agent", "{out}");
    // Some answer (a POST without a method) went to the other replica than the call before it.
    let seen = out["replicas"].as_array().unwrap();
    let crossed = seen.windows(2).any(|w| w[0][0] == "tools/call" && w[1][0].is_null() && w[0][1] != w[1][1]);
    assert!(crossed, "{out}");

    let surface = format!("{}/t/acme/w/main/mcp", a.base);
    let wrapped = json!([["call_tool", { "address": "conformance.test_sampling", "args": { "prompt": "Capital?" } }]]);
    let out = agent_in(&surface, &b.base, &acme, None, wrapped).await;
    assert_eq!(out["calls"][0]["text"][0], "LLM response: Paris, says the agent", "{out}");

    assert_eq!(a.terminate().await, 0);
    assert_eq!(b.terminate().await, 0);
}

/// Classifies these tools of acme/main's `conformance` connector as reads (for `call_tool`).
async fn configure_reads(t: &TestDb, tools: &[&str]) {
    let reads: serde_json::Map<String, Value> = tools.iter().map(|tool| (format!("conformance.{tool}"), json!("read"))).collect();
    let patch = json!({
        "pools": { "native": { "tools": ["conformance"], "native": true } },
        "classification": reads,
    });
    let file = std::env::temp_dir().join(format!("gatehouse-test-{}.json", uuid::Uuid::new_v4().simple()));
    std::fs::write(&file, patch.to_string()).unwrap();
    cli(&t.url, &["workspace", "configure", "--tenant", "acme", "--workspace", "main", "--file", file.to_str().unwrap()]).await;
}

/// A handshake-era agent is asked during a call that carries `_meta` (a progress token), and
/// during a native pool's `prompts/get` and `resources/read`: the official Python SDK agent
/// answers the downstream's sampling and elicitation, its HTTP requests alternating between two
/// replicas. (Before, such requests went to rmcp, whose stateless path cannot carry the
/// agent's answer, and the downstream was told -32601.)
#[tokio::test]
async fn a_handshake_era_agent_is_asked_during_calls_with_progress_tokens_prompts_and_reads() {
    let log = std::env::temp_dir().join(format!("gatehouse-calls-{}.jsonl", uuid::Uuid::new_v4().simple()));
    let (_downstream, downstream_url) = common::conformance_downstream_logging(Some(&log)).await;
    let t = TestDb::new().await;
    let acme = tenant(&t, "acme", &downstream_url).await;
    configure_reads(&t, &["test_sampling", "test_tool_with_progress"]).await;
    let (a, b, _) = two_replicas(&t).await;
    let native = format!("{}/t/acme/w/main/mcp/native", a.base);
    let steps = json!([[0.0, 100.0, "step 0"], [50.0, 100.0, "step 50"], [100.0, 100.0, "step 100"]]);
    let calls = json!([
        ["test_sampling", { "prompt": "What is the capital of France?" }, { "progress": true }],
        ["test_tool_with_progress", {}, { "progress": true }],
        ["@prompt", { "name": "test_prompt_with_sampling" }],
        ["@resource", { "uri": "test://asked/weather" }],
    ]);
    let out = agent_in(&native, &b.base, &acme, None, calls).await;
    assert_eq!(out["protocol"], "2025-11-25", "{out}");
    assert_eq!(out["calls"][0]["text"][0], "LLM response: Paris, says the agent", "{out}");
    assert_eq!(out["calls"][1]["progress"], steps, "{out}");
    assert_eq!(out["calls"][2]["prompt"], json!(["The agent's word: Paris, says the agent"]), "{out}");
    assert_eq!(out["calls"][3]["resource"], json!(["weather read by Ann"]), "{out}");

    let surface = format!("{}/t/acme/w/main/mcp", a.base);
    let wrapped = json!([
        ["call_tool", { "address": "conformance.test_sampling", "args": { "prompt": "Capital?" } }, { "progress": true }],
        ["call_tool", { "address": "conformance.test_tool_with_progress", "args": {} }, { "progress": true }],
    ]);
    let out = agent_in(&surface, &b.base, &acme, None, wrapped).await;
    assert_eq!(out["calls"][0]["text"][0], "LLM response: Paris, says the agent", "{out}");
    assert_eq!(out["calls"][1]["progress"], steps, "{out}");

    assert_eq!(a.terminate().await, 0);
    assert_eq!(b.terminate().await, 0);
}

/// On 2026-07-28 a native pool's `resources/read` may be answered with an `InputRequiredResult`
/// too: the official Python SDK agent fulfils it and retries on the other replica; a tampered
/// state is refused before anything reaches the downstream.
#[tokio::test]
async fn a_resource_read_asks_for_input_on_2026_07_28_and_the_retry_crosses_replicas() {
    let log = std::env::temp_dir().join(format!("gatehouse-calls-{}.jsonl", uuid::Uuid::new_v4().simple()));
    let (_downstream, downstream_url) = common::conformance_downstream_logging(Some(&log)).await;
    let t = TestDb::new().await;
    let acme = tenant(&t, "acme", &downstream_url).await;
    let (a, b, _) = two_replicas(&t).await;
    let native = format!("{}/t/acme/w/main/mcp/native", a.base);
    let out = agent(&native, &b.base, &acme, json!([["@resource", { "uri": "test://asked/weather" }]])).await;
    assert_eq!(out["calls"][0]["resource"], json!(["weather read by Ann"]), "{out}");
    let reads: Vec<i64> =
        out["replicas"].as_array().unwrap().iter().filter(|r| r[0] == "resources/read").map(|r| r[1].as_i64().unwrap()).collect();
    assert_eq!(reads.len(), 2, "{out}");
    assert_ne!(reads[0], reads[1], "the retry went to the other replica: {out}");
    let reads_of = |uri: &str| {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains("resources/read") && l.contains(uri))
            .count()
    };
    assert_eq!(reads_of("test://asked/weather"), 2);

    // A raw first round, then a retry with its state tampered: refused, nothing sent down.
    let uri = "test://asked/rain";
    let read = |extra: Value| {
        let mut params = json!({ "uri": uri, "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientInfo": { "name": "t", "version": "1" },
            "io.modelcontextprotocol/clientCapabilities": { "elicitation": {} }
        } });
        for (k, v) in extra.as_object().cloned().unwrap_or_default() {
            params[k] = v;
        }
        let body = json!({ "jsonrpc": "2.0", "id": 3, "method": "resources/read", "params": params });
        acme.headers(http().post(&native))
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2026-07-28")
            .header("mcp-method", "resources/read")
            .header("mcp-name", uri)
            .json(&body)
            .send()
    };
    let first: Value = read(json!({})).await.unwrap().json().await.unwrap();
    assert_eq!(first["result"]["resultType"], "input_required", "{first}");
    assert_eq!(first["result"]["inputRequests"]["reader"]["method"], "elicitation/create", "{first}");
    let sealed = first["result"]["requestState"].as_str().unwrap_or_default().to_owned();
    let mut tampered = sealed.clone().into_bytes();
    let last = tampered.len() - 1;
    tampered[last] = if tampered[last] == b'A' { b'B' } else { b'A' };
    let answer = json!({ "reader": { "action": "accept", "content": { "name": "Bo" } } });
    let tampered = json!({ "inputResponses": answer, "requestState": String::from_utf8(tampered).unwrap() });
    let body: Value = read(tampered).await.unwrap().json().await.unwrap();
    assert_eq!(body["error"]["data"]["code"], "request_state_invalid", "{body}");
    assert_eq!(reads_of(uri), 1, "a refused state must not reach the downstream");
    let body: Value = read(json!({ "inputResponses": answer, "requestState": sealed })).await.unwrap().json().await.unwrap();
    assert_eq!(body["result"]["contents"][0]["text"], "rain read by Bo", "{body}");

    assert_eq!(a.terminate().await, 0);
    assert_eq!(b.terminate().await, 0);
}

/// SEP-2243: a native pool checks a 2026-07-28 `tools/call`'s `Mcp-Param-*` headers against its
/// arguments for the downstream tool's `x-mcp-header` annotations (-32020, HTTP 400, nothing
/// sent down), and computes them for the downstream, so `call_tool` (whose own headers name
/// no such argument) reaches a downstream that checks them.
#[tokio::test]
async fn mcp_param_headers_are_checked_against_the_body_and_computed_for_the_downstream() {
    let log = std::env::temp_dir().join(format!("gatehouse-calls-{}.jsonl", uuid::Uuid::new_v4().simple()));
    let (_downstream, downstream_url) = common::conformance_downstream_logging(Some(&log)).await;
    let t = TestDb::new().await;
    let acme = tenant(&t, "acme", &downstream_url).await;
    configure_reads(&t, &["test_header_param"]).await;
    let (a, _b, _) = two_replicas(&t).await;
    let native = format!("{}/t/acme/w/main/mcp/native", a.base);
    let tool = "test_header_param";
    let send = |url: String, name: &'static str, arguments: Value, region: Option<&'static str>| {
        let body = json!({ "jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {
            "name": name, "arguments": arguments, "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientInfo": { "name": "t", "version": "1" },
                "io.modelcontextprotocol/clientCapabilities": {}
        } } });
        let mut r = acme
            .headers(http().post(url))
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2026-07-28")
            .header("mcp-method", "tools/call")
            .header("mcp-name", name);
        if let Some(region) = region {
            r = r.header("mcp-param-region", region);
        }
        async move {
            let r = r.json(&body).send().await.unwrap();
            (r.status().as_u16(), r.json::<Value>().await.unwrap())
        }
    };
    // Matching, Base64-wrapped: served.
    let (status, body) = send(native.clone(), tool, json!({ "region": "eu-west1" }), Some("=?base64?ZXUtd2VzdDE=?=")).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["result"]["content"][0]["text"], "region=eu-west1", "{body}");
    assert_eq!(calls_of(&log, tool), 1);
    // Mismatched, missing, or malformed Base64: -32020 with 400, and nothing reaches the downstream.
    for region in [Some("us-east1"), None, Some("=?base64?ZXUtd2VzdDE?=")] {
        let (status, body) = send(native.clone(), tool, json!({ "region": "eu-west1" }), region).await;
        assert_eq!((status, &body["error"]["code"]), (400, &json!(-32020)), "{region:?}: {body}");
    }
    assert_eq!(calls_of(&log, tool), 1, "a mismatched header must not reach the downstream");

    // The six-tool surface: the agent's call names `call_tool`; the downstream gets the header
    // its own tool's schema asks for (it refuses the call without it).
    let call = json!({ "address": format!("conformance.{tool}"), "args": { "region": "ap-south1" } });
    let (status, body) = send(format!("{}/t/acme/w/main/mcp", a.base), "call_tool", call, None).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["result"]["isError"], false, "{body}");
    assert_eq!(body["result"]["content"][0]["text"], "region=ap-south1", "{body}");
    assert_eq!(calls_of(&log, tool), 2);
    assert_eq!(params_of(&log, tool).last(), Some(&json!({ "mcp-param-region": "ap-south1" })));
    // A value that cannot travel bare goes down Base64-wrapped, and the downstream reads it back.
    let call = json!({ "address": format!("conformance.{tool}"), "args": { "region": "zürich" } });
    let (status, body) = send(format!("{}/t/acme/w/main/mcp", a.base), "call_tool", call, None).await;
    assert_eq!((status, &body["result"]["content"][0]["text"]), (200, &json!("region=zürich")), "{body}");
    assert_eq!(params_of(&log, tool).last(), Some(&json!({ "mcp-param-region": "=?base64?esO8cmljaA==?=" })));

    // The official Python SDK client in its 2026 mode computes the header from the pool's
    // tools/list and passes the gateway's check.
    let out = agent(&native, &a.base, &acme, json!([[tool, { "region": "sa-east1" }]])).await;
    assert_eq!(out["calls"][0], json!({ "isError": false, "text": ["region=sa-east1"] }), "{out}");
    assert_eq!(params_of(&log, tool).last(), Some(&json!({ "mcp-param-region": "sa-east1" })));
    assert_eq!(a.terminate().await, 0);
}

/// The `Mcp-Param-*` headers each `tools/call` of `tool` carried to the downstream, in order.
fn params_of(log: &PathBuf, tool: &str) -> Vec<Value> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|l| l["method"] == "tools/call" && l["name"] == tool)
        .map(|l| l["params"].clone())
        .collect()
}

/// Tasks (SEP-2663) are not relayed: a native pool declares no tasks extension (though its
/// downstream does), a 2026-07-28 agent that declares it still gets a plain result because the
/// downstream is not told, a downstream that answers with a task anyway is refused, and
/// `tasks/get`, `tasks/update`, `tasks/cancel` are not methods here.
#[tokio::test]
async fn no_task_ever_reaches_an_agent() {
    let log = std::env::temp_dir().join(format!("gatehouse-calls-{}.jsonl", uuid::Uuid::new_v4().simple()));
    let (_downstream, downstream_url) = common::conformance_downstream_logging(Some(&log)).await;
    let t = TestDb::new().await;
    let acme = tenant(&t, "acme", &downstream_url).await;
    configure_reads(&t, &["test_task_regardless"]).await;
    let (a, _b, _) = two_replicas(&t).await;
    let native = format!("{}/t/acme/w/main/mcp/native", a.base);
    let meta = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": { "name": "t", "version": "1" },
        "io.modelcontextprotocol/clientCapabilities": { "extensions": { "io.modelcontextprotocol/tasks": {} } }
    });
    let post = |url: String, method: &'static str, name: Option<&'static str>, mut params: Value| {
        params["_meta"] = meta.clone();
        let body = json!({ "jsonrpc": "2.0", "id": 4, "method": method, "params": params });
        let mut r = acme
            .headers(http().post(url))
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2026-07-28")
            .header("mcp-method", method);
        if let Some(name) = name {
            r = r.header("mcp-name", name);
        }
        async move {
            let r = r.json(&body).send().await.unwrap();
            (r.status().as_u16(), r.json::<Value>().await.unwrap())
        }
    };
    let call = |name: &'static str| json!({ "name": name, "arguments": {} });
    // The downstream itself answers a declaring client with a task (so the checks below can fail).
    let (_, direct) = post(downstream_url.clone(), "tools/call", Some("test_task_tool"), call("test_task_tool")).await;
    assert_eq!(direct["result"]["resultType"], "task", "{direct}");
    let (_, discovered) = post(downstream_url.clone(), "server/discover", None, json!({})).await;
    assert!(discovered["result"]["capabilities"]["extensions"]["io.modelcontextprotocol/tasks"].is_object(), "{discovered}");

    let (_, discovered) = post(native.clone(), "server/discover", None, json!({})).await;
    assert!(discovered["result"]["capabilities"].is_object(), "{discovered}");
    assert!(discovered["result"]["capabilities"].get("extensions").is_none(), "{discovered}");
    assert!(discovered["result"]["capabilities"].get("tasks").is_none(), "{discovered}");
    let (_, called) = post(native.clone(), "tools/call", Some("test_task_tool"), call("test_task_tool")).await;
    assert_eq!(called["result"]["resultType"], "complete", "{called}");
    assert_eq!(called["result"]["content"][0]["text"], "ran without a task", "{called}");
    assert!(called["result"].get("taskId").is_none(), "{called}");
    assert_eq!(calls_of(&log, "test_task_tool"), 2);
    // A downstream that answers with a task all the same: refused, never passed on.
    let (_, refused) = post(native.clone(), "tools/call", Some("test_task_regardless"), call("test_task_regardless")).await;
    assert_eq!(calls_of(&log, "test_task_regardless"), 1, "{refused}");
    assert!(refused["result"].get("taskId").is_none() && refused["result"]["resultType"] != "task", "{refused}");
    assert_eq!(refused["result"]["isError"], true, "{refused}");
    assert!(refused.to_string().contains("downstream_error") && refused.to_string().contains("does not relay"), "{refused}");
    println!("a native pool refuses a downstream's task: {refused}");
    // The same through the six-tool surface's `call_tool`.
    let surface = format!("{}/t/acme/w/main/mcp", a.base);
    let wrapped = json!({ "name": "call_tool", "arguments": { "address": "conformance.test_task_regardless", "args": {} } });
    let (_, refused) = post(surface, "tools/call", Some("call_tool"), wrapped).await;
    assert_eq!(refused["result"]["isError"], true, "{refused}");
    assert!(refused.to_string().contains("does not relay"), "{refused}");
    assert!(!refused.to_string().contains("task-1"), "{refused}");
    println!("call_tool refuses a downstream's task: {refused}");
    for (method, params) in [
        ("tasks/get", json!({ "taskId": "task-1" })),
        ("tasks/update", json!({ "taskId": "task-1", "inputResponses": {} })),
        ("tasks/cancel", json!({ "taskId": "task-1" })),
    ] {
        let (_, answer) = post(native.clone(), method, Some("task-1"), params).await;
        assert_eq!(answer["error"]["code"], -32601, "{method}: {answer}");
    }
    assert_eq!(a.terminate().await, 0);
}
