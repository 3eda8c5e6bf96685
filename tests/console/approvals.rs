//! Approvals end to end (issue 23, item 1): an agent on the official Python MCP SDK makes a
//! write the workspace's policy holds back and is answered `approval_required`; an owner
//! approves it in the console (headless Chromium, every page through the accessibility audit);
//! the agent's retry with the approval runs once at the downstream, and a replay is refused. An
//! agent that declared URL-mode elicitation gets the approval's URL in band (URLElicitationRequired)
//! and its unchanged retry runs once approved.

use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

use crate::{
    chrome::Chrome,
    common::{self, Served, TestDb, cli, gatehouse, python_agent, python_agent_with},
};

/// A loopback HTTP API whose `POST /v1/items` (the write) is recorded.
async fn items_api() -> (String, Arc<Mutex<Vec<Value>>>) {
    use axum::{extract::Request, http::StatusCode, response::IntoResponse};
    let writes: Arc<Mutex<Vec<Value>>> = Default::default();
    let log = writes.clone();
    let app = axum::Router::new().fallback(move |request: Request| {
        let log = log.clone();
        async move {
            let post = request.method() == axum::http::Method::POST && request.uri().path() == "/v1/items";
            let bytes = axum::body::to_bytes(request.into_body(), 1 << 20).await.unwrap_or_default();
            let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
            if !post {
                return StatusCode::NOT_FOUND.into_response();
            }
            log.lock().unwrap().push(body.clone());
            (StatusCode::CREATED, axum::Json(json!({ "created": body }))).into_response()
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}/v1", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (base, writes)
}

/// The one call of an agent run: (isError, its JSON error or result).
fn answer(run: &Value) -> (bool, Value) {
    let call = &run["calls"][0];
    let text = call["text"][0].as_str().unwrap_or("");
    (call["isError"] == true, serde_json::from_str(text).unwrap_or(Value::String(text.to_owned())))
}

#[tokio::test]
async fn a_held_back_write_is_approved_in_the_console_and_the_sdk_agents_retry_runs_once() {
    gatehouse::install_crypto();
    let (base_url, writes) = items_api().await;
    let t = TestDb::new().await;
    cli(&t.url, &["tenant", "create", "acme", "--name", "Acme", "--owner-email", "dana@example.test"]).await;
    cli(&t.url, &["workspace", "create", "--tenant", "acme", "main"]).await;
    let connector = common::json_path(&json!({ "base_url": base_url, "tools": [
        { "name": "create_item", "description": "Create an item", "method": "POST", "path": "/items", "body": ["name"],
          "input_schema": { "type": "object", "additionalProperties": false, "required": ["name"],
                            "properties": { "name": { "type": "string" } } } }] }));
    let add = ["connector", "add", "--tenant", "acme", "--workspace", "main", "--id", "inv", "--kind", "http_api", "--config"];
    cli(&t.url, &[&add[..], &[connector.as_str()]].concat()).await;
    let policy = common::json_path(&json!({ "approvals": [{ "tools": ["inv.create_item"] }] }));
    cli(&t.url, &["workspace", "configure", "--tenant", "acme", "--workspace", "main", "--file", &policy]).await;
    let m = common::provision(&t.url, "acme").await;
    let served = Served::start(gatehouse(Some(&t.url))).await;
    let endpoint = format!("{}/t/acme/w/main/mcp", served.base);
    let call = json!({ "address": "inv.create_item", "args": { "name": "gizmo" } });

    // The agent's write is answered approval_required, with where a person approves it.
    let first = answer(&python_agent(&endpoint, &m, json!([["call_destructive_tool", call]])).await);
    assert!(first.0, "{first:?}");
    assert_eq!(first.1["error"]["code"], "approval_required", "{first:?}");
    let id = first.1["error"]["approval"]["id"].as_str().unwrap().to_owned();
    let url = first.1["error"]["approval"]["url"].as_str().unwrap().to_owned();
    assert_eq!(url, format!("{}/console/t/acme/approvals/{id}", served.base));
    assert!(writes.lock().unwrap().is_empty(), "nothing ran before the approval");

    // The owner finds it in the console's Approvals page and approves it there.
    let chrome = Chrome::start("approvals").await;
    chrome.sign_in(&served.base, "dana").await;
    assert!(chrome.text("nav").await.contains("Approvals"));
    chrome.click("nav a[href$='/approvals']").await;
    chrome.shot("approvals-pending").await;
    let row = chrome.text(&format!("tr[data-approval-id='{id}']")).await;
    assert!(row.contains("inv.create_item") && row.contains(&m.token_id), "{row}");
    chrome.click(&format!("tr[data-approval-id='{id}'] a.review")).await;
    chrome.shot("approval-review").await;
    assert_eq!(chrome.text("#approval-state").await, "pending");
    // A denial without a reason is refused by the form itself (required), so approve.
    chrome.fill("#approve-reason", "ticket 42").await;
    chrome.click("#approve").await;
    let decided = common::eventually(std::time::Duration::from_secs(20), || {
        let client = chrome.client.clone();
        async move {
            match client.find(fantoccini::Locator::Css("#approval-state")).await {
                Ok(e) => e.text().await.is_ok_and(|s| s == "approved"),
                Err(_) => false,
            }
        }
    })
    .await;
    assert!(decided, "the page shows the approval as approved");
    chrome.shot("approval-approved").await;
    assert_eq!(chrome.text("#approval-reason").await, "ticket 42");
    assert!(chrome.client.find(fantoccini::Locator::Css("#approve")).await.is_err(), "a decided approval offers no decision");
    chrome.goto(&format!("{}/console/t/acme/approvals", served.base), "approvals-none-pending").await;
    assert!(chrome.text("main").await.contains("No call is waiting for approval"));

    // The agent retries with the approval: the write runs, once; a replay is refused.
    let mut retry = call.clone();
    retry["approval_id"] = json!(id);
    let ran = answer(&python_agent(&endpoint, &m, json!([["call_destructive_tool", retry.clone()]])).await);
    assert!(!ran.0, "{ran:?}");
    assert_eq!(ran.1["created"]["name"], "gizmo", "{ran:?}");
    let replayed = answer(&python_agent(&endpoint, &m, json!([["call_destructive_tool", retry]])).await);
    assert_eq!(replayed.1["error"]["code"], "approval_used", "{replayed:?}");
    assert_eq!(*writes.lock().unwrap(), vec![json!({ "name": "gizmo" })], "the approved write ran exactly once downstream");
    // In band: an agent that declared URL-mode elicitation is answered URLElicitationRequired
    // (MCP 2025-11-25) carrying the approval's URL; once approved, its retry of the very same
    // call (no approval id: what such a client sends) runs, once.
    let answering = [("GATEHOUSE_ANSWER", "1")];
    let widget = json!({ "address": "inv.create_item", "args": { "name": "widget" } });
    let calls = json!([["call_destructive_tool", widget]]);
    let asked = python_agent_with(&endpoint, &m, None, &answering, calls.clone()).await;
    let error = &asked["calls"][0]["error"];
    assert_eq!(error["code"], -32042, "{asked}");
    let elicitation = &error["data"]["elicitations"][0];
    assert_eq!(elicitation["mode"], "url", "{asked}");
    let id = elicitation["elicitationId"].as_str().unwrap().to_owned();
    assert_eq!(elicitation["url"], format!("{}/console/t/acme/approvals/{id}", served.base));
    assert_eq!(writes.lock().unwrap().len(), 1, "nothing ran before the approval");
    chrome.goto(&format!("{}/console/t/acme/approvals/{id}", served.base), "approval-in-band").await;
    chrome.click("#approve").await;
    let decided = common::eventually(std::time::Duration::from_secs(20), || {
        let client = chrome.client.clone();
        async move {
            match client.find(fantoccini::Locator::Css("#approval-state")).await {
                Ok(e) => e.text().await.is_ok_and(|s| s == "approved"),
                Err(_) => false,
            }
        }
    })
    .await;
    assert!(decided, "approved in the console");
    let retried = answer(&python_agent_with(&endpoint, &m, None, &answering, calls.clone()).await);
    assert!(!retried.0, "{retried:?}");
    assert_eq!(retried.1["created"]["name"], "widget", "{retried:?}");
    // The same call once more is a new request: the approval ran its one call.
    let again = python_agent_with(&endpoint, &m, None, &answering, calls).await;
    let next = again["calls"][0]["error"]["data"]["elicitations"][0]["elicitationId"].as_str().unwrap_or("").to_owned();
    assert!(!next.is_empty() && next != id, "{again}");
    assert_eq!(writes.lock().unwrap().len(), 2, "each approved write ran exactly once downstream");

    let log = common::admin_log_text(&t).await;
    for action in ["approval.request", "approval.approve", "approval.use"] {
        assert!(log.contains(&format!("\"action\":\"{action}\"")), "{action}");
    }
    assert_eq!(served.terminate().await, 0);
}
