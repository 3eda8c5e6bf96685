//! Reap (issue 7 §6): refused while not archived (409) and while a copy is pending (412);
//! raced from 3 server processes, exactly one reap wins (one tombstone, one admin-log row); an
//! interrupted reap is finished by the next call and by the sweep; the slug is free again; the
//! reaped endpoint answers 404; another tenant's workspace answers 404.

mod common;

use std::time::Duration;

use common::{Served, TestDb, admin_log_text, cli, dev_sign_in, eventually, gatehouse, mcp_post, provision};
use gatehouse::{
    admin_log::Audit,
    db::Scope,
    tenants::TenantId,
    workspaces::tables::{Rows, TABLES},
};
use reqwest::Method;
use serde_json::{Value, json};
use sqlx::{Executor, PgConnection};
use uuid::Uuid;

async fn sql(t: &TestDb, statement: &str) -> PgConnection {
    let mut owner = t.owner_conn().await;
    owner.execute("SELECT set_config('gatehouse.platform', 'on', false)").await.unwrap();
    owner.execute(sqlx::AssertSqlSafe(statement.to_owned())).await.unwrap();
    owner
}

async fn count(t: &TestDb, query: &str) -> i64 {
    let mut owner = sql(t, "SELECT 1").await;
    sqlx::query_scalar(sqlx::AssertSqlSafe(query.to_owned())).fetch_one(&mut owner).await.unwrap()
}

/// Creates workspace `slug` in `tenant` with an activity row, a credential and a catalog;
/// returns its id.
async fn workspace(t: &TestDb, tenant: &str, slug: &str) -> Uuid {
    let id: Uuid =
        cli(&t.url, &["workspace", "create", "--tenant", tenant, slug]).await[0].split('\t').nth(1).unwrap().parse().unwrap();
    sql(
        t,
        &format!(
            "INSERT INTO activity (tenant_id, occurred_at, id, workspace_id, actor_kind, actor_id, tool, source, outcome, duration_ms)
             SELECT tenant_id, now(), gen_random_uuid(), id, 'token', 'tok', 'search_tools', 'mcp', 'ok', 1 FROM workspaces WHERE id = '{id}';
             INSERT INTO credentials (tenant_id, workspace_id, connector_id, owner, key_id, envelope, fields, updated_by)
             SELECT tenant_id, id, 'crm', 'shared', 'k1', 'v1.k1.n.c', '{{}}', 'cli' FROM workspaces WHERE id = '{id}';
             INSERT INTO connector_catalogs (tenant_id, workspace_id, connector_id, config_key, tools, fetched_at)
             SELECT tenant_id, id, 'crm', 'key', '[]', now() FROM workspaces WHERE id = '{id}';"
        ),
    )
    .await;
    id
}

async fn archive(t: &TestDb, id: Uuid) {
    sql(t, &format!("UPDATE workspaces SET status = 'archived' WHERE id = '{id}'")).await;
}

/// Rows left anywhere for workspace `id`.
async fn leftovers(t: &TestDb, id: Uuid) -> i64 {
    let mut n = 0;
    for table in ["workspace_versions", "activity", "credentials", "connector_catalogs"] {
        n += count(t, &format!("SELECT count(*) FROM {table} WHERE workspace_id = '{id}'")).await;
    }
    n + count(t, &format!("SELECT count(*) FROM workspaces WHERE id = '{id}'")).await
}

async fn setup(t: &TestDb) -> Uuid {
    let line = cli(&t.url, &["tenant", "create", "acme", "--name", "Acme", "--owner-email", "alice@example.test"]).await;
    cli(&t.url, &["tenant", "create", "other", "--name", "Other"]).await;
    line[0].split('\t').nth(1).unwrap().parse().unwrap()
}

#[tokio::test]
async fn reaps_are_refused_until_archived_and_settled_and_win_once_across_three_processes() {
    let t = TestDb::new().await;
    let tenant = setup(&t).await;
    let machine = provision(&t.url, "acme").await;
    let foreign = workspace(&t, "other", "elsewhere").await;
    archive(&t, foreign).await;
    let served = [
        Served::start(gatehouse(Some(&t.url))).await,
        Served::start(gatehouse(Some(&t.url))).await,
        Served::start(gatehouse(Some(&t.url))).await,
    ];
    let first = dev_sign_in(&served[0], "alice@example.test").await;
    let browsers: Vec<_> =
        served.iter().map(|s| common::browser::Browser { client: first.client.clone(), base: s.base.clone() }).collect();

    // Another tenant's workspace: 404, and it stays.
    let r = browsers[0].write(Method::POST, "/api/v1/tenants/other/workspaces/elsewhere/reap", json!({})).await;
    assert_eq!(r.status(), 404);
    let e = gatehouse::reap::reap(
        &t.db,
        &std::env::temp_dir().join("gatehouse-no-snapshots"),
        TenantId(tenant),
        &Audit::cli(),
        "elsewhere",
    )
    .await
    .unwrap_err();
    assert_eq!(e.status(), 404);
    assert_eq!(count(&t, &format!("SELECT count(*) FROM workspaces WHERE id = '{foreign}'")).await, 1);

    let mut previous: Option<Uuid> = None;
    for round in 1..=3 {
        // The same slug every round: each reap releases it.
        let id = workspace(&t, "acme", "main").await;
        assert_ne!(Some(id), previous);
        previous = Some(id);
        let r = browsers[1].write(Method::POST, "/api/v1/tenants/acme/workspaces/main/reap", json!({})).await;
        assert_eq!(r.status(), 409, "round {round}: an active workspace");
        assert_eq!(r.json::<Value>().await.unwrap()["code"], "invalid_transition");

        archive(&t, id).await;
        let pending = Uuid::new_v4();
        sql(
            &t,
            &format!(
                "INSERT INTO copies (tenant_id, move_id, copy_ref, role, workspace_id, kind, epoch_read, lease_until)
                 VALUES ('{tenant}', '{pending}', 'workspace:{id}', 'source', '{id}', 'snapshot_export', 0, now() + interval '5 minutes'),
                        ('{tenant}', '{pending}', 'snapshot:s{round}.snap', 'destination', '{id}', 'snapshot_export', 0, now() + interval '5 minutes')"
            ),
        )
        .await;
        let r = browsers[2].write(Method::POST, "/api/v1/tenants/acme/workspaces/main/reap", json!({})).await;
        assert_eq!(r.status(), 412, "round {round}: a copy is pending");
        assert_eq!(r.json::<Value>().await.unwrap()["code"], "reap_retry_later");
        assert_eq!(count(&t, &format!("SELECT count(*) FROM workspaces WHERE id = '{id}' AND reap_claimed_at IS NULL")).await, 1);

        sql(
            &t,
            &format!(
                "UPDATE copies SET state = CASE role WHEN 'source' THEN 'eligible' ELSE 'done' END WHERE move_id = '{pending}'"
            ),
        )
        .await;
        let calls = browsers.iter().map(|b| async move {
            let r = b.write(Method::POST, "/api/v1/tenants/acme/workspaces/main/reap", json!({})).await;
            let status = r.status().as_u16();
            (status, r.json::<Value>().await.unwrap())
        });
        let answers = futures::future::join_all(calls).await;
        let won: Vec<_> = answers.iter().filter(|(s, _)| *s == 200).collect();
        assert_eq!(won.len(), 1, "round {round}: {answers:?}");
        assert_eq!(won[0].1["workspace_id"], id.to_string());
        for (status, body) in &answers {
            assert!(
                *status == 200 || (*status == 409 && body["code"] == "reap_in_progress") || *status == 404,
                "round {round}: {status} {body}"
            );
        }
        assert_eq!(count(&t, &format!("SELECT count(*) FROM workspace_tombstones WHERE workspace_id = '{id}'")).await, 1);
        assert_eq!(leftovers(&t, id).await, 0, "round {round}: nothing of the workspace is left");
        assert_eq!(
            count(&t, &format!("SELECT count(*) FROM copies WHERE workspace_id = '{id}' AND state <> 'done'")).await,
            0,
            "round {round}: every copy settled"
        );
        // The reaped endpoint answers 404.
        let r = mcp_post(&format!("{}/t/acme/w/main/mcp", served[round % 3].base), &machine, "tools/list", json!({})).await;
        assert_eq!(r.status(), 404, "round {round}");
    }
    let log = admin_log_text(&t).await;
    assert_eq!(log.matches("\"action\":\"workspace.reap\"").count(), 3, "one reap row per round");
    assert_eq!(log.matches("\"action\":\"workspace.reap_claim\"").count(), 3, "one claim per round");
    assert_eq!(count(&t, "SELECT count(*) FROM workspace_tombstones").await, 3);
    // The slug is free again after the last round, too.
    workspace(&t, "acme", "main").await;
}

#[tokio::test]
async fn an_interrupted_reap_is_finished_by_the_next_call_or_by_the_sweep() {
    let t = TestDb::new().await;
    let tenant = TenantId(setup(&t).await);
    let audit = Audit::cli();
    let (resumed, live, swept) =
        (workspace(&t, "acme", "resumed").await, workspace(&t, "acme", "live").await, workspace(&t, "acme", "swept").await);
    for id in [resumed, live, swept] {
        archive(&t, id).await;
    }
    // Configuration versions go only with a claimed reap (the database refuses otherwise).
    let refused =
        t.db.serializable(Scope::Tenant(tenant), move |conn, _| {
            Box::pin(async move {
                sqlx::query("DELETE FROM workspace_versions WHERE tenant_id = $1 AND workspace_id = $2")
                    .bind(tenant)
                    .bind(live)
                    .execute(conn)
                    .await?;
                Ok(())
            })
        })
        .await
        .unwrap_err();
    assert_eq!(refused.constraint(), Some("reap_claim_required"), "{refused:?}");

    // Claims left by replicas that crashed an hour ago; one claim that is fresh.
    sql(
        &t,
        &format!(
            "UPDATE workspaces SET reap_claimed_at = now() - interval '1 hour', reap_owner = 'replica:crashed' WHERE id IN ('{resumed}', '{swept}');
             UPDATE workspaces SET reap_claimed_at = now(), reap_owner = 'replica:alive' WHERE id = '{live}';"
        ),
    )
    .await;
    let e = gatehouse::reap::reap(&t.db, &std::env::temp_dir().join("gatehouse-no-snapshots"), tenant, &audit, "live")
        .await
        .unwrap_err();
    assert_eq!((e.status().as_u16(), e.code()), (409, "reap_in_progress"), "a live claim is left to its owner");
    let done = gatehouse::reap::reap(&t.db, &std::env::temp_dir().join("gatehouse-no-snapshots"), tenant, &audit, "resumed")
        .await
        .unwrap();
    assert_eq!(done.workspace_id, resumed);
    assert_eq!(leftovers(&t, resumed).await, 0);

    // The sweep of a running replica finishes the other abandoned one, once.
    let served = Served::start(gatehouse(Some(&t.url))).await;
    let finished = eventually(Duration::from_secs(90), || async {
        count(&t, &format!("SELECT count(*) FROM workspace_tombstones WHERE workspace_id = '{swept}'")).await == 1
    })
    .await;
    assert!(finished, "the sweep finishes the abandoned reap: {}", served.logs());
    assert_eq!(leftovers(&t, swept).await, 0);
    assert_eq!(leftovers(&t, live).await, 5, "the live claim is untouched");
    let log = admin_log_text(&t).await;
    assert_eq!(log.matches("\"action\":\"workspace.reap\"").count(), 2);
    assert!(log.contains("system:reap_sweep"));
    // Freed slugs are taken again.
    workspace(&t, "acme", "resumed").await;
    workspace(&t, "acme", "swept").await;
}

/// A snapshot copy of the workspace not yet settled (a claimed orphan, or one retained) is a
/// file in the snapshot directory: the reap removes the file and settles its row; a finished
/// export (`done`) is a backup in its own right and stays (erasure reaches it through keys).
#[tokio::test]
async fn a_reap_removes_the_files_of_unsettled_snapshot_copies() {
    let t = TestDb::new().await;
    let tenant = setup(&t).await;
    let id = workspace(&t, "acme", "snapped").await;
    archive(&t, id).await;
    let dir = std::env::temp_dir().join(format!("gatehouse-snapshots-{}", Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    for (file, state) in [("orphan.snap", "retained"), ("kept.snap", "done")] {
        std::fs::write(dir.as_path().join(file), b"sealed").unwrap();
        sql(
            &t,
            &format!(
                "INSERT INTO copies (tenant_id, move_id, copy_ref, role, workspace_id, kind, state, epoch_read, lease_until)
                 VALUES ('{tenant}', gen_random_uuid(), 'snapshot:{file}', 'destination', '{id}', 'snapshot_export', '{state}', 0, now())"
            ),
        )
        .await;
    }
    let done = gatehouse::reap::reap(&t.db, dir.as_path(), TenantId(tenant), &Audit::cli(), "snapped").await.unwrap();
    assert_eq!(done.deleted["snapshot_files"], 1, "{:?}", done.deleted);
    assert!(!dir.as_path().join("orphan.snap").exists(), "the unsettled snapshot's file is gone");
    assert!(dir.as_path().join("kept.snap").exists(), "a finished export stays");
    assert_eq!(count(&t, &format!("SELECT count(*) FROM copies WHERE workspace_id = '{id}' AND state <> 'done'")).await, 0);
    assert_eq!(leftovers(&t, id).await, 0);
}

/// The catalog's workspace-owned tables: every table (but `workspaces`) with a `workspace_id`
/// column, or with a foreign key to `workspaces` or `mcp_grants`, and how its rows name their
/// workspace.
async fn catalog_tables(t: &TestDb) -> std::collections::BTreeMap<String, Rows> {
    let mut owner = t.owner_conn().await;
    let rows: Vec<(String, bool)> = sqlx::query_as(
        "SELECT c.relname::text,
                EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attname = 'workspace_id' AND NOT a.attisdropped)
           FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
          WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p') AND c.relname <> 'workspaces'
            AND (EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attname = 'workspace_id' AND NOT a.attisdropped)
                 OR EXISTS (SELECT 1 FROM pg_constraint k WHERE k.conrelid = c.oid AND k.contype = 'f'
                              AND k.confrelid IN ('workspaces'::regclass, 'mcp_grants'::regclass)))",
    )
    .fetch_all(&mut owner)
    .await
    .unwrap();
    rows.into_iter().map(|(name, column)| (name, if column { Rows::Column } else { Rows::McpGrant })).collect()
}

#[tokio::test]
async fn the_registry_of_workspace_tables_names_every_table_of_the_catalog() {
    let t = TestDb::new().await;
    let catalog = catalog_tables(&t).await;
    assert!(catalog.contains_key("credentials") && catalog.get("mcp_codes") == Some(&Rows::McpGrant), "{catalog:?}");
    let registry: std::collections::BTreeMap<String, Rows> = TABLES.iter().map(|t| (t.name.to_owned(), t.rows)).collect();
    assert_eq!(registry.len(), TABLES.len(), "a table is registered twice");
    let missing: Vec<&String> = catalog.keys().filter(|name| !registry.contains_key(*name)).collect();
    assert!(missing.is_empty(), "workspace-owned tables missing from workspaces::tables::TABLES: {missing:?}");
    assert_eq!(registry, catalog, "every registered table exists, and names its workspace as registered");
}
