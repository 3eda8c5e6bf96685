//! SCIM 2.0 provisioning per tenant (issue 22 item 2): the independent checker `scim2-tester`
//! (PyPI) against a tenant's endpoint; deprovisioning through SCIM ending a live session and a
//! personal token on another replica; groups mapped to roles; bad input answered with SCIM
//! errors and nothing half-written; tokens, tenants and cross-tenant access.

mod common;

use std::collections::BTreeMap;

use common::{Machine, Served, TestDb, admin_log_text, cli, dev_sign_in, gatehouse, http, mcp_oauth, python3};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use sqlx::{Connection, Executor};

const SCIM_JSON: &str = "application/scim+json";
const USER: &str = "urn:ietf:params:scim:schemas:core:2.0:User";
const GROUP: &str = "urn:ietf:params:scim:schemas:core:2.0:Group";
const PATCH: &str = "urn:ietf:params:scim:api:messages:2.0:PatchOp";
const ERROR: &str = "urn:ietf:params:scim:api:messages:2.0:Error";

/// The checks of scim2-tester that do not pass here, each with its reason (also in
/// docs/decisions.md): (check, status, why). Any other check must succeed; a check listed
/// here that starts succeeding, or ends otherwise, fails the test so the list stays true.
const DOCUMENTED_EXCEPTIONS: [(&str, &str, &str); 1] = [(
    "search_with_attributes",
    "SKIPPED",
    "POST /.search at the service provider's root, across resource types, is not offered (RFC 7644 \
     §3.4.3 allows that; 501): the checker skips its root-search check (it runs once per resource \
     type, so it is reported twice); /Users/.search and /Groups/.search are checked and pass",
)];

async fn scim_token(t: &TestDb, tenant: &str) -> String {
    let out = cli(&t.url, &["scim", "token", "create", "--tenant", tenant, "--name", "directory"]).await;
    assert_eq!(out.len(), 2, "{out:?}");
    assert!(out[1].starts_with("gsm_") && out[1].len() == 47, "a SCIM token is gsm_ + 43 characters");
    out[1].clone()
}

/// A SCIM request with `token`; answers (status, body).
async fn scim(served: &Served, token: &str, method: Method, path: &str, body: Option<Value>) -> (u16, Value) {
    let mut req = http().request(method, format!("{}{path}", served.base)).bearer_auth(token);
    if let Some(body) = body {
        req = req.header("content-type", SCIM_JSON).body(body.to_string());
    }
    let r = req.send().await.unwrap();
    let status = r.status().as_u16();
    if status != 204 {
        let ct = r.headers().get("content-type").and_then(|v| v.to_str().ok()).unwrap_or("").to_owned();
        assert!(ct.starts_with(SCIM_JSON), "{path} answered {status} with Content-Type {ct:?}");
    }
    let text = r.text().await.unwrap();
    (status, if text.is_empty() { Value::Null } else { serde_json::from_str(&text).unwrap() })
}

fn assert_scim_error(answer: &(u16, Value), status: u16, scim_type: Option<&str>) {
    let (got, body) = answer;
    assert_eq!(*got, status, "{body}");
    assert_eq!(body["schemas"], json!([ERROR]), "{body}");
    assert_eq!(body["status"], json!(status.to_string()), "{body}");
    assert_eq!(body["scimType"].as_str(), scim_type, "{body}");
}

async fn count(t: &TestDb, sql: &'static str) -> i64 {
    let mut owner = t.owner_conn().await;
    let mut tx = owner.begin().await.unwrap();
    tx.execute("SELECT set_config('gatehouse.platform', 'on', true)").await.unwrap();
    sqlx::query_scalar(sql).fetch_one(&mut *tx).await.unwrap()
}

#[tokio::test]
async fn scim2_tester_passes_every_check_against_a_tenant_endpoint() {
    let t = TestDb::new().await;
    cli(&t.url, &["tenant", "create", "acme", "--name", "Acme"]).await;
    let token = scim_token(&t, "acme").await;
    let served = Served::start(gatehouse(Some(&t.url))).await;
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/peers/scim_tester.py");
    let out = python3()
        .arg(script)
        .arg(format!("{}/scim/v2/t/acme", served.base))
        .env("SCIM_TOKEN", &token)
        .output()
        .await
        .expect("run scim2-tester (tests/peers/requirements.txt)");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "scim2-tester failed to run: {}\n{stdout}", String::from_utf8_lossy(&out.stderr));
    let results: Vec<Value> = stdout.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let mut tally: BTreeMap<String, usize> = BTreeMap::new();
    for r in &results {
        *tally.entry(r["status"].as_str().unwrap().to_owned()).or_default() += 1;
    }
    eprintln!("scim2-tester: {tally:?}");
    for r in results.iter().filter(|r| r["status"] != "SUCCESS") {
        eprintln!("scim2-tester {}: {} ({})", r["status"], r["title"], r["reason"]);
    }
    let excepted = |r: &Value| DOCUMENTED_EXCEPTIONS.iter().find(|(title, _, _)| r["title"] == *title);
    let unexpected: Vec<&Value> = results
        .iter()
        .filter(|r| match excepted(r) {
            Some((_, status, _)) => r["status"] != *status,
            None => r["status"] != "SUCCESS",
        })
        .collect();
    assert!(
        unexpected.is_empty(),
        "scim2-tester checks that did not succeed (and are not documented exceptions):\n{}",
        unexpected.iter().map(|r| r.to_string()).collect::<Vec<_>>().join("\n")
    );
    for (title, _, why) in DOCUMENTED_EXCEPTIONS {
        assert!(results.iter().any(|r| r["title"] == title), "{title} no longer runs; drop its exception ({why})");
    }
    assert!(tally.get("SUCCESS").copied().unwrap_or(0) >= 100, "too few checks ran: {tally:?}");
    // Every write the checker made left its admin-log row, by the SCIM token.
    let log = admin_log_text(&t).await;
    for action in ["scim.user.create", "scim.user.update", "scim.user.delete", "scim.group.create", "scim.group.delete"] {
        assert!(log.contains(action), "no {action} row");
    }
}

/// Two replicas of one database, an owner (alice) and an admin (bob) signed in through the
/// development provider, and bob's personal token with a service credential.
struct World {
    t: TestDb,
    a: Served,
    b: Served,
    alice: common::browser::Browser,
    bob: common::browser::Browser,
    bob_machine: Machine,
}

async fn world() -> World {
    let t = TestDb::new().await;
    cli(&t.url, &["tenant", "create", "acme", "--name", "Acme", "--owner-email", "alice@example.test"]).await;
    cli(&t.url, &["workspace", "create", "--tenant", "acme", "main"]).await;
    let a = Served::start(gatehouse(Some(&t.url))).await;
    let b = Served::start(gatehouse(Some(&t.url))).await;
    let alice = dev_sign_in(&a, "alice@example.test").await;
    let r = alice
        .write(Method::POST, "/api/v1/tenants/acme/invitations", json!({ "email": "bob@example.test", "role": "admin" }))
        .await;
    assert_eq!(r.status(), 201);
    let bob = dev_sign_in(&a, "bob@example.test").await;
    let r = bob.write(Method::POST, "/api/v1/tenants/acme/tokens", json!({ "name": "bob's laptop" })).await;
    assert_eq!(r.status(), 201);
    let created: Value = r.json().await.unwrap();
    let sc = cli(&t.url, &["service-credential", "create", "--tenant", "acme", "--name", "ci"]).await;
    let bob_machine = Machine {
        client_id: sc[1].clone(),
        client_secret: sc[2].clone(),
        token: created["secret"].as_str().unwrap().to_owned(),
        token_id: created["token"]["id"].as_str().unwrap().to_owned(),
    };
    World { t, a, b, alice, bob, bob_machine }
}

/// Bob's session, asking replica `on`.
async fn session_status(w: &World, on: &Served) -> StatusCode {
    w.bob.client.get(format!("{}/api/v1/tenants/acme/members", on.base)).send().await.unwrap().status()
}

/// Bob's MCP OAuth access token, granted to a registered agent through the consent page.
async fn bob_oauth_access(w: &World) -> String {
    let redirect = "http://127.0.0.1:4567/callback";
    let (status, client) = mcp_oauth::register(&w.a.base, "acme", redirect).await;
    assert_eq!(status, 201, "{client}");
    let client_id = client["client_id"].as_str().unwrap();
    let resource = format!("{}/t/acme/w/main/mcp", w.a.base);
    mcp_oauth::authorize(&w.bob, "acme", client_id, redirect, &resource).await.0
}

/// Bob's OAuth access token at the MCP endpoint of replica `on` (a token works only at the
/// endpoint URL it was issued for: replica A's, where bob consented).
async fn oauth_status(on: &Served, access: &str) -> StatusCode {
    mcp_oauth::status_at(&format!("{}/t/acme/w/main/mcp", on.base), access).await
}

async fn token_status(w: &World, on: &Served) -> StatusCode {
    w.bob_machine.headers(http().get(format!("{}/api/v1/tenants/acme", on.base))).send().await.unwrap().status()
}

async fn members(w: &World) -> Vec<Value> {
    let r = w.alice.client.get(format!("{}/api/v1/tenants/acme/members", w.a.base)).send().await.unwrap();
    r.json::<Vec<Value>>().await.unwrap()
}

/// Mints a SCIM token through the API, as a tenant admin does.
async fn api_scim_token(w: &World) -> String {
    let r = w.alice.write(Method::POST, "/api/v1/tenants/acme/scim-tokens", json!({ "name": "okta" })).await;
    assert_eq!(r.status(), 201);
    assert_eq!(r.headers()["cache-control"], "no-store");
    let body: Value = r.json().await.unwrap();
    body["secret"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn a_deactivation_through_scim_ends_a_live_session_and_a_personal_token_on_another_replica() {
    let w = world().await;
    let token = api_scim_token(&w).await;
    assert!(admin_log_text(&w.t).await.contains("scim_token.create"));
    let user = json!({ "schemas": [USER], "userName": "bob", "emails": [{ "value": "Bob@Example.test", "primary": true }] });
    let (status, created) = scim(&w.a, &token, Method::POST, "/scim/v2/t/acme/Users", Some(user)).await;
    assert_eq!(status, 201, "{created}");
    let id = created["id"].as_str().unwrap().to_owned();
    assert_eq!(session_status(&w, &w.b).await, 200, "bob's session works on replica B");
    assert_eq!(token_status(&w, &w.b).await, 200, "bob's token works on replica B");
    let access = bob_oauth_access(&w).await;
    assert_eq!(oauth_status(&w.a, &access).await, 200, "bob's MCP OAuth grant works");

    let deactivate = json!({ "schemas": [PATCH], "Operations": [{ "op": "replace", "path": "active", "value": false }] });
    let (status, patched) = scim(&w.a, &token, Method::PATCH, &format!("/scim/v2/t/acme/Users/{id}"), Some(deactivate)).await;
    assert_eq!((status, &patched["active"]), (200, &json!(false)), "{patched}");
    // The very next requests, on the other replica: no waiting, no polling.
    assert_eq!(session_status(&w, &w.b).await, 401, "bob's session still works on replica B");
    assert_eq!(token_status(&w, &w.b).await, 401, "bob's personal token still works on replica B");
    assert_eq!(token_status(&w, &w.a).await, 401);
    assert_eq!(oauth_status(&w.a, &access).await, 401, "bob's MCP OAuth grant still works");
    assert!(members(&w).await.iter().all(|m| m["email"] != "bob@example.test"), "bob is still a member");
    // The personal token is revoked, not only unusable while bob is away: invited and signed
    // in again, bob does not get it back (nor the old session or grant).
    let tokens = w.alice.client.get(format!("{}/api/v1/tenants/acme/tokens", w.a.base)).send().await.unwrap();
    let tokens: Vec<Value> = tokens.json().await.unwrap();
    let mine = tokens.iter().find(|t| t["id"] == w.bob_machine.token_id.as_str()).expect("bob's token is listed");
    assert!(mine["revoked_at"].is_string(), "{mine}");
    let r = w
        .alice
        .write(Method::POST, "/api/v1/tenants/acme/invitations", json!({ "email": "bob@example.test", "role": "member" }))
        .await;
    assert_eq!(r.status(), 201);
    let _bob_again = dev_sign_in(&w.a, "bob@example.test").await;
    assert!(members(&w).await.iter().any(|m| m["email"] == "bob@example.test"), "bob is a member again");
    assert_eq!(token_status(&w, &w.b).await, 401, "bob's old token came back with the new membership");
    assert_eq!(session_status(&w, &w.b).await, 401, "bob's old session came back");
    assert_eq!(oauth_status(&w.a, &access).await, 401, "bob's old grant came back");
    let log = admin_log_text(&w.t).await;
    let removal = log.lines().find(|l| l.contains("\"member.remove\"")).expect("a member.remove row");
    assert!(removal.contains("\"actor\":\"scim_token:"), "the removal is the SCIM token's: {removal}");
    // The SCIM user stays, inactive; deleting it afterwards is a plain delete.
    let (status, got) = scim(&w.b, &token, Method::GET, &format!("/scim/v2/t/acme/Users/{id}"), None).await;
    assert_eq!((status, &got["active"]), (200, &json!(false)));
    let (status, _) = scim(&w.b, &token, Method::DELETE, &format!("/scim/v2/t/acme/Users/{id}"), None).await;
    assert_eq!(status, 204);
    assert_scim_error(&scim(&w.a, &token, Method::GET, &format!("/scim/v2/t/acme/Users/{id}"), None).await, 404, None);
}

#[tokio::test]
async fn a_delete_through_scim_removes_the_member_and_groups_map_to_roles() {
    let w = world().await;
    let token = api_scim_token(&w).await;
    let user = json!({ "schemas": [USER], "userName": "bob@example.test", "emails": [{ "value": "bob@example.test" }] });
    let (_, bob) = scim(&w.a, &token, Method::POST, "/scim/v2/t/acme/Users", Some(user)).await;
    let bob_id = bob["id"].as_str().unwrap().to_owned();
    let role_of_bob =
        async || members(&w).await.into_iter().find(|m| m["email"] == "bob@example.test").map(|m| m["role"].clone());
    assert_eq!(role_of_bob().await, Some(json!("admin")), "no role group yet: the role stays");

    // A role group: its Users' members get its role; the others in no role group, `member`.
    let group = json!({ "schemas": [GROUP], "displayName": "Operator", "members": [{ "value": bob_id }] });
    let (status, g) = scim(&w.a, &token, Method::POST, "/scim/v2/t/acme/Groups", Some(group)).await;
    assert_eq!(status, 201, "{g}");
    assert_eq!(role_of_bob().await, Some(json!("operator")));
    let (_, listed) =
        scim(&w.b, &token, Method::GET, "/scim/v2/t/acme/Users?filter=groups.display+eq+%22operator%22", None).await;
    assert_eq!(listed["totalResults"], 1, "{listed}");
    let gid = g["id"].as_str().unwrap().to_owned();
    let remove =
        json!({ "schemas": [PATCH], "Operations": [{ "op": "remove", "path": format!("members[value eq \"{bob_id}\"]") }] });
    let (status, g) = scim(&w.a, &token, Method::PATCH, &format!("/scim/v2/t/acme/Groups/{gid}"), Some(remove)).await;
    assert_eq!(status, 200, "{g}");
    assert_eq!(role_of_bob().await, Some(json!("member")), "out of every role group: member");

    let (status, _) = scim(&w.a, &token, Method::DELETE, &format!("/scim/v2/t/acme/Users/{bob_id}"), None).await;
    assert_eq!(status, 204);
    assert_eq!(role_of_bob().await, None, "deleting the User removed the member");
    assert_eq!(session_status(&w, &w.b).await, 401);
    assert_eq!(token_status(&w, &w.b).await, 401);
}

#[tokio::test]
async fn bad_input_gets_scim_errors_and_writes_nothing() {
    let w = world().await;
    let token = api_scim_token(&w).await;
    let users = "SELECT count(*) FROM scim_users";
    let log = "SELECT count(*) FROM admin_log";
    let (status, alice) = scim(
        &w.a,
        &token,
        Method::POST,
        "/scim/v2/t/acme/Users",
        Some(json!({ "schemas": [USER], "userName": "alice", "emails": [{ "value": "alice@example.test" }] })),
    )
    .await;
    assert_eq!(status, 201);
    let alice_id = alice["id"].as_str().unwrap().to_owned();
    let (before_users, before_log) = (count(&w.t, users).await, count(&w.t, log).await);

    let post = |body: Value| scim(&w.a, &token, Method::POST, "/scim/v2/t/acme/Users", Some(body));
    assert_scim_error(&post(json!({ "schemas": [USER], "userName": "x", "shoeSize": 44 })).await, 400, Some("invalidSyntax"));
    assert_scim_error(&post(json!({ "schemas": [USER], "displayName": "no userName" })).await, 400, Some("invalidValue"));
    let many: Vec<Value> = (0..101).map(|i| json!({ "value": format!("+1555{i:04}") })).collect();
    assert_scim_error(
        &post(json!({ "schemas": [USER], "userName": "x", "phoneNumbers": many })).await,
        400,
        Some("invalidValue"),
    );
    assert_scim_error(&post(json!({ "schemas": [USER], "userName": "ALICE" })).await, 409, Some("uniqueness"));
    assert_scim_error(&post(json!(["not", "an", "object"])).await, 400, Some("invalidSyntax"));
    // Over the body limit (1 MiB by default): refused by the server's layer, still as SCIM.
    let huge = json!({ "schemas": [USER], "userName": "x", "title": "x".repeat(2 << 20) });
    assert_scim_error(&post(huge).await, 413, None);

    let list = |q: &'static str| scim(&w.a, &token, Method::GET, q, None);
    for bad in [
        "/scim/v2/t/acme/Users?filter=userName+eq",
        "/scim/v2/t/acme/Users?filter=shoeSize+eq+1",
        "/scim/v2/t/acme/Users?filter=(userName+pr",
    ] {
        assert_scim_error(&list(bad).await, 400, Some("invalidFilter"));
    }
    // A query that cannot be read is a SCIM error too, not a plain-text one.
    let twice = "/scim/v2/t/acme/Users?filter=userName+pr&filter=title+pr";
    assert_scim_error(&list(twice).await, 400, Some("invalidSyntax"));
    assert_scim_error(&list("/scim/v2/t/acme/Users?count=many").await, 400, Some("invalidValue"));
    let (status, found) = list("/scim/v2/t/acme/Users?filter=userName+eq+%22Alice%22&count=1").await;
    assert_eq!((status, &found["totalResults"], &found["Resources"][0]["id"]), (200, &json!(1), &json!(alice_id)));

    let at = format!("/scim/v2/t/acme/Users/{alice_id}");
    let patch = |ops: Value| scim(&w.a, &token, Method::PATCH, &at, Some(json!({ "schemas": [PATCH], "Operations": ops })));
    assert_scim_error(
        &patch(json!([{ "op": "replace", "path": "name.nickname", "value": "x" }])).await,
        400,
        Some("invalidPath"),
    );
    assert_scim_error(&patch(json!([{ "op": "explode", "path": "title", "value": "x" }])).await, 400, Some("invalidSyntax"));
    assert_scim_error(&patch(json!([{ "op": "replace", "path": "meta", "value": {} }])).await, 400, Some("mutability"));
    // The first operation is fine, the second is not: neither is applied.
    let half =
        json!([{ "op": "replace", "path": "title", "value": "Boss" }, { "op": "remove", "path": "emails[type eq \"x\"]" }]);
    assert_scim_error(&patch(half).await, 400, Some("noTarget"));
    // Deprovisioning the tenant's last owner is refused (409), and the User stays active.
    let off = json!([{ "op": "replace", "path": "active", "value": false }]);
    assert_scim_error(&patch(off).await, 409, None);
    assert_eq!(
        (count(&w.t, users).await, count(&w.t, log).await),
        (before_users, before_log),
        "a refused request wrote something"
    );
    let (_, alice) = scim(&w.a, &token, Method::GET, &at, None).await;
    assert!(alice.get("title").is_none() && alice.get("active").is_none(), "{alice}");
    assert!(members(&w).await.iter().any(|m| m["email"] == "alice@example.test"));

    // A body that is not SCIM JSON, a missing or revoked token, another tenant's path.
    let r = http().post(format!("{}/scim/v2/t/acme/Users", w.a.base)).bearer_auth(&token).body("{}").send().await.unwrap();
    assert_eq!(r.status(), 415);
    assert_scim_error(&scim(&w.a, "gsm_nope", Method::GET, "/scim/v2/t/acme/Users", None).await, 401, None);
    cli(&w.t.url, &["tenant", "create", "globex", "--name", "Globex"]).await;
    assert_scim_error(&scim(&w.a, &token, Method::GET, "/scim/v2/t/globex/Users", None).await, 404, None);
    assert_scim_error(&scim(&w.a, &token, Method::GET, "/scim/v2/t/nowhere/Users", None).await, 404, None);
    let globex = scim_token(&w.t, "globex").await;
    assert_scim_error(&scim(&w.a, &globex, Method::GET, &at, None).await, 404, None);
    let (_, listed) = scim(&w.a, &globex, Method::GET, "/scim/v2/t/globex/Users", None).await;
    assert_eq!(listed["totalResults"], 0, "another tenant's directory sees none of acme's users");
    let tokens = w.alice.client.get(format!("{}/api/v1/tenants/acme/scim-tokens", w.a.base)).send().await.unwrap();
    let id = tokens.json::<Vec<Value>>().await.unwrap()[0]["id"].as_str().unwrap().to_owned();
    let r = w.alice.write(Method::DELETE, &format!("/api/v1/tenants/acme/scim-tokens/{id}"), json!({})).await;
    assert_eq!(r.status(), 200);
    assert_scim_error(&scim(&w.b, &token, Method::GET, "/scim/v2/t/acme/Users", None).await, 401, None);
}
