//! Hostile downstreams (tests/common/hostile.rs): a server that resets mid-answer, streams
//! forever, sends 100 MB, sends invalid JSON or UTF-8, answers another request's id, answers
//! at one byte a second, redirects to another host, lists 100,000 tools or 1 MB descriptions,
//! or advertises a schema no validator accepts. Each call gets a typed error within the
//! connector's deadline, the replica's memory stays under a cap while it plays, and another
//! tenant's calls running at the same time all succeed.

mod common;

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use common::{Machine, Served, TestDb, cli, gatehouse, hostile::Hostile, json_path, mcp_tool, provision};
use serde_json::{Value, json};

/// The victims' connector deadline.
const TIMEOUT_MS: u64 = 3000;

/// A scenario's connector deadline: the 100,000-tool catalog takes the test peer itself
/// (a debug build, on a loaded machine) seconds to write, and what is tested there is the
/// refusal of the catalog, not the deadline.
fn deadline_ms(scenario: &str) -> u64 {
    if scenario == "many_tools" { 20_000 } else { TIMEOUT_MS }
}

/// The replica's resident memory, MiB.
fn rss_mib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        .unwrap_or(0)
        / 1024
}

async fn add(t: &TestDb, tenant: &str, id: &str, url: &str, timeout_ms: u64) {
    let config = json_path(&json!({ "timeout_ms": timeout_ms }));
    let args = ["connector", "add", "--tenant", tenant, "--workspace", "main", "--id", id, "--kind", "remote_mcp", "--url", url];
    cli(&t.url, &[&args[..], &["--config", &config]].concat()).await;
}

/// The address each scenario is called at, and the error code it must answer.
fn expected(scenario: &str) -> (&'static str, &'static str) {
    match scenario {
        // Never answers within the deadline.
        "endless_sse" | "slow" => ("t", "timeout"),
        // Refused by size: the catalog (too many tools, a description too large), the
        // response (over 16 MiB) or one event of the stream (over 16 MiB).
        "many_tools" => ("t5", "downstream_error"),
        "big_descriptions" => ("t0", "downstream_error"),
        "huge" | "endless_event" => ("t", "downstream_error"),
        // A tool whose schema does not compile is not called.
        "bad_schema" => ("t", "downstream_error"),
        // A broken answer or a redirect (never followed): the server is treated as out of
        // order for now, retryable like a lost connection.
        _ => ("t", "unavailable"),
    }
}

#[tokio::test]
async fn hostile_downstreams_get_typed_errors_in_bounded_memory_without_touching_other_tenants() {
    let hostile = Hostile::start().await;
    let t = TestDb::new().await;
    for tenant in ["victim", "bystander"] {
        cli(&t.url, &["tenant", "create", tenant, "--name", tenant]).await;
        cli(&t.url, &["workspace", "create", "--tenant", tenant, "main"]).await;
    }
    for scenario in common::hostile::SCENARIOS {
        add(&t, "victim", scenario, &hostile.url(scenario), deadline_ms(scenario)).await;
    }
    add(&t, "bystander", "ok", &hostile.url("ok"), 10_000).await;
    let victim = provision(&t.url, "victim").await;
    let bystander = provision(&t.url, "bystander").await;
    let served = Served::start(gatehouse(Some(&t.url))).await;
    let pid = served.child.id().unwrap();
    let victim_url = format!("{}/t/victim/w/main/mcp", served.base);
    let bystander_url = format!("{}/t/bystander/w/main/mcp", served.base);

    // Warm up: the bystander's catalog, then the resting memory.
    let (err, body, _) =
        mcp_tool(&bystander_url, &bystander, "call_tool", json!({ "address": "ok.echo", "args": { "message": "hi" } })).await;
    assert!(!err, "{body}");
    let resting = rss_mib(pid);
    // Buffering the 100 MB body, or the 100,000-tool catalog as values, would pass this.
    let cap = resting + 64;

    // The bystander calls all along; every one of its calls must succeed.
    let stop = Arc::new(AtomicBool::new(false));
    let (done, failed) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let load = {
        let (stop, done, failed, url, m) = (stop.clone(), done.clone(), failed.clone(), bystander_url.clone(), bystander.clone());
        tokio::spawn(async move { bystander_load(&url, &m, &stop, &done, &failed).await })
    };
    let peak = Arc::new(AtomicUsize::new(0));
    let sampler = {
        let (stop, peak) = (stop.clone(), peak.clone());
        tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                peak.fetch_max(rss_mib(pid) as usize, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
    };

    let (mut report, mut wrong) = (Vec::new(), Vec::new());
    for scenario in common::hostile::SCENARIOS {
        peak.store(0, Ordering::Relaxed);
        let (tool, code) = expected(scenario);
        let started = Instant::now();
        let body = victim_call(&victim_url, &victim, &format!("{scenario}.{tool}")).await;
        let took = started.elapsed();
        let seen = peak.load(Ordering::Relaxed) as u64;
        report.push(format!(
            "{scenario}: {} in {:.2} s, peak RSS {seen} MiB (cap {cap}): {}",
            body["error"]["code"],
            took.as_secs_f64(),
            body["error"]["message"]
        ));
        if body["error"]["code"] != code {
            wrong.push(format!("{scenario}: expected {code}, got {body}"));
        }
        if took >= Duration::from_millis(deadline_ms(scenario)) + Duration::from_secs(5) {
            wrong.push(format!("{scenario} did not answer within its deadline: {took:?}"));
        }
        if seen > cap {
            wrong.push(format!("{scenario}: the replica's RSS reached {seen} MiB (resting {resting}, cap {cap})"));
        }
    }
    assert!(wrong.is_empty(), "{}\n\nall:\n{}", wrong.join("\n"), report.join("\n"));
    stop.store(true, Ordering::Relaxed);
    load.await.unwrap();
    sampler.await.unwrap();
    println!("{}", report.join("\n"));
    let (done, failed) = (done.load(Ordering::Relaxed), failed.load(Ordering::Relaxed));
    println!("bystander: {done} calls, {failed} failed");
    assert!(done > 0 && failed == 0, "the other tenant's calls all succeed: {done} calls, {failed} failed");
    assert_eq!(hostile.redirected.load(Ordering::SeqCst), 0, "a redirect to another host is never followed");
    // The replica is still whole.
    let (err, body, _) =
        mcp_tool(&bystander_url, &bystander, "call_tool", json!({ "address": "ok.echo", "args": { "message": "after" } })).await;
    assert!(!err, "{body}");
}

/// The victim's call; the error the gateway answered (a tool error result), or a stand-in
/// error naming the success that should not have happened.
async fn victim_call(url: &str, m: &Machine, address: &str) -> Value {
    let (err, body, raw) = mcp_tool(url, m, "call_tool", json!({ "address": address, "args": {} })).await;
    if err { body } else { json!({ "error": { "code": "(none: the call succeeded)", "message": raw } }) }
}

async fn bystander_load(url: &str, m: &Machine, stop: &AtomicBool, done: &AtomicUsize, failed: &AtomicUsize) {
    while !stop.load(Ordering::Relaxed) {
        let (err, body, _) = mcp_tool(url, m, "call_tool", json!({ "address": "ok.echo", "args": { "message": "hi" } })).await;
        if err {
            eprintln!("bystander call failed: {body}");
            failed.fetch_add(1, Ordering::Relaxed);
        }
        done.fetch_add(1, Ordering::Relaxed);
    }
}
