//! Findings: a tenant's recurring failures become its own findings; suppress rules suppress at
//! once, expire, and on revocation let findings reopen on their next occurrence; resolved
//! findings regress; quiet findings are resolved as stale with an admin-log row; every
//! boundary of a rule's reason and expiry.

mod common;

use chrono::{Duration as Span, Utc};
use common::TestDb;
use gatehouse::{
    admin_log::Audit,
    error::Error,
    findings::{self, NewRule, Verdict},
    ops::{self, Failure, Recorder, Status},
    tenants::{self, TenantId},
};
use sqlx::{Executor, PgConnection};
use uuid::Uuid;

fn failure(tenant: Option<Uuid>, code: &str, message: &str) -> Failure {
    Failure {
        operation: "downstream.call",
        stage: "remote_mcp".into(),
        tenant,
        workspace: None,
        status: Status::Failed,
        code: code.into(),
        message: message.into(),
        reference: None,
    }
}

async fn occur(ops: &Recorder, tenant: TenantId, code: &str, message: &str) {
    ops::record(ops, failure(Some(tenant.0), code, message));
    ops.flush().await;
}

async fn platform_conn(t: &TestDb) -> PgConnection {
    let mut conn = t.owner_conn().await;
    conn.execute("SELECT set_config('gatehouse.platform', 'on', false)").await.unwrap();
    conn
}

async fn admin_rows(conn: &mut PgConnection, action: &str) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM admin_log WHERE action = $1").bind(action).fetch_one(conn).await.unwrap()
}

async fn only(t: &TestDb, tenant: TenantId) -> findings::Finding {
    let mut all = findings::list(&t.db, tenant, None, 100).await.unwrap();
    assert_eq!(all.len(), 1, "{all:?}");
    all.remove(0)
}

fn rule(code: Option<&str>, reason: &str, expires_in: Span) -> NewRule {
    NewRule {
        kind: None,
        operation: None,
        code: code.map(str::to_owned),
        subject: None,
        reason: reason.into(),
        expires_at: Utc::now() + expires_in,
    }
}

async fn two_tenants(t: &TestDb) -> (TenantId, TenantId) {
    let a = tenants::create(&t.db, &Audit::cli(), "tenant-a", "A").await.unwrap().id;
    let b = tenants::create(&t.db, &Audit::cli(), "tenant-b", "B").await.unwrap().id;
    (a, b)
}

#[tokio::test]
async fn recurring_failures_become_the_tenants_own_findings() {
    let t = TestDb::new().await;
    let (a, b) = two_tenants(&t).await;
    let (ops, _w) = Recorder::start(t.db.clone());
    ops::record(&ops, failure(Some(a.0), "unavailable", "one"));
    ops::record(&ops, failure(Some(a.0), "unavailable", "two"));
    ops::record(&ops, failure(Some(b.0), "unavailable", "theirs"));
    ops::record(&ops, failure(None, "unavailable", "platform"));
    ops.flush().await;
    occur(&ops, a, "unavailable", "three").await;

    let f = only(&t, a).await;
    let fp = ops::fingerprint("downstream.call", "remote_mcp", "unavailable");
    assert_eq!((f.kind.as_str(), f.subject.as_str(), f.status.as_str()), ("recurring", fp.as_str(), "open"));
    assert_eq!((f.occurrences, f.last_message.as_str(), f.regressed), (3, "three", false));
    assert_eq!(only(&t, b).await.occurrences, 1, "B's inbox holds B's occurrence only");
    let mut conn = platform_conn(&t).await;
    let total: i64 = sqlx::query_scalar("SELECT count(*) FROM ops_findings").fetch_one(&mut conn).await.unwrap();
    assert_eq!(total, 2, "a platform failure has no inbox");

    // Another tenant's finding answers 404, exactly like a missing one, and changes nothing.
    for id in [f.id, Uuid::new_v4()] {
        let err = findings::set_verdict(&t.db, b, &Audit::cli(), id, Verdict::Ack).await.unwrap_err();
        assert!(matches!(err, Error::NotFound { .. }), "{err:?}");
    }
    assert_eq!(only(&t, a).await.status, "open");
    assert_eq!(admin_rows(&mut conn, "ops.finding.ack").await, 0);
}

#[tokio::test]
async fn ack_resolve_and_regression() {
    let t = TestDb::new().await;
    let (a, _) = two_tenants(&t).await;
    let (ops, _w) = Recorder::start(t.db.clone());
    occur(&ops, a, "timeout", "slow").await;
    let id = only(&t, a).await.id;
    let audit = Audit::cli();

    let acked = findings::set_verdict(&t.db, a, &audit, id, Verdict::Ack).await.unwrap();
    assert_eq!(acked.status, "acked");
    // An acked finding that recurs stays acked.
    occur(&ops, a, "timeout", "slow again").await;
    assert_eq!((only(&t, a).await.status.as_str(), only(&t, a).await.occurrences), ("acked", 2));
    let err = findings::set_verdict(&t.db, a, &audit, id, Verdict::Ack).await.unwrap_err();
    assert_eq!((err.code(), err.status().as_u16()), ("invalid_transition", 409));

    let resolved = findings::set_verdict(&t.db, a, &audit, id, Verdict::Resolve).await.unwrap();
    assert_eq!((resolved.status.as_str(), resolved.resolution.as_deref()), ("resolved", Some("manual")));
    assert!(resolved.resolved_at.is_some());
    occur(&ops, a, "timeout", "back").await;
    let back = only(&t, a).await;
    assert_eq!((back.status.as_str(), back.regressed, back.resolved_at), ("open", true, None));

    let mut conn = platform_conn(&t).await;
    assert_eq!(admin_rows(&mut conn, "ops.finding.ack").await, 1, "the refused ack wrote nothing");
    assert_eq!(admin_rows(&mut conn, "ops.finding.resolve").await, 1);
}

#[tokio::test]
async fn a_rule_suppresses_at_once_and_revoking_it_reopens_on_the_next_occurrence() {
    let t = TestDb::new().await;
    let (a, b) = two_tenants(&t).await;
    let (ops, _w) = Recorder::start(t.db.clone());
    occur(&ops, a, "unavailable", "x").await;
    occur(&ops, a, "timeout", "y").await;
    occur(&ops, b, "unavailable", "z").await;
    let audit = Audit::cli();

    let (created, suppressed) =
        findings::create_rule(&t.db, a, &audit, &rule(Some("unavailable"), "known outage", Span::days(7))).await.unwrap();
    assert_eq!(suppressed, 1);
    assert!(created.live);
    let status = |all: Vec<findings::Finding>, code: &str| all.into_iter().find(|f| f.code == code).unwrap();
    let mine = findings::list(&t.db, a, None, 100).await.unwrap();
    let covered = status(mine.clone(), "unavailable");
    assert_eq!((covered.status.as_str(), covered.suppressed_by), ("suppressed", Some(created.id)));
    assert_eq!(status(mine, "timeout").status, "open", "a rule covers only what it names");
    assert_eq!(only(&t, b).await.status, "open", "a rule covers its own tenant only");

    // Covered occurrences are counted and stay suppressed.
    occur(&ops, a, "unavailable", "again").await;
    let covered = status(findings::list(&t.db, a, Some("suppressed"), 100).await.unwrap(), "unavailable");
    assert_eq!((covered.status.as_str(), covered.occurrences), ("suppressed", 2));

    // Another tenant cannot revoke it; revoking is idempotent and logged once.
    assert!(matches!(findings::revoke_rule(&t.db, b, &audit, created.id).await.unwrap_err(), Error::NotFound { .. }));
    let revoked = findings::revoke_rule(&t.db, a, &audit, created.id).await.unwrap();
    assert!(!revoked.live && revoked.revoked_at.is_some());
    let again = findings::revoke_rule(&t.db, a, &audit, created.id).await.unwrap();
    assert_eq!(again.revoked_at, revoked.revoked_at);
    assert!(findings::rules(&t.db, a, false).await.unwrap().is_empty());
    assert_eq!(findings::rules(&t.db, a, true).await.unwrap().len(), 1);

    // Revoked: still suppressed until the next occurrence, which reopens it.
    let quiet = status(findings::list(&t.db, a, None, 100).await.unwrap(), "unavailable");
    assert_eq!(quiet.status, "suppressed");
    occur(&ops, a, "unavailable", "after revoke").await;
    let reopened = status(findings::list(&t.db, a, None, 100).await.unwrap(), "unavailable");
    assert_eq!((reopened.status.as_str(), reopened.regressed, reopened.suppressed_by), ("open", false, None));

    let mut conn = platform_conn(&t).await;
    assert_eq!(admin_rows(&mut conn, "ops.suppress_rule.create").await, 1);
    assert_eq!(admin_rows(&mut conn, "ops.suppress_rule.revoke").await, 1);
}

#[tokio::test]
async fn an_expired_rule_no_longer_suppresses() {
    let t = TestDb::new().await;
    let (a, _) = two_tenants(&t).await;
    let (ops, _w) = Recorder::start(t.db.clone());
    occur(&ops, a, "unavailable", "x").await;
    let mut subject = rule(None, "this one subject", Span::days(1));
    subject.subject = Some(ops::fingerprint("downstream.call", "remote_mcp", "unavailable"));
    let (created, n) = findings::create_rule(&t.db, a, &Audit::cli(), &subject).await.unwrap();
    assert_eq!(n, 1);
    occur(&ops, a, "unavailable", "still covered").await;
    assert_eq!(only(&t, a).await.status, "suppressed");

    // Let it expire a second ago (as if created two days back).
    let mut conn = platform_conn(&t).await;
    sqlx::query(
        "UPDATE ops_suppress_rules SET created_at = now() - interval '2 days', expires_at = now() - interval '1 second'
         WHERE id = $1",
    )
    .bind(created.id)
    .execute(&mut conn)
    .await
    .unwrap();
    assert!(findings::rules(&t.db, a, false).await.unwrap().is_empty(), "an expired rule is not live");
    occur(&ops, a, "unavailable", "after expiry").await;
    let f = only(&t, a).await;
    assert_eq!((f.status.as_str(), f.occurrences), ("open", 3));
}

#[tokio::test]
async fn rule_boundaries_are_checked_and_a_refusal_writes_nothing() {
    let t = TestDb::new().await;
    let (a, _) = two_tenants(&t).await;
    let audit = Audit::cli();
    let max = Span::days(90);
    let cases = [
        (rule(Some("c"), &"r".repeat(501), Span::days(1)), Some("invalid_reason")),
        (rule(Some("c"), "   ", Span::days(1)), Some("invalid_reason")),
        (rule(Some("c"), "why", Span::seconds(-1)), Some("invalid_expiry")),
        (rule(Some("c"), "why", max + Span::minutes(1)), Some("invalid_expiry")),
        (rule(None, "why", Span::days(1)), Some("rule_matches_everything")),
        (rule(Some(""), "why", Span::days(1)), Some("invalid_matcher")),
        (NewRule { kind: Some("weird".into()), ..rule(None, "why", Span::days(1)) }, Some("invalid_kind")),
        (rule(Some("c"), &"é".repeat(500), Span::days(1)), None),
        (rule(Some("c"), "why", max - Span::minutes(1)), None),
        (rule(Some("c"), "why", Span::seconds(30)), None),
    ];
    let mut accepted = 0;
    for (r, expect) in cases {
        match (findings::create_rule(&t.db, a, &audit, &r).await, expect) {
            (Ok(_), None) => accepted += 1,
            (Err(e), Some(code)) => assert_eq!((e.code(), e.status().as_u16()), (code, 422), "{r:?}"),
            (got, want) => panic!("{r:?}: got {got:?}, wanted {want:?}"),
        }
    }
    assert_eq!(findings::rules(&t.db, a, true).await.unwrap().len(), accepted);
    let mut conn = platform_conn(&t).await;
    assert_eq!(admin_rows(&mut conn, "ops.suppress_rule.create").await, accepted as i64);
    let err = findings::list(&t.db, a, Some("closed"), 10).await.unwrap_err();
    assert_eq!(err.code(), "invalid_status");
}

#[tokio::test]
async fn quiet_findings_are_resolved_as_stale_with_an_admin_log_row() {
    let t = TestDb::new().await;
    let (a, _) = two_tenants(&t).await;
    let (ops, _w) = Recorder::start(t.db.clone());
    for code in ["old", "young", "done"] {
        occur(&ops, a, code, code).await;
    }
    let mut conn = platform_conn(&t).await;
    for (code, age) in [("old", "180 days 1 minute"), ("young", "179 days 23 hours 59 minutes"), ("done", "200 days")] {
        sqlx::query(
            "UPDATE ops_findings SET last_seen = now() - $2::interval, first_seen = now() - $2::interval WHERE code = $1",
        )
        .bind(code)
        .bind(age)
        .execute(&mut conn)
        .await
        .unwrap();
    }
    let done = findings::list(&t.db, a, None, 10).await.unwrap().into_iter().find(|f| f.code == "done").unwrap();
    findings::set_verdict(&t.db, a, &Audit::cli(), done.id, Verdict::Resolve).await.unwrap();

    // Any write of the ops writer sweeps (a platform failure here: no inbox involved).
    ops::record(&ops, failure(None, "unrelated", "tick"));
    ops.flush().await;
    let all = findings::list(&t.db, a, None, 10).await.unwrap();
    let by = |code: &str| all.iter().find(|f| f.code == code).unwrap().clone();
    assert_eq!((by("old").status.as_str(), by("old").resolution.as_deref()), ("resolved", Some("stale")));
    assert_eq!(by("young").status, "open", "just inside the window");
    assert_eq!(by("done").resolution.as_deref(), Some("manual"), "a resolved finding is not resolved again");
    let logged: Vec<(Option<Uuid>, String, String)> =
        sqlx::query_as("SELECT tenant_id, actor, target FROM admin_log WHERE action = 'ops.finding.stale'")
            .fetch_all(&mut conn)
            .await
            .unwrap();
    assert_eq!(logged, vec![(Some(a.0), "system".to_owned(), by("old").id.to_string())]);
    let kept: i64 = sqlx::query_scalar("SELECT count(*) FROM ops_findings").fetch_one(&mut conn).await.unwrap();
    assert_eq!(kept, 3, "never deleted");
    // A stale finding that recurs reopens, flagged regressed.
    occur(&ops, a, "old", "again").await;
    let again = findings::list(&t.db, a, Some("open"), 10).await.unwrap();
    assert!(again.iter().any(|f| f.code == "old" && f.regressed));
}

#[tokio::test]
async fn a_catalog_that_changes_under_the_same_configuration_is_drift() {
    use gatehouse::gateway::catalogs::{self, Target};
    let t = TestDb::new().await;
    let (a, _) = two_tenants(&t).await;
    common::cli(&t.url, &["workspace", "create", "--tenant", "tenant-a", "main"]).await;
    let mut conn = platform_conn(&t).await;
    let workspace: Uuid =
        sqlx::query_scalar("SELECT id FROM workspaces WHERE tenant_id = $1").bind(a).fetch_one(&mut conn).await.unwrap();
    let tool = |name: &str| -> rmcp::model::Tool {
        serde_json::from_value(serde_json::json!({ "name": name, "inputSchema": { "type": "object" } })).unwrap()
    };
    let target = |key| Target { tenant: a, workspace, connector_id: "github", config_key: key, pinning: Default::default() };
    let store = |key: &'static str, tools: Vec<rmcp::model::Tool>| {
        let db = t.db.clone();
        async move { catalogs::store(&db, target(key), &tools, &Default::default(), None).await.unwrap() }
    };
    store("k1", vec![tool("a"), tool("b")]).await;
    store("k1", vec![tool("b"), tool("a")]).await;
    assert!(findings::list(&t.db, a, None, 10).await.unwrap().is_empty(), "the same tools in another order are no change");
    store("k1", vec![tool("a")]).await;
    let f = only(&t, a).await;
    assert_eq!((f.kind.as_str(), f.subject.clone(), f.code.as_str()), ("drift", format!("{workspace}/github"), "tools_changed"));
    assert!(f.last_message.contains("now lists 1 tools (was 2)"), "{}", f.last_message);
    // An edited connector (new configuration key) is expected to list other tools.
    store("k2", vec![tool("a"), tool("c")]).await;
    assert_eq!(only(&t, a).await.occurrences, 1);

    // The revision a server was listed in and its freshness hint are kept with the catalog
    // (and replaced with it), for every replica that loads it.
    let listing = catalogs::Listing { revision: Some("2026-07-28".into()), ttl_ms: Some(45_000), private: true };
    catalogs::store(&t.db, target("k2"), &[tool("a")], &listing, None).await.unwrap();
    let loaded = catalogs::load(&t.db, target("k2")).await.unwrap().expect("stored");
    assert_eq!(loaded.listing, listing);
    let at = loaded.fetched_at.expect("a stored catalog has its time");
    assert_eq!(loaded.fresh_for(at + chrono::Duration::seconds(15)), 30_000);
    assert_eq!(loaded.fresh_for(at + chrono::Duration::seconds(60)), 0, "past its hint, stale");
    catalogs::store(&t.db, target("k2"), &[tool("a")], &Default::default(), None).await.unwrap();
    let loaded = catalogs::load(&t.db, target("k2")).await.unwrap().expect("stored");
    assert_eq!(loaded.listing, catalogs::Listing::default(), "a handshake listing has no hint");
    assert_eq!(loaded.fresh_for(at), 0);
}

/// The scheduled invariant checks record what should never last as `invariant` findings of the
/// tenant concerned (an unclaimed copy long past its lease, a reap claimed long ago and not
/// finished), count each failing pass, leave healthy state alone, and resolve stale findings
/// even when no failure is ever recorded.
#[tokio::test]
async fn invariant_checks_record_broken_control_plane_state() {
    let t = TestDb::new().await;
    let a = tenants::create(&t.db, &Audit::cli(), "tenant-a", "A").await.unwrap().id;
    let b = tenants::create(&t.db, &Audit::cli(), "tenant-b", "B").await.unwrap().id;
    for (tenant, slug) in [(a, "tenant-a"), (b, "tenant-b")] {
        gatehouse::workspaces::create(&t.db, tenant, &Audit::cli(), "main", None).await.unwrap();
        let _ = slug;
    }
    let mut conn = platform_conn(&t).await;
    // Tenant A: one copy 11 minutes past its lease (broken), one 1 minute past (the sweep's
    // business, not broken yet), one claimed long ago (being settled); an archived workspace
    // whose reap was claimed an hour ago. Tenant B: only healthy state.
    for (tenant, past, owner) in
        [(a, "11 minutes", None), (a, "1 minute", None), (a, "1 hour", Some("replica-x")), (b, "1 minute", None)]
    {
        sqlx::query(
            "INSERT INTO copies (tenant_id, move_id, copy_ref, role, workspace_id, kind, epoch_read, lease_until, lease_owner)
             SELECT $1, gen_random_uuid(), 'workspace:' || id, 'destination', id, 'fork', 0, now() - $2::interval, $3
             FROM workspaces WHERE tenant_id = $1",
        )
        .bind(tenant)
        .bind(past)
        .bind(owner)
        .execute(&mut conn)
        .await
        .unwrap();
    }
    sqlx::query(
        "UPDATE workspaces SET status = 'archived', reap_claimed_at = now() - interval '1 hour', reap_owner = 'gone'
         WHERE tenant_id = $1",
    )
    .bind(a)
    .execute(&mut conn)
    .await
    .unwrap();
    // A finding quiet for 200 days, in tenant B.
    sqlx::query(
        "INSERT INTO ops_findings (tenant_id, id, kind, subject, operation, code, occurrences, first_seen, last_seen, last_message)
         VALUES ($1, gen_random_uuid(), 'recurring', repeat('1', 64), 'downstream.call', 'timeout', 1,
                 now() - interval '200 days', now() - interval '200 days', 'old')",
    )
    .bind(b)
    .execute(&mut conn)
    .await
    .unwrap();

    assert_eq!(findings::invariants::check_once(&t.db).await.unwrap(), Some(2));
    assert_eq!(findings::invariants::check_once(&t.db).await.unwrap(), Some(2));
    let found = findings::list(&t.db, a, None, 100).await.unwrap();
    let mut codes: Vec<(&str, &str, i64)> = found.iter().map(|f| (f.kind.as_str(), f.code.as_str(), f.occurrences)).collect();
    codes.sort();
    assert_eq!(codes, [("invariant", "copy_lease_overdue", 2), ("invariant", "reap_stuck", 2)], "{found:?}");
    assert!(found.iter().all(|f| f.status == "open"));
    let in_b = findings::list(&t.db, b, None, 100).await.unwrap();
    assert_eq!(in_b.len(), 1, "tenant B has no broken state: {in_b:?}");
    assert_eq!((in_b[0].status.as_str(), in_b[0].kind.as_str()), ("resolved", "recurring"), "the quiet finding is stale");
    assert_eq!(admin_rows(&mut conn, "ops.finding.stale").await, 1);
}

/// Keyset pages of findings (most recently seen first, ties by id) visit every finding exactly
/// once and in order, also when many share one `last_seen`, and a status filter pages within it.
#[tokio::test]
async fn findings_pages_visit_every_finding_once_in_order() {
    let t = TestDb::new().await;
    let a = tenants::create(&t.db, &Audit::cli(), "tenant-a", "A").await.unwrap().id;
    let mut conn = platform_conn(&t).await;
    // 130 findings: 60 seen at the same instant, the rest a second apart; every third acked.
    sqlx::query(
        "INSERT INTO ops_findings (tenant_id, id, kind, subject, operation, code, status, occurrences, first_seen, last_seen, last_message)
         SELECT $1, gen_random_uuid(), 'recurring', lpad(i::text, 64, '0'), 'downstream.call', 'timeout',
                CASE WHEN i % 3 = 0 THEN 'acked' ELSE 'open' END, 1,
                now() - interval '1 day', now() - make_interval(secs => greatest(i - 60, 0)), 'm'
         FROM generate_series(1, 130) i",
    )
    .bind(a)
    .execute(&mut conn)
    .await
    .unwrap();
    for (status, expected) in [(None, 130), (Some("acked"), 43)] {
        let mut seen: Vec<findings::Finding> = Vec::new();
        let mut cursor = None;
        loop {
            let page = findings::page(&t.db, a, status, cursor, 25).await.unwrap();
            assert!(page.len() <= 25);
            if page.is_empty() {
                break;
            }
            cursor = page.last().map(|f| (f.last_seen, f.id));
            seen.extend(page);
        }
        assert_eq!(seen.len(), expected, "{status:?}");
        let mut ids: Vec<Uuid> = seen.iter().map(|f| f.id).collect();
        ids.sort();
        ids.dedup();
        assert_eq!(ids.len(), expected, "{status:?}: a finding shown twice");
        assert!(
            seen.windows(2).all(|w| (w[0].last_seen, std::cmp::Reverse(w[0].id)) > (w[1].last_seen, std::cmp::Reverse(w[1].id))),
            "{status:?}: out of order"
        );
        assert!(status.is_none_or(|s| seen.iter().all(|f| f.status == s)));
    }
}
