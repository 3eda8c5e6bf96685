//! Subject erasure (issue 7 §5): refused with nothing changed while a copy is pending; after
//! that, the subject is gone from every copy the ledger names, the epoch moved exactly once,
//! the receipt counts what was done, the key is destroyed; raced from 3 server processes.

mod common;

use common::{Served, TestDb, admin_log_text, cli, dev_sign_in, gatehouse};
use gatehouse::{admin_log::Audit, tenants::TenantId};
use reqwest::Method;
use serde_json::{Value, json};
use sqlx::{Executor, PgConnection};
use uuid::Uuid;

/// Runs `sql` as the owner in platform context.
async fn sql(t: &TestDb, statement: &str) -> PgConnection {
    let mut owner = t.owner_conn().await;
    owner.execute("SELECT set_config('gatehouse.platform', 'on', false)").await.unwrap();
    owner.execute(sqlx::AssertSqlSafe(statement.to_owned())).await.unwrap();
    owner
}

async fn scalar<T>(t: &TestDb, query: &str) -> T
where
    T: for<'r> sqlx::Decode<'r, sqlx::Postgres> + sqlx::Type<sqlx::Postgres> + Send + Unpin,
{
    let mut owner = sql(t, "SELECT 1").await;
    sqlx::query_scalar(sqlx::AssertSqlSafe(query.to_owned())).fetch_one(&mut owner).await.unwrap()
}

struct World {
    tenant: Uuid,
    main: Uuid,
    fork: Uuid,
    bob: Uuid,
    bob_token: Uuid,
}

const BOB_EMAIL: &str = "bob.erased@example.test";
const BOB_SUB: &str = "dev|bob.erased@example.test";

/// Tenant `acme` (owner alice) with workspace `main`, its fork `preview` (named by a settled
/// ledger row), a member bob with data in both, and someone else's data that must survive.
async fn world(t: &TestDb) -> World {
    let line = cli(&t.url, &["tenant", "create", "acme", "--name", "Acme", "--owner-email", "alice@example.test"]).await;
    let tenant: Uuid = line[0].split('\t').nth(1).unwrap().parse().unwrap();
    cli(&t.url, &["tenant", "create", "other", "--name", "Other"]).await;
    let main: Uuid =
        cli(&t.url, &["workspace", "create", "--tenant", "acme", "main"]).await[0].split('\t').nth(1).unwrap().parse().unwrap();
    let fork: Uuid = cli(&t.url, &["workspace", "create", "--tenant", "acme", "preview"]).await[0]
        .split('\t')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let (bob, bob_token) = (Uuid::new_v4(), Uuid::new_v4());
    sql(
        t,
        &format!(
            "INSERT INTO members (tenant_id, id, issuer, subject, email, role)
               VALUES ('{tenant}', '{bob}', 'http://idp.test', '{BOB_SUB}', '{BOB_EMAIL}', 'member');
             INSERT INTO access_tokens (tenant_id, id, token_hash, prefix, name, created_by, principal_issuer, principal_subject)
               VALUES ('{tenant}', '{bob_token}', '\\x{}', 'gth_x', 'bob', 'member:{bob}', 'http://idp.test', '{BOB_SUB}');
             INSERT INTO copies (tenant_id, move_id, copy_ref, role, workspace_id, kind, state, epoch_read, lease_until)
               VALUES ('{tenant}', gen_random_uuid(), 'workspace:{fork}', 'destination', '{main}', 'fork', 'done', 0, now()),
                      ('{tenant}', gen_random_uuid(), 'workspace:{main}', 'source', '{main}', 'fork', 'retained', 0, now());",
            hex::encode(Uuid::new_v4().as_bytes())
        ),
    )
    .await;
    seed(t, tenant, main, fork, bob, bob_token).await;
    World { tenant, main, fork, bob, bob_token }
}

/// Bob's data: 3 activity rows in main and 2 in the fork, a personal credential in each, an OAuth
/// grant in main, an ops failure naming him, a live subject key; and carol's, which stays.
async fn seed(t: &TestDb, tenant: Uuid, main: Uuid, fork: Uuid, bob: Uuid, bob_token: Uuid) {
    let activity = |ws: Uuid, actor: &str| {
        format!(
            "INSERT INTO activity (tenant_id, occurred_at, id, workspace_id, actor_kind, actor_id, tool, source, outcome, duration_ms)
             VALUES ('{tenant}', clock_timestamp(), gen_random_uuid(), '{ws}', 'token', '{actor}', 'search_tools', 'mcp', 'ok', 1);"
        )
    };
    let mut s = String::new();
    for _ in 0..3 {
        s += &activity(main, &bob_token.to_string());
    }
    s += &activity(fork, &bob_token.to_string());
    s += &activity(fork, BOB_EMAIL);
    s += &activity(main, "carol-token");
    let credential = |ws: Uuid, owner: &str, member: &str| {
        format!(
            "INSERT INTO credentials (tenant_id, workspace_id, connector_id, owner, member_id, key_id, envelope, fields, updated_by)
             VALUES ('{tenant}', '{ws}', 'crm', '{owner}', {member}, 'k1', 'v1.k1.n.c', '{{}}', 'cli') ON CONFLICT DO NOTHING;"
        )
    };
    s += &credential(main, &format!("member:{bob}"), &format!("'{bob}'"));
    s += &credential(fork, &format!("member:{bob}"), &format!("'{bob}'"));
    s += &credential(main, "shared", "NULL");
    s += &format!(
        "INSERT INTO oauth_grants (tenant_id, workspace_id, connector_id, owner, member_id, client_id, token_endpoint, connected_by)
         VALUES ('{tenant}', '{main}', 'crm', 'member:{bob}', '{bob}', 'client', 'https://idp.test/token', 'member:{bob}')
         ON CONFLICT DO NOTHING;
         INSERT INTO ops_failures (id, tenant_id, workspace_id, operation, stage, code, message, fingerprint, at)
         VALUES (gen_random_uuid(), '{tenant}', '{main}', 'oauth.refresh', 'token', 'invalid_grant',
                 'refresh for {BOB_EMAIL} (member:{bob}) failed', repeat('a', 64), now());
         INSERT INTO subject_keys (tenant_id, subject, key_id, envelope) VALUES ('{tenant}', 'member:{bob}', 'k1', 'v1.k1.n.c')
         ON CONFLICT (tenant_id, subject) DO UPDATE SET key_id = 'k1', envelope = 'v1.k1.n.c', destroyed_at = NULL;
         INSERT INTO approvals (tenant_id, id, workspace_id, actor_kind, actor_id, member_id, connector, tool, args_digest,
                                policy_version, state, decided_at, decided_by, expires_at)
         VALUES ('{tenant}', gen_random_uuid(), '{fork}', 'token', '{bob_token}', '{bob}', 'crm', 'delete',
                 'sha256:' || repeat('0', 64), 1, 'approved', now(), 'member:{bob}', now() + interval '15 minutes');"
    );
    sql(t, &s).await;
}

/// Every row of `table` of the tenant, as text.
async fn rows_text(t: &TestDb, table: &str, tenant: Uuid) -> String {
    let mut owner = sql(t, "SELECT 1").await;
    let rows: Vec<String> =
        sqlx::query_scalar(sqlx::AssertSqlSafe(format!("SELECT row_to_json(x)::text FROM {table} x WHERE tenant_id = $1")))
            .bind(tenant)
            .fetch_all(&mut owner)
            .await
            .unwrap();
    rows.join("\n")
}

async fn epoch(t: &TestDb, ws: Uuid) -> i64 {
    scalar(t, &format!("SELECT erasure_epoch FROM workspaces WHERE id = '{ws}'")).await
}

async fn bob_activity(t: &TestDb, w: &World) -> i64 {
    scalar(t, &format!("SELECT count(*) FROM activity WHERE actor_id IN ('{}', '{BOB_EMAIL}')", w.bob_token)).await
}

async fn live_key(t: &TestDb, w: &World) -> bool {
    scalar(t, &format!("SELECT envelope IS NOT NULL FROM subject_keys WHERE subject = 'member:{}'", w.bob)).await
}

#[tokio::test]
async fn erasure_waits_for_pending_copies_then_erases_every_copy_once() {
    let t = TestDb::new().await;
    let w = world(&t).await;
    let tenant = TenantId(w.tenant);
    let audit = Audit { actor: "member:alice".into(), request_id: None };
    let pending = Uuid::new_v4();
    sql(
        &t,
        &format!(
            "INSERT INTO copies (tenant_id, move_id, copy_ref, role, workspace_id, kind, epoch_read, lease_until, lease_owner)
             VALUES ('{0}', '{pending}', 'workspace:{1}', 'source', '{1}', 'snapshot_export', 0, now() + interval '5 minutes', 'replica:b'),
                    ('{0}', '{pending}', 'snapshot:main-1.snap', 'destination', '{1}', 'snapshot_export', 0, now() + interval '5 minutes', 'replica:b')",
            w.tenant, w.main
        ),
    )
    .await;

    // A pending copy: 412, and nothing changed (whether named by id or by email).
    for subject in [w.bob.to_string(), BOB_EMAIL.to_uppercase()] {
        let e = gatehouse::erasure::erase(&t.db, tenant, &audit, "main", &subject).await.unwrap_err();
        assert_eq!(e.code(), "erasure_retry_later");
        assert_eq!(e.status(), 412);
    }
    // The CLI says the same.
    let mut cmd = gatehouse(Some(&t.url));
    cmd.args(["workspace", "erase", "--tenant", "acme", "main", "--subject", BOB_EMAIL]);
    let (code, _, err) = common::run(cmd).await;
    assert_ne!(code, 0);
    assert!(err.contains("erasure_retry_later") || err.contains("retry later"), "{err}");
    assert_eq!(bob_activity(&t, &w).await, 5);
    assert!(live_key(&t, &w).await, "the key is not destroyed while a copy is pending");
    assert_eq!(epoch(&t, w.main).await, 0);
    assert!(rows_text(&t, "credentials", w.tenant).await.contains(&format!("member:{}", w.bob)));
    assert_eq!(scalar::<i64>(&t, "SELECT count(*) FROM erasure_receipts").await, 0);
    assert!(rows_text(&t, "ops_failures", w.tenant).await.contains(BOB_EMAIL));

    // The move settles: the erasure goes through, once, everywhere.
    sql(
        &t,
        &format!("UPDATE copies SET state = CASE role WHEN 'source' THEN 'retained' ELSE 'done' END WHERE move_id = '{pending}'"),
    )
    .await;
    let out = gatehouse::erasure::erase(&t.db, tenant, &audit, "main", BOB_EMAIL).await.unwrap();
    assert!(out.receipt.is_some());
    assert_eq!(out.epoch, 1);
    assert_eq!(epoch(&t, w.main).await, 1);
    assert_eq!(
        serde_json::to_value(&out.counts).unwrap(),
        json!({ "workspaces": 2, "snapshots": 0, "activity": 5, "credentials": 2, "oauth_grants": 1, "mcp_grants": 0,
                "ops_failures": 1, "subject_keys": 1, "approvals": 1 })
    );
    for table in
        ["activity", "credentials", "oauth_grants", "ops_failures", "mcp_grants", "erasure_receipts", "subject_keys", "approvals"]
    {
        let text = rows_text(&t, table, w.tenant).await;
        for name in [BOB_EMAIL, BOB_SUB, &w.bob_token.to_string()] {
            assert!(!text.contains(name), "{table} still holds {name}: {text}");
        }
        if table != "subject_keys" {
            assert!(!text.contains(&w.bob.to_string()), "{table} still names bob: {text}");
        }
    }
    assert!(!live_key(&t, &w).await, "the subject key is destroyed");
    let marker = format!("erased:{}", &out.subject_digest[..12]);
    assert_eq!(scalar::<i64>(&t, &format!("SELECT count(*) FROM activity WHERE actor_id = '{marker}'")).await, 5);
    assert_eq!(scalar::<i64>(&t, "SELECT count(*) FROM activity WHERE actor_id = 'carol-token'").await, 1, "others' rows stay");
    assert!(rows_text(&t, "credentials", w.tenant).await.contains("shared"), "shared credentials stay");
    let receipt: Value = scalar(&t, "SELECT row_to_json(r)::jsonb FROM erasure_receipts r").await;
    assert_eq!(receipt["epoch"], 1);
    assert_eq!(receipt["counts"]["activity"], 5);
    assert_eq!(receipt["subject_digest"], out.subject_digest);
    let log = admin_log_text(&t).await;
    assert_eq!(log.matches("\"workspace.erase\"").count(), 1);
    for name in [BOB_EMAIL, &w.bob.to_string()] {
        assert!(!log.contains(name), "the admin log names the subject");
    }

    // Nothing left to erase: no second bump, no second receipt.
    let again = gatehouse::erasure::erase(&t.db, tenant, &audit, "main", &w.bob.to_string()).await.unwrap();
    assert!(again.receipt.is_none());
    assert_eq!(epoch(&t, w.main).await, 1);
    assert_eq!(scalar::<i64>(&t, "SELECT count(*) FROM erasure_receipts").await, 1);

    // Another tenant's workspace answers 404 (`other` sees no `main`).
    let other: Uuid = scalar(&t, "SELECT id FROM tenants WHERE slug = 'other'").await;
    let e = gatehouse::erasure::erase(&t.db, TenantId(other), &audit, "main", BOB_EMAIL).await.unwrap_err();
    assert_eq!(e.status(), 404);
    // An external subject id is matched exactly as given.
    sql(&t, &format!(
        "INSERT INTO activity (tenant_id, occurred_at, id, workspace_id, actor_kind, actor_id, tool, source, outcome, duration_ms)
         VALUES ('{}', now(), gen_random_uuid(), '{}', 'oauth', 'ext-subject-42', 'search_tools', 'mcp', 'ok', 1)", w.tenant, w.fork)).await;
    let ext = gatehouse::erasure::erase(&t.db, tenant, &audit, "main", "ext-subject-42").await.unwrap();
    assert_eq!((ext.counts.activity, ext.epoch), (1, 2));
    assert!(!rows_text(&t, "activity", w.tenant).await.contains("ext-subject-42"));
}

/// Alice signed in once (on the first process; each process's development provider is its own
/// issuer), her session cookie then used on every process: sessions live in the database.
pub async fn signed_in(served: &[Served]) -> Vec<common::browser::Browser> {
    let first = dev_sign_in(&served[0], "alice@example.test").await;
    served.iter().map(|s| common::browser::Browser { client: first.client.clone(), base: s.base.clone() }).collect()
}

#[tokio::test]
async fn concurrent_erasures_from_three_processes_bump_the_epoch_once() {
    let t = TestDb::new().await;
    let w = world(&t).await;
    let served = [
        Served::start(gatehouse(Some(&t.url))).await,
        Served::start(gatehouse(Some(&t.url))).await,
        Served::start(gatehouse(Some(&t.url))).await,
    ];
    let browsers = signed_in(&served).await;
    // Someone outside the tenant is answered 404, as for a missing workspace.
    let r = browsers[0].write(Method::POST, "/api/v1/tenants/other/workspaces/main/erase", json!({ "subject": BOB_EMAIL })).await;
    assert_eq!(r.status(), 404);

    for round in 1..=3i64 {
        if round > 1 {
            seed(&t, w.tenant, w.main, w.fork, w.bob, w.bob_token).await;
        }
        let before = epoch(&t, w.main).await;
        let calls = browsers.iter().map(|b| async move {
            let r = b.write(Method::POST, "/api/v1/tenants/acme/workspaces/main/erase", json!({ "subject": BOB_EMAIL })).await;
            let status = r.status().as_u16();
            (status, r.json::<Value>().await.unwrap())
        });
        let answers = futures::future::join_all(calls).await;
        let winners = answers.iter().filter(|(s, b)| *s == 200 && !b["receipt"].is_null()).count();
        assert_eq!(winners, 1, "round {round}: {answers:?}");
        for (status, body) in &answers {
            assert!(
                *status == 200 || (*status == 412 && body["code"] == "erasure_retry_later"),
                "round {round}: {status} {body}"
            );
        }
        assert_eq!(epoch(&t, w.main).await, before + 1, "round {round}: exactly one bump");
        assert_eq!(bob_activity(&t, &w).await, 0);
        assert!(!live_key(&t, &w).await);
    }
    assert_eq!(scalar::<i64>(&t, "SELECT count(*) FROM erasure_receipts").await, 3);
    assert_eq!(admin_log_text(&t).await.matches("\"workspace.erase\"").count(), 3);
}

/// The property test: random interleavings of copy-ledger steps (record, confirm, lease expiry,
/// the recovery sweep's claim and settlement, wipes, an attempt to reopen), erasures, reaps and
/// crashed reaps, run against the database and against a model: record and confirm through the
/// copy ledger's own functions (`copies::record`, `copies::confirm`), erasure and reap through
/// theirs; lease expiry and the sweep's claim, settlement and wipes as single SQL steps
/// following migration 13's contract (the sweep itself, which also wipes the copies, is raced
/// in `tests/copies.rs` and `tests/crash.rs`); after every step the two must agree, and the invariants hold:
/// no confirm after a newer epoch, `done` never left, no copy of a reaped workspace left
/// unsettled, no erasure while a copy is pending.
mod model {
    use super::*;
    use proptest::{
        prelude::*,
        test_runner::{Config, TestRunner},
    };

    const MOVES: usize = 4;
    const SUBJECT: &str = "ext-subject-model";

    #[derive(Clone, Copy, Debug)]
    enum Op {
        Record(usize),
        Confirm(usize),
        Expire(usize),
        SweepClaim(usize),
        SweepSettle(usize),
        Wipe(usize),
        Reopen(usize),
        Erase,
        Reap,
        ReapCrash,
    }

    fn op() -> impl Strategy<Value = Op> {
        let m = 0..MOVES;
        prop_oneof![
            3 => m.clone().prop_map(Op::Record),
            3 => m.clone().prop_map(Op::Confirm),
            2 => m.clone().prop_map(Op::Expire),
            2 => m.clone().prop_map(Op::SweepClaim),
            2 => m.clone().prop_map(Op::SweepSettle),
            1 => m.clone().prop_map(Op::Wipe),
            1 => m.prop_map(Op::Reopen),
            2 => Just(Op::Erase),
            1 => Just(Op::Reap),
            1 => Just(Op::ReapCrash),
        ]
    }

    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    struct Row {
        state: &'static str,
        claimed: bool,
        expired: bool,
    }

    #[derive(Debug)]
    struct Model {
        exists: bool,
        reap_claimed: bool,
        epoch: i64,
        /// Per move: the epoch it read, and its [source, destination] rows.
        moves: [Option<(i64, [Row; 2])>; MOVES],
    }

    impl Model {
        fn pending(&self) -> bool {
            self.moves.iter().flatten().any(|(_, rows)| rows.iter().any(|r| r.state == "pending"))
        }
    }

    async fn copies(conn: &mut PgConnection, tenant: Uuid, ids: &[Uuid; MOVES]) -> [Option<[Row; 2]>; MOVES] {
        let rows: Vec<(Uuid, String, String, bool, bool)> = sqlx::query_as(
            "SELECT move_id, role, state, lease_owner IS NOT NULL, lease_until <= now() FROM copies WHERE tenant_id = $1",
        )
        .bind(tenant)
        .fetch_all(conn)
        .await
        .unwrap();
        let mut out = [None; MOVES];
        for (m, role, state, claimed, expired) in rows {
            let i = ids.iter().position(|id| *id == m).unwrap();
            let state: &'static str = ["pending", "eligible", "retained", "done"].into_iter().find(|s| *s == state).unwrap();
            let slot = out[i].get_or_insert([Row { state: "?", claimed: false, expired: false }; 2]);
            slot[usize::from(role == "destination")] = Row { state, claimed, expired };
        }
        out
    }

    async fn exec(conn: &mut PgConnection, q: &str, tenant: Uuid, m: Uuid) -> Result<u64, sqlx::Error> {
        sqlx::query(sqlx::AssertSqlSafe(q.to_owned())).bind(tenant).bind(m).execute(conn).await.map(|r| r.rows_affected())
    }

    async fn case(t: &TestDb, ops: Vec<Op>) {
        let tenant = Uuid::new_v4();
        let mut conn = sql(
            t,
            &format!(
                "INSERT INTO tenants (id, slug, name) VALUES ('{tenant}', 'p-{}', 'Prop')",
                &tenant.simple().to_string()[..12]
            ),
        )
        .await;
        let audit = Audit::cli();
        let ws = gatehouse::workspaces::create(&t.db, TenantId(tenant), &audit, "main", None).await.unwrap().id.0;
        let ids: [Uuid; MOVES] = std::array::from_fn(|_| Uuid::new_v4());
        let mut model = Model { exists: true, reap_claimed: false, epoch: 0, moves: [None; MOVES] };
        let mut done_ever: Vec<(usize, usize)> = Vec::new();
        for (step, op) in ops.iter().enumerate() {
            match *op {
                Op::Record(i) => {
                    // Through the copy ledger's own `record`: pending rows only if the
                    // workspace exists and no reap is claimed, with the epoch read.
                    if model.moves[i].is_some() {
                        continue; // a move records once
                    }
                    let dst = if i % 2 == 0 { format!("workspace:{}", Uuid::new_v4()) } else { format!("snapshot:s{i}.snap") };
                    let mv = gatehouse::copies::Move {
                        id: ids[i],
                        kind: gatehouse::copies::Kind::Fork,
                        workspace: ws,
                        rows: vec![
                            (format!("workspace:{ws}"), gatehouse::copies::Role::Source),
                            (dst, gatehouse::copies::Role::Destination),
                        ],
                    };
                    let recorded = gatehouse::copies::record(&t.db, TenantId(tenant), &audit, 300_000, &mv).await.unwrap();
                    let expect = model.exists && !model.reap_claimed;
                    assert_eq!(matches!(recorded, gatehouse::copies::Recorded::Recorded { .. }), expect, "step {step} {op:?}");
                    if expect {
                        let row = Row { state: "pending", claimed: false, expired: false };
                        model.moves[i] = Some((model.epoch, [row; 2]));
                    }
                }
                Op::Confirm(i) => {
                    // Through the ledger's own `confirm`, in a transaction of its own.
                    let (m, audit) = (ids[i], &audit);
                    let confirmed =
                        t.db.serializable(gatehouse::db::Scope::Tenant(TenantId(tenant)), move |conn, _| {
                            Box::pin(gatehouse::copies::confirm(
                                conn,
                                TenantId(tenant),
                                audit,
                                m,
                                gatehouse::copies::SourceOutcome::Eligible,
                            ))
                        })
                        .await;
                    let ok = match &mut model.moves[i] {
                        Some((read, rows))
                            if rows.iter().all(|r| r.state == "pending" && !r.claimed && !r.expired)
                                && *read == model.epoch
                                && model.exists
                                && !model.reap_claimed =>
                        {
                            rows[0].state = "eligible";
                            rows[1].state = "done";
                            true
                        }
                        _ => false,
                    };
                    assert_eq!(confirmed.is_ok(), ok, "step {step} {op:?}: {confirmed:?} {model:?}");
                    if let Err(e) = &confirmed {
                        assert_eq!(e.status(), 412, "step {step}: a lost confirm is a precondition failure: {e}");
                    }
                }
                Op::Expire(i) => {
                    exec(&mut conn, "UPDATE copies SET lease_until = now() - interval '1 second' WHERE tenant_id = $1 AND move_id = $2 AND state = 'pending'", tenant, ids[i]).await.unwrap();
                    if let Some((_, rows)) = &mut model.moves[i] {
                        rows.iter_mut().filter(|r| r.state == "pending").for_each(|r| r.expired = true);
                    }
                }
                Op::SweepClaim(i) => {
                    exec(&mut conn, "UPDATE copies SET lease_owner = 'sweep' WHERE tenant_id = $1 AND move_id = $2 AND state = 'pending' AND lease_until <= now() AND lease_owner IS NULL", tenant, ids[i]).await.unwrap();
                    if let Some((_, rows)) = &mut model.moves[i] {
                        rows.iter_mut().filter(|r| r.state == "pending" && r.expired).for_each(|r| r.claimed = true);
                    }
                }
                Op::SweepSettle(i) => {
                    exec(&mut conn, "UPDATE copies SET state = CASE role WHEN 'destination' THEN 'done' ELSE 'retained' END, settled_at = now() WHERE tenant_id = $1 AND move_id = $2 AND state = 'pending' AND lease_owner = 'sweep'", tenant, ids[i]).await.unwrap();
                    if let Some((_, rows)) = &mut model.moves[i] {
                        rows[0].state = if rows[0].state == "pending" && rows[0].claimed { "retained" } else { rows[0].state };
                        rows[1].state = if rows[1].state == "pending" && rows[1].claimed { "done" } else { rows[1].state };
                    }
                }
                Op::Wipe(i) => {
                    exec(&mut conn, "UPDATE copies SET state = 'done', settled_at = now() WHERE tenant_id = $1 AND move_id = $2 AND state IN ('eligible', 'retained')", tenant, ids[i]).await.unwrap();
                    if let Some((_, rows)) = &mut model.moves[i] {
                        rows.iter_mut().filter(|r| r.state == "eligible" || r.state == "retained").for_each(|r| r.state = "done");
                    }
                }
                Op::Reopen(i) => {
                    let r = exec(
                        &mut conn,
                        "UPDATE copies SET state = 'eligible' WHERE tenant_id = $1 AND move_id = $2 AND state = 'done'",
                        tenant,
                        ids[i],
                    )
                    .await;
                    let any_done = model.moves[i].is_some_and(|(_, rows)| rows.iter().any(|r| r.state == "done"));
                    assert_eq!(r.is_err(), any_done, "step {step}: leaving done is refused by the database");
                }
                Op::Erase => {
                    if model.exists {
                        sql(t, &format!(
                            "INSERT INTO activity (tenant_id, occurred_at, id, workspace_id, actor_kind, actor_id, tool, source, outcome, duration_ms)
                             VALUES ('{tenant}', now(), gen_random_uuid(), '{ws}', 'oauth', '{SUBJECT}', 't', 'mcp', 'ok', 1)")).await;
                    }
                    let r = gatehouse::erasure::erase(&t.db, TenantId(tenant), &audit, "main", SUBJECT).await;
                    match r {
                        Ok(out) => {
                            assert!(model.exists && !model.pending(), "step {step}: erased with a copy pending");
                            model.epoch += 1;
                            assert_eq!(out.epoch, model.epoch);
                        }
                        Err(e) if e.code() == "erasure_retry_later" => assert!(model.pending(), "step {step}: {e}"),
                        Err(e) => assert!(!model.exists && e.status() == 404, "step {step}: {e}"),
                    }
                }
                Op::Reap => {
                    sql(t, &format!("UPDATE workspaces SET status = 'archived' WHERE id = '{ws}' AND reap_claimed_at IS NULL"))
                        .await;
                    let r = gatehouse::reap::reap(
                        &t.db,
                        &std::env::temp_dir().join("gatehouse-no-snapshots"),
                        TenantId(tenant),
                        &audit,
                        "main",
                    )
                    .await;
                    match r {
                        Ok(_) => {
                            assert!(model.exists && (model.reap_claimed || !model.pending()), "step {step}");
                            assert!(!model.pending(), "step {step}: reaped with a copy pending");
                            model.exists = false;
                            model.reap_claimed = false;
                            for (_, rows) in model.moves.iter_mut().flatten() {
                                rows.iter_mut().filter(|r| r.state != "pending").for_each(|r| r.state = "done");
                            }
                        }
                        Err(e) if e.code() == "reap_retry_later" => assert!(model.pending(), "step {step}: {e}"),
                        Err(e) => assert!(!model.exists && e.status() == 404, "step {step}: {e}"),
                    }
                }
                Op::ReapCrash => {
                    // A reap that claimed and crashed an hour ago (claimed under the same
                    // conditions as a real claim).
                    let n = exec(
                        &mut conn,
                        "UPDATE workspaces w SET status = 'archived', reap_claimed_at = now() - interval '1 hour', reap_owner = 'replica:crashed'
                          WHERE w.tenant_id = $1 AND w.id = $2 AND w.reap_claimed_at IS NULL
                            AND NOT EXISTS (SELECT 1 FROM copies c WHERE c.tenant_id = $1 AND c.workspace_id = $2 AND c.state = 'pending')",
                        tenant,
                        ws,
                    )
                    .await
                    .unwrap();
                    let expect = model.exists && !model.reap_claimed && !model.pending();
                    assert_eq!(n == 1, expect, "step {step}");
                    model.reap_claimed |= expect;
                }
            }
            // The database and the model agree on every row; done rows stay done; a reaped
            // workspace leaves no copy unsettled.
            let db = copies(&mut conn, tenant, &ids).await;
            for (i, (moved, stored)) in model.moves.iter().zip(&db).enumerate() {
                let want = moved.map(|(_, rows)| rows.map(|r| (r.state, r.claimed)));
                let got = stored.map(|rows| rows.map(|r| (r.state, r.claimed)));
                assert_eq!(got, want, "step {step} {op:?}, move {i}");
                for role in 0..2 {
                    if want.is_some_and(|rows| rows[role].0 == "done") && !done_ever.contains(&(i, role)) {
                        done_ever.push((i, role));
                    }
                }
            }
            for (i, role) in &done_ever {
                assert_eq!(db[*i].map(|rows| rows[*role].state), Some("done"), "done is never left");
            }
            if !model.exists {
                assert!(
                    db.iter().flatten().flatten().all(|r| r.state == "done"),
                    "step {step}: a reaped workspace's copy is unsettled"
                );
            }
            let epoch: Option<i64> = sqlx::query_scalar("SELECT erasure_epoch FROM workspaces WHERE tenant_id = $1")
                .bind(tenant)
                .fetch_optional(&mut conn)
                .await
                .unwrap();
            assert_eq!(epoch, model.exists.then_some(model.epoch), "step {step}");
        }
    }

    #[test]
    fn random_interleavings_of_moves_erasures_and_reaps_keep_the_invariants() {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        let t = rt.block_on(TestDb::new());
        let mut runner = TestRunner::new(Config { cases: 24, failure_persistence: None, ..Config::default() });
        runner
            .run(&proptest::collection::vec(op(), 1..30), |ops| {
                rt.block_on(case(&t, ops));
                Ok(())
            })
            .unwrap();
    }
}
