//! The JSON API of findings, suppress rules, reports and platform issues: who may call what,
//! 404 across tenants, every mutation admin-logged, refusals writing nothing.

mod common;

use common::{Served, TestDb, admin_log_text, cli, dev_sign_in, gatehouse, http, provision};
use gatehouse::ops::{self, Failure, Recorder, Status};
use reqwest::Method;
use serde_json::{Value, json};
use uuid::Uuid;

async fn get(b: &common::browser::Browser, path: &str) -> (u16, Value) {
    let r = b.client.get(format!("{}{path}", b.base)).send().await.unwrap();
    (r.status().as_u16(), r.json().await.unwrap_or(Value::Null))
}

async fn write(b: &common::browser::Browser, method: Method, path: &str, body: Value) -> (u16, Value) {
    let r = b.write(method, path, body).await;
    (r.status().as_u16(), r.json().await.unwrap_or(Value::Null))
}

fn failure(tenant: Uuid, code: &str) -> Failure {
    Failure {
        operation: "downstream.call",
        stage: "http_api".into(),
        tenant: Some(tenant),
        workspace: None,
        status: Status::TimedOut,
        code: code.into(),
        message: format!("{code} calling the downstream"),
        reference: Some("req-1".into()),
    }
}

#[tokio::test]
async fn findings_rules_reports_and_issues_over_the_api() {
    let t = TestDb::new().await;
    cli(&t.url, &["tenant", "create", "acme", "--name", "Acme", "--owner-email", "alice@example.test"]).await;
    cli(&t.url, &["tenant", "create", "other", "--name", "Other", "--owner-email", "bob@example.test"]).await;
    let machine = provision(&t.url, "acme").await;
    let acme: Uuid = cli(&t.url, &["tenant", "list"])
        .await
        .iter()
        .find(|l| l.starts_with("acme\t"))
        .unwrap()
        .split('\t')
        .nth(2)
        .unwrap()
        .parse()
        .unwrap();
    let (recorder, _w) = Recorder::start(t.db.clone());
    ops::record(&recorder, failure(acme, "timeout"));
    ops::record(&recorder, failure(acme, "unavailable"));
    recorder.flush().await;

    let mut cmd = gatehouse(Some(&t.url));
    cmd.env("GATEHOUSE_PLATFORM_ADMINS", "Root@Example.test, ops@example.test");
    let served = Served::start(cmd).await;
    let alice = dev_sign_in(&served, "alice@example.test").await;
    let bob = dev_sign_in(&served, "bob@example.test").await;
    let root = dev_sign_in(&served, "root@example.test").await;

    // Findings: the tenant's own; another tenant's member gets 404 on every path.
    let (status, list) = get(&alice, "/api/v1/tenants/acme/findings").await;
    assert_eq!(status, 200);
    assert_eq!(list.as_array().unwrap().len(), 2, "{list}");
    let timeout = list.as_array().unwrap().iter().find(|f| f["code"] == "timeout").unwrap()["id"].as_str().unwrap().to_owned();
    assert_eq!(get(&bob, "/api/v1/tenants/acme/findings").await.0, 404);
    let (status, _) = write(&bob, Method::POST, &format!("/api/v1/tenants/other/findings/{timeout}/ack"), json!({})).await;
    assert_eq!(status, 404, "another tenant's finding answers like a missing one");
    assert_eq!(get(&alice, "/api/v1/tenants/acme/findings?status=closed").await.0, 422);
    // A token never manages findings.
    let r = machine.headers(http().get(format!("{}/api/v1/tenants/acme/findings", served.base))).send().await.unwrap();
    assert_eq!(r.status(), 403);

    let (status, acked) = write(&alice, Method::POST, &format!("/api/v1/tenants/acme/findings/{timeout}/ack"), json!({})).await;
    assert_eq!((status, acked["status"].as_str()), (200, Some("acked")));
    let (status, again) = write(&alice, Method::POST, &format!("/api/v1/tenants/acme/findings/{timeout}/ack"), json!({})).await;
    assert_eq!((status, again["code"].as_str()), (409, Some("invalid_transition")));
    let (status, done) =
        write(&alice, Method::POST, &format!("/api/v1/tenants/acme/findings/{timeout}/resolve"), json!({})).await;
    assert_eq!((status, done["status"].as_str()), (200, Some("resolved")));

    // Suppress rules.
    let expires = (chrono::Utc::now() + chrono::Duration::days(30)).to_rfc3339();
    let rule = json!({ "code": "unavailable", "reason": "vendor outage", "expires_at": expires });
    let (status, created) = write(&alice, Method::POST, "/api/v1/tenants/acme/suppress-rules", rule.clone()).await;
    assert_eq!((status, created["suppressed"].as_u64()), (201, Some(1)), "{created}");
    let rule_id = created["rule"]["id"].as_str().unwrap().to_owned();
    let too_late = (chrono::Utc::now() + chrono::Duration::days(91)).to_rfc3339();
    let (status, err) = write(
        &alice,
        Method::POST,
        "/api/v1/tenants/acme/suppress-rules",
        json!({ "code": "x", "reason": "r", "expires_at": too_late }),
    )
    .await;
    assert_eq!((status, err["code"].as_str()), (422, Some("invalid_expiry")));
    let (status, _) = write(&alice, Method::POST, "/api/v1/tenants/acme/suppress-rules", json!({ "reason": "r" })).await;
    assert_eq!(status, 422, "a body without an expiry is refused");
    let (status, rules) = get(&alice, "/api/v1/tenants/acme/suppress-rules").await;
    assert_eq!((status, rules.as_array().unwrap().len()), (200, 1));
    assert_eq!(write(&bob, Method::DELETE, &format!("/api/v1/tenants/other/suppress-rules/{rule_id}"), json!({})).await.0, 404);
    let (status, revoked) =
        write(&alice, Method::DELETE, &format!("/api/v1/tenants/acme/suppress-rules/{rule_id}"), json!({})).await;
    assert_eq!((status, revoked["live"].as_bool()), (200, Some(false)));
    assert!(get(&alice, "/api/v1/tenants/acme/suppress-rules").await.1.as_array().unwrap().is_empty());

    // Reports: the tenant's rows only.
    let (status, reports) = get(&alice, "/api/v1/tenants/acme/reports").await;
    assert_eq!((status, reports.as_array().unwrap().len()), (200, 10));
    let (status, out) = get(&alice, "/api/v1/tenants/acme/reports/tenant_usage").await;
    assert_eq!(status, 200);
    assert_eq!(out["rows"].as_array().unwrap().len(), 1);
    assert_eq!(out["columns"][1], "tenant");
    assert_eq!(out["rows"][0][1], "acme");
    let (status, out) = get(&alice, "/api/v1/tenants/acme/reports/token_inventory").await;
    assert_eq!((status, out["rows"].as_array().unwrap().len()), (200, 2));
    assert!(!out.to_string().contains(&machine.token) && !out.to_string().contains(&machine.client_secret));
    assert_eq!(get(&alice, "/api/v1/tenants/acme/reports/pg_class").await.0, 404);
    assert_eq!(get(&bob, "/api/v1/tenants/acme/reports/tenant_usage").await.0, 404);

    // Platform: only the listed admins.
    assert_eq!(get(&alice, "/api/v1/platform/issues").await.0, 403);
    assert_eq!(http().get(format!("{}/api/v1/platform/issues", served.base)).send().await.unwrap().status(), 401);
    let (status, issues) = get(&root, "/api/v1/platform/issues").await;
    assert_eq!((status, issues.as_array().unwrap().len()), (200, 2));
    let fp = ops::fingerprint("downstream.call", "http_api", "timeout");
    let path = format!("/api/v1/platform/issues/{fp}/verdict");
    let (status, resolved) = write(&root, Method::POST, &path, json!({ "verdict": "resolve", "version": "2.0.1" })).await;
    assert_eq!(
        (status, resolved["status"].as_str(), resolved["resolved_version"].as_str()),
        (200, Some("resolved"), Some("2.0.1"))
    );
    assert_eq!(write(&root, Method::POST, &path, json!({ "verdict": "delete" })).await.0, 422);
    assert_eq!(write(&alice, Method::POST, &path, json!({ "verdict": "ignore" })).await.0, 403);
    let missing = format!("/api/v1/platform/issues/{}/verdict", "0".repeat(64));
    assert_eq!(write(&root, Method::POST, &missing, json!({ "verdict": "ignore" })).await.0, 404);
    let (status, usage) = get(&root, "/api/v1/platform/reports/tenant_usage").await;
    assert_eq!((status, usage["rows"].as_array().unwrap().len()), (200, 2));
    assert_eq!(get(&alice, "/api/v1/platform/reports/tenant_usage").await.0, 403);

    // Every mutation left exactly one admin-log row; the refusals none.
    let log = admin_log_text(&t).await;
    for (action, n) in [
        ("ops.finding.ack", 1),
        ("ops.finding.resolve", 1),
        ("ops.suppress_rule.create", 1),
        ("ops.suppress_rule.revoke", 1),
        ("ops.issue.set_status", 1),
    ] {
        assert_eq!(log.matches(&format!("\"action\":\"{action}\"")).count(), n, "{action}");
    }
    assert!(log.contains("\"actor\":\"platform:"), "the verdict names the platform admin");
}
