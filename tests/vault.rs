//! The vault and credential slots against real processes: the API and CLI set credentials, the
//! gateway sends them to a real local HTTP API that refuses calls without the right bearer
//! token, replicas see replacements at once, keys rotate across restarts, and no secret
//! reaches a log line, an admin-log row or an API response.

mod common;

use std::sync::{Arc, Mutex};

use base64::Engine;
use common::{
    Machine, Served, TestDb, admin_log_text as admin_log, browser::Browser, dev_sign_in, gatehouse, http, json_path as json_file,
    mcp_tool as tool, provision, run, run_ok as ok, vault_key as key,
};
use reqwest::Method;
use serde_json::{Value, json};
use sqlx::Executor;

/// A secret value of 32 characters (long enough to show its last four in metadata).
fn secret(tag: &str) -> String {
    let s = format!("{tag}-{}", uuid::Uuid::new_v4().simple());
    common::leaks::record(&s);
    s
}

fn last4(s: &str) -> &str {
    &s[s.len() - 4..]
}

/// A `gatehouse` command with this key ring (`None`: the vault off).
fn cmd(t: &TestDb, keys: Option<&str>) -> tokio::process::Command {
    let mut c = gatehouse(Some(&t.url));
    if let Some(keys) = keys {
        c.env("GATEHOUSE_VAULT_KEYS", keys);
    }
    c
}

/// The requests a bearer-protected API saw: the Authorization header of each.
type Seen = Arc<Mutex<Vec<Option<String>>>>;

/// A real HTTP API on loopback that answers only requests bearing one of `valid` tokens (401
/// otherwise) and never echoes the token back.
async fn bearer_api(valid: Arc<Mutex<Vec<String>>>) -> (String, Seen) {
    use axum::{extract::Request, http::StatusCode, response::IntoResponse};
    let seen: Seen = Default::default();
    let log = seen.clone();
    let app = axum::Router::new().fallback(move |request: Request| {
        let (log, valid) = (log.clone(), valid.clone());
        async move {
            let auth = request.headers().get("authorization").and_then(|v| v.to_str().ok()).map(str::to_owned);
            log.lock().unwrap().push(auth.clone());
            let known = valid.lock().unwrap().iter().position(|t| auth.as_deref() == Some(&format!("Bearer {t}")));
            match known {
                Some(i) => axum::Json(json!({ "ok": true, "token_number": i })).into_response(),
                None => (StatusCode::UNAUTHORIZED, "bearer token required").into_response(),
            }
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}/v1", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (base, seen)
}

fn api_connector(base: &str, slot: &str) -> Value {
    json!({ "base_url": base, "timeout_ms": 5000,
        "auth": { "type": "slot", "slot": slot, "headers": { "Authorization": "Bearer {token}" } },
        "tools": [{ "name": "get_item", "description": "One item", "method": "GET", "path": "/items/{id}", "read_only": true,
            "input_schema": { "type": "object", "additionalProperties": false, "required": ["id"], "properties": { "id": { "type": "string" } } } }] })
}

fn add_args<'a>(id: &'a str, file: &'a str) -> Vec<&'a str> {
    vec!["connector", "add", "--tenant", "acme", "--workspace", "main", "--id", id, "--kind", "http_api", "--config", file]
}

/// What a browser write answered: (status, body text).
async fn write(b: &Browser, method: Method, path: &str, body: Value, seen: &mut Vec<String>) -> (u16, Value) {
    let r = b.write(method, path, body).await;
    let status = r.status().as_u16();
    let text = r.text().await.unwrap();
    seen.push(text.clone());
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

const SHARED: &str = "/api/v1/tenants/acme/workspaces/main/connectors/inventory/credentials/shared";

#[tokio::test]
async fn a_shared_slot_set_through_the_api_is_sent_replaced_on_every_replica_and_never_shown() {
    let t = TestDb::new().await;
    let keys = key("k1");
    ok(cmd(&t, None), &["tenant", "create", "acme", "--name", "Acme", "--owner-email", "alice@example.test"]).await;
    ok(cmd(&t, None), &["workspace", "create", "--tenant", "acme", "main"]).await;
    let valid: Arc<Mutex<Vec<String>>> = Default::default();
    let (base, seen) = bearer_api(valid.clone()).await;
    let file = json_file(&api_connector(&base, "shared"));

    // Without a key ring, a connector taking a slot is refused with a clear code.
    let mut c = cmd(&t, None);
    c.args(add_args("inventory", &file));
    let (code, _, err) = run(c).await;
    assert_eq!(code, 1);
    assert!(err.contains("error (vault_disabled)"), "{err}");
    ok(cmd(&t, Some(&keys)), &add_args("inventory", &file)).await;

    let a = Served::start(cmd(&t, Some(&keys))).await;
    let b = Served::start(cmd(&t, Some(&keys))).await;
    let machine = provision(&t.url, "acme").await;
    let (url_a, url_b) = (format!("{}/t/acme/w/main/mcp", a.base), format!("{}/t/acme/w/main/mcp", b.base));
    let mut responses = Vec::new();
    let get = json!({ "address": "inventory.get_item", "args": { "id": "7" } });

    // Nothing set: a typed outcome that says how to set it, and the API was never called.
    let (err, body, raw) = tool(&url_a, &machine, "call_tool", get.clone()).await;
    responses.push(raw);
    assert!(err && body["error"]["code"] == "auth_required", "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("credentials/shared"), "{body}");
    assert!(seen.lock().unwrap().is_empty());
    let (_, body, raw) = tool(&url_b, &machine, "authorize_connector", json!({ "connector": "inventory" })).await;
    responses.push(raw);
    assert_eq!(body["status"], "missing", "{body}");

    // A token cannot set credentials; a person with credential_administration can.
    let s1 = secret("first");
    let r = machine
        .headers(http().put(format!("{}{SHARED}", a.base)))
        .json(&json!({ "fields": { "token": s1 } }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    responses.push(r.text().await.unwrap());
    let alice = dev_sign_in(&a, "alice@example.test").await;
    let (status, body) = write(&alice, Method::PUT, SHARED, json!({ "fields": { "tok": "x" } }), &mut responses).await;
    assert_eq!(status, 422, "a field the headers need is checked: {body}");
    let (status, body) = write(&alice, Method::PUT, SHARED, json!({ "fields": { "token": s1 } }), &mut responses).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["state"], "set");
    assert_eq!(body["fields"], json!([{ "name": "token", "last4": last4(&s1) }]));
    assert_eq!(body["version"], 1);
    valid.lock().unwrap().push(s1.clone());

    // Every replica sends it; both now hold the slot in their caches.
    for url in [&url_b, &url_a] {
        let (err, body, raw) = tool(url, &machine, "call_tool", get.clone()).await;
        responses.push(raw);
        assert!(!err, "{body}");
        assert_eq!(body, json!({ "ok": true, "token_number": 0 }));
    }
    assert_eq!(seen.lock().unwrap().last().unwrap().as_deref(), Some(format!("Bearer {s1}").as_str()));

    // A replacement takes effect on the next call, on every replica.
    let s2 = secret("second");
    valid.lock().unwrap().push(s2.clone());
    let (status, body) = write(&alice, Method::PUT, SHARED, json!({ "fields": { "token": s2 } }), &mut responses).await;
    assert_eq!((status, body["version"].clone()), (200, json!(2)), "{body}");
    for url in [&url_b, &url_a] {
        let (err, body, raw) = tool(url, &machine, "call_tool", get.clone()).await;
        responses.push(raw);
        assert_eq!((err, &body), (false, &json!({ "ok": true, "token_number": 1 })), "{url}");
        assert_eq!(seen.lock().unwrap().last().unwrap().as_deref(), Some(format!("Bearer {s2}").as_str()));
    }
    let (_, body, raw) = tool(&url_a, &machine, "authorize_connector", json!({ "connector": "inventory" })).await;
    responses.push(raw);
    assert_eq!(body["status"], "set", "{body}");
    let r = machine.headers(http().get(format!("{}{SHARED}", b.base))).send().await.unwrap();
    let shown: Value = serde_json::from_str(&{
        let text = r.text().await.unwrap();
        responses.push(text.clone());
        text
    })
    .unwrap();
    assert_eq!((shown["state"].as_str(), shown["manageable"].as_bool()), (Some("set"), Some(true)), "{shown}");
    assert_eq!(shown["fields"][0]["last4"], last4(&s2));

    // Removed: the next call on the other replica asks for it again.
    let (status, _) = write(&alice, Method::DELETE, SHARED, json!({}), &mut responses).await;
    assert_eq!(status, 200);
    let (err, body, raw) = tool(&url_b, &machine, "call_tool", get.clone()).await;
    responses.push(raw);
    assert!(err && body["error"]["code"] == "auth_required", "{body}");
    let (status, _) = write(&alice, Method::DELETE, SHARED, json!({}), &mut responses).await;
    assert_eq!(status, 404);

    let log = admin_log(&t).await;
    for action in ["credential.set", "credential.replace", "credential.remove"] {
        assert!(log.contains(action), "{action} missing from the admin log");
    }
    let everything = format!("{}\n{}\n{}\n{}", responses.join("\n"), a.logs(), b.logs(), log);
    for s in [&s1, &s2] {
        assert!(!everything.contains(s.as_str()), "a secret reached a response, a log line or the admin log");
    }
    assert_eq!(a.terminate().await, 0);
    assert_eq!(b.terminate().await, 0);
}

#[tokio::test]
async fn personal_slots_belong_to_each_member_and_hide_the_connector_from_non_members() {
    let t = TestDb::new().await;
    let keys = key("k1");
    ok(cmd(&t, None), &["tenant", "create", "acme", "--name", "Acme", "--owner-email", "alice@example.test"]).await;
    ok(cmd(&t, None), &["workspace", "create", "--tenant", "acme", "main"]).await;
    let valid: Arc<Mutex<Vec<String>>> = Default::default();
    let (base, seen) = bearer_api(valid.clone()).await;
    ok(cmd(&t, Some(&keys)), &add_args("mine", &json_file(&api_connector(&base, "personal")))).await;
    let served = Served::start(cmd(&t, Some(&keys))).await;
    let url = format!("{}/t/acme/w/main/mcp", served.base);
    let cli_machine = provision(&t.url, "acme").await;
    let get = json!({ "address": "mine.get_item", "args": { "id": "1" } });
    let mut responses = Vec::new();

    // A token that carries no person does not see the connector at all.
    let (_, body, _) = tool(&url, &cli_machine, "search_tools", json!({ "query": "item" })).await;
    assert_eq!(body["total"], 0, "{body}");
    let (err, body, _) = tool(&url, &cli_machine, "call_tool", get.clone()).await;
    assert!(err && body["error"]["code"] == "unknown_tool", "{body}");

    // Alice's own token: her slot is empty until she sets it.
    let alice = dev_sign_in(&served, "alice@example.test").await;
    let r = alice.write(Method::POST, "/api/v1/tenants/acme/tokens", json!({ "name": "alice agent" })).await;
    let created: Value = r.json().await.unwrap();
    let alice_machine = Machine { token: created["secret"].as_str().unwrap().to_owned(), ..cli_machine.clone() };
    let (_, body, _) = tool(&url, &alice_machine, "search_tools", json!({ "query": "item" })).await;
    assert_eq!(body["results"][0]["address"], "mine.get_item", "{body}");
    let (err, body, _) = tool(&url, &alice_machine, "call_tool", get.clone()).await;
    assert!(err && body["error"]["code"] == "auth_required", "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("credentials/personal"), "{body}");

    let personal = "/api/v1/tenants/acme/workspaces/main/connectors/mine/credentials/personal";
    let (status, body) = write(
        &alice,
        Method::PUT,
        &personal.replace("personal", "shared"),
        json!({ "fields": { "token": "x" } }),
        &mut responses,
    )
    .await;
    assert_eq!((status, body["code"].as_str()), (409, Some("slot_mismatch")), "{body}");
    let mine = secret("alice");
    valid.lock().unwrap().push(mine.clone());
    let (status, body) = write(&alice, Method::PUT, personal, json!({ "fields": { "token": mine } }), &mut responses).await;
    assert_eq!(status, 200, "{body}");
    assert!(body["owner"].as_str().unwrap().starts_with("member:"));
    let (err, body, raw) = tool(&url, &alice_machine, "call_tool", get.clone()).await;
    responses.push(raw);
    assert!(!err, "{body}");
    assert_eq!(seen.lock().unwrap().last().unwrap().as_deref(), Some(format!("Bearer {mine}").as_str()));

    // The CLI manages any member's personal slot; another member's value goes only with theirs.
    let member_id = body_member(&alice).await;
    let shown = ok(
        cmd(&t, Some(&keys)),
        &["credential", "show", "--tenant", "acme", "--workspace", "main", "--connector", "mine", "--personal-for", &member_id],
    )
    .await;
    assert!(shown[0].contains("\tset\t1\tk1\t"), "{shown:?}");
    assert_eq!(shown[1], format!("field\ttoken\t{}", last4(&mine)));
    let (err, body, _) = tool(&url, &cli_machine, "authorize_connector", json!({ "connector": "mine" })).await;
    assert!(err && body["error"]["code"] == "unknown_connector", "absent for non-members: {body}");

    let everything = format!("{}\n{}\n{}\n{}", responses.join("\n"), served.logs(), admin_log(&t).await, shown.join("\n"));
    assert!(!everything.contains(&mine), "a secret reached a response, a log line or the admin log");
    assert_eq!(served.terminate().await, 0);
}

/// The signed-in person's member id in acme.
async fn body_member(b: &Browser) -> String {
    let members: Value =
        b.client.get(format!("{}/api/v1/tenants/acme/members", b.base)).send().await.unwrap().json().await.unwrap();
    let list = members.as_array().cloned().or_else(|| members["members"].as_array().cloned()).unwrap();
    list[0]["id"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn keys_rotate_across_restarts_and_a_moved_ciphertext_never_opens() {
    let t = TestDb::new().await;
    let (old, new) = (key("old"), key("new"));
    ok(cmd(&t, None), &["tenant", "create", "acme", "--name", "Acme"]).await;
    ok(cmd(&t, None), &["workspace", "create", "--tenant", "acme", "main"]).await;
    let valid: Arc<Mutex<Vec<String>>> = Default::default();
    let (base, _seen) = bearer_api(valid.clone()).await;
    let file = json_file(&api_connector(&base, "shared"));
    ok(cmd(&t, Some(&old)), &add_args("inventory", &file)).await;
    ok(cmd(&t, Some(&old)), &add_args("other", &file)).await;
    let machine = provision(&t.url, "acme").await;
    let (s1, s2) = (secret("env"), secret("stdin"));
    valid.lock().unwrap().extend([s1.clone(), s2.clone()]);
    let slot = |c: &'static str| vec!["credential", "set", "--tenant", "acme", "--workspace", "main", "--connector", c];

    // Values come from the environment or stdin, never from the command line.
    let mut c = cmd(&t, Some(&old));
    c.args([&slot("inventory")[..], &["--field", "token=oops-on-argv"]].concat());
    let (code, _, err) = run(c).await;
    assert_eq!(code, 1);
    assert!(err.contains("value_on_command_line"), "{err}");
    let mut c = cmd(&t, Some(&old));
    c.env("GATEHOUSE_FIELD_TOKEN", &s1);
    let out = ok(c, &[&slot("inventory")[..], &["--field", "token"]].concat()).await;
    assert!(out[0].starts_with("inventory\tshared\tset\t1\told\t"), "{out:?}");
    let mut c = cmd(&t, Some(&old));
    c.args([&slot("other")[..], &["--field", "token"]].concat())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped());
    let mut child = c.spawn().unwrap();
    use tokio::io::AsyncWriteExt;
    child.stdin.take().unwrap().write_all(format!("{s2}\n").as_bytes()).await.unwrap();
    assert!(child.wait_with_output().await.unwrap().status.success());

    let mut logs = String::new();
    let get = |c: &str| json!({ "address": format!("{c}.get_item"), "args": { "id": "1" } });
    let call = |served: &Served, c: &'static str| {
        let (url, m, args) = (format!("{}/t/acme/w/main/mcp", served.base), machine.clone(), get(c));
        async move { tool(&url, &m, "call_tool", args).await }
    };

    // Only the new key: the old envelopes name a key id it does not hold.
    let served = Served::start(cmd(&t, Some(&new))).await;
    let (err, body, _) = call(&served, "inventory").await;
    assert!(err && body["error"]["code"] == "credential_unreadable", "{body}");
    logs.push_str(&served.logs());
    assert_eq!(served.terminate().await, 0);

    // A ciphertext copied onto another row does not open there (its associated data differs).
    let mut owner = t.owner_conn().await;
    owner.execute("SELECT set_config('gatehouse.platform', 'on', false)").await.unwrap();
    sqlx::query(
        "UPDATE credentials SET envelope = (SELECT envelope FROM credentials WHERE connector_id = 'inventory') WHERE connector_id = 'other'",
    )
    .execute(&mut owner)
    .await
    .unwrap();

    // New and old: the old envelopes open; rotation re-seals them in batches; twice is harmless.
    let both = format!("{new},{old}");
    let served = Served::start(cmd(&t, Some(&both))).await;
    let (err, body, _) = call(&served, "inventory").await;
    assert_eq!((err, body), (false, json!({ "ok": true, "token_number": 0 })));
    let (err, body, _) = call(&served, "other").await;
    assert!(err && body["error"]["code"] == "credential_unreadable", "{body}");
    let rotated = ok(cmd(&t, Some(&both)), &["vault", "rotate", "--batch", "1"]).await;
    assert_eq!(rotated, ["resealed\t1", "already_current\t0", "unreadable\t1"]);
    let again = ok(cmd(&t, Some(&both)), &["vault", "rotate"]).await;
    assert_eq!(again, ["resealed\t0", "already_current\t1", "unreadable\t1"]);
    let (err, _, _) = call(&served, "inventory").await;
    assert!(!err, "still served while rotating");
    logs.push_str(&served.logs());
    assert_eq!(served.terminate().await, 0);

    // Only the new key after rotation: the credential still opens; the moved one never does.
    let served = Served::start(cmd(&t, Some(&new))).await;
    let (err, body, raw1) = call(&served, "inventory").await;
    assert_eq!((err, body), (false, json!({ "ok": true, "token_number": 0 })));
    let url = format!("{}/t/acme/w/main/mcp", served.base);
    let (_, body, raw2) = tool(&url, &machine, "authorize_connector", json!({ "connector": "other" })).await;
    assert_eq!((body["status"].as_str(), body["code"].as_str()), (Some("unreadable"), Some("credential_unreadable")), "{body}");
    logs.push_str(&served.logs());
    assert_eq!(served.terminate().await, 0);

    // No key ring: the vault is off, slots are unmanageable and calls say why.
    let served = Served::start(cmd(&t, None)).await;
    let (err, body, raw3) = call(&served, "inventory").await;
    assert!(err && body["error"]["code"] == "vault_disabled", "{body}");
    let r = machine
        .headers(
            http().get(format!("{}/api/v1/tenants/acme/workspaces/main/connectors/inventory/credentials/shared", served.base)),
        )
        .send()
        .await
        .unwrap();
    let shown: Value = r.json().await.unwrap();
    assert_eq!((shown["manageable"].as_bool(), shown["code"].as_str()), (Some(false), Some("vault_disabled")), "{shown}");
    logs.push_str(&served.logs());
    assert_eq!(served.terminate().await, 0);

    // A malformed key ring stops the boot, naming the variable and never echoing key material.
    let material = new.split_once(':').unwrap().1;
    let mut c = cmd(&t, Some(&format!("new:{}", &material[..30])));
    c.arg("serve");
    let (code, _, err) = run(c).await;
    assert_eq!(code, 2);
    assert!(err.contains("GATEHOUSE_VAULT_KEYS") && !err.contains(&material[..30]), "{err}");

    let everything = format!("{logs}\n{raw1}\n{raw2}\n{raw3}\n{}", admin_log(&t).await);
    for s in [&s1, &s2] {
        assert!(!everything.contains(s.as_str()), "a secret reached a log line, a response or the admin log");
    }
    assert!(!everything.contains(material), "key material reached a log");
}

/// Forwards to `target` (see [`common::forwarding_proxy`]) only requests whose Authorization
/// is one of `valid` (401 otherwise), recording the Authorization of every request.
async fn guarded_proxy(target: &str, valid: Arc<Mutex<Vec<String>>>) -> (String, Seen) {
    let seen: Seen = Default::default();
    let record = seen.clone();
    let url = common::forwarding_proxy(target, move |_, headers| {
        let auth = headers.get("authorization").and_then(|v| v.to_str().ok()).map(str::to_owned);
        record.lock().unwrap().push(auth.clone());
        auth.is_some_and(|a| valid.lock().unwrap().contains(&a))
    })
    .await;
    (url, seen)
}

fn basic(user: &str, password: &str) -> String {
    format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}")))
}

/// A remote MCP server behind Basic authentication: the slot's fields fill the header of the
/// downstream session, the test endpoint lists tools with them, and a replaced password opens
/// a new session (the old one would now be refused).
#[tokio::test]
async fn a_remote_mcp_connector_sends_basic_credentials_from_its_slot_and_reconnects_on_replacement() {
    let everything = common::Everything::start().await;
    let t = TestDb::new().await;
    let keys = key("k1");
    ok(cmd(&t, None), &["tenant", "create", "acme", "--name", "Acme", "--owner-email", "alice@example.test"]).await;
    ok(cmd(&t, None), &["workspace", "create", "--tenant", "acme", "main"]).await;
    let (p1, p2) = (secret("pw-one"), secret("pw-two"));
    let valid: Arc<Mutex<Vec<String>>> = Arc::new(Mutex::new(vec![basic("robot", &p1)]));
    let (url, seen) = guarded_proxy(&everything.url, valid.clone()).await;
    let config = json_file(
        &json!({ "auth": { "type": "slot", "slot": "shared", "basic": { "username": "user", "password": "password" } } }),
    );
    let add = ["connector", "add", "--tenant", "acme", "--workspace", "main", "--id", "everything", "--kind", "remote_mcp"];
    ok(cmd(&t, Some(&keys)), &[&add[..], &["--url", &url, "--config", &config]].concat()).await;
    let set = |password: &str| {
        let mut c = cmd(&t, Some(&keys));
        c.env("GATEHOUSE_FIELD_USER", "robot").env("GATEHOUSE_FIELD_PASSWORD", password);
        c.args(["credential", "set", "--tenant", "acme", "--workspace", "main", "--connector", "everything"]);
        c.args(["--field", "user", "--field", "password"]);
        c
    };
    let out = ok(set(&p1), &[]).await;
    assert_eq!(out[1..], [format!("field\tpassword\t{}", last4(&p1)), "field\tuser\t-".to_owned()]);

    let served = Served::start(cmd(&t, Some(&keys))).await;
    let machine = provision(&t.url, "acme").await;
    let mcp = format!("{}/t/acme/w/main/mcp", served.base);
    let echo = json!({ "address": "everything.echo", "args": { "message": "through basic" } });
    let (err, body, r1) = tool(&mcp, &machine, "call_destructive_tool", echo.clone()).await;
    assert!(!err, "{body}");
    assert!(seen.lock().unwrap().iter().all(|a| a.as_deref() == Some(basic("robot", &p1).as_str())));

    let alice = dev_sign_in(&served, "alice@example.test").await;
    let mut responses = vec![r1];
    let test_path = "/api/v1/tenants/acme/workspaces/main/connectors/everything/credentials/shared/test";
    let (status, body) = write(&alice, Method::POST, test_path, json!({}), &mut responses).await;
    assert_eq!((status, &body["ok"]), (200, &json!(true)), "{body}");
    assert!(body["tools"].as_u64().unwrap() > 3, "{body}");

    // The old password stops working at the server; the replacement opens a new session.
    *valid.lock().unwrap() = vec![basic("robot", &p2)];
    ok(set(&p2), &[]).await;
    let (err, body, r2) = tool(&mcp, &machine, "call_destructive_tool", echo).await;
    responses.push(r2);
    assert!(!err, "{body}");
    assert_eq!(seen.lock().unwrap().last().unwrap().as_deref(), Some(basic("robot", &p2).as_str()));
    let (status, body) = write(&alice, Method::POST, test_path, json!({}), &mut responses).await;
    assert_eq!(status, 200, "{body}");

    let everything_text = format!("{}\n{}\n{}", responses.join("\n"), served.logs(), admin_log(&t).await);
    for s in [&p1, &p2] {
        assert!(!everything_text.contains(s.as_str()) && !everything_text.contains(&basic("robot", s)[6..]));
    }
    assert_eq!(served.terminate().await, 0);
}

/// The suite-wide secret scan (tests/common/leaks.rs) itself: a planted issued token in a serve
/// log, a planted credential secret in a row and a planted recorded vault value are each found;
/// displayed prefixes are not. The plants are removed again, so the scan at the end of this
/// test (the log and the database) passes.
#[tokio::test]
async fn the_secret_scan_finds_planted_leaks_in_a_log_a_row_and_a_text() {
    use common::leaks;
    use std::io::Write;
    let t = TestDb::new().await;
    ok(cmd(&t, None), &["tenant", "create", "acme", "--name", "Acme"]).await;
    let m = provision(&t.url, "acme").await;
    let served = Served::start(gatehouse(Some(&t.url))).await;
    let clean = served.logs();
    assert!(leaks::find(&clean).is_empty(), "{clean}");

    // A log line with the whole token.
    std::fs::OpenOptions::new()
        .append(true)
        .open(&served.log)
        .unwrap()
        .write_all(format!("planted {}\n", m.token).as_bytes())
        .unwrap();
    assert_eq!(leaks::find(&served.logs()), vec![m.token.clone()]);
    let planted = served.logs();
    let caught = std::panic::catch_unwind(|| leaks::check("the planted log", &planted));
    assert!(caught.is_err(), "check fails the test on a leak");
    std::fs::write(&served.log, &clean).unwrap();

    // A row with the service credential's secret.
    let mut owner = t.owner_conn().await;
    owner.execute("CREATE TABLE planted (x text)").await.unwrap();
    sqlx::query("INSERT INTO planted VALUES ($1)").bind(format!("oops {}", m.client_secret)).execute(&mut owner).await.unwrap();
    let rows = leaks::database_text(t.url.expose()).await;
    assert_eq!(leaks::find(&rows), vec![m.client_secret.clone()], "{rows}");
    owner.execute("DROP TABLE planted").await.unwrap();
    assert!(leaks::find(&leaks::database_text(t.url.expose()).await).is_empty());

    // A value the test handed over as a secret, recorded.
    let value = secret("api-key");
    assert_eq!(leaks::find(&format!("Authorization: Bearer {value}")), vec![value.clone()]);
    // What may be shown: a prefix, a longer base64url run, a token inside another word.
    let shown = format!("{}… and {}B and x{}", &m.token[..12], m.token, m.token);
    assert!(leaks::find(&shown).is_empty(), "{shown}");
}
