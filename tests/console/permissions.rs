//! Issue 24's permission rule over every console page: a member without a page's permission
//! gets the 403 page (with its code), the same page opens for the owner (so the refusal is
//! the permission's, not a missing route), another tenant's URL is a 404 for anyone, and a
//! member's form posts to the editing pages are refused and write nothing.

use serde_json::{Value, json};

use crate::common::{Served, TestDb, add_remote_mcp, browser::Browser, cli, dev_sign_in_at, gatehouse};

/// Every console page under `/console/t/{tenant}/`, and whether a plain member may open it.
pub const PAGES: &[(&str, bool)] = &[
    ("workspaces", true),
    ("workspaces/main", true),
    ("members", true),
    ("setup", true),
    ("workspaces/main/tool-pins", true),
    ("workspaces/main/policy", false),
    ("workspaces/main/copies", false),
    ("workspaces/main/connectors/everything/edit", false),
    ("workspaces/main/connectors/everything/remove", false),
    ("workspaces/main/lifecycle/suspend", false),
    ("blueprints", false),
    ("blueprints/base", false),
    ("tokens", false),
    ("service-credentials", false),
    ("dashboard", false),
    ("activity", false),
    ("admin-log", false),
    ("approvals", false),
    ("findings", false),
    ("suppress-rules", false),
    ("reports", false),
    ("reports/quota_usage", false),
    ("mcp-clients", false),
    ("sso", false),
    ("quotas", false),
    ("ops-issues", false),
];

/// The pages of [`PAGES`] and those that show one object by its id (a token, a service
/// credential, a member, a suppress rule), with ids of objects seeded through the API as the
/// owner erin, who also invites finn (a plain member, signed in). Needs the blueprint `base`
/// of [`PAGES`] not to exist yet. Returns (erin, finn, pages).
pub async fn seed(base: &str) -> (Browser, Browser, Vec<(String, bool)>) {
    let erin = dev_sign_in_at(base, "erin@example.test").await;
    let created = |path: &'static str, body: Value| {
        let erin = erin.clone();
        async move {
            let r = erin.write(reqwest::Method::POST, &format!("/api/v1/tenants/acme/{path}"), body).await;
            assert!(r.status().is_success(), "{path}: {}", r.status());
            r.json::<Value>().await.unwrap()
        }
    };
    created("blueprints", json!({ "slug": "base" })).await;
    created("invitations", json!({ "email": "finn@example.test", "role": "member" })).await;
    let finn = dev_sign_in_at(base, "finn@example.test").await;
    let id = |v: &Value, inner: &str| v[inner]["id"].as_str().or(v["id"].as_str()).expect("an id").to_owned();
    let token = id(&created("tokens", json!({ "name": "pages" })).await, "token");
    let credential = id(&created("service-credentials", json!({ "name": "pages" })).await, "credential");
    let expires = (chrono::Utc::now() + chrono::TimeDelta::days(1)).to_rfc3339();
    let rule =
        id(&created("suppress-rules", json!({ "code": "timeout", "reason": "pages", "expires_at": expires })).await, "rule");
    let quota =
        id(&created("quotas", json!({ "name": "pages", "per": "tenant", "requests": 10, "window_seconds": 60 })).await, "limit");
    let members: Value =
        erin.client.get(format!("{base}/api/v1/tenants/acme/members")).send().await.unwrap().json().await.unwrap();
    let members = members.as_array().or(members["members"].as_array()).expect("a list of members").clone();
    let member =
        members.iter().find(|m| m["email"] == "finn@example.test").expect("finn is a member")["id"].as_str().unwrap().to_owned();
    let mut pages: Vec<(String, bool)> = PAGES.iter().map(|(p, may)| ((*p).to_owned(), *may)).collect();
    pages.extend([
        (format!("tokens/{token}"), false),
        (format!("tokens/{token}/revoke"), false),
        (format!("service-credentials/{credential}/revoke"), false),
        (format!("members/{member}/remove"), false),
        (format!("suppress-rules/{rule}/revoke"), false),
        (format!("quotas/{quota}"), false),
        (format!("quotas/{quota}/remove"), false),
    ]);
    (erin, finn, pages)
}

async fn get(b: &Browser, path: &str) -> (u16, String) {
    let r = b.client.get(format!("{}{path}", b.base)).send().await.unwrap();
    (r.status().as_u16(), r.text().await.unwrap())
}

/// A same-origin form post with the session's CSRF token, as the console's forms send it.
async fn post_form(b: &Browser, path: &str, fields: &[(&str, &str)]) -> (u16, String) {
    let csrf = b.csrf().await;
    let mut form: Vec<(&str, &str)> = vec![("csrf_token", csrf.as_str())];
    form.extend_from_slice(fields);
    let r = b.client.post(format!("{}{path}", b.base)).header("origin", &b.base).form(&form).send().await.unwrap();
    (r.status().as_u16(), r.text().await.unwrap())
}

async fn state(owner: &Browser) -> (Value, Value, Value) {
    let json = |path: String| async move {
        let r = owner.client.get(format!("{}{path}", owner.base)).send().await.unwrap();
        r.json::<Value>().await.unwrap()
    };
    (
        json("/api/v1/tenants/acme/workspaces/main".into()).await,
        json("/api/v1/tenants/acme/blueprints".into()).await,
        json("/api/v1/tenants/acme/workspaces".into()).await,
    )
}

#[tokio::test]
async fn each_page_refuses_a_member_without_its_permission_and_another_tenants_url_is_404() {
    gatehouse::install_crypto();
    let t = TestDb::new().await;
    cli(&t.url, &["tenant", "create", "acme", "--name", "Acme", "--owner-email", "erin@example.test"]).await;
    cli(&t.url, &["tenant", "create", "globex", "--name", "Globex", "--owner-email", "gina@example.test"]).await;
    cli(&t.url, &["workspace", "create", "--tenant", "acme", "main"]).await;
    cli(&t.url, &["workspace", "create", "--tenant", "globex", "main"]).await;
    // A connector whose server is never called here.
    add_remote_mcp(&t.url, "acme", "main", "everything", "http://127.0.0.1:9/mcp").await;
    add_remote_mcp(&t.url, "globex", "main", "everything", "http://127.0.0.1:9/mcp").await;
    let mut cmd = gatehouse(Some(&t.url));
    cmd.env("GATEHOUSE_PLATFORM_ADMINS", "erin@example.test");
    let served = Served::start(cmd).await;
    let base = served.base.clone();
    let (erin, finn, pages) = seed(&base).await;

    for (page, member_may) in &pages {
        let path = format!("/console/t/acme/{page}");
        let (status, body) = get(&erin, &path).await;
        assert_eq!(status, 200, "the owner opens {path}: {body}");
        let (status, body) = get(&finn, &path).await;
        if *member_may {
            assert_eq!(status, 200, "a member opens {path}");
        } else {
            assert_eq!(status, 403, "a member without the permission is refused {path}");
            let code = body.split("<code id=\"error-code\">").nth(1).and_then(|rest| rest.split('<').next());
            assert!(body.starts_with("<!doctype html>"), "the 403 page: {body}");
            assert!(matches!(code, Some("permission_denied" | "platform_admin_required")), "{path}: {code:?}");
        }
        for who in [&erin, &finn] {
            let (status, _) = get(who, &format!("/console/t/globex/{page}")).await;
            assert_eq!(status, 404, "another tenant's {page} is a 404");
        }
    }

    // The member's posts to the editing pages are refused; nothing is written.
    let before = state(&erin).await;
    let posts: &[(&str, &[(&str, &str)])] = &[
        ("/console/t/acme/workspaces/main/policy", &[("section", "grants"), ("value", "[]"), ("expected_version", "2")]),
        (
            "/console/t/acme/workspaces/main/connectors/everything/edit",
            &[("config", r#"{"kind": "remote_mcp", "url": "http://127.0.0.1:9/other"}"#)],
        ),
        ("/console/t/acme/workspaces/main/connectors/everything/classes", &[("class.echo", "read"), ("expected_version", "2")]),
        ("/console/t/acme/blueprints", &[("slug", "sneaky")]),
        ("/console/t/acme/quotas", &[("name", "sneaky"), ("daily", "5")]),
        ("/console/t/acme/blueprints/base/versions", &[("document", "{}"), ("expected_latest", "0")]),
        ("/console/t/acme/workspaces/main/copies/fork", &[("slug", "sneaky")]),
        ("/console/t/acme/workspaces/main/copies/snapshot", &[]),
        ("/console/t/acme/workspaces/main/copies/restore", &[("file", "x.snap"), ("slug", "sneaky")]),
    ];
    for (path, fields) in posts {
        let (status, body) = post_form(&finn, path, fields).await;
        assert_eq!(status, 403, "{path}: {body}");
        assert!(body.contains("permission_denied"), "{path}: {body}");
        // The owner posting the same form to another tenant's URL finds nothing there.
        let (status, _) = post_form(&erin, &path.replace("/t/acme/", "/t/globex/"), fields).await;
        assert_eq!(status, 404, "{path} at another tenant");
    }
    assert_eq!(state(&erin).await, before, "the refusals wrote nothing");
    assert_eq!(served.terminate().await, 0);
}
