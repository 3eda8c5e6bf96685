//! Peer connectors (issue 7 §7): resolution at call time (none, one, several; forks never
//! chosen), explicit bindings that win and are invalidated with their target in the same
//! transaction (no fallback), cycles and depth refused, grants never widened, and the binding
//! API's tenancy. The target's connector is a real MCP server (server-everything).

mod common;

use std::time::Duration;

use common::downstream::{as_owner, count, platform_rows};
use common::{
    Everything, Machine, Served, TestDb, add_remote_mcp, admin_log_text, cli, dev_sign_in, eventually, gatehouse, mcp_tool,
    provision,
};
use reqwest::Method;
use serde_json::{Value, json};
use sqlx::{Connection, Executor};

async fn workspace(t: &TestDb, tenant: &str, slug: &str) {
    cli(&t.url, &["workspace", "create", "--tenant", tenant, slug]).await;
}

async fn add_peer(t: &TestDb, tenant: &str, ws: &str, id: &str, blueprint: &str) {
    let args =
        ["connector", "add", "--tenant", tenant, "--workspace", ws, "--id", id, "--kind", "peer", "--blueprint", blueprint];
    cli(&t.url, &args).await;
}

/// Creates blueprint `slug` (one admitted version) in `tenant` and binds `workspaces` to it,
/// as the schema owner (blueprints and binding are another part of the control plane).
async fn blueprint(t: &TestDb, tenant: &str, slug: &str, workspaces: &[&str]) {
    as_owner(
        t,
        &format!(
            "INSERT INTO blueprints (tenant_id, id, slug, name, created_by)
             SELECT id, gen_random_uuid(), '{slug}', '{slug}', 'test' FROM tenants WHERE slug = '{tenant}'"
        ),
    )
    .await;
    as_owner(
        t,
        &format!(
            "INSERT INTO blueprint_versions (tenant_id, blueprint_id, version, document, digest, admission, created_by)
             SELECT b.tenant_id, b.id, 1, '{{}}', 'digest', 'admitted', 'test'
               FROM blueprints b JOIN tenants t ON t.id = b.tenant_id WHERE t.slug = '{tenant}' AND b.slug = '{slug}'"
        ),
    )
    .await;
    for ws in workspaces {
        bind_blueprint(t, tenant, ws, slug).await;
    }
}

async fn bind_blueprint(t: &TestDb, tenant: &str, ws: &str, slug: &str) {
    as_owner(
        t,
        &format!(
            "UPDATE workspaces w SET blueprint_id = b.id, blueprint_version = 1
               FROM blueprints b, tenants t
              WHERE t.slug = '{tenant}' AND b.tenant_id = t.id AND b.slug = '{slug}' AND w.tenant_id = t.id AND w.slug = '{ws}'"
        ),
    )
    .await;
}

async fn set_status(t: &TestDb, ws: &str, status: &str) {
    as_owner(t, &format!("UPDATE workspaces SET status = '{status}' WHERE slug = '{ws}'")).await;
}

/// Calls `address` with `call_tool` at `ws`'s endpoint: (is error, the error code or the
/// tool's text).
async fn call(base: &str, m: &Machine, ws: &str, address: &str, args: Value) -> (bool, String) {
    let url = format!("{base}/t/acme/w/{ws}/mcp");
    let (err, body, raw) = mcp_tool(&url, m, "call_tool", json!({ "address": address, "args": args })).await;
    if err && let Some(code) = body["error"]["code"].as_str() {
        return (true, code.to_owned());
    }
    let text = body.as_str().map(str::to_owned).unwrap_or(raw);
    (err, text)
}

async fn echo(base: &str, m: &Machine, ws: &str, address: &str) -> (bool, String) {
    call(base, m, ws, address, json!({ "message": "through a peer" })).await
}

/// Every address `ws`'s `search_tools` shows.
async fn addresses(base: &str, m: &Machine, ws: &str) -> Vec<String> {
    let url = format!("{base}/t/acme/w/{ws}/mcp");
    let (err, found, _) = mcp_tool(&url, m, "search_tools", json!({ "limit": 100 })).await;
    assert!(!err, "{found}");
    found["results"].as_array().unwrap().iter().map(|r| r["address"].as_str().unwrap().to_owned()).collect()
}

#[tokio::test]
async fn resolution_explicit_bindings_and_invalidation_without_fallback() {
    let everything = Everything::start().await;
    let t = TestDb::new().await;
    cli(&t.url, &["tenant", "create", "acme", "--name", "Acme"]).await;
    for ws in ["front", "crm-a", "crm-b", "crm-fork"] {
        workspace(&t, "acme", ws).await;
    }
    add_remote_mcp(&t.url, "acme", "crm-a", "everything", &everything.url).await;
    // crm-b's connector has another id, so an address shows which workspace answered.
    add_remote_mcp(&t.url, "acme", "crm-b", "other", &everything.url).await;
    add_remote_mcp(&t.url, "acme", "crm-fork", "everything", &everything.url).await;
    add_peer(&t, "acme", "front", "crm", "crm").await;
    let m = provision(&t.url, "acme").await;
    let served = Served::start(gatehouse(Some(&t.url))).await;
    let base = served.base.clone();

    // No workspace runs the blueprint (it does not even exist yet): not_installed.
    assert_eq!(echo(&base, &m, "front", "crm.everything.echo").await, (true, "not_installed".into()));

    // A fork of the blueprint is never chosen, active or not.
    blueprint(&t, "acme", "crm", &["crm-fork"]).await;
    as_owner(&t, "UPDATE workspaces SET fork_of = (SELECT id FROM workspaces WHERE slug = 'crm-a') WHERE slug = 'crm-fork'")
        .await;
    assert_eq!(echo(&base, &m, "front", "crm.everything.echo").await, (true, "not_installed".into()));

    // Exactly one active primary workspace: the call reaches its real downstream.
    bind_blueprint(&t, "acme", "crm-a", "crm").await;
    let (err, text) = echo(&base, &m, "front", "crm.everything.echo").await;
    assert!(!err && text.contains("Echo: through a peer"), "{text}");
    let shown = addresses(&base, &m, "front").await;
    assert!(
        shown.contains(&"crm.everything.echo".to_owned()) && shown.iter().all(|a| a.starts_with("crm.everything.")),
        "{shown:?}"
    );
    // The target records the call in its own activity, as coming through a peer.
    let recorded = eventually(Duration::from_secs(30), || async {
        count(
            &t,
            "SELECT count(*) FROM activity a JOIN workspaces w ON w.id = a.workspace_id
                    WHERE w.slug = 'crm-a' AND a.source = 'peer' AND a.tool = 'echo' AND a.connector = 'everything'",
        )
        .await
            == 1
    })
    .await;
    assert!(recorded, "one activity row in the target");

    // A result over the inline cap, through the peer: the workspace the agent called stashes
    // it, and its pages there add up to the whole result. The target never stashes.
    let url = format!("{base}/t/acme/w/front/mcp");
    let message = "é".repeat(20_000); // 40,000 bytes of UTF-8
    let (err, first, _) =
        mcp_tool(&url, &m, "call_tool", json!({ "address": "crm.everything.echo", "args": { "message": message } })).await;
    assert!(!err, "{first}");
    let id = first["stashed"]["id"].as_str().expect("stashed by the calling workspace").to_owned();
    let mut body = String::new();
    let mut offset = Some(0u64);
    while let Some(o) = offset {
        let args = json!({ "address": "gatehouse.result", "args": { "id": id, "offset": o } });
        let (err, page, _) = mcp_tool(&url, &m, "call_tool", args).await;
        assert!(!err, "{page}");
        body.push_str(page["chunk"].as_str().unwrap());
        offset = page["next_offset"].as_u64();
    }
    let result: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(result["content"][0]["text"], format!("Echo: {message}"), "the pages add up to the whole result");
    let crm_a = format!("{base}/t/acme/w/crm-a/mcp");
    let (err, page, _) = mcp_tool(&crm_a, &m, "call_tool", json!({ "address": "gatehouse.result", "args": { "id": id } })).await;
    assert!(err && page["error"]["code"] == "unknown_result", "the stash belongs to the calling workspace: {page}");
    let sizes = || {
        platform_rows::<(String, i32)>(
            &t,
            "SELECT w.slug, a.result_bytes FROM activity a JOIN workspaces w ON w.id = a.workspace_id
              WHERE a.result_bytes > 40000 ORDER BY w.slug",
        )
    };
    assert!(eventually(Duration::from_secs(30), || async { sizes().await.len() == 2 }).await, "{:?}", sizes().await);
    let sizes = sizes().await;
    assert_eq!((sizes[0].0.as_str(), sizes[1].0.as_str()), ("crm-a", "front"), "{sizes:?}");
    assert_eq!(sizes[0].1, sizes[1].1, "both workspaces record the whole result's size: {sizes:?}");

    // Two active primaries: ambiguous, never guessed. A suspended one is no candidate.
    bind_blueprint(&t, "acme", "crm-b", "crm").await;
    assert_eq!(echo(&base, &m, "front", "crm.everything.echo").await, (true, "ambiguous".into()));
    set_status(&t, "crm-b", "suspended").await;
    assert!(!echo(&base, &m, "front", "crm.everything.echo").await.0);
    set_status(&t, "crm-b", "active").await;
    let list = cli(&t.url, &["workspace", "peer", "list", "--tenant", "acme", "--workspace", "front"]).await;
    assert_eq!(list, ["crm\tcrm\tambiguous\t-"]);

    // An explicit binding wins over resolution.
    cli(
        &t.url,
        &["workspace", "peer", "bind", "--tenant", "acme", "--workspace", "front", "--connector", "crm", "--target", "crm-b"],
    )
    .await;
    let (err, text) = echo(&base, &m, "front", "crm.other.echo").await;
    assert!(!err && text.contains("Echo: through a peer"), "{text}");
    assert_eq!(echo(&base, &m, "front", "crm.everything.echo").await, (true, "unknown_tool".into()));
    let list = cli(&t.url, &["workspace", "peer", "list", "--tenant", "acme", "--workspace", "front"]).await;
    assert_eq!(list, ["crm\tcrm\tbound\tcrm-b"]);

    // Archiving the target invalidates the binding in that very transaction (a trigger), ...
    let mut owner = t.owner_conn().await;
    let mut tx = owner.begin().await.unwrap();
    tx.execute("SELECT set_config('gatehouse.platform', 'on', true)").await.unwrap();
    tx.execute("UPDATE workspaces SET status = 'archived' WHERE slug = 'crm-b'").await.unwrap();
    let reason: Option<String> = sqlx::query_scalar("SELECT invalidated_reason FROM peer_bindings WHERE connector_id = 'crm'")
        .fetch_one(&mut *tx)
        .await
        .unwrap();
    assert_eq!(reason.as_deref(), Some("target_archived"), "invalidated before the archive commits");
    tx.commit().await.unwrap();
    // ... and a call through it answers bound_unavailable with no fallback, though crm-a is
    // now the one candidate resolution would find.
    assert_eq!(echo(&base, &m, "front", "crm.other.echo").await, (true, "bound_unavailable".into()));
    assert_eq!(echo(&base, &m, "front", "crm.everything.echo").await, (true, "bound_unavailable".into()));
    let list = cli(&t.url, &["workspace", "peer", "list", "--tenant", "acme", "--workspace", "front"]).await;
    assert_eq!(list, ["crm\tcrm\tbound_unavailable\t-"]);
    // Restoring the target does not revive the binding: an operator binds again or unbinds.
    set_status(&t, "crm-b", "active").await;
    assert_eq!(echo(&base, &m, "front", "crm.other.echo").await, (true, "bound_unavailable".into()));
    // An archived workspace cannot be bound; unbinding returns to resolution.
    set_status(&t, "crm-b", "archived").await;
    let mut bind = gatehouse(Some(&t.url));
    bind.args([
        "workspace",
        "peer",
        "bind",
        "--tenant",
        "acme",
        "--workspace",
        "front",
        "--connector",
        "crm",
        "--target",
        "crm-b",
    ]);
    let (code, _, err) = common::run(bind).await;
    assert!(code != 0 && err.contains("target_not_active"), "{err}");
    cli(&t.url, &["workspace", "peer", "unbind", "--tenant", "acme", "--workspace", "front", "--connector", "crm"]).await;
    let (err, text) = echo(&base, &m, "front", "crm.everything.echo").await;
    assert!(!err && text.contains("Echo"), "{text}");

    // Reaping or deleting a bound target invalidates too (an explicit binding may name a fork).
    let bind_to = |target: &'static str| {
        let url = t.url.clone();
        async move {
            let args = [
                "workspace",
                "peer",
                "bind",
                "--tenant",
                "acme",
                "--workspace",
                "front",
                "--connector",
                "crm",
                "--target",
                target,
            ];
            cli(&url, &args).await;
        }
    };
    bind_to("crm-fork").await;
    assert!(!echo(&base, &m, "front", "crm.everything.echo").await.0);
    // The real path to deletion: archive (invalidates), then reap (deletes the target's row;
    // the binding stays, invalidated, and never falls back).
    cli(&t.url, &["workspace", "archive", "--tenant", "acme", "crm-fork"]).await;
    cli(&t.url, &["workspace", "reap", "--tenant", "acme", "crm-fork"]).await;
    assert_eq!(count(&t, "SELECT count(*) FROM workspaces WHERE slug = 'crm-fork'").await, 0);
    assert_eq!(
        count(&t, "SELECT count(*) FROM peer_bindings WHERE connector_id = 'crm' AND invalidated_at IS NOT NULL").await,
        1
    );
    assert_eq!(echo(&base, &m, "front", "crm.everything.echo").await, (true, "bound_unavailable".into()));
    bind_to("crm-a").await;
    set_status(&t, "crm-a", "reaped").await;
    assert_eq!(count(&t, "SELECT count(*) FROM peer_bindings WHERE invalidated_reason = 'target_reaped'").await, 1);
    assert_eq!(echo(&base, &m, "front", "crm.everything.echo").await, (true, "bound_unavailable".into()));
    let log = admin_log_text(&t).await;
    assert!(log.contains("\"peer.bind\"") && log.contains("\"peer.unbind\""), "{log}");
    assert_eq!(served.terminate().await, 0);
}

#[tokio::test]
async fn cycles_and_depth_are_refused() {
    let everything = Everything::start().await;
    let t = TestDb::new().await;
    cli(&t.url, &["tenant", "create", "acme", "--name", "Acme"]).await;
    // a -> b -> c -> d (d has the real downstream); e calls itself; f <-> g.
    for ws in ["a", "b", "c", "d", "e", "f", "g"] {
        workspace(&t, "acme", &format!("ws-{ws}")).await;
        blueprint(&t, "acme", &format!("bp-{ws}"), &[&format!("ws-{ws}")]).await;
    }
    add_remote_mcp(&t.url, "acme", "ws-d", "everything", &everything.url).await;
    add_remote_mcp(&t.url, "acme", "ws-g", "everything", &everything.url).await;
    add_peer(&t, "acme", "ws-c", "r", "bp-d").await;
    add_peer(&t, "acme", "ws-b", "q", "bp-c").await;
    add_peer(&t, "acme", "ws-a", "p", "bp-b").await;
    add_peer(&t, "acme", "ws-e", "me", "bp-e").await;
    add_peer(&t, "acme", "ws-f", "g", "bp-g").await;
    add_peer(&t, "acme", "ws-g", "f", "bp-f").await;
    let m = provision(&t.url, "acme").await;
    let served = Served::start(gatehouse(Some(&t.url))).await;
    let base = served.base.clone();

    // One and two hops reach the downstream; a third is refused (its tools do not exist there).
    assert!(!echo(&base, &m, "ws-c", "r.everything.echo").await.0);
    let (err, text) = echo(&base, &m, "ws-b", "q.r.everything.echo").await;
    assert!(!err && text.contains("Echo: through a peer"), "{text}");
    assert_eq!(echo(&base, &m, "ws-a", "p.q.r.everything.echo").await, (true, "unknown_tool".into()));
    assert!(addresses(&base, &m, "ws-a").await.is_empty(), "nothing three hops away is listed");

    // A workspace resolving to itself is a cycle.
    assert_eq!(echo(&base, &m, "ws-e", "me.anything.echo").await, (true, "peer_cycle".into()));
    // f -> g -> f is refused at g (f is already on the path): g's own tools show, f's do not.
    let shown = addresses(&base, &m, "ws-f").await;
    assert!(shown.contains(&"g.everything.echo".to_owned()), "{shown:?}");
    assert!(shown.iter().all(|a| !a.starts_with("g.f.")), "{shown:?}");
    assert!(!echo(&base, &m, "ws-f", "g.everything.echo").await.0);
    // Binding a workspace to itself is refused.
    let mut bind = gatehouse(Some(&t.url));
    bind.args(["workspace", "peer", "bind", "--tenant", "acme", "--workspace", "ws-e", "--connector", "me", "--target", "ws-e"]);
    let (code, _, err) = common::run(bind).await;
    assert!(code != 0 && err.contains("peer_cycle"), "{err}");
    assert_eq!(served.terminate().await, 0);
}

#[tokio::test]
async fn grants_and_classification_are_never_widened() {
    let everything = Everything::start().await;
    let t = TestDb::new().await;
    cli(&t.url, &["tenant", "create", "acme", "--name", "Acme"]).await;
    workspace(&t, "acme", "front").await;
    workspace(&t, "acme", "crm-a").await;
    blueprint(&t, "acme", "crm", &["crm-a"]).await;
    add_remote_mcp(&t.url, "acme", "crm-a", "everything", &everything.url).await;
    add_peer(&t, "acme", "front", "crm", "crm").await;
    let m = provision(&t.url, "acme").await;
    let served = Served::start(gatehouse(Some(&t.url))).await;
    let base = served.base.clone();
    let configure = |ws: &'static str, patch: Value| {
        let url = t.url.clone();
        async move {
            let file = common::json_path(&patch);
            cli(&url, &["workspace", "configure", "--tenant", "acme", "--workspace", ws, "--file", &file]).await;
        }
    };
    let sum = json!({ "a": 1, "b": 2 });

    // The target grants machines one tool: only that one exists through the peer.
    configure("crm-a", json!({ "grants": [{ "to": "machines", "tools": ["everything.echo"] }] })).await;
    assert_eq!(addresses(&base, &m, "front").await, ["crm.everything.echo"]);
    assert!(!echo(&base, &m, "front", "crm.everything.echo").await.0);
    assert_eq!(call(&base, &m, "front", "crm.everything.get-sum", sum.clone()).await, (true, "unknown_tool".into()));

    // The caller's own grants narrow further: granting get-sum here does not open it there,
    // and takes echo away here.
    configure("front", json!({ "grants": [{ "to": "machines", "tools": ["crm.everything.get-sum"] }] })).await;
    assert!(addresses(&base, &m, "front").await.is_empty());
    assert_eq!(call(&base, &m, "front", "crm.everything.get-sum", sum.clone()).await, (true, "unknown_tool".into()));
    assert_eq!(echo(&base, &m, "front", "crm.everything.echo").await, (true, "unknown_tool".into()));
    // A grant of a person's role does not reach a token that carries no person.
    configure("front", json!({ "grants": [{ "to": "role:owner", "tools": ["crm"] }] })).await;
    assert_eq!(echo(&base, &m, "front", "crm.everything.echo").await, (true, "unknown_tool".into()));
    configure("front", json!({ "grants": [{ "to": "machines", "tools": ["crm"] }] })).await;
    assert!(!echo(&base, &m, "front", "crm.everything.echo").await.0);

    // Classifying the target's write as a read here does not let call_tool make it there.
    configure("crm-a", json!({ "grants": null })).await;
    let toggle = "crm.everything.toggle-simulated-logging";
    configure("front", json!({ "grants": null, "classification": { toggle: "read" } })).await;
    let url = format!("{base}/t/acme/w/front/mcp");
    let (err, body, _) = mcp_tool(&url, &m, "call_tool", json!({ "address": toggle, "args": {} })).await;
    assert!(err && body["error"]["code"] == "destructive_tool_requires_approval", "{body}");
    assert_eq!(body["error"]["nextAction"]["arguments"]["address"], toggle, "the refusal names the caller's address");
    // It goes through call_destructive_tool, as at the target itself.
    let (err, body, _) = mcp_tool(&url, &m, "call_destructive_tool", json!({ "address": toggle, "args": {} })).await;
    assert!(!err, "{body}");
    assert_eq!(served.terminate().await, 0);
}

#[tokio::test]
async fn binding_api_is_tenant_scoped_and_audited() {
    let t = TestDb::new().await;
    cli(&t.url, &["tenant", "create", "acme", "--name", "Acme", "--owner-email", "alice@example.test"]).await;
    cli(&t.url, &["tenant", "create", "globex", "--name", "Globex"]).await;
    workspace(&t, "acme", "front").await;
    workspace(&t, "acme", "crm-a").await;
    workspace(&t, "globex", "theirs").await;
    add_peer(&t, "acme", "front", "crm", "crm").await;
    let m = provision(&t.url, "acme").await;
    let served = Served::start(gatehouse(Some(&t.url))).await;
    let alice = dev_sign_in(&served, "alice@example.test").await;
    let peers = "/api/v1/tenants/acme/workspaces/front/peers";

    // Another tenant's workspace is not found, as target or as path.
    let r = alice.write(Method::PUT, &format!("{peers}/crm"), json!({ "target": "theirs" })).await;
    assert_eq!(r.status(), 404);
    let r = alice.write(Method::PUT, "/api/v1/tenants/globex/workspaces/theirs/peers/crm", json!({ "target": "crm-a" })).await;
    assert_eq!(r.status(), 404);
    let r = m
        .headers(common::http().get(format!("{}/api/v1/tenants/globex/workspaces/theirs/peers", served.base)))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    // Only peer connectors bind; a machine may read but not bind.
    let r = alice.write(Method::PUT, &format!("{peers}/nope"), json!({ "target": "crm-a" })).await;
    assert_eq!(r.status(), 404);
    let r = m
        .headers(common::http().put(format!("{}{peers}/crm", served.base)))
        .json(&json!({ "target": "crm-a" }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);

    let r = alice.write(Method::PUT, &format!("{peers}/crm"), json!({ "target": "crm-a" })).await;
    assert_eq!(r.status(), 200);
    let made: Value = r.json().await.unwrap();
    assert_eq!((made["connector"].as_str(), made["target"].as_str()), (Some("crm"), Some("crm-a")));
    let r = m.headers(common::http().get(format!("{}{peers}", served.base))).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let listed: Value = r.json().await.unwrap();
    assert_eq!(listed[0]["resolution"], "bound");
    assert_eq!(listed[0]["target"], "crm-a");
    assert_eq!(alice.write(Method::DELETE, &format!("{peers}/crm"), json!({})).await.status(), 204);
    assert_eq!(alice.write(Method::DELETE, &format!("{peers}/crm"), json!({})).await.status(), 404);
    let log = admin_log_text(&t).await;
    assert_eq!(log.matches("\"peer.bind\"").count(), 1, "{log}");
    assert_eq!(log.matches("\"peer.unbind\"").count(), 1, "{log}");
    assert_eq!(served.terminate().await, 0);
}

/// A bind racing the archive of its target: whichever wins, no valid binding ever points at an
/// archived workspace (the bind is refused, or its binding is invalidated by the archive). The
/// archive runs at READ COMMITTED, the weakest isolation a caller could use.
#[tokio::test]
async fn a_bind_racing_the_archive_of_its_target_never_leaves_a_valid_binding() {
    let t = TestDb::new().await;
    cli(&t.url, &["tenant", "create", "acme", "--name", "Acme"]).await;
    workspace(&t, "acme", "front").await;
    workspace(&t, "acme", "crm-a").await;
    add_peer(&t, "acme", "front", "crm", "crm").await;
    let tenant = gatehouse::tenants::by_slug(&t.db, "acme").await.unwrap().id;
    let audit = gatehouse::admin_log::Audit { actor: "test".into(), request_id: None };
    let (mut refused, mut invalidated) = (0, 0);
    for _ in 0..20 {
        as_owner(&t, "DELETE FROM peer_bindings").await;
        set_status(&t, "crm-a", "active").await;
        // The archive's connection and transaction are ready before the race starts.
        let mut owner = t.owner_conn().await;
        let mut tx = owner.begin().await.unwrap();
        tx.execute("SELECT set_config('gatehouse.platform', 'on', true)").await.unwrap();
        let archive = async move {
            tx.execute("UPDATE workspaces SET status = 'archived' WHERE slug = 'crm-a'").await.unwrap();
            tx.commit().await.unwrap();
        };
        let bind = gatehouse::peers::bind(&t.db, tenant, &audit, "front", "crm", "crm-a");
        let (bound, ()) = tokio::join!(bind, archive);
        let valid = count(&t, "SELECT count(*) FROM peer_bindings WHERE invalidated_at IS NULL").await;
        assert_eq!(valid, 0, "a valid binding to an archived workspace");
        match bound {
            Ok(_) => {
                let reason = "SELECT count(*) FROM peer_bindings WHERE invalidated_reason = 'target_archived'";
                assert_eq!(count(&t, reason).await, 1);
                invalidated += 1;
            }
            Err(e) => {
                assert_eq!(e.code(), "target_not_active", "{e}");
                assert_eq!(count(&t, "SELECT count(*) FROM peer_bindings").await, 0, "a refused bind writes nothing");
                refused += 1;
            }
        }
    }
    eprintln!("binds refused: {refused}, binds invalidated by the archive: {invalidated}");
    assert_eq!(refused + invalidated, 20);
    let log = admin_log_text(&t).await;
    assert_eq!(log.matches("\"peer.bind\"").count(), invalidated, "one admin-log row per bind that happened");
}

/// The same race through the API, from three `gatehouse serve` processes on one database: two
/// of them bind the peer connector to the target (several requests each) while the third
/// archives the target, over several rounds. Whatever the order, no valid binding to an
/// archived workspace is left, every bind is either refused (`target_not_active`, nothing
/// written) or invalidated by the archive, and each bind that happened has its admin-log row.
#[tokio::test]
async fn binds_and_an_archive_raced_from_three_servers_never_leave_a_valid_binding() {
    let t = TestDb::new().await;
    cli(&t.url, &["tenant", "create", "acme", "--name", "Acme", "--owner-email", "alice@example.test"]).await;
    workspace(&t, "acme", "front").await;
    workspace(&t, "acme", "crm-a").await;
    add_peer(&t, "acme", "front", "crm", "crm").await;
    let servers = [
        Served::start(gatehouse(Some(&t.url))).await,
        Served::start(gatehouse(Some(&t.url))).await,
        Served::start(gatehouse(Some(&t.url))).await,
    ];
    // The session lives in the database: one sign-in serves all three.
    let alice = dev_sign_in(&servers[0], "alice@example.test").await;
    let csrf = alice.csrf().await;
    let send = |i: usize, method: Method, path: &'static str, body: Value| {
        let (client, base, csrf) = (alice.client.clone(), servers[i].base.clone(), csrf.clone());
        async move {
            let r = client
                .request(method, format!("{base}{path}"))
                .header("origin", &base)
                .header("x-csrf-token", csrf)
                .json(&body)
                .send()
                .await
                .unwrap();
            let status = r.status().as_u16();
            (status, r.json::<Value>().await.unwrap_or(Value::Null))
        }
    };
    const BIND: &str = "/api/v1/tenants/acme/workspaces/front/peers/crm";
    let mut binds_done = 0;
    for round in 0..6 {
        as_owner(&t, "DELETE FROM peer_bindings").await;
        set_status(&t, "crm-a", "active").await;
        let binds = (0..6).map(|n| send(n % 2, Method::PUT, BIND, json!({ "target": "crm-a" })));
        let archive = send(2, Method::POST, "/api/v1/tenants/acme/workspaces/crm-a/archive", json!({}));
        let (bound, archived) = tokio::join!(futures::future::join_all(binds), archive);
        assert_eq!(archived.0, 200, "round {round}: {archived:?}");
        assert_eq!(count(&t, "SELECT count(*) FROM peer_bindings WHERE invalidated_at IS NULL").await, 0, "round {round}");
        let mut ok = 0;
        for (status, body) in &bound {
            match status {
                200 | 201 => ok += 1,
                409 => assert_eq!(body["code"], "target_not_active", "round {round}: {body}"),
                other => panic!("round {round}: unexpected {other}: {body}"),
            }
        }
        let rows = count(&t, "SELECT count(*) FROM peer_bindings").await;
        assert_eq!(rows, i64::from(ok > 0), "round {round}: one binding row if any bind happened, else none");
        binds_done += ok;
    }
    assert_eq!(admin_log_text(&t).await.matches("\"peer.bind\"").count(), binds_done);
}
