//! Moving a tenant between deployments (issue 26): two deployments, each its own database,
//! `serve` and vault key ring, the destination's database on a PostgreSQL cluster of the
//! test's own (not the run's shared one). A tenant with rows in every table it owns is
//! exported, imported, verified and sealed; the old URL answers `tenant_moved`, the new
//! deployment serves the same machine credentials and MCP calls, vault contents open there
//! under its own keys, and the admin log is continuous. Tampered, truncated, newer, wrongly
//! keyed and repeated imports are refused with nothing written, and a killed import leaves
//! nothing and runs again.

mod common;

use std::{
    collections::{BTreeMap, BTreeSet},
    sync::{Arc, Mutex},
    time::Duration,
};

use common::{Served, TestDb, eventually, free_port, gatehouse, http, json_path, mcp_post, mcp_tool, provision, run, vault_key};
use gatehouse::{
    snapshots::subject_key_aad,
    tenant_moves::{Part, TABLES, TransferKey, file},
    tenants::TenantId,
    vault::{Aad, KeyRing, Owner, PURPOSE_CONNECTOR},
};
use serde_json::{Value, json};
use sqlx::{Connection, Executor, PgConnection};
use uuid::Uuid;

/// One deployment: its database and its vault key ring.
struct Deployment {
    t: TestDb,
    keys: String,
}

impl Deployment {
    async fn new(kid: &str) -> Deployment {
        Deployment { t: TestDb::new().await, keys: vault_key(kid) }
    }

    /// A deployment whose database is on a PostgreSQL cluster of its own, as a second
    /// deployment's is: it shares no server, port or data with the first.
    async fn on_own_cluster(kid: &str) -> Deployment {
        Deployment { t: TestDb::on_own_cluster().await, keys: vault_key(kid) }
    }

    /// The PostgreSQL cluster serving this deployment: its system identifier and port.
    async fn cluster(&self) -> (i64, i32) {
        sqlx::query_as("SELECT system_identifier, inet_server_port() FROM pg_control_system()")
            .fetch_one(&mut self.owner().await)
            .await
            .unwrap()
    }

    fn cmd(&self) -> tokio::process::Command {
        let mut c = gatehouse(Some(&self.t.url));
        c.env("GATEHOUSE_VAULT_KEYS", &self.keys);
        c
    }

    /// Runs a command that must succeed: its stdout lines.
    async fn ok(&self, args: &[&str]) -> Vec<String> {
        let mut c = self.cmd();
        c.args(args);
        let (code, out, err) = run(c).await;
        assert_eq!(code, 0, "gatehouse {args:?}: {err}");
        out.lines().map(str::to_owned).collect()
    }

    /// Runs a command that must fail with `code` in its error.
    async fn refused(&self, args: &[&str], code: &str) {
        let mut c = self.cmd();
        c.args(args);
        let (exit, out, err) = run(c).await;
        assert_ne!(exit, 0, "gatehouse {args:?} succeeded: {out}");
        assert!(err.contains(code), "gatehouse {args:?}: expected {code}, got: {err}");
    }

    /// A platform-context owner connection.
    async fn owner(&self) -> PgConnection {
        let mut c = self.t.owner_conn().await;
        c.execute("SELECT set_config('gatehouse.platform', 'on', false)").await.unwrap();
        c
    }

    async fn count(&self, query: &str) -> i64 {
        sqlx::query_scalar(sqlx::AssertSqlSafe(query.to_owned())).fetch_one(&mut self.owner().await).await.unwrap()
    }

    /// Rows of every table that holds tenant rows (what "nothing written" compares).
    async fn footprint(&self) -> BTreeMap<String, i64> {
        let mut out = BTreeMap::new();
        for t in TABLES {
            out.insert(t.name.to_owned(), self.count(&format!("SELECT count(*) FROM {}", t.name)).await);
        }
        out
    }
}

/// A real HTTP API that answers only a request bearing one of `valid` tokens.
async fn bearer_api(valid: Arc<Mutex<Vec<String>>>) -> String {
    use axum::{extract::Request, http::StatusCode, response::IntoResponse};
    let app = axum::Router::new().fallback(move |request: Request| {
        let valid = valid.clone();
        async move {
            let auth = request.headers().get("authorization").and_then(|v| v.to_str().ok()).map(str::to_owned);
            let known = valid.lock().unwrap().iter().position(|t| auth.as_deref() == Some(&format!("Bearer {t}")));
            match known {
                Some(i) => axum::Json(json!({ "ok": true, "token_number": i })).into_response(),
                None => (StatusCode::UNAUTHORIZED, "bearer token required").into_response(),
            }
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}/v1", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    base
}

fn api_connector(base: &str) -> Value {
    json!({ "base_url": base, "timeout_ms": 5000,
        "auth": { "type": "slot", "slot": "shared", "headers": { "Authorization": "Bearer {token}" } },
        "tools": [{ "name": "get_item", "description": "One item", "method": "GET", "path": "/items/{id}", "read_only": true,
            "input_schema": { "type": "object", "additionalProperties": false, "required": ["id"], "properties": { "id": { "type": "string" } } } }] })
}

/// Rows, in platform context, in every tenant table the CLI did not fill (each statement
/// binds $1 tenant, $2 workspace, $3 a fresh id, $4 a subject key sealed under the source's
/// ring).
async fn seed_every_table(d: &Deployment, tenant: Uuid, workspace: Uuid) {
    let ring = KeyRing::parse(&d.keys).unwrap();
    let subject_key = ring.seal(&subject_key_aad(TenantId(tenant), "subject-1"), &[7u8; 32]);
    let mut owner = d.owner().await;
    let mut tx = owner.begin().await.unwrap();
    let row_id = Uuid::now_v7();
    for sql in [
        "INSERT INTO members (tenant_id, id, issuer, subject, email, role) VALUES ($1, $3, 'https://idp.test', 'bob', 'bob@example.test', 'member')",
        "INSERT INTO kv_entries (tenant_id, key, value) VALUES ($1, 'moved/key', '{\"n\": 1}')",
        // Larger than one 64 KiB frame, so the export has several (a cut-off tail is tested).
        "INSERT INTO kv_entries (tenant_id, key, value) VALUES ($1, 'moved/large', jsonb_build_object('blob', repeat('x', 100000)))",
        "INSERT INTO member_fences (tenant_id, issuer, subject, raised_at) VALUES ($1, 'https://idp.test', 'gone', now())",
        "INSERT INTO blueprints (tenant_id, id, slug, name, created_by) VALUES ($1, $3, 'bp-one', 'Blueprint', 'test')",
        "INSERT INTO blueprint_versions (tenant_id, blueprint_id, version, document, digest, created_by) VALUES ($1, $3, 1, '{}', 'd', 'test')",
        "INSERT INTO connector_catalogs (tenant_id, workspace_id, connector_id, config_key, tools) VALUES ($1, $2, 'spare', 'k', '[]')",
        "INSERT INTO tool_pins (tenant_id, workspace_id, connector_id, tool_name, digest, definition)
         VALUES ($1, $2, 'spare', 'echo', 'd', '{\"name\": \"echo\"}')",
        "INSERT INTO oauth_grants (tenant_id, workspace_id, connector_id, owner, client_id, token_endpoint, connected_by)
         VALUES ($1, $2, 'spare', 'shared', 'c', 'http://as.test/token', 'test')",
        "INSERT INTO oauth_clients (tenant_id, workspace_id, connector_id, issuer, client_id) VALUES ($1, $2, 'spare', 'http://as.test', 'c')",
        "INSERT INTO connect_links (tenant_id, id, workspace_id, connector_id, email, token_hash, created_by, expires_at)
         VALUES ($1, $3, $2, 'inventory', 'bob@example.test', sha256(convert_to($3::text, 'UTF8')), 'test', now() + interval '1 day')",
        "INSERT INTO oauth_revocations (tenant_id, id, workspace_id, connector_id, owner, endpoint, client_id, client_auth, outcome, settled_at, settled_by)
         VALUES ($1, $3, $2, 'spare', 'shared', 'http://as.test/revoke', 'c', 'none', 'revoked', now(), 'test')",
        "INSERT INTO mcp_clients (tenant_id, id, client_id, kind, name, redirect_uris) VALUES ($1, $3, 'gmc_moved', 'registered', 'n', ARRAY['http://127.0.0.1/cb'])",
        "INSERT INTO mcp_grants (tenant_id, id, client_ref, member_id, workspace_id, resource, scope)
         VALUES ($1, $3, (SELECT id FROM mcp_clients WHERE tenant_id = $1), (SELECT id FROM members WHERE tenant_id = $1 AND subject = 'bob'), $2, 'http://gh.test/t/acme/w/main/mcp', 'mcp')",
        "INSERT INTO mcp_codes (tenant_id, code_hash, grant_id, redirect_uri, code_challenge, expires_at)
         VALUES ($1, sha256(convert_to($3::text, 'UTF8')), (SELECT id FROM mcp_grants WHERE tenant_id = $1), 'http://127.0.0.1/cb', 'c', now() + interval '1 minute')",
        "INSERT INTO mcp_tokens (tenant_id, token_hash, grant_id, kind, expires_at)
         VALUES ($1, sha256(convert_to($3::text, 'UTF8')), (SELECT id FROM mcp_grants WHERE tenant_id = $1), 'access', now() + interval '1 hour')",
        "INSERT INTO peer_bindings (tenant_id, workspace_id, connector_id, target_workspace_id, created_by) VALUES ($1, $2, 'peer', $2, 'test')",
        "INSERT INTO copies (tenant_id, move_id, copy_ref, role, workspace_id, kind, state, epoch_read, lease_until, settled_at)
         VALUES ($1, $3, 'snapshot:s1', 'source', $2, 'snapshot_export', 'done', 0, now(), now())",
        "INSERT INTO subject_keys (tenant_id, subject, key_id, envelope) VALUES ($1, 'subject-1', 'src', $4)",
        "INSERT INTO erasure_receipts (tenant_id, id, workspace_id, subject_digest, epoch, counts, erased_by) VALUES ($1, $3, $2, 'abc', 1, '{}', 'test')",
        "INSERT INTO workspace_tombstones (tenant_id, workspace_id, slug, reaped_by) VALUES ($1, $3, 'gone', 'test')",
        "INSERT INTO activity (tenant_id, occurred_at, id, workspace_id, actor_kind, actor_id, tool, source, outcome, duration_ms)
         VALUES ($1, now(), $3, $2, 'token', 'seeded', 'call_tool', 'gateway', 'ok', 3)",
        "INSERT INTO ops_failures (id, tenant_id, workspace_id, operation, stage, code, message, fingerprint, at)
         VALUES ($3, $1, $2, 'downstream.call', 'http_api', 'timeout', 'slow', repeat('0', 64), now())",
        "INSERT INTO ops_findings (tenant_id, id, kind, subject, operation, code, occurrences, first_seen, last_seen, last_message)
         VALUES ($1, $3, 'recurring', repeat('0', 64), 'downstream.call', 'timeout', 1, now(), now(), 'slow')",
        "INSERT INTO ops_suppress_rules (tenant_id, id, code, reason, expires_at, created_by) VALUES ($1, $3, 'timeout', 'noise', now() + interval '1 day', 'test')",
        "INSERT INTO scim_tokens (tenant_id, id, token_hash, prefix, name, created_by)
         VALUES ($1, $3, sha256(convert_to($3::text, 'UTF8')), 'gsm_moved', 'directory', 'test')",
        "INSERT INTO scim_users (tenant_id, id, user_name_key, email, attrs)
         VALUES ($1, $3, 'bob', 'bob@example.test', '{\"userName\": \"bob\"}')",
        "INSERT INTO scim_groups (tenant_id, id, display_name_key, attrs) VALUES ($1, $3, 'operator', '{\"displayName\": \"operator\"}')",
        "INSERT INTO scim_group_members (tenant_id, group_id, user_id, entry) VALUES ($1, $3, $3, jsonb_build_object('value', $3::text))",
        "INSERT INTO impersonation_settings (tenant_id, approval_required) VALUES ($1, true)",
        "INSERT INTO quota_limits (tenant_id, id, name, per, class, daily, created_by) VALUES ($1, $3, 'moved', 'tenant', 'any', 100, 'test')",
    ] {
        // One id for every row (each table's own; a version names its blueprint by it).
        sqlx::query(sql).bind(tenant).bind(workspace).bind(row_id).bind(&subject_key).execute(&mut *tx).await.unwrap();
    }
    tx.commit().await.unwrap();
}

/// `file` with its body cut before the last frame (a transfer that stopped at a frame end).
fn without_last_frame(bytes: &[u8]) -> Vec<u8> {
    let header = bytes.iter().position(|&b| b == b'\n').unwrap() + 1;
    let mut at = header;
    let mut starts = Vec::new();
    while at < bytes.len() {
        starts.push(at);
        at += 4 + u32::from_be_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
    }
    assert!(starts.len() >= 2, "the export has at least two frames");
    bytes[..*starts.last().unwrap()].to_vec()
}

/// The body of `from` re-sealed into a new file with `edit` applied to each line.
fn rewritten(from: &str, key: &TransferKey, edit: impl Fn(Vec<u8>) -> Vec<u8>) -> String {
    let mut body = file::Opener::open(std::path::Path::new(from), key).unwrap();
    let to = format!("{from}.edited");
    let mut out = file::Sealer::new(std::fs::File::create(&to).unwrap(), key).unwrap();
    while let Some(line) = body.line().unwrap() {
        out.line(&edit(line.to_vec())).unwrap();
    }
    out.finish().unwrap();
    to
}

fn temp(name: &str) -> String {
    std::env::temp_dir().join(format!("gatehouse-move-{}-{name}", Uuid::new_v4().simple())).to_str().unwrap().to_owned()
}

/// Every tenant-owned table of the catalog is in the registry, exported or excluded with a
/// reason, and the export order puts every parent before its children.
#[tokio::test]
async fn the_registry_of_tenant_tables_names_every_table_of_the_catalog() {
    let d = Deployment::new("k").await;
    let mut owner = d.owner().await;
    let catalog: BTreeSet<String> = sqlx::query_scalar(
        "SELECT c.relname::text FROM pg_attribute a
           JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace
          WHERE a.attname = 'tenant_id' AND NOT a.attisdropped AND c.relkind IN ('r', 'p') AND n.nspname = 'public'",
    )
    .fetch_all(&mut owner)
    .await
    .unwrap()
    .into_iter()
    .chain(["tenants".to_owned()])
    .collect();
    let registry: BTreeSet<String> = TABLES.iter().map(|t| t.name.to_owned()).collect();
    assert_eq!(registry.len(), TABLES.len(), "a table is registered twice");
    let missing: Vec<&String> = catalog.difference(&registry).collect();
    assert!(missing.is_empty(), "tenant-owned tables neither exported nor excluded in tenant_moves::tables: {missing:?}");
    let gone: Vec<&String> = registry.difference(&catalog).collect();
    assert!(gone.is_empty(), "registered tables that hold no tenant rows: {gone:?}");
    for t in TABLES {
        if let Part::Excluded(why) = t.part {
            assert!(why.len() > 10, "{}: an exclusion says why", t.name);
        }
    }
    // Foreign keys between exported tables point backwards in the export (import) order.
    let position = |name: &str| TABLES.iter().position(|t| t.name == name && t.part == Part::Export);
    let keys: Vec<(String, String)> = sqlx::query_as(
        "SELECT c.conrelid::regclass::text, c.confrelid::regclass::text FROM pg_constraint c WHERE c.contype = 'f'",
    )
    .fetch_all(&mut owner)
    .await
    .unwrap();
    for (child, parent) in keys {
        if let (Some(c), Some(p)) = (position(&child), position(&parent))
            && child != parent
        {
            assert!(p < c, "{parent} must be exported before {child}, which refers to it");
        }
    }
}

#[tokio::test]
async fn a_tenant_moves_between_deployments_and_the_old_url_answers_tenant_moved() {
    let (src, dst) = (Deployment::new("src").await, Deployment::on_own_cluster("dst").await);
    let (src_cluster, dst_cluster) = (src.cluster().await, dst.cluster().await);
    assert_ne!(src_cluster.0, dst_cluster.0, "two PostgreSQL clusters, not two databases on one");
    assert_ne!(src_cluster.1, dst_cluster.1, "two postmasters, on two ports");
    let dst_port = free_port();
    let dst_base = format!("http://127.0.0.1:{dst_port}");

    // A tenant with a connector whose bearer token lives in the vault, and machine credentials.
    src.ok(&["tenant", "create", "acme", "--name", "Acme", "--owner-email", "alice@example.test"]).await;
    let ws = src.ok(&["workspace", "create", "--tenant", "acme", "main"]).await;
    let workspace: Uuid = ws[0].split('\t').nth(1).unwrap().parse().unwrap();
    let secret = format!("bearer-{}", Uuid::new_v4().simple());
    common::leaks::record(&secret);
    let api = bearer_api(Arc::new(Mutex::new(vec![secret.clone()]))).await;
    let config = json_path(&api_connector(&api));
    src.ok(&[
        "connector",
        "add",
        "--tenant",
        "acme",
        "--workspace",
        "main",
        "--id",
        "inventory",
        "--kind",
        "http_api",
        "--config",
        &config,
    ])
    .await;
    let mut c = src.cmd();
    c.env("GATEHOUSE_FIELD_TOKEN", &secret);
    c.args(["credential", "set", "--tenant", "acme", "--workspace", "main", "--connector", "inventory", "--field", "token"]);
    assert_eq!(run(c).await.0, 0);
    src.ok(&["tenant", "permission", "acme", "--role", "member", "--permission", "activity_access", "allow"]).await;
    let machine = provision(&src.t.url, "acme").await;
    let tenant: Uuid =
        sqlx::query_scalar("SELECT id FROM tenants WHERE slug = 'acme'").fetch_one(&mut src.owner().await).await.unwrap();

    // The calls an agent makes before the move, and their answers.
    let get = json!({ "address": "inventory.get_item", "args": { "id": "1" } });
    let served = Served::start(src.cmd()).await;
    let old_mcp = format!("{}/t/acme/w/main/mcp", served.base);
    let (err, before, _) = mcp_tool(&old_mcp, &machine, "call_tool", get.clone()).await;
    assert!(!err, "{before}");
    let listed: Value = mcp_post(&old_mcp, &machine, "tools/list", json!({})).await.json().await.unwrap();
    assert_eq!(served.terminate().await, 0);
    seed_every_table(&src, tenant, workspace).await;

    // Export: every exported table holds rows of this tenant.
    let key_file = temp("key");
    src.ok(&["tenant", "transfer-key", "--to", &key_file]).await;
    let export = temp("export");
    let out = src.ok(&["tenant", "export", "--tenant", "acme", "--to", &export, "--key-file", &key_file]).await;
    let rows: BTreeMap<&str, u64> =
        out[1..].iter().map(|l| l.split_once('\t').unwrap()).map(|(t, n)| (t, n.parse().unwrap())).collect();
    for t in TABLES.iter().filter(|t| t.part == Part::Export) {
        assert!(rows.get(t.name).is_some_and(|n| *n > 0), "{}: the round trip needs a row here, export said {rows:?}", t.name);
    }
    let bytes = std::fs::read(&export).unwrap();
    assert!(!bytes.windows(secret.len()).any(|w| w == secret.as_bytes()), "the vault's plaintext is sealed in the file");

    // Refusals, each leaving the destination as it was.
    let empty = dst.footprint().await;
    let key = TransferKey::read(std::path::Path::new(&key_file)).unwrap();
    let import = |file: &str, key: &str| {
        vec!["tenant".to_owned(), "import".into(), "--from".into(), file.into(), "--key-file".into(), key.into()]
    };
    let args = |v: &Vec<String>| v.clone();
    let flipped = temp("flipped");
    let mut changed = bytes.clone();
    let at = changed.len() / 2;
    changed[at] ^= 0x01;
    std::fs::write(&flipped, &changed).unwrap();
    let truncated = temp("truncated");
    std::fs::write(&truncated, without_last_frame(&bytes)).unwrap();
    let newer = temp("newer");
    let text = String::from_utf8_lossy(&bytes[..bytes.iter().position(|&b| b == b'\n').unwrap()]).into_owned();
    std::fs::write(&newer, [text.replace("\"version\":1", "\"version\":2").as_bytes(), &bytes[text.len()..]].concat()).unwrap();
    let other_key = temp("other-key");
    src.ok(&["tenant", "transfer-key", "--to", &other_key]).await;
    let forged = rewritten(&export, &key, |line| String::from_utf8(line).unwrap().replace("{\"n\":1}", "{\"n\":2}").into_bytes());
    for (file, key, code) in [
        (&flipped, &key_file, "export_unreadable"),
        (&truncated, &key_file, "export_truncated"),
        (&newer, &key_file, "export_format_unsupported"),
        (&export, &other_key, "export_unreadable"),
        (&forged, &key_file, "export_digest_mismatch"),
    ] {
        let a = args(&import(file, key));
        dst.refused(&a.iter().map(String::as_str).collect::<Vec<_>>(), code).await;
        assert_eq!(dst.footprint().await, empty, "a refused import ({code}) wrote nothing");
    }

    // Import, then a second import of the same file is refused and writes nothing.
    let a = import(&export, &key_file);
    let a: Vec<&str> = a.iter().map(String::as_str).collect();
    let out = dst.ok(&a).await;
    assert!(out[0].starts_with("acme\t"), "{out:?}");
    let after_import = dst.footprint().await;
    let mut c = dst.cmd();
    c.args(&a);
    let (exit, _, err) = run(c).await;
    assert_ne!(exit, 0);
    assert!(["slug_taken", "tenant_exists", "export_already_imported"].iter().any(|c| err.contains(c)), "{err}");
    assert_eq!(dst.footprint().await, after_import, "a second import wrote nothing");

    // Verify, seal; an unseal while the destination is untouched, and the seal again.
    let dst_url = dst.t.url.expose().to_owned();
    let verified = src.ok(&["tenant", "verify", "--tenant", "acme", "--against", &dst_url]).await;
    assert_eq!(verified.last().map(String::as_str), Some("verified"), "{verified:?}");
    src.ok(&["tenant", "seal", "--tenant", "acme", "--to", &dst_base, "--against", &dst_url]).await;
    src.ok(&["tenant", "unseal", "--tenant", "acme", "--against", &dst_url]).await;
    src.ok(&["tenant", "seal", "--tenant", "acme", "--to", &dst_base, "--against", &dst_url]).await;

    // The old deployment answers tenant_moved: 421 for MCP and the API, 308 for a browser,
    // and its CLI writes nothing for the tenant.
    let old = Served::start(src.cmd()).await;
    let old_mcp = format!("{}/t/acme/w/main/mcp", old.base);
    let r = mcp_post(&old_mcp, &machine, "tools/list", json!({})).await;
    assert_eq!(r.status(), 421);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["code"], "tenant_moved", "{body}");
    assert_eq!(body["location"], format!("{dst_base}/t/acme/w/main/mcp"), "{body}");
    let r = machine.headers(http().get(format!("{}/api/v1/tenants/acme", old.base))).send().await.unwrap();
    assert_eq!(r.status(), 421);
    let r = machine
        .headers(http().put(format!("{}/api/v1/tenants/acme/kv/moved-key", old.base)))
        .json(&json!({ "value": 3 }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 421, "no write is accepted");
    let r = http().get(format!("{}/console/t/acme/activity", old.base)).header("accept", "text/html").send().await.unwrap();
    assert_eq!(r.status(), 308);
    assert_eq!(r.headers()["location"], format!("{dst_base}/console/t/acme/activity").as_str());
    src.refused(&["token", "create", "--tenant", "acme", "--name", "late"], "tenant_moved").await;
    assert_eq!(old.terminate().await, 0);

    // The new deployment serves the same machine credentials and the same MCP calls; the
    // bearer token the downstream accepts was opened there under its own key ring.
    let new = Served::start_on(dst.cmd(), dst_port).await;
    let new_mcp = format!("{dst_base}/t/acme/w/main/mcp");
    let (err, after, _) = mcp_tool(&new_mcp, &machine, "call_tool", get).await;
    assert!(!err, "{after}");
    assert_eq!(after, before);
    let listed_there: Value = mcp_post(&new_mcp, &machine, "tools/list", json!({})).await.json().await.unwrap();
    assert_eq!(listed_there["result"], listed["result"]);
    let envelope: String = sqlx::query_scalar("SELECT envelope FROM credentials WHERE connector_id = 'inventory'")
        .fetch_one(&mut dst.owner().await)
        .await
        .unwrap();
    let aad = Aad { tenant, workspace, connector: "inventory", owner: Owner::Shared, purpose: PURPOSE_CONNECTOR };
    let opened = KeyRing::parse(&dst.keys).unwrap().open(&aad, &envelope).unwrap();
    assert!(String::from_utf8_lossy(&opened).contains(&secret));
    assert!(KeyRing::parse(&src.keys).unwrap().open(&aad, &envelope).is_err(), "sealed anew, not copied");

    // The admin log is continuous: every row the source had at the export is there, then the
    // import.
    let ids = |d: &Deployment| {
        let url = d.t.url.clone();
        async move {
            let mut c = PgConnection::connect(url.expose()).await.unwrap();
            c.execute("SELECT set_config('gatehouse.platform', 'on', false)").await.unwrap();
            let rows: Vec<(Uuid, String)> =
                sqlx::query_as("SELECT id, action FROM admin_log WHERE tenant_id IS NOT NULL ORDER BY id")
                    .fetch_all(&mut c)
                    .await
                    .unwrap();
            rows
        }
    };
    let (theirs, ours) = (ids(&src).await, ids(&dst).await);
    let exported: Vec<&(Uuid, String)> = theirs.iter().take_while(|(_, a)| a != "tenant.verify").collect();
    assert!(exported.iter().any(|(_, a)| a == "tenant.export"), "{theirs:?}");
    assert_eq!(ours[..exported.len()].iter().collect::<Vec<_>>(), exported, "the destination's log starts with the source's");
    assert_eq!(ours[exported.len()].1, "tenant.import");
    assert!(theirs.iter().any(|(_, a)| a == "tenant.seal") && ours.iter().any(|(_, a)| a == "tenant.seal"));

    // The destination served a write (the call's activity row): the seal stays.
    let wrote = eventually(Duration::from_secs(30), || async {
        dst.count("SELECT count(*) FROM activity").await > rows["activity"] as i64
    })
    .await;
    assert!(wrote, "the call at the destination was recorded");
    src.refused(&["tenant", "unseal", "--tenant", "acme", "--against", &dst_url], "destination_written").await;
    assert_eq!(new.terminate().await, 0);
    for f in [&key_file, &export, &flipped, &truncated, &newer, &other_key, &forged] {
        let _ = std::fs::remove_file(f);
    }
}

/// An import killed mid-way wrote nothing; run again, it ends as an uninterrupted one would.
#[tokio::test]
async fn a_killed_import_leaves_nothing_and_runs_again() {
    let (src, dst) = (Deployment::new("src").await, Deployment::on_own_cluster("dst").await);
    assert_ne!(src.cluster().await, dst.cluster().await, "two PostgreSQL clusters");
    src.ok(&["tenant", "create", "acme", "--name", "Acme"]).await;
    let ws = src.ok(&["workspace", "create", "--tenant", "acme", "main"]).await;
    let workspace: Uuid = ws[0].split('\t').nth(1).unwrap().parse().unwrap();
    sqlx::query(
        "INSERT INTO activity (tenant_id, occurred_at, id, workspace_id, actor_kind, actor_id, tool, source, outcome, duration_ms)
         SELECT t.id, now() - n * interval '1 second', gen_random_uuid(), $1, 'token', 'bulk', 'call_tool', 'gateway', 'ok', n % 100
           FROM tenants t, generate_series(1, 60000) n WHERE t.slug = 'acme'",
    )
    .bind(workspace)
    .execute(&mut src.owner().await)
    .await
    .unwrap();
    let key_file = temp("key");
    src.ok(&["tenant", "transfer-key", "--to", &key_file]).await;
    let export = temp("export");
    src.ok(&["tenant", "export", "--tenant", "acme", "--to", &export, "--key-file", &key_file]).await;
    let empty = dst.footprint().await;

    let mut c = dst.cmd();
    c.args(["tenant", "import", "--from", &export, "--key-file", &key_file]);
    let mut child = c.spawn().unwrap();
    let database = dst.t.name.clone();
    let mid_way = eventually(Duration::from_secs(60), || {
        let database = database.clone();
        let url = dst.t.url.clone();
        async move {
            let Ok(mut c) = PgConnection::connect(url.expose()).await else { return false };
            let n: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = $1 AND query LIKE 'INSERT INTO activity%'",
            )
            .bind(database)
            .fetch_one(&mut c)
            .await
            .unwrap_or(0);
            n > 0
        }
    })
    .await;
    assert!(mid_way, "the import never reached the activity rows");
    child.start_kill().unwrap();
    child.wait().await.unwrap();
    // The server ends the killed client's transaction; poll until its backend is gone.
    let settled = eventually(Duration::from_secs(30), || {
        let url = dst.t.url.clone();
        let database = dst.t.name.clone();
        async move {
            let Ok(mut c) = PgConnection::connect(url.expose()).await else { return false };
            let n: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = $1 AND state <> 'idle' AND pid <> pg_backend_pid()",
            )
            .bind(database)
            .fetch_one(&mut c)
            .await
            .unwrap_or(1);
            n == 0
        }
    })
    .await;
    assert!(settled);
    assert_eq!(dst.footprint().await, empty, "the killed import wrote nothing");

    let out = dst.ok(&["tenant", "import", "--from", &export, "--key-file", &key_file]).await;
    assert!(out.iter().any(|l| l == "activity\t60000"), "{out:?}");
    let dst_url = dst.t.url.expose().to_owned();
    let verified = src.ok(&["tenant", "verify", "--tenant", "acme", "--against", &dst_url]).await;
    assert_eq!(verified.last().map(String::as_str), Some("verified"), "{verified:?}");
    let _ = std::fs::remove_file(&key_file);
    let _ = std::fs::remove_file(&export);
}
