//! SQL reports: the report role reads the views only, in its tenant's scope unless granted
//! platform-wide; every report's output is scanned for anything secret; the CLI lists and runs
//! them in each format.

mod common;

use common::{TestDb, cli, gatehouse, provision};
use gatehouse::{
    admin_log::Audit,
    db::Scope,
    ops::{self, Failure, Recorder, Status},
    reports, tenants,
};
use sqlx::{AssertSqlSafe, Connection, Executor, PgConnection, postgres::PgConnectOptions};
use uuid::Uuid;

const REPORTS: [&str; 10] = [
    "audit_by_actor",
    "connector_activity_daily",
    "copy_ledger_health",
    "erasure_receipts",
    "failing_connectors",
    "open_findings",
    "open_issues",
    "quota_usage",
    "tenant_usage",
    "token_inventory",
];

/// A marker planted in a sealed-credential envelope and a connect link's mail: no report may
/// ever print it.
const PLANTED: &str = "PLANTEDciphertextQ7xZ";

/// Two tenants with tokens, service credentials, activity (some failed), a sealed credential,
/// an ops failure (issue + finding) each. Returns (a, b, the plaintext secrets created).
async fn populate(t: &TestDb) -> (Uuid, Uuid, Vec<String>) {
    let mut secrets = Vec::new();
    let mut ids = Vec::new();
    for slug in ["tenant-a", "tenant-b"] {
        let id = tenants::create(&t.db, &Audit::cli(), slug, slug).await.unwrap().id.0;
        let m = provision(&t.url, slug).await;
        secrets.extend([m.token.clone(), m.client_secret.clone()]);
        cli(&t.url, &["workspace", "create", "--tenant", slug, "main", "--name", "Main"]).await;
        ids.push(id);
    }
    let mut owner = t.owner_conn().await;
    owner.execute("SELECT set_config('gatehouse.platform', 'on', false)").await.unwrap();
    for (n, tenant) in ids.iter().enumerate() {
        for (outcome, code, ms) in [("ok", None, 10), ("ok", None, 30), ("error", Some("unavailable"), 900)] {
            sqlx::query(
                "INSERT INTO activity (tenant_id, occurred_at, id, workspace_id, actor_kind, actor_id, connector, tool, source,
                                       outcome, duration_ms, error_code)
                 SELECT $1, now(), gen_random_uuid(), id, 'token', 'tok', 'github', 'list_issues', 'mcp', $2, $3, $4
                 FROM workspaces WHERE tenant_id = $1",
            )
            .bind(tenant)
            .bind(outcome)
            .bind(ms + n as i32)
            .bind(code)
            .execute(&mut owner)
            .await
            .unwrap();
        }
        sqlx::query(
            "INSERT INTO credentials (tenant_id, workspace_id, connector_id, owner, key_id, envelope, fields, updated_by)
             SELECT $1, id, 'github', 'shared', 'k1', 'v1.k1.bm9uY2U.' || $2, '[{\"name\":\"token\",\"last4\":\"wxyz\"}]', 'test'
             FROM workspaces WHERE tenant_id = $1",
        )
        .bind(tenant)
        .bind(PLANTED)
        .execute(&mut owner)
        .await
        .unwrap();
        // The control plane's rows: a pending copy, an erasure receipt, a sealed subject key.
        for sql in [
            "INSERT INTO copies (tenant_id, move_id, copy_ref, role, workspace_id, kind, epoch_read, lease_until)
             SELECT $1, gen_random_uuid(), 'workspace:' || id, 'source', id, 'fork', 0, now() + interval '5 minutes'
             FROM workspaces WHERE tenant_id = $1 AND length($2) > 0",
            "INSERT INTO erasure_receipts (tenant_id, id, workspace_id, subject_digest, epoch, counts, erased_by)
             SELECT $1, gen_random_uuid(), id, repeat('ab', 32), 1, '{\"activity\": 3}', 'test'
             FROM workspaces WHERE tenant_id = $1 AND length($2) > 0",
            "INSERT INTO subject_keys (tenant_id, subject, key_id, envelope) VALUES ($1, 'member:x', 'k1', 'v1.k1.bm9uY2U.' || $2 || 'key')",
            // A quota and a window of its ledger.
            "INSERT INTO quota_limits (tenant_id, id, name, per, class, daily, created_by)
             SELECT $1, gen_random_uuid(), 'writes', 'token', 'write', 100, 'test' WHERE length($2) > 0",
            "INSERT INTO quota_windows (tenant_id, limit_id, subject, kind, span_ms, window_no, budget, granted, used, refused)
             SELECT $1, id, 'token:tok', 'daily', 86400000, (extract(epoch FROM now()) * 1000)::bigint / 86400000, 100, 12, 9, 1
             FROM quota_limits WHERE tenant_id = $1 AND length($2) > 0",
        ] {
            sqlx::query(sql).bind(tenant).bind(PLANTED).execute(&mut owner).await.unwrap();
        }
    }
    let (recorder, _writer) = Recorder::start(t.db.clone());
    for tenant in &ids {
        ops::record(
            &recorder,
            Failure {
                operation: "downstream.call",
                stage: "remote_mcp".into(),
                tenant: Some(*tenant),
                workspace: None,
                status: Status::Failed,
                code: "unavailable".into(),
                message: "connection refused".into(),
                reference: None,
            },
        );
    }
    recorder.flush().await;
    (ids[0], ids[1], secrets)
}

/// Every value that must never appear in a report: the plaintext secrets the test created,
/// every bytea value in the public schema (token, secret and link hashes), as PostgreSQL's JSON
/// prints it and as bare hex, every sealed envelope and its ciphertext part.
async fn forbidden(t: &TestDb, created: &[String]) -> Vec<String> {
    let mut owner = t.owner_conn().await;
    owner.execute("SELECT set_config('gatehouse.platform', 'on', false)").await.unwrap();
    let columns: Vec<(String, String)> = sqlx::query_as(
        "SELECT c.table_name::text, c.column_name::text FROM information_schema.columns c
         JOIN information_schema.tables t USING (table_schema, table_name)
         WHERE c.table_schema = 'public' AND c.data_type = 'bytea' AND t.table_type = 'BASE TABLE'",
    )
    .fetch_all(&mut owner)
    .await
    .unwrap();
    assert!(columns.iter().any(|(t, c)| t == "access_tokens" && c == "token_hash"));
    let mut out = created.to_vec();
    for (table, column) in columns {
        let sql = format!("SELECT encode({column}, 'hex') FROM {table} WHERE {column} IS NOT NULL");
        let hexes: Vec<String> = sqlx::query_scalar(AssertSqlSafe(sql)).fetch_all(&mut owner).await.unwrap();
        out.extend(hexes);
    }
    let envelopes: Vec<String> = sqlx::query_scalar(
        "SELECT envelope FROM credentials UNION ALL SELECT envelope FROM subject_keys WHERE envelope IS NOT NULL",
    )
    .fetch_all(&mut owner)
    .await
    .unwrap();
    assert_eq!(envelopes.len(), 4);
    for e in envelopes {
        out.push(e.rsplit('.').next().unwrap().to_owned());
        out.push(e);
    }
    out.push(PLANTED.to_owned());
    assert!(out.len() >= 10, "{out:?}");
    out
}

fn scan(label: &str, text: &str, forbidden: &[String]) {
    let lower = text.to_lowercase();
    for secret in forbidden {
        assert!(!lower.contains(&secret.to_lowercase()), "{label} shows a secret ({}…)", &secret[..6.min(secret.len())]);
    }
}

/// A login role granted `group`, mapped to `tenant` when given. Roles are cluster-wide, so the
/// name carries the test database's.
async fn login(t: &TestDb, tag: &str, group: &str, tenant: Option<Uuid>) -> (String, PgConnection) {
    let role = format!("{}_{tag}", t.name);
    let mut owner = t.owner_conn().await;
    owner.execute(AssertSqlSafe(format!("CREATE ROLE {role} LOGIN PASSWORD 'pw-{role}'"))).await.unwrap();
    owner.execute(AssertSqlSafe(format!("GRANT {group} TO {role}"))).await.unwrap();
    if let Some(tenant) = tenant {
        owner.execute("SELECT set_config('gatehouse.platform', 'on', false)").await.unwrap();
        sqlx::query("INSERT INTO report_viewers (tenant_id, role_name, granted_by) VALUES ($1, $2, 'test')")
            .bind(tenant)
            .bind(&role)
            .execute(&mut owner)
            .await
            .unwrap();
    }
    let options: PgConnectOptions = t.url.expose().parse().unwrap();
    let conn = PgConnection::connect_with(&options.username(&role).password(&format!("pw-{role}"))).await.unwrap();
    (role, conn)
}

async fn drop_role(t: &TestDb, role: &str) {
    let mut owner = t.owner_conn().await;
    owner.execute(AssertSqlSafe(format!("DROP ROLE IF EXISTS {role}"))).await.unwrap();
}

async fn tenants_seen(conn: &mut PgConnection, view: &str) -> Vec<Uuid> {
    let sql = format!("SELECT DISTINCT tenant_id FROM report.{view} ORDER BY 1");
    sqlx::query_scalar(AssertSqlSafe(sql)).fetch_all(conn).await.unwrap()
}

async fn refused(conn: &mut PgConnection, sql: &'static str) {
    refused_with(conn, sql, &["42501"]).await
}

/// `sql` fails with one of `codes` (42501: permission denied; 55000: a view that takes no writes).
async fn refused_with(conn: &mut PgConnection, sql: &'static str, codes: &[&str]) {
    let err = conn.execute(sql).await.expect_err(sql);
    let code = err.as_database_error().and_then(|d| d.code()).map(|c| c.into_owned()).unwrap_or_default();
    assert!(codes.contains(&code.as_str()), "{sql}: {code} {err}");
}

#[tokio::test]
async fn the_report_role_reads_only_the_views_and_only_its_tenant() {
    let t = TestDb::new().await;
    let (a, b, _) = populate(&t).await;
    let (tenant_role, mut conn) = login(&t, "rep_a", "gatehouse_report", Some(a)).await;

    for view in REPORTS.iter().filter(|v| **v != "open_issues") {
        let seen = tenants_seen(&mut conn, view).await;
        assert_eq!(seen, vec![a], "{view}: a tenant-scoped reader sees its own tenant only");
    }
    // Issues are platform-wide: a tenant's reader sees none.
    let issues: i64 = sqlx::query_scalar("SELECT count(*) FROM report.open_issues").fetch_one(&mut conn).await.unwrap();
    assert_eq!(issues, 0);
    // The settings the application's row-level security reads change nothing for a report login.
    conn.execute("SELECT set_config('gatehouse.platform', 'on', false)").await.unwrap();
    conn.execute(AssertSqlSafe(format!("SELECT set_config('gatehouse.tenant_id', '{b}', false)"))).await.unwrap();
    assert_eq!(tenants_seen(&mut conn, "token_inventory").await, vec![a]);
    assert_eq!(tenants_seen(&mut conn, "tenant_usage").await, vec![a]);
    // Nor does switching to the group role itself.
    conn.execute("SET ROLE gatehouse_report").await.unwrap();
    assert_eq!(tenants_seen(&mut conn, "token_inventory").await, vec![a]);
    conn.execute("RESET ROLE").await.unwrap();
    // A view reads back with the same rows after a report, so the platform context the report
    // functions switch on is not left behind for the caller.
    let platform: String =
        sqlx::query_scalar("SELECT current_setting('gatehouse.platform', true)").fetch_one(&mut conn).await.unwrap();
    assert_eq!(platform, "on", "the caller's own (spoofed) setting is restored, not cleared");

    // Base tables, the scope function, the mapping and the report functions' internals: refused.
    for sql in [
        "SELECT * FROM access_tokens",
        "SELECT * FROM service_credentials",
        "SELECT * FROM credentials",
        "SELECT * FROM activity",
        "SELECT * FROM ops_findings",
        "SELECT * FROM ops_issues",
        "SELECT * FROM admin_log",
        "SELECT * FROM tenants",
        "SELECT * FROM report_viewers",
        "SELECT * FROM gatehouse_report_scope()",
    ] {
        refused(&mut conn, sql).await;
    }
    // Writes: into a view (no write privilege on any, and the views take no writes anyway), a
    // base table, or a new table.
    for view in REPORTS {
        for privilege in ["INSERT", "UPDATE", "DELETE", "TRUNCATE"] {
            let may: bool = sqlx::query_scalar("SELECT has_table_privilege(format('report.%I', $1::text), $2)")
                .bind(view)
                .bind(privilege)
                .fetch_one(&mut conn)
                .await
                .unwrap();
            assert!(!may, "{privilege} on report.{view}");
        }
    }
    for sql in [
        "INSERT INTO report.tenant_usage (tenant) VALUES ('x')",
        "DELETE FROM report.token_inventory",
        "UPDATE report.open_findings SET status = 'resolved'",
    ] {
        refused_with(&mut conn, sql, &["42501", "55000"]).await;
    }
    for sql in [
        "INSERT INTO tenants (id, slug, name) VALUES (gen_random_uuid(), 'evil', 'e')",
        "UPDATE access_tokens SET revoked_at = now()",
        "INSERT INTO report_viewers (tenant_id, role_name, granted_by) SELECT tenant_id, current_user, 'me' FROM report.tenant_usage",
        "CREATE TABLE public.mine (x int)",
        "CREATE TABLE report.mine (x int)",
        "CREATE VIEW report.mine AS SELECT 1",
    ] {
        refused(&mut conn, sql).await;
    }
    conn.close().await.unwrap();

    // Without a mapping, a tenant-scoped reader sees nothing.
    let (unmapped, mut conn) = login(&t, "rep_none", "gatehouse_report", None).await;
    for view in REPORTS {
        let n: i64 =
            sqlx::query_scalar(AssertSqlSafe(format!("SELECT count(*) FROM report.{view}"))).fetch_one(&mut conn).await.unwrap();
        assert_eq!(n, 0, "{view}: an unmapped reader sees rows");
    }
    conn.close().await.unwrap();

    // Platform-wide: every tenant, and the issues.
    let (platform_role, mut conn) = login(&t, "rep_all", "gatehouse_report_platform", None).await;
    assert_eq!(tenants_seen(&mut conn, "token_inventory").await.len(), 2);
    let mut both = vec![a, b];
    both.sort();
    assert_eq!(tenants_seen(&mut conn, "tenant_usage").await, both);
    let issues: i64 = sqlx::query_scalar("SELECT count(*) FROM report.open_issues").fetch_one(&mut conn).await.unwrap();
    assert_eq!(issues, 1);
    refused(&mut conn, "SELECT * FROM access_tokens").await;
    conn.close().await.unwrap();
    for role in [tenant_role, unmapped, platform_role] {
        drop_role(&t, &role).await;
    }
}

#[tokio::test]
async fn every_report_runs_and_none_shows_a_secret() {
    let t = TestDb::new().await;
    let (a, _, created) = populate(&t).await;
    let forbidden = forbidden(&t, &created).await;

    // A report inside the application's tenant transaction leaves the tenant context as it
    // was: the platform context the report switched on for itself is gone afterwards.
    let (rows, after, visible) =
        t.db.single_decision(Scope::Tenant(tenants::TenantId(a)), |conn, _| {
            Box::pin(async move {
                let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM report.tenant_usage").fetch_one(&mut *conn).await?;
                let after: String =
                    sqlx::query_scalar("SELECT current_setting('gatehouse.platform', true)").fetch_one(&mut *conn).await?;
                let visible: i64 =
                    sqlx::query_scalar("SELECT count(DISTINCT tenant_id) FROM access_tokens").fetch_one(&mut *conn).await?;
                Ok((rows, after, visible))
            })
        })
        .await
        .unwrap();
    assert_eq!((rows, after.as_str(), visible), (1, "", 1));

    let listed = reports::list(&t.db).await.unwrap();
    assert_eq!(listed.iter().map(|r| r.name.as_str()).collect::<Vec<_>>(), REPORTS, "a new view joins this test");
    for r in &listed {
        assert!(r.description.len() > 20, "{}: undocumented", r.name);
    }
    let (platform_role, mut platform_conn) = login(&t, "scan_all", "gatehouse_report_platform", None).await;
    for name in REPORTS {
        // Through the library, in both scopes.
        let all = reports::run(&t.db, Scope::Platform { reason: "test" }, name).await.unwrap();
        assert!(!all.rows.is_empty(), "{name}: no rows, so the scan would prove nothing");
        for format in [reports::Format::Table, reports::Format::Csv, reports::Format::Json] {
            scan(&format!("{name} ({format:?})"), &reports::render(&all, format), &forbidden);
        }
        let own = reports::run(&t.db, Scope::Tenant(tenants::TenantId(a)), name).await.unwrap();
        scan(name, &reports::render(&own, reports::Format::Json), &forbidden);
        // Through the CLI.
        let out = cli(&t.url, &["report", name, "--format", "csv"]).await.join("\n");
        assert_eq!(out.lines().count(), all.rows.len() + 1, "{name}: header and one line per row");
        scan(&format!("{name} (cli)"), &out, &forbidden);
        // As a platform report login, every column as text.
        let sql = format!("SELECT coalesce(string_agg(r::text, E'\\n'), '') FROM report.{name} r");
        let text: String = sqlx::query_scalar(AssertSqlSafe(sql)).fetch_one(&mut platform_conn).await.unwrap();
        assert!(!text.is_empty());
        scan(&format!("{name} (psql)"), &text, &forbidden);
    }
    // The scan itself can fail: a secret column would be caught.
    let leak = std::panic::catch_unwind(|| scan("self-check", &format!("x{}y", forbidden[0]), &forbidden));
    assert!(leak.is_err());
    platform_conn.close().await.unwrap();
    drop_role(&t, &platform_role).await;
}

#[tokio::test]
async fn the_cli_lists_and_runs_reports_in_each_format() {
    let t = TestDb::new().await;
    let (a, _, _) = populate(&t).await;
    let list = cli(&t.url, &["report", "--list"]).await;
    assert_eq!(list.len(), REPORTS.len());
    for (line, name) in list.iter().zip(REPORTS) {
        let (n, what) = line.split_once('\t').unwrap();
        assert_eq!(n, name);
        assert!(what.len() > 20, "{line}");
    }
    let json = cli(&t.url, &["report", "token_inventory", "--tenant", "tenant-a", "--format", "json"]).await;
    assert_eq!(json.len(), 2, "one token and one service credential: {json:?}");
    for line in &json {
        let row: serde_json::Value = serde_json::from_str(line).unwrap();
        assert_eq!(row["tenant_id"], a.to_string());
        assert_eq!(row["state"], "live");
        assert_eq!(row["stale"], false);
    }
    let table = cli(&t.url, &["report", "tenant_usage"]).await;
    assert!(table[0].starts_with("tenant_id") && table[0].contains("live_tokens"), "{table:?}");
    assert_eq!(table.len(), 3);
    let failing = cli(&t.url, &["report", "failing_connectors", "--tenant", "tenant-b", "--format", "json"]).await;
    assert_eq!(failing.len(), 1);
    let row: serde_json::Value = serde_json::from_str(&failing[0]).unwrap();
    assert_eq!((row["connector"].as_str(), row["calls"].as_i64(), row["errors"].as_i64()), (Some("github"), Some(3), Some(1)));
    assert_eq!(row["last_error_code"], "unavailable");
    let daily = cli(&t.url, &["report", "connector_activity_daily", "--tenant", "tenant-a", "--format", "json"]).await;
    let row: serde_json::Value = serde_json::from_str(&daily[0]).unwrap();
    assert_eq!((row["calls"].as_i64(), row["max_ms"].as_i64()), (Some(3), Some(900)));
    assert!(row["p95_ms"].as_f64().unwrap() > 30.0, "{row}");

    for (args, code) in [
        (&["report", "no_such_report"][..], "not_found"),
        (&["report", "tenant_usage", "--format", "xml"][..], "invalid_format"),
        (&["report", "tenant_usage", "--tenant", "nobody-here"][..], "not_found"),
    ] {
        let mut cmd = gatehouse(Some(&t.url));
        cmd.args(args);
        let (status, out, err) = common::run(cmd).await;
        assert!(status != 0 && err.contains(code) && out.is_empty(), "{args:?}: {status} {err}");
    }
}
