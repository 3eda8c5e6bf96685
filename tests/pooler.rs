//! Gatehouse behind pgbouncer in transaction mode (Debian's `pgbouncer`, 1.18: no support for
//! protocol-level prepared statements). The bouncer has two server connections for the test
//! database, so every client connection shares them and any reliance on session state (the
//! role, a cached prepared statement, a statement outside a transaction) fails here.
//!
//! Covered through the bouncer: the CLI (tenants, workspaces, connectors, credentials,
//! tokens), `serve` with its replica registry (whose `LISTEN` goes to `GATEHOUSE_MIGRATE_URL`
//! directly), sign-in, MCP calls, revocation, and a compare-and-set race with exactly one
//! winner. Migrations go to the direct URL (their advisory lock needs a session).

mod common;

use common::{
    Everything, Machine, Served, TestDb, dev_sign_in, gatehouse, mcp_post, mcp_tool,
    pooler::{Bouncer, bouncer, log},
    run,
};
use gatehouse::{
    admin_log::Audit,
    config::{Pooler, Secret},
    db::Db,
    kv::{self, BoundedValue, Expect, Key, Next},
    tenants,
};
use serde_json::json;
use sqlx::{Connection, Executor, Row};

/// A `gatehouse` command whose database is reached through the bouncer.
fn pooled(b: &Bouncer, direct: &Secret) -> tokio::process::Command {
    let mut cmd = gatehouse(Some(&b.url));
    cmd.env("GATEHOUSE_DB_POOLER", "transaction").env("GATEHOUSE_MIGRATE_URL", direct.expose());
    cmd
}

async fn pooled_cli(b: &Bouncer, direct: &Secret, args: &[&str]) -> Vec<String> {
    let mut cmd = pooled(b, direct);
    cmd.args(args);
    let (code, out, err) = run(cmd).await;
    assert_eq!(code, 0, "gatehouse {args:?} through pgbouncer: {err}\n{}", log(&b.dir));
    out.lines().map(str::to_owned).collect()
}

/// The bouncer's own view of `database` (its admin console speaks only the simple protocol):
/// the server connections it holds, and the clients connected now.
async fn pools(b: &Bouncer, database: &str) -> (i64, i64) {
    let admin = format!("{}/pgbouncer", b.url.expose().rsplit_once('/').unwrap().0);
    let mut conn = sqlx::PgConnection::connect(&admin).await.expect("connect to pgbouncer's admin console");
    let rows = conn.fetch_all("SHOW POOLS").await.unwrap();
    let count = |row: &sqlx::postgres::PgRow, column: &str| -> i64 {
        row.try_get::<i64, _>(column).or_else(|_| row.try_get::<i32, _>(column).map(i64::from)).unwrap_or(0)
    };
    let mut servers = 0;
    let mut clients = 0;
    for row in rows.iter().filter(|r| r.try_get::<String, _>("database").is_ok_and(|d| d == database)) {
        servers += ["sv_active", "sv_idle", "sv_used", "sv_tested", "sv_login"].iter().map(|c| count(row, c)).sum::<i64>();
        clients += ["cl_active", "cl_waiting"].iter().map(|c| count(row, c)).sum::<i64>();
    }
    (servers, clients)
}

#[tokio::test]
async fn the_cli_serve_sign_in_mcp_revocation_and_cas_work_through_pgbouncer_in_transaction_mode() {
    let t = TestDb::new().await;
    let b = bouncer(&t.url, 2).await;

    // Before the change this very command failed: `prepared statement "sqlx_s_1" already
    // exists` (two clients' statements met on one server connection).
    pooled_cli(&b, &t.url, &["tenant", "create", "acme", "--name", "Acme"]).await;
    pooled_cli(&b, &t.url, &["workspace", "create", "--tenant", "acme", "main"]).await;
    let everything = Everything::start().await;
    let args = ["connector", "add", "--tenant", "acme", "--workspace", "main", "--id", "everything", "--kind", "remote_mcp"];
    pooled_cli(&b, &t.url, &[&args[..], &["--url", &everything.url]].concat()).await;
    let sc = pooled_cli(&b, &t.url, &["service-credential", "create", "--tenant", "acme", "--name", "ci"]).await;
    let tok = pooled_cli(&b, &t.url, &["token", "create", "--tenant", "acme", "--name", "ci token"]).await;
    let m = Machine { client_id: sc[1].clone(), client_secret: sc[2].clone(), token: tok[1].clone(), token_id: tok[0].clone() };

    let served = Served::start(pooled(&b, &t.url)).await;
    let endpoint = format!("{}/t/acme/w/main/mcp", served.base);

    // Many calls at once: more clients than the bouncer's two server connections.
    let calls: Vec<_> = (0..24)
        .map(|i| {
            let (endpoint, m) = (endpoint.clone(), m.clone());
            tokio::spawn(async move {
                let args = json!({ "address": "everything.echo", "args": { "message": format!("hi {i}") } });
                mcp_tool(&endpoint, &m, "call_tool", args).await
            })
        })
        .collect();
    for (i, call) in calls.into_iter().enumerate() {
        let (is_error, _, text) = call.await.unwrap();
        assert!(!is_error, "call {i} through pgbouncer failed: {text}\n{}", served.logs());
        assert!(text.contains(&format!("hi {i}")), "{text}");
    }

    // Sign-in writes and reads its flow and session through the bouncer too.
    let browser = dev_sign_in(&served, "ann@example.com").await;
    let me = browser.client.get(format!("{}/api/v1/me", served.base)).send().await.unwrap();
    assert_eq!(me.status(), 200, "{}", me.text().await.unwrap_or_default());

    // A revoked token is refused at once (the replica registry's LISTEN is on the direct URL).
    pooled_cli(&b, &t.url, &["token", "revoke", "--tenant", "acme", &m.token_id]).await;
    let refused = mcp_post(&endpoint, &m, "tools/call", json!({ "name": "skills", "arguments": {} })).await;
    assert_eq!(refused.status(), 401, "a revoked token is refused on the next request");

    // A compare-and-set race through the bouncer: exactly one winner per round, and one
    // admin-log row per win.
    let db = Db::connect_through(&b.url, 32, Pooler::Transaction, Some(&t.url)).await.unwrap();
    let tenant = tenants::by_slug(&db, "acme").await.unwrap().id;
    let key = Key::parse("race").unwrap();
    for round in 0..5 {
        let expect = if round == 0 { Expect::Absent } else { Expect::Value(BoundedValue::parse(json!(round - 1)).unwrap()) };
        let tasks: Vec<_> = (0..16)
            .map(|_| {
                let (db, key, expect) = (db.clone(), key.clone(), expect.clone());
                tokio::spawn(async move {
                    let next = Next::Value(BoundedValue::parse(json!(round)).unwrap());
                    kv::compare_and_set(&db, tenant, &Audit::cli(), &key, &expect, &next, None).await.unwrap()
                })
            })
            .collect();
        let mut wins = 0;
        for task in tasks {
            wins += usize::from(task.await.unwrap());
        }
        assert_eq!(wins, 1, "round {round}: exactly one compare-and-set wins");
    }

    // The bouncer really shared its two server connections among all those clients.
    let (servers, clients) = pools(&b, &t.name).await;
    assert!(servers <= 2, "the bouncer held {servers} server connections");
    assert!(clients > 2, "only {clients} clients reached the bouncer");
    assert_eq!(served.terminate().await, 0);
}
