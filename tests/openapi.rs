//! The OpenAPI document (issue 25 §1) as a running server serves it: public, OpenAPI 3.1,
//! valid for `openapi-spec-validator`, and true to the server's routes: every documented
//! path answers its documented methods, and a method it does not document is refused with
//! 405 and an `Allow` header that lists exactly the documented ones.

mod common;

use std::collections::BTreeSet;

use common::{Served, TestDb, cli, gatehouse, http, python3};

#[tokio::test]
async fn the_served_document_is_valid_openapi_3_1_and_matches_the_routes() {
    let t = TestDb::new().await;
    cli(&t.url, &["tenant", "create", "acme", "--name", "Acme"]).await;
    let served = Served::start(gatehouse(Some(&t.url))).await;
    let client = http();

    // Public: no credential at all.
    let r = client.get(format!("{}/api/v1/openapi.json", served.base)).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert!(r.headers()["content-type"].to_str().unwrap().starts_with("application/json"));
    let text = r.text().await.unwrap();
    let doc: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert!(doc["openapi"].as_str().unwrap().starts_with("3.1."), "{}", doc["openapi"]);

    // Structural validation by the reference validator (OpenAPI 3.1 and its JSON Schema dialect).
    let file = std::env::temp_dir().join(format!("gatehouse-openapi-{}.json", uuid::Uuid::new_v4().simple()));
    std::fs::write(&file, &text).unwrap();
    let out = python3()
        .args(["-c", "import sys; from openapi_spec_validator import validate; from openapi_spec_validator.readers import read_from_filename; d, _ = read_from_filename(sys.argv[1]); validate(d); print('valid')"])
        .arg(&file)
        .output()
        .await
        .unwrap();
    let _ = std::fs::remove_file(&file);
    assert!(out.status.success(), "openapi-spec-validator: {}", String::from_utf8_lossy(&out.stderr));

    // The validator itself refuses a broken document (so the check above can fail).
    let mut broken = doc.clone();
    broken["paths"]["/api/v1/me"]["get"]["responses"] = serde_json::json!("none");
    let bad = std::env::temp_dir().join(format!("gatehouse-openapi-bad-{}.json", uuid::Uuid::new_v4().simple()));
    std::fs::write(&bad, broken.to_string()).unwrap();
    let out = python3()
        .args(["-c", "import sys; from openapi_spec_validator import validate; from openapi_spec_validator.readers import read_from_filename; d, _ = read_from_filename(sys.argv[1]); validate(d)"])
        .arg(&bad)
        .output()
        .await
        .unwrap();
    let _ = std::fs::remove_file(&bad);
    assert!(!out.status.success(), "a broken document is refused");

    // Every documented path, on the running server: TRACE is never routed, so the answer is
    // 405 with the methods the router holds for that path — exactly the documented ones.
    let paths = doc["paths"].as_object().unwrap();
    assert!(paths.len() > 50, "{}", paths.len());
    for (path, item) in paths {
        let concrete = path.split('/').map(|s| if s.starts_with('{') { "x" } else { s }).collect::<Vec<_>>().join("/");
        let concrete = concrete.replacen("/tenants/x", "/tenants/acme", 1);
        let r = client.request(reqwest::Method::TRACE, format!("{}{concrete}", served.base)).send().await.unwrap();
        assert_eq!(r.status(), 405, "{path}");
        let allow: BTreeSet<String> =
            r.headers()["allow"].to_str().unwrap().split(',').map(|m| m.trim().to_lowercase()).filter(|m| m != "head").collect();
        let documented: BTreeSet<String> = item.as_object().unwrap().keys().cloned().collect();
        assert_eq!(allow, documented, "{path}: the router's methods and the document's");
        let body: serde_json::Value = r.json().await.unwrap();
        assert_eq!(body["code"], "method_not_allowed", "{path}");
    }
}

/// Found by schemathesis: `GET …/copies?workspace=` with an encoded NUL reached PostgreSQL,
/// which refuses NUL in text, and answered 500. A NUL anywhere in a path or query is now a
/// 400 `bad_request`, before any handler, and the server stays well.
#[tokio::test]
async fn an_encoded_nul_in_a_path_or_query_is_a_bad_request_not_a_server_error() {
    let t = TestDb::new().await;
    cli(&t.url, &["tenant", "create", "acme", "--name", "Acme"]).await;
    cli(&t.url, &["workspace", "create", "--tenant", "acme", "main"]).await;
    let machine = common::provision(&t.url, "acme").await;
    let served = Served::start(gatehouse(Some(&t.url))).await;
    let client = http();
    for path in [
        "/api/v1/tenants/acme/copies?workspace=%21%00x",
        "/api/v1/tenants/acme/workspaces/ma%00in",
        "/api/v1/tenants/ac%00me/workspaces",
        "/api/v1/tenants/acme/activity?workspace=%00",
    ] {
        let r = machine.headers(client.get(format!("{}{path}", served.base))).send().await.unwrap();
        assert_eq!(r.status(), 400, "{path}");
        assert_eq!(r.headers()["content-type"], "application/problem+json", "{path}");
        let body: serde_json::Value = r.json().await.unwrap();
        assert_eq!(body["code"], "bad_request", "{path}: {body}");
    }
    // The same requests without the NUL are answered as usual.
    let r =
        machine.headers(client.get(format!("{}/api/v1/tenants/acme/copies?workspace=main", served.base))).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert!(!served.logs().contains("\"level\":\"ERROR\""), "{}", served.logs());
}

/// The suite-wide check of problem codes (tests/common/codes.rs) reads what a server answered
/// from its log, and it can fail: a code the document does not list for the route is a miss.
#[tokio::test]
async fn every_problem_a_server_answers_is_read_from_its_log_and_checked_against_the_document() {
    use common::codes::{Answered, answered, documented};
    let t = TestDb::new().await;
    cli(&t.url, &["tenant", "create", "acme", "--name", "Acme"]).await;
    let served = Served::start(gatehouse(Some(&t.url))).await;
    let r = http().get(format!("{}/api/v1/tenants/acme/tokens", served.base)).send().await.unwrap();
    assert_eq!(r.status(), 401);
    let seen = answered(&served.logs());
    let unauthorized = Answered {
        method: "get".into(),
        route: "/api/v1/tenants/{tenant}/tokens".into(),
        status: 401,
        code: "unauthorized".into(),
    };
    assert!(seen.contains(&unauthorized), "{seen:?}");
    assert!(documented(&unauthorized));
    let planted = Answered { code: "no_such_code".into(), ..unauthorized.clone() };
    assert!(!documented(&planted), "a code the document does not list is a miss");
    let elsewhere = Answered { status: 418, ..unauthorized };
    assert!(!documented(&elsewhere), "a status the operation does not list is a miss");
}
