//! Row-level security, the application role, tenants and the admin log.

mod common;

use common::TestDb;
use gatehouse::{
    admin_log::Audit,
    db::Scope,
    error::Error,
    kv,
    tenants::{self, Status, TenantId},
};
use serde_json::json;
use sqlx::{Connection, Executor, Row};

/// Tables that hold tenant rows but, by design, not `tenant_id` first in the primary key:
/// the admin log also holds platform rows (null tenant), so it keys on its time-ordered id.
/// Tables whose rows may belong to no tenant (platform rows have a null tenant_id, which a
/// primary key column cannot hold): they key on a time-ordered id and lead an index with
/// tenant_id instead.
const PK_EXCEPTIONS: &[&str] = &["admin_log", "ops_failures"];

async fn tenant_tables(conn: &mut sqlx::PgConnection) -> Vec<String> {
    sqlx::query_scalar(
        "SELECT c.relname::text FROM pg_attribute a
         JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace
         WHERE a.attname = 'tenant_id' AND NOT a.attisdropped AND c.relkind IN ('r', 'p') AND n.nspname = 'public'
         ORDER BY 1",
    )
    .fetch_all(conn)
    .await
    .unwrap()
}

#[tokio::test]
async fn every_tenant_table_has_forced_rls_and_tenant_first_keys() {
    let t = TestDb::new().await;
    let mut conn = t.owner_conn().await;
    let tables = tenant_tables(&mut conn).await;
    assert!(tables.len() >= 3, "expected the foundation's tenant tables, found {tables:?}");
    for table in tables.iter().map(String::as_str).chain(["tenants"]) {
        let row =
            sqlx::query("SELECT relrowsecurity, relforcerowsecurity FROM pg_class WHERE relname = $1 AND relkind IN ('r','p')")
                .bind(table)
                .fetch_one(&mut conn)
                .await
                .unwrap();
        assert!(row.get::<bool, _>(0), "{table}: row-level security is not enabled");
        assert!(row.get::<bool, _>(1), "{table}: row-level security is not forced");
        let policies: i64 = sqlx::query_scalar("SELECT count(*) FROM pg_policies WHERE tablename = $1")
            .bind(table)
            .fetch_one(&mut conn)
            .await
            .unwrap();
        assert!(policies > 0, "{table}: no policy");
    }
    for table in &tables {
        let first: Option<String> = sqlx::query_scalar(
            "SELECT a.attname::text FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid
             JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = i.indkey[0]
             WHERE c.relname = $1 AND i.indisprimary",
        )
        .bind(table)
        .fetch_optional(&mut conn)
        .await
        .unwrap();
        if !PK_EXCEPTIONS.contains(&table.as_str()) {
            assert_eq!(first.as_deref(), Some("tenant_id"), "{table}: tenant_id must lead the primary key");
        }
    }
}

#[tokio::test]
async fn the_application_role_owns_nothing_and_cannot_bypass_rls() {
    let t = TestDb::new().await;
    let row = sqlx::query("SELECT current_user::text, rolsuper, rolbypassrls FROM pg_roles WHERE rolname = current_user")
        .fetch_one(t.db.pool())
        .await
        .unwrap();
    assert_eq!(row.get::<String, _>(0), "gatehouse_app");
    assert!(!row.get::<bool, _>(1) && !row.get::<bool, _>(2));
    let owned: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM pg_class WHERE relowner = (SELECT oid FROM pg_roles WHERE rolname = 'gatehouse_app')",
    )
    .fetch_one(t.db.pool())
    .await
    .unwrap();
    assert_eq!(owned, 0);
}

/// Seeds one row of `tenant` in every tenant table, in platform context.
async fn seed(conn: &mut sqlx::PgConnection, tenant: TenantId, tag: &str) {
    let mut tx = conn.begin().await.unwrap();
    tx.execute("SELECT set_config('gatehouse.platform', 'on', true)").await.unwrap();
    sqlx::query(
        "INSERT INTO members (tenant_id, id, issuer, subject, role) VALUES ($1, gen_random_uuid(), 'https://idp', $2, 'member')",
    )
    .bind(tenant)
    .bind(tag)
    .execute(&mut *tx)
    .await
    .unwrap();
    sqlx::query("INSERT INTO kv_entries (tenant_id, key, value) VALUES ($1, $2, '1')")
        .bind(tenant)
        .bind(tag)
        .execute(&mut *tx)
        .await
        .unwrap();
    sqlx::query(
        "INSERT INTO admin_log (id, tenant_id, actor, action, target) VALUES (gen_random_uuid(), $1, 'test', 'seed', $2)",
    )
    .bind(tenant)
    .bind(tag)
    .execute(&mut *tx)
    .await
    .unwrap();
    for sql in [
        "INSERT INTO invitations (tenant_id, id, email, role, invited_by, expires_at) VALUES ($1, gen_random_uuid(), $2 || '@x.test', 'member', 'test', now() + interval '1 day')",
        "INSERT INTO service_credentials (tenant_id, id, client_id, secret_hash, name, created_by) VALUES ($1, gen_random_uuid(), 'gsc_' || $2, convert_to($2, 'UTF8'), 'n', 'test')",
        "INSERT INTO access_tokens (tenant_id, id, token_hash, prefix, name, created_by) VALUES ($1, gen_random_uuid(), convert_to($2, 'UTF8'), 'gth_', 'n', 'test')",
        "INSERT INTO token_quotas (tenant_id, live) SELECT $1, length($2)",
        "INSERT INTO permission_overrides (tenant_id, role, permission, allowed) SELECT $1, 'member', 'activity_access', $2 <> ''",
        "INSERT INTO workspaces (tenant_id, id, slug, name, bound_version) VALUES ($1, $1, 'ws-' || $2, 'w', 1)",
        "INSERT INTO workspace_versions (tenant_id, workspace_id, version, document, digest, created_by) VALUES ($1, $1, 1, '{}', $2, 'test')",
        "INSERT INTO activity (tenant_id, occurred_at, id, workspace_id, actor_kind, actor_id, tool, source, outcome, duration_ms)
         VALUES ($1, now(), gen_random_uuid(), $1, 'token', $2, 't', 'mcp', 'ok', 1)",
        "INSERT INTO result_stash (tenant_id, id, workspace_id, actor_id, address, body, expires_at)
         VALUES ($1, gen_random_uuid(), $1, $2, 'c.t', '{}', now() + interval '1 hour')",
        "INSERT INTO connector_catalogs (tenant_id, workspace_id, connector_id, config_key, tools) VALUES ($1, $1, $2, 'k', '[]')",
        "INSERT INTO agent_subscriptions (tenant_id, workspace_id, listener, uri, expires_at)
         VALUES ($1, $1, sha256(convert_to($2, 'UTF8')), 'test://' || $2, now() + interval '1 day')",
        "INSERT INTO agent_log_levels (tenant_id, workspace_id, listener, level, expires_at)
         VALUES ($1, $1, sha256(convert_to($2, 'UTF8')), 'info', now() + interval '1 day')",
        "INSERT INTO tool_pins (tenant_id, workspace_id, connector_id, tool_name, digest, definition) VALUES ($1, $1, $2, 't', 'd', '{}')",
        "INSERT INTO approvals (tenant_id, id, workspace_id, actor_kind, actor_id, connector, tool, args_digest, policy_version, expires_at)
         VALUES ($1, gen_random_uuid(), $1, 'token', $2, 'c', 't', 'sha256:' || repeat('0', 64), 1, now() + interval '15 minutes')",
        "INSERT INTO credentials (tenant_id, workspace_id, connector_id, owner, key_id, envelope, fields, updated_by)
         VALUES ($1, $1, $2, 'shared', 'k1', 'v1.k1.x.y', '[]', 'test')",
        "INSERT INTO connect_links (tenant_id, id, workspace_id, connector_id, email, token_hash, created_by, expires_at)
         VALUES ($1, gen_random_uuid(), $1, $2, $2 || '@x.test', convert_to($2 || 'link', 'UTF8'), 'test', now() + interval '1 day')",
        "INSERT INTO mail_outbox (tenant_id, id, to_address, subject, body) VALUES ($1, gen_random_uuid(), $2 || '@x.test', 's', 'b')",
        "INSERT INTO oauth_flows (tenant_id, state_hash, workspace_id, connector_id, owner, link_id, verifier, client_id, token_endpoint, expires_at)
         VALUES ($1, convert_to($2, 'UTF8'), $1, $2, 'shared', gen_random_uuid(), 'v1.k1.x.y', 'c', 'http://as/token', now() + interval '15 minutes')",
        "INSERT INTO oauth_grants (tenant_id, workspace_id, connector_id, owner, client_id, token_endpoint, connected_by)
         VALUES ($1, $1, $2, 'shared', 'c', 'http://as/token', 'test')",
        "INSERT INTO oauth_clients (tenant_id, workspace_id, connector_id, issuer, client_id) VALUES ($1, $1, $2, 'http://as', 'c')",
        "INSERT INTO oauth_revocations (tenant_id, id, workspace_id, connector_id, owner, endpoint, client_id, client_auth, envelope)
         VALUES ($1, gen_random_uuid(), $1, $2, 'shared', 'http://as/revoke', 'c', 'none', 'v1.k1.x.y')",
        "INSERT INTO ops_failures (id, tenant_id, workspace_id, operation, stage, code, message, fingerprint, at)
         VALUES (gen_random_uuid(), $1, $1, 'downstream.call', 'remote_mcp', 'timeout', $2, repeat('0', 64), now())",
        "INSERT INTO mcp_clients (tenant_id, id, client_id, kind, name, redirect_uris)
         VALUES ($1, $1, 'gmc_' || $2, 'registered', 'n', ARRAY['http://127.0.0.1/cb'])",
        "INSERT INTO mcp_grants (tenant_id, id, client_ref, member_id, workspace_id, resource, scope)
         VALUES ($1, $1, $1, gen_random_uuid(), $1, 'http://gh/t/' || $2 || '/w/main/mcp', 'mcp')",
        "INSERT INTO mcp_codes (tenant_id, code_hash, grant_id, redirect_uri, code_challenge, expires_at)
         VALUES ($1, convert_to($2 || 'code', 'UTF8'), $1, 'http://127.0.0.1/cb', 'c', now() + interval '1 minute')",
        "INSERT INTO mcp_tokens (tenant_id, token_hash, grant_id, kind, expires_at)
         VALUES ($1, convert_to($2 || 'access', 'UTF8'), $1, 'access', now() + interval '1 hour')",
        "INSERT INTO ops_findings (tenant_id, id, kind, subject, operation, code, occurrences, first_seen, last_seen, last_message)
         VALUES ($1, gen_random_uuid(), 'recurring', repeat('0', 64), 'downstream.call', 'timeout', 1, now(), now(), $2)",
        "INSERT INTO ops_suppress_rules (tenant_id, id, code, reason, expires_at, created_by)
         VALUES ($1, gen_random_uuid(), 'timeout', $2, now() + interval '1 day', 'test')",
        "INSERT INTO report_viewers (tenant_id, role_name, granted_by) VALUES ($1, 'reader_' || $2, 'test')",
        "INSERT INTO blueprints (tenant_id, id, slug, name, created_by) VALUES ($1, $1, 'bp-' || $2, 'b', 'test')",
        "INSERT INTO blueprint_versions (tenant_id, blueprint_id, version, document, digest, created_by) VALUES ($1, $1, 1, '{}', $2, 'test')",
        "INSERT INTO copies (tenant_id, move_id, copy_ref, role, workspace_id, kind, epoch_read, lease_until)
         VALUES ($1, gen_random_uuid(), 'workspace:' || $2, 'source', $1, 'fork', 0, now() + interval '5 minutes')",
        "INSERT INTO subject_keys (tenant_id, subject, key_id, envelope) VALUES ($1, $2, 'k1', 'v1.k1.x.y')",
        "INSERT INTO erasure_receipts (tenant_id, id, workspace_id, subject_digest, epoch, counts, erased_by)
         VALUES ($1, gen_random_uuid(), $1, $2, 1, '{}', 'test')",
        "INSERT INTO idempotency_keys (tenant_id, key, request_digest) VALUES ($1, $2, convert_to($2, 'UTF8'))",
        "INSERT INTO workspace_tombstones (tenant_id, workspace_id, slug, reaped_by) VALUES ($1, gen_random_uuid(), 'gone-' || $2, 'test')",
        "INSERT INTO peer_bindings (tenant_id, workspace_id, connector_id, target_workspace_id, created_by) VALUES ($1, $1, $2, $1, 'test')",
        "INSERT INTO member_fences (tenant_id, issuer, subject, raised_at) VALUES ($1, 'https://idp', $2, now())",
        "INSERT INTO scim_tokens (tenant_id, id, token_hash, prefix, name, created_by)
         VALUES ($1, gen_random_uuid(), convert_to($2 || 'scim', 'UTF8'), 'gsm_', 'n', 'test')",
        "INSERT INTO scim_users (tenant_id, id, user_name_key, attrs) VALUES ($1, $1, $2, '{}')",
        "INSERT INTO scim_groups (tenant_id, id, display_name_key, attrs) VALUES ($1, $1, $2, '{}')",
        "INSERT INTO scim_group_members (tenant_id, group_id, user_id, entry) VALUES ($1, $1, $1, jsonb_build_object('value', $2))",
        "INSERT INTO sso_connections (tenant_id, id, name, issuer, client_id, auth_method, key_id, envelope, groups_claim,
                                      role_mapping, default_role, jit, created_by)
         VALUES ($1, $1, 'idp', 'https://idp.' || $2, 'c', 'client_secret_basic', 'k1', 'v1.k1.x.y', 'groups', '{}', 'member', 'create', 'test')",
        "INSERT INTO sso_domains (domain, tenant_id, connection_id) VALUES ($2 || '.example', $1, $1)",
        "INSERT INTO impersonations (tenant_id, id, staff_issuer, staff_subject, staff_email, reason, minutes, approval_required)
         VALUES ($1, gen_random_uuid(), 'https://idp', $2, $2 || '@staff.test', 'support', 30, true)",
        "INSERT INTO impersonation_settings (tenant_id, approval_required) VALUES ($1, length($2) > 0)",
        "INSERT INTO tenant_moves (tenant_id, id, direction, export_id, manifest_digest)
         VALUES ($1, gen_random_uuid(), 'in', gen_random_uuid(), repeat('0', 63) || length($2))",
        "WITH r AS (INSERT INTO replicas (id, lease_expires_at) VALUES (gen_random_uuid(), now()) RETURNING id)
         INSERT INTO replica_acks (tenant_id, replica_id, epoch) SELECT $1, id, length($2) FROM r",
        "INSERT INTO quota_limits (tenant_id, id, name, per, class, daily, created_by) VALUES ($1, $1, 'l-' || $2, 'tenant', 'any', 10, 'test')",
        "INSERT INTO quota_windows (tenant_id, limit_id, subject, kind, span_ms, window_no, budget, granted)
         VALUES ($1, $1, $2, 'daily', 86400000, 1, 10, 1)",
        "INSERT INTO quota_slots (tenant_id, limit_id, subject, replica_id, held, expires_at, seq)
         VALUES ($1, $1, $2, gen_random_uuid(), 1, now() + interval '10 seconds', 1)",
    ] {
        sqlx::query(sql).bind(tenant).bind(tag).execute(&mut *tx).await.unwrap();
    }
    tx.commit().await.unwrap();
}

#[tokio::test]
async fn in_tenant_a_no_row_of_tenant_b_is_visible_in_any_table() {
    let t = TestDb::new().await;
    let a = tenants::create(&t.db, &Audit::cli(), "tenant-a", "A").await.unwrap().id;
    let b = tenants::create(&t.db, &Audit::cli(), "tenant-b", "B").await.unwrap().id;
    let mut owner = t.owner_conn().await;
    seed(&mut owner, a, "a").await;
    seed(&mut owner, b, "b").await;
    let tables = tenant_tables(&mut owner).await;

    // Seeding must cover every tenant table, or a new table would pass this test unseeded.
    for table in &tables {
        let mut tx = owner.begin().await.unwrap();
        tx.execute("SELECT set_config('gatehouse.platform', 'on', true)").await.unwrap();
        let n: i64 = sqlx::query_scalar(AssertSqlSafe(format!("SELECT count(*) FROM {table} WHERE tenant_id = $1")))
            .bind(b)
            .fetch_one(&mut *tx)
            .await
            .unwrap();
        assert!(n > 0, "{table}: seed() must insert a row for tenant B");
        tx.rollback().await.unwrap();
    }

    for table in tables {
        let table = table.as_str();
        let (foreign, own, total) =
            t.db.serializable(Scope::Tenant(a), |conn, _| {
                Box::pin(async move {
                    let q = |sql: String| sqlx::query_scalar::<_, i64>(AssertSqlSafe(sql));
                    let foreign =
                        q(format!("SELECT count(*) FROM {table} WHERE tenant_id = $1")).bind(b).fetch_one(&mut *conn).await?;
                    let own =
                        q(format!("SELECT count(*) FROM {table} WHERE tenant_id = $1")).bind(a).fetch_one(&mut *conn).await?;
                    let total = q(format!("SELECT count(*) FROM {table}")).fetch_one(&mut *conn).await?;
                    Ok((foreign, own, total))
                })
            })
            .await
            .unwrap();
        assert_eq!(foreign, 0, "{table}: tenant B's rows are visible to tenant A");
        assert!(own > 0, "{table}: tenant A cannot see its own rows");
        assert_eq!(total, own, "{table}: rows of other tenants are visible");

        // Without any context, nothing is visible at all.
        let mut tx = t.db.pool().begin().await.unwrap();
        let none: i64 =
            sqlx::query_scalar(AssertSqlSafe(format!("SELECT count(*) FROM {table}"))).fetch_one(&mut *tx).await.unwrap();
        assert_eq!(none, 0, "{table}: rows visible without a tenant context");
        tx.rollback().await.unwrap();
    }

    // Writing a row for tenant B from tenant A's context is refused by the policy.
    let err =
        t.db.serializable(Scope::Tenant(a), |conn, _| {
            Box::pin(async move {
                sqlx::query("INSERT INTO kv_entries (tenant_id, key, value) VALUES ($1, 'x', '1')")
                    .bind(b)
                    .execute(&mut *conn)
                    .await?;
                Ok(())
            })
        })
        .await
        .unwrap_err();
    assert_eq!(err.sqlstate().as_deref(), Some("42501"), "{err:?}");
    // And an update cannot move A's row to B.
    let err =
        t.db.serializable(Scope::Tenant(a), |conn, _| {
            Box::pin(async move {
                sqlx::query("UPDATE kv_entries SET tenant_id = $1").bind(b).execute(&mut *conn).await?;
                Ok(())
            })
        })
        .await
        .unwrap_err();
    assert_eq!(err.sqlstate().as_deref(), Some("42501"), "{err:?}");
}

use sqlx::AssertSqlSafe;

#[tokio::test]
async fn admin_log_rejects_update_and_delete() {
    let t = TestDb::new().await;
    let a = tenants::create(&t.db, &Audit::cli(), "tenant-a", "A").await.unwrap().id;
    kv::set(&t.db, a, &Audit::cli(), &kv::Key::parse("k").unwrap(), &kv::BoundedValue::parse(json!(1)).unwrap(), None)
        .await
        .unwrap();
    for sql in ["UPDATE admin_log SET actor = 'forged'", "DELETE FROM admin_log", "TRUNCATE admin_log"] {
        let err =
            t.db.serializable(Scope::Tenant(a), |conn, _| {
                Box::pin(async move { conn.execute(sql).await.map(|_| ()).map_err(Error::from) })
            })
            .await
            .unwrap_err();
        assert_eq!(err.sqlstate().as_deref(), Some("42501"), "{sql}: {err:?}");
    }
    let rows =
        t.db.serializable(Scope::Tenant(a), |conn, _| Box::pin(gatehouse::admin_log::list(conn, Some(a), None, 10)))
            .await
            .unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].actor, "cli");
    assert_eq!(rows[0].action, "kv.set");
}

#[tokio::test]
async fn tenants_are_validated_and_every_change_is_logged_once() {
    let t = TestDb::new().await;
    let audit = Audit::cli();
    for bad in ["ab", "-abc", "abc-", "ABC", "a_b", "a b", &"a".repeat(64)] {
        let err = tenants::create(&t.db, &audit, bad, "x").await.unwrap_err();
        assert_eq!(err.code(), "invalid_slug", "{bad}");
    }
    assert_eq!(tenants::create(&t.db, &audit, "abc", "  ").await.unwrap_err().code(), "invalid_name");
    let acme = tenants::create(&t.db, &audit, "acme", "  Acme   Inc ").await.unwrap();
    assert_eq!(acme.name, "Acme Inc");
    assert_eq!(acme.status, Status::Active);
    let dup = tenants::create(&t.db, &audit, "acme", "Other").await.unwrap_err();
    assert!(matches!(dup, Error::Conflict { code: "slug_taken", .. }), "{dup:?}");
    assert_eq!(tenants::set_status(&t.db, &audit, "acme", Status::Suspended).await.unwrap().status, Status::Suspended);
    assert_eq!(tenants::set_status(&t.db, &audit, "acme", Status::Suspended).await.unwrap().status, Status::Suspended);
    assert_eq!(tenants::set_status(&t.db, &audit, "acme", Status::Active).await.unwrap().status, Status::Active);
    assert_eq!(tenants::set_status(&t.db, &audit, "nope", Status::Active).await.unwrap_err().code(), "not_found");

    let mut owner = t.owner_conn().await;
    let mut tx = owner.begin().await.unwrap();
    tx.execute("SELECT set_config('gatehouse.platform', 'on', true)").await.unwrap();
    let actions: Vec<String> = sqlx::query_scalar("SELECT action FROM admin_log ORDER BY id").fetch_all(&mut *tx).await.unwrap();
    // One create (the refused duplicate and invalid ones wrote nothing), two real status changes
    // (the repeated suspend changed nothing).
    assert_eq!(actions, ["tenant.create", "tenant.set_status", "tenant.set_status"]);
    let tenants_rows: i64 = sqlx::query_scalar("SELECT count(*) FROM tenants").fetch_one(&mut *tx).await.unwrap();
    assert_eq!(tenants_rows, 1);
}

/// Every change a replica could have derived a cached answer from moves the tenant's epoch
/// (and only that tenant's); using a credential does not. The replica caches rely on it.
#[tokio::test]
async fn epochs_move_with_every_change_replicas_derive_answers_from() {
    let t = TestDb::new().await;
    let a = tenants::create(&t.db, &Audit::cli(), "tenant-a", "A").await.unwrap().id;
    let b = tenants::create(&t.db, &Audit::cli(), "tenant-b", "B").await.unwrap().id;
    let mut conn = t.owner_conn().await;
    seed(&mut conn, a, "a").await;
    seed(&mut conn, b, "b").await;
    conn.execute("SELECT set_config('gatehouse.platform', 'on', false)").await.unwrap();
    let epoch = |id: TenantId| sqlx::query_scalar::<_, i64>("SELECT epoch FROM tenants WHERE id = $1").bind(id);
    let b_before = epoch(b).fetch_one(&mut conn).await.unwrap();
    let changes = [
        ("UPDATE access_tokens SET revoked_at = now() WHERE tenant_id = $1", true),
        ("UPDATE access_tokens SET last_used_at = now() WHERE tenant_id = $1", false),
        ("UPDATE service_credentials SET revoked_at = now() WHERE tenant_id = $1", true),
        ("UPDATE service_credentials SET last_used_at = now(), name = 'x' WHERE tenant_id = $1", false),
        ("UPDATE members SET role = 'admin' WHERE tenant_id = $1", true),
        ("DELETE FROM members WHERE tenant_id = $1", true),
        (
            "INSERT INTO permission_overrides (tenant_id, role, permission, allowed) VALUES ($1, 'admin', 'activity_access', false)",
            true,
        ),
        ("UPDATE workspaces SET bound_version = 1, revision = revision + 1 WHERE tenant_id = $1", true),
        ("UPDATE connector_catalogs SET fetched_at = now() WHERE tenant_id = $1", true),
        ("UPDATE tenants SET status = 'suspended' WHERE id = $1", true),
        ("UPDATE tenants SET name = 'renamed' WHERE id = $1", false),
        ("INSERT INTO kv_entries (tenant_id, key, value) VALUES ($1, 'another', '1')", false),
    ];
    for (sql, moves) in changes {
        let before = epoch(a).fetch_one(&mut conn).await.unwrap();
        sqlx::query(sql).bind(a).execute(&mut conn).await.unwrap();
        let after = epoch(a).fetch_one(&mut conn).await.unwrap();
        assert_eq!(after > before, moves, "{sql}: epoch {before} -> {after}");
    }
    assert_eq!(epoch(b).fetch_one(&mut conn).await.unwrap(), b_before, "another tenant's epoch never moves");
}

/// Concurrent epoch reads share statements, and each still sees every change committed before
/// it was asked for: a bump committed while hundreds of reads are in flight is seen by every
/// read asked for after the commit returned, in every round.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn shared_epoch_reads_are_never_older_than_the_request() {
    use std::sync::atomic::Ordering;
    let t = TestDb::new().await;
    let a = tenants::create(&t.db, &Audit::cli(), "tenant-a", "A").await.unwrap().id;
    let b = tenants::create(&t.db, &Audit::cli(), "tenant-b", "B").await.unwrap().id;
    let mut owner = t.owner_conn().await;
    owner.execute("SELECT set_config('gatehouse.platform', 'on', false)").await.unwrap();
    let epoch_of = |tenant: TenantId| {
        let db = t.db.clone();
        async move { gatehouse::epochs::read(&db, tenant).await.unwrap().unwrap() }
    };
    for round in 0..5 {
        // Background load on both tenants keeps rounds of reads running.
        let load: Vec<_> = (0..200)
            .map(|i| {
                let db = t.db.clone();
                let tenant = if i % 2 == 0 { a } else { b };
                tokio::spawn(async move { gatehouse::epochs::read(&db, tenant).await.unwrap().unwrap() })
            })
            .collect();
        let before = epoch_of(a).await;
        let bumped = sqlx::query("UPDATE tenants SET epoch = epoch + 1 WHERE id = $1").bind(a).execute(&mut owner).await.unwrap();
        assert_eq!(bumped.rows_affected(), 1);
        // Asked for after the commit returned: must see it, however many reads are under way.
        let after: Vec<_> = (0..50)
            .map(|_| {
                let db = t.db.clone();
                tokio::spawn(async move { gatehouse::epochs::read(&db, a).await.unwrap().unwrap() })
            })
            .collect();
        for h in after {
            assert!(h.await.unwrap() > before, "round {round}: a read asked for after the bump saw the older epoch");
        }
        for h in load {
            h.await.unwrap();
        }
    }
    assert_eq!(gatehouse::epochs::read(&t.db, TenantId(uuid::Uuid::now_v7())).await.unwrap(), None, "no such tenant");
    let batch = t.db.epoch_batch();
    let (requests, statements) = (batch.requests.load(Ordering::Relaxed), batch.statements.load(Ordering::Relaxed));
    assert_eq!(requests, 5 * 251 + 1);
    assert!(statements < requests, "{statements} statements for {requests} reads: nothing was shared");
}

/// A request dropped while its read is under way (its client went away) strands nobody (the
/// read runs in its own task, which nothing cancels), and once everything is
/// answered no read slot is left held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_epoch_reads_strand_nobody() {
    let t = TestDb::new().await;
    let a = tenants::create(&t.db, &Audit::cli(), "tenant-a", "A").await.unwrap().id;
    let b = tenants::create(&t.db, &Audit::cli(), "tenant-b", "B").await.unwrap().id;
    let mut cancelled = 0;
    for round in 0..30u64 {
        let reads: Vec<_> = (0..60)
            .map(|i| {
                let db = t.db.clone();
                let tenant = if i % 3 == 0 { b } else { a };
                tokio::spawn(async move { gatehouse::epochs::read(&db, tenant).await })
            })
            .collect();
        // Drop every other request at a different moment each round: before, during or
        // after its read.
        tokio::time::sleep(std::time::Duration::from_micros(round * 150)).await;
        for r in reads.iter().step_by(2) {
            r.abort();
        }
        for (i, r) in reads.into_iter().enumerate() {
            match tokio::time::timeout(std::time::Duration::from_secs(10), r).await {
                Err(_) => panic!("round {round}: read {i} was never answered"),
                Ok(Ok(answer)) => assert!(answer.unwrap().is_some(), "round {round}: read {i}"),
                Ok(Err(e)) => {
                    assert!(e.is_cancelled());
                    cancelled += 1;
                }
            }
        }
    }
    assert!(cancelled > 0, "no request was dropped mid-way: the test proved nothing");
    let mut held = usize::MAX;
    for _ in 0..100 {
        held = t.db.epoch_batch().running();
        if held == 0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert_eq!(held, 0, "read slots left held after every request was answered or dropped");
    let alone = tokio::time::timeout(std::time::Duration::from_secs(5), gatehouse::epochs::read(&t.db, a)).await;
    assert!(alone.expect("a lone read after the storm is answered").unwrap().is_some());
}
