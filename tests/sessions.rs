//! Stateful downstream sessions, pooled (issue 19 item 6): a call that needs a session of its
//! own (its agent can be asked for sampling, elicitation or roots) takes one from the
//! replica's `deadpool` pool for its connector configuration and credential owner. The
//! downstream is the conformance downstream (official Python SDK), whose own log of every POST
//! and DELETE (with its `Mcp-Session-Id` and JSON-RPC method) is what these tests read.

mod common;

use std::{
    path::{Path, PathBuf},
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use common::{Machine, Served, TestDb, cli, gatehouse, handshake, next_message, on_session, provision};
use serde_json::{Value, json};

/// A tenant `acme` with a workspace `main`, the downstream as connector `conformance` and a
/// native pool over it; its machine credentials.
async fn tenant(t: &TestDb, downstream: &str) -> Machine {
    cli(&t.url, &["tenant", "create", "acme", "--name", "acme"]).await;
    cli(&t.url, &["workspace", "create", "--tenant", "acme", "main"]).await;
    common::add_remote_mcp(&t.url, "acme", "main", "conformance", downstream).await;
    configure(t, json!({ "pools": { "native": { "tools": ["conformance"], "native": true } } })).await;
    provision(&t.url, "acme").await
}

/// Applies a merge patch to `main`'s configuration with the CLI.
async fn configure(t: &TestDb, patch: Value) {
    let file = std::env::temp_dir().join(format!("gatehouse-test-{}.json", uuid::Uuid::new_v4().simple()));
    std::fs::write(&file, patch.to_string()).unwrap();
    cli(&t.url, &["workspace", "configure", "--tenant", "acme", "--workspace", "main", "--file", file.to_str().unwrap()]).await;
}

/// A replica with the vault (relayed requests are sealed with it) and these settings.
async fn replica(t: &TestDb, env: &[(&str, &str)]) -> Served {
    let mut c = gatehouse(Some(&t.url));
    c.env("GATEHOUSE_VAULT_KEYS", common::vault_key("k1"));
    c.envs(env.iter().copied());
    Served::start(c).await
}

fn call(id: u64, tool: &str, arguments: Value) -> Value {
    json!({ "jsonrpc": "2.0", "id": id, "method": "tools/call", "params": { "name": tool, "arguments": arguments } })
}

/// One call's answer: its result text.
async fn answer_text(r: reqwest::Response) -> String {
    let mut r = r;
    let message = next_message(&mut r, &mut String::new()).await;
    message["result"]["content"][0]["text"].as_str().unwrap_or_else(|| panic!("no text: {message}")).to_owned()
}

/// The downstream's log, one JSON object per request.
fn log_of(log: &Path) -> Vec<Value> {
    std::fs::read_to_string(log).unwrap_or_default().lines().filter_map(|l| serde_json::from_str(l).ok()).collect()
}

/// The session ids the downstream saw on JSON-RPC requests `rpc`, in order.
fn sessions_of(lines: &[Value], rpc: &str) -> Vec<String> {
    lines.iter().filter(|l| l["rpc"] == rpc).map(|l| l["session"].as_str().unwrap_or_default().to_owned()).collect()
}

fn new_log() -> PathBuf {
    std::env::temp_dir().join(format!("gatehouse-calls-{}.jsonl", uuid::Uuid::new_v4().simple()))
}

fn port_of(url: &str) -> u16 {
    url.trim_start_matches("http://127.0.0.1:").trim_end_matches("/mcp").parse().unwrap()
}

#[tokio::test]
async fn a_session_is_reused_and_a_restarted_downstream_gets_a_fresh_one_through_the_liveness_check() {
    let log = new_log();
    let (downstream, url) = common::conformance_downstream_logging(Some(&log)).await;
    let t = TestDb::new().await;
    let acme = tenant(&t, &url).await;
    // Every checkout pings (no trust window), so the restart is found by the liveness check.
    let a = replica(&t, &[("GATEHOUSE_DOWNSTREAM_SESSION_TRUST_MS", "0")]).await;
    let pool = format!("{}/t/acme/w/main/mcp/native", a.base);
    let agent = handshake(&pool, &acme, json!({ "sampling": {} })).await;

    // (a) Two calls that need a session: the same downstream session serves both.
    for id in 1..=2 {
        let r = on_session(&pool, &acme, &agent, &call(id, "test_simple_text", json!({}))).send().await.unwrap();
        assert_eq!(answer_text(r).await, "This is a simple text response for testing.");
    }
    let lines = log_of(&log);
    let calls = sessions_of(&lines, "tools/call");
    assert_eq!(calls.len(), 2, "{lines:?}");
    assert!(!calls[0].is_empty(), "the downstream assigned a session: {lines:?}");
    assert_eq!(calls[0], calls[1], "the second call reused the session: {lines:?}");
    assert_eq!(sessions_of(&lines, "initialize").len(), 1, "one handshake: {lines:?}");
    // Between the two, the pool checked the session with a ping on it.
    assert!(sessions_of(&lines, "ping").contains(&calls[0]), "{lines:?}");

    // (b) The downstream restarts on the same port: it no longer knows the session. The next
    // call's checkout pings, the new server refuses the old id, and a new session serves it.
    let old = calls[0].clone();
    drop(downstream);
    let port = port_of(&url);
    let gone = common::eventually(Duration::from_secs(10), || async move {
        tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_err()
    })
    .await;
    assert!(gone, "the first downstream stopped");
    let before = log_of(&log).len();
    let (_downstream, _) = common::conformance_downstream_on(port, Some(&log)).await;
    let r = on_session(&pool, &acme, &agent, &call(3, "test_simple_text", json!({}))).send().await.unwrap();
    assert_eq!(answer_text(r).await, "This is a simple text response for testing.", "not an error");
    let after: Vec<Value> = log_of(&log).split_off(before);
    let calls = sessions_of(&after, "tools/call");
    assert_eq!(calls.len(), 1, "sent once, on a live session: {after:?}");
    assert_ne!(calls[0], old, "{after:?}");
    assert!(!calls[0].is_empty(), "{after:?}");
    assert_eq!(sessions_of(&after, "ping").first(), Some(&old), "the liveness check found the old session gone: {after:?}");
    assert_eq!(sessions_of(&after, "initialize").len(), 1, "{after:?}");
    assert_eq!(a.terminate().await, 0);
}

#[tokio::test]
async fn a_configuration_change_deletes_the_old_configurations_sessions() {
    let log = new_log();
    let (_downstream, url) = common::conformance_downstream_logging(Some(&log)).await;
    let t = TestDb::new().await;
    let acme = tenant(&t, &url).await;
    let a = replica(&t, &[]).await;
    let pool = format!("{}/t/acme/w/main/mcp/native", a.base);
    let agent = handshake(&pool, &acme, json!({ "sampling": {} })).await;
    let r = on_session(&pool, &acme, &agent, &call(1, "test_simple_text", json!({}))).send().await.unwrap();
    answer_text(r).await;
    let old = sessions_of(&log_of(&log), "tools/call")[0].clone();
    assert!(!old.is_empty());
    assert!(!log_of(&log).iter().any(|l| l["http"] == "DELETE"), "nothing deleted yet");

    // The connector's configuration changes (its deadline, with the `connector` commands): the
    // replica learns it on the next request to the workspace and closes the old
    // configuration's pool.
    // (The pool names the connector, so it is set aside while the connector is replaced.)
    configure(&t, json!({ "pools": {} })).await;
    cli(&t.url, &["connector", "remove", "--tenant", "acme", "--workspace", "main", "conformance"]).await;
    let file = std::env::temp_dir().join(format!("gatehouse-test-{}.json", uuid::Uuid::new_v4().simple()));
    std::fs::write(&file, json!({ "timeout_ms": 20000 }).to_string()).unwrap();
    let add = ["connector", "add", "--tenant", "acme", "--workspace", "main", "--id", "conformance", "--kind", "remote_mcp"];
    cli(&t.url, &[&add[..], &["--url", &url, "--config", file.to_str().unwrap()]].concat()).await;
    configure(&t, json!({ "pools": { "native": { "tools": ["conformance"], "native": true } } })).await;
    let r = on_session(&pool, &acme, &agent, &call(2, "test_simple_text", json!({}))).send().await.unwrap();
    answer_text(r).await;
    let deleted = common::eventually(Duration::from_secs(10), || {
        let (log, old) = (log.clone(), old.clone());
        async move { log_of(&log).iter().any(|l| l["http"] == "DELETE" && l["session"] == old.as_str()) }
    })
    .await;
    assert!(deleted, "the downstream saw a DELETE of {old}: {:?}", log_of(&log));
    let calls = sessions_of(&log_of(&log), "tools/call");
    assert_ne!(calls[1], old, "the new configuration has a session of its own");
    assert_eq!(a.terminate().await, 0);
}

#[tokio::test]
async fn concurrent_calls_that_need_a_session_never_open_more_than_the_pool_bound() {
    const BOUND: usize = 2;
    const CALLS: u64 = 5;
    let log = new_log();
    let (_downstream, url) = common::conformance_downstream_logging(Some(&log)).await;
    let t = TestDb::new().await;
    let acme = tenant(&t, &url).await;
    let bound = BOUND.to_string();
    let a = replica(&t, &[("GATEHOUSE_DOWNSTREAM_SESSIONS_PER_POOL", bound.as_str())]).await;
    let pool = format!("{}/t/acme/w/main/mcp/native", a.base);
    let agent = handshake(&pool, &acme, json!({ "sampling": {} })).await;

    // Each call asks the agent for a completion and holds its session until answered; the
    // answers wait for the gate.
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let asked = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for id in 1..=CALLS {
        let (pool, acme, agent, gate, asked) = (pool.clone(), acme.clone(), agent.clone(), gate.clone(), asked.clone());
        tasks.push(tokio::spawn(async move {
            let body = call(id, "test_sampling", json!({ "prompt": format!("p{id}") }));
            let mut r = on_session(&pool, &acme, &agent, &body).send().await.unwrap();
            let mut buffer = String::new();
            let ask = next_message(&mut r, &mut buffer).await;
            assert_eq!(ask["method"], "sampling/createMessage", "{ask}");
            asked.fetch_add(1, Ordering::SeqCst);
            gate.acquire().await.unwrap().forget();
            let answer = json!({ "jsonrpc": "2.0", "id": ask["id"], "result": {
                "role": "assistant", "content": { "type": "text", "text": format!("a{id}") }, "model": "m", "stopReason": "endTurn" } });
            let posted = on_session(&pool, &acme, &agent, &answer).send().await.unwrap();
            assert_eq!(posted.status(), 202);
            let done = next_message(&mut r, &mut buffer).await;
            assert_eq!(done["result"]["content"][0]["text"], format!("LLM response: a{id}"), "{done}");
        }));
    }
    let held = common::eventually(Duration::from_secs(30), || {
        let asked = asked.clone();
        async move { asked.load(Ordering::SeqCst) >= BOUND }
    })
    .await;
    assert!(held, "the first calls reached the agent");
    // With every session of the pool held, the other calls have not reached the downstream.
    let lines = log_of(&log);
    assert_eq!(sessions_of(&lines, "tools/call").len(), BOUND, "{lines:?}");
    assert_eq!(asked.load(Ordering::SeqCst), BOUND);
    gate.add_permits(CALLS as usize);
    for task in tasks {
        task.await.unwrap();
    }
    let lines = log_of(&log);
    let calls = sessions_of(&lines, "tools/call");
    assert_eq!(calls.len(), CALLS as usize, "{lines:?}");
    let mut distinct = calls.clone();
    distinct.sort();
    distinct.dedup();
    assert_eq!(distinct.len(), BOUND, "every call on one of the pool's sessions: {lines:?}");
    assert!(sessions_of(&lines, "initialize").len() <= BOUND, "never more handshakes than the bound: {lines:?}");
    assert!(!lines.iter().any(|l| l["http"] == "DELETE"), "no session was given up: {lines:?}");
    assert_eq!(a.terminate().await, 0);
}
