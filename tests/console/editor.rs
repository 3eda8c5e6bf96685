//! Editing in the browser (issue 24 item 1, first part): a new operator of a fresh tenant
//! creates a workspace, adds a remote MCP connector to a real downstream (the npm
//! `server-everything`), tests the connection and sees its tools with their read/write labels;
//! a bad slug and a bad URL are refused in place, field by field, writing nothing; two browser
//! sessions edit the same workspace and the second is refused until it has seen the first's
//! change, losing neither; a connector is removed through a confirmation page; a member may
//! not edit. Every page goes through the accessibility audit.

use std::time::Duration;

use fantoccini::Locator;
use serde_json::Value;

use crate::{
    chrome::Chrome,
    common::{self, Everything, Served, TestDb, cli, eventually, gatehouse, http},
};

/// The workspace's bound configuration version and its connector ids (from the CLI).
async fn configuration(t: &TestDb, slug: &str) -> (i32, Vec<String>) {
    let workspaces = cli(&t.url, &["workspace", "list", "--tenant", "acme"]).await;
    let line = workspaces.iter().find(|l| l.starts_with(&format!("{slug}\t"))).expect("the workspace is listed");
    let version = line.split('\t').nth(2).unwrap().parse().unwrap();
    let listed = cli(&t.url, &["connector", "list", "--tenant", "acme", "--workspace", slug]).await;
    let mut ids: Vec<String> = listed.iter().filter_map(|l| l.split('\t').next()).map(str::to_owned).collect();
    ids.sort();
    (version, ids)
}

/// Whether each onboarding step is marked done (the checklist must be there).
async fn steps_done(chrome: &Chrome) -> Vec<bool> {
    let done = chrome
        .client
        .execute("return [...document.querySelectorAll('#onboarding li')].map(li => li.dataset.done === 'true')", vec![])
        .await
        .unwrap();
    serde_json::from_value(done).unwrap()
}

#[tokio::test]
async fn a_new_operator_creates_a_workspace_adds_a_server_tests_it_and_edits_race_safely() {
    gatehouse::install_crypto();
    let t = TestDb::new().await;
    cli(&t.url, &["tenant", "create", "acme", "--name", "Acme", "--owner-email", "erin@example.test"]).await;
    let everything = Everything::start().await;
    let served = Served::start(gatehouse(Some(&t.url))).await;
    let base = served.base.clone();
    let chrome = Chrome::start("editor").await;
    chrome.sign_in(&base, "erin").await;

    // A fresh tenant: the first page says what to do, and offers it.
    assert_eq!(chrome.url().await, format!("{base}/console/t/acme/workspaces"));
    chrome.shot("fresh-tenant").await;
    assert!(chrome.text("#empty").await.contains("Create the first one"));
    assert_eq!(steps_done(&chrome).await, [false, false, false], "a fresh tenant's checklist: nothing done");

    // A bad slug is refused in place, naming its field; nothing is written.
    chrome.fill("#ws-slug", "Not A Slug").await;
    chrome.click("#create-workspace").await;
    let error = chrome.shows("#form-error", "invalid_slug").await;
    chrome.shot("workspace-bad-slug").await;
    assert!(chrome.text("#field-errors").await.contains("slug"), "{error}");
    assert_eq!(chrome.client.find(Locator::Css("#ws-slug")).await.unwrap().prop("value").await.unwrap().unwrap(), "Not A Slug");
    let none: Vec<String> = cli(&t.url, &["workspace", "list", "--tenant", "acme"]).await;
    assert!(none.iter().all(|l| !l.contains("not")), "a refusal writes nothing: {none:?}");

    // Create it.
    chrome.fill("#ws-slug", "main").await;
    chrome.fill("#ws-name", "Main").await;
    chrome.click("#create-workspace").await;
    chrome.shows(".notice", "Workspace created").await;
    chrome.shot("workspace-created").await;
    assert!(chrome.url().await.starts_with(&format!("{base}/console/t/acme/workspaces/main")));
    assert_eq!(configuration(&t, "main").await, (1, vec![]));

    // A connector with a bad URL: the API's field error, shown by field; nothing written.
    chrome.fill("#c-id", "everything").await;
    chrome.fill("#c-url", "not a url").await;
    chrome.click("#add-connector-submit").await;
    chrome.shows("#form-error", "invalid_config").await;
    chrome.shot("connector-bad-url").await;
    let fields: Value = chrome
        .client
        .execute("return [...document.querySelectorAll('#field-errors li')].map(li => li.dataset.field)", vec![])
        .await
        .unwrap();
    assert!(fields.as_array().unwrap().iter().any(|f| f.as_str().is_some_and(|f| f.ends_with("url"))), "{fields}");
    assert_eq!(configuration(&t, "main").await, (1, vec![]), "a refusal writes nothing");
    // The form keeps what was typed; fix the URL and add it.
    assert_eq!(chrome.client.find(Locator::Css("#c-id")).await.unwrap().prop("value").await.unwrap().unwrap(), "everything");
    chrome.fill("#c-url", &everything.url).await;
    chrome.click("#add-connector-submit").await;
    chrome.shows(".notice", "Connector everything added (configuration version 2)").await;
    chrome.shot("connector-added").await;
    assert_eq!(configuration(&t, "main").await, (2, vec!["everything".to_owned()]));

    // Test the connection: the catalog is fetched and its tools show with their labels.
    chrome.click("#test-connection-everything").await;
    let notice = chrome.shows(".notice", "its catalog lists").await;
    chrome.shot("connection-tested").await;
    let tools = chrome.text("section[aria-labelledby='connector-everything'] table").await;
    assert!(tools.contains("echo") && (tools.contains("read") || tools.contains("write")), "{notice}\n{tools}");

    // Onboarding: the connector step is done; create the credentials (each secret shown once).
    chrome.goto(&format!("{base}/console/t/acme/workspaces"), "checklist-connector-done").await;
    assert_eq!(steps_done(&chrome).await, [true, false, false]);
    chrome.click("#step-2-link").await;
    chrome.shows("h1", "Access tokens").await;
    chrome.fill("#token-name", "first agent").await;
    chrome.click("#create-token").await;
    let token = chrome.shows("#new-secret", "gth_").await;
    chrome.shot("onboarding-token").await;
    chrome.goto(&format!("{base}/console/t/acme/workspaces"), "checklist-token-only").await;
    assert_eq!(steps_done(&chrome).await, [true, false, false], "a token alone is not a client's credentials");
    chrome.click("#step-2-credential-link").await;
    chrome.fill("#credential-name", "first agent").await;
    chrome.click("#create-credential").await;
    let client_id = chrome.shows("#new-client-id", "gsc_").await;
    let client_secret = chrome.text("#new-secret").await;
    chrome.shot("onboarding-credential").await;
    chrome.goto(&format!("{base}/console/t/acme/workspaces"), "checklist-credentials-done").await;
    assert_eq!(steps_done(&chrome).await, [true, true, false]);

    // Copy the Python program from "Client setup" and run it as it is, with the three values in
    // its environment: the official SDK connects and lists the workspace's tools.
    chrome.click("#step-3-link").await;
    let program = chrome.shows("#python-main", "streamable_http_client").await;
    chrome.shot("setup-python").await;
    let file = std::env::temp_dir().join(format!("gatehouse-setup-{}.py", uuid::Uuid::new_v4()));
    std::fs::write(&file, &program).unwrap();
    let out = common::python3()
        .arg(&file)
        .env("GATEHOUSE_CLIENT_ID", &client_id)
        .env("GATEHOUSE_CLIENT_SECRET", &client_secret)
        .env("GATEHOUSE_TOKEN", &token)
        .output()
        .await
        .unwrap();
    let listed = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{listed}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(listed.lines().any(|l| l == "call_tool"), "{listed}");
    // The same program, still unchanged, calls a tool named on its command line.
    let out = common::python3()
        .arg(&file)
        .arg("call_tool")
        .arg(r#"{"address": "everything.echo", "args": {"message": "from the copied program"}}"#)
        .env("GATEHOUSE_CLIENT_ID", &client_id)
        .env("GATEHOUSE_CLIENT_SECRET", &client_secret)
        .env("GATEHOUSE_TOKEN", &token)
        .output()
        .await
        .unwrap();
    std::fs::remove_file(&file).ok();
    let called = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{called}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(called.contains("from the copied program"), "{called}");
    // The copied `mcpServers` configuration's URL, with those credentials, calls a tool through
    // the SDK agent; the dashboard shows the call.
    let config: Value = serde_json::from_str(&chrome.text("#config-main").await).unwrap();
    let url = config["mcpServers"]["gatehouse-main"]["url"].as_str().unwrap().to_owned();
    let machine = common::Machine { client_id, client_secret, token, token_id: String::new() };
    let run = common::python_agent(
        &url,
        &machine,
        serde_json::json!([["call_tool", { "address": "everything.echo", "args": { "message": "first call" } }]]),
    )
    .await;
    assert_ne!(run["calls"][0]["isError"], true, "{run}");
    let on_dashboard = eventually(Duration::from_secs(20), || {
        let (client, url) = (chrome.client.clone(), format!("{base}/console/t/acme/dashboard?range=1h&workspace=main"));
        async move {
            client.goto(&url).await.unwrap();
            client.find(Locator::Css("#chart-tools rect[data-label=echo][data-series=calls]")).await.is_ok()
        }
    })
    .await;
    assert!(on_dashboard, "the dashboard shows the SDK client's call");
    chrome.shot("dashboard-first-call").await;
    // Both credentials used: the checklist is done and goes away.
    let gone = eventually(Duration::from_secs(20), || {
        let (client, url) = (chrome.client.clone(), format!("{base}/console/t/acme/workspaces"));
        async move {
            client.goto(&url).await.unwrap();
            client.find(Locator::Css("#onboarding")).await.is_err()
        }
    })
    .await;
    assert!(gone, "the checklist is gone once every step is done");
    chrome.shot("checklist-done").await;

    // Two sessions open the same workspace (version 2). The first adds a connector; the
    // second's edit, made against version 2, is refused and writes nothing; its page then
    // shows the first's connector and its own values, and its second submit lands.
    let other = Chrome::start("editor-second").await;
    other.sign_in(&base, "erin").await;
    other.goto(&format!("{base}/console/t/acme/workspaces/main"), "second-session-open").await;
    chrome.goto(&format!("{base}/console/t/acme/workspaces/main"), "first-session-open").await;
    chrome.fill("#c-id", "alpha").await;
    chrome.fill("#c-url", &everything.url).await;
    chrome.click("#add-connector-submit").await;
    chrome.shows(".notice", "Connector alpha added (configuration version 3)").await;
    other.fill("#c-id", "beta").await;
    other.fill("#c-url", &everything.url).await;
    other.click("#add-connector-submit").await;
    let refused = other.shows("#form-error", "binding_changed").await;
    other.shot("second-session-refused").await;
    assert!(refused.contains("changed since you opened"), "{refused}");
    assert_eq!(configuration(&t, "main").await, (3, vec!["alpha".to_owned(), "everything".to_owned()]), "nothing lost");
    assert!(other.text("#connector-alpha").await.contains("alpha"), "the refused page shows the current configuration");
    assert_eq!(other.client.find(Locator::Css("#c-id")).await.unwrap().prop("value").await.unwrap().unwrap(), "beta");
    other.click("#add-connector-submit").await;
    other.shows(".notice", "Connector beta added (configuration version 4)").await;
    assert_eq!(configuration(&t, "main").await, (4, vec!["alpha".to_owned(), "beta".to_owned(), "everything".to_owned()]));
    other.client.clone().close().await.ok();

    // Remove one through its confirmation page.
    chrome.goto(&format!("{base}/console/t/acme/workspaces/main"), "before-remove").await;
    chrome.click("#remove-connector-alpha").await;
    chrome.shows("#question", "Remove the connector alpha").await;
    chrome.shot("remove-confirm").await;
    chrome.click("#confirm").await;
    chrome.shows(".notice", "Connector removed").await;
    chrome.shot("removed").await;
    assert_eq!(configuration(&t, "main").await, (5, vec!["beta".to_owned(), "everything".to_owned()]));

    // Every edit is in the admin log.
    let log = common::admin_log_text(&t).await;
    for action in ["workspace.create", "connector.add", "connector.remove"] {
        assert!(log.contains(&format!("\"action\":\"{action}\"")), "{action}");
    }

    // A member sees no edit forms, and the routes refuse them (with a valid CSRF token).
    chrome.goto(&format!("{base}/console/t/acme/members"), "members").await;
    chrome.fill("#invite-email", "finn@example.test").await;
    chrome.click("#invite").await;
    chrome.shows(".notice", "Invited finn@example.test as member").await;
    chrome.client.delete_all_cookies().await.unwrap();
    chrome.sign_in(&base, "finn").await;
    chrome.goto(&format!("{base}/console/t/acme/workspaces/main"), "member-workspace").await;
    assert!(chrome.client.find(Locator::Css("#add-connector")).await.is_err(), "no add form for a member");
    let finn = chrome.session_cookie().await;
    let page = http()
        .get(format!("{base}/console/t/acme/workspaces/main"))
        .header("cookie", &finn)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let csrf = common::browser::csrf_field(&page).expect("the page has a form");
    for (path, form) in [
        ("/console/t/acme/workspaces/main/connectors/beta/remove", vec![("csrf_token", csrf.as_str())]),
        ("/console/t/acme/workspaces", vec![("csrf_token", csrf.as_str()), ("slug", "sneaky")]),
        (
            "/console/t/acme/workspaces/main/connectors",
            vec![("csrf_token", csrf.as_str()), ("id", "sneaky"), ("kind", "remote_mcp"), ("url", everything.url.as_str())],
        ),
    ] {
        let r = http()
            .post(format!("{base}{path}"))
            .header("cookie", &finn)
            .header("origin", &base)
            .form(&form)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 403, "{path}");
        let body = r.text().await.unwrap();
        assert!(body.contains("permission_denied"), "{path}: {body}");
    }
    assert_eq!(
        configuration(&t, "main").await,
        (5, vec!["beta".to_owned(), "everything".to_owned()]),
        "the refusals wrote nothing"
    );
    assert_eq!(cli(&t.url, &["workspace", "list", "--tenant", "acme"]).await.len(), 1);
    chrome.client.clone().close().await.ok();
    assert_eq!(served.terminate().await, 0);
}

/// Every console page (the list the permission test walks) photographed at 1280 px and at
/// 390 px, in a light and in a dark colour scheme (issue 24 items 4 and the screenshots):
/// each passes the accessibility audit, contrast included, none scrolls sideways, and the
/// dark stylesheet applies exactly when the browser prefers it.
#[tokio::test]
async fn every_console_page_at_both_widths_in_light_and_dark_passes_the_audit() {
    gatehouse::install_crypto();
    let t = TestDb::new().await;
    cli(&t.url, &["tenant", "create", "acme", "--name", "Acme", "--owner-email", "erin@example.test"]).await;
    cli(&t.url, &["workspace", "create", "--tenant", "acme", "main"]).await;
    common::add_remote_mcp(&t.url, "acme", "main", "everything", "http://127.0.0.1:9/mcp").await;
    let mut cmd = gatehouse(Some(&t.url));
    cmd.env("GATEHOUSE_PLATFORM_ADMINS", "erin@example.test");
    let served = Served::start(cmd).await;
    let base = served.base.clone();
    let (_, _, pages) = crate::permissions::seed(&base).await;
    for (scheme, switches) in [("light", &[][..]), ("dark", &["--force-dark-mode"][..])] {
        let chrome = Chrome::start_with(scheme, switches).await;
        chrome.sign_in(&base, "erin").await;
        let dark = chrome.client.execute("return matchMedia('(prefers-color-scheme: dark)').matches", vec![]).await.unwrap();
        assert_eq!(dark, Value::Bool(scheme == "dark"), "the browser's colour scheme");
        for (width, height) in [(1280, 900), (390, 844)] {
            chrome.client.set_window_size(width, height).await.unwrap();
            for (page, _) in &pages {
                chrome.goto(&format!("{base}/console/t/acme/{page}"), &format!("{}-{width}", page.replace('/', "-"))).await;
                let title = chrome.text("h1").await;
                assert!(!title.starts_with("Error"), "{page}: {title}");
                let background =
                    chrome.client.execute("return getComputedStyle(document.body).backgroundColor", vec![]).await.unwrap();
                let is_dark = background == Value::String("rgb(18, 18, 18)".into());
                assert_eq!(is_dark, scheme == "dark", "{page}: the {scheme} stylesheet applies ({background})");
                let fits = chrome
                    .client
                    .execute("return document.documentElement.scrollWidth <= window.innerWidth + 1", vec![])
                    .await
                    .unwrap();
                assert_eq!(fits, Value::Bool(true), "{page} at {width}px: no horizontal scrolling of the page");
            }
        }
        chrome.client.clone().close().await.ok();
    }
    assert_eq!(served.terminate().await, 0);
}

/// The HTTP API tool editor (issue 24 item 1): a tool with a malformed path template is
/// refused, naming the field as the API does, and nothing is written; fixed, the connector is
/// added, its tool shows as a read, and an agent on the official SDK calls it.
#[tokio::test]
async fn an_http_api_connector_is_made_in_the_tool_editor_after_a_field_error() {
    gatehouse::install_crypto();
    let app = axum::Router::new().route(
        "/v1/items/{id}",
        axum::routing::get(|axum::extract::Path(id): axum::extract::Path<String>| async move {
            axum::Json(serde_json::json!({ "id": id, "name": "gizmo" }))
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let api = format!("http://{}/v1", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let t = TestDb::new().await;
    cli(&t.url, &["tenant", "create", "acme", "--name", "Acme", "--owner-email", "erin@example.test"]).await;
    cli(&t.url, &["workspace", "create", "--tenant", "acme", "main"]).await;
    let machine = common::provision(&t.url, "acme").await;
    let served = Served::start(gatehouse(Some(&t.url))).await;
    let base = served.base.clone();
    let chrome = Chrome::start("tool-editor").await;
    chrome.sign_in(&base, "erin").await;
    chrome.goto(&format!("{base}/console/t/acme/workspaces/main"), "tool-editor-empty").await;
    chrome.fill("#c-id", "inventory").await;
    chrome.click("#c-kind-http").await;
    chrome.fill("#c-base-url", &api).await;
    chrome.fill("#t0-name", "get_item").await;
    chrome.fill("#t0-description", "Read one item").await;
    chrome.fill("#t0-path", "/items/{id").await;
    chrome
        .fill(
            "#t0-schema",
            r#"{"type":"object","properties":{"id":{"type":"string"}},"required":["id"],"additionalProperties":false}"#,
        )
        .await;
    chrome.click("#t0-read-only").await;
    chrome.click("#add-connector-submit").await;
    chrome.shows("#form-error", "invalid_config").await;
    chrome.shot("tool-editor-field-error").await;
    let fields = chrome.text("#field-errors").await;
    assert!(fields.contains("connectors.inventory.tools.get_item.path"), "{fields}");
    assert_eq!(configuration(&t, "main").await, (1, vec![]), "a refusal writes nothing");
    // The form kept every row's values; fix the path.
    assert!(chrome.client.find(Locator::Css("#t0-read-only")).await.unwrap().is_selected().await.unwrap());
    assert!(chrome.client.find(Locator::Css("#c-kind-http")).await.unwrap().is_selected().await.unwrap());
    chrome.fill("#t0-path", "/items/{id}").await;
    chrome.click("#add-connector-submit").await;
    chrome.shows(".notice", "Connector inventory added (configuration version 2)").await;
    chrome.click("#test-connection-inventory").await;
    chrome.shows(".notice", "its catalog lists 1 tools").await;
    chrome.shot("tool-editor-added").await;
    let tools = chrome.text("section[aria-labelledby='connector-inventory'] table").await;
    assert!(tools.contains("get_item") && tools.contains("read"), "{tools}");
    assert_eq!(configuration(&t, "main").await, (2, vec!["inventory".to_owned()]));
    let run = common::python_agent(
        &format!("{base}/t/acme/w/main/mcp"),
        &machine,
        serde_json::json!([["call_tool", { "address": "inventory.get_item", "args": { "id": "42" } }]]),
    )
    .await;
    let text = run["calls"][0]["text"][0].as_str().unwrap_or("");
    assert!(run["calls"][0]["isError"] != true && text.contains("gizmo") && text.contains("42"), "{run}");
    chrome.client.clone().close().await.ok();
    assert_eq!(served.terminate().await, 0);
}
