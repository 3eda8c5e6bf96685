//! Connect links against a real PostgreSQL: minted into the outbox, listed, revoked
//! idempotently, consumed once under real concurrency, restored without undoing revocations,
//! refused when expired, scoped to their tenant, and driven from the CLI.

mod common;

use common::{TestDb, gatehouse, run};
use gatehouse::{
    admin_log::Audit,
    connect_links::{self, MintParams},
    error::Error,
    tenants::{self, TenantId},
    workspaces::{self, Connector},
};
use sqlx::{Connection, Executor};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

fn oauth_api(grant: &str) -> Connector {
    serde_json::from_value(serde_json::json!({
        "kind": "http_api", "base_url": "http://127.0.0.1:9/v1",
        "auth": { "type": "oauth", "grant": grant, "client_id": "gatehouse-downstream",
                  "authorization_endpoint": "http://127.0.0.1:9/auth", "token_endpoint": "http://127.0.0.1:9/token" },
        "tools": [{ "name": "me", "description": "Who am I", "method": "GET", "path": "/me", "read_only": true,
            "input_schema": { "type": "object", "additionalProperties": false, "properties": {} } }]
    }))
    .unwrap()
}

async fn setup(t: &TestDb, slug: &str) -> TenantId {
    let audit = Audit::cli();
    let tenant = tenants::create(&t.db, &audit, slug, "T").await.unwrap().id;
    workspaces::create(&t.db, tenant, &audit, "main", None).await.unwrap();
    workspaces::add_connector(&t.db, tenant, &audit, "main", None, "crm", oauth_api("shared")).await.unwrap();
    workspaces::add_connector(&t.db, tenant, &audit, "main", None, "mine", oauth_api("personal")).await.unwrap();
    tenant
}

/// The link secret in an outbox mail.
fn secret_in(body: &str) -> String {
    let at = body.find("/connect/").expect("a link in the mail");
    let rest = &body[at..];
    let end = rest.find('\n').unwrap_or(rest.len());
    rest[..end].rsplit('/').next().unwrap().to_owned()
}

/// The vault's key ring that seals outbox bodies in these tests (and its spec, for the CLI).
static KEYS: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| common::vault_key("k1"));
static RING: std::sync::LazyLock<gatehouse::vault::KeyRing> =
    std::sync::LazyLock::new(|| gatehouse::vault::KeyRing::parse(&KEYS).unwrap());

/// A `gatehouse` command with the vault on.
fn keyed(t: &TestDb) -> tokio::process::Command {
    let mut c = gatehouse(Some(&t.url));
    c.env("GATEHOUSE_VAULT_KEYS", &*KEYS);
    c
}

/// [`common::cli`] with the vault on.
async fn cli(t: &TestDb, args: &[&str]) -> Vec<String> {
    common::run_ok(keyed(t), args).await
}

fn code(e: &Error) -> &'static str {
    e.code()
}

/// One value read as the schema owner across tenants (the platform setting; RLS is forced).
async fn across_tenants<T>(t: &TestDb, sql: &'static str, arg: &str) -> T
where
    T: for<'r> sqlx::Decode<'r, sqlx::Postgres> + sqlx::Type<sqlx::Postgres> + Send + Unpin,
{
    let mut owner = t.owner_conn().await;
    let mut tx = owner.begin().await.unwrap();
    tx.execute("SELECT set_config('gatehouse.platform', 'on', true)").await.unwrap();
    sqlx::query_scalar(sql).bind(arg).fetch_one(&mut *tx).await.unwrap()
}

/// A link of the tenant `acme` on `http://gh.test`.
fn acme_link<'a>(workspace: &'a str, connector: &'a str, email: &'a str, ttl_days: Option<i64>) -> MintParams<'a> {
    MintParams { tenant_slug: "acme", public_url: "http://gh.test", workspace, connector, email, ttl_days }
}

async fn admin_actions(t: &TestDb, action: &str) -> i64 {
    across_tenants(t, "SELECT count(*) FROM admin_log WHERE action = $1", action).await
}

#[tokio::test]
async fn three_concurrent_consumes_have_exactly_one_winner_and_every_transition_is_logged() {
    let t = TestDb::new().await;
    let tenant = setup(&t, "acme").await;
    let audit = Audit::cli();
    let minted = connect_links::mint(&t.db, tenant, &RING, &audit, acme_link("main", "crm", "Ann@Example.test", None), None)
        .await
        .unwrap();
    let link = minted.link;
    assert_eq!((link.status.as_str(), link.email.as_str()), ("outstanding", "ann@example.test"));
    let days = (link.expires_at - link.created_at).num_hours();
    assert_eq!(days, 7 * 24, "default TTL is 7 days");

    // The mail waits in the outbox and carries the only copy of the secret.
    let mail = connect_links::outbox(&t.db, &RING, tenant, false).await.unwrap();
    assert_eq!(mail.len(), 1);
    assert_eq!(mail[0].id, minted.mail_id);
    assert_eq!(mail[0].to, "ann@example.test");
    let secret = secret_in(&mail[0].body);
    assert!(mail[0].body.contains(&format!("http://gh.test/connect/acme/{secret}")));
    // At rest the body is sealed: neither the secret nor the text is in the row.
    let stored: String = across_tenants(&t, "SELECT body FROM mail_outbox WHERE to_address = $1", "ann@example.test").await;
    assert!(!stored.contains(&secret) && !stored.contains("/connect/"), "{stored}");
    // Another key ring opens nothing.
    let other = gatehouse::vault::KeyRing::parse(&common::vault_key("k2")).unwrap();
    assert!(connect_links::outbox(&t.db, &other, tenant, false).await.unwrap()[0].body.contains("no longer holds"));
    assert_eq!(connect_links::check(&t.db, tenant, &secret).await.unwrap().id, link.id);
    assert_eq!(code(&connect_links::check(&t.db, tenant, "gcl_nope").await.unwrap_err()), "not_found");
    let stored = format!("{:?}", connect_links::list(&t.db, tenant, true).await.unwrap());
    assert!(!stored.contains(&secret), "a listing never shows the secret");

    // Three consumers race on separate connections: one conditional update decides.
    let mut tasks = Vec::new();
    for i in 0..3 {
        let (db, audit) = (t.db.clone(), Audit { actor: format!("racer:{i}"), request_id: None });
        tasks.push(tokio::spawn(
            async move { connect_links::consume(&db, tenant, &audit, link.id, &format!("account-{i}")).await },
        ));
    }
    let mut winners = Vec::new();
    let mut losers = Vec::new();
    for task in tasks {
        match task.await.unwrap() {
            Ok(l) => winners.push(l),
            Err(e) => losers.push(code(&e)),
        }
    }
    assert_eq!(winners.len(), 1, "exactly one consumer wins");
    assert_eq!(losers, ["link_used", "link_used"]);
    assert_eq!(winners[0].status, "used");
    assert!(winners[0].used_at.is_some() && winners[0].account_label.as_deref().unwrap().starts_with("account-"));
    assert_eq!(admin_actions(&t, "connect_link.consume").await, 1, "one transition, one admin-log row");
    assert_eq!(code(&connect_links::check(&t.db, tenant, &secret).await.unwrap_err()), "link_used");

    // Revoking a used link is idempotent and leaves it used.
    assert_eq!(connect_links::revoke(&t.db, tenant, &audit, link.id).await.unwrap().status, "used");
    assert_eq!(admin_actions(&t, "connect_link.revoke").await, 0);

    // Storing the credential failed afterwards: restore makes it outstanding again, once.
    let restored = connect_links::restore(&t.db, tenant, &audit, link.id).await.unwrap();
    assert_eq!((restored.status.as_str(), restored.used_at, restored.account_label), ("outstanding", None, None));
    assert_eq!(connect_links::list(&t.db, tenant, false).await.unwrap().len(), 1);
    assert_eq!(connect_links::consume(&t.db, tenant, &audit, link.id, "again").await.unwrap().status, "used");

    // Revocation of an outstanding link; revoking again changes nothing; restore never undoes it.
    let second = connect_links::mint(&t.db, tenant, &RING, &audit, acme_link("main", "crm", "bob@example.test", Some(30)), None)
        .await
        .unwrap()
        .link;
    assert_eq!((second.expires_at - second.created_at).num_days(), 30);
    assert_eq!(connect_links::revoke(&t.db, tenant, &audit, second.id).await.unwrap().status, "revoked");
    let again = connect_links::revoke(&t.db, tenant, &audit, second.id).await.unwrap();
    assert_eq!((again.status.as_str(), again.revoked_by.as_deref()), ("revoked", Some("cli")));
    assert_eq!(admin_actions(&t, "connect_link.revoke").await, 1, "an idempotent repeat logs nothing");
    assert_eq!(code(&connect_links::restore(&t.db, tenant, &audit, second.id).await.unwrap_err()), "link_revoked");
    assert_eq!(code(&connect_links::consume(&t.db, tenant, &audit, second.id, "x").await.unwrap_err()), "link_revoked");

    // Outstanding only, or the whole history.
    assert!(connect_links::list(&t.db, tenant, false).await.unwrap().is_empty());
    let history = connect_links::list(&t.db, tenant, true).await.unwrap();
    assert_eq!(history.iter().map(|l| l.status.as_str()).collect::<Vec<_>>(), ["revoked", "used"]);
    assert_eq!(admin_actions(&t, "connect_link.create").await, 2);
    assert_eq!(admin_actions(&t, "connect_link.restore").await, 1);
}

#[tokio::test]
async fn expired_links_are_refused_and_links_are_bounded_checked_and_tenant_scoped() {
    let t = TestDb::new().await;
    let acme = setup(&t, "acme").await;
    let other = setup(&t, "other").await;
    let audit = Audit::cli();
    let mint = |ttl: Option<i64>, connector: &'static str, ws: &'static str| {
        let db = t.db.clone();
        let audit = audit.clone();
        async move { connect_links::mint(&db, acme, &RING, &audit, acme_link(ws, connector, "a@example.test", ttl), None).await }
    };
    for bad in [0, 31, -1] {
        assert_eq!(code(&mint(Some(bad), "crm", "main").await.unwrap_err()), "invalid_ttl");
    }
    assert_eq!(code(&mint(None, "mine", "main").await.unwrap_err()), "not_oauth_shared", "a personal grant takes no link");
    assert_eq!(code(&mint(None, "nope", "main").await.unwrap_err()), "not_found");
    assert_eq!(code(&mint(None, "crm", "nope").await.unwrap_err()), "not_found");
    let bad_email =
        connect_links::mint(&t.db, acme, &RING, &audit, acme_link("main", "crm", "not-an-email", None), None).await.unwrap_err();
    assert_eq!(code(&bad_email), "invalid_email");

    let link = mint(Some(1), "crm", "main").await.unwrap().link;
    let secret = secret_in(&connect_links::outbox(&t.db, &RING, acme, false).await.unwrap()[0].body);
    // Another tenant sees nothing of it.
    assert_eq!(code(&connect_links::revoke(&t.db, other, &audit, link.id).await.unwrap_err()), "not_found");
    assert_eq!(code(&connect_links::consume(&t.db, other, &audit, link.id, "x").await.unwrap_err()), "not_found");
    assert_eq!(code(&connect_links::check(&t.db, other, &secret).await.unwrap_err()), "not_found");
    assert!(connect_links::outbox(&t.db, &RING, other, true).await.unwrap().is_empty());

    // Expiry is the database clock's: move it into the past as the schema owner.
    let mut owner = t.owner_conn().await;
    let mut tx = owner.begin().await.unwrap();
    tx.execute("SELECT set_config('gatehouse.platform', 'on', true)").await.unwrap();
    sqlx::query("UPDATE connect_links SET expires_at = now() - interval '1 second' WHERE id = $1")
        .bind(link.id)
        .execute(&mut *tx)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    assert_eq!(code(&connect_links::check(&t.db, acme, &secret).await.unwrap_err()), "link_expired");
    assert_eq!(code(&connect_links::consume(&t.db, acme, &audit, link.id, "late").await.unwrap_err()), "link_expired");
    assert!(connect_links::list(&t.db, acme, false).await.unwrap().is_empty(), "an expired link is not outstanding");
    assert!(connect_links::list(&t.db, acme, true).await.unwrap()[0].expired);
}

#[tokio::test]
async fn the_cli_mints_lists_and_revokes_links_and_reads_the_outbox() {
    let t = TestDb::new().await;
    setup(&t, "acme").await;
    let args =
        ["connect-link", "create", "--tenant", "acme", "--workspace", "main", "--connector", "crm", "--email", "c@example.test"];
    let out = cli(&t, &args).await;
    let id = out[0].clone();
    let listed = cli(&t, &["connect-link", "list", "--tenant", "acme"]).await;
    assert_eq!(listed.len(), 1);
    assert!(listed[0].starts_with(&format!("{id}\toutstanding\tcrm\tc@example.test\t")), "{listed:?}");
    let outbox = cli(&t, &["outbox", "list", "--tenant", "acme"]).await;
    let mail: serde_json::Value = serde_json::from_str(&outbox[0]).unwrap();
    assert_eq!(mail["id"].as_str(), Some(out[1].as_str()));
    assert!(mail["body"].as_str().unwrap().contains("/connect/acme/gcl_"));
    assert_eq!(cli(&t, &["outbox", "sent", "--tenant", "acme", &out[1]]).await, ["sent"]);
    assert!(cli(&t, &["outbox", "list", "--tenant", "acme"]).await.is_empty());
    let mut again = keyed(&t);
    again.args(["outbox", "sent", "--tenant", "acme", &out[1]]);
    assert_eq!(run(again).await.0, 3, "a mail is marked sent once");
    assert_eq!(cli(&t, &["connect-link", "revoke", "--tenant", "acme", &id]).await, ["revoked"]);
    assert_eq!(cli(&t, &["connect-link", "revoke", "--tenant", "acme", &id]).await, ["revoked"]);
    assert!(cli(&t, &["connect-link", "list", "--tenant", "acme"]).await.is_empty());
    assert_eq!(cli(&t, &["connect-link", "list", "--tenant", "acme", "--history"]).await.len(), 1);
    let mut bad = keyed(&t);
    bad.args([
        "connect-link",
        "create",
        "--tenant",
        "acme",
        "--workspace",
        "main",
        "--connector",
        "crm",
        "--email",
        "c@example.test",
    ]);
    bad.args(["--ttl-days", "31"]);
    assert_eq!(run(bad).await.0, 1);
}

/// A minimal SMTP server on loopback that accepts every message and keeps its DATA.
async fn smtp_sink() -> (u16, std::sync::Arc<std::sync::Mutex<Vec<String>>>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let got: std::sync::Arc<std::sync::Mutex<Vec<String>>> = Default::default();
    let keep = got.clone();
    tokio::spawn(async move {
        loop {
            let (socket, _) = listener.accept().await.unwrap();
            let keep = keep.clone();
            tokio::spawn(async move {
                let (read, mut write) = socket.into_split();
                let mut lines = BufReader::new(read).lines();
                write.write_all(b"220 sink ESMTP\r\n").await.unwrap();
                let mut data: Option<String> = None;
                while let Ok(Some(line)) = lines.next_line().await {
                    if let Some(body) = data.as_mut() {
                        if line == "." {
                            keep.lock().unwrap().push(std::mem::take(body));
                            data = None;
                            write.write_all(b"250 queued\r\n").await.unwrap();
                        } else {
                            body.push_str(&line);
                            body.push('\n');
                        }
                        continue;
                    }
                    let verb = line.split_whitespace().next().unwrap_or("").to_ascii_uppercase();
                    let reply: &[u8] = match verb.as_str() {
                        "EHLO" | "HELO" => b"250 sink\r\n",
                        "DATA" => {
                            data = Some(String::new());
                            b"354 go ahead\r\n"
                        }
                        "QUIT" => {
                            write.write_all(b"221 bye\r\n").await.unwrap();
                            break;
                        }
                        _ => b"250 ok\r\n",
                    };
                    write.write_all(reply).await.unwrap();
                }
            });
        }
    });
    (port, got)
}

#[tokio::test]
async fn with_smtp_configured_the_link_is_mailed_and_leaves_the_outbox() {
    let t = TestDb::new().await;
    setup(&t, "acme").await;
    let (port, got) = smtp_sink().await;
    let mut c = keyed(&t);
    c.env("GATEHOUSE_SMTP_URL", format!("smtp://127.0.0.1:{port}")).env("GATEHOUSE_SMTP_FROM", "Gatehouse <gh@example.test>");
    c.args([
        "connect-link",
        "create",
        "--tenant",
        "acme",
        "--workspace",
        "main",
        "--connector",
        "crm",
        "--email",
        "d@example.test",
    ]);
    let (code, out, err) = run(c).await;
    assert_eq!(code, 0, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[2], "sent", "{out}");
    let mails = got.lock().unwrap().clone();
    assert_eq!(mails.len(), 1);
    assert!(mails[0].contains("To: d@example.test") && mails[0].contains("/connect/acme/gcl_"), "{}", mails[0]);
    assert!(cli(&t, &["outbox", "list", "--tenant", "acme"]).await.is_empty(), "delivered mail leaves the outbox");
    assert_eq!(cli(&t, &["outbox", "list", "--tenant", "acme", "--all"]).await.len(), 1);

    // A dead SMTP server: the mail stays in the outbox, and the link is still minted.
    let mut c = keyed(&t);
    c.env("GATEHOUSE_SMTP_URL", format!("smtp://127.0.0.1:{}", common::free_port()));
    c.args([
        "connect-link",
        "create",
        "--tenant",
        "acme",
        "--workspace",
        "main",
        "--connector",
        "crm",
        "--email",
        "e@example.test",
    ]);
    let (code, out, err) = run(c).await;
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.lines().nth(2), Some("outbox"));
    assert_eq!(cli(&t, &["outbox", "list", "--tenant", "acme"]).await.len(), 1);
    // ... and the undelivered mail is an ops failure of the tenant, naming neither the
    // recipient nor the link.
    let mut owner = t.owner_conn().await;
    owner.execute("SELECT set_config('gatehouse.platform', 'on', false)").await.unwrap();
    let failures: Vec<(String, String, Option<uuid::Uuid>, String)> =
        sqlx::query_as("SELECT operation, code, tenant_id, message FROM ops_failures").fetch_all(&mut owner).await.unwrap();
    assert_eq!(failures.len(), 1, "{failures:?}");
    let (operation, code, tenant, message) = &failures[0];
    assert_eq!((operation.as_str(), code.as_str(), tenant.is_some()), ("mail.send", "not_delivered", true));
    assert!(!message.contains("e@example.test") && !message.contains("gcl_"), "{message}");

    // A malformed URL stops the command and never echoes it.
    let mut c = keyed(&t);
    c.env("GATEHOUSE_SMTP_URL", "ftp://user:hunter2@x").args(["connect-link", "list", "--tenant", "acme"]);
    let (code, _, err) = run(c).await;
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("GATEHOUSE_SMTP_URL") && !err.contains("hunter2"), "{err}");
}
