//! Approval policies bound to the exact call (issue 23, item 1), against a real HTTP API on
//! loopback that counts the writes it receives: a write the workspace's policy names answers
//! `approval_required`; a person with `approval_decision` approves or denies it (first decision
//! wins, admin-logged); the approved call runs exactly once, only with the same arguments, under
//! the same policy version, before the expiry; and two server processes deciding (or using) one
//! approval at once have exactly one winner.

mod common;

use std::{
    sync::{Arc, Mutex},
    time::Duration,
};

use common::{
    Machine, Served, TestDb, browser::Browser, cli, dev_sign_in, downstream::as_owner, eventually, gatehouse, provision,
};
use reqwest::Method;
use serde_json::{Value, json};

const ALICE: &str = "alice@example.test";
const BOB: &str = "bob@example.test";

/// Every write the API received: the JSON body of each `POST /v1/items`.
type Writes = Arc<Mutex<Vec<Value>>>;

/// A small HTTP API: `POST /v1/items` (a write) and `GET /v1/items/{id}` (a read).
async fn items_api() -> (String, Writes) {
    use axum::{extract::Request, http::StatusCode, response::IntoResponse};
    let writes: Writes = Default::default();
    let log = writes.clone();
    let app = axum::Router::new().fallback(move |request: Request| {
        let log = log.clone();
        async move {
            let method = request.method().to_string();
            let path = request.uri().path().to_owned();
            let bytes = axum::body::to_bytes(request.into_body(), 1 << 20).await.unwrap_or_default();
            let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
            match (method.as_str(), path.as_str()) {
                ("POST", "/v1/items") => {
                    log.lock().unwrap().push(body.clone());
                    (StatusCode::CREATED, axum::Json(json!({ "created": body }))).into_response()
                }
                ("GET", p) if p.starts_with("/v1/items/") => axum::Json(json!({ "id": &p[10..] })).into_response(),
                _ => StatusCode::NOT_FOUND.into_response(),
            }
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}/v1", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (base, writes)
}

fn json_file(value: &Value) -> std::path::PathBuf {
    let file = std::env::temp_dir().join(format!("gatehouse-test-{}.json", uuid::Uuid::new_v4().simple()));
    std::fs::write(&file, value.to_string()).unwrap();
    file
}

fn items_connector(base: &str) -> Value {
    let strict = |properties: Value, required: Value| json!({ "type": "object", "additionalProperties": false, "properties": properties, "required": required });
    json!({ "base_url": base, "tools": [
        { "name": "get_item", "description": "One item", "method": "GET", "path": "/items/{id}", "read_only": true,
          "input_schema": strict(json!({ "id": { "type": "string" } }), json!(["id"])) },
        { "name": "create_item", "description": "Create an item", "method": "POST", "path": "/items",
          "body": ["name", "qty", "tags"],
          "input_schema": strict(json!({ "name": { "type": "string" }, "qty": { "type": "integer" },
                                         "tags": { "type": "object" } }), json!(["name"])) }
    ] })
}

pub struct World {
    pub t: TestDb,
    pub m: Machine,
    pub writes: Writes,
}

/// Tenant `acme` (owner alice, after her first sign-in) with workspace `main`, its connector
/// `inv` (the items API), machine credentials, and `policy` as its approval rules; tenant
/// `other` owned by carol.
pub async fn world(policy: Value) -> World {
    let (base, writes) = items_api().await;
    let t = TestDb::new().await;
    cli(&t.url, &["tenant", "create", "acme", "--name", "Acme", "--owner-email", ALICE]).await;
    cli(&t.url, &["tenant", "create", "other", "--name", "Other", "--owner-email", "carol@example.test"]).await;
    cli(&t.url, &["workspace", "create", "--tenant", "acme", "main"]).await;
    let file = json_file(&items_connector(&base));
    let add = ["connector", "add", "--tenant", "acme", "--workspace", "main", "--id", "inv", "--kind", "http_api", "--config"];
    cli(&t.url, &[&add[..], &[file.to_str().unwrap()]].concat()).await;
    configure(&t, json!({ "approvals": policy })).await;
    let m = provision(&t.url, "acme").await;
    World { t, m, writes }
}

async fn configure(t: &TestDb, patch: Value) {
    let file = json_file(&patch);
    cli(&t.url, &["workspace", "configure", "--tenant", "acme", "--workspace", "main", "--file", file.to_str().unwrap()]).await;
}

fn gw(served: &Served) -> String {
    format!("{}/t/acme/w/main/mcp", served.base)
}

/// `call_destructive_tool` of `inv.create_item` with `args` (and `approval_id`): (is error, body).
async fn create(served: &Served, m: &Machine, args: Value, approval: Option<&str>) -> (bool, Value) {
    let mut call = json!({ "address": "inv.create_item", "args": args });
    if let Some(id) = approval {
        call["approval_id"] = json!(id);
    }
    let (err, body, _) = common::mcp_tool(&gw(served), m, "call_destructive_tool", call).await;
    (err, body)
}

/// The code of a refusal (`None` for a result).
fn code(answer: &(bool, Value)) -> Option<&str> {
    if answer.0 { answer.1["error"]["code"].as_str().or(Some("?")) } else { None }
}

/// The approval an `approval_required` answer names.
fn required(answer: &(bool, Value)) -> String {
    assert_eq!(code(answer), Some("approval_required"), "{}", answer.1);
    answer.1["error"]["approval"]["id"].as_str().unwrap().to_owned()
}

async fn decide(b: &Browser, id: &str, verb: &str, reason: Option<&str>) -> (u16, Value) {
    let body = reason.map_or(json!({}), |r| json!({ "reason": r }));
    let r = b.write(Method::POST, &format!("/api/v1/tenants/acme/approvals/{id}/{verb}"), body).await;
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

async fn get_json(b: &Browser, path: &str) -> (u16, Value) {
    let r = b.client.get(format!("{}{path}", b.base)).send().await.unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

async fn admin_actions(t: &TestDb, id: &str) -> Vec<String> {
    let text = common::admin_log_text(t).await;
    let mut actions: Vec<String> = text
        .lines()
        .filter(|l| l.contains(&format!("approval:{id}")))
        .map(|l| serde_json::from_str::<Value>(l).unwrap()["action"].as_str().unwrap().to_owned())
        .collect();
    actions.sort();
    actions
}

#[tokio::test]
async fn an_approved_write_runs_once_and_only_as_it_was_approved() {
    let w = world(json!([{ "tools": ["inv.create_item"] }])).await;
    let served = Served::start(gatehouse(Some(&w.t.url))).await;
    let alice = dev_sign_in(&served, ALICE).await;
    let args = json!({ "name": "bolt", "qty": 3, "tags": { "b": [1, 2], "a": "x" } });

    // The write is not made: it answers approval_required, with the approval's id and URL.
    let first = create(&served, &w.m, args.clone(), None).await;
    let id = required(&first);
    let approval = &first.1["error"]["approval"];
    assert_eq!(approval["url"], format!("{}/console/t/acme/approvals/{id}", served.base), "{approval}");
    assert_eq!((approval["tool"].as_str(), approval["policy_version"].as_i64()), (Some("inv.create_item"), Some(3)));
    assert!(approval["args_digest"].as_str().unwrap().starts_with("sha256:"));
    assert_eq!(first.1["error"]["nextAction"]["arguments"]["approval_id"], json!(id));
    // The same call again (keys in another order) is the same request, not a second one.
    let again = create(&served, &w.m, json!({ "tags": { "a": "x", "b": [1, 2] }, "qty": 3, "name": "bolt" }), None).await;
    assert_eq!(required(&again), id);
    // Reads are never held back; call_tool still refuses writes as before.
    let (err, body, _) =
        common::mcp_tool(&gw(&served), &w.m, "call_tool", json!({ "address": "inv.get_item", "args": { "id": "a" } })).await;
    assert!(!err, "{body}");
    let (err, body, _) =
        common::mcp_tool(&gw(&served), &w.m, "call_tool", json!({ "address": "inv.create_item", "args": args.clone() })).await;
    assert!(err && body["error"]["code"] == "destructive_tool_requires_approval", "{body}");
    // Named while pending, it does not run either.
    assert_eq!(code(&create(&served, &w.m, args.clone(), Some(&id)).await), Some("approval_pending"));
    assert!(w.writes.lock().unwrap().is_empty(), "nothing reached the API before the approval");

    // Listed for approvers, with what it binds.
    let (status, listed) = get_json(&alice, "/api/v1/tenants/acme/approvals").await;
    assert_eq!(status, 200, "{listed}");
    let (status, refused) = get_json(&alice, "/api/v1/tenants/acme/approvals?status=decided").await;
    assert_eq!((status, refused["code"].as_str()), (422, Some("invalid_status")), "{refused}");
    let listed = listed.as_array().unwrap();
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0]["id"], json!(id));
    assert_eq!((listed[0]["state"].as_str(), listed[0]["actor_id"].as_str()), (Some("pending"), Some(w.m.token_id.as_str())));
    assert_eq!(listed[0]["args_digest"], approval["args_digest"]);
    let expires = chrono::DateTime::parse_from_rfc3339(listed[0]["expires_at"].as_str().unwrap()).unwrap();
    let requested = chrono::DateTime::parse_from_rfc3339(listed[0]["requested_at"].as_str().unwrap()).unwrap();
    assert_eq!((expires - requested).num_seconds(), 900, "15 minutes by default");

    // A member without approval_decision may neither see nor decide it; nor may a token.
    let r = alice.write(Method::POST, "/api/v1/tenants/acme/invitations", json!({ "email": BOB, "role": "member" })).await;
    assert_eq!(r.status(), 201);
    let bob = dev_sign_in(&served, BOB).await;
    assert_eq!(decide(&bob, &id, "approve", None).await.1["code"], "permission_denied");
    assert_eq!(get_json(&bob, "/api/v1/tenants/acme/approvals").await.0, 403);
    let url = format!("{}/api/v1/tenants/acme/approvals/{id}/approve", served.base);
    let r = w.m.headers(common::http().post(url)).json(&json!({})).send().await.unwrap();
    assert_eq!(r.status(), 403);
    assert_eq!(r.json::<Value>().await.unwrap()["code"], "person_required");

    // Alice approves; the first decision wins.
    let (status, decided) = decide(&alice, &id, "approve", Some("looks right")).await;
    assert_eq!(status, 200, "{decided}");
    assert_eq!((decided["state"].as_str(), decided["reason"].as_str()), (Some("approved"), Some("looks right")));
    for verb in ["approve", "deny"] {
        let (status, body) = decide(&alice, &id, verb, Some("again")).await;
        assert_eq!((status, body["code"].as_str()), (409, Some("already_decided")), "{body}");
    }

    // A changed argument is refused; the approval stays for the approved call.
    let changed = create(&served, &w.m, json!({ "name": "bolt", "qty": 4, "tags": { "b": [1, 2], "a": "x" } }), Some(&id)).await;
    assert_eq!(code(&changed), Some("approval_mismatch"), "{}", changed.1);
    let nested = create(&served, &w.m, json!({ "name": "bolt", "qty": 3, "tags": { "b": [2, 1], "a": "x" } }), Some(&id)).await;
    assert_eq!(code(&nested), Some("approval_mismatch"), "{}", nested.1);
    assert!(w.writes.lock().unwrap().is_empty());

    // The approved call (keys in any order) runs, once.
    let ran = create(&served, &w.m, json!({ "qty": 3, "tags": { "a": "x", "b": [1, 2] }, "name": "bolt" }), Some(&id)).await;
    assert_eq!(code(&ran), None, "{}", ran.1);
    assert_eq!(ran.1["created"]["name"], "bolt");
    assert_eq!(w.writes.lock().unwrap().len(), 1);
    // Replayed, it is refused; without the id, it needs a new approval.
    assert_eq!(code(&create(&served, &w.m, args.clone(), Some(&id)).await), Some("approval_used"));
    let fresh = create(&served, &w.m, args.clone(), None).await;
    assert_ne!(required(&fresh), id);
    assert_eq!(w.writes.lock().unwrap().len(), 1, "the approved write reached the API exactly once");

    // Audited, and the activity row names the approval.
    assert_eq!(admin_actions(&w.t, &id).await, ["approval.approve", "approval.request", "approval.use"]);
    let (status, used) = get_json(&alice, &format!("/api/v1/tenants/acme/approvals/{id}")).await;
    assert_eq!((status, used["state"].as_str(), used["decided_by"].is_string()), (200, Some("used"), true), "{used}");
    let found = eventually(Duration::from_secs(10), || {
        let alice = alice.clone();
        let id = id.clone();
        async move {
            let (_, page) = get_json(&alice, "/api/v1/tenants/acme/activity").await;
            page["items"].as_array().is_some_and(|items| {
                let of = |outcome: &str, code: Value| {
                    items.iter().any(|i| i["approval_id"] == json!(id) && i["outcome"] == outcome && i["error_code"] == code)
                };
                of("ok", Value::Null) && of("error", json!("approval_required")) && of("error", json!("approval_used"))
            })
        }
    })
    .await;
    assert!(found, "the activity rows of the request, the run and the replay record the approval id");
    assert_eq!(served.terminate().await, 0);
}

#[tokio::test]
async fn expiry_denial_policy_changes_and_other_callers_need_a_new_approval() {
    let w = world(json!([{ "tools": ["inv"], "to": ["machines"], "expires_in_s": 600 }])).await;
    let served = Served::start(gatehouse(Some(&w.t.url))).await;
    let alice = dev_sign_in(&served, ALICE).await;
    let call = |n: i64| json!({ "name": "nut", "qty": n });

    // An approval after its expiry is refused (and so is a use after it).
    let late = required(&create(&served, &w.m, call(1), None).await);
    let expire = |id: &str| {
        format!(
            "UPDATE approvals SET requested_at = now() - interval '2 hours', expires_at = now() - interval '1 second' WHERE id = '{id}'"
        )
    };
    as_owner(&w.t, &expire(&late)).await;
    let (status, body) = decide(&alice, &late, "approve", None).await;
    assert_eq!((status, body["code"].as_str()), (409, Some("approval_expired")), "{body}");
    let stale = required(&create(&served, &w.m, call(2), None).await);
    assert_eq!(decide(&alice, &stale, "approve", None).await.0, 200);
    as_owner(&w.t, &expire(&stale)).await;
    assert_eq!(code(&create(&served, &w.m, call(2), Some(&stale)).await), Some("approval_expired"));
    // An expired request is not answered again: the same call asks anew.
    assert_ne!(required(&create(&served, &w.m, call(1), None).await), late);

    // A denial needs a reason, and the agent is told it.
    let denied = required(&create(&served, &w.m, call(3), None).await);
    assert_eq!(decide(&alice, &denied, "deny", None).await.1["code"], "invalid_reason");
    assert_eq!(decide(&alice, &denied, "deny", Some("not this week")).await.0, 200);
    let refused = create(&served, &w.m, call(3), Some(&denied)).await;
    assert_eq!(code(&refused), Some("approval_denied"));
    assert!(refused.1["error"]["message"].as_str().unwrap().contains("not this week"), "{}", refused.1);

    // A policy change (a new configuration version) voids an approval given under the old one.
    let before = required(&create(&served, &w.m, call(4), None).await);
    assert_eq!(decide(&alice, &before, "approve", None).await.0, 200);
    configure(&w.t, json!({ "approvals": [{ "tools": ["inv"], "to": ["machines"], "expires_in_s": 300 }] })).await;
    let changed = eventually(Duration::from_secs(10), || {
        let (served, m, before) = (&served, &w.m, before.clone());
        async move { code(&create(served, m, call(4), Some(&before)).await) == Some("approval_stale") }
    })
    .await;
    assert!(changed, "an approval of the previous policy version is refused");
    let renewed = create(&served, &w.m, call(4), None).await;
    let renewed_id = required(&renewed);
    assert_eq!(renewed.1["error"]["approval"]["policy_version"], 4);

    // Another token of the tenant cannot use someone else's approval (as if it did not exist).
    assert_eq!(decide(&alice, &renewed_id, "approve", None).await.0, 200);
    let other = provision(&w.t.url, "acme").await;
    assert_eq!(code(&create(&served, &other, call(4), Some(&renewed_id)).await), Some("approval_not_found"));
    assert!(w.writes.lock().unwrap().is_empty(), "no refused call reached the API");
    assert_eq!(code(&create(&served, &w.m, call(4), Some(&renewed_id)).await), None);
    assert_eq!(w.writes.lock().unwrap().len(), 1);

    // Another tenant's people see nothing of acme's approvals: 404, like a missing one.
    let carol = dev_sign_in(&served, "carol@example.test").await;
    assert_eq!(get_json(&carol, &format!("/api/v1/tenants/acme/approvals/{renewed_id}")).await.0, 404);
    assert_eq!(get_json(&carol, &format!("/api/v1/tenants/other/approvals/{renewed_id}")).await.0, 404);
    assert_eq!(decide(&carol, &renewed_id, "deny", Some("mine now")).await.0, 404);
    let path = format!("/api/v1/tenants/other/approvals/{renewed_id}/deny");
    assert_eq!(carol.write(Method::POST, &path, json!({ "reason": "mine now" })).await.status(), 404);
    assert_eq!(served.terminate().await, 0);
}

#[tokio::test]
async fn a_rule_applies_only_to_the_callers_it_names() {
    // A rule for people of the member role does not hold a machine's write back.
    let w = world(json!([{ "tools": ["inv.create_item"], "to": ["role:member"] }])).await;
    let served = Served::start(gatehouse(Some(&w.t.url))).await;
    let ran = create(&served, &w.m, json!({ "name": "washer" }), None).await;
    assert_eq!(code(&ran), None, "{}", ran.1);
    assert_eq!(w.writes.lock().unwrap().len(), 1);
    // An invalid rule is refused, naming its field.
    let file = json_file(&json!({ "approvals": [{ "tools": ["nope.x"], "to": ["robots"], "expires_in_s": 5 }] }));
    let mut c = gatehouse(Some(&w.t.url));
    c.args(["workspace", "configure", "--tenant", "acme", "--workspace", "main", "--file", file.to_str().unwrap()]);
    let (status, _, err) = common::run(c).await;
    assert_ne!(status, 0);
    for field in ["approvals.0.tools.nope.x", "approvals.0.to.0", "approvals.0.expires_in_s"] {
        assert!(err.contains(field), "{field}: {err}");
    }
    assert_eq!(served.terminate().await, 0);
}

#[tokio::test]
async fn two_processes_racing_to_decide_or_use_one_approval_have_one_winner() {
    let w = world(json!([{ "tools": ["inv.create_item"] }])).await;
    let served = [Served::start(gatehouse(Some(&w.t.url))).await, Served::start(gatehouse(Some(&w.t.url))).await];
    // One session on both processes (each process's development provider is its own issuer).
    let first = dev_sign_in(&served[0], ALICE).await;
    let browsers: Vec<Browser> = served.iter().map(|s| Browser { client: first.client.clone(), base: s.base.clone() }).collect();

    for round in 0..8i64 {
        let args = json!({ "name": "race", "qty": round });
        let id = required(&create(&served[0], &w.m, args.clone(), None).await);
        // Two approvers, on two processes, decide at once: one approves, one denies.
        let (a, b) =
            tokio::join!(decide(&browsers[0], &id, "approve", Some("ok")), decide(&browsers[1], &id, "deny", Some("no")));
        let mut statuses = [a.0, b.0];
        statuses.sort();
        assert_eq!(statuses, [200, 409], "round {round}: {a:?} {b:?}");
        let loser = if a.0 == 409 { &a.1 } else { &b.1 };
        assert_eq!(loser["code"], "already_decided", "{loser}");
        let approved = a.0 == 200;
        let decisions = admin_actions(&w.t, &id).await;
        assert_eq!(decisions.iter().filter(|a| *a != "approval.request").count(), 1, "{decisions:?}");

        // Both processes retry the call at once: it runs at most once (once if approved).
        let before = w.writes.lock().unwrap().len();
        let (x, y) =
            tokio::join!(create(&served[0], &w.m, args.clone(), Some(&id)), create(&served[1], &w.m, args.clone(), Some(&id)));
        let ran = [&x, &y].iter().filter(|r| code(r).is_none()).count();
        assert_eq!(ran, usize::from(approved), "round {round}: {x:?} {y:?}");
        for r in [&x, &y] {
            let expected: &[Option<&str>] = if approved { &[None, Some("approval_used")] } else { &[Some("approval_denied")] };
            assert!(expected.contains(&code(r)), "round {round}: {r:?}");
        }
        assert_eq!(w.writes.lock().unwrap().len(), before + usize::from(approved));
    }
    for s in served {
        assert_eq!(s.terminate().await, 0);
    }
}

#[tokio::test]
async fn a_native_pools_unchanged_retry_runs_once_it_is_approved() {
    // A native pool's client cannot add an approval id: the same call again is the retry.
    let w = world(json!([{ "tools": ["inv"] }])).await;
    configure(&w.t, json!({ "pools": { "plain": { "tools": ["inv"], "native": true } } })).await;
    let served = Served::start(gatehouse(Some(&w.t.url))).await;
    let alice = dev_sign_in(&served, ALICE).await;
    let pool = format!("{}/t/acme/w/main/mcp/plain", served.base);
    let call = || async { common::mcp_tool(&pool, &w.m, "create_item", json!({ "name": "rivet" })).await };
    let (err, body, _) = call().await;
    assert!(err && body["error"]["code"] == "approval_required", "{body}");
    let id = body["error"]["approval"]["id"].as_str().unwrap().to_owned();
    let (err, body, _) = call().await;
    assert_eq!((err, body["error"]["approval"]["id"].as_str()), (true, Some(id.as_str())), "still waiting: {body}");
    assert_eq!(decide(&alice, &id, "approve", None).await.0, 200);
    let (err, body, _) = call().await;
    assert!(!err, "{body}");
    assert_eq!(body["created"]["name"], "rivet");
    let (err, body, _) = call().await;
    assert!(err && body["error"]["code"] == "approval_required" && body["error"]["approval"]["id"] != json!(id), "{body}");
    assert_eq!(w.writes.lock().unwrap().len(), 1, "the approved call ran once");
    assert_eq!(served.terminate().await, 0);
}

#[tokio::test]
async fn a_2026_07_28_agent_declaring_url_elicitation_gets_the_url_in_band_and_its_retry_runs_once() {
    // The official Python SDK on 2026-07-28, declaring (and answering) elicitation.
    let w = world(json!([{ "tools": ["inv.create_item"] }])).await;
    let served = Served::start(gatehouse(Some(&w.t.url))).await;
    let alice = dev_sign_in(&served, ALICE).await;
    let answering = [("GATEHOUSE_ANSWER", "1")];
    let calls = json!([["call_destructive_tool", { "address": "inv.create_item", "args": { "name": "modern" } }]]);
    let asked = common::python_agent_with(&gw(&served), &w.m, Some("2026-07-28"), &answering, calls.clone()).await;
    assert_eq!(asked["protocol"], "2026-07-28", "{asked}");
    let error = &asked["calls"][0]["error"];
    assert_eq!(error["code"], -32042, "URLElicitationRequired: {asked}");
    let elicitation = &error["data"]["elicitations"][0];
    let id = elicitation["elicitationId"].as_str().unwrap().to_owned();
    assert_eq!(
        (elicitation["mode"].as_str(), elicitation["url"].as_str()),
        (Some("url"), Some(format!("{}/console/t/acme/approvals/{id}", served.base).as_str()))
    );
    assert_eq!(decide(&alice, &id, "approve", None).await.0, 200);
    let retried = common::python_agent_with(&gw(&served), &w.m, Some("2026-07-28"), &answering, calls.clone()).await;
    assert_eq!(retried["calls"][0]["isError"], false, "{retried}");
    let again = common::python_agent_with(&gw(&served), &w.m, Some("2026-07-28"), &answering, calls).await;
    assert_eq!(again["calls"][0]["error"]["code"], -32042, "a new approval for the next call: {again}");
    assert_eq!(*w.writes.lock().unwrap(), vec![json!({ "name": "modern" })], "the approved call ran once downstream");
    assert_eq!(served.terminate().await, 0);
}
