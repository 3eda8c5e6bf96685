//! The operator console in a real headless Chromium (Debian `chromium` + `chromium-driver`,
//! driven over WebDriver with fantoccini), signed in through the npm `oidc-provider`, with a
//! real MCP client (the official Python SDK) against `server-everything` behind the gateway.
//! Every page the test visits is saved as a PNG under `target/console-screenshots/`.

mod approvals;
mod chrome;
#[path = "../common/mod.rs"]
mod common;
mod config;
mod editor;
mod pages;
mod permissions;
mod pins;

use std::time::Duration;

use chrome::Chrome;
use common::{
    Everything, Machine, OidcPeer, Served, TestDb, add_remote_mcp, cli, eventually, free_port, gatehouse, http, mcp_post,
    python_agent,
};
use fantoccini::Locator;
use serde_json::{Value, json};
use sqlx::{Connection, Executor};

async fn live_tokens(t: &TestDb) -> i64 {
    let mut owner = t.owner_conn().await;
    let mut tx = owner.begin().await.unwrap();
    tx.execute("SELECT set_config('gatehouse.platform', 'on', true)").await.unwrap();
    sqlx::query_scalar("SELECT count(*) FROM access_tokens WHERE revoked_at IS NULL").fetch_one(&mut *tx).await.unwrap()
}

#[tokio::test]
async fn console_in_chromium_tokens_credentials_mcp_client_permissions_and_csrf() {
    gatehouse::install_crypto();
    let t = TestDb::new().await;
    cli(&t.url, &["tenant", "create", "acme", "--name", "Acme", "--owner-email", "alice@example.test"]).await;
    cli(&t.url, &["workspace", "create", "--tenant", "acme", "main", "--name", "Main"]).await;
    let everything = Everything::start().await;
    add_remote_mcp(&t.url, "acme", "main", "everything", &everything.url).await;
    let port = free_port();
    let base = format!("http://127.0.0.1:{port}");
    // The same provider signs people in and, as a downstream's authorization server, grants
    // the `crm` connector its OAuth tokens.
    let peer = OidcPeer::start_with(&base, &[("OIDC_DOWNSTREAM_CLIENT_ID", "crm-client"), ("OIDC_REVOCATION", "1")]).await;
    let keys = common::vault_key("k1");
    let crm = common::json_path(&json!({ "base_url": everything.url, "timeout_ms": 5000,
        "auth": { "type": "oauth", "grant": "shared", "client_id": "crm-client", "scopes": ["openid", "email"],
                  "authorization_endpoint": format!("{}/auth", peer.issuer), "token_endpoint": format!("{}/token", peer.issuer),
                  "revocation_endpoint": format!("{}/token/revocation", peer.issuer) },
        "tools": [{ "name": "me", "description": "Who am I", "method": "GET", "path": "/me", "read_only": true,
            "input_schema": { "type": "object", "additionalProperties": false, "properties": {} } }] }));
    let mut add = gatehouse(Some(&t.url));
    add.env("GATEHOUSE_VAULT_KEYS", &keys);
    common::run_ok(
        add,
        &["connector", "add", "--tenant", "acme", "--workspace", "main", "--id", "crm", "--kind", "http_api", "--config", &crm],
    )
    .await;
    let mut cmd = gatehouse(Some(&t.url));
    cmd.env("GATEHOUSE_VAULT_KEYS", &keys)
        .env("GATEHOUSE_OIDC_ISSUER", &peer.issuer)
        .env("GATEHOUSE_OIDC_CLIENT_ID", common::PEER_CLIENT_ID)
        .env("GATEHOUSE_OIDC_CLIENT_SECRET", common::PEER_CLIENT_SECRET)
        .env("GATEHOUSE_PUBLIC_URL", &base);
    let served = Served::start_on(cmd, port).await;
    let chrome = Chrome::start("oidc").await;

    // Not signed in: the console sends the person to sign in, through the real provider.
    chrome.sign_in(&base, "alice").await;
    assert_eq!(chrome.url().await, format!("{base}/console/t/acme/workspaces"), "one tenant: straight to it");
    chrome.shot("workspaces").await;
    let page = chrome.client.source().await.unwrap();
    assert!(page.contains("alice@example.test") && page.contains("owner"));
    assert!(!page.contains("Development sign-in"), "no development banner with a real provider");
    assert!(page.contains(&format!("{base}/t/acme/w/main/mcp")));

    // Every console page carries a strict policy: scripts and styles from this origin only.
    let r =
        http().get(format!("{base}/console/t/acme/tokens")).header("cookie", chrome.session_cookie().await).send().await.unwrap();
    let csp = r.headers()["content-security-policy"].to_str().unwrap().to_owned();
    assert!(csp.contains("script-src 'self'") && csp.contains("default-src 'none'") && !csp.contains("unsafe-inline"), "{csp}");

    // A service credential: its secret once.
    chrome.goto(&format!("{base}/console/t/acme/service-credentials"), "service-credentials").await;
    chrome.fill("#credential-name", "ci runner").await;
    chrome.click("#create-credential").await;
    chrome.shot("service-credential-created").await;
    let client_id = chrome.text("#new-client-id").await;
    let client_secret = chrome.text("#new-secret").await;
    assert!(client_id.starts_with("gsc_") && client_secret.starts_with("gss_"), "{client_id} {client_secret}");

    // A bad name is refused in place, and nothing is written.
    chrome.goto(&format!("{base}/console/t/acme/tokens"), "tokens-empty").await;
    let before = live_tokens(&t).await;
    chrome.fill("#token-name", &"x".repeat(81)).await;
    chrome.execute_remove_maxlength().await;
    chrome.click("#create-token").await;
    chrome.shot("tokens-invalid-name").await;
    assert!(chrome.text("#form-error").await.contains("invalid_name"));
    assert_eq!(live_tokens(&t).await, before, "a refusal writes nothing");

    // An access token: the secret shown exactly once, with a copy button and a warning.
    chrome.fill("#token-name", "deploy bot").await;
    chrome.click("#create-token").await;
    chrome.shot("token-created").await;
    let secret = chrome.text("#new-secret").await;
    assert!(secret.starts_with("gth_") && secret.len() == 47, "{secret}");
    assert!(chrome.text("#secret-heading").await.contains("deploy bot"));
    assert!(chrome.client.source().await.unwrap().contains("shown this once"));
    let copy = chrome.client.find(Locator::Css("button[data-copy=new-secret]")).await.unwrap();
    assert!(copy.is_displayed().await.unwrap(), "console.js reveals the copy button");
    assert_eq!(live_tokens(&t).await, before + 1);
    // Reload: the page is the list now (GET), without the secret, and nothing was created again.
    chrome.client.refresh().await.unwrap();
    chrome.shot("tokens-after-reload").await;
    let reloaded = chrome.client.source().await.unwrap();
    assert!(!reloaded.contains(&secret), "the secret is gone after a reload");
    assert!(reloaded.contains("deploy bot") && reloaded.contains(&secret[..12]), "listed by name and prefix");
    assert_eq!(live_tokens(&t).await, before + 1, "a reload does not submit the form again");
    assert_eq!(chrome.url().await, format!("{base}/console/t/acme/tokens"));

    // An MCP client (the official Python SDK) with that token and the service credential.
    let machine = Machine { client_id, client_secret, token: secret.clone(), token_id: String::new() };
    let endpoint = format!("{base}/t/acme/w/main/mcp");
    let out = python_agent(
        &endpoint,
        &machine,
        json!([["call_tool", { "address": "everything.echo", "args": { "message": "from the console's token" } }]]),
    )
    .await;
    assert_eq!(out["calls"][0]["isError"], false, "{out}");
    assert!(out["calls"][0]["text"][0].as_str().unwrap().contains("from the console's token"), "{out}");

    // The token is no console key: a machine is refused on every console route.
    let r = machine_request(&machine, &format!("{base}/console/t/acme/tokens")).await;
    assert_eq!(r.status(), 403);

    // The connector's tools with read/write labels, now that the gateway fetched its catalog.
    let page = chrome.goto(&format!("{base}/console/t/acme/workspaces/main"), "workspace").await;
    assert!(page.contains("echo") && page.contains("tag read") && page.contains("tag write"), "{page}");
    // The OAuth connector: connect through the authorization server, see the grant, disconnect.
    assert_eq!(chrome.text("#grant-crm").await, "OAuth (shared grant): missing");
    let connect = format!("{base}/console/t/acme/workspaces/main/connectors/crm/oauth/connect");
    let r = http()
        .get(&connect)
        .header("cookie", chrome.session_cookie().await)
        .header("sec-fetch-site", "cross-site")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403, "another site cannot start the flow for a signed-in person");
    chrome.click("#connect-crm").await;
    let mut authorized = false;
    for _ in 0..40 {
        let url = chrome.url().await;
        if url.starts_with(&format!("{base}/oauth/callback")) {
            authorized = chrome.client.source().await.unwrap().contains("is authorized");
            break;
        }
        if url.starts_with(&peer.issuer) {
            if let Ok(field) = chrome.client.find(Locator::Css("input[name=login]")).await {
                field.send_keys("alice").await.unwrap();
                chrome.fill("input[name=password]", "any").await;
            }
            if let Ok(button) = chrome.client.find(Locator::Css("button[type=submit]")).await {
                chrome.shot("oauth-provider").await;
                button.click().await.unwrap();
                continue;
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    chrome.shot("oauth-connected").await;
    assert!(authorized, "the connector was authorized: {}", chrome.client.source().await.unwrap());
    chrome.goto(&format!("{base}/console/t/acme/workspaces/main"), "workspace-oauth-connected").await;
    let grant = chrome.text("#grant-crm").await;
    assert!(grant.starts_with("OAuth (shared grant): ") && !grant.ends_with("missing"), "{grant}");
    chrome.click("#disconnect-crm").await;
    chrome.shot("workspace-oauth-disconnected").await;
    assert_eq!(chrome.text("#grant-crm").await, "OAuth (shared grant): missing");

    chrome.goto(&format!("{base}/console/t/acme/setup"), "client-setup").await;
    let setup = chrome.text("#config-main").await;
    let config: Value = serde_json::from_str(&setup).unwrap();
    assert_eq!(config["mcpServers"]["gatehouse-main"]["url"], endpoint);
    assert!(chrome.text("#curl-main").await.contains(&endpoint));
    let setup_page = chrome.client.source().await.unwrap();
    assert!(!setup_page.contains(&secret) && !setup_page.contains(&machine.client_secret), "setup carries no secret");

    // Last used shows; revoke through the confirmation page; the client is refused next time.
    chrome.goto(&format!("{base}/console/t/acme/tokens"), "tokens-used").await;
    chrome.click("a.rename").await;
    chrome.shot("token-rename").await;
    chrome.fill("#token-name", "deploy bot renamed").await;
    chrome.click("#rename").await;
    chrome.shot("tokens-renamed").await;
    assert!(chrome.text("#tokens").await.contains("deploy bot renamed"));
    chrome.click("a.revoke").await;
    chrome.shot("token-revoke-confirm").await;
    assert!(chrome.text("#question").await.contains("deploy bot"));
    chrome.click("#confirm").await;
    chrome.shot("tokens-revoked").await;
    assert!(chrome.client.source().await.unwrap().contains("revoked"));
    let r = mcp_post(&endpoint, &machine, "tools/list", json!({})).await;
    assert_eq!(r.status(), 401, "the revoked token is refused on its next call");

    // Activity and the admin log show what happened.
    // (Activity rows are written off the request path: poll for them.)
    let activity_url = format!("{base}/console/t/acme/activity?workspace=main&outcome=ok");
    let shown = eventually(Duration::from_secs(20), || {
        let (client, url) = (chrome.client.clone(), activity_url.clone());
        async move {
            client.goto(&url).await.unwrap();
            client.source().await.unwrap().contains("<code>echo</code>")
        }
    })
    .await;
    assert!(shown, "the MCP call shows in the activity page");
    chrome.shot("activity").await;

    // The dashboard draws those calls: the ok bars of the last hour add up to the ok rows, and
    // the top-tools chart names the tool. At phone width it fits without scrolling the page.
    let ok_rows: i64 = {
        let mut owner = t.owner_conn().await;
        owner.execute("SELECT set_config('gatehouse.platform', 'on', false)").await.unwrap();
        sqlx::query_scalar("SELECT count(*) FROM activity WHERE outcome = 'ok'").fetch_one(&mut owner).await.unwrap()
    };
    let dashboard = chrome.goto(&format!("{base}/console/t/acme/dashboard?range=1h&workspace=main"), "dashboard").await;
    assert!(dashboard.contains("<svg id=\"chart-calls\""), "the calls chart is inline SVG");
    let plotted: Value = chrome
        .client
        .execute(
            "return [...document.querySelectorAll('#chart-calls rect[data-series=ok]')].reduce((n, r) => n + Number(r.dataset.value), 0)",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(plotted, json!(ok_rows), "the ok bars plot every ok call");
    let echo = chrome
        .client
        .execute("return document.querySelectorAll('#chart-tools rect[data-label=echo]').length", vec![])
        .await
        .unwrap();
    assert_eq!(echo, json!(2), "the top-tools chart has echo's calls and errors");
    assert!(chrome.text("#dashboard-summary").await.contains(&format!("{ok_rows} call")));
    chrome.client.set_window_size(390, 844).await.unwrap();
    chrome.goto(&format!("{base}/console/t/acme/dashboard?range=24h"), "dashboard-narrow").await;
    let fits: Value =
        chrome.client.execute("return document.documentElement.scrollWidth <= window.innerWidth + 1", vec![]).await.unwrap();
    assert_eq!(fits, Value::Bool(true), "no horizontal scrolling of the dashboard at 390px");
    chrome.client.set_window_size(1280, 900).await.unwrap();
    let log = chrome.goto(&format!("{base}/console/t/acme/admin-log"), "admin-log").await;
    assert!(log.contains("token.revoke") && log.contains("service_credential.create"));
    assert!(!log.contains(&secret) && !log.contains(&machine.client_secret), "no secret in the admin log");

    // Invite bob as a plain member from the members page.
    chrome.goto(&format!("{base}/console/t/acme/members"), "members").await;
    chrome.fill("#invite-email", "bob@example.test").await;
    chrome.click("#invite").await;
    chrome.shot("member-invited").await;
    assert!(chrome.client.source().await.unwrap().contains("Invited bob@example.test as member"));

    // A form post without its CSRF token is refused (same origin, the real browser form).
    let tokens_before = live_tokens(&t).await;
    chrome.goto(&format!("{base}/console/t/acme/tokens"), "tokens-before-csrf").await;
    chrome.fill("#token-name", "no csrf").await;
    let removed = chrome
        .client
        .execute("const i = document.getElementById('create-token').form.querySelector('input[name=csrf_token]'); i.remove(); return true", vec![])
        .await
        .unwrap();
    assert_eq!(removed, Value::Bool(true));
    chrome.click("#create-token").await;
    chrome.shot("csrf-refused").await;
    assert_eq!(chrome.text("#error-code").await, "csrf_failed");
    assert_eq!(live_tokens(&t).await, tokens_before, "a refused post writes nothing");
    // With the right token but from another origin: refused as well.
    let cookie = chrome.session_cookie().await;
    let csrf = {
        let page = http()
            .get(format!("{base}/console/t/acme/tokens"))
            .header("cookie", &cookie)
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        common::browser::csrf_field(&page).expect("the page has a form")
    };
    let r = http()
        .post(format!("{base}/console/t/acme/tokens"))
        .header("cookie", &cookie)
        .header("origin", "http://evil.example")
        .form(&[("csrf_token", csrf.as_str()), ("name", "cross origin")])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    assert!(r.text().await.unwrap().contains("origin_mismatch"));
    assert_eq!(live_tokens(&t).await, tokens_before);

    // Bob, a member: no token management in the navigation, and the URL answers 403.
    chrome.client.delete_all_cookies().await.unwrap();
    chrome.sign_in(&base, "bob").await;
    chrome.shot("member-workspaces").await;
    let nav = chrome.text("nav").await;
    assert!(nav.contains("Workspaces") && nav.contains("Members") && nav.contains("Client setup"), "{nav}");
    for hidden in ["Access tokens", "Service credentials", "Activity", "Dashboard", "Admin log"] {
        assert!(!nav.contains(hidden), "a member's navigation has no {hidden}: {nav}");
    }
    chrome.goto(&format!("{base}/console/t/acme/tokens"), "member-tokens-refused").await;
    assert_eq!(chrome.text("#error-code").await, "permission_denied");
    let bob = chrome.session_cookie().await;
    for path in [
        "/console/t/acme/tokens",
        "/console/t/acme/service-credentials",
        "/console/t/acme/admin-log",
        "/console/t/acme/activity",
        "/console/t/acme/dashboard",
    ] {
        let r = http().get(format!("{base}{path}")).header("cookie", &bob).send().await.unwrap();
        assert_eq!(r.status(), 403, "{path}");
    }
    // Another tenant's console is a 404, like a missing one.
    cli(&t.url, &["tenant", "create", "other", "--name", "Other"]).await;
    for path in ["workspaces", "dashboard"] {
        let r = http().get(format!("{base}/console/t/other/{path}")).header("cookie", &bob).send().await.unwrap();
        assert_eq!(r.status(), 404, "{path}");
    }

    // Narrow screens: the same page at phone width.
    chrome.client.set_window_size(390, 844).await.unwrap();
    chrome.goto(&format!("{base}/console/t/acme/members"), "member-members-narrow").await;
    let overflow: Value =
        chrome.client.execute("return document.documentElement.scrollWidth <= window.innerWidth + 1", vec![]).await.unwrap();
    assert_eq!(overflow, Value::Bool(true), "no horizontal scrolling of the page at 390px");

    // Signing out ends the session and hands over to the provider (the page's policy lets
    // the form go there).
    chrome.click("#sign-out").await;
    let issuer = peer.issuer.clone();
    let left = eventually(Duration::from_secs(10), || {
        let (client, issuer) = (chrome.client.clone(), issuer.clone());
        async move { client.current_url().await.unwrap().as_str().starts_with(&issuer) }
    })
    .await;
    assert!(left, "sign-out reaches the provider's end-session page");
    chrome.shot("signed-out-at-provider").await;
    let r = http().get(format!("{base}/console/t/acme/members")).header("cookie", &bob).send().await.unwrap();
    assert_eq!(r.status(), 303, "the session is over: back to sign-in");
    assert!(r.headers()["location"].to_str().unwrap().starts_with("/login?next="));

    chrome.client.clone().close().await.ok();
    drop(peer);
    assert_eq!(served.terminate().await, 0);
}

async fn machine_request(m: &Machine, url: &str) -> reqwest::Response {
    m.headers(http().get(url)).send().await.unwrap()
}

/// The development provider (banner on every page) and a shared credential slot set, replaced
/// and removed in the browser: the value never comes back, only its last four characters.
#[tokio::test]
async fn development_sign_in_banner_and_credential_slot_in_chromium() {
    gatehouse::install_crypto();
    let t = TestDb::new().await;
    let keys = common::vault_key("k1");
    cli(&t.url, &["tenant", "create", "acme", "--name", "Acme", "--owner-email", "carol@example.test"]).await;
    cli(&t.url, &["workspace", "create", "--tenant", "acme", "main"]).await;
    let everything = Everything::start().await;
    let config = common::json_path(&json!({ "base_url": everything.url, "timeout_ms": 5000,
        "auth": { "type": "slot", "slot": "shared", "headers": { "Authorization": "Bearer {token}" } },
        "tools": [{ "name": "get_item", "description": "One item", "method": "GET", "path": "/items/{id}", "read_only": true,
            "input_schema": { "type": "object", "additionalProperties": false, "required": ["id"], "properties": { "id": { "type": "string" } } } },
            { "name": "delete_item", "description": "Delete one", "method": "DELETE", "path": "/items/{id}",
            "input_schema": { "type": "object", "additionalProperties": false, "required": ["id"], "properties": { "id": { "type": "string" } } } }] }));
    let mut add = gatehouse(Some(&t.url));
    add.env("GATEHOUSE_VAULT_KEYS", &keys);
    common::run_ok(
        add,
        &[
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
        ],
    )
    .await;
    let mut cmd = gatehouse(Some(&t.url));
    cmd.env("GATEHOUSE_VAULT_KEYS", &keys);
    let served = Served::start(cmd).await;
    let base = served.base.clone();
    let chrome = Chrome::start("dev").await;

    chrome.sign_in(&base, "carol").await;
    chrome.shot("dev-workspaces").await;
    let banner = chrome.text(".banner").await;
    assert!(banner.contains("Development sign-in is active"), "{banner}");

    chrome.goto(&format!("{base}/console/t/acme/workspaces/main"), "dev-workspace-slot-missing").await;
    let page = chrome.client.source().await.unwrap();
    assert!(page.contains("get_item") && page.contains("delete_item"));
    assert!(page.contains("Credential (shared slot): missing"), "{page}");

    let first = "first-secret-value-WXYZ";
    chrome.fill("#field-inventory-token", first).await;
    chrome.click("#set-inventory").await;
    chrome.shot("dev-workspace-slot-set").await;
    let page = chrome.client.source().await.unwrap();
    assert!(page.contains("Credential (shared slot): set") && page.contains("WXYZ"), "{page}");
    assert!(page.contains("The credential of inventory is set."));
    assert!(chrome.url().await.ends_with("/workspaces/main?saved=inventory"), "post/redirect/get");
    assert!(!page.contains(first), "the value is never shown");

    let second = "second-secret-value-QRST";
    chrome.fill("#field-inventory-token", second).await;
    chrome.click("#set-inventory").await;
    chrome.shot("dev-workspace-slot-replaced").await;
    let page = chrome.client.source().await.unwrap();
    assert!(page.contains("QRST") && !page.contains("WXYZ") && !page.contains(second));
    let mut show = gatehouse(Some(&t.url));
    show.env("GATEHOUSE_VAULT_KEYS", &keys);
    let shown =
        common::run_ok(show, &["credential", "show", "--tenant", "acme", "--workspace", "main", "--connector", "inventory"])
            .await;
    assert!(shown.join("\n").contains("QRST"), "{shown:?}");

    chrome.click("#remove-inventory").await;
    chrome.shot("dev-workspace-slot-removed").await;
    assert!(chrome.client.source().await.unwrap().contains("Credential (shared slot): missing"));
    let recorded = common::admin_log_text(&t).await;
    assert!(!recorded.contains(first) && !recorded.contains(second), "no value in the admin log");

    chrome.client.clone().close().await.ok();
    assert_eq!(served.terminate().await, 0);
}
