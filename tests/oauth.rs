//! Downstream OAuth end to end: the npm `oidc-provider` on loopback is the connector's
//! authorization server, and a real HTTP API on loopback accepts only access tokens that the
//! provider's userinfo endpoint vouches for. People connect through `authorize_connector`'s
//! signed link and through mailed connect links; duplicate callbacks race (one claim); two
//! server processes race to refresh (the provider sees one refresh); disconnect revokes at the
//! provider; and no token reaches a log line, an admin-log row or a response.

mod common;

use common::{
    Machine, OidcPeer, Served, TestDb, admin_log_text as admin_log,
    browser::Browser,
    dev_sign_in,
    downstream::{GateOptions, Seen, expire_access_tokens, introspect, protected_mcp, stats, walk_to_callback},
    free_port, gatehouse, json_path as json_file, mcp_tool as tool, run, run_ok as ok, vault_key as key,
};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use sqlx::{Connection, Executor};

const CLIENT: &str = "gatehouse-downstream";

fn cmd(t: &TestDb, keys: &str) -> tokio::process::Command {
    let mut c = gatehouse(Some(&t.url));
    c.env("GATEHOUSE_VAULT_KEYS", keys);
    c
}

/// A real HTTP API that answers `GET /v1/me` only for access tokens the provider vouches for
/// (401 otherwise), with the provider's subject: a Bearer token through the provider's userinfo
/// endpoint; a DPoP-bound one (RFC 9449, when the connector discovered a provider offering it)
/// through introspection, admitted only with a valid fresh proof of its key.
async fn protected_api(issuer: &str) -> (String, Seen) {
    use axum::{extract::Request, http::StatusCode, response::IntoResponse};
    let seen: Seen = Default::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let origin = format!("http://{}", listener.local_addr().unwrap());
    let (log, issuer, jtis) = (seen.clone(), issuer.to_owned(), common::downstream::Jtis::default());
    let own = origin.clone();
    let app = axum::Router::new().fallback(move |request: Request| {
        let (log, issuer, jtis, url) = (log.clone(), issuer.clone(), jtis.clone(), format!("{own}{}", request.uri().path()));
        async move {
            let Some((scheme, token)) = common::downstream::presented(request.headers()) else {
                return (StatusCode::UNAUTHORIZED, "bearer token required").into_response();
            };
            log.lock().unwrap().push(token.clone());
            let sub = if scheme == "dpop" {
                let claims = introspect(&issuer, &token).await;
                if claims["active"] != true {
                    return (StatusCode::UNAUTHORIZED, "the provider does not vouch for this token").into_response();
                }
                let request_line = (request.method().as_str(), url.as_str());
                if let Err(why) =
                    common::downstream::check_binding(&scheme, &claims, request.headers(), request_line, &token, &jtis)
                {
                    return (StatusCode::UNAUTHORIZED, why).into_response();
                }
                claims["sub"].clone()
            } else {
                let r = common::http().get(format!("{issuer}/me")).bearer_auth(&token).send().await.unwrap();
                if r.status() != 200 {
                    return (StatusCode::UNAUTHORIZED, "the provider does not vouch for this token").into_response();
                }
                r.json::<Value>().await.unwrap()["sub"].clone()
            };
            axum::Json(json!({ "sub": sub })).into_response()
        }
    });
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("{origin}/v1"), seen)
}

/// An HTTP API connector whose authorization server is named by configured endpoints.
fn api_connector(base: &str, issuer: &str, grant: &str) -> Value {
    json!({ "base_url": base, "timeout_ms": 5000,
        "auth": { "type": "oauth", "grant": grant, "client_id": CLIENT, "scopes": ["openid", "email"],
                  "authorization_endpoint": format!("{issuer}/auth"), "token_endpoint": format!("{issuer}/token"),
                  "revocation_endpoint": format!("{issuer}/token/revocation") },
        "tools": [{ "name": "me", "description": "Who am I", "method": "GET", "path": "/me", "read_only": true,
            "input_schema": { "type": "object", "additionalProperties": false, "properties": {} } }] })
}

/// Machine credentials whose token Ann made in the console: it carries her, so her personal
/// grant applies to it.
async fn anns_machine(t: &TestDb, ann: &Browser) -> Machine {
    let r = ann.write(Method::POST, "/api/v1/tenants/acme/tokens", json!({ "name": "ann's agent" })).await;
    assert_eq!(r.status(), 201);
    let created: Value = r.json().await.unwrap();
    let sc = common::cli(&t.url, &["service-credential", "create", "--tenant", "acme", "--name", "ci"]).await;
    Machine {
        client_id: sc[1].clone(),
        client_secret: sc[2].clone(),
        token: created["secret"].as_str().unwrap().to_owned(),
        token_id: created["token"]["id"].as_str().unwrap().to_owned(),
    }
}

#[tokio::test]
async fn a_personal_grant_is_connected_once_refreshed_once_across_replicas_and_revoked_at_disconnect() {
    let t = TestDb::new().await;
    let keys = key("k1");
    let port_a = free_port();
    let base_a = format!("http://127.0.0.1:{port_a}");
    let provider = OidcPeer::start_with(
        &base_a,
        &[("OIDC_DOWNSTREAM_CLIENT_ID", CLIENT), ("OIDC_REVOCATION", "1"), ("OIDC_TEST_STATS", "1")],
    )
    .await;
    let (api, seen) = protected_api(&provider.issuer).await;
    ok(cmd(&t, &keys), &["tenant", "create", "acme", "--name", "Acme", "--owner-email", "ann@example.test"]).await;
    ok(cmd(&t, &keys), &["workspace", "create", "--tenant", "acme", "main"]).await;
    let file = json_file(&api_connector(&api, &provider.issuer, "personal"));
    ok(
        cmd(&t, &keys),
        &["connector", "add", "--tenant", "acme", "--workspace", "main", "--id", "crm", "--kind", "http_api", "--config", &file],
    )
    .await;

    let a = Served::start_on(cmd(&t, &keys), port_a).await;
    let b = Served::start(cmd(&t, &keys)).await;
    let ann = dev_sign_in(&a, "ann@example.test").await;
    let mut responses: Vec<String> = Vec::new();
    let machine = anns_machine(&t, &ann).await;
    let (mcp_a, mcp_b) = (format!("{}/t/acme/w/main/mcp", a.base), format!("{}/t/acme/w/main/mcp", b.base));
    let me = json!({ "address": "crm.me", "args": {} });

    // Not connected: the call says so, and authorize_connector hands out a signed link.
    let (err, body, raw) = tool(&mcp_a, &machine, "call_tool", me.clone()).await;
    responses.push(raw);
    assert!(err && body["error"]["code"] == "auth_required", "{body}");
    let (err, body, raw) = tool(&mcp_b, &machine, "authorize_connector", json!({ "connector": "crm" })).await;
    responses.push(raw);
    assert!(!err, "{body}");
    assert_eq!(body["status"], "missing", "{body}");
    let link = body["connect_url"].as_str().unwrap().replace(&b.base, &a.base);
    assert!(link.starts_with(&format!("{}/oauth/connect?", a.base)), "{link}");

    // The link is signed: any change to it is refused, and so is another signed-in person.
    let tampered = link.replace("&c=crm", "&c=crn");
    let r = ann.client.get(&tampered).send().await.unwrap();
    assert_eq!(r.status(), 403, "a tampered link");
    let bob = dev_sign_in(&a, "bob@example.test").await;
    let r = bob.client.get(&link).send().await.unwrap();
    assert_eq!(r.status(), 403, "another person");

    // Ann follows it and authorizes at the provider; duplicate callbacks race: one claim wins.
    let callback = walk_to_callback(&ann, &link, "ann-at-crm").await;
    // The callback replayed in another person's browser consumes nothing.
    let r = bob.client.get(&callback).send().await.unwrap();
    assert_eq!(r.status(), 409, "only the member who started the flow may finish it");
    let r = common::http().get(&callback).send().await.unwrap();
    assert_eq!(r.status(), 409, "nor may a browser signed in as nobody");
    let mut racers = Vec::new();
    for _ in 0..4 {
        let (client, callback) = (ann.client.clone(), callback.clone());
        racers.push(tokio::spawn(async move {
            let r = client.get(&callback).send().await.unwrap();
            (r.status(), r.text().await.unwrap())
        }));
    }
    let mut outcomes = Vec::new();
    for r in racers {
        let (status, text) = r.await.unwrap();
        responses.push(text.clone());
        outcomes.push((status, text.contains("flow_claimed")));
    }
    assert_eq!(outcomes.iter().filter(|(s, _)| *s == StatusCode::OK).count(), 1, "{outcomes:?}");
    assert!(outcomes.iter().filter(|(s, _)| *s != StatusCode::OK).all(|(s, claimed)| *s == StatusCode::CONFLICT && *claimed));

    // Both replicas now call the API with the provider's token, and only with it.
    for url in [&mcp_a, &mcp_b] {
        let (err, body, raw) = tool(url, &machine, "call_tool", me.clone()).await;
        responses.push(raw);
        assert!(!err, "{body}");
        assert_eq!(body["sub"], "ann-at-crm");
    }
    let (_, body, raw) = tool(&mcp_a, &machine, "authorize_connector", json!({ "connector": "crm" })).await;
    responses.push(raw);
    assert_eq!(body["status"], "connected", "{body}");
    let first_token = seen.lock().unwrap().last().cloned().unwrap();
    let r = ann
        .client
        .get(format!("{}/api/v1/tenants/acme/workspaces/main/connectors/crm/oauth/personal", a.base))
        .send()
        .await
        .unwrap();
    let grant: Value = r.json().await.unwrap();
    responses.push(grant.to_string());
    assert_eq!(grant["status"], "active", "{grant}");

    // An hour passes: both replicas find the token expiring and race to refresh it, each with
    // several calls in flight. The provider sees exactly one refresh request.
    expire_access_tokens(&t).await;
    let mut calls = Vec::new();
    for i in 0..6 {
        let (url, machine, me) = (if i % 2 == 0 { mcp_a.clone() } else { mcp_b.clone() }, machine.clone(), me.clone());
        calls.push(tokio::spawn(async move { tool(&url, &machine, "call_tool", me).await }));
    }
    for c in calls {
        let (err, body, raw) = c.await.unwrap();
        responses.push(raw);
        assert!(!err, "{body}");
        assert_eq!(body["sub"], "ann-at-crm");
    }
    let s = stats(&provider.issuer).await;
    assert_eq!(s["refresh_requests"], 1, "one refresh sent across both replicas: {s}");
    assert_eq!(s["refresh_failures"], 0, "{s}");
    let second_token = seen.lock().unwrap().last().cloned().unwrap();
    assert_ne!(first_token, second_token, "calls now carry the refreshed token");

    // Disconnect: the grant is gone for every replica at once, and revoked at the provider.
    let path = "/api/v1/tenants/acme/workspaces/main/connectors/crm/oauth/personal";
    let r = ann.write(Method::DELETE, path, json!({})).await;
    assert_eq!(r.status(), 200);
    let body: Value = r.json().await.unwrap();
    responses.push(body.to_string());
    assert_eq!(
        body["revocation"],
        "revoked",
        "{body} {}",
        a.logs().lines().filter(|l| l.contains("revocation")).collect::<Vec<_>>().join("\n")
    );
    assert!(stats(&provider.issuer).await["revocations"].as_u64().unwrap() >= 1);
    let r = common::http().get(format!("{}/me", provider.issuer)).bearer_auth(&second_token).send().await.unwrap();
    assert_eq!(r.status(), 401, "the provider no longer honours the revoked access token");
    for url in [&mcp_b, &mcp_a] {
        let (err, body, raw) = tool(url, &machine, "call_tool", me.clone()).await;
        responses.push(raw);
        assert!(err && body["error"]["code"] == "auth_required", "{body}");
    }
    let r = ann.write(Method::DELETE, path, json!({})).await;
    assert_eq!(r.status(), 404, "nothing left to disconnect");

    // Connect again, then the provider goes away: the refresh fails, the spent refresh token
    // is never retried, and the grant is dead (auth_required) on every replica.
    let (_, body, _) = tool(&mcp_a, &machine, "authorize_connector", json!({ "connector": "crm" })).await;
    let link = body["connect_url"].as_str().unwrap().to_owned();
    let landing = ann.walk(&link, |f| (f == "login").then(|| "ann-at-crm".to_owned())).await;
    assert_eq!(landing.status, StatusCode::OK, "{landing:?}");
    responses.push(landing.body);
    let (err, body, raw) = tool(&mcp_b, &machine, "call_tool", me.clone()).await;
    responses.push(raw);
    assert!(!err, "{body}");
    let issuer = provider.issuer.clone();
    drop(provider);
    expire_access_tokens(&t).await;
    let (err, body, raw) = tool(&mcp_a, &machine, "call_tool", me.clone()).await;
    responses.push(raw);
    assert!(err && body["error"]["code"] == "auth_required", "{body}");
    let (err, body, raw) = tool(&mcp_b, &machine, "call_tool", me.clone()).await;
    responses.push(raw);
    assert!(err && body["error"]["code"] == "auth_required", "a dead grant on every replica: {body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("authorize_connector"), "{body}");
    assert!(!issuer.is_empty());
    // The failed refresh is an ops failure of the tenant (and so its recurring finding).
    let mut owner = t.owner_conn().await;
    owner.execute("SELECT set_config('gatehouse.platform', 'on', false)").await.unwrap();
    let recorded = common::eventually(std::time::Duration::from_secs(10), || {
        let db = t.db.clone();
        async move {
            let n: i64 = db
                .single_decision(gatehouse::db::Scope::Platform { reason: "test" }, |conn, _| {
                    Box::pin(async move {
                        Ok(sqlx::query_scalar(
                            "SELECT count(*) FROM ops_failures
                             WHERE operation = 'oauth.refresh' AND code = 'unreachable' AND tenant_id IS NOT NULL",
                        )
                        .fetch_one(conn)
                        .await?)
                    })
                })
                .await
                .unwrap();
            n == 1
        }
    })
    .await;
    assert!(recorded, "the failed refresh was not recorded once as an ops failure");
    let failures: Vec<String> = sqlx::query_scalar("SELECT message FROM ops_failures").fetch_all(&mut owner).await.unwrap();
    responses.extend(failures);

    // No token the downstream was shown appears in any log line, admin-log row or response.
    let tokens = seen.lock().unwrap().clone();
    assert!(tokens.len() >= 4);
    let logs = format!("{}\n{}\n{}", a.logs(), b.logs(), admin_log(&t).await);
    for token in &tokens {
        assert!(!logs.contains(token.as_str()), "a token in the logs");
        for r in &responses {
            assert!(!r.contains(token.as_str()), "a token in a response");
        }
    }
    assert!(admin_log(&t).await.contains("oauth.grant_dead"));
}

#[tokio::test]
async fn a_mailed_connect_link_authorizes_a_shared_grant_once() {
    let t = TestDb::new().await;
    let keys = key("k1");
    let port = free_port();
    let base = format!("http://127.0.0.1:{port}");
    let provider = OidcPeer::start_with(&base, &[("OIDC_DOWNSTREAM_CLIENT_ID", CLIENT), ("OIDC_TEST_STATS", "1")]).await;
    let (api, _seen) = protected_api(&provider.issuer).await;
    ok(cmd(&t, &keys), &["tenant", "create", "acme", "--name", "Acme", "--owner-email", "ann@example.test"]).await;
    ok(cmd(&t, &keys), &["workspace", "create", "--tenant", "acme", "main"]).await;
    let file = json_file(&api_connector(&api, &provider.issuer, "shared"));
    ok(
        cmd(&t, &keys),
        &["connector", "add", "--tenant", "acme", "--workspace", "main", "--id", "crm", "--kind", "http_api", "--config", &file],
    )
    .await;
    let served = Served::start_on(cmd(&t, &keys), port).await;
    let machine = common::provision(&t.url, "acme").await;
    let mcp = format!("{}/t/acme/w/main/mcp", served.base);

    // A machine token has no person: authorize_connector says how a person connects instead.
    let (_, body, _) = tool(&mcp, &machine, "authorize_connector", json!({ "connector": "crm" })).await;
    assert_eq!(body["status"], "missing", "{body}");
    assert!(body["message"].as_str().unwrap().contains("connect-links"), "{body}");

    let args =
        ["connect-link", "create", "--tenant", "acme", "--workspace", "main", "--connector", "crm", "--email", "it@example.test"];
    let mut mint = cmd(&t, &keys);
    mint.env("GATEHOUSE_PUBLIC_URL", &base);
    let link_id = ok(mint, &args).await[0].clone();
    let mail: Value = serde_json::from_str(&ok(cmd(&t, &keys), &["outbox", "list", "--tenant", "acme"]).await[0]).unwrap();
    let body = mail["body"].as_str().unwrap();
    let url = body[body.find("http://").unwrap()..].lines().next().unwrap().to_owned();
    // The operator reads the same mail in the console (owners and admins only).
    let ann = dev_sign_in(&served, "ann@example.test").await;
    let page = ann.client.get(format!("{}/console/t/acme/outbox", served.base)).send().await.unwrap();
    assert_eq!(page.status(), 200);
    assert!(page.text().await.unwrap().contains(&url), "the console shows the waiting mail");
    let stranger = dev_sign_in(&served, "eve@example.test").await;
    let page = stranger.client.get(format!("{}/console/t/acme/outbox", served.base)).send().await.unwrap();
    assert_eq!(page.status(), 404, "no member of the tenant");

    // The recipient is no member: the link alone starts the flow. They open it three times and
    // come back three times at once: one flow consumes the link, the others are refused.
    let person = Browser::new(&served.base);
    let mut callbacks = Vec::new();
    for _ in 0..3 {
        callbacks.push(walk_to_callback(&person, &url, "it-admin").await);
    }
    let mut racers = Vec::new();
    for callback in callbacks {
        let client = person.client.clone();
        racers.push(tokio::spawn(async move {
            let r = client.get(&callback).send().await.unwrap();
            (r.status(), r.text().await.unwrap())
        }));
    }
    let mut statuses = Vec::new();
    for r in racers {
        let (status, text) = r.await.unwrap();
        statuses.push((status, text.contains("link_used")));
    }
    assert_eq!(statuses.iter().filter(|(s, _)| *s == StatusCode::OK).count(), 1, "{statuses:?}");
    assert!(
        statuses.iter().filter(|(s, _)| *s != StatusCode::OK).all(|(s, used)| *s == StatusCode::CONFLICT && *used),
        "{statuses:?}"
    );
    let listed = ok(cmd(&t, &keys), &["connect-link", "list", "--tenant", "acme", "--history"]).await;
    assert!(listed[0].starts_with(&format!("{link_id}\tused\tcrm\tit@example.test\t")), "{listed:?}");
    // Following a used link again is refused before anything starts.
    let r = person.client.get(&url).send().await.unwrap();
    assert_eq!(r.status(), 409);

    // The workspace's shared grant now serves every caller.
    let (err, body, _) = tool(&mcp, &machine, "call_tool", json!({ "address": "crm.me", "args": {} })).await;
    assert!(!err, "{body}");
    assert_eq!(body["sub"], "it-admin");
}

#[tokio::test]
async fn a_remote_mcp_server_names_its_authorization_server_and_gets_the_workspace_grant() {
    let t = TestDb::new().await;
    let keys = key("k1");
    let port = free_port();
    let base = format!("http://127.0.0.1:{port}");
    let provider = OidcPeer::start_with(
        &base,
        &[("OIDC_DOWNSTREAM_CLIENT_ID", CLIENT), ("OIDC_REVOCATION", "1"), ("OIDC_REGISTRATION", "1")],
    )
    .await;
    let everything = common::Everything::start().await;
    let upstream = everything.url.trim_end_matches("/mcp").to_owned();
    let options = GateOptions::default();
    let admitted = options.admitted.clone();
    let (mcp_url, seen) = protected_mcp(&provider.issuer, &upstream, options).await;
    ok(cmd(&t, &keys), &["tenant", "create", "acme", "--name", "Acme", "--owner-email", "ann@example.test"]).await;
    ok(cmd(&t, &keys), &["workspace", "create", "--tenant", "acme", "main"]).await;
    // No issuer, no endpoints, no client: the server's protected resource metadata names its
    // authorization server, whose metadata names the endpoints, where Gatehouse registers.
    let file = json_file(&json!({ "auth": { "type": "oauth", "grant": "shared", "scopes": ["openid"] } }));
    let add = ["connector", "add", "--tenant", "acme", "--workspace", "main", "--id", "everything", "--kind", "remote_mcp"];
    let mut without_vault = gatehouse(Some(&t.url));
    without_vault.args(add).args(["--url", &mcp_url, "--config", &file]);
    let (code, _, err) = run(without_vault).await;
    assert!(code == 1 && err.contains("vault_disabled"), "OAuth tokens need the vault: {err}");
    let mut with_vault = cmd(&t, &keys);
    with_vault.args(add).args(["--url", &mcp_url, "--config", &file]);
    assert_eq!(run(with_vault).await.0, 0);

    let served = Served::start_on(cmd(&t, &keys), port).await;
    let machine = common::provision(&t.url, "acme").await;
    let mcp = format!("{}/t/acme/w/main/mcp", served.base);
    let echo = json!({ "address": "everything.echo", "args": { "message": "through OAuth" } });
    let (err, body, _) = tool(&mcp, &machine, "call_tool", echo.clone()).await;
    assert!(err && body["error"]["code"] == "auth_required", "{body}");
    assert!(seen.lock().unwrap().is_empty(), "nothing was sent without a token");

    // A person with credential_administration connects the workspace's grant.
    let ann = dev_sign_in(&served, "ann@example.test").await;
    let path = "/api/v1/tenants/acme/workspaces/main/connectors/everything/oauth/shared";
    let r = ann.write(Method::POST, &format!("{path}/connect"), json!({})).await;
    assert_eq!(r.status(), 200);
    let url = r.json::<Value>().await.unwrap()["url"].as_str().unwrap().to_owned();
    let landing = ann.walk(&url, |f| (f == "login").then(|| "ops".to_owned())).await;
    assert_eq!(landing.status, StatusCode::OK, "{landing:?}");
    assert!(landing.url.starts_with(&format!("{}/oauth/callback", served.base)), "{landing:?}");

    // Tools are listed and called over the MCP session with the provider's token.
    let (err, body, _) = tool(&mcp, &machine, "search_tools", json!({ "query": "echo" })).await;
    assert!(!err, "{body}");
    assert_eq!(body["results"][0]["address"], "everything.echo", "{body}");
    let (err, body, raw) = tool(&mcp, &machine, "call_tool", echo).await;
    assert!(!err, "{body}");
    assert!(raw.contains("through OAuth"), "{raw}");
    let r = ann.client.get(format!("{}{path}", served.base)).send().await.unwrap();
    let grant: Value = r.json().await.unwrap();
    // The token is bound to the server (RFC 8707), so the provider's userinfo refuses it: no label.
    assert_eq!(grant["status"], "active", "{grant}");
    let tokens = seen.lock().unwrap().clone();
    assert!(!tokens.is_empty());
    for token in &tokens {
        assert!(!served.logs().contains(token.as_str()) && !raw.contains(token.as_str()));
    }
    // The provider offers DPoP (RFC 9449; oidc-provider's default), so the grant's token is
    // bound to the grant's own key, and the gate admitted each request only with the DPoP
    // scheme and a fresh proof of that key (its method, URL and token, no jti twice).
    let claims = introspect(&provider.issuer, tokens.last().unwrap()).await;
    assert!(claims["cnf"]["jkt"].is_string(), "a DPoP-bound token: {claims}");

    // It registered itself once (RFC 7591), as a client of its own, and reuses that client.
    let registered = || async {
        let mut owner = t.owner_conn().await;
        let mut tx = owner.begin().await.unwrap();
        tx.execute("SELECT set_config('gatehouse.platform', 'on', true)").await.unwrap();
        let ids: Vec<String> = sqlx::query_scalar("SELECT client_id FROM oauth_clients").fetch_all(&mut *tx).await.unwrap();
        ids
    };
    let ids = registered().await;
    assert_eq!(ids.len(), 1);
    assert_ne!(ids[0], CLIENT, "not the static client");
    let r = ann.write(Method::POST, &format!("{path}/connect"), json!({})).await;
    let url = r.json::<Value>().await.unwrap()["url"].as_str().unwrap().to_owned();
    let landing = ann.walk(&url, |f| (f == "login").then(|| "ops".to_owned())).await;
    assert_eq!(landing.status, StatusCode::OK, "{landing:?}");
    assert_eq!(registered().await, ids, "the registration is reused");

    // An hour passes: the refresh carries a proof of the same key (the provider binds a public
    // client's refresh token to it and refuses any other), read back from the sealed grant by
    // a replica that never saw the exchange; the new token is bound to the same key.
    let echo = json!({ "address": "everything.echo", "args": { "message": "reconnected" } });
    let (err, body, _) = tool(&mcp, &machine, "call_tool", echo).await;
    assert!(!err, "{body}");
    let before = seen.lock().unwrap().last().cloned().unwrap();
    let bound_before = introspect(&provider.issuer, &before).await["cnf"]["jkt"].clone();
    assert!(bound_before.is_string(), "the new grant's token is bound too");
    let other = Served::start(cmd(&t, &keys)).await;
    expire_access_tokens(&t).await;
    let echo = json!({ "address": "everything.echo", "args": { "message": "after a refresh" } });
    let (err, body, raw) = tool(&format!("{}/t/acme/w/main/mcp", other.base), &machine, "call_tool", echo).await;
    assert!(!err, "{body}");
    assert!(raw.contains("after a refresh"), "{raw}");
    let refreshed = seen.lock().unwrap().last().cloned().unwrap();
    assert_ne!(refreshed, before, "a new access token");
    let claims = introspect(&provider.issuer, &refreshed).await;
    assert_eq!(claims["cnf"]["jkt"], bound_before, "bound to the grant's key: {claims}");

    // The first replica still pools a session under the token from before the refresh: its
    // next call opens one under the refreshed grant and ends the old session with a DELETE,
    // which the gate lets through only with a valid proof of the grant's key.
    let echo = json!({ "address": "everything.echo", "args": { "message": "back on the first replica" } });
    let (err, body, _) = tool(&mcp, &machine, "call_tool", echo).await;
    assert!(!err, "{body}");
    let deleted = common::eventually(std::time::Duration::from_secs(10), || async {
        admitted.lock().unwrap().iter().any(|(method, scheme)| method == "DELETE" && scheme == "dpop")
    })
    .await;
    let admitted = admitted.lock().unwrap().clone();
    assert!(deleted, "the old session's DELETE was admitted with a proof: {admitted:?}");
    assert!(admitted.iter().all(|(_, scheme)| scheme == "dpop"), "every request proved the key: {admitted:?}");
}

/// RFC 9207 (SEP-2468): the provider promises `iss` on its authorization responses, so a
/// callback without it, or with any other issuer string (a trailing slash included), is a
/// possible mix-up and is refused: 403 `issuer_mismatch`, an ops failure, and nothing written
/// (the flow stays unclaimed, so the genuine response still completes it).
#[tokio::test]
async fn an_authorization_response_must_name_the_recorded_issuer_exactly() {
    let t = TestDb::new().await;
    let keys = key("k1");
    let port = free_port();
    let base = format!("http://127.0.0.1:{port}");
    let provider = OidcPeer::start_with(&base, &[("OIDC_DOWNSTREAM_CLIENT_ID", CLIENT)]).await;
    let (api, seen) = protected_api(&provider.issuer).await;
    ok(cmd(&t, &keys), &["tenant", "create", "acme", "--name", "Acme", "--owner-email", "ann@example.test"]).await;
    ok(cmd(&t, &keys), &["workspace", "create", "--tenant", "acme", "main"]).await;
    // The issuer is named, so its metadata (which promises `iss`) gives the endpoints.
    let mut connector = api_connector(&api, &provider.issuer, "personal");
    connector["auth"] = json!({ "type": "oauth", "grant": "personal", "client_id": CLIENT, "issuer": provider.issuer,
                                "scopes": ["openid", "email"] });
    let file = json_file(&connector);
    ok(
        cmd(&t, &keys),
        &["connector", "add", "--tenant", "acme", "--workspace", "main", "--id", "crm", "--kind", "http_api", "--config", &file],
    )
    .await;
    let a = Served::start_on(cmd(&t, &keys), port).await;
    let ann = dev_sign_in(&a, "ann@example.test").await;
    let machine = anns_machine(&t, &ann).await;
    let mcp = format!("{}/t/acme/w/main/mcp", a.base);
    let (_, body, _) = tool(&mcp, &machine, "authorize_connector", json!({ "connector": "crm" })).await;
    let link = body["connect_url"].as_str().unwrap().to_owned();
    let callback = walk_to_callback(&ann, &link, "ann-at-crm").await;

    // The genuine response names the provider's issuer.
    let genuine = reqwest::Url::parse(&callback).unwrap();
    let iss = genuine.query_pairs().find(|(k, _)| k == "iss").map(|(_, v)| v.into_owned());
    assert_eq!(iss.as_deref(), Some(provider.issuer.as_str()), "the provider sends iss: {callback}");
    let with_iss = |value: Option<&str>| {
        let mut url = genuine.clone();
        let pairs: Vec<(String, String)> =
            genuine.query_pairs().filter(|(k, _)| k != "iss").map(|(k, v)| (k.into(), v.into())).collect();
        let mut q = url.query_pairs_mut();
        q.clear();
        for (k, v) in &pairs {
            q.append_pair(k, v);
        }
        if let Some(v) = value {
            q.append_pair("iss", v);
        }
        drop(q);
        url.to_string()
    };
    let issuer = provider.issuer.clone();
    for forged in
        [None, Some(format!("{issuer}/")), Some(issuer.replace("127.0.0.1", "localhost")), Some("https://evil.example".into())]
    {
        let r = ann.client.get(with_iss(forged.as_deref())).send().await.unwrap();
        let status = r.status();
        let text = r.text().await.unwrap();
        assert_eq!(status, StatusCode::FORBIDDEN, "iss {forged:?} was not refused: {text}");
        assert!(text.contains("issuer_mismatch"), "{text}");
        let (err, body, _) = tool(&mcp, &machine, "call_tool", json!({ "address": "crm.me", "args": {} })).await;
        assert!(err && body["error"]["code"] == "auth_required", "a refused response connected nothing: {body}");
    }
    let recorded = common::eventually(std::time::Duration::from_secs(10), || {
        let t = &t;
        async move { common::downstream::count(t, "SELECT count(*) FROM ops_failures WHERE code = 'issuer_mismatch'").await == 4 }
    })
    .await;
    assert!(recorded, "each refusal is an ops failure");

    // Nothing was claimed: the genuine response still completes the flow.
    let r = ann.client.get(&callback).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::OK, "{}", r.text().await.unwrap());
    let (err, body, _) = tool(&mcp, &machine, "call_tool", json!({ "address": "crm.me", "args": {} })).await;
    assert!(!err, "{body}");
    assert_eq!(body["sub"], "ann-at-crm");
    // The discovered provider offers DPoP, so the API was shown a bound token and a proof.
    let shown = seen.lock().unwrap().last().cloned().unwrap();
    assert!(introspect(&provider.issuer, &shown).await["cnf"]["jkt"].is_string());
}

/// A remote MCP server whose authorization server (oidc-provider) lets Gatehouse's
/// confidential client use the client credentials grant: configured with
/// `"flow": "client_credentials"` and its secret, the connector works with nobody connecting
/// it. The first call obtains the token (one request to the provider), later calls on both
/// replicas use it, and once it is about to expire, concurrent calls on both replicas renew
/// it with exactly one more request. The grant shows as the workspace's shared grant; no
/// connect flow can be started for it; and neither the secret nor a token reaches a response,
/// a log line or the admin log.
#[tokio::test]
async fn client_credentials_need_no_person_and_are_renewed_once_across_replicas() {
    let t = TestDb::new().await;
    let keys = key("k1");
    let port = free_port();
    let base = format!("http://127.0.0.1:{port}");
    let secret = "cc-secret-0123456789";
    let provider = OidcPeer::start_with(
        &base,
        &[
            ("OIDC_DOWNSTREAM_CLIENT_ID", CLIENT),
            ("OIDC_DOWNSTREAM_CLIENT_SECRET", secret),
            ("OIDC_CLIENT_CREDENTIALS", "1"),
            ("OIDC_TEST_STATS", "1"),
        ],
    )
    .await;
    let everything = common::Everything::start().await;
    let upstream = everything.url.trim_end_matches("/mcp").to_owned();
    let (mcp_url, seen) = protected_mcp(&provider.issuer, &upstream, GateOptions::default()).await;
    ok(cmd(&t, &keys), &["tenant", "create", "acme", "--name", "Acme", "--owner-email", "ann@example.test"]).await;
    ok(cmd(&t, &keys), &["workspace", "create", "--tenant", "acme", "main"]).await;

    // Client credentials are a shared grant of a confidential client: anything else is refused.
    let add = ["connector", "add", "--tenant", "acme", "--workspace", "main", "--id", "everything", "--kind", "remote_mcp"];
    let personal = json_file(&json!({ "auth": { "type": "oauth", "grant": "personal", "flow": "client_credentials",
        "client_id": CLIENT, "confidential": true } }));
    let mut refused = cmd(&t, &keys);
    refused.args(add).args(["--url", &mcp_url, "--config", &personal]);
    let (code, _, err) = run(refused).await;
    assert!(code != 0 && err.contains("flow"), "{err}");
    let file = json_file(&json!({ "auth": { "type": "oauth", "grant": "shared", "flow": "client_credentials",
        "client_id": CLIENT, "confidential": true } }));
    let mut added = cmd(&t, &keys);
    added.args(add).args(["--url", &mcp_url, "--config", &file]);
    assert_eq!(run(added).await.0, 0);
    let slot = ["credential", "set", "--tenant", "acme", "--workspace", "main", "--connector", "everything", "--oauth-client"];
    let mut set = cmd(&t, &keys);
    set.args(slot).args(["--field", "client_secret"]).env("GATEHOUSE_FIELD_CLIENT_SECRET", secret);
    assert_eq!(run(set).await.0, 0);

    let a = Served::start_on(cmd(&t, &keys), port).await;
    let b = Served::start(cmd(&t, &keys)).await;
    let machine = common::provision(&t.url, "acme").await;
    let (mcp_a, mcp_b) = (format!("{}/t/acme/w/main/mcp", a.base), format!("{}/t/acme/w/main/mcp", b.base));
    let echo = json!({ "address": "everything.echo", "args": { "message": "with client credentials" } });
    let mut responses = Vec::new();

    // The first call gets the token itself; the other replica uses the same grant.
    for url in [&mcp_a, &mcp_b, &mcp_a] {
        let (err, body, raw) = tool(url, &machine, "call_tool", echo.clone()).await;
        assert!(!err, "{body}");
        assert!(raw.contains("with client credentials"), "{raw}");
        responses.push(raw);
    }
    let s = stats(&provider.issuer).await;
    assert_eq!(s["client_credentials_requests"], 1, "{s}");
    let cc: Vec<&Value> = s["tokens"].as_array().unwrap().iter().filter(|t| t["grant_type"] == "client_credentials").collect();
    assert_eq!(cc[0]["auth"], "client_secret_basic", "{s}");
    assert_eq!(cc[0]["resource"], mcp_url.as_str(), "the token is asked for the server (RFC 8707): {s}");
    let first = seen.lock().unwrap().last().cloned().unwrap();

    // The token is about to expire: six calls on both replicas at once renew it once.
    expire_access_tokens(&t).await;
    let mut calls = Vec::new();
    for i in 0..6 {
        let (url, machine, echo) = (if i % 2 == 0 { mcp_a.clone() } else { mcp_b.clone() }, machine.clone(), echo.clone());
        calls.push(tokio::spawn(async move { tool(&url, &machine, "call_tool", echo).await }));
    }
    for c in calls {
        let (err, body, raw) = c.await.unwrap();
        assert!(!err, "{body}");
        responses.push(raw);
    }
    let s = stats(&provider.issuer).await;
    assert_eq!(s["client_credentials_requests"], 2, "one renewal across both replicas: {s}");
    let renewed = seen.lock().unwrap().last().cloned().unwrap();
    assert_ne!(renewed, first, "calls now carry the new token");
    // The provider offers DPoP: both tokens are bound, to the one key the grant keeps sealed
    // (the gate admitted every call only with a fresh proof of it).
    let (before, after) = (introspect(&provider.issuer, &first).await, introspect(&provider.issuer, &renewed).await);
    assert!(before["cnf"]["jkt"].is_string(), "{before}");
    assert_eq!(before["cnf"]["jkt"], after["cnf"]["jkt"], "{after}");

    // The workspace's shared grant, labelled with the client; no person connects it.
    let ann = dev_sign_in(&a, "ann@example.test").await;
    let path = "/api/v1/tenants/acme/workspaces/main/connectors/everything/oauth/shared";
    let grant: Value = ann.client.get(format!("{}{path}", a.base)).send().await.unwrap().json().await.unwrap();
    assert_eq!(grant["status"], "active", "{grant}");
    responses.push(grant.to_string());
    let r = ann.write(Method::POST, &format!("{path}/connect"), json!({})).await;
    assert_eq!(r.status(), 409);
    let refusal: Value = r.json().await.unwrap();
    assert_eq!(refusal["code"], "oauth_client_credentials", "{refusal}");

    let tokens = seen.lock().unwrap().clone();
    let logs = format!("{}{}{}", a.logs(), b.logs(), admin_log(&t).await);
    for text in responses.iter().chain(std::iter::once(&logs)) {
        assert!(!text.contains(secret), "the client secret leaked");
        for token in &tokens {
            assert!(!text.contains(token.as_str()), "a token leaked");
        }
    }
    assert!(admin_log(&t).await.contains("oauth.connect"), "the grant's creation is in the admin log");
}
