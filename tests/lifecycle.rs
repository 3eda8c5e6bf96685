//! Blueprints, binds and the workspace lifecycle (issue 7 §1, §2, §9), through real
//! `gatehouse serve` processes on one database: every compare-and-set raced from three of them
//! with an exact-once assertion, repeated over several rounds.

mod common;

use std::collections::BTreeMap;

use common::{
    Served, TestDb,
    browser::Browser,
    cli, dev_sign_in,
    downstream::{as_owner, count},
    gatehouse, json_path, mcp_post, provision, run,
};
use futures::future::join_all;
use reqwest::StatusCode;
use serde_json::{Value, json};

/// Racers per server process in every race.
const PER_PROCESS: usize = 3;
/// Rounds of every race.
const ROUNDS: usize = 4;

/// A signed-in owner (alice) of `acme`, and three server processes on one database.
struct Fleet {
    t: TestDb,
    servers: Vec<Served>,
    alice: Browser,
    csrf: String,
}

impl Fleet {
    async fn start() -> Fleet {
        let t = TestDb::new().await;
        cli(&t.url, &["tenant", "create", "acme", "--name", "Acme", "--owner-email", "alice@example.test"]).await;
        cli(&t.url, &["tenant", "create", "globex", "--name", "Globex"]).await;
        let mut servers = Vec::new();
        for _ in 0..3 {
            servers.push(Served::start(gatehouse(Some(&t.url))).await);
        }
        let alice = dev_sign_in(&servers[0], "alice@example.test").await;
        let csrf = alice.csrf().await;
        Fleet { t, servers, alice, csrf }
    }

    /// A same-origin write to server `i` (the session lives in the database, so every server
    /// knows it); (status, body).
    async fn send(&self, i: usize, method: reqwest::Method, path: &str, body: Option<Value>) -> (StatusCode, Value) {
        let base = &self.servers[i].base;
        let mut req =
            self.alice.client.request(method, format!("{base}{path}")).header("origin", base).header("x-csrf-token", &self.csrf);
        if let Some(body) = body {
            req = req.json(&body);
        }
        let r = req.send().await.unwrap();
        let status = r.status();
        let text = r.text().await.unwrap();
        (status, serde_json::from_str(&text).unwrap_or(Value::String(text)))
    }

    async fn post(&self, i: usize, path: &str, body: Value) -> (StatusCode, Value) {
        self.send(i, reqwest::Method::POST, path, Some(body)).await
    }

    async fn get(&self, path: &str) -> Value {
        let (status, body) = self.send(0, reqwest::Method::GET, path, None).await;
        assert_eq!(status, 200, "{path}: {body}");
        body
    }

    /// `PER_PROCESS` concurrent requests to each of the three servers, all at once; each
    /// racer's body comes from `body(racer)`.
    async fn race(&self, path: &str, body: impl Fn(usize) -> Value) -> Vec<(StatusCode, Value)> {
        let racers = (0..3 * PER_PROCESS).map(|n| self.post(n % 3, path, body(n)));
        join_all(racers).await
    }

    async fn admin_rows(&self, action: &str, target: &str) -> i64 {
        let sql = format!("SELECT count(*) FROM admin_log WHERE action = '{action}' AND target = '{target}'");
        count(&self.t, &sql).await
    }
}

/// A configuration document that differs per `n`.
fn document(n: usize) -> Value {
    json!({ "connectors": { format!("c{n}"): { "kind": "remote_mcp", "url": format!("http://127.0.0.1:9/mcp{n}") } } })
}

/// Exactly one racer got `winner`; every other one got `loser` with `code`. The winner's index.
fn exactly_one(results: &[(StatusCode, Value)], winner: u16, loser: u16, code: &str) -> usize {
    let winners: Vec<usize> = results.iter().enumerate().filter(|(_, r)| r.0 == winner).map(|(i, _)| i).collect();
    assert_eq!(winners.len(), 1, "exactly one winner: {results:?}");
    for (i, (status, body)) in results.iter().enumerate() {
        if i != winners[0] {
            assert_eq!((status.as_u16(), body["code"].as_str()), (loser, Some(code)), "{body}");
        }
    }
    winners[0]
}

#[tokio::test]
async fn admission_and_binds_raced_by_three_servers_decide_exactly_once() {
    let f = Fleet::start().await;
    let bp = "/api/v1/tenants/acme/blueprints";
    let (status, body) = f.post(1, bp, json!({ "slug": "base", "name": "Base" })).await;
    assert_eq!(status, 201, "{body}");
    let (status, body) = f.post(2, "/api/v1/tenants/acme/workspaces", json!({ "slug": "main" })).await;
    assert_eq!(status, 201, "{body}");

    for round in 1..=ROUNDS {
        // A new version, pending; then admits and rejects race for it from three servers.
        let (status, v) = f.post(round % 3, &format!("{bp}/base/versions"), json!({ "document": document(round) })).await;
        assert_eq!(status, 201, "{v}");
        assert_eq!((v["version"].as_i64(), v["admission"].as_str()), (Some(round as i64), Some("pending")));
        // Odd rounds: every racer admits; even rounds: admits and rejects race each other.
        let verb = |n: usize| if !round.is_multiple_of(2) || n.is_multiple_of(2) { "admit" } else { "reject" };
        let fleet = &f;
        let racers = (0..3 * PER_PROCESS).map(|n| {
            let path = format!("{bp}/base/versions/{round}/{}", verb(n));
            async move { fleet.post(n % 3, &path, json!({})).await }
        });
        let results = join_all(racers).await;
        let winner = exactly_one(&results, 200, 409, "already_decided");
        let decided = if verb(winner) == "admit" { "admitted" } else { "rejected" };
        assert_eq!(results[winner].1["admission"], decided);
        let shown = f.get(&format!("{bp}/base")).await;
        assert_eq!(shown["versions"][round - 1]["admission"], decided);
        let target = format!("blueprint:base@{round}");
        assert_eq!(f.admin_rows("blueprint.admit", &target).await + f.admin_rows("blueprint.reject", &target).await, 1);
        if decided == "rejected" {
            // Bind needs an admitted version: add the next one and admit it alone.
            continue;
        }

        // Binds of that version race from the bound version every racer read.
        let before = f.get("/api/v1/tenants/acme/workspaces/main").await;
        let (read, revision) =
            (before["workspace"]["bound_version"].as_i64().unwrap(), before["workspace"]["revision"].as_i64().unwrap());
        let versions = count(&f.t, "SELECT count(*) FROM workspace_versions").await;
        let binds = f.admin_rows("workspace.bind", "workspace:main").await;
        let path = "/api/v1/tenants/acme/workspaces/main/bind";
        let results = f.race(path, |_| json!({ "blueprint": "base", "version": round, "expected_version": read })).await;
        let winner = exactly_one(&results, 200, 412, "binding_changed");
        let won = &results[winner].1;
        assert_eq!(won["workspace"]["bound_version"].as_i64(), Some(read + 1));
        assert_eq!(won["workspace"]["revision"].as_i64(), Some(revision + 1));
        assert_eq!(count(&f.t, "SELECT count(*) FROM workspace_versions").await, versions + 1, "one new version row");
        assert_eq!(f.admin_rows("workspace.bind", "workspace:main").await, binds + 1, "one admin-log row");
        for (_, body) in results.iter().filter(|r| r.0 == 412) {
            assert_eq!(body["detail"], "binding changed; reload and retry");
        }
        // The workspace runs the blueprint version's document, bound to it.
        let after = f.get("/api/v1/tenants/acme/workspaces/main").await;
        assert_eq!(after["document"], shown["versions"][round - 1]["document"]);
        assert_eq!(after["document"]["connectors"][format!("c{round}")]["url"], format!("http://127.0.0.1:9/mcp{round}"));
        let row = format!(
            "SELECT count(*) FROM workspaces w JOIN blueprints b ON b.id = w.blueprint_id
              WHERE w.slug = 'main' AND b.slug = 'base' AND w.blueprint_version = {round} AND w.bound_version = {}",
            read + 1
        );
        assert_eq!(count(&f.t, &row).await, 1);
    }
    assert!(f.admin_rows("workspace.bind", "workspace:main").await >= (ROUNDS / 2) as i64, "every odd round bound");

    // Versions added concurrently against the same latest version: one wins, the rest 412.
    for _ in 0..ROUNDS {
        let latest = f.get(&format!("{bp}/base")).await["latest_version"].as_i64().unwrap();
        let results =
            f.race(&format!("{bp}/base/versions"), |n| json!({ "document": document(100 + n), "expected_latest": latest })).await;
        exactly_one(&results, 201, 412, "blueprint_changed");
        assert_eq!(f.get(&format!("{bp}/base")).await["latest_version"].as_i64(), Some(latest + 1));
    }
    let versions = count(&f.t, "SELECT count(*) FROM blueprint_versions").await;
    assert_eq!(versions, (2 * ROUNDS) as i64);
}

#[tokio::test]
async fn lifecycle_transitions_raced_by_three_servers_happen_exactly_once() {
    let f = Fleet::start().await;
    let (status, body) = f.post(0, "/api/v1/tenants/acme/workspaces", json!({ "slug": "main" })).await;
    assert_eq!(status, 201, "{body}");
    let mut revision = body["revision"].as_i64().unwrap();
    let mut logged: BTreeMap<&str, i64> = BTreeMap::new();
    for round in 0..ROUNDS {
        for (verb, to, allowed) in [
            ("suspend", "suspended", "active"),
            ("archive", "archived", "active or suspended"),
            ("unarchive", "active", "archived"),
            ("suspend", "suspended", "active"),
            ("resume", "active", "suspended"),
            ("archive", "archived", "active or suspended"),
            ("unarchive", "active", "archived"),
        ] {
            let results = f.race(&format!("/api/v1/tenants/acme/workspaces/main/{verb}"), |_| json!({})).await;
            let winner = exactly_one(&results, 200, 409, "invalid_transition");
            assert_eq!(results[winner].1["status"], to, "round {round}, {verb}");
            revision += 1;
            assert_eq!(results[winner].1["revision"].as_i64(), Some(revision), "one revision per transition");
            for (_, body) in results.iter().filter(|r| r.0 == 409) {
                let detail = body["detail"].as_str().unwrap();
                assert!(detail.contains(&format!("allowed only from {allowed}")), "{detail}");
            }
            *logged.entry(verb).or_default() += 1;
            assert_eq!(
                f.admin_rows(&format!("workspace.{verb}"), "workspace:main").await,
                logged[verb],
                "one row per transition"
            );
        }
    }
    let row = f.get("/api/v1/tenants/acme/workspaces/main").await;
    assert_eq!((row["workspace"]["status"].as_str(), row["workspace"]["revision"].as_i64()), (Some("active"), Some(revision)));
}

#[tokio::test]
async fn endpoints_follow_the_lifecycle_and_tenant_suspension() {
    let f = Fleet::start().await;
    cli(&f.t.url, &["workspace", "create", "--tenant", "acme", "main"]).await;
    let m = provision(&f.t.url, "acme").await;
    // Every server answers the same, each on its next request after a transition.
    let statuses = || async {
        let mut out = Vec::new();
        for s in &f.servers {
            let r = mcp_post(&format!("{}/t/acme/w/main/mcp", s.base), &m, "tools/list", json!({})).await;
            let status = r.status().as_u16();
            let body: Value = r.json().await.unwrap_or(Value::Null);
            out.push((status, body["code"].as_str().unwrap_or("").to_owned()));
        }
        out
    };
    let all = |status: u16, code: &str| vec![(status, code.to_owned()); 3];
    assert_eq!(statuses().await, all(200, ""));

    // A bind reaches every server's endpoint on its next request: the bound version's pool is
    // served by all three (each had the old configuration cached).
    let pool_statuses = || async {
        let mut out = Vec::new();
        for s in &f.servers {
            out.push(mcp_post(&format!("{}/t/acme/w/main/mcp/p", s.base), &m, "ping", json!({})).await.status().as_u16());
        }
        out
    };
    assert_eq!(pool_statuses().await, [404; 3]);
    let mut pooled = document(1);
    pooled["pools"] = json!({ "p": { "tools": ["c1"] } });
    cli(&f.t.url, &["blueprint", "create", "--tenant", "acme", "base"]).await;
    cli(&f.t.url, &["blueprint", "version", "--tenant", "acme", "base", "--file", &json_path(&pooled)]).await;
    cli(&f.t.url, &["blueprint", "admit", "--tenant", "acme", "base", "1"]).await;
    let bind = ["workspace", "bind", "--tenant", "acme", "main", "--blueprint", "base", "--version", "1"];
    cli(&f.t.url, &[&bind[..], &["--expected-version", "1"]].concat()).await;
    assert_eq!(pool_statuses().await, [200; 3]);
    assert_eq!(statuses().await, all(200, ""));

    let ws = |verb: &str| ["workspace", verb, "--tenant", "acme", "main"].map(str::to_owned);
    let line = cli(&f.t.url, &ws("suspend").each_ref().map(String::as_str)).await;
    assert_eq!(line[0].split('\t').nth(1), Some("suspended"));
    assert_eq!(statuses().await, all(403, "workspace_suspended"));
    // Configuration edits are refused while the workspace is not active.
    let configure = json!({ "classification": {} });
    let (status, body) =
        f.send(1, reqwest::Method::PATCH, "/api/v1/tenants/acme/workspaces/main/config", Some(configure.clone())).await;
    assert_eq!((status.as_u16(), body["code"].as_str()), (409, Some("workspace_not_active")));

    cli(&f.t.url, &ws("resume").each_ref().map(String::as_str)).await;
    assert_eq!(statuses().await, all(200, ""));
    cli(&f.t.url, &ws("archive").each_ref().map(String::as_str)).await;
    assert_eq!(statuses().await, all(404, "not_found"));
    let (status, body) =
        f.send(2, reqwest::Method::PATCH, "/api/v1/tenants/acme/workspaces/main/config", Some(configure.clone())).await;
    assert_eq!((status.as_u16(), body["code"].as_str()), (409, Some("workspace_not_active")));
    cli(&f.t.url, &ws("unarchive").each_ref().map(String::as_str)).await;
    assert_eq!(statuses().await, all(200, ""));
    let (status, body) = f.send(0, reqwest::Method::PATCH, "/api/v1/tenants/acme/workspaces/main/config", Some(configure)).await;
    assert_eq!(status, 200, "{body}");

    // A suspended tenant: its endpoints answer like a suspended workspace, its API says why.
    cli(&f.t.url, &["tenant", "suspend", "acme"]).await;
    assert_eq!(statuses().await, all(403, "workspace_suspended"));
    let r = m.headers(common::http().get(format!("{}/api/v1/tenants/acme/workspaces", f.servers[1].base))).send().await.unwrap();
    assert_eq!(r.status(), 403);
    assert_eq!(r.json::<Value>().await.unwrap()["code"], "tenant_suspended");
    cli(&f.t.url, &["tenant", "activate", "acme"]).await;
    assert_eq!(statuses().await, all(200, ""));
}

#[tokio::test]
async fn illegal_transitions_foreign_tenants_and_unbindable_states_are_refused() {
    let f = Fleet::start().await;
    cli(&f.t.url, &["workspace", "create", "--tenant", "acme", "main"]).await;
    cli(&f.t.url, &["workspace", "create", "--tenant", "globex", "other"]).await;
    let at = |verb: &str| format!("/api/v1/tenants/acme/workspaces/main/{verb}");

    for (verb, allowed) in [("resume", "suspended"), ("unarchive", "archived"), ("activate", "provisioning")] {
        let (status, body) = f.post(0, &at(verb), json!({})).await;
        assert_eq!((status.as_u16(), body["code"].as_str()), (409, Some("invalid_transition")), "{verb}");
        let detail = body["detail"].as_str().unwrap();
        assert!(detail.contains("that is active") && detail.ends_with(&format!("allowed only from {allowed}")), "{detail}");
    }
    // A workspace still provisioning can only be activated.
    as_owner(&f.t, "UPDATE workspaces SET status = 'provisioning' WHERE slug = 'main'").await;
    let (status, body) = f.post(1, &at("suspend"), json!({})).await;
    assert_eq!((status.as_u16(), body["code"].as_str()), (409, Some("invalid_transition")));
    let (status, body) = f.post(1, &at("activate"), json!({})).await;
    assert_eq!((status.as_u16(), body["status"].as_str()), (200, Some("active")));
    assert_eq!(f.admin_rows("workspace.activate", "workspace:main").await, 1);
    // Refusals wrote nothing.
    assert_eq!(
        count(&f.t, "SELECT count(*) FROM admin_log WHERE action LIKE 'workspace.%' AND target = 'workspace:main'").await,
        2
    );

    // Another tenant's workspace, a missing one, and another tenant's path: all 404.
    for path in [
        "/api/v1/tenants/acme/workspaces/other/suspend".to_owned(),
        "/api/v1/tenants/acme/workspaces/nope/archive".to_owned(),
        "/api/v1/tenants/globex/workspaces/other/suspend".to_owned(),
        "/api/v1/tenants/acme/workspaces/other/bind".to_owned(),
    ] {
        let body = json!({ "blueprint": "base", "version": 1, "expected_version": 1 });
        let (status, answer) = f.post(2, &path, body).await;
        assert_eq!(status, 404, "{path}: {answer}");
    }
    let (code, _, err) = run({
        let mut c = gatehouse(Some(&f.t.url));
        c.args(["workspace", "suspend", "--tenant", "acme", "other"]);
        c
    })
    .await;
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("not_found"), "{err}");
    assert_eq!(count(&f.t, "SELECT count(*) FROM workspaces WHERE slug = 'other' AND status = 'active'").await, 1);

    // A reap claimed: no restore, no bind.
    let bp = "/api/v1/tenants/acme/blueprints";
    f.post(0, bp, json!({ "slug": "base" })).await;
    f.post(0, &format!("{bp}/base/versions"), json!({ "document": document(1) })).await;
    f.post(0, &format!("{bp}/base/versions/1/admit"), json!({})).await;
    f.post(0, &at("archive"), json!({})).await;
    let bind = json!({ "blueprint": "base", "version": 1, "expected_version": 1 });
    let (status, body) = f.post(0, &at("bind"), bind.clone()).await;
    assert_eq!((status.as_u16(), body["code"].as_str()), (409, Some("workspace_not_bindable")), "{body}");
    as_owner(&f.t, "UPDATE workspaces SET reap_claimed_at = now(), reap_owner = 'test' WHERE slug = 'main'").await;
    for verb in ["unarchive", "bind"] {
        let (status, body) = f.post(1, &at(verb), bind.clone()).await;
        assert_eq!((status.as_u16(), body["code"].as_str()), (409, Some("reaping")), "{verb}: {body}");
    }
    assert_eq!(count(&f.t, "SELECT count(*) FROM workspaces WHERE slug = 'main' AND status = 'archived'").await, 1);
}

#[tokio::test]
async fn binds_need_an_admitted_version_and_versions_are_immutable() {
    let f = Fleet::start().await;
    cli(&f.t.url, &["workspace", "create", "--tenant", "acme", "main"]).await;
    let bp = "/api/v1/tenants/acme/blueprints";
    let (status, body) = f.post(0, bp, json!({ "slug": "base" })).await;
    assert_eq!(status, 201, "{body}");
    let (status, body) = f.post(0, bp, json!({ "slug": "base" })).await;
    assert_eq!((status.as_u16(), body["code"].as_str()), (409, Some("slug_taken")));
    // Documents are validated exactly like workspace edits.
    let bad = json!({ "document": { "connectors": { "Bad Id": { "kind": "remote_mcp", "url": "ftp://x" } } } });
    let (status, body) = f.post(0, &format!("{bp}/base/versions"), bad).await;
    assert_eq!((status.as_u16(), body["code"].as_str()), (422, Some("invalid_config")), "{body}");
    let (status, body) = f.post(0, &format!("{bp}/base/versions"), json!({ "document": { "nope": 1 } })).await;
    assert_eq!((status.as_u16(), body["code"].as_str()), (422, Some("invalid_config")), "{body}");
    for n in 1..=2 {
        let (status, body) = f.post(0, &format!("{bp}/base/versions"), json!({ "document": document(n) })).await;
        assert_eq!(status, 201, "{body}");
    }
    let (status, _) = f.post(0, &format!("{bp}/base/versions/2/reject"), json!({ "reason": "not yet" })).await;
    assert_eq!(status, 200);

    let at = "/api/v1/tenants/acme/workspaces/main/bind";
    let bind = |version: i64, expected: i64| json!({ "blueprint": "base", "version": version, "expected_version": expected });
    for (version, code) in [(1, "version_not_admitted"), (2, "version_not_admitted")] {
        let (status, body) = f.post(1, at, bind(version, 1)).await;
        assert_eq!((status.as_u16(), body["code"].as_str()), (409, Some(code)), "{body}");
        let state = if version == 1 { "pending" } else { "rejected" };
        assert!(body["detail"].as_str().unwrap().contains(state), "{body}");
    }
    let (status, _) = f.post(1, at, bind(3, 1)).await;
    assert_eq!(status, 404);
    let (status, body) = f.post(1, &format!("{bp}/base/versions/2/admit"), json!({})).await;
    assert_eq!((status.as_u16(), body["code"].as_str()), (409, Some("already_decided")));
    assert!(body["detail"].as_str().unwrap().contains("already rejected"), "{body}");
    assert_eq!(count(&f.t, "SELECT count(*) FROM workspace_versions").await, 1, "refused binds wrote nothing");

    // Admitted through the CLI; a stale expectation loses; the right one binds; a suspended
    // workspace may be bound too (it serves the new version when resumed).
    cli(&f.t.url, &["blueprint", "admit", "--tenant", "acme", "base", "1"]).await;
    let (status, body) = f.post(2, at, bind(1, 7)).await;
    assert_eq!((status.as_u16(), body["code"].as_str()), (412, Some("binding_changed")));
    cli(&f.t.url, &["workspace", "suspend", "--tenant", "acme", "main"]).await;
    let out = cli(
        &f.t.url,
        &["workspace", "bind", "--tenant", "acme", "main", "--blueprint", "base", "--version", "1", "--expected-version", "1"],
    )
    .await;
    assert_eq!(out[0].split('\t').next(), Some("2"));
    let mut stale = gatehouse(Some(&f.t.url));
    stale.args([
        "workspace",
        "bind",
        "--tenant",
        "acme",
        "main",
        "--blueprint",
        "base",
        "--version",
        "1",
        "--expected-version",
        "1",
    ]);
    let (code, _, err) = run(stale).await;
    assert_eq!(code, 1);
    assert!(err.contains("binding_changed"), "{err}");

    // The CLI's blueprint commands.
    let file = json_path(&document(9));
    let out = cli(&f.t.url, &["blueprint", "version", "--tenant", "acme", "base", "--file", &file]).await;
    assert!(out[0].starts_with("3\t"), "{out:?}");
    let mut stale = gatehouse(Some(&f.t.url));
    stale.args(["blueprint", "version", "--tenant", "acme", "base", "--file", &file, "--expected-latest", "2"]);
    assert_eq!(run(stale).await.0, 1);
    assert_eq!(cli(&f.t.url, &["blueprint", "reject", "--tenant", "acme", "base", "3"]).await, ["3\trejected"]);
    let listed = cli(&f.t.url, &["blueprint", "list", "--tenant", "acme"]).await;
    assert!(listed[0].starts_with("base\t3\t"), "{listed:?}");
    let shown = cli(&f.t.url, &["blueprint", "show", "--tenant", "acme", "base"]).await;
    assert_eq!(shown.iter().map(|l| l.split('\t').nth(1).unwrap()).collect::<Vec<_>>(), ["admitted", "rejected", "rejected"]);
    // Another tenant sees none of it.
    assert_eq!(cli(&f.t.url, &["blueprint", "list", "--tenant", "globex"]).await, Vec::<String>::new());
    let (status, _) = f.send(0, reqwest::Method::GET, "/api/v1/tenants/globex/blueprints/base", None).await;
    assert_eq!(status, 404);

    // Immutable in the database itself: no document change, no second decision, even as owner.
    for sql in [
        "UPDATE blueprint_versions SET document = '{}' WHERE version = 1",
        "UPDATE blueprint_versions SET admission = 'rejected' WHERE version = 1",
        "UPDATE blueprint_versions SET admission = 'pending' WHERE version = 2",
    ] {
        let mut owner = f.t.owner_conn().await;
        use sqlx::{Connection, Executor};
        let mut tx = owner.begin().await.unwrap();
        tx.execute("SELECT set_config('gatehouse.platform', 'on', true)").await.unwrap();
        let e = tx.execute(sqlx::AssertSqlSafe(sql.to_owned())).await.unwrap_err();
        assert!(e.to_string().contains("immutable"), "{sql}: {e}");
    }
    let digest = count(&f.t, "SELECT count(*) FROM blueprint_versions WHERE version = 1 AND admission = 'admitted'").await;
    assert_eq!(digest, 1);
}

/// Forks of one workspace under one slug, raced from three servers: exactly one fork exists,
/// one `workspace.fork` row, and every move's ledger rows end settled (the winner's confirmed:
/// source retained, destination done; each loser's given up at once), none left pending.
#[tokio::test]
async fn forks_under_one_slug_raced_by_three_servers_make_exactly_one() {
    let f = Fleet::start().await;
    let (status, body) = f.post(0, "/api/v1/tenants/acme/workspaces", json!({ "slug": "main" })).await;
    assert_eq!(status, 201, "{body}");
    for round in 1..=ROUNDS {
        let slug = format!("preview-{round}");
        let results = f.race("/api/v1/tenants/acme/workspaces/main/fork", |_| json!({ "slug": slug })).await;
        let winner = exactly_one(&results, 201, 409, "slug_taken");
        assert_eq!(results[winner].1["workspace"]["slug"].as_str().or(results[winner].1["slug"].as_str()), Some(slug.as_str()));
        assert_eq!(count(&f.t, &format!("SELECT count(*) FROM workspaces WHERE slug = '{slug}' AND status = 'active'")).await, 1);
        assert_eq!(f.admin_rows("workspace.fork", &format!("workspace:{slug}")).await, 1);
        assert_eq!(count(&f.t, "SELECT count(*) FROM copies WHERE state = 'pending'").await, 0, "no move left pending");
        let confirmed = format!(
            "SELECT count(*) FROM copies c JOIN workspaces w ON c.copy_ref = 'workspace:' || w.id
              WHERE w.slug = '{slug}' AND c.role = 'destination' AND c.state = 'done'"
        );
        assert_eq!(count(&f.t, &confirmed).await, 1, "the winner's destination is confirmed");
    }
    assert_eq!(count(&f.t, "SELECT count(*) FROM workspaces WHERE fork_of IS NOT NULL").await, ROUNDS as i64);
}

/// A connector edited in place (`PUT …/connectors/{id}`), raced from three servers against the
/// version every racer read: exactly one edit lands, as one new version with one admin-log
/// row, the rest are 412 `binding_changed`; what names the connector (its overrides, grants)
/// stays; a missing connector is 404, a bad configuration 422 naming its field, another
/// tenant's workspace 404, and none of those writes anything.
#[tokio::test]
async fn connector_edits_raced_by_three_servers_land_exactly_once_and_keep_what_names_it() {
    let f = Fleet::start().await;
    let ws = "/api/v1/tenants/acme/workspaces";
    let (status, body) = f.post(0, ws, json!({ "slug": "main" })).await;
    assert_eq!(status, 201, "{body}");
    let (status, body) = f
        .post(1, &format!("{ws}/main/connectors"), json!({ "id": "crm", "kind": "remote_mcp", "url": "http://127.0.0.1:9/a" }))
        .await;
    assert_eq!(status, 201, "{body}");
    let policy = json!({ "classification": { "crm.search": "read" }, "grants": [{ "to": "machines", "tools": ["crm"] }] });
    let (status, body) = f.send(2, reqwest::Method::PATCH, &format!("{ws}/main/config"), Some(policy)).await;
    assert_eq!(status, 200, "{body}");
    let at = format!("{ws}/main/connectors/crm");
    for round in 0..ROUNDS {
        let read = f.get(&format!("{ws}/main")).await["workspace"]["bound_version"].as_i64().unwrap();
        let versions = count(&f.t, "SELECT count(*) FROM workspace_versions").await;
        let rows = f.admin_rows("connector.replace", "workspace:main").await;
        let fleet = &f;
        let racers = (0..3 * PER_PROCESS).map(|n| {
            let (at, body) = (
                at.clone(),
                json!({ "expected_version": read, "kind": "remote_mcp", "url": format!("http://127.0.0.1:9/r{round}n{n}") }),
            );
            async move { fleet.send(n % 3, reqwest::Method::PUT, &at, Some(body)).await }
        });
        let results = join_all(racers).await;
        let winner = exactly_one(&results, 200, 412, "binding_changed");
        assert_eq!(results[winner].1["workspace"]["bound_version"].as_i64(), Some(read + 1));
        let after = f.get(&format!("{ws}/main")).await;
        assert_eq!(after["document"]["connectors"]["crm"]["url"], format!("http://127.0.0.1:9/r{round}n{winner}"));
        assert_eq!(after["document"]["classification"], json!({ "crm.search": "read" }), "the overrides stay");
        assert_eq!(after["document"]["grants"], json!([{ "to": "machines", "tools": ["crm"] }]), "the grants stay");
        assert_eq!(count(&f.t, "SELECT count(*) FROM workspace_versions").await, versions + 1, "one new version row");
        assert_eq!(f.admin_rows("connector.replace", "workspace:main").await, rows + 1, "one admin-log row");
    }
    // Refusals write nothing.
    let versions = count(&f.t, "SELECT count(*) FROM workspace_versions").await;
    let good = json!({ "kind": "remote_mcp", "url": "http://127.0.0.1:9/x" });
    let (status, body) = f.send(0, reqwest::Method::PUT, &format!("{ws}/main/connectors/nope"), Some(good.clone())).await;
    assert_eq!((status.as_u16(), body["code"].as_str()), (404, Some("not_found")), "{body}");
    let bad = json!({ "kind": "remote_mcp", "url": "http://127.0.0.1:9/x", "timeout_ms": "soon" });
    let (status, body) = f.send(1, reqwest::Method::PUT, &at, Some(bad)).await;
    assert_eq!((status.as_u16(), body["code"].as_str()), (422, Some("invalid_config")), "{body}");
    let (status, _) = f.send(2, reqwest::Method::PUT, "/api/v1/tenants/globex/workspaces/main/connectors/crm", Some(good)).await;
    assert_eq!(status, 404);
    assert_eq!(count(&f.t, "SELECT count(*) FROM workspace_versions").await, versions, "the refusals wrote nothing");
}
