//! The crash harness (issue 7, "What it must show"): a `gatehouse serve` process aborts in the
//! middle of a fork (test-only fault points `fork.after_record` and `fork.after_copy`); while
//! the move's lease runs nothing is claimable; afterwards the sweep of another process settles
//! it (the orphaned fork wiped → done, the source → retained) exactly once, and a late confirm
//! of the move loses with 412. Three processes then race their sweeps over many expired moves
//! and expired forks: every row is settled, and every fork deleted, exactly once.

mod common;

use std::time::Duration;

use common::{Served, TestDb, admin_log_text, cli, dev_sign_in, eventually, gatehouse, json_path, run_ok, vault_key};
use gatehouse::{
    admin_log::Audit,
    copies::{self, Kind, Move, Role, SourceOutcome},
    db::Scope,
    error::Error,
    tenants::TenantId,
};
use serde_json::json;
use sqlx::{Connection, Executor, PgConnection, Row};
use uuid::Uuid;

async fn owner_rows(t: &TestDb, sql: &str) -> Vec<sqlx::postgres::PgRow> {
    let mut conn: PgConnection = t.owner_conn().await;
    let mut tx = conn.begin().await.unwrap();
    tx.execute("SELECT set_config('gatehouse.platform', 'on', true)").await.unwrap();
    let rows = sqlx::query(sqlx::AssertSqlSafe(sql.to_owned())).fetch_all(&mut *tx).await.unwrap();
    tx.commit().await.unwrap();
    rows
}

fn tempdir() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("gatehouse-snapshots-{}", Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

struct Env {
    key: String,
    snapshots: std::path::PathBuf,
}

impl Env {
    fn cmd(&self, t: &TestDb, extra: &[(&str, &str)]) -> tokio::process::Command {
        let mut c = gatehouse(Some(&t.url));
        c.env("GATEHOUSE_VAULT_KEYS", &self.key).env("GATEHOUSE_SNAPSHOT_DIR", &self.snapshots);
        for (k, v) in extra {
            c.env(k, v);
        }
        c
    }
}

async fn late_confirm(t: &TestDb, tenant: TenantId, move_id: Uuid) -> Result<(), Error> {
    let audit = Audit::cli();
    let audit = &audit;
    t.db.serializable(Scope::Tenant(tenant), move |conn, _| {
        Box::pin(copies::confirm(conn, tenant, audit, move_id, SourceOutcome::Retained))
    })
    .await
}

fn settle_lines(log: &str, move_id: Uuid) -> Vec<String> {
    let target = format!("\"target\":\"move:{move_id}\"");
    log.lines().filter(|l| l.contains(&target) && l.contains("\"action\":\"copy.settle\"")).map(str::to_owned).collect()
}

#[tokio::test]
async fn a_fork_crashed_mid_move_is_settled_by_another_process_and_its_late_confirm_loses() {
    let t = TestDb::new().await;
    let env = Env { key: vault_key("k1"), snapshots: tempdir() };
    run_ok(env.cmd(&t, &[]), &["tenant", "create", "acme", "--name", "Acme", "--owner-email", "alice@example.test"]).await;
    run_ok(env.cmd(&t, &[]), &["workspace", "create", "--tenant", "acme", "main"]).await;
    let file = json_path(&json!({ "base_url": "http://127.0.0.1:9/v1", "timeout_ms": 5000,
        "auth": { "type": "slot", "slot": "shared", "headers": { "Authorization": "Bearer {token}" } },
        "tools": [{ "name": "get_item", "description": "One item", "method": "GET", "path": "/items", "read_only": true,
            "input_schema": { "type": "object" } }] }));
    let add = ["connector", "add", "--tenant", "acme", "--workspace", "main", "--id", "inv", "--kind", "http_api", "--config"];
    run_ok(env.cmd(&t, &[]), &[&add[..], &[file.as_str()]].concat()).await;
    let mut c = env.cmd(&t, &[]);
    c.env("GATEHOUSE_FIELD_TOKEN", "a-shared-token-of-some-length");
    run_ok(c, &["credential", "set", "--tenant", "acme", "--workspace", "main", "--connector", "inv", "--field", "token"]).await;
    let tenant = TenantId(owner_rows(&t, "SELECT id FROM tenants WHERE slug = 'acme'").await[0].get(0));

    // Both crashing processes listen on one port: the development sign-in's issuer is named by
    // the public URL, so alice stays the same principal (the member the invitation made).
    let port = common::free_port();
    for (fault, slug) in [("fork.after_record", "crash-one"), ("fork.after_copy", "crash-two")] {
        // The process that crashes: a 3-second lease, and no sweep of its own after its start.
        let crashing = env
            .cmd(&t, &[("GATEHOUSE_FAULT", fault), ("GATEHOUSE_COPY_LEASE_MS", "3000"), ("GATEHOUSE_COPY_SWEEP_MS", "3600000")]);
        let mut served = Served::start_on(crashing, port).await;
        let alice = dev_sign_in(&served, "alice@example.test").await;
        let csrf = alice.csrf().await;
        let answer = alice
            .client
            .post(format!("{}/api/v1/tenants/acme/workspaces/main/fork", served.base))
            .header("origin", &served.base)
            .header("x-csrf-token", csrf)
            .json(&json!({ "slug": slug }))
            .send()
            .await;
        if let Ok(r) = answer {
            panic!("{fault}: the process dies before it answers, not {}: {}", r.status(), r.text().await.unwrap_or_default());
        }
        let status = tokio::time::timeout(Duration::from_secs(30), served.child.wait()).await.unwrap().unwrap();
        assert!(!status.success(), "{fault}: aborted");
        assert!(served.logs().contains(&format!("GATEHOUSE_FAULT: aborting at {fault}")), "{}", served.logs());

        let rows =
            owner_rows(&t, "SELECT move_id, role, state, lease_owner FROM copies WHERE state = 'pending' ORDER BY role").await;
        assert_eq!(rows.len(), 2, "{fault}: the move's two rows are pending");
        let move_id: Uuid = rows[0].get(0);
        assert!(rows.iter().all(|r| r.get::<Option<String>, _>(3).is_none()), "unclaimed");
        let fork = owner_rows(&t, &format!("SELECT id, status FROM workspaces WHERE slug = '{slug}'")).await;
        if fault == "fork.after_copy" {
            assert_eq!(fork[0].get::<String, _>(1), "provisioning", "copied, not confirmed");
            let id: Uuid = fork[0].get(0);
            assert_eq!(owner_rows(&t, &format!("SELECT 1 FROM credentials WHERE workspace_id = '{id}'")).await.len(), 1);
        } else {
            assert!(fork.is_empty(), "nothing copied yet");
        }

        // Another process sweeps every 100 ms. While the lease runs, nothing is claimed: every
        // poll that sees the lease running (same statement) sees the rows unclaimed.
        let sweeper = Served::start(env.cmd(&t, &[("GATEHOUSE_COPY_SWEEP_MS", "100")])).await;
        let sql = format!(
            "SELECT bool_and(lease_until > now()), bool_or(lease_owner IS NOT NULL), bool_and(state <> 'pending')
               FROM copies WHERE move_id = '{move_id}'"
        );
        let settled = eventually(Duration::from_secs(120), || async {
            let row = &owner_rows(&t, &sql).await[0];
            let (running, claimed, settled): (bool, bool, bool) = (row.get(0), row.get(1), row.get(2));
            assert!(!(running && claimed), "{fault}: claimed while its lease runs");
            settled
        })
        .await;
        assert!(settled, "{fault}: the other process settles the move");
        let rows =
            owner_rows(&t, &format!("SELECT role, state, lease_owner FROM copies WHERE move_id = '{move_id}' ORDER BY role"))
                .await;
        let pid = format!(":{}:", sweeper.child.id().unwrap());
        let states: Vec<(String, String)> = rows.iter().map(|r| (r.get(0), r.get(1))).collect();
        assert_eq!(states, vec![("destination".into(), "done".into()), ("source".into(), "retained".into())]);
        assert!(rows.iter().all(|r| r.get::<Option<String>, _>(2).is_some_and(|o| o.contains(&pid))), "claimed by the sweeper");
        assert!(owner_rows(&t, &format!("SELECT 1 FROM workspaces WHERE slug = '{slug}'")).await.is_empty(), "orphan wiped");
        let log = admin_log_text(&t).await;
        let lines = settle_lines(&log, move_id);
        assert_eq!(lines.len(), 2, "{fault}: each row settled once: {lines:?}");
        let wipe = if fault == "fork.after_copy" { "workspace_deleted" } else { "nothing" };
        assert!(lines.iter().any(|l| l.contains(&format!("\"wipe\": \"{wipe}\""))), "{lines:?}");

        // The crashed move's late confirm loses, and writes nothing.
        match late_confirm(&t, tenant, move_id).await {
            Err(Error::Precondition { code, .. }) => assert_eq!(code, "copy_lease_lost"),
            other => panic!("{fault}: a late confirm must lose with 412, got {other:?}"),
        }
        assert_eq!(settle_lines(&admin_log_text(&t).await, move_id).len(), 2);
        sweeper.terminate().await;
    }

    // The source workspace and its credential are untouched by all of it.
    assert_eq!(cli(&t.url, &["workspace", "list", "--tenant", "acme"]).await.len(), 1);
}

#[tokio::test]
async fn three_processes_settle_every_expired_move_and_fork_exactly_once() {
    let t = TestDb::new().await;
    let env = Env { key: vault_key("k1"), snapshots: tempdir() };
    let audit = Audit::cli();
    let tenant = gatehouse::tenants::create(&t.db, &audit, "acme", "Acme").await.unwrap().id;
    let main = gatehouse::workspaces::create(&t.db, tenant, &audit, "main", None).await.unwrap().id.0;

    // 60 moves with 100 ms leases whose processes "died": a third left a provisioning
    // workspace, a third a snapshot file (and its temporary name), a third nothing.
    const MOVES: usize = 60;
    let (mut orphans, mut files, mut moves) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..MOVES {
        let destination = match i % 3 {
            0 => {
                let id = Uuid::now_v7();
                owner_rows(
                    &t,
                    &format!(
                        "INSERT INTO workspaces (tenant_id, id, slug, name, status, bound_version) VALUES ('{}', '{id}', 'orphan-{i}', 'o', 'provisioning', 1)",
                        tenant.0
                    ),
                )
                .await;
                orphans.push(id);
                copies::workspace_ref(id)
            }
            1 => {
                let name = format!("{}.snap", Uuid::new_v4().simple());
                std::fs::write(env.snapshots.join(&name), b"sealed").unwrap();
                std::fs::write(env.snapshots.join(format!(".{name}.tmp")), b"half").unwrap();
                files.push(name.clone());
                copies::snapshot_ref(&name)
            }
            _ => copies::workspace_ref(Uuid::now_v7()),
        };
        let m = Move {
            id: Uuid::now_v7(),
            kind: if i % 3 == 1 { Kind::SnapshotExport } else { Kind::Fork },
            workspace: main,
            rows: vec![(copies::workspace_ref(main), Role::Source), (destination, Role::Destination)],
        };
        copies::record(&t.db, tenant, &audit, 100, &m).await.unwrap().epoch().unwrap();
        moves.push(m.id);
    }
    // And 5 expired forks.
    for i in 0..5 {
        owner_rows(
            &t,
            &format!(
                "INSERT INTO workspaces (tenant_id, id, slug, name, status, bound_version, fork_of, expires_at)
                 VALUES ('{}', '{}', 'old-fork-{i}', 'f', 'active', 1, '{main}', now() - interval '1 minute')",
                tenant.0,
                Uuid::now_v7()
            ),
        )
        .await;
    }

    let start = || Served::start(env.cmd(&t, &[("GATEHOUSE_COPY_SWEEP_MS", "50")]));
    let (a, b, c) = tokio::join!(start(), start(), start());
    let done = eventually(Duration::from_secs(180), || async {
        let row = &owner_rows(
            &t,
            "SELECT (SELECT count(*) FROM copies WHERE state = 'pending'),
                    (SELECT count(*) FROM workspaces WHERE fork_of IS NOT NULL)",
        )
        .await[0];
        row.get::<i64, _>(0) == 0 && row.get::<i64, _>(1) == 0
    })
    .await;
    let log = admin_log_text(&t).await;
    for served in [a, b, c] {
        served.terminate().await;
    }
    assert!(done, "every expired move and fork is settled");
    for id in &moves {
        assert_eq!(settle_lines(&log, *id).len(), 2, "move {id}: each row settled exactly once");
    }
    assert_eq!(log.lines().filter(|l| l.contains("\"action\":\"copy.settle\"")).count(), 2 * MOVES);
    assert_eq!(log.lines().filter(|l| l.contains("\"action\":\"fork.expire\"")).count(), 5, "each fork deleted once");
    let states = owner_rows(&t, "SELECT role, state, count(*) FROM copies GROUP BY 1, 2 ORDER BY 1, 2").await;
    let states: Vec<(String, String, i64)> = states.iter().map(|r| (r.get(0), r.get(1), r.get(2))).collect();
    assert_eq!(
        states,
        vec![("destination".into(), "done".into(), MOVES as i64), ("source".into(), "retained".into(), MOVES as i64)]
    );
    for id in &orphans {
        assert!(owner_rows(&t, &format!("SELECT 1 FROM workspaces WHERE id = '{id}'")).await.is_empty(), "orphan {id} wiped");
    }
    for name in &files {
        assert!(!env.snapshots.join(name).exists() && !env.snapshots.join(format!(".{name}.tmp")).exists(), "{name} wiped");
    }
    assert_eq!(owner_rows(&t, &format!("SELECT 1 FROM workspaces WHERE id = '{main}'")).await.len(), 1, "the source stays");
    let claimants: i64 = owner_rows(&t, "SELECT count(DISTINCT lease_owner) FROM copies").await[0].get(0);
    eprintln!("{claimants} process(es) claimed rows");
}

#[tokio::test]
async fn erasure_and_reap_wait_for_a_crashed_copy_and_no_erased_datum_remains_in_any_copy() {
    let t = TestDb::new().await;
    let env = Env { key: vault_key("k1"), snapshots: tempdir() };
    run_ok(env.cmd(&t, &[]), &["tenant", "create", "acme", "--name", "Acme"]).await;
    run_ok(env.cmd(&t, &[]), &["workspace", "create", "--tenant", "acme", "main"]).await;
    let file = json_path(&json!({ "base_url": "http://127.0.0.1:9/v1", "timeout_ms": 5000,
        "auth": { "type": "slot", "slot": "personal", "headers": { "Authorization": "Bearer {token}" } },
        "tools": [{ "name": "get_item", "description": "One item", "method": "GET", "path": "/items", "read_only": true,
            "input_schema": { "type": "object" } }] }));
    run_ok(
        env.cmd(&t, &[]),
        &["connector", "add", "--tenant", "acme", "--workspace", "main", "--id", "mine", "--kind", "http_api", "--config", &file],
    )
    .await;
    let tenant: Uuid = owner_rows(&t, "SELECT id FROM tenants WHERE slug = 'acme'").await[0].get(0);
    let main: Uuid = owner_rows(&t, "SELECT id FROM workspaces WHERE slug = 'main'").await[0].get(0);
    let bob = Uuid::now_v7();
    owner_rows(
        &t,
        &format!("INSERT INTO members (tenant_id, id, issuer, subject, email, role) VALUES ('{tenant}', '{bob}', 'https://idp', 'bob-sub', 'bob@example.test', 'member')"),
    )
    .await;
    owner_rows(
        &t,
        &format!(
            "INSERT INTO activity (tenant_id, occurred_at, id, workspace_id, actor_kind, actor_id, tool, source, outcome, duration_ms)
             VALUES ('{tenant}', now(), '{}', '{main}', 'member', 'member:{bob}', 'mine.get_item', 'mcp', 'ok', 3)",
            Uuid::now_v7()
        ),
    )
    .await;
    let secret = format!("bobs-token-{}", Uuid::new_v4().simple());
    let mut c = env.cmd(&t, &[]);
    c.env("GATEHOUSE_FIELD_TOKEN", &secret);
    let bob_text = bob.to_string();
    ok_personal(c, &bob_text).await;
    // A snapshot of main, taken before the erasure: bob's part is sealed under his key.
    let out = run_ok(env.cmd(&t, &[]), &["snapshot", "export", "--tenant", "acme", "main"]).await;
    let snapshot = out[0].split('\t').next().unwrap().to_owned();

    // A fork crashes after copying (a CLI process aborts): its rows stay pending.
    let mut crash = env.cmd(&t, &[("GATEHOUSE_FAULT", "fork.after_copy"), ("GATEHOUSE_COPY_LEASE_MS", "3000")]);
    crash.args(["workspace", "fork", "--tenant", "acme", "main", "--slug", "preview"]);
    let (code, _, err) = common::run(crash).await;
    assert!(code != 0 && err.contains("aborting at fork.after_copy"), "{code} {err}");
    let pending: i64 = owner_rows(&t, "SELECT count(*) FROM copies WHERE state = 'pending'").await[0].get(0);
    assert_eq!(pending, 2);

    // While it is pending, the erasure refuses and erases nothing.
    let erase = || {
        let mut c = env.cmd(&t, &[]);
        c.args(["workspace", "erase", "--tenant", "acme", "main", "--subject", "bob@example.test"]);
        common::run(c)
    };
    let (code, _, err) = erase().await;
    assert!(code == 1 && err.contains("erasure_retry_later"), "{err}");
    assert_eq!(owner_rows(&t, &format!("SELECT 1 FROM credentials WHERE owner = 'member:{bob}'")).await.len(), 1);

    // Another process's sweep settles the crashed move; then the erasure goes through.
    let sweeper = Served::start(env.cmd(&t, &[("GATEHOUSE_COPY_SWEEP_MS", "100")])).await;
    let settled = eventually(Duration::from_secs(120), || async {
        owner_rows(&t, "SELECT 1 FROM copies WHERE state = 'pending'").await.is_empty()
    })
    .await;
    assert!(settled);
    let (code, out, err) = erase().await;
    assert_eq!(code, 0, "{err}");
    let receipt: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert!(receipt["receipt"].is_string(), "{receipt}");

    // No erased datum remains in any copy: not in main, not in the snapshot (bob's key is
    // destroyed, so his part cannot be opened, and the file names no subject in the clear),
    // not in what a restore of that snapshot brings back.
    assert!(owner_rows(&t, &format!("SELECT 1 FROM credentials WHERE owner = 'member:{bob}'")).await.is_empty());
    assert!(owner_rows(&t, &format!("SELECT 1 FROM activity WHERE actor_id = 'member:{bob}'")).await.is_empty());
    let body = std::fs::read_to_string(env.snapshots.join(&snapshot)).unwrap();
    assert!(!body.contains(&bob_text) && !body.contains(&secret) && !body.contains("bob@example.test"));
    let out = run_ok(env.cmd(&t, &[]), &["snapshot", "restore", "--tenant", "acme", &snapshot, "--slug", "restored"]).await;
    let parts: Vec<&str> = out[0].split('\t').collect();
    assert_eq!((parts[2], parts[3]), ("0", "1"), "bob's part is unreadable: {out:?}");
    let restored: Uuid = parts[1].parse().unwrap();
    assert!(owner_rows(&t, &format!("SELECT 1 FROM credentials WHERE workspace_id = '{restored}'")).await.is_empty());
    assert!(owner_rows(&t, &format!("SELECT 1 FROM activity WHERE workspace_id = '{restored}'")).await.is_empty());

    // Reap: archived main with a crashed move pending answers 412; after settlement it reaps.
    run_ok(env.cmd(&t, &[]), &["workspace", "archive", "--tenant", "acme", "main"]).await;
    sweeper.terminate().await;
    let mut crash = env.cmd(&t, &[("GATEHOUSE_FAULT", "fork.after_record"), ("GATEHOUSE_COPY_LEASE_MS", "3000")]);
    crash.args(["workspace", "fork", "--tenant", "acme", "main", "--slug", "late"]);
    let (code, _, err) = common::run(crash).await;
    assert!(code != 0 && err.contains("aborting at fork.after_record"), "{code} {err}");
    let reap = || {
        let mut c = env.cmd(&t, &[]);
        c.args(["workspace", "reap", "--tenant", "acme", "main"]);
        common::run(c)
    };
    let (code, _, err) = reap().await;
    assert!(code == 1 && err.contains("reap_retry_later"), "{err}");
    let sweeper = Served::start(env.cmd(&t, &[("GATEHOUSE_COPY_SWEEP_MS", "100")])).await;
    let settled = eventually(Duration::from_secs(120), || async {
        owner_rows(&t, "SELECT 1 FROM copies WHERE state = 'pending'").await.is_empty()
    })
    .await;
    assert!(settled);
    let (code, _, err) = reap().await;
    assert_eq!(code, 0, "{err}");
    assert!(owner_rows(&t, &format!("SELECT 1 FROM workspaces WHERE id = '{main}'")).await.is_empty());
    sweeper.terminate().await;
}

async fn ok_personal(c: tokio::process::Command, member: &str) {
    let args = ["credential", "set", "--tenant", "acme", "--workspace", "main", "--connector", "mine", "--personal-for", member];
    run_ok(c, &[&args[..], &["--field", "token"]].concat()).await;
}
