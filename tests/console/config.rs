//! The rest of issue 24 item 1 in headless Chromium: an operator edits a connector in place,
//! the workspace's policy sections (grants, pools, read/write overrides), runs a blueprint
//! (create, version, admit, reject, bind) and copies the workspace (fork, pin, extend, export
//! a snapshot, restore it). Each refusal is shown beside its form with the API's code and
//! writes nothing; an edit made elsewhere meanwhile is refused, keeping the person's text,
//! and nothing is lost. Every page is photographed and audited.

use reqwest::Method;
use serde_json::{Value, json};

use crate::{
    chrome::Chrome,
    common::{self, Everything, Served, TestDb, add_remote_mcp, cli, dev_sign_in_at, gatehouse},
};

/// The workspace's configuration as the API answers it: (bound version, document).
async fn config(api: &common::browser::Browser, ws: &str) -> (i64, Value) {
    let r = api.client.get(format!("{}/api/v1/tenants/acme/workspaces/{ws}", api.base)).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let bound: Value = r.json().await.unwrap();
    (bound["workspace"]["bound_version"].as_i64().unwrap(), bound["document"].clone())
}

async fn versions(api: &common::browser::Browser, blueprint: &str) -> Vec<(i64, String)> {
    let r = api.client.get(format!("{}/api/v1/tenants/acme/blueprints/{blueprint}", api.base)).send().await.unwrap();
    let shown: Value = r.json().await.unwrap();
    shown["versions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| (v["version"].as_i64().unwrap(), v["admission"].as_str().unwrap().to_owned()))
        .collect()
}

#[tokio::test]
async fn an_operator_edits_a_connector_and_the_policy_runs_a_blueprint_and_copies_the_workspace() {
    gatehouse::install_crypto();
    let t = TestDb::new().await;
    cli(&t.url, &["tenant", "create", "acme", "--name", "Acme", "--owner-email", "erin@example.test"]).await;
    cli(&t.url, &["workspace", "create", "--tenant", "acme", "main"]).await;
    let everything = Everything::start().await;
    add_remote_mcp(&t.url, "acme", "main", "everything", &everything.url).await;
    let snapshots = std::env::temp_dir().join(format!("gatehouse-console-snapshots-{}", uuid::Uuid::new_v4()));
    let mut cmd = gatehouse(Some(&t.url));
    cmd.env("GATEHOUSE_VAULT_KEYS", common::vault_key("k1")).env("GATEHOUSE_SNAPSHOT_DIR", &snapshots);
    let served = Served::start(cmd).await;
    let base = served.base.clone();
    let api = dev_sign_in_at(&base, "erin@example.test").await;
    let chrome = Chrome::start("config").await;
    chrome.sign_in(&base, "erin").await;

    // Edit the connector in place: bad JSON and a bad field are refused, naming the field, and
    // write nothing; a good edit is the next configuration version.
    chrome.goto(&format!("{base}/console/t/acme/workspaces/main"), "config-workspace").await;
    chrome.click("#edit-connector-everything").await;
    let shown = chrome.shows("#connector-config", "remote_mcp").await;
    chrome.shot("connector-edit").await;
    assert!(shown.contains(&everything.url), "{shown}");
    chrome.fill("#connector-config", "{ not json").await;
    chrome.click("#save-connector").await;
    chrome.shows("#form-error", "invalid_config").await;
    assert!(chrome.text("#field-errors").await.contains("config"));
    let good = json!({ "kind": "remote_mcp", "url": everything.url, "auth": { "type": "none" }, "timeout_ms": 5000 });
    let mut bad = good.clone();
    bad["timeout_ms"] = json!("soon");
    chrome.fill("#connector-config", &bad.to_string()).await;
    chrome.click("#save-connector").await;
    chrome.shows("#form-error", "invalid_config").await;
    chrome.shot("connector-edit-refused").await;
    assert_eq!(
        chrome.client.find(fantoccini::Locator::Css("#connector-config")).await.unwrap().prop("value").await.unwrap().unwrap(),
        bad.to_string(),
        "the text typed is kept"
    );
    assert_eq!(config(&api, "main").await.0, 2, "the refusals wrote nothing");
    chrome.fill("#connector-config", &good.to_string()).await;
    chrome.click("#save-connector").await;
    chrome.shows(".notice", "Connector everything saved (configuration version 3)").await;
    let (version, document) = config(&api, "main").await;
    assert_eq!((version, &document["connectors"]["everything"]), (3, &good));

    // Policy: a grant naming no such role is refused by field; a good one is saved.
    chrome.click("#policy-link").await;
    chrome.shows("#policy-version", "3").await;
    chrome.shot("policy").await;
    chrome.fill("#value-grants", r#"[{"to": "role:nobody", "tools": ["everything"]}]"#).await;
    chrome.click("#save-grants").await;
    chrome.shows("#form-error", "invalid_config").await;
    chrome.shot("policy-refused").await;
    assert!(chrome.text("#field-errors").await.contains("grants"));
    assert_eq!(config(&api, "main").await.0, 3, "the refusal wrote nothing");
    let grants = json!([{ "to": "role:member", "tools": ["everything.echo"] }, { "to": "machines", "tools": ["everything"] }]);
    chrome.fill("#value-grants", &grants.to_string()).await;
    chrome.click("#save-grants").await;
    chrome.shows("#notice", "Grants saved").await;
    let (version, document) = config(&api, "main").await;
    assert_eq!((version, &document["grants"]), (4, &grants));

    // Someone else saves a pool meanwhile: this page's override edit (made against version 4)
    // is refused and keeps its text; the page shows the pool; saved again, both are kept.
    let pools = json!({ "support": { "tools": ["everything.echo"], "native": false } });
    let r = api
        .write(Method::PATCH, "/api/v1/tenants/acme/workspaces/main/config", json!({ "expected_version": 4, "pools": pools }))
        .await;
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    let overrides = json!({ "everything.echo": "read" });
    chrome.fill("#value-classification", &overrides.to_string()).await;
    chrome.click("#save-classification").await;
    let refused = chrome.shows("#form-error", "binding_changed").await;
    chrome.shot("policy-changed-meanwhile").await;
    assert!(refused.contains("changed since you opened"), "{refused}");
    assert!(chrome.text("#value-pools").await.contains("support"), "the page shows the pool saved meanwhile");
    assert_eq!(config(&api, "main").await.0, 5, "the refused edit wrote nothing");
    chrome.click("#save-classification").await;
    chrome.shows("#notice", "overrides saved").await;
    let (version, document) = config(&api, "main").await;
    assert_eq!((version, &document["pools"], &document["classification"], &document["grants"]), (6, &pools, &overrides, &grants));

    // Blueprints: a bad slug is refused; create one, start a version from the workspace,
    // admit it with a reason, reject a second, and bind the first to the workspace.
    chrome.goto(&format!("{base}/console/t/acme/blueprints"), "blueprints-empty").await;
    chrome.fill("#bp-slug", "Not A Slug").await;
    chrome.click("#create-blueprint-button").await;
    chrome.shows("#form-error", "invalid_slug").await;
    chrome.fill("#bp-slug", "base").await;
    chrome.fill("#bp-name", "Base").await;
    chrome.click("#create-blueprint-button").await;
    chrome.shows("#notice", "Blueprint created").await;
    chrome.shot("blueprint-created").await;
    chrome.select("#from", "main").await;
    chrome.click("#start-from").await;
    chrome.shows("#document", "support").await;
    chrome.click("#add-version-button").await;
    chrome.shows("#admission-1", "pending").await;
    chrome.fill("#reason-1", "reviewed by erin").await;
    chrome.click("#admit-1").await;
    chrome.shows("#admission-1", "admitted").await;
    chrome.click("#add-version-button").await;
    chrome.shows("#admission-2", "pending").await;
    chrome.click("#reject-2").await;
    chrome.shows("#admission-2", "rejected").await;
    chrome.shot("blueprint-versions").await;
    // A version added elsewhere meanwhile: this page's addition is refused and keeps its text.
    let latest = &config(&api, "main").await.1;
    let r = api
        .write(Method::POST, "/api/v1/tenants/acme/blueprints/base/versions", json!({ "document": latest, "expected_latest": 2 }))
        .await;
    assert_eq!(r.status(), 201);
    chrome.click("#add-version-button").await;
    chrome.shows("#form-error", "blueprint_changed").await;
    chrome.shot("blueprint-changed-meanwhile").await;
    assert_eq!(
        versions(&api, "base").await,
        [(1, "admitted".to_owned()), (2, "rejected".to_owned()), (3, "pending".to_owned())],
        "nothing added by the refused form"
    );
    // Bind version 1 to the workspace (at its current version 6): its configuration is the
    // blueprint's, as version 7.
    chrome.select("#bind-1", "main@6").await;
    chrome.click("#bind-button-1").await;
    chrome.shows(".notice", "Workspace bound").await;
    chrome.shot("workspace-bound").await;
    assert_eq!(config(&api, "main").await, (7, document.clone()));

    // Copies: fork into a preview, pin, unpin and extend it; export a snapshot and restore it.
    chrome.goto(&format!("{base}/console/t/acme/workspaces/main/copies"), "copies").await;
    chrome.fill("#fork-slug", "preview").await;
    chrome.fill("#fork-ttl", "24").await;
    chrome.click("#fork").await;
    chrome.shows("#fork-state", "Forked from main").await;
    chrome.shot("fork-created").await;
    chrome.click("#pin").await;
    chrome.shows("#fork-state", "Pinned").await;
    chrome.click("#unpin").await;
    chrome.shows("#fork-state", "Expires").await;
    chrome.fill("#extend-hours", "48").await;
    chrome.click("#extend").await;
    chrome.shows("#notice", "extended").await;
    assert_eq!(config(&api, "preview").await.1, document, "the fork runs the same configuration");
    chrome.goto(&format!("{base}/console/t/acme/workspaces/main/copies"), "copies-main").await;
    chrome.click("#export-snapshot").await;
    let exported = chrome.shows("#notice", "Snapshot exported to").await;
    chrome.shot("snapshot-exported").await;
    assert!(chrome.text("#exports").await.contains(".snap"), "{exported}");
    chrome.fill("#restore-slug", "restored").await;
    chrome.click("#restore").await;
    chrome.shows(".notice", "Snapshot restored").await;
    chrome.shot("snapshot-restored").await;
    assert_eq!(config(&api, "restored").await.1, document, "the restored workspace runs the same configuration");
    // Restoring into a slug that is taken is refused beside the form.
    chrome.goto(&format!("{base}/console/t/acme/workspaces/main/copies"), "copies-again").await;
    chrome.fill("#restore-slug", "restored").await;
    chrome.click("#restore").await;
    chrome.shows("#form-error", "slug_taken").await;
    chrome.shot("snapshot-restore-refused").await;
    let listed = cli(&t.url, &["workspace", "list", "--tenant", "acme"]).await;
    assert_eq!(listed.len(), 3, "main, preview and restored: {listed:?}");

    // Read/write overrides from the tools table: echo made a write, and back to the server's
    // say for a tool that had none; the rest of the classification stays.
    chrome.goto(&format!("{base}/console/t/acme/workspaces/main"), "before-overrides").await;
    chrome.click("#test-connection-everything").await;
    chrome.shows(".notice", "its catalog lists").await;
    let (version, _) = config(&api, "main").await;
    chrome.select("#class-everything-echo", "write").await;
    chrome.click("#save-classes-everything").await;
    chrome.shows(".notice", &format!("Read/write overrides of everything saved (configuration version {})", version + 1)).await;
    chrome.shot("overrides-saved").await;
    assert_eq!(config(&api, "main").await.1["classification"], json!({ "everything.echo": "write" }));
    let row = chrome.text("section[aria-labelledby='connector-everything'] table").await;
    assert!(row.lines().any(|l| l.starts_with("echo") && l.contains("write")), "{row}");

    // A connector with an OAuth grant from the add form's fields: the rest is discovered.
    chrome.fill("#c-id", "crm").await;
    chrome.fill("#c-url", &everything.url).await;
    chrome.select("#c-auth", "oauth_shared").await;
    chrome.fill("#c-oauth-scopes", "openid email").await;
    chrome.click("#add-connector-submit").await;
    chrome.shows(".notice", "Connector crm added").await;
    chrome.shot("oauth-connector-added").await;
    assert_eq!(
        config(&api, "main").await.1["connectors"]["crm"]["auth"],
        json!({ "type": "oauth", "grant": "shared", "scopes": ["openid", "email"] })
    );
    assert!(chrome.text("#grant-crm").await.contains("OAuth (shared grant)"));

    // Quotas: a limit without a budget is refused by field; one is added, edited, refused
    // when changed meanwhile (keeping the form), and removed through its confirmation page.
    chrome.goto(&format!("{base}/console/t/acme/quotas"), "quotas-empty").await;
    chrome.fill("#q-name", "writes").await;
    chrome.click("#save-limit").await;
    chrome.shows("#form-error", "quota_without_budget").await;
    chrome.shot("quota-refused").await;
    chrome.select("#q-class", "write").await;
    chrome.fill("#q-requests", "10").await;
    chrome.fill("#q-window", "60").await;
    chrome.click("#save-limit").await;
    chrome.shows("#notice", "Limit added").await;
    let limits = |api: common::browser::Browser| async move {
        let r = api.client.get(format!("{}/api/v1/tenants/acme/quotas", api.base)).send().await.unwrap();
        r.json::<Value>().await.unwrap()
    };
    let listed = limits(api.clone()).await;
    assert_eq!(
        (listed[0]["name"].as_str(), listed[0]["class"].as_str(), listed[0]["requests"].as_i64()),
        (Some("writes"), Some("write"), Some(10))
    );
    let id = listed[0]["id"].as_str().unwrap().to_owned();
    chrome.click("#limit-writes a").await;
    chrome.shows("#limit-form-heading", "Edit writes").await;
    chrome.shot("quota-edit").await;
    chrome.fill("#q-daily", "500").await;
    chrome.click("#save-limit").await;
    chrome.shows("#notice", "Limit saved").await;
    assert_eq!(limits(api.clone()).await[0]["daily"].as_i64(), Some(500));
    // Changed elsewhere between this page's load and its submit: refused, nothing written.
    chrome.click("#limit-writes a").await;
    let version = limits(api.clone()).await[0]["version"].as_i64().unwrap();
    let r = api
        .write(
            Method::PUT,
            &format!("/api/v1/tenants/acme/quotas/{id}"),
            json!({ "name": "writes", "per": "tenant", "class": "write", "requests": 20, "window_seconds": 60, "daily": 500, "version": version }),
        )
        .await;
    assert_eq!(r.status(), 200);
    chrome.fill("#q-concurrency", "4").await;
    chrome.click("#save-limit").await;
    chrome.shows("#form-error", "quota_changed").await;
    chrome.shot("quota-changed-meanwhile").await;
    let now = &limits(api.clone()).await[0];
    assert_eq!((now["requests"].as_i64(), now["concurrency"].as_i64()), (Some(20), None), "the refused edit wrote nothing");
    chrome.goto(&format!("{base}/console/t/acme/quotas/{id}/remove"), "quota-remove-confirm").await;
    chrome.click("#confirm").await;
    chrome.shows("#notice", "Limit removed").await;
    assert_eq!(limits(api.clone()).await, json!([]));

    // Every change is in the admin log.
    let log = common::admin_log_text(&t).await;
    for action in [
        "connector.replace",
        "workspace.configure",
        "blueprint.create",
        "blueprint.version",
        "blueprint.admit",
        "blueprint.reject",
        "workspace.bind",
        "fork.pin",
        "fork.extend",
        "snapshot.export",
        "snapshot.restore",
        "quota.create",
        "quota.update",
        "quota.delete",
    ] {
        assert!(log.contains(&format!("\"action\":\"{action}\"")), "{action}");
    }
    chrome.client.clone().close().await.ok();
    assert_eq!(served.terminate().await, 0);
    std::fs::remove_dir_all(&snapshots).ok();
}
