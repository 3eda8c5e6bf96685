//! Ops failures and issues: grouping by fingerprint, regression and ignore, exact counts under a
//! burst from many tasks and two writers, every retention boundary, the index behind every
//! prune, and the gateway recording a dead downstream.

mod common;

use std::time::{Duration, Instant};

use common::{Served, TestDb, cli, gatehouse, provision};
use gatehouse::{
    admin_log::Audit,
    db::Scope,
    error::Error,
    ops::{self, Failure, Recorder, Status, Verdict},
    tenants,
};
use sqlx::{AssertSqlSafe, Connection, Executor, PgConnection};
use uuid::Uuid;

fn failure(code: &str, message: &str, tenant: Option<Uuid>) -> Failure {
    Failure {
        operation: "downstream.call",
        stage: "remote_mcp".into(),
        tenant,
        workspace: tenant,
        status: Status::Failed,
        code: code.into(),
        message: message.into(),
        reference: Some(format!("req-{message}")),
    }
}

/// A connection that sees every row (platform context for the whole session).
async fn platform_conn(t: &TestDb) -> PgConnection {
    let mut conn = t.owner_conn().await;
    conn.execute("SELECT set_config('gatehouse.platform', 'on', false)").await.unwrap();
    conn
}

async fn count(conn: &mut PgConnection, sql: &str) -> i64 {
    sqlx::query_scalar(AssertSqlSafe(sql.to_owned())).fetch_one(conn).await.unwrap()
}

async fn issue(t: &TestDb, fingerprint: &str) -> ops::Issue {
    t.db.single_decision(Scope::Platform { reason: "test" }, |conn, _| Box::pin(ops::tx::get(conn, fingerprint)))
        .await
        .unwrap()
        .expect("the issue exists")
}

#[tokio::test]
async fn failures_group_into_one_issue_per_fingerprint_and_stay_in_their_tenant() {
    let t = TestDb::new().await;
    let a = tenants::create(&t.db, &Audit::cli(), "tenant-a", "A").await.unwrap().id.0;
    let b = tenants::create(&t.db, &Audit::cli(), "tenant-b", "B").await.unwrap().id.0;
    let (ops, _writer) = Recorder::start(t.db.clone());
    // Same operation, stage and code, different messages and tenants: one issue.
    ops::record(&ops, failure("unavailable", "first", Some(a)));
    ops::record(&ops, failure("unavailable", &"é".repeat(5000), Some(b)));
    ops::record(&ops, failure("timeout", "slow", Some(a)));
    ops.flush().await;
    ops::record(&ops, failure("unavailable", "last", Some(b)));
    let mut platform = failure("lost", "platform row", None);
    platform.operation = "activity.write";
    ops::record(&ops, platform);
    ops.flush().await;

    let unavailable = ops::fingerprint("downstream.call", "remote_mcp", "unavailable");
    let i = issue(&t, &unavailable).await;
    assert_eq!((i.seen, i.status.as_str(), i.last_message.as_str()), (3, "new", "last"));
    assert_eq!(i.last_tenant_id, Some(b));
    assert!(i.first_seen < i.last_seen);
    assert_eq!(issue(&t, &ops::fingerprint("downstream.call", "remote_mcp", "timeout")).await.seen, 1);
    assert_eq!(issue(&t, &ops::fingerprint("activity.write", "remote_mcp", "lost")).await.last_tenant_id, None);

    let mut conn = platform_conn(&t).await;
    assert_eq!(count(&mut conn, "SELECT count(*) FROM ops_issues").await, 3);
    assert_eq!(count(&mut conn, "SELECT count(*) FROM ops_failures").await, 5);
    let longest: i32 =
        sqlx::query_scalar("SELECT max(char_length(message)) FROM ops_failures").fetch_one(&mut conn).await.unwrap();
    assert_eq!(longest, 2000, "messages are cut to 2,000 characters");
    let (reference, fp): (Option<String>, String) =
        sqlx::query_as("SELECT reference, fingerprint FROM ops_failures WHERE message = 'first'")
            .fetch_one(&mut conn)
            .await
            .unwrap();
    assert_eq!((reference.as_deref(), fp.as_str()), (Some("req-first"), unavailable.as_str()));

    // A tenant sees its own failures only, never a platform row, and no issue at all.
    let (own, issues) =
        t.db.single_decision(Scope::Tenant(tenants::TenantId(a)), |conn, _| {
            Box::pin(async move {
                let own: Vec<Option<Uuid>> =
                    sqlx::query_scalar("SELECT tenant_id FROM ops_failures").fetch_all(&mut *conn).await?;
                let issues: i64 = sqlx::query_scalar("SELECT count(*) FROM ops_issues").fetch_one(&mut *conn).await?;
                Ok((own, issues))
            })
        })
        .await
        .unwrap();
    assert_eq!(own, vec![Some(a), Some(a)]);
    assert_eq!(issues, 0);
    // And a tenant cannot write evidence or issues.
    let err =
        t.db.single_decision(Scope::Tenant(tenants::TenantId(a)), |conn, _| {
            Box::pin(async move {
                sqlx::query("UPDATE ops_issues SET status = 'ignored'").execute(&mut *conn).await?;
                sqlx::query(
                    "INSERT INTO ops_failures (id, tenant_id, operation, stage, code, message, fingerprint, at)
                     SELECT gen_random_uuid(), gatehouse_current_tenant(), 'x', 'y', 'z', '', repeat('0', 64), now()",
                )
                .execute(&mut *conn)
                .await?;
                Ok(())
            })
        })
        .await
        .unwrap_err();
    assert_eq!(err.sqlstate().as_deref(), Some("42501"), "{err:?}");
}

#[tokio::test]
async fn a_resolved_issue_regresses_and_an_ignored_one_stays_ignored() {
    let t = TestDb::new().await;
    let (ops, _writer) = Recorder::start(t.db.clone());
    ops::record(&ops, failure("unavailable", "one", None));
    ops::record(&ops, failure("timeout", "one", None));
    ops.flush().await;
    let fixed = ops::fingerprint("downstream.call", "remote_mcp", "unavailable");
    let noise = ops::fingerprint("downstream.call", "remote_mcp", "timeout");

    let audit = Audit::cli();
    let resolved = ops::set_verdict(&t.db, &audit, &fixed, Verdict::Resolve, Some("1.4.2")).await.unwrap();
    assert_eq!((resolved.status.as_str(), resolved.resolved_version.as_deref()), ("resolved", Some("1.4.2")));
    assert!(resolved.resolved_at.is_some());
    ops::set_verdict(&t.db, &audit, &noise, Verdict::Ignore, None).await.unwrap();
    let unknown = ops::set_verdict(&t.db, &audit, &"0".repeat(64), Verdict::Ignore, None).await.unwrap_err();
    assert!(matches!(unknown, Error::NotFound { .. }), "{unknown:?}");

    // A resolved issue that stays quiet stays resolved.
    ops::record(&ops, failure("other", "unrelated", None));
    ops.flush().await;
    assert_eq!(issue(&t, &fixed).await.status, "resolved");

    ops::record(&ops, failure("unavailable", "two", None));
    ops::record(&ops, failure("timeout", "two", None));
    ops.flush().await;
    let regressed = issue(&t, &fixed).await;
    assert_eq!((regressed.status.as_str(), regressed.seen), ("regressed", 2));
    assert_eq!(regressed.resolved_version.as_deref(), Some("1.4.2"), "the regression keeps the version it regressed from");
    let ignored = issue(&t, &noise).await;
    assert_eq!((ignored.status.as_str(), ignored.seen), ("ignored", 2), "ignored, yet still counted");
    // A further occurrence leaves a regressed issue regressed.
    ops::record(&ops, failure("unavailable", "three", None));
    ops.flush().await;
    assert_eq!(issue(&t, &fixed).await.status, "regressed");

    // Every verdict wrote a platform admin-log row.
    let mut conn = platform_conn(&t).await;
    let logged =
        count(&mut conn, "SELECT count(*) FROM admin_log WHERE action = 'ops.issue.set_status' AND tenant_id IS NULL").await;
    assert_eq!(logged, 2, "resolve and ignore; the refused verdict wrote nothing");

    // The CLI: list by status, reopen, resolve with a version.
    let listed = cli(&t.url, &["ops", "issues", "--status", "regressed"]).await;
    assert_eq!(listed.len(), 1);
    assert!(listed[0].starts_with("regressed\t3\t") && listed[0].contains(&fixed), "{listed:?}");
    let out = cli(&t.url, &["ops", "reopen", &noise]).await;
    assert_eq!(out, [format!("{noise}\tnew\t")]);
    let out = cli(&t.url, &["ops", "resolve", &fixed, "--version", "1.4.3"]).await;
    assert_eq!(out, [format!("{fixed}\tresolved\t1.4.3")]);
    let mut bad = gatehouse(Some(&t.url));
    bad.args(["ops", "issues", "--status", "open"]);
    let (code, _, err) = common::run(bad).await;
    assert!(code == 1 && err.contains("invalid_status"), "{err}");
    assert_eq!(count(&mut conn, "SELECT count(*) FROM admin_log WHERE action = 'ops.issue.set_status'").await, 4);
}

/// Thousands of failures of one fingerprint from 32 tasks, through two writers (two replicas'
/// queues on one database): every one is written and counted exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_burst_of_one_fingerprint_keeps_exact_counts() {
    const TASKS: usize = 32;
    const EACH: usize = 125;
    let t = TestDb::new().await;
    let (one, _w1) = Recorder::start(t.db.clone());
    let (two, _w2) = Recorder::start(t.db.clone());
    let tasks: Vec<_> = (0..TASKS)
        .map(|n| {
            let ops = if n % 2 == 0 { one.clone() } else { two.clone() };
            tokio::spawn(async move {
                for i in 0..EACH {
                    ops::record(&ops, failure("unavailable", &format!("{n}-{i}"), None));
                    if i % 25 == 0 {
                        tokio::task::yield_now().await;
                    }
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    one.flush().await;
    two.flush().await;
    let total = (TASKS * EACH) as i64;
    use std::sync::atomic::Ordering::Relaxed;
    for ops in [&one, &two] {
        assert_eq!(ops.counts().dropped.load(Relaxed) + ops.counts().lost.load(Relaxed), 0);
    }
    assert_eq!((one.counts().written.load(Relaxed) + two.counts().written.load(Relaxed)) as i64, total);
    let fp = ops::fingerprint("downstream.call", "remote_mcp", "unavailable");
    assert_eq!(issue(&t, &fp).await.seen, total);
    let mut conn = platform_conn(&t).await;
    assert_eq!(count(&mut conn, "SELECT count(*) FROM ops_failures").await, total);
    assert_eq!(count(&mut conn, "SELECT count(DISTINCT message) FROM ops_failures").await, total);
}

/// Just inside each window survives a write; just outside is pruned by it.
#[tokio::test]
async fn retention_keeps_just_inside_and_prunes_just_outside_every_window() {
    let t = TestDb::new().await;
    let mut conn = platform_conn(&t).await;
    let fp = |n: char| n.to_string().repeat(64);
    for (id, days) in [
        ("00000000-0000-7000-8000-000000000001", "89 days 23 hours 59 minutes"),
        ("00000000-0000-7000-8000-000000000002", "90 days 1 minute"),
    ] {
        sqlx::query(
            "INSERT INTO ops_failures (id, operation, stage, code, message, fingerprint, at)
             VALUES ($1::uuid, 'op', 'st', 'c', $2, $3, now() - $2::interval)",
        )
        .bind(id)
        .bind(days)
        .bind(fp('a'))
        .execute(&mut conn)
        .await
        .unwrap();
    }
    // Issues whose evidence is long gone: an issue outlives its failures until 180 days.
    for (f, days) in [(fp('b'), "179 days 23 hours 59 minutes"), (fp('c'), "180 days 1 minute")] {
        sqlx::query(
            "INSERT INTO ops_issues (fingerprint, operation, stage, code, seen, first_seen, last_seen, last_message)
             VALUES ($1, 'op', 'st', 'c', 1, now() - $2::interval, now() - $2::interval, $2)",
        )
        .bind(f)
        .bind(days)
        .execute(&mut conn)
        .await
        .unwrap();
    }
    // Activity (90 days), through its own writer.
    let tenant = tenants::create(&t.db, &Audit::cli(), "tenant-a", "A").await.unwrap().id.0;
    for days in ["89 days 23 hours 59 minutes", "90 days 1 minute"] {
        sqlx::query(
            "INSERT INTO activity (tenant_id, occurred_at, id, workspace_id, actor_kind, actor_id, tool, source, outcome, duration_ms)
             VALUES ($1, now() - $2::interval, gen_random_uuid(), $1, 'token', $2, 't', 'mcp', 'ok', 1)",
        )
        .bind(tenant)
        .bind(days)
        .execute(&mut conn)
        .await
        .unwrap();
    }

    // One ordinary failure: its write prunes.
    let (ops, _writer) = Recorder::start(t.db.clone());
    ops::record(&ops, failure("unavailable", "now", None));
    ops.flush().await;
    let messages: Vec<String> =
        sqlx::query_scalar("SELECT message FROM ops_failures ORDER BY at").fetch_all(&mut conn).await.unwrap();
    assert_eq!(messages, ["89 days 23 hours 59 minutes", "now"]);
    let issues: Vec<String> =
        sqlx::query_scalar("SELECT last_message FROM ops_issues ORDER BY last_seen").fetch_all(&mut conn).await.unwrap();
    assert_eq!(issues, ["179 days 23 hours 59 minutes", "now"], "the 180-day-old issue went; the 'a' issue never existed");

    // The activity writer prunes on its first batch.
    let (activity, _aw) = gatehouse::gateway::activity::Recorder::start(t.db.clone(), ops.clone());
    activity.record(gatehouse::gateway::activity::Row {
        tenant_id: tenant,
        occurred_at: chrono::Utc::now(),
        id: Uuid::now_v7(),
        workspace_id: tenant,
        request_id: None,
        actor_kind: "token",
        actor_id: "now".into(),
        connector: None,
        tool: "t".into(),
        source: "mcp",
        outcome: "ok",
        duration_ms: 1,
        error_code: None,
        classification: None,
        result_bytes: 0,
        client: None,
        pool: None,
        redactions: 0,
        quota: None,
        approval_id: None,
    });
    let deadline = Instant::now() + Duration::from_secs(10);
    let actors = loop {
        let actors: Vec<String> =
            sqlx::query_scalar("SELECT actor_id FROM activity ORDER BY occurred_at").fetch_all(&mut conn).await.unwrap();
        if actors.len() == 2 && actors[1] == "now" {
            break actors;
        }
        assert!(Instant::now() < deadline, "the activity writer did not prune: {actors:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(actors[0], "89 days 23 hours 59 minutes");
}

/// Every prune-on-write delete is bounded (LIMIT) and served by an index on the big table:
/// activity, ops failures, ops issues, stale findings, sessions and expired key-value rows.
#[tokio::test]
async fn every_prune_is_bounded_and_served_by_an_index() {
    let t = TestDb::new().await;
    let mut conn = platform_conn(&t).await;
    let tenant = Uuid::new_v4();
    // (statement, table, index, retention days when the statement takes them)
    let cases = [
        (gatehouse::gateway::activity::PRUNE, "activity", "activity_retention", Some(90_i32)),
        (ops::PRUNE_FAILURES, "ops_failures", "ops_failures_retention", Some(90)),
        (ops::PRUNE_ISSUES, "ops_issues", "ops_issues_retention", Some(180)),
        (gatehouse::findings::STALE, "ops_findings", "ops_findings_quiet", Some(180)),
        (gatehouse::sessions::PRUNE, "sessions", "sessions_expiry", None),
        (gatehouse::kv::PRUNE, "kv_entries", "kv_entries_expiry", None),
    ];
    for (sql, table, index, days) in cases {
        let mut tx = conn.begin().await.unwrap();
        // An empty table is cheapest to scan; forbid that so the plan shows whether an index
        // can serve the statement at all (a statement no index serves still scans).
        tx.execute("SET LOCAL enable_seqscan = off").await.unwrap();
        let mut q = sqlx::query_scalar::<_, String>(AssertSqlSafe(format!("EXPLAIN {sql}")));
        if table == "kv_entries" {
            q = q.bind(tenant);
        }
        if let Some(days) = days {
            q = q.bind(days);
        }
        q = q.bind(1000_i64);
        let plan = q.fetch_all(&mut *tx).await.unwrap().join("\n");
        assert!(plan.contains(index), "{table}: the prune is not served by {index}:\n{plan}");
        assert!(!plan.contains(&format!("Seq Scan on {table}")), "{table}: the prune scans the table:\n{plan}");
        assert!(plan.contains("Limit"), "{table}: the prune is not bounded:\n{plan}");
        tx.rollback().await.unwrap();
    }
}

/// A dead downstream, through a real server: the request path records the failure with its
/// tenant, workspace and request id, and the call answers as before.
#[tokio::test]
async fn the_gateway_records_a_dead_downstream() {
    let t = TestDb::new().await;
    cli(&t.url, &["tenant", "create", "acme", "--name", "Acme"]).await;
    cli(&t.url, &["workspace", "create", "--tenant", "acme", "main"]).await;
    let dead = format!("http://127.0.0.1:{}/mcp", common::free_port());
    let args = ["connector", "add", "--tenant", "acme", "--workspace", "main", "--id", "dead", "--kind", "remote_mcp", "--url"];
    cli(&t.url, &[&args[..], &[dead.as_str()]].concat()).await;
    // An HTTP API's catalog is its configuration, so its failure is the call's.
    let api = serde_json::json!({ "base_url": format!("http://127.0.0.1:{}/v1", common::free_port()), "tools": [
        { "name": "ping", "description": "ping", "method": "GET", "path": "/ping", "read_only": true,
          "input_schema": { "type": "object", "additionalProperties": false, "properties": {} } } ] });
    let file = std::env::temp_dir().join(format!("gatehouse-ops-{}.json", Uuid::new_v4().simple()));
    std::fs::write(&file, api.to_string()).unwrap();
    let args = ["connector", "add", "--tenant", "acme", "--workspace", "main", "--id", "api", "--kind", "http_api", "--config"];
    cli(&t.url, &[&args[..], &[file.to_str().unwrap()]].concat()).await;
    let m = provision(&t.url, "acme").await;
    let served = Served::start(gatehouse(Some(&t.url))).await;
    let url = format!("{}/t/acme/w/main/mcp", served.base);
    let params = serde_json::json!({ "name": "call_tool", "arguments": { "address": "dead.anything" } });
    let r = common::mcp_post(&url, &m, "tools/call", params).await;
    let request_id = r.headers()["x-request-id"].to_str().unwrap().to_owned();
    let body: serde_json::Value = r.json().await.unwrap();
    assert!(body["result"]["content"][0]["text"].as_str().unwrap().contains("unavailable"), "{body}");

    let mut conn = platform_conn(&t).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    let row = loop {
        let row = sqlx::query_as::<_, (String, String, String, String, Option<String>, bool, bool)>(
            "SELECT f.operation, f.stage, f.status, f.code, f.reference, f.tenant_id = t.id, f.workspace_id = w.id
             FROM ops_failures f JOIN tenants t ON t.slug = 'acme' JOIN workspaces w ON w.tenant_id = t.id
             WHERE f.operation = 'downstream.catalog'",
        )
        .fetch_optional(&mut conn)
        .await
        .unwrap();
        if let Some(row) = row {
            break row;
        }
        assert!(Instant::now() < deadline, "no failure was recorded");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(
        row,
        ("downstream.catalog".into(), "remote_mcp".into(), "failed".into(), "unavailable".into(), Some(request_id), true, true)
    );
    let params = serde_json::json!({ "name": "call_tool", "arguments": { "address": "api.ping" } });
    let r = common::mcp_post(&url, &m, "tools/call", params).await;
    let body: serde_json::Value = r.json().await.unwrap();
    assert!(body["result"]["content"][0]["text"].as_str().unwrap().contains("unavailable"), "{body}");
    let deadline = Instant::now() + Duration::from_secs(10);
    let issues = loop {
        let issues = cli(&t.url, &["ops", "issues"]).await;
        if issues.len() == 2 {
            break issues;
        }
        assert!(Instant::now() < deadline, "{issues:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(issues.iter().any(|i| i.contains("downstream.catalog/remote_mcp/unavailable")), "{issues:?}");
    assert!(issues.iter().any(|i| i.contains("downstream.call/http_api/unavailable")), "{issues:?}");
    assert_eq!(served.terminate().await, 0);
}

/// Sessions are pruned by their idle expiry alone (never past the absolute one): a session
/// expired either way goes, a live one stays, just inside and just outside the boundary.
#[tokio::test]
async fn expired_sessions_are_pruned_at_their_boundary() {
    let t = TestDb::new().await;
    let mut conn = t.owner_conn().await;
    for (tag, idle, absolute) in
        [("live", "1 minute", "7 days"), ("idle-expired", "-1 minute", "6 days"), ("absolute-expired", "-1 minute", "-1 minute")]
    {
        sqlx::query(
            "INSERT INTO sessions (id_hash, issuer, subject, csrf_token, idle_expires_at, absolute_expires_at)
             VALUES (convert_to($1, 'UTF8'), 'https://idp', $1, 'c', now() + $2::interval, now() + $3::interval)",
        )
        .bind(tag)
        .bind(idle)
        .bind(absolute)
        .execute(&mut conn)
        .await
        .unwrap();
    }
    let pruned = t.db.single_decision(Scope::Global, |conn, _| Box::pin(gatehouse::sessions::tx::prune(conn))).await.unwrap();
    assert_eq!(pruned, 2);
    let left: Vec<String> = sqlx::query_scalar("SELECT subject FROM sessions").fetch_all(&mut conn).await.unwrap();
    assert_eq!(left, ["live"]);
}

/// End to end: an activity batch the database keeps refusing is given up after three attempts,
/// and that loss becomes an ops failure (platform row) and its issue, through the real writers.
#[tokio::test]
async fn a_lost_activity_batch_becomes_an_ops_failure() {
    let t = TestDb::new().await;
    let (ops, _writer) = Recorder::start(t.db.clone());
    let (activity, _aw) = gatehouse::gateway::activity::Recorder::start(t.db.clone(), ops.clone());
    // A tenant that does not exist: the insert fails the tenant check on every attempt.
    let ghost = Uuid::now_v7();
    activity.record(gatehouse::gateway::activity::Row {
        tenant_id: ghost,
        occurred_at: chrono::Utc::now(),
        id: Uuid::now_v7(),
        workspace_id: ghost,
        request_id: Some("req-lost".into()),
        actor_kind: "token",
        actor_id: "t".into(),
        connector: None,
        tool: "t".into(),
        source: "mcp",
        outcome: "ok",
        duration_ms: 1,
        error_code: None,
        classification: None,
        result_bytes: 0,
        client: None,
        pool: None,
        redactions: 0,
        quota: None,
        approval_id: None,
    });
    let fp = ops::fingerprint("activity.write", "insert", "internal");
    let db = t.db.clone();
    let found = common::eventually(Duration::from_secs(15), || {
        let (db, fp, ops) = (db.clone(), fp.clone(), ops.clone());
        async move {
            ops.flush().await;
            db.single_decision(Scope::Platform { reason: "test" }, |conn, _| Box::pin(ops::tx::get(conn, &fp)))
                .await
                .unwrap()
                .is_some()
        }
    })
    .await;
    assert!(found, "the lost batch was not recorded as an ops failure");
    assert_eq!(activity.counts().lost.load(std::sync::atomic::Ordering::Relaxed), 1);
    let mut conn = platform_conn(&t).await;
    let (tenant, message): (Option<Uuid>, String) =
        sqlx::query_as("SELECT tenant_id, message FROM ops_failures WHERE operation = 'activity.write'")
            .fetch_one(&mut conn)
            .await
            .unwrap();
    assert_eq!(tenant, None, "a platform row");
    assert!(message.starts_with("1 activity rows lost after 3 attempts"), "{message}");
    assert!(message.contains("violates the tenant check"), "refused by the tenant check: {message}");
    assert_eq!(issue(&t, &fp).await.seen, 1);
}

/// The SQLSTATE of a statement that must fail by a tenant check (activity's or the admin log's).
async fn refused(conn: &mut PgConnection, sql: &str, tenant: Uuid) -> String {
    let e = sqlx::query(AssertSqlSafe(sql.to_owned())).bind(tenant).execute(conn).await.expect_err(sql);
    let e = e.as_database_error().expect("a database error");
    assert!(e.message().contains("the tenant check"), "{sql}: refused by the tenant check, not {e}");
    e.code().expect("a SQLSTATE").into_owned()
}

/// Activity's tenant check (once per statement, not per row) keeps the foreign key's rule: a
/// statement with one row of a tenant that does not exist writes none of its rows, a row cannot
/// move to such a tenant, and a tenant that rows name can be neither deleted nor re-keyed, even
/// by a superuser.
#[tokio::test]
async fn an_activity_row_names_a_tenant_that_exists() {
    let t = TestDb::new().await;
    let tenant = tenants::create(&t.db, &Audit::cli(), "tenant-a", "A").await.unwrap().id.0;
    let mut conn = platform_conn(&t).await;
    let insert = |rows: &str| {
        format!(
            "INSERT INTO activity (tenant_id, occurred_at, id, workspace_id, actor_kind, actor_id, tool, source, outcome, duration_ms)
             SELECT t, now(), gen_random_uuid(), $1, 'token', 'a', 't', 'mcp', 'ok', 1 FROM unnest({rows}) t"
        )
    };
    let foreign_key_violation = "23503";
    let mixed = insert("ARRAY[$1, gen_random_uuid()]");
    assert_eq!(refused(&mut conn, &mixed, tenant).await, foreign_key_violation);
    assert_eq!(count(&mut conn, "SELECT count(*) FROM activity").await, 0, "a refused statement writes none of its rows");
    sqlx::query(AssertSqlSafe(insert("ARRAY[$1, $1]"))).bind(tenant).execute(&mut conn).await.unwrap();
    assert_eq!(count(&mut conn, "SELECT count(*) FROM activity").await, 2);

    let moved = "UPDATE activity SET tenant_id = gen_random_uuid() WHERE tenant_id = $1";
    assert_eq!(refused(&mut conn, moved, tenant).await, foreign_key_violation);
    sqlx::query("UPDATE activity SET actor_id = 'redacted' WHERE tenant_id = $1").bind(tenant).execute(&mut conn).await.unwrap();

    let mut admin = t.admin_conn().await;
    let delete = "DELETE FROM tenants WHERE id = $1";
    assert_eq!(refused(&mut admin, delete, tenant).await, foreign_key_violation);
    let rekey = "UPDATE tenants SET id = gen_random_uuid() WHERE id = $1";
    assert_eq!(refused(&mut admin, rekey, tenant).await, foreign_key_violation);
    sqlx::query("UPDATE tenants SET id = id WHERE id = $1").bind(tenant).execute(&mut admin).await.unwrap();
    let kept = "SELECT count(*) FROM activity WHERE actor_id = 'redacted'";
    assert_eq!(count(&mut conn, kept).await, 2, "every refusal left the rows as they were");
}

/// The admin log's tenant check (a row trigger, not a foreign key, so concurrent mutations of
/// one tenant share no row lock on it) keeps the key's rule: a row naming a tenant that does
/// not exist is refused and nothing is written, platform rows name none, and a tenant that
/// admin-log rows name can be neither deleted nor re-keyed, even by a superuser.
#[tokio::test]
async fn an_admin_log_row_names_a_tenant_that_exists() {
    let t = TestDb::new().await;
    let tenant = tenants::create(&t.db, &Audit::cli(), "tenant-a", "A").await.unwrap().id.0;
    let mut conn = platform_conn(&t).await;
    let logged = "SELECT count(*) FROM admin_log WHERE action = 'test.row'";
    let insert =
        "INSERT INTO admin_log (id, tenant_id, actor, action, target) VALUES (gen_random_uuid(), $1, 'test', 'test.row', 't')";
    let foreign_key_violation = "23503";
    let stranger = Uuid::new_v4();
    assert_eq!(refused(&mut conn, insert, stranger).await, foreign_key_violation);
    let pair = "INSERT INTO admin_log (id, tenant_id, actor, action, target)
                SELECT gen_random_uuid(), t, 'test', 'test.row', 't' FROM unnest(ARRAY[$1, gen_random_uuid()]) t";
    assert_eq!(refused(&mut conn, pair, tenant).await, foreign_key_violation);
    assert_eq!(count(&mut conn, logged).await, 0, "a refused statement writes none of its rows");
    sqlx::query(insert).bind(tenant).execute(&mut conn).await.unwrap();
    sqlx::query(insert).bind(None::<Uuid>).execute(&mut conn).await.unwrap();
    assert_eq!(count(&mut conn, logged).await, 2, "a row of a tenant that exists, and a platform row");

    let mut admin = t.admin_conn().await;
    let kept = format!("SELECT count(*) FROM admin_log WHERE tenant_id = '{tenant}'");
    let naming = count(&mut admin, &kept).await;
    let moved = "UPDATE admin_log SET tenant_id = gen_random_uuid() WHERE tenant_id = $1";
    assert_eq!(refused(&mut admin, moved, tenant).await, foreign_key_violation);
    assert_eq!(count(&mut admin, "SELECT count(*) FROM activity").await, 0, "no activity names the tenant");
    let delete = "DELETE FROM tenants WHERE id = $1";
    assert_eq!(refused(&mut admin, delete, tenant).await, foreign_key_violation);
    let rekey = "UPDATE tenants SET id = gen_random_uuid() WHERE id = $1";
    assert_eq!(refused(&mut admin, rekey, tenant).await, foreign_key_violation);
    let e = sqlx::query(delete).bind(tenant).execute(&mut admin).await.expect_err("refused");
    assert!(e.to_string().contains(r#"table "admin_log""#), "refused for the admin log's rows: {e}");
    assert_eq!(count(&mut admin, &kept).await, naming, "every refusal left the rows as they were");
}

/// Keyset pages of platform issues (most recently seen first, ties by fingerprint) visit every
/// issue exactly once and in order, also when many share one `last_seen`.
#[tokio::test]
async fn issue_pages_visit_every_issue_once_in_order() {
    let t = common::TestDb::new().await;
    let mut conn = t.owner_conn().await;
    sqlx::Executor::execute(&mut conn, "SELECT set_config('gatehouse.platform', 'on', false)").await.unwrap();
    sqlx::query(
        "INSERT INTO ops_issues (fingerprint, operation, stage, code, status, seen, first_seen, last_seen, last_message)
         SELECT md5(i::text) || md5(i::text), 'downstream.call', 'remote_mcp', 'timeout', 'new', 1,
                now() - interval '1 day', now() - make_interval(secs => greatest(i - 40, 0)), 'm'
         FROM generate_series(1, 90) i",
    )
    .execute(&mut conn)
    .await
    .unwrap();
    let mut seen = Vec::new();
    let mut after = None;
    loop {
        let page = gatehouse::ops::issues_page(&t.db, None, after, 20).await.unwrap();
        if page.is_empty() {
            break;
        }
        after = page.last().map(|i| (i.last_seen, i.fingerprint.clone()));
        seen.extend(page);
    }
    assert_eq!(seen.len(), 90);
    let mut keys: Vec<&str> = seen.iter().map(|i| i.fingerprint.as_str()).collect();
    keys.sort();
    keys.dedup();
    assert_eq!(keys.len(), 90, "an issue shown twice");
    assert!(
        seen.windows(2)
            .all(|w| (w[0].last_seen, std::cmp::Reverse(&w[0].fingerprint))
                > (w[1].last_seen, std::cmp::Reverse(&w[1].fingerprint)))
    );
}

/// Everything a test subscriber writes, kept for the test to read.
#[derive(Clone, Default)]
struct Captured(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

/// A database error is logged once, at ERROR, inside the caller's spans, naming the operation
/// that failed (the `file:line` that asked for the transaction) and its SQLSTATE; the 500 it
/// is answered with does not log it at ERROR a second time.
#[tokio::test]
async fn a_database_error_is_logged_once_naming_its_operation() {
    use axum::response::IntoResponse;
    use tracing::{Instrument, instrument::WithSubscriber};

    let t = TestDb::new().await;
    let out = Captured::default();
    let writer = out.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::DEBUG)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    let dispatch = tracing::Dispatch::new(subscriber);
    let line = line!() + 1;
    let failing = t.db.serializable(Scope::Global, |conn, _| {
        Box::pin(async move {
            sqlx::query("SELECT 1 / 0").execute(conn).await?;
            Ok(())
        })
    });
    // Made under the test's subscriber (a span made under none is disabled, not entered).
    let span = tracing::dispatcher::with_default(&dispatch, || {
        tracing::info_span!("gateway::call_tool", tenant = "acme", tool = "search")
    });
    let e = failing.instrument(span).with_subscriber(dispatch.clone()).await.unwrap_err();
    assert_eq!(e.sqlstate().as_deref(), Some("22012"), "{e}");
    tracing::dispatcher::with_default(&dispatch, || drop(e.into_response()));

    let logged = out.text();
    let errors: Vec<&str> = logged.lines().filter(|l| l.contains("ERROR")).collect();
    assert_eq!(errors.len(), 1, "one ERROR line, not {}:\n{logged}", errors.len());
    let error = errors[0];
    assert!(error.contains(&format!("operation=tests/ops.rs:{line}")), "{error}");
    assert!(error.contains("sqlstate=\"22012\""), "{error}");
    assert!(error.contains("gateway::call_tool{tenant=\"acme\" tool=\"search\"}"), "{error}");
    assert!(logged.contains("database error answered as 500"), "{logged}");
}
