//! Durable quotas (issue 23 item 2), across several `gatehouse serve` processes on one
//! database, against a real HTTP API downstream (an `http_api` connector) that counts what
//! reaches it:
//! - three replicas and 64 concurrent callers against one rate limit: the ledger admits at most
//!   the limit in every window, exactly what reached the downstream, over many windows;
//! - separate budgets for writes, refused as `rate_limited` with `retryAfterMs`, named in
//!   activity; on 2026-07-28 (the official Python SDK) as the JSON-RPC error -32029;
//! - concurrency: never more calls in flight at the downstream than the limit;
//! - a replica killed mid-window loses at most its slice of the budget;
//! - the ledger unreachable: a fail-closed limit refuses once its slice is spent, a fail-open
//!   one admits; the database gone: every call is refused, and nothing is over-granted.

mod common;

use std::{
    sync::{
        Arc, Mutex,
        atomic::{AtomicI64, AtomicU64, Ordering},
    },
    time::Duration,
};

use common::downstream::platform_rows;
use common::{DbGate, Machine, Served, TestDb, cli, gatehouse, mcp_tool_with, provision};
use gatehouse::config::Secret;
use serde_json::{Value, json};
use sqlx::Executor;

/// What reached the downstream.
#[derive(Default)]
struct Seen {
    /// Calls per path.
    hits: Mutex<std::collections::HashMap<String, u64>>,
    in_flight: AtomicI64,
    max_in_flight: AtomicI64,
    total: AtomicU64,
}

impl Seen {
    fn hits(&self, path: &str) -> u64 {
        self.hits.lock().unwrap().get(path).copied().unwrap_or(0)
    }
}

/// An HTTP API on loopback: `GET /hit` and `/hit2` answer at once, `GET /slow` after 300 ms,
/// `POST /put` is a write; it counts every call and the most in flight at once.
async fn api() -> (String, Arc<Seen>) {
    use axum::extract::Request;
    let seen = Arc::new(Seen::default());
    let s = seen.clone();
    let app = axum::Router::new().fallback(move |request: Request| {
        let s = s.clone();
        async move {
            let path = request.uri().path().trim_start_matches("/v1").to_owned();
            let now = s.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
            s.max_in_flight.fetch_max(now, Ordering::SeqCst);
            if path == "/slow" {
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
            *s.hits.lock().unwrap().entry(path.clone()).or_default() += 1;
            s.total.fetch_add(1, Ordering::SeqCst);
            s.in_flight.fetch_sub(1, Ordering::SeqCst);
            axum::Json(json!({ "ok": path }))
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}/v1", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (base, seen)
}

fn connector(base: &str) -> Value {
    let none = json!({ "type": "object", "additionalProperties": false, "properties": {} });
    let read = |name: &str| {
        json!({ "name": name, "description": format!("Reads {name}"), "method": "GET", "path": format!("/{name}"),
                "read_only": true, "input_schema": none })
    };
    json!({ "base_url": base, "tools": [
        read("hit"), read("hit2"), read("slow"),
        { "name": "put", "description": "Writes", "method": "POST", "path": "/put", "input_schema": none },
    ] })
}

struct Setup {
    t: TestDb,
    m: Machine,
    seen: Arc<Seen>,
}

async fn setup_on(t: TestDb) -> Setup {
    cli(&t.url, &["tenant", "create", "acme", "--name", "Acme"]).await;
    cli(&t.url, &["workspace", "create", "--tenant", "acme", "main"]).await;
    let (base, seen) = api().await;
    let file = common::json_path(&connector(&base));
    let args = ["connector", "add", "--tenant", "acme", "--workspace", "main", "--id", "api", "--kind", "http_api"];
    cli(&t.url, &[&args[..], &["--config", &file]].concat()).await;
    let m = provision(&t.url, "acme").await;
    Setup { t, m, seen }
}

async fn setup() -> Setup {
    setup_on(TestDb::new().await).await
}

/// `gatehouse quota add` with the given flags; the limit's id.
async fn limit(url: &Secret, name: &str, flags: &[&str]) -> String {
    cli(url, &[&["quota", "add", "--tenant", "acme", "--name", name][..], flags].concat()).await[0].clone()
}

fn gw(served: &Served) -> String {
    format!("{}/t/acme/w/main/mcp", served.base)
}

/// One call through `call_tool` (a write through `call_destructive_tool`): `Ok` or the error
/// object of a refusal.
async fn call(url: &str, m: &Machine, tool: &str) -> Result<(), Value> {
    call_with(&common::http(), url, m, tool).await
}

/// [`call`] through `client`: the many callers share one client (building one per call costs
/// more than the call).
async fn call_with(client: &reqwest::Client, url: &str, m: &Machine, tool: &str) -> Result<(), Value> {
    let name = if tool == "put" { "call_destructive_tool" } else { "call_tool" };
    let (err, body, _) = mcp_tool_with(client, url, m, name, json!({ "address": format!("api.{tool}"), "args": {} })).await;
    if err { Err(body["error"].clone()) } else { Ok(()) }
}

fn assert_rate_limited(error: &Value, limit: &str) {
    assert_eq!(error["code"], "rate_limited", "{error}");
    assert_eq!(error["limit"], limit, "{error}");
    assert!(error["retryAfterMs"].as_u64().is_some_and(|ms| ms >= 1), "{error}");
}

#[tokio::test]
async fn three_replicas_and_64_callers_never_get_more_than_the_limit_in_any_window() {
    let s = setup().await;
    // 30 reads per 2-second window, for the whole tenant.
    limit(
        &s.t.url,
        "reads",
        &["--per", "tenant", "--connector", "api", "--tool", "hit", "--requests", "30", "--window-seconds", "2"],
    )
    .await;
    let replicas = [
        Served::start(gatehouse(Some(&s.t.url))).await,
        Served::start(gatehouse(Some(&s.t.url))).await,
        Served::start(gatehouse(Some(&s.t.url))).await,
    ];
    let urls: Vec<String> = replicas.iter().map(gw).collect();
    let admitted = Arc::new(AtomicU64::new(0));
    let refused = Arc::new(AtomicU64::new(0));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(12);
    let mut callers = Vec::new();
    let client = common::http();
    for i in 0..64 {
        let (url, m, admitted, refused) = (urls[i % 3].clone(), s.m.clone(), admitted.clone(), refused.clone());
        let client = client.clone();
        callers.push(tokio::spawn(async move {
            while tokio::time::Instant::now() < deadline {
                match call_with(&client, &url, &m, "hit").await {
                    Ok(()) => admitted.fetch_add(1, Ordering::SeqCst),
                    Err(error) => {
                        assert_rate_limited(&error, "reads");
                        refused.fetch_add(1, Ordering::SeqCst)
                    }
                };
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }));
    }
    for c in callers {
        c.await.unwrap();
    }
    // Stopped gracefully, each replica settles its windows (what it admitted, what it holds).
    for r in replicas {
        assert_eq!(r.terminate().await, 0);
    }
    let admitted = admitted.load(Ordering::SeqCst);
    assert_eq!(s.seen.hits("/hit"), admitted, "every admitted call reached the downstream, and nothing else");
    assert!(refused.load(Ordering::SeqCst) > 0, "the callers asked for more than the limit");
    let windows: Vec<(i64, i32, i32, i32, i32)> = platform_rows(
        &s.t,
        "SELECT window_no, budget, granted, used, refused FROM quota_windows WHERE kind = 'rate' ORDER BY window_no",
    )
    .await;
    assert!(windows.len() >= 5, "the run spanned many windows: {windows:?}");
    for (no, budget, granted, used, _) in &windows {
        assert_eq!(*budget, 30);
        assert!(*used <= 30 && *granted <= 30, "window {no}: {used} admitted, {granted} granted: over the limit");
    }
    let used: i64 = windows.iter().map(|w| i64::from(w.3)).sum();
    assert_eq!(used as u64, admitted, "the ledger's admissions are exactly the calls the downstream saw: {windows:?}");
    // Under steady load the whole budget is spent in the windows the run covered end to end.
    let full = windows.iter().filter(|w| w.3 == 30).count();
    assert!(full >= 3, "the limit was reached exactly in most windows: {windows:?}");
}

#[tokio::test]
async fn writes_have_their_own_budget_refused_as_rate_limited_and_as_32029_on_2026() {
    let s = setup().await;
    limit(&s.t.url, "writes", &["--per", "token", "--class", "write", "--daily", "5"]).await;
    limit(&s.t.url, "reads", &["--per", "token", "--class", "read", "--daily", "1000"]).await;
    let served = Served::start(gatehouse(Some(&s.t.url))).await;
    let url = gw(&served);
    let mut outcomes = Vec::new();
    for _ in 0..8 {
        outcomes.push(call(&url, &s.m, "put").await);
    }
    assert!(outcomes[..5].iter().all(Result::is_ok), "{outcomes:?}");
    for refused in &outcomes[5..] {
        assert_rate_limited(refused.as_ref().unwrap_err(), "writes");
    }
    assert_eq!(s.seen.hits("/put"), 5);
    // Reads count against their own budget.
    for _ in 0..10 {
        call(&url, &s.m, "hit").await.unwrap();
    }

    // The official Python SDK on 2026-07-28: the refusal is the JSON-RPC error -32029.
    let calls = json!([["call_destructive_tool", { "address": "api.put", "args": {} }], ["call_tool", { "address": "api.hit", "args": {} }]]);
    let out = common::python_agent_in(&url, &s.m, Some("2026-07-28"), calls).await;
    assert_eq!(out["protocol"], "2026-07-28", "{out}");
    let error = &out["calls"][0]["error"];
    assert_eq!(error["code"], -32029, "{out}");
    assert_eq!(error["data"]["code"], "rate_limited", "{out}");
    assert!(error["data"]["retryAfterMs"].as_u64().is_some_and(|ms| ms >= 1), "{out}");
    assert_eq!(out["calls"][1]["isError"], false, "{out}");
    assert_eq!(s.seen.hits("/put"), 5, "nothing refused reached the downstream");

    // Activity names the limit of each refusal; the ledger reports the usage.
    let rows = || {
        platform_rows::<(String, Option<String>)>(
            &s.t,
            "SELECT coalesce(error_code, 'ok'), quota FROM activity WHERE tool = 'put'",
        )
    };
    assert!(common::eventually(Duration::from_secs(10), || async { rows().await.len() == 9 }).await);
    let refused: Vec<_> = rows().await.into_iter().filter(|r| r.0 == "rate_limited").collect();
    assert_eq!(refused.len(), 4);
    assert!(refused.iter().all(|r| r.1.as_deref() == Some("writes")), "{refused:?}");
    assert_eq!(served.terminate().await, 0);
    let usage: Vec<(String, i32, i32)> = platform_rows(
        &s.t,
        "SELECT l.name, w.used, w.refused FROM quota_windows w JOIN quota_limits l ON l.id = w.limit_id ORDER BY l.name",
    )
    .await;
    assert_eq!(usage, [("reads".to_owned(), 11, 0), ("writes".to_owned(), 5, 4)]);
    // A per-token window's subject names the caller as its activity rows do: the token's kind
    // and id (the text is made only when a limit counts per token).
    let subjects: Vec<(String,)> = platform_rows(&s.t, "SELECT DISTINCT subject FROM quota_windows").await;
    let callers: Vec<(String,)> =
        platform_rows(&s.t, "SELECT DISTINCT 'token:' || actor_kind || ':' || actor_id FROM activity").await;
    assert_eq!(subjects, callers);
    assert_eq!(subjects.len(), 1, "{subjects:?}");
    assert!(subjects[0].0.starts_with("token:") && subjects[0].0.ends_with(&s.m.token_id), "{subjects:?}");
}

#[tokio::test]
async fn concurrency_never_exceeds_the_limit_at_the_downstream() {
    let s = setup().await;
    limit(&s.t.url, "slow", &["--per", "tenant", "--connector", "api", "--tool", "slow", "--concurrency", "4"]).await;
    let replicas = [
        Served::start(gatehouse(Some(&s.t.url))).await,
        Served::start(gatehouse(Some(&s.t.url))).await,
        Served::start(gatehouse(Some(&s.t.url))).await,
    ];
    let urls: Vec<String> = replicas.iter().map(gw).collect();
    let (ok, busy) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let mut callers = Vec::new();
    let client = common::http();
    for i in 0..24 {
        let (url, m, ok, busy) = (urls[i % 3].clone(), s.m.clone(), ok.clone(), busy.clone());
        let client = client.clone();
        callers.push(tokio::spawn(async move {
            for _ in 0..6 {
                match call_with(&client, &url, &m, "slow").await {
                    Ok(()) => ok.fetch_add(1, Ordering::SeqCst),
                    Err(error) => {
                        assert_rate_limited(&error, "slow");
                        busy.fetch_add(1, Ordering::SeqCst)
                    }
                };
            }
        }));
    }
    for c in callers {
        c.await.unwrap();
    }
    let max = s.seen.max_in_flight.load(Ordering::SeqCst);
    assert!(max <= 4, "{max} calls in flight at the downstream; the limit is 4");
    assert!(ok.load(Ordering::SeqCst) >= 4 && busy.load(Ordering::SeqCst) > 0, "both admitted and refused calls");
    assert_eq!(s.seen.hits("/slow"), ok.load(Ordering::SeqCst));
    let held: Vec<(i64,)> =
        platform_rows(&s.t, "SELECT coalesce(sum(held), 0)::bigint FROM quota_slots WHERE expires_at > clock_timestamp()").await;
    assert!(held[0].0 <= 4, "{held:?}");
    for r in replicas {
        assert_eq!(r.terminate().await, 0);
    }
}

#[tokio::test]
async fn a_replica_killed_mid_window_loses_at_most_its_slice() {
    let s = setup().await;
    // A daily budget of 96: each lease is a sixteenth (6).
    limit(&s.t.url, "daily", &["--per", "tenant", "--connector", "api", "--daily", "96"]).await;
    let mut doomed = Served::start(gatehouse(Some(&s.t.url))).await;
    let (b, c) = (Served::start(gatehouse(Some(&s.t.url))).await, Served::start(gatehouse(Some(&s.t.url))).await);
    let urls = [gw(&doomed), gw(&b), gw(&c)];
    for i in 0..31 {
        call(&urls[i % 3], &s.m, "hit").await.unwrap();
    }
    // The doomed replica admitted 11 of those and holds the rest of a slice it leased.
    doomed.child.start_kill().unwrap();
    doomed.child.wait().await.unwrap();
    let mut admitted = 31;
    let mut refusals = 0;
    let mut round = 0;
    while refusals < 20 {
        match call(&urls[1 + round % 2], &s.m, "hit").await {
            Ok(()) => {
                admitted += 1;
                refusals = 0;
            }
            Err(error) => {
                assert_rate_limited(&error, "daily");
                refusals += 1;
                // A slice the other replica left idle comes back after a second.
                if refusals % 10 == 0 {
                    tokio::time::sleep(Duration::from_millis(1_500)).await;
                }
            }
        }
        round += 1;
        assert!(round < 1_000, "the budget never ran out");
    }
    assert_eq!(s.seen.hits("/hit"), admitted);
    assert!(admitted <= 96, "{admitted} admitted of a budget of 96");
    assert!(admitted >= 96 - 6, "{admitted} admitted: the dead replica lost more than its slice");
    let granted: Vec<(i32,)> = platform_rows(&s.t, "SELECT granted FROM quota_windows").await;
    assert!(granted.iter().all(|g| g.0 <= 96), "{granted:?}");
    drop(doomed);
    assert_eq!(b.terminate().await, 0);
    assert_eq!(c.terminate().await, 0);
}

#[tokio::test]
async fn an_unreachable_ledger_follows_each_limits_fail_setting_and_a_lost_database_refuses_everything() {
    let s = setup_on(TestDb::new().await).await;
    // `hit`: fail closed (the default); `hit2`: fail open. Slices of 62 of 1000.
    limit(&s.t.url, "closed", &["--per", "tenant", "--connector", "api", "--tool", "hit", "--daily", "1000"]).await;
    limit(&s.t.url, "open", &["--per", "tenant", "--connector", "api", "--tool", "hit2", "--daily", "1000", "--fail-open"]).await;
    let mut url = reqwest::Url::parse(s.t.url.expose()).unwrap();
    let mut gate = DbGate::new(url.port().unwrap()).await;
    url.set_port(Some(gate.port)).unwrap();
    let via = Secret::new(url.to_string());
    let served = Served::start(gatehouse(Some(&via))).await;
    let gw = gw(&served);
    call(&gw, &s.m, "hit").await.unwrap();
    call(&gw, &s.m, "hit2").await.unwrap();

    // The ledger's rows locked by another transaction: a lease waits past its deadline.
    let mut locker = s.t.owner_conn().await;
    locker.execute("SELECT set_config('gatehouse.platform', 'on', false)").await.unwrap();
    locker.execute("BEGIN").await.unwrap();
    locker.execute("SELECT * FROM quota_windows FOR UPDATE").await.unwrap();
    let mut closed = Vec::new();
    for _ in 0..70 {
        closed.push(call(&gw, &s.m, "hit").await);
    }
    // What is left of the slice leased before is spent first (a slice idle for a second goes
    // back to the ledger, so on a slow machine nothing may be left), then the calls are refused.
    let spent = closed.iter().take_while(|r| r.is_ok()).count();
    assert!(spent <= 61, "more than the slice: {closed:?}");
    for refused in &closed[spent..] {
        let error = refused.as_ref().unwrap_err();
        assert_eq!(error["code"], "quota_unavailable", "{error}");
        assert_eq!(error["limit"], "closed", "{error}");
    }
    for _ in 0..70 {
        call(&gw, &s.m, "hit2").await.expect("a fail-open limit admits while its ledger is unreachable");
    }
    locker.execute("ROLLBACK").await.unwrap();
    assert_eq!(s.seen.hits("/hit"), 1 + spent as u64);
    assert_eq!(s.seen.hits("/hit2"), 71);
    let uncounted = common::metric(&served, "gatehouse_quota_events_total{event=\"admitted_open\"}").await;
    assert!((9..=70).contains(&uncounted), "{uncounted} admitted uncounted");
    call(&gw, &s.m, "hit").await.expect("the ledger reachable again, the closed limit leases again");
    // The counts the lock held up reach the ledger; the fail-open limit's uncounted calls never.
    let used = || {
        platform_rows::<(String, i32)>(
            &s.t,
            "SELECT l.name, w.used FROM quota_windows w JOIN quota_limits l ON l.id = w.limit_id ORDER BY 1",
        )
    };
    let counted = |closed: u64| vec![("closed".to_owned(), closed as i32), ("open".to_owned(), (71 - uncounted) as i32)];
    let settled = common::eventually(Duration::from_secs(20), || async { used().await == counted(2 + spent as u64) }).await;
    assert!(settled, "{:?}, expected {:?}\n{}", used().await, counted(2 + spent as u64), served.logs());

    // The database gone: the replica can no longer tell a revoked token from a live one, so
    // it refuses every call whatever the limits say, and admits again once it is back.
    gate.shut().await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    for tool in ["hit", "hit2"] {
        let r = common::mcp_post(
            &gw,
            &s.m,
            "tools/call",
            json!({ "name": "call_tool", "arguments": { "address": format!("api.{tool}"), "args": {} } }),
        )
        .await;
        assert_eq!(r.status(), 503, "{tool}: {}", r.text().await.unwrap());
    }
    let before = s.seen.total.load(Ordering::SeqCst);
    gate.open();
    assert!(common::eventually(Duration::from_secs(30), || async { call(&gw, &s.m, "hit").await.is_ok() }).await);
    assert_eq!(s.seen.total.load(Ordering::SeqCst), before + 1, "nothing reached the downstream while the database was gone");
    let logs = served.logs();
    assert_eq!(served.terminate().await, 0);
    // What the ledger counted: the fail-open limit's uncounted admissions are not in it.
    assert_eq!(used().await, counted(3 + spent as u64), "{logs}");
}

#[tokio::test]
async fn limits_are_edited_by_compare_and_set_audited_and_another_tenants_are_not_found() {
    use gatehouse::{
        admin_log::Audit,
        quotas::{self, LimitInput, Per},
        tenants,
    };
    let t = TestDb::new().await;
    let audit = Audit::cli();
    let acme = tenants::create(&t.db, &audit, "acme", "Acme").await.unwrap().id;
    let other = tenants::create(&t.db, &audit, "other", "Other").await.unwrap().id;
    let input = LimitInput { name: "writes".into(), per: Some(Per::Token), daily: Some(10), ..Default::default() };
    let created = quotas::create(&t.db, acme, &audit, &input).await.unwrap();
    // A bad input is refused with its field's code, and nothing is written.
    let bad = LimitInput { requests: Some(5), ..input.clone() };
    assert_eq!(quotas::create(&t.db, acme, &audit, &bad).await.unwrap_err().code(), "invalid_quota_window");
    assert_eq!(quotas::create(&t.db, acme, &audit, &input).await.unwrap_err().code(), "quota_exists");
    assert_eq!(quotas::list(&t.db, acme).await.unwrap().len(), 1);

    // Compare-and-set: the second of two edits from the same version is refused, nothing lost.
    let edit = |daily: i32| LimitInput { daily: Some(daily), version: Some(created.version), ..input.clone() };
    let first = quotas::update(&t.db, acme, &audit, created.id, &edit(20)).await.unwrap();
    assert_eq!((first.daily, first.version), (Some(20), created.version + 1));
    let second = quotas::update(&t.db, acme, &audit, created.id, &edit(30)).await.unwrap_err();
    assert_eq!(second.code(), "quota_changed");
    assert_eq!(quotas::get(&t.db, acme, created.id).await.unwrap().daily, Some(20));

    // Another tenant's limit is not found, for reading, editing and removing alike.
    assert_eq!(quotas::get(&t.db, other, created.id).await.unwrap_err().code(), "not_found");
    let theirs = LimitInput { version: Some(first.version), ..input.clone() };
    assert_eq!(quotas::update(&t.db, other, &audit, created.id, &theirs).await.unwrap_err().code(), "not_found");
    assert_eq!(quotas::delete(&t.db, other, &audit, created.id).await.unwrap_err().code(), "not_found");
    quotas::delete(&t.db, acme, &audit, created.id).await.unwrap();

    // Exactly one admin-log row per change that happened.
    let actions: Vec<(String,)> =
        platform_rows(&t, &format!("SELECT action FROM admin_log WHERE target = 'quota:{}' ORDER BY at, id", created.id)).await;
    let actions: Vec<&str> = actions.iter().map(|a| a.0.as_str()).collect();
    assert_eq!(actions, ["quota.create", "quota.update", "quota.delete"]);
}
