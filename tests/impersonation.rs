//! Staff impersonation (issue 22 item 3): a platform admin reaches a tenant only through a
//! grant with a reason and at most an hour; what they change is marked in the tenant's admin
//! log; they mint nothing; the tenant's console shows a banner to its members; the tenant
//! revokes at once (the next request, on another replica too); a grant gives nothing in
//! another tenant; with approval required a grant waits for the tenant and the first decision
//! wins.

mod common;

use common::{Served, TestDb, browser::Browser, cli, dev_sign_in, gatehouse};
use reqwest::Method;
use serde_json::{Value, json};
use sqlx::{Connection, Executor};

const STAFF: &str = "staff@ops.test";

struct World {
    t: TestDb,
    a: Served,
    b: Served,
    alice: Browser,
    staff: Browser,
}

/// Tenants acme (owner alice, workspace main) and beta (owner bea); two replicas naming
/// staff@ops.test a platform admin; alice and the staff person signed in on replica a.
async fn world() -> World {
    let t = TestDb::new().await;
    cli(&t.url, &["tenant", "create", "acme", "--name", "Acme", "--owner-email", "alice@example.test"]).await;
    cli(&t.url, &["tenant", "create", "beta", "--name", "Beta", "--owner-email", "bea@example.test"]).await;
    cli(&t.url, &["workspace", "create", "--tenant", "acme", "main"]).await;
    let serve = || {
        let mut cmd = gatehouse(Some(&t.url));
        cmd.env("GATEHOUSE_PLATFORM_ADMINS", "Staff@Ops.test");
        cmd
    };
    let a = Served::start(serve()).await;
    let b = Served::start(serve()).await;
    let alice = dev_sign_in(&a, "alice@example.test").await;
    let staff = dev_sign_in(&a, STAFF).await;
    World { t, a, b, alice, staff }
}

async fn get(who: &Browser, base: &str, path: &str) -> (u16, Value) {
    let r = who.client.get(format!("{base}{path}")).send().await.unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

async fn write(who: &Browser, method: Method, path: &str, body: Value) -> (u16, Value) {
    let r = who.write(method, path, body).await;
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

fn assert_problem(answer: &(u16, Value), status: u16, code: &str) {
    assert_eq!(answer.0, status, "{}", answer.1);
    assert_eq!(answer.1["code"], code, "{}", answer.1);
}

async fn request(w: &World, tenant: &str, body: Value) -> (u16, Value) {
    write(&w.staff, Method::POST, &format!("/api/v1/platform/tenants/{tenant}/impersonations"), body).await
}

/// (actor, action) of the tenant's admin-log rows, oldest first.
async fn log_of(t: &TestDb, tenant: &str) -> Vec<(String, String)> {
    let mut owner = t.owner_conn().await;
    let mut tx = owner.begin().await.unwrap();
    tx.execute("SELECT set_config('gatehouse.platform', 'on', true)").await.unwrap();
    sqlx::query_as(
        "SELECT l.actor, l.action FROM admin_log l JOIN tenants t ON t.id = l.tenant_id WHERE t.slug = $1 ORDER BY l.id",
    )
    .bind(tenant)
    .fetch_all(&mut *tx)
    .await
    .unwrap()
}

#[tokio::test]
async fn a_grant_lets_staff_in_marked_and_without_minting_until_the_tenant_revokes_it() {
    let w = world().await;
    let workspaces = "/api/v1/tenants/acme/workspaces";

    // No grant: the tenant is as missing for the staff person as for any stranger.
    assert_eq!(get(&w.staff, &w.a.base, workspaces).await.0, 404);

    // A grant needs a reason and at most an hour; only a platform admin asks for one.
    assert_problem(&request(&w, "acme", json!({})).await, 422, "invalid_reason");
    assert_problem(&request(&w, "acme", json!({ "reason": "   " })).await, 422, "invalid_reason");
    assert_problem(&request(&w, "acme", json!({ "reason": "ticket 42", "minutes": 61 })).await, 422, "invalid_minutes");
    assert_problem(&request(&w, "acme", json!({ "reason": "ticket 42", "minutes": 0 })).await, 422, "invalid_minutes");
    let by_alice =
        write(&w.alice, Method::POST, "/api/v1/platform/tenants/acme/impersonations", json!({ "reason": "let me in" })).await;
    assert_problem(&by_alice, 403, "platform_admin_required");
    assert_eq!(request(&w, "nowhere", json!({ "reason": "ticket 42" })).await.0, 404);
    assert_eq!(get(&w.staff, &w.a.base, workspaces).await.0, 404, "refused requests grant nothing");

    let (status, grant) = request(&w, "acme", json!({ "reason": "ticket 42: connector broken", "minutes": 15 })).await;
    assert_eq!(status, 201, "{grant}");
    assert_eq!(grant["status"], "active", "{grant}");
    assert_eq!(grant["staff_email"], STAFF);
    assert_eq!(grant["minutes"], 15);
    let id = grant["id"].as_str().unwrap().to_owned();

    // In acme, on either replica, as an admin: a mutation is logged with the impersonator.
    assert_eq!(get(&w.staff, &w.a.base, workspaces).await.0, 200);
    assert_eq!(get(&w.staff, &w.b.base, workspaces).await.0, 200);
    let (status, me) = get(&w.staff, &w.a.base, "/api/v1/tenants/acme").await;
    assert_eq!(status, 200);
    assert_eq!(me["actor"]["role"], "admin", "{me}");
    assert_eq!(me["actor"]["impersonation"]["grant_id"], id.as_str(), "{me}");
    assert_eq!(get(&w.alice, &w.a.base, "/api/v1/tenants/acme").await.1["actor"]["impersonation"], Value::Null);
    let (status, created) = write(&w.staff, Method::POST, workspaces, json!({ "slug": "support-fix" })).await;
    assert_eq!(status, 201, "{created}");
    let actor = format!("staff:{STAFF}#{id}");
    let log = log_of(&w.t, "acme").await;
    assert!(log.contains(&(actor.clone(), "workspace.create".into())), "{log:?}");
    assert!(log.iter().any(|(_, action)| action == "impersonation.request"), "{log:?}");
    assert!(log.iter().any(|(_, action)| action == "impersonation.activate"), "{log:?}");

    // Nothing is minted under impersonation, and nothing personal is held.
    for (path, body) in [
        ("/api/v1/tenants/acme/tokens", json!({ "name": "staff laptop" })),
        ("/api/v1/tenants/acme/service-credentials", json!({ "name": "staff ci" })),
        ("/api/v1/tenants/acme/scim-tokens", json!({ "name": "staff directory" })),
        ("/api/v1/tenants/acme/invitations", json!({ "email": STAFF, "role": "admin" })),
    ] {
        assert_problem(&write(&w.staff, Method::POST, path, body).await, 403, "impersonation_forbidden");
    }
    assert_problem(
        &write(&w.staff, Method::PUT, "/api/v1/tenants/acme/impersonation-settings", json!({ "approval_required": false })).await,
        403,
        "impersonation_forbidden",
    );
    // The console's forms refuse minting the same way.
    let csrf = w.staff.csrf().await;
    let page = w
        .staff
        .client
        .post(format!("{}/console/t/acme/tokens", w.a.base))
        .header("origin", &w.a.base)
        .form(&[("csrf_token", csrf.as_str()), ("name", "staff laptop")])
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), 403);
    assert!(page.text().await.unwrap().contains("impersonation_forbidden"));
    assert!(!log_of(&w.t, "acme").await.iter().any(|(_, action)| action.starts_with("token.")), "no token was minted");

    // The grant is acme's only: beta stays missing.
    assert_eq!(get(&w.staff, &w.a.base, "/api/v1/tenants/beta/workspaces").await.0, 404);
    assert_eq!(request(&w, "beta", json!({ "reason": "x" })).await.0, 201, "a grant of beta's own is beta's business");
    let bea_ws = "/api/v1/tenants/beta/workspaces";
    assert_eq!(get(&w.staff, &w.a.base, bea_ws).await.0, 200);
    assert_eq!(get(&w.alice, &w.a.base, bea_ws).await.0, 404, "alice is no member of beta");

    // Every member of acme sees the banner on every console page; so does the staff person.
    for path in ["/console/t/acme/workspaces", "/console/t/acme/members"] {
        let page = w.alice.client.get(format!("{}{path}", w.a.base)).send().await.unwrap();
        assert_eq!(page.status(), 200);
        let html = page.text().await.unwrap();
        assert!(html.contains("Staff impersonation is active"), "{path}: {html}");
        assert!(html.contains(STAFF) && html.contains("ticket 42: connector broken"), "{path}");
        assert!(html.contains(&format!("/console/t/acme/impersonations/{id}/revoke")), "alice may revoke from the banner");
    }
    let html = w.staff.client.get(format!("{}/console/t/acme/workspaces", w.a.base)).send().await.unwrap().text().await.unwrap();
    assert!(html.contains("Staff impersonation is active") && !html.contains("/impersonations/"), "{html}");
    // A plain member sees it too, and may not revoke it.
    let invited = write(
        &w.alice,
        Method::POST,
        "/api/v1/tenants/acme/invitations",
        json!({ "email": "mia@example.test", "role": "member" }),
    )
    .await;
    assert_eq!(invited.0, 201, "{}", invited.1);
    let mia = dev_sign_in(&w.a, "mia@example.test").await;
    let html = mia.client.get(format!("{}/console/t/acme/workspaces", w.a.base)).send().await.unwrap().text().await.unwrap();
    assert!(html.contains("Staff impersonation is active") && html.contains(STAFF), "{html}");
    assert!(!html.contains("/impersonations/"), "no revoke form for a plain member");
    let by_mia = write(&mia, Method::POST, &format!("/api/v1/tenants/acme/impersonations/{id}/revoke"), json!({})).await;
    assert_problem(&by_mia, 403, "permission_denied");

    // The tenant's admin revokes; the staff person's very next request is a stranger's, on
    // the other replica too.
    let listed = get(&w.alice, &w.a.base, "/api/v1/tenants/acme/impersonations").await;
    assert_eq!(listed.0, 200);
    assert_eq!(listed.1[0]["id"], id.as_str());
    let (status, revoked) =
        write(&w.alice, Method::POST, &format!("/api/v1/tenants/acme/impersonations/{id}/revoke"), json!({})).await;
    assert_eq!(status, 200, "{revoked}");
    assert_eq!(revoked["status"], "revoked");
    assert_eq!(get(&w.staff, &w.b.base, workspaces).await.0, 404);
    assert_eq!(get(&w.staff, &w.a.base, workspaces).await.0, 404);
    let html = w.alice.client.get(format!("{}/console/t/acme/workspaces", w.a.base)).send().await.unwrap().text().await.unwrap();
    assert!(!html.contains("Staff impersonation is active"), "the banner is gone with the grant");
    assert_problem(
        &write(&w.alice, Method::POST, &format!("/api/v1/tenants/acme/impersonations/{id}/revoke"), json!({})).await,
        409,
        "already_decided",
    );
    let log = log_of(&w.t, "acme").await;
    assert!(log.iter().any(|(_, action)| action == "impersonation.revoke"), "{log:?}");
    // Another tenant's grant cannot be named from acme.
    let beta_grant =
        get(&w.staff, &w.a.base, "/api/v1/tenants/beta/impersonations").await.1[0]["id"].as_str().unwrap().to_owned();
    let crossed =
        write(&w.alice, Method::POST, &format!("/api/v1/tenants/acme/impersonations/{beta_grant}/revoke"), json!({})).await;
    assert_eq!(crossed.0, 404, "{}", crossed.1);
}

#[tokio::test]
async fn with_approval_required_a_grant_waits_for_the_tenant_and_the_first_decision_wins() {
    let w = world().await;
    let workspaces = "/api/v1/tenants/acme/workspaces";
    let settings = "/api/v1/tenants/acme/impersonation-settings";
    assert_eq!(get(&w.alice, &w.a.base, settings).await.1, json!({ "approval_required": false }), "not needed by default");
    let (status, set) = write(&w.alice, Method::PUT, settings, json!({ "approval_required": true })).await;
    assert_eq!((status, set), (200, json!({ "approval_required": true })));
    assert!(log_of(&w.t, "acme").await.iter().any(|(_, action)| action == "impersonation.settings"));

    let (status, grant) = request(&w, "acme", json!({ "reason": "ticket 7" })).await;
    assert_eq!(status, 201, "{grant}");
    assert_eq!(grant["status"], "pending");
    assert_eq!(grant["expires_at"], Value::Null);
    let id = grant["id"].as_str().unwrap().to_owned();
    assert_eq!(get(&w.staff, &w.a.base, workspaces).await.0, 404, "a pending grant gives nothing");
    let html = w.alice.client.get(format!("{}/console/t/acme/workspaces", w.a.base)).send().await.unwrap().text().await.unwrap();
    assert!(!html.contains("Staff impersonation is active"), "no banner while pending");

    // Eight approvals at once: exactly one wins, the rest find it decided.
    let approve = format!("/api/v1/tenants/acme/impersonations/{id}/approve");
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let (alice, approve) = (w.alice.clone(), approve.clone());
            tokio::spawn(async move {
                let r = alice.write(Method::POST, &approve, json!({})).await;
                let status = r.status().as_u16();
                (status, r.json::<Value>().await.unwrap())
            })
        })
        .collect();
    let mut answers = Vec::new();
    for t in tasks {
        answers.push(t.await.unwrap());
    }
    assert_eq!(answers.iter().filter(|(s, _)| *s == 200).count(), 1, "{answers:?}");
    for (status, body) in answers.iter().filter(|(s, _)| *s != 200) {
        assert_eq!((*status, body["code"].as_str()), (409, Some("already_decided")), "{body}");
    }
    let approved = &answers.iter().find(|(s, _)| *s == 200).unwrap().1;
    assert_eq!(approved["status"], "active");
    assert_eq!(approved["approved_by"].as_str().unwrap().split(':').next(), Some("member"));
    assert_eq!(get(&w.staff, &w.a.base, workspaces).await.0, 200, "approved: in");

    // Under the grant, the staff person decides nothing of the tenant's.
    assert_problem(&write(&w.staff, Method::POST, &approve, json!({})).await, 403, "impersonation_forbidden");
    let log = log_of(&w.t, "acme").await;
    assert_eq!(log.iter().filter(|(_, action)| action == "impersonation.approve").count(), 1, "{log:?}");

    // Expiry is implicit: a grant past its end gives nothing, and no banner shows.
    {
        let mut owner = w.t.owner_conn().await;
        let mut tx = owner.begin().await.unwrap();
        tx.execute("SELECT set_config('gatehouse.platform', 'on', true)").await.unwrap();
        let sql = "UPDATE impersonations SET starts_at = now() - interval '2 hours', expires_at = now() - interval '1 hour'
                    WHERE id = $1::uuid";
        let done = sqlx::query(sql).bind(&id).execute(&mut *tx).await.unwrap();
        assert_eq!(done.rows_affected(), 1);
        tx.commit().await.unwrap();
    }
    assert_eq!(get(&w.staff, &w.a.base, workspaces).await.0, 404, "expired: out");
    let listed = get(&w.alice, &w.a.base, "/api/v1/tenants/acme/impersonations").await.1;
    assert_eq!(listed[0]["status"], "expired", "{listed}");

    // A second request, turned down: revoking first, approving after is refused.
    let (_, second) = request(&w, "acme", json!({ "reason": "ticket 8", "minutes": 60 })).await;
    let second = second["id"].as_str().unwrap().to_owned();
    let (status, denied) =
        write(&w.alice, Method::POST, &format!("/api/v1/tenants/acme/impersonations/{second}/revoke"), json!({})).await;
    assert_eq!((status, denied["status"].as_str()), (200, Some("revoked")));
    assert_problem(
        &write(&w.alice, Method::POST, &format!("/api/v1/tenants/acme/impersonations/{second}/approve"), json!({})).await,
        409,
        "already_decided",
    );
    assert_eq!(get(&w.staff, &w.a.base, workspaces).await.0, 404);

    // The operator's command line sees and decides the same grants.
    let listed = cli(&w.t.url, &["impersonation", "list", "--tenant", "acme"]).await;
    assert_eq!(listed.len(), 2, "{listed:?}");
    assert!(listed[0].starts_with(&format!("{second}\trevoked\t{STAFF}\t60\t")), "{listed:?}");
    assert!(listed[1].starts_with(&format!("{id}\texpired\t")), "{listed:?}");
    assert_eq!(cli(&w.t.url, &["impersonation", "settings", "--tenant", "acme"]).await, ["approval_required\ttrue"]);

    // A third, approved, then revoked from the console's banner by the owner.
    let (_, third) = request(&w, "acme", json!({ "reason": "ticket 9" })).await;
    let third = third["id"].as_str().unwrap().to_owned();
    let ok = write(&w.alice, Method::POST, &format!("/api/v1/tenants/acme/impersonations/{third}/approve"), json!({})).await;
    assert_eq!(ok.0, 200, "{}", ok.1);
    assert_eq!(get(&w.staff, &w.b.base, workspaces).await.0, 200);
    let html = w.alice.client.get(format!("{}/console/t/acme/workspaces", w.a.base)).send().await.unwrap().text().await.unwrap();
    let (action, fields) = common::browser::first_form(&html).expect("the banner's form");
    assert_eq!(action, format!("/console/t/acme/impersonations/{third}/revoke"));
    let r = w.alice.client.post(format!("{}{action}", w.a.base)).header("origin", &w.a.base).form(&fields).send().await.unwrap();
    assert_eq!(r.status(), 303, "{}", r.text().await.unwrap());
    assert_eq!(get(&w.staff, &w.b.base, workspaces).await.0, 404, "revoked from the console: out on the next request");
}
