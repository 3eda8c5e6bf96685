//! The copy ledger and forks: a fork copies configuration, catalogs and shared credentials
//! (re-sealed for the fork) and nothing personal; a failed fork gives its rows up at once;
//! expiry, extension and pins; confirm against lease, claim and erasure epoch, raced against
//! concurrent sweeps with an exact-once check per move; the API is tenant-scoped.

mod common;

use std::time::Duration;

use common::{Served, TestDb, admin_log_text, gatehouse, http, json_path, provision, run, run_ok, vault_key};
use gatehouse::{
    admin_log::Audit,
    config::Config,
    copies::{self, Kind, Move, Recorded, Role, SourceOutcome},
    db::Scope,
    error::Error,
    tenants::TenantId,
    vault::{Aad, KeyRing, Owner, PURPOSE_CONNECTOR},
};
use serde_json::{Value, json};
use sqlx::{Connection, Executor, PgConnection, Row};
use uuid::Uuid;

/// Runs `sql` as the schema owner in the platform context; its rows.
async fn owner_rows(t: &TestDb, sql: &str) -> Vec<sqlx::postgres::PgRow> {
    let mut conn: PgConnection = t.owner_conn().await;
    let mut tx = conn.begin().await.unwrap();
    tx.execute("SELECT set_config('gatehouse.platform', 'on', true)").await.unwrap();
    let rows = sqlx::query(sqlx::AssertSqlSafe(sql.to_owned())).fetch_all(&mut *tx).await.unwrap();
    tx.commit().await.unwrap();
    rows
}

fn config(key: &str, snapshots: &std::path::Path) -> Config {
    let (key, dir) = (key.to_owned(), snapshots.to_str().unwrap().to_owned());
    Config::from_lookup(move |k| match k {
        "GATEHOUSE_VAULT_KEYS" => Some(key.clone()),
        "GATEHOUSE_SNAPSHOT_DIR" => Some(dir.clone()),
        _ => None,
    })
    .unwrap()
}

fn api_connector(slot: &str) -> Value {
    json!({ "base_url": "http://127.0.0.1:9/v1", "timeout_ms": 5000,
        "auth": { "type": "slot", "slot": slot, "headers": { "Authorization": "Bearer {token}" } },
        "tools": [{ "name": "get_item", "description": "One item", "method": "GET", "path": "/items/{id}", "read_only": true,
            "input_schema": { "type": "object", "additionalProperties": false, "required": ["id"], "properties": { "id": { "type": "string" } } } }] })
}

fn count(log: &str, needle: &str) -> usize {
    log.lines().filter(|l| l.contains(needle)).count()
}

#[tokio::test]
async fn a_fork_copies_configuration_catalogs_and_shared_credentials_and_expires_once() {
    let t = TestDb::new().await;
    let key = vault_key("k1");
    let snapshots = tempdir();
    let cmd = || {
        let mut c = gatehouse(Some(&t.url));
        c.env("GATEHOUSE_VAULT_KEYS", &key);
        c
    };
    run_ok(cmd(), &["tenant", "create", "acme", "--name", "Acme"]).await;
    run_ok(cmd(), &["tenant", "create", "other", "--name", "Other"]).await;
    run_ok(cmd(), &["workspace", "create", "--tenant", "acme", "main"]).await;
    let add = |id: &'static str, slot: &str| {
        let file = json_path(&api_connector(slot));
        let mut c = cmd();
        c.args([
            "connector",
            "add",
            "--tenant",
            "acme",
            "--workspace",
            "main",
            "--id",
            id,
            "--kind",
            "http_api",
            "--config",
            &file,
        ]);
        c
    };
    assert_eq!(run(add("inv", "shared")).await.0, 0);
    assert_eq!(run(add("mine", "personal")).await.0, 0);
    let tenant: Uuid = owner_rows(&t, "SELECT id FROM tenants WHERE slug = 'acme'").await[0].get(0);
    let main: Uuid = owner_rows(&t, "SELECT id FROM workspaces WHERE slug = 'main'").await[0].get(0);
    let member = Uuid::now_v7();
    owner_rows(
        &t,
        &format!("INSERT INTO members (tenant_id, id, issuer, subject, role) VALUES ('{tenant}', '{member}', 'https://idp', 'alice', 'member')"),
    )
    .await;
    owner_rows(
        &t,
        &format!("INSERT INTO connector_catalogs (tenant_id, workspace_id, connector_id, config_key, tools) VALUES ('{tenant}', '{main}', 'inv', 'k', '[{{\"name\":\"get_item\"}}]')"),
    )
    .await;
    let shared_secret = format!("shared-{}", Uuid::new_v4().simple());
    let personal_secret = format!("personal-{}", Uuid::new_v4().simple());
    let mut c = cmd();
    c.env("GATEHOUSE_FIELD_TOKEN", &shared_secret);
    run_ok(c, &["credential", "set", "--tenant", "acme", "--workspace", "main", "--connector", "inv", "--field", "token"]).await;
    let mut c = cmd();
    c.env("GATEHOUSE_FIELD_TOKEN", &personal_secret);
    let member_text = member.to_string();
    let personal = ["credential", "set", "--tenant", "acme", "--workspace", "main", "--connector", "mine", "--personal-for"];
    run_ok(c, &[&personal[..], &[member_text.as_str(), "--field", "token"]].concat()).await;

    // The fork: active, version 1 = the source's bound document, catalogs, the shared credential
    // re-sealed for the fork (it does not open as the source's), nothing personal.
    let out = run_ok(cmd(), &["workspace", "fork", "--tenant", "acme", "main", "--slug", "preview"]).await;
    let parts: Vec<&str> = out[0].split('\t').collect();
    assert_eq!(parts[0], "preview");
    let fork: Uuid = parts[1].parse().unwrap();
    let move_id: Uuid = parts[2].parse().unwrap();
    let row = &owner_rows(
        &t,
        &format!(
            "SELECT status, fork_of, pinned, expires_at > now() + interval '71 hours' AND expires_at < now() + interval '73 hours' AS ttl_ok,
                    (SELECT document FROM workspace_versions WHERE workspace_id = '{fork}' AND version = 1) AS fork_doc,
                    (SELECT v.document FROM workspace_versions v JOIN workspaces m ON m.id = v.workspace_id AND v.version = m.bound_version WHERE m.id = '{main}') AS main_doc,
                    (SELECT tools FROM connector_catalogs WHERE workspace_id = '{fork}' AND connector_id = 'inv') AS tools
               FROM workspaces WHERE id = '{fork}'"
        ),
    )
    .await[0];
    assert_eq!(row.get::<String, _>("status"), "active");
    assert_eq!(row.get::<Option<Uuid>, _>("fork_of"), Some(main));
    assert!(!row.get::<bool, _>("pinned") && row.get::<bool, _>("ttl_ok"), "72 hours by default");
    assert_eq!(row.get::<Value, _>("fork_doc"), row.get::<Value, _>("main_doc"));
    assert_eq!(row.get::<Option<Value>, _>("tools"), Some(json!([{ "name": "get_item" }])));
    let creds =
        owner_rows(&t, &format!("SELECT connector_id, owner, envelope FROM credentials WHERE workspace_id = '{fork}'")).await;
    assert_eq!(creds.len(), 1, "only the shared credential is copied");
    assert_eq!((creds[0].get::<String, _>(0).as_str(), creds[0].get::<String, _>(1).as_str()), ("inv", "shared"));
    let ring = KeyRing::parse(&key).unwrap();
    let aad = |workspace| Aad { tenant, workspace, connector: "inv", owner: Owner::Shared, purpose: PURPOSE_CONNECTOR };
    let envelope: String = creds[0].get(2);
    let opened = ring.open(&aad(fork), &envelope).expect("sealed for the fork");
    assert!(String::from_utf8_lossy(&opened).contains(&shared_secret));
    assert!(ring.open(&aad(main), &envelope).is_err(), "not the source's envelope");

    // The ledger: the source retained, the destination done, by the move's own confirm.
    let ledger = run_ok(cmd(), &["copies", "list", "--tenant", "acme", "--workspace", "main"]).await;
    let mine: Vec<&String> = ledger.iter().filter(|l| l.starts_with(&move_id.to_string())).collect();
    assert_eq!(mine.len(), 2, "{ledger:?}");
    assert!(mine.iter().any(|l| l.contains(&format!("fork\tsource\tworkspace:{main}\tretained\t"))), "{mine:?}");
    assert!(mine.iter().any(|l| l.contains(&format!("fork\tdestination\tworkspace:{fork}\tdone\t"))), "{mine:?}");
    let log = admin_log_text(&t).await;
    for action in ["copy.record", "fork.copy", "copy.confirm", "workspace.fork"] {
        assert_eq!(count(&log, &format!("\"action\":\"{action}\"")), 1, "{action}");
    }
    assert!(!log.contains(&shared_secret) && !log.contains(&personal_secret));

    // A fork that fails (the slug is taken) gives its rows up at once: nothing pending.
    let mut c = cmd();
    c.args(["workspace", "fork", "--tenant", "acme", "main", "--slug", "preview"]);
    let (code, _, err) = run(c).await;
    assert_eq!(code, 1);
    assert!(err.contains("slug_taken"), "{err}");
    let states = owner_rows(&t, "SELECT state, lease_owner IS NOT NULL FROM copies WHERE move_id <> (SELECT move_id FROM copies ORDER BY created_at LIMIT 1)").await;
    assert_eq!(states.len(), 2);
    assert!(states.iter().all(|r| r.get::<String, _>(0) != "pending" && r.get::<bool, _>(1)));

    // Extend, pin, and the sweep: a pinned fork survives its expiry; unpinned it is deleted
    // once, however many sweeps race.
    let out = run_ok(cmd(), &["workspace", "fork-extend", "--tenant", "acme", "preview", "--hours", "24"]).await;
    assert!(out[0].ends_with("unpinned"), "{out:?}");
    let far: bool =
        owner_rows(&t, &format!("SELECT expires_at > now() + interval '95 hours' FROM workspaces WHERE id = '{fork}'")).await[0]
            .get(0);
    assert!(far);
    let mut c = cmd();
    c.args(["workspace", "fork-extend", "--tenant", "acme", "main", "--hours", "1"]);
    let (code, _, err) = run(c).await;
    assert!(code == 1 && err.contains("not_a_fork"), "{err}");
    run_ok(cmd(), &["workspace", "fork-pin", "--tenant", "acme", "preview"]).await;
    owner_rows(&t, &format!("UPDATE workspaces SET expires_at = now() - interval '1 second' WHERE id = '{fork}'")).await;
    let config = config(&key, &snapshots);
    copies::sweep::once(&t.db, &config).await.unwrap();
    assert_eq!(owner_rows(&t, &format!("SELECT 1 FROM workspaces WHERE id = '{fork}'")).await.len(), 1, "pinned");
    run_ok(cmd(), &["workspace", "fork-pin", "--tenant", "acme", "preview", "--unpin"]).await;
    let sweeps: Vec<_> = (0..4)
        .map(|_| {
            let (db, config) = (t.db.clone(), config.clone());
            tokio::spawn(async move { copies::sweep::once(&db, &config).await.unwrap() })
        })
        .collect();
    let expired: u64 = futures::future::join_all(sweeps).await.into_iter().map(|s| s.unwrap().forks_expired).sum();
    assert_eq!(expired, 1);
    assert_eq!(owner_rows(&t, &format!("SELECT 1 FROM workspaces WHERE id = '{fork}'")).await.len(), 0);
    assert_eq!(owner_rows(&t, &format!("SELECT 1 FROM credentials WHERE workspace_id = '{fork}'")).await.len(), 0);
    assert_eq!(owner_rows(&t, &format!("SELECT 1 FROM workspace_versions WHERE workspace_id = '{fork}'")).await.len(), 0);
    assert_eq!(count(&admin_log_text(&t).await, "\"action\":\"fork.expire\""), 1);
    // The main workspace and its personal credential are untouched.
    assert_eq!(owner_rows(&t, &format!("SELECT 1 FROM credentials WHERE workspace_id = '{main}'")).await.len(), 2);

    // The API: the tenant's ledger for a token of that tenant; another tenant's answers 404.
    let served = Served::start(cmd()).await;
    let acme = provision(&t.url, "acme").await;
    let other = provision(&t.url, "other").await;
    let client = http();
    let url = format!("{}/api/v1/tenants/acme/copies?workspace=main", served.base);
    let r = acme.headers(client.get(&url)).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let rows: Value = r.json().await.unwrap();
    assert_eq!(rows.as_array().unwrap().len(), 4, "{rows}");
    assert_eq!(other.headers(client.get(&url)).send().await.unwrap().status(), 404);
    let url = format!("{}/api/v1/tenants/other/copies?workspace=main", served.base);
    assert_eq!(other.headers(client.get(&url)).send().await.unwrap().status(), 404);
    let url = format!("{}/api/v1/tenants/other/copies", served.base);
    assert_eq!(other.headers(client.get(&url)).send().await.unwrap().json::<Value>().await.unwrap(), json!([]));
}

fn tempdir() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("gatehouse-snapshots-{}", Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

async fn setup(t: &TestDb) -> (TenantId, Uuid) {
    let audit = Audit::cli();
    let tenant = gatehouse::tenants::create(&t.db, &audit, "acme", "Acme").await.unwrap().id;
    let ws = gatehouse::workspaces::create(&t.db, tenant, &audit, "main", None).await.unwrap();
    (tenant, ws.id.0)
}

fn a_move(workspace: Uuid) -> Move {
    Move {
        id: Uuid::now_v7(),
        kind: Kind::SnapshotExport,
        workspace,
        rows: vec![
            (copies::workspace_ref(workspace), Role::Source),
            (copies::snapshot_ref(&format!("{}.snap", Uuid::new_v4().simple())), Role::Destination),
        ],
    }
}

async fn confirm(t: &TestDb, tenant: TenantId, move_id: Uuid) -> Result<(), Error> {
    let audit = Audit::cli();
    let audit = &audit;
    t.db.serializable(Scope::Tenant(tenant), move |conn, _| {
        Box::pin(copies::confirm(conn, tenant, audit, move_id, SourceOutcome::Retained))
    })
    .await
}

fn code(e: Error) -> &'static str {
    match e {
        Error::Precondition { code, .. } => code,
        other => panic!("expected 412, got {other:?}"),
    }
}

#[tokio::test]
async fn confirm_needs_the_lease_and_the_epoch_and_races_the_sweep_exactly_once() {
    let t = TestDb::new().await;
    let (tenant, main) = setup(&t).await;
    let audit = Audit::cli();
    let snapshots = tempdir();
    let config = config(&vault_key("k1"), &snapshots);

    // record: missing, reaping, recorded.
    assert_eq!(copies::record(&t.db, tenant, &audit, 60_000, &a_move(Uuid::now_v7())).await.unwrap(), Recorded::Missing);
    let reaping = gatehouse::workspaces::create(&t.db, tenant, &audit, "old", None).await.unwrap().id.0;
    owner_rows(&t, &format!("UPDATE workspaces SET reap_claimed_at = now() WHERE id = '{reaping}'")).await;
    assert_eq!(copies::record(&t.db, tenant, &audit, 60_000, &a_move(reaping)).await.unwrap(), Recorded::Reaping);
    assert_eq!(owner_rows(&t, "SELECT 1 FROM copies").await.len(), 0, "a refused record writes nothing");

    // An erasure since the record: the confirm loses and writes nothing.
    let m = a_move(main);
    assert_eq!(copies::record(&t.db, tenant, &audit, 60_000, &m).await.unwrap(), Recorded::Recorded { epoch: 0 });
    owner_rows(&t, &format!("UPDATE workspaces SET erasure_epoch = erasure_epoch + 1 WHERE id = '{main}'")).await;
    assert_eq!(code(confirm(&t, tenant, m.id).await.unwrap_err()), "erasure_epoch_changed");
    let pending: i64 =
        owner_rows(&t, &format!("SELECT count(*) FROM copies WHERE move_id = '{}' AND state = 'pending'", m.id)).await[0].get(0);
    assert_eq!(pending, 2);
    assert_eq!(count(&admin_log_text(&t).await, "\"action\":\"copy.confirm\""), 0);
    // The sweep does not touch it while its lease runs.
    let s = copies::sweep::once(&t.db, &config).await.unwrap();
    let live: bool =
        owner_rows(&t, &format!("SELECT bool_and(lease_until > now()) FROM copies WHERE move_id = '{}'", m.id)).await[0].get(0);
    assert!(live && s.claimed == 0, "{s:?}");

    // Many moves whose leases end while their confirms and three sweepers race: every move is
    // settled exactly once, wholly by its confirm or wholly by the sweep.
    const MOVES: usize = 40;
    let mut moves = Vec::new();
    for _ in 0..MOVES {
        let m = a_move(main);
        copies::record(&t.db, tenant, &audit, 300, &m).await.unwrap();
        moves.push(m.id);
    }
    // At most 16 confirms at once: the test's pool has 32 connections, and a loaded machine
    // must not turn the race into pool timeouts.
    let gate = std::sync::Arc::new(tokio::sync::Semaphore::new(16));
    let confirms: Vec<_> = moves
        .iter()
        .enumerate()
        .map(|(i, id)| {
            let (db, id, gate) = (t.db.clone(), *id, gate.clone());
            tokio::spawn(async move {
                // Spread the confirms across the end of the leases.
                tokio::time::sleep(Duration::from_millis((i as u64 * 17) % 600)).await;
                let _permit = gate.acquire().await.unwrap();
                let audit = Audit::cli();
                let audit = &audit;
                db.serializable(Scope::Tenant(tenant), move |conn, _| {
                    Box::pin(copies::confirm(conn, tenant, audit, id, SourceOutcome::Retained))
                })
                .await
            })
        })
        .collect();
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sweepers: Vec<_> = (0..3)
        .map(|_| {
            let (db, config, done) = (t.db.clone(), config.clone(), done.clone());
            tokio::spawn(async move {
                while !done.load(std::sync::atomic::Ordering::Relaxed) {
                    // A failed pass (e.g. a pool timeout on a loaded machine) is retried, as
                    // the server's loop does; the outcome is what the assertions check.
                    let _ = copies::sweep::once(&db, &config).await;
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            })
        })
        .collect();
    let outcomes: Vec<bool> = futures::future::join_all(confirms)
        .await
        .into_iter()
        .map(|r| match r.unwrap() {
            Ok(()) => true,
            Err(e) => {
                assert_eq!(code(e), "copy_lease_lost");
                false
            }
        })
        .collect();
    let settled = common::eventually(Duration::from_secs(120), || async {
        let list = format!("'{}'", moves.iter().map(Uuid::to_string).collect::<Vec<_>>().join("','"));
        let n: i64 = owner_rows(&t, &format!("SELECT count(*) FROM copies WHERE state = 'pending' AND move_id IN ({list})"))
            .await[0]
            .get(0);
        n == 0
    })
    .await;
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    for s in sweepers {
        s.await.unwrap();
    }
    assert!(settled, "the sweep settles every expired move");
    let log = admin_log_text(&t).await;
    for (id, confirmed) in moves.iter().zip(&outcomes) {
        let rows = owner_rows(
            &t,
            &format!("SELECT role, state, lease_owner IS NOT NULL FROM copies WHERE move_id = '{id}' ORDER BY role"),
        )
        .await;
        let states: Vec<(String, String, bool)> = rows.iter().map(|r| (r.get(0), r.get(1), r.get(2))).collect();
        let claimed = !confirmed;
        assert_eq!(
            states,
            vec![("destination".into(), "done".into(), claimed), ("source".into(), "retained".into(), claimed)],
            "move {id}"
        );
        let target = format!("\"target\":\"move:{id}\"");
        let lines: Vec<&str> = log.lines().filter(|l| l.contains(&target)).collect();
        let confirms = lines.iter().filter(|l| l.contains("\"action\":\"copy.confirm\"")).count();
        let settles = lines.iter().filter(|l| l.contains("\"action\":\"copy.settle\"")).count();
        assert_eq!((confirms, settles), if *confirmed { (1, 0) } else { (0, 2) }, "move {id}");
    }
    let won = outcomes.iter().filter(|c| **c).count();
    eprintln!("{won} of {MOVES} moves confirmed, the rest settled by the sweep");
}

#[tokio::test]
async fn a_snapshot_seals_each_subject_and_restores_only_what_is_still_readable() {
    let t = TestDb::new().await;
    let key = vault_key("k1");
    let snapshots = tempdir();
    let cmd = || {
        let mut c = gatehouse(Some(&t.url));
        c.env("GATEHOUSE_VAULT_KEYS", &key).env("GATEHOUSE_SNAPSHOT_DIR", &snapshots);
        c
    };
    run_ok(cmd(), &["tenant", "create", "acme", "--name", "Acme"]).await;
    run_ok(cmd(), &["tenant", "create", "other", "--name", "Other"]).await;
    run_ok(cmd(), &["workspace", "create", "--tenant", "acme", "main"]).await;
    for (id, slot) in [("inv", "shared"), ("mine", "personal")] {
        let file = json_path(&api_connector(slot));
        let add = ["connector", "add", "--tenant", "acme", "--workspace", "main", "--id", id, "--kind", "http_api", "--config"];
        run_ok(cmd(), &[&add[..], &[file.as_str()]].concat()).await;
    }
    let tenant: Uuid = owner_rows(&t, "SELECT id FROM tenants WHERE slug = 'acme'").await[0].get(0);
    let main: Uuid = owner_rows(&t, "SELECT id FROM workspaces WHERE slug = 'main'").await[0].get(0);
    let member = Uuid::now_v7();
    owner_rows(
        &t,
        &format!("INSERT INTO members (tenant_id, id, issuer, subject, role) VALUES ('{tenant}', '{member}', 'https://idp', 'alice', 'member')"),
    )
    .await;
    owner_rows(
        &t,
        &format!("INSERT INTO connector_catalogs (tenant_id, workspace_id, connector_id, config_key, tools) VALUES ('{tenant}', '{main}', 'inv', 'k', '[]')"),
    )
    .await;
    owner_rows(
        &t,
        &format!(
            "INSERT INTO activity (tenant_id, occurred_at, id, workspace_id, actor_kind, actor_id, tool, source, outcome, duration_ms)
             VALUES ('{tenant}', now(), '{}', '{main}', 'token', 'robot-7731', 'inv.get_item', 'mcp', 'ok', 3)",
            Uuid::now_v7()
        ),
    )
    .await;
    let shared_secret = format!("shared-{}", Uuid::new_v4().simple());
    let personal_secret = format!("personal-{}", Uuid::new_v4().simple());
    let mut c = cmd();
    c.env("GATEHOUSE_FIELD_TOKEN", &shared_secret);
    run_ok(c, &["credential", "set", "--tenant", "acme", "--workspace", "main", "--connector", "inv", "--field", "token"]).await;
    let mut c = cmd();
    c.env("GATEHOUSE_FIELD_TOKEN", &personal_secret);
    let member_text = member.to_string();
    let personal = ["credential", "set", "--tenant", "acme", "--workspace", "main", "--connector", "mine", "--personal-for"];
    run_ok(c, &[&personal[..], &[member_text.as_str(), "--field", "token"]].concat()).await;

    // Export: one file, nothing of either secret or of the subjects in the clear.
    let out = run_ok(cmd(), &["snapshot", "export", "--tenant", "acme", "main"]).await;
    let file = out[0].split('\t').next().unwrap().to_owned();
    let body = std::fs::read_to_string(snapshots.join(&file)).unwrap();
    for needle in [&shared_secret, &personal_secret, &member_text, &"robot-7731".to_owned()] {
        assert!(!body.contains(needle.as_str()), "{needle} in the clear");
    }
    assert!(!snapshots.join(format!(".{file}.tmp")).exists(), "renamed");
    let ledger = run_ok(cmd(), &["copies", "list", "--tenant", "acme", "--workspace", "main"]).await;
    assert!(ledger.iter().any(|l| l.contains(&format!("snapshot_export\tdestination\tsnapshot:{file}\tdone\t"))), "{ledger:?}");
    assert!(ledger.iter().any(|l| l.contains(&format!("snapshot_export\tsource\tworkspace:{main}\tretained\t"))), "{ledger:?}");
    let keys: i64 = owner_rows(&t, "SELECT count(*) FROM subject_keys WHERE envelope IS NOT NULL").await[0].get(0);
    assert_eq!(keys, 2, "one key per subject: the member and the robot");

    // Restore: everything, re-sealed for the new workspace.
    let out = run_ok(cmd(), &["snapshot", "restore", "--tenant", "acme", &file, "--slug", "restored"]).await;
    let parts: Vec<&str> = out[0].split('\t').collect();
    assert_eq!((parts[0], parts[2], parts[3]), ("restored", "2", "0"), "{out:?}");
    let restored: Uuid = parts[1].parse().unwrap();
    let ring = KeyRing::parse(&key).unwrap();
    let open = |rows: &[sqlx::postgres::PgRow], connector: &str, owner: Owner, workspace: Uuid| -> Option<String> {
        let owner_text = owner.as_text();
        let row = rows.iter().find(|r| r.get::<String, _>(0) == connector && r.get::<String, _>(1) == owner_text)?;
        let aad = Aad { tenant, workspace, connector, owner, purpose: PURPOSE_CONNECTOR };
        Some(String::from_utf8(ring.open(&aad, &row.get::<String, _>(2)).unwrap().to_vec()).unwrap())
    };
    let creds =
        owner_rows(&t, &format!("SELECT connector_id, owner, envelope FROM credentials WHERE workspace_id = '{restored}'")).await;
    assert!(open(&creds, "inv", Owner::Shared, restored).unwrap().contains(&shared_secret));
    assert!(open(&creds, "mine", Owner::Member(member), restored).unwrap().contains(&personal_secret));
    let status: String = owner_rows(&t, &format!("SELECT status FROM workspaces WHERE id = '{restored}'")).await[0].get(0);
    assert_eq!(status, "active");
    let actors: Vec<String> = owner_rows(&t, &format!("SELECT actor_id FROM activity WHERE workspace_id = '{restored}'"))
        .await
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(actors, ["robot-7731"]);

    // An erasure destroys the subjects' keys: their parts of the file cannot be opened any
    // more, so a restore brings back only what is not theirs.
    owner_rows(&t, "UPDATE subject_keys SET envelope = NULL, key_id = NULL, destroyed_at = now()").await;
    let out = run_ok(cmd(), &["snapshot", "restore", "--tenant", "acme", &file, "--slug", "restored-two"]).await;
    let parts: Vec<&str> = out[0].split('\t').collect();
    assert_eq!((parts[2], parts[3]), ("0", "2"), "{out:?}");
    let two: Uuid = parts[1].parse().unwrap();
    let creds =
        owner_rows(&t, &format!("SELECT connector_id, owner, envelope FROM credentials WHERE workspace_id = '{two}'")).await;
    assert_eq!(creds.len(), 1, "only the shared credential");
    assert!(owner_rows(&t, &format!("SELECT 1 FROM activity WHERE workspace_id = '{two}'")).await.is_empty());
    // A new export writes nothing of an erased subject.
    let out = run_ok(cmd(), &["snapshot", "export", "--tenant", "acme", "main"]).await;
    let body = std::fs::read_to_string(snapshots.join(out[0].split('\t').next().unwrap())).unwrap();
    assert_eq!(serde_json::from_str::<Value>(&body).unwrap()["subjects"], json!({}));

    // Another tenant's restore of this file answers like a missing file.
    let mut c = cmd();
    c.args(["snapshot", "restore", "--tenant", "other", &file, "--slug", "stolen"]);
    let (code, _, err) = run(c).await;
    assert!(code == 1 && err.contains("not_found"), "{err}");
    let log = admin_log_text(&t).await;
    assert_eq!(count(&log, "\"action\":\"snapshot.export\""), 2);
    assert_eq!(count(&log, "\"action\":\"snapshot.restore\""), 2);
    assert!(!log.contains(&shared_secret) && !log.contains(&personal_secret));
}
