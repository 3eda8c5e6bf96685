//! The console's operations pages in headless Chromium: findings (ack), suppress rules
//! (create, revoke, each admin-logged), admin-log filters, reports (table and CSV), MCP
//! clients (revoke a grant and a client through confirmation pages), ops issues (a platform
//! verdict), role permission overrides taking effect on another member, and a connector's last
//! call, classified problem and credential test against a real and a dead downstream.

use std::time::Duration;

use fantoccini::Locator;
use gatehouse::ops::{self, Failure, Recorder, Status};
use serde_json::{Value, json};
use sqlx::{Connection, Executor};
use uuid::Uuid;

use crate::{
    chrome::Chrome,
    common::{self, Everything, Served, TestDb, admin_log_text, cli, dev_sign_in, eventually, free_port, gatehouse, http},
};

/// Runs `sql` as the schema owner in platform context; returns the first column of each row.
async fn owner_query(t: &TestDb, sql: &str, binds: &[Uuid]) -> Vec<String> {
    let mut owner = t.owner_conn().await;
    let mut tx = owner.begin().await.unwrap();
    tx.execute("SELECT set_config('gatehouse.platform', 'on', true)").await.unwrap();
    let mut q = sqlx::query_scalar::<_, String>(sqlx::AssertSqlSafe(sql.to_owned()));
    for b in binds {
        q = q.bind(*b);
    }
    let rows = q.fetch_all(&mut *tx).await.unwrap();
    tx.commit().await.unwrap();
    rows
}

fn failure(tenant: Uuid, connector: &str, code: &str, status: Status) -> Failure {
    Failure {
        operation: "downstream.call",
        stage: "remote_mcp".into(),
        tenant: Some(tenant),
        workspace: None,
        status,
        code: code.into(),
        // The gateway's own wording (see `surface::note`): the connector named first.
        message: format!("connector {connector}: {code}"),
        reference: Some("req-seeded".into()),
    }
}

/// No horizontal scrolling of the page itself at the current window width: the elements
/// that stick out (empty when it fits).
async fn overflowing(chrome: &Chrome) -> Vec<Value> {
    let script = "if (document.documentElement.scrollWidth <= window.innerWidth + 1) return [];
        return [...document.querySelectorAll('body *')]
            .filter(e => e.getBoundingClientRect().right > window.innerWidth + 1 && !e.closest('.table-wrap'))
            .map(e => e.tagName + '#' + e.id + '.' + e.className);";
    match chrome.client.execute(script, vec![]).await.unwrap() {
        Value::Array(a) => a,
        other => vec![other],
    }
}

/// The text of `css` once the page that has it is loaded (a click that submits a form may
/// return before the next page is there).
async fn seen(chrome: &Chrome, css: &str) -> String {
    let found = chrome.client.wait().at_most(Duration::from_secs(30)).for_element(Locator::Css(css)).await;
    found.unwrap_or_else(|e| panic!("{css}: {e}")).text().await.unwrap()
}

/// Waits until the browser's URL contains `part`.
async fn at(chrome: &Chrome, part: &str) {
    let client = chrome.client.clone();
    let ok = eventually(Duration::from_secs(30), || {
        let (client, part) = (client.clone(), part.to_owned());
        async move { client.current_url().await.unwrap().as_str().contains(&part) }
    })
    .await;
    assert!(ok, "never reached a URL with {part}");
}

#[tokio::test]
async fn operations_pages_in_chromium_findings_rules_reports_mcp_clients_overrides_and_credential_test() {
    gatehouse::install_crypto();
    let t = TestDb::new().await;
    let keys = common::vault_key("k1");
    cli(&t.url, &["tenant", "create", "acme", "--name", "Acme", "--owner-email", "carol@example.test"]).await;
    cli(&t.url, &["workspace", "create", "--tenant", "acme", "main"]).await;
    cli(&t.url, &["workspace", "create", "--tenant", "acme", "spare"]).await;
    let acme: Uuid = cli(&t.url, &["tenant", "list"])
        .await
        .iter()
        .find(|l| l.starts_with("acme\t"))
        .and_then(|l| l.split('\t').nth(2))
        .unwrap()
        .parse()
        .unwrap();
    let everything = Everything::start().await;
    // Two remote MCP connectors with a shared credential slot: the real server, and a dead one.
    let slot = common::json_path(
        &json!({ "auth": { "type": "slot", "slot": "shared", "headers": { "Authorization": "Bearer {token}" } } }),
    );
    let dead_url = format!("http://127.0.0.1:{}/mcp", free_port());
    for (id, url) in [("everything", everything.url.as_str()), ("dead", dead_url.as_str())] {
        let mut add = gatehouse(Some(&t.url));
        add.env("GATEHOUSE_VAULT_KEYS", &keys);
        let args = ["connector", "add", "--tenant", "acme", "--workspace", "main", "--id", id, "--kind", "remote_mcp"];
        common::run_ok(add, &[&args[..], &["--url", url, "--config", &slot]].concat()).await;
    }
    // Failures as the gateway records them: one finding per fingerprint in the tenant.
    let (recorder, _writer) = Recorder::start(t.db.clone());
    ops::record(&recorder, failure(acme, "dead", "unavailable", Status::Failed));
    ops::record(&recorder, failure(acme, "everything", "timeout", Status::TimedOut));
    recorder.flush().await;

    let mut cmd = gatehouse(Some(&t.url));
    cmd.env("GATEHOUSE_VAULT_KEYS", &keys).env("GATEHOUSE_PLATFORM_ADMINS", "carol@example.test");
    let served = Served::start(cmd).await;
    let base = served.base.clone();
    let console = format!("{base}/console/t/acme");
    let chrome = Chrome::start("ops").await;
    chrome.sign_in(&base, "carol").await;
    let nav = chrome.text("nav").await;
    for entry in ["Findings", "Suppress rules", "Reports", "MCP clients", "Ops issues"] {
        assert!(nav.contains(entry), "an owner who is a platform admin sees {entry}: {nav}");
    }
    // The footer links the API reference (issue 25): the link serves the OpenAPI document.
    assert!(chrome.text("#api-document").await.contains("OpenAPI"));
    chrome.click("#api-document").await;
    assert!(chrome.url().await.ends_with("/api/v1/openapi.json"), "{}", chrome.url().await);
    assert!(chrome.text("body").await.contains("\"openapi\":\"3.1"));

    // --- Credential test: the real downstream answers, the dead one is classified. ---
    let secret = "test-secret-value-LMNO";
    chrome.goto(&format!("{console}/workspaces/main"), "workspace-before").await;
    for id in ["everything", "dead"] {
        chrome.fill(&format!("#field-{id}-token"), secret).await;
        chrome.click(&format!("#set-{id}")).await;
        at(&chrome, &format!("saved={id}")).await;
    }
    chrome.click("#test-everything").await;
    chrome.shot("credential-test-ok").await;
    let ok = seen(&chrome, "#test-result-everything").await;
    assert!(ok.starts_with("Test passed: ok.") && ok.contains("listed"), "{ok}");
    chrome.click("#test-dead").await;
    chrome.shot("credential-test-dead").await;
    let dead = seen(&chrome, "#test-result-dead").await;
    assert!(dead.starts_with("Test failed: unavailable."), "{dead}");
    assert!(!chrome.client.source().await.unwrap().contains(secret), "the secret is never shown");
    // The dead connector has an open finding: its problem and the repair prompt.
    let problem = chrome.text("#problem-dead").await;
    assert!(problem.contains("Problem: unavailable") && problem.contains("cannot be reached"), "{problem}");
    assert!(!problem.contains(&dead_url), "no downstream text or address in the prompt");

    // --- Last call: a machine calls the real connector; the page shows it. ---
    let machine = common::provision(&t.url, "acme").await;
    let endpoint = format!("{base}/t/acme/w/main/mcp");
    let (is_error, body, _) =
        common::mcp_tool(&endpoint, &machine, "call_tool", json!({ "address": "everything.echo", "args": { "message": "hi" } }))
            .await;
    assert!(!is_error, "{body}");
    let workspace = format!("{console}/workspaces/main");
    let shown = eventually(Duration::from_secs(20), || {
        let (client, url) = (chrome.client.clone(), workspace.clone());
        async move {
            client.goto(&url).await.unwrap();
            client.find(Locator::Css("#last-call-everything")).await.is_ok()
        }
    })
    .await;
    assert!(shown, "the connector's last call shows");
    chrome.shot("workspace-last-call").await;
    let last = chrome.text("#last-call-everything").await;
    assert!(last.contains("echo") && last.contains("ok"), "{last}");

    // --- Findings: acknowledge one; the refusal of a second ack is shown in place. ---
    chrome.goto(&format!("{console}/findings"), "findings").await;
    assert_eq!(chrome.client.find_all(Locator::Css("#findings tbody tr")).await.unwrap().len(), 2);
    let row = "//table[@id='findings']//tr[contains(., 'timeout')]";
    chrome.client.find(Locator::XPath(&format!("{row}//button[contains(@class, 'ack')]"))).await.unwrap().click().await.unwrap();
    chrome.shot("finding-acked").await;
    assert!(seen(&chrome, ".notice").await.contains("acknowledged"));
    let status = chrome.client.find(Locator::XPath(&format!("{row}/td[@class='status']"))).await.unwrap().text().await.unwrap();
    assert_eq!(status, "acked");
    assert!(admin_log_text(&t).await.contains("ops.finding.ack"));

    // --- Suppress rules: a refusal in place, then create and revoke. ---
    chrome.goto(&format!("{console}/suppress-rules"), "suppress-rules-empty").await;
    chrome.fill("#rule-reason", "matches nothing in particular").await;
    chrome.click("#create-rule").await;
    chrome.shot("suppress-rule-refused").await;
    assert!(seen(&chrome, "#form-error").await.contains("rule_matches_everything"));
    chrome.fill("#rule-code", "unavailable").await;
    chrome.fill("#rule-reason", "vendor outage").await;
    chrome.click("#create-rule").await;
    chrome.shot("suppress-rule-created").await;
    assert!(seen(&chrome, ".notice").await.contains("in force"));
    assert!(chrome.text("#rules").await.contains("vendor outage"));
    let findings = chrome.goto(&format!("{console}/findings?status=suppressed"), "findings-suppressed").await;
    assert!(findings.contains("unavailable"), "the rule suppressed the matching finding");
    chrome.goto(&format!("{console}/suppress-rules"), "suppress-rules").await;
    chrome.click("a.revoke").await;
    chrome.shot("suppress-rule-revoke-confirm").await;
    assert!(seen(&chrome, "#question").await.contains("vendor outage"));
    chrome.click("#confirm").await;
    chrome.shot("suppress-rule-revoked").await;
    assert!(seen(&chrome, ".notice").await.contains("revoked"));
    assert!(chrome.client.source().await.unwrap().contains("No rules."));

    // --- Admin log: filter by action prefix in the form; both rule rows, nothing else. ---
    chrome.goto(&format!("{console}/admin-log"), "admin-log-all").await;
    chrome.fill("#f-action", "ops.suppress_rule.").await;
    chrome.click("#filter-log").await;
    at(&chrome, "action=ops.suppress_rule.").await;
    chrome.shot("admin-log-filtered").await;
    let log = seen(&chrome, "#admin-log").await;
    assert!(log.contains("ops.suppress_rule.create") && log.contains("ops.suppress_rule.revoke"), "{log}");
    assert!(!log.contains("ops.finding.ack") && !log.contains("credential.set"), "{log}");
    assert!(log.contains("carol@example.test"), "actors by name: {log}");
    let by_actor =
        chrome.goto(&format!("{console}/admin-log?actor=carol%40example.test&action=ops.finding"), "admin-log-actor").await;
    assert!(by_actor.contains("ops.finding.ack") && !by_actor.contains("ops.suppress_rule.create"));
    let none = chrome.goto(&format!("{console}/admin-log?actor=cli&action=ops."), "admin-log-no-match").await;
    assert!(none.contains("No entries match."));
    let future = chrome.goto(&format!("{console}/admin-log?since=2999-01-01T00:00"), "admin-log-future").await;
    assert!(future.contains("No entries match."));
    chrome.goto(&format!("{console}/admin-log?since=2999-01-01T00:00&until=2998-01-01T00:00"), "admin-log-bad-range").await;
    assert!(seen(&chrome, "#form-error").await.contains("invalid_time"));

    // Paging keeps the filters: 60 matching rows among others are 50 on the first page and
    // 10 behind "Older entries".
    owner_query(
        &t,
        "INSERT INTO admin_log (id, tenant_id, actor, action, target)
         SELECT gen_random_uuid(), $1, 'cli', 'test.bulk.' || n, 'bulk:' || n FROM generate_series(1, 60) n RETURNING id::text",
        &[acme],
    )
    .await;
    let rows = |chrome: &Chrome| {
        let client = chrome.client.clone();
        async move { client.find_all(Locator::Css("#admin-log tbody tr")).await.unwrap().len() }
    };
    let first = chrome.goto(&format!("{console}/admin-log?actor=cli&action=test.bulk."), "admin-log-paged-1").await;
    assert_eq!(rows(&chrome).await, 50);
    assert!(!first.contains("ops.suppress_rule"));
    chrome.click("#older").await;
    at(&chrome, "before=").await;
    seen(&chrome, "#admin-log").await;
    chrome.shot("admin-log-paged-2").await;
    assert!(chrome.url().await.contains("actor=cli&action=test.bulk."), "the older page keeps the filters");
    assert_eq!(rows(&chrome).await, 10);
    assert!(chrome.client.find(Locator::Css("#older")).await.is_err(), "no page after the last");

    // --- Reports: list, one as a table, and its CSV with the same header row as the API. ---
    chrome.goto(&format!("{console}/reports"), "reports").await;
    chrome.client.find(Locator::LinkText("tenant_usage")).await.unwrap().click().await.unwrap();
    chrome.shot("report-tenant-usage").await;
    let table = seen(&chrome, "#report").await;
    assert!(table.contains("acme"), "{table}");
    let cookie = chrome.session_cookie().await;
    let api: Value = http()
        .get(format!("{base}/api/v1/tenants/acme/reports/tenant_usage"))
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let columns: Vec<&str> = api["columns"].as_array().unwrap().iter().map(|c| c.as_str().unwrap()).collect();
    let r = http().get(format!("{console}/reports/tenant_usage/csv")).header("cookie", &cookie).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["content-type"], "text/csv; charset=utf-8");
    assert!(r.headers()["content-disposition"].to_str().unwrap().contains("acme-tenant_usage.csv"));
    let csv = r.text().await.unwrap();
    assert_eq!(csv.split("\r\n").next().unwrap(), columns.join(","), "{csv}");
    assert_eq!(csv.split("\r\n").filter(|l| !l.is_empty()).count(), 2, "a header and the tenant's one row: {csv}");
    let r = http().get(format!("{console}/reports/pg_class")).header("cookie", &cookie).send().await.unwrap();
    assert_eq!(r.status(), 404, "only report views run");

    // --- MCP clients: revoke a grant, then a client, each through its confirmation page. ---
    let carol: Uuid =
        owner_query(&t, "SELECT id::text FROM members WHERE email = 'carol@example.test'", &[]).await[0].parse().unwrap();
    let main: Uuid = owner_query(&t, "SELECT id::text FROM workspaces WHERE slug = 'main'", &[]).await[0].parse().unwrap();
    let mut grants = Vec::new();
    for (n, name) in ["Agent One", "Agent Two"].iter().enumerate() {
        let (client, grant) = (Uuid::new_v4(), Uuid::new_v4());
        let insert = format!(
            "INSERT INTO mcp_clients (tenant_id, id, client_id, kind, name, redirect_uris)
             VALUES ($1, $2, 'agent-{n}', 'registered', '{name}', ARRAY['http://127.0.0.1:9/cb']) RETURNING id::text"
        );
        owner_query(&t, &insert, &[acme, client]).await;
        owner_query(
            &t,
            &format!(
                "INSERT INTO mcp_grants (tenant_id, id, client_ref, member_id, workspace_id, resource, scope)
                 VALUES ($1, $2, $3, $4, $5, '{endpoint}', 'mcp') RETURNING id::text"
            ),
            &[acme, grant, client, carol, main],
        )
        .await;
        grants.push((client, grant));
    }
    chrome.goto(&format!("{console}/mcp-clients"), "mcp-clients").await;
    chrome
        .client
        .find(Locator::Css(&format!("a[href$='/mcp-grants/{}/revoke']", grants[0].1)))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    chrome.shot("mcp-grant-revoke-confirm").await;
    assert!(seen(&chrome, "#question").await.contains("Agent One"));
    chrome.click("#confirm").await;
    chrome.shot("mcp-grant-revoked").await;
    assert!(seen(&chrome, ".notice").await.contains("grant is revoked"));
    let revoked = owner_query(&t, "SELECT revoked_reason FROM mcp_grants WHERE id = $1", &[grants[0].1]).await;
    assert_eq!(revoked, ["revoked"]);
    let live = owner_query(&t, "SELECT id::text FROM mcp_grants WHERE revoked_at IS NULL", &[]).await;
    assert_eq!(live, [grants[1].1.to_string()], "only the chosen grant was revoked");
    chrome
        .client
        .find(Locator::Css(&format!("a[href$='/mcp-clients/{}/revoke']", grants[1].0)))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    chrome.shot("mcp-client-revoke-confirm").await;
    chrome.click("#confirm").await;
    chrome.shot("mcp-client-revoked").await;
    assert!(seen(&chrome, ".notice").await.contains("client is revoked"));
    let log = admin_log_text(&t).await;
    assert!(log.contains(&format!("mcp_grant:{}", grants[0].1)) && log.contains(&format!("mcp_client:{}", grants[1].0)));

    // --- Ops issues: a platform admin's verdict, logged as a platform action. ---
    chrome.goto(&format!("{console}/ops-issues"), "ops-issues").await;
    let fp = ops::fingerprint("downstream.call", "remote_mcp", "timeout");
    chrome.client.find(Locator::Css(&format!("#version-{fp}"))).await.unwrap().send_keys("2.0.1").await.unwrap();
    chrome.client.find(Locator::XPath(&format!("//tr[@id='issue-{fp}']//button"))).await.unwrap().click().await.unwrap();
    chrome.shot("ops-issue-resolved").await;
    assert!(seen(&chrome, ".notice").await.contains("resolve"));
    assert!(chrome.text(&format!("#issue-{fp} .status")).await.contains("resolved in 2.0.1"));
    assert!(admin_log_text(&t).await.contains("ops.issue.set_status"));

    // --- Lifecycle: suspend, archive (type the slug; a wrong one is refused), reap. ---
    chrome.goto(&format!("{console}/workspaces/spare"), "workspace-spare").await;
    chrome.click("#lifecycle-suspend").await;
    assert!(seen(&chrome, "#question").await.contains("Suspend the workspace spare"));
    chrome.shot("lifecycle-suspend-confirm").await;
    chrome.click("#confirm").await;
    assert_eq!(seen(&chrome, ".notice").await, "Done: suspend.");
    chrome.shot("lifecycle-suspended").await;
    assert!(chrome.text("dl").await.contains("suspended"));
    chrome.click("#lifecycle-archive").await;
    chrome.fill("#confirm-slug", "main").await;
    chrome.click("#confirm").await;
    assert!(seen(&chrome, "#form-error").await.contains("slug_mismatch"));
    chrome.shot("lifecycle-archive-wrong-slug").await;
    let spare = "SELECT status FROM workspaces WHERE slug = 'spare'";
    assert_eq!(owner_query(&t, spare, &[]).await, ["suspended"], "a wrong slug writes nothing");
    chrome.fill("#confirm-slug", "spare").await;
    chrome.click("#confirm").await;
    assert_eq!(seen(&chrome, ".notice").await, "Done: archive.");
    chrome.click("#lifecycle-reap").await;
    chrome.fill("#confirm-slug", "spare").await;
    chrome.shot("lifecycle-reap-confirm").await;
    chrome.click("#confirm").await;
    at(&chrome, "reaped=spare").await;
    assert!(seen(&chrome, ".notice").await.contains("spare is reaped"));
    chrome.shot("lifecycle-reaped").await;
    assert!(!chrome.text("#workspaces").await.contains("spare"));
    assert!(owner_query(&t, spare, &[]).await.is_empty());
    let log = admin_log_text(&t).await;
    assert!(log.contains("workspace.suspend") && log.contains("workspace.archive"), "lifecycle actions are admin-logged");

    // --- A plain member: 403 on every new page, until an owner's override allows one. ---
    chrome.goto(&format!("{console}/members"), "members-overrides").await;
    chrome.fill("#invite-email", "bob@example.test").await;
    chrome.click("#invite").await;
    assert!(seen(&chrome, ".notice").await.contains("Invited bob@example.test"));
    let bob = dev_sign_in(&served, "bob@example.test").await;
    let status = |path: String| {
        let client = bob.client.clone();
        async move { client.get(path).send().await.unwrap().status().as_u16() }
    };
    for path in [
        "/findings",
        "/suppress-rules",
        "/suppress-rules/00000000-0000-0000-0000-000000000000/revoke",
        "/reports",
        "/reports/tenant_usage",
        "/reports/tenant_usage/csv",
        "/mcp-clients",
        &format!("/mcp-grants/{}/revoke", grants[1].1),
        "/ops-issues",
        "/admin-log?action=ops.",
        "/activity",
        "/workspaces/main/lifecycle/suspend",
    ] {
        assert_eq!(status(format!("{console}{path}")).await, 403, "{path}");
    }
    let nav_of_bob = || async {
        let page = bob.client.get(format!("{console}/members")).send().await.unwrap().text().await.unwrap();
        let nav = &page[page.find("<nav").unwrap()..page.find("</nav>").unwrap()];
        ["/findings", "/suppress-rules", "/reports", "/mcp-clients", "/ops-issues"]
            .into_iter()
            .filter(|p| nav.contains(&format!("/console/t/acme{p}\"")))
            .collect::<Vec<_>>()
    };
    assert!(nav_of_bob().await.is_empty(), "a member's navigation has none of the new pages");
    let csrf = bob.csrf().await;
    let post =
        |path: &str, form: &[(&str, &str)]| bob.client.post(format!("{console}{path}")).header("origin", &base).form(form).send();
    let r = post("/members/overrides", &[("csrf_token", &csrf), ("member.activity_access", "allow")]).await.unwrap();
    assert_eq!(r.status(), 403, "only owners change what roles grant");
    let rule = [("csrf_token", csrf.as_str()), ("code", "x"), ("reason", "r"), ("expires", "2999-01-01T00:00")];
    assert_eq!(post("/suppress-rules", &rule).await.unwrap().status(), 403);
    assert_eq!(post("/workspaces/main/lifecycle/suspend", &[("csrf_token", &csrf)]).await.unwrap().status(), 403);
    let bob_page = bob.client.get(format!("{console}/workspaces/main")).send().await.unwrap().text().await.unwrap();
    assert!(!bob_page.contains("/lifecycle/"), "no lifecycle actions offered to a member");

    // The owner allows activity_access to members: bob's next request passes; default again: 403.
    chrome.goto(&format!("{console}/members"), "members-before-override").await;
    let select = chrome.client.find(Locator::Css("#ov-member-activity_access")).await.unwrap();
    select.select_by_value("allow").await.unwrap();
    chrome.click("#save-overrides").await;
    chrome.shot("members-override-saved").await;
    assert!(seen(&chrome, ".notice").await.contains("saved"));
    let members = chrome.text("#members").await;
    assert!(members.lines().any(|l| l.contains("bob@example.test") && l.contains("activity_access")), "{members}");
    assert_eq!(status(format!("{console}/activity")).await, 200, "the override takes effect at once");
    assert_eq!(status(format!("{console}/findings")).await, 200);
    assert_eq!(nav_of_bob().await, ["/findings", "/suppress-rules"], "the navigation follows the same permission");
    assert_eq!(status(format!("{console}/reports")).await, 403, "reports stay with owners and admins");
    assert!(admin_log_text(&t).await.contains("permission.override"));
    chrome.goto(&format!("{console}/members"), "members-override-back").await;
    let select = chrome.client.find(Locator::Css("#ov-member-activity_access")).await.unwrap();
    select.select_by_value("default").await.unwrap();
    chrome.click("#save-overrides").await;
    assert!(seen(&chrome, ".notice").await.contains("saved"));
    assert_eq!(status(format!("{console}/activity")).await, 403, "back to what the role grants");

    // --- Single sign-on: a connection added in the form (a field error first), then removed. ---
    chrome.goto(&format!("{console}/sso"), "sso-empty").await;
    assert!(chrome.text("#require-state").await.contains("Not required"));
    chrome.fill("#sso-name", "Acme IdP").await;
    chrome.fill("#sso-issuer", "http://127.0.0.1:9/idp").await;
    chrome.fill("#sso-client-id", "gatehouse").await;
    chrome.fill("#sso-client-secret", "console-sso-secret-1").await;
    chrome.fill("#sso-domains", "not a domain").await;
    chrome.click("#sso-add").await;
    assert!(seen(&chrome, "#form-error").await.contains("invalid_email_domain"));
    assert!(!chrome.client.source().await.unwrap().contains("console-sso-secret-1"), "the secret is not sent back");
    chrome.shot("sso-field-error").await;
    chrome.fill("#sso-domains", "acme.example").await;
    chrome.fill("#sso-client-secret", "console-sso-secret-1").await;
    chrome.click("#sso-add").await;
    assert!(seen(&chrome, ".notice").await.contains("Added Acme IdP"));
    assert!(chrome.text("#connections").await.contains("acme.example"));
    chrome.shot("sso-connection").await;
    chrome.click("#connections a").await;
    at(&chrome, "/sso/").await;
    chrome.shot("sso-remove-confirm").await;
    chrome.click("#confirm").await;
    seen(&chrome, "#connections-heading").await;
    assert!(chrome.client.source().await.unwrap().contains("No connections yet"));

    // --- Narrow screens: every new page at phone width. ---
    chrome.client.set_window_size(390, 844).await.unwrap();
    for (path, name) in [
        ("/findings", "narrow-findings"),
        ("/suppress-rules?all=1", "narrow-suppress-rules"),
        ("/reports", "narrow-reports"),
        ("/reports/tenant_usage", "narrow-report"),
        ("/mcp-clients", "narrow-mcp-clients"),
        ("/sso", "narrow-sso"),
        ("/ops-issues", "narrow-ops-issues"),
        ("/admin-log?action=ops.", "narrow-admin-log"),
        ("/members", "narrow-members-overrides"),
        ("/workspaces/main", "narrow-workspace"),
        ("/workspaces/main/lifecycle/archive", "narrow-lifecycle-confirm"),
    ] {
        chrome.goto(&format!("{console}{path}"), name).await;
        let out = overflowing(&chrome).await;
        assert!(out.is_empty(), "{path} fits 390px, but these stick out: {out:?}");
    }

    chrome.client.clone().close().await.ok();
    assert_eq!(served.terminate().await, 0);
}
