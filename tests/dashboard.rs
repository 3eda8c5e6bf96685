//! The activity dashboard's figures against real PostgreSQL: exact counts per slot, outcome,
//! error code, connector and tool; another tenant's and another workspace's rows left out;
//! rows outside the range left out; the row cap; and the plan of its one statement (each
//! branch served by its index, bounded by a limit).

mod common;

use chrono::{DateTime, TimeDelta, Utc};
use common::TestDb;
use gatehouse::{
    admin_log::Audit,
    gateway::activity::dashboard::{self, Range},
    ids::TenantId,
    tenants, workspaces,
};
use sqlx::{AssertSqlSafe, Connection, Executor, PgConnection};
use uuid::Uuid;

/// A connection that sees every row (platform context for the whole session).
async fn platform_conn(t: &TestDb) -> PgConnection {
    let mut conn = t.owner_conn().await;
    conn.execute("SELECT set_config('gatehouse.platform', 'on', false)").await.unwrap();
    conn
}

/// Calls of one kind: `n` rows at `at`, durations `first_ms`, `first_ms + 1`, …
struct Calls<'a> {
    tenant: Uuid,
    workspace: Uuid,
    at: DateTime<Utc>,
    n: i32,
    connector: &'a str,
    tool: &'a str,
    code: Option<&'a str>,
    first_ms: i32,
}

async fn insert(conn: &mut PgConnection, c: Calls<'_>) {
    sqlx::query(
        "INSERT INTO activity (tenant_id, occurred_at, id, workspace_id, actor_kind, actor_id, connector, tool, source,
                               outcome, error_code, duration_ms)
         SELECT $1, $2, gen_random_uuid(), $3, 'token', 'seeded', $4, $5, 'gateway',
                CASE WHEN $6::text IS NULL THEN 'ok' ELSE 'error' END, $6, $7 + i - 1
           FROM generate_series(1, $8) AS i",
    )
    .bind(c.tenant)
    .bind(c.at)
    .bind(c.workspace)
    .bind(c.connector)
    .bind(c.tool)
    .bind(c.code)
    .bind(c.first_ms)
    .bind(c.n)
    .execute(conn)
    .await
    .unwrap();
}

async fn workspace(t: &TestDb, tenant: TenantId, slug: &str) -> Uuid {
    workspaces::create(&t.db, tenant, &Audit::cli(), slug, None).await.unwrap().id.0
}

#[tokio::test]
async fn the_dashboard_counts_exactly_within_its_tenant_workspace_and_range() {
    let t = TestDb::new().await;
    let a = tenants::create(&t.db, &Audit::cli(), "tenant-a", "A").await.unwrap().id;
    let b = tenants::create(&t.db, &Audit::cli(), "tenant-b", "B").await.unwrap().id;
    let (main, crm, other) = (workspace(&t, a, "main").await, workspace(&t, a, "crm").await, workspace(&t, b, "main").await);
    let now = Utc::now();
    let (since, _) = Range::Hour.bounds(now);
    let slot = |i: i64| since + TimeDelta::minutes(i) + TimeDelta::seconds(20);
    let mut conn = platform_conn(&t).await;
    let calls = |tenant: TenantId, workspace, at, n, connector, tool, code, first_ms| Calls {
        tenant: tenant.0,
        workspace,
        at,
        n,
        connector,
        tool,
        code,
        first_ms,
    };
    // Tenant A, workspace main: 10 ok calls of inv.get (1..10 ms) in slot 1, 3 tool errors in
    // slot 2, 2 rate-limited and 1 held for approval in slot 59.
    insert(&mut conn, calls(a, main, slot(1), 10, "inv", "inv.get", None, 1)).await;
    insert(&mut conn, calls(a, main, slot(2), 3, "inv", "inv.put", Some("tool_error"), 100)).await;
    insert(&mut conn, calls(a, main, slot(59), 2, "inv", "inv.put", Some("rate_limited"), 0)).await;
    insert(&mut conn, calls(a, main, slot(59), 1, "inv", "inv.put", Some("approval_required"), 0)).await;
    // Tenant A, workspace crm: 5 ok calls of 40..44 ms in slot 30.
    insert(&mut conn, calls(a, crm, slot(30), 5, "crm", "crm.find", None, 40)).await;
    // Outside the last hour, inside the last day: 7 ok calls.
    insert(&mut conn, calls(a, main, since - TimeDelta::minutes(30), 7, "inv", "inv.get", None, 1)).await;
    // Tenant B: 50 calls in slot 1, none of which tenant A may see.
    insert(&mut conn, calls(b, other, slot(1), 50, "inv", "inv.get", Some("tool_error"), 1)).await;

    let d = dashboard::dashboard(&t.db, a, None, Range::Hour, now).await.unwrap();
    assert_eq!(d.rows, 21);
    assert_eq!(d.calls(), 21);
    assert_eq!(d.slots.len(), 60);
    assert_eq!((d.slots[1].ok, d.slots[1].error), (10, 0));
    assert_eq!((d.slots[2].ok, d.slots[2].error), (0, 3));
    assert_eq!((d.slots[30].ok, d.slots[30].error), (5, 0));
    assert_eq!((d.slots[59].error, d.slots[59].limited, d.slots[59].denied), (3, 2, 1));
    assert_eq!(d.slots.iter().map(|s| s.ok + s.error).sum::<i64>(), 21, "{:?}", d.slots);
    let codes: Vec<(&str, i64)> = d.codes.iter().map(|(c, v)| (c.as_str(), v.iter().sum())).collect();
    assert_eq!(codes, [("tool_error", 3), ("rate_limited", 2), ("approval_required", 1)]);
    assert_eq!(d.codes[0].1[2], 3, "tool errors sit in slot 2");
    let latency: Vec<(&str, i64, f64, f64)> =
        d.latency.iter().map(|l| (l.connector.as_str(), l.calls, l.p50_ms, l.p95_ms)).collect();
    // inv: 1..10, 100, 101, 102, 0, 0, 0 ms; crm: 40..44 ms (continuous percentiles).
    assert_eq!(latency[0].0, "inv");
    assert_eq!(latency[0].1, 16);
    let near = |a: f64, b: f64| (a - b).abs() < 1e-9;
    assert!(near(latency[0].2, 5.5) && near(latency[0].3, 101.25), "{latency:?}");
    assert_eq!((latency[1].0, latency[1].1), ("crm", 5));
    assert!(near(latency[1].2, 42.0) && near(latency[1].3, 43.8), "{latency:?}");
    let tools: Vec<(&str, i64, i64)> = d.tools.iter().map(|t| (t.tool.as_str(), t.calls, t.errors)).collect();
    assert_eq!(tools, [("inv.get", 10, 0), ("inv.put", 6, 6), ("crm.find", 5, 0)]);

    let one = dashboard::dashboard(&t.db, a, Some(crm), Range::Hour, now).await.unwrap();
    assert_eq!((one.calls(), one.slots[30].ok), (5, 5));
    assert_eq!(one.tools.len(), 1);
    // Another tenant's workspace id names no rows of this tenant.
    let foreign = dashboard::dashboard(&t.db, a, Some(other), Range::Hour, now).await.unwrap();
    assert_eq!(foreign.rows, 0);
    let day = dashboard::dashboard(&t.db, a, None, Range::Day, now).await.unwrap();
    assert_eq!(day.calls(), 28, "the day holds the earlier seven calls too");
    let theirs = dashboard::dashboard(&t.db, b, None, Range::Week, now).await.unwrap();
    assert_eq!((theirs.calls(), theirs.codes.len()), (50, 1));
}

#[tokio::test]
async fn a_busy_range_reads_only_its_newest_rows() {
    let t = TestDb::new().await;
    let a = tenants::create(&t.db, &Audit::cli(), "tenant-a", "A").await.unwrap().id;
    let main = workspace(&t, a, "main").await;
    let now = Utc::now();
    let (since, _) = Range::Hour.bounds(now);
    let mut conn = platform_conn(&t).await;
    let over = dashboard::MAX_ROWS as i32 + 500;
    // The oldest 500 in slot 0 (error), the rest in slot 10 (ok): only the newest are read.
    for (at, n, code) in [(since, 500, Some("tool_error")), (since + TimeDelta::minutes(10), over - 500, None)] {
        insert(&mut conn, Calls { tenant: a.0, workspace: main, at, n, connector: "inv", tool: "inv.get", code, first_ms: 1 })
            .await;
    }
    let d = dashboard::dashboard(&t.db, a, None, Range::Hour, now).await.unwrap();
    assert_eq!(d.rows, dashboard::MAX_ROWS);
    assert!(d.truncated());
    assert_eq!((d.slots[10].ok, d.slots[0].error), (dashboard::MAX_ROWS, 0));
}

#[tokio::test]
async fn each_branch_of_the_dashboard_statement_is_served_by_its_index_and_bounded() {
    let t = TestDb::new().await;
    let now = Utc::now();
    let (since, until) = Range::Week.bounds(now);
    // A deployment's shape: several tenants with two workspaces each, calls spread over the
    // week, with statistics, so the planner chooses as it would in production.
    let mut conn = platform_conn(&t).await;
    let mut tenants_and_workspaces = Vec::new();
    for n in 0..8 {
        let tenant = tenants::create(&t.db, &Audit::cli(), &format!("tenant-{n}"), "T").await.unwrap().id;
        for w in ["main", "crm"] {
            tenants_and_workspaces.push((tenant, workspace(&t, tenant, w).await));
        }
    }
    for (tenant, workspace) in &tenants_and_workspaces {
        sqlx::query(
            "INSERT INTO activity (tenant_id, occurred_at, id, workspace_id, actor_kind, actor_id, connector, tool, source,
                                   outcome, duration_ms)
             SELECT $1, $2 - make_interval(secs => i * 300), gen_random_uuid(), $3, 'token', 'seeded', 'inv', 'inv.get',
                    'gateway', 'ok', i % 50
               FROM generate_series(1, 2000) AS i",
        )
        .bind(tenant.0)
        .bind(now)
        .bind(workspace)
        .execute(&mut conn)
        .await
        .unwrap();
    }
    conn.execute("ANALYZE activity").await.unwrap();
    let (tenant, one) = tenants_and_workspaces[0];
    // Each branch must reach the table through an index condition on its own keys (the tenant
    // and the time range; the workspace too when one is chosen). Which of the two indexes that
    // serve the tenant branch the planner picks (the primary key or the workspace index, whose
    // leading column is the tenant) depends on its statistics, so either is accepted.
    for (workspace, keys) in [
        (None, &["tenant_id = '", "occurred_at >= '", "occurred_at < '"][..]),
        (Some(one), &["tenant_id = '", "workspace_id = '", "occurred_at >= '", "occurred_at < '"][..]),
    ] {
        let mut tx = conn.begin().await.unwrap();
        tx.execute("SET LOCAL enable_seqscan = off").await.unwrap();
        let plan: Vec<String> = sqlx::query_scalar(AssertSqlSafe(format!("EXPLAIN {}", dashboard::SQL)))
            .bind(tenant.0)
            .bind(since)
            .bind(until)
            .bind(workspace)
            .bind(dashboard::MAX_ROWS)
            .bind(Range::Week.slot().num_seconds() as f64)
            .bind(dashboard::LIMITED)
            .bind(dashboard::DENIED)
            .bind(dashboard::TOP_CODES)
            .bind(dashboard::TOP_ROWS)
            .fetch_all(&mut *tx)
            .await
            .unwrap();
        let plan = plan.join("\n");
        let served = plan
            .lines()
            .filter_map(|line| line.trim().strip_prefix("Index Cond: "))
            .any(|cond| keys.iter().all(|key| cond.contains(key)));
        assert!(served, "workspace {workspace:?}: no index condition on {keys:?}:\n{plan}");
        assert!(!plan.contains("Seq Scan on activity"), "the dashboard scans the table:\n{plan}");
        assert!(plan.contains("Limit"), "the dashboard is not bounded:\n{plan}");
        tx.rollback().await.unwrap();
    }
}
