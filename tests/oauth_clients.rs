//! How Gatehouse is a downstream's OAuth client, against the npm `oidc-provider` on loopback:
//! a static confidential client whose secret is sealed in the vault (client_secret_basic, and
//! client_secret_post when that is all the server advertises); the RFC 8707 resource found
//! through a 401's `WWW-Authenticate` and checked against the connector's URL; the sweep
//! settling revocation intents a crash left; and a member who lost the permission before the
//! callback. Client ID Metadata Documents: tests/oauth_cimd.rs.

mod common;

use common::{
    OidcPeer, Served, TestDb, admin_log_text as admin_log, dev_sign_in,
    downstream::{
        GateOptions, add_remote, as_owner, count, expire_access_tokens, introspect, protected_mcp, stats, tenant,
        vault_cmd as cmd, walk_to_callback,
    },
    eventually, free_port, mcp_tool as tool, run_ok as ok, vault_key as key,
};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use std::time::Duration;

const CLIENT: &str = "gatehouse-downstream";
const SECRET: &str = "downstream-client-secret-5b1e9c";

fn grant_path(id: &str) -> String {
    format!("/api/v1/tenants/acme/workspaces/main/connectors/{id}/oauth/shared")
}

/// A signed connect URL for the shared grant of `id`, made by `b`.
async fn connect_url(b: &common::browser::Browser, id: &str) -> String {
    let r = b.write(Method::POST, &format!("{}/connect", grant_path(id)), json!({})).await;
    assert_eq!(r.status(), 200);
    r.json::<Value>().await.unwrap()["url"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn a_confidential_client_finds_its_resource_from_a_401_and_authenticates_everywhere_with_its_sealed_secret() {
    let t = TestDb::new().await;
    let keys = key("k1");
    let port = free_port();
    let base = format!("http://127.0.0.1:{port}");
    let provider = OidcPeer::start_with(
        &base,
        &[
            ("OIDC_DOWNSTREAM_CLIENT_ID", CLIENT),
            ("OIDC_DOWNSTREAM_CLIENT_SECRET", SECRET),
            ("OIDC_REVOCATION", "1"),
            ("OIDC_TEST_STATS", "1"),
        ],
    )
    .await;
    let everything = common::Everything::start().await;
    let upstream = everything.url.trim_end_matches("/mcp").to_owned();
    // The metadata is only where the 401 says: the well-known paths answer 401 too.
    let options = GateOptions { challenge_path: Some("/meta/resource.json"), ..Default::default() };
    let (mcp_url, seen) = protected_mcp(&provider.issuer, &upstream, options).await;
    let elsewhere = GateOptions {
        challenge_path: Some("/meta/resource.json"),
        resource: Some(format!("{mcp_url}/other")),
        ..Default::default()
    };
    let (wrong_url, _) = protected_mcp(&provider.issuer, &upstream, elsewhere).await;
    tenant(&t, &keys).await;
    let auth =
        json!({ "type": "oauth", "grant": "shared", "client_id": CLIENT, "confidential": true, "scopes": ["openid", "mcp"] });
    add_remote(&t, &keys, "everything", &mcp_url, auth.clone()).await;
    add_remote(&t, &keys, "wrong", &wrong_url, auth).await;
    let served = Served::start_on(cmd(&t, &keys), port).await;
    let ann = dev_sign_in(&served, "ann@example.test").await;
    let mut responses = Vec::new();

    // No secret yet: the flow is refused before anyone is sent to the provider.
    let r = ann.client.get(connect_url(&ann, "everything").await).send().await.unwrap();
    assert_eq!(r.status(), 409);
    assert!(r.text().await.unwrap().contains("oauth_client_secret_missing"));

    // The secret goes into the vault and never comes out.
    let secret_path = "/api/v1/tenants/acme/workspaces/main/connectors/everything/oauth/client-secret";
    let r = ann.write(Method::PUT, secret_path, json!({ "client_secret": "" })).await;
    assert_eq!(r.status(), 422, "an empty secret");
    let r = ann.write(Method::PUT, secret_path, json!({ "client_secret": SECRET })).await;
    assert_eq!(r.status(), 200);
    let body = r.text().await.unwrap();
    responses.push(body.clone());
    let meta: Value = serde_json::from_str(&body).unwrap();
    assert_eq!((meta["owner"].as_str(), meta["state"].as_str()), (Some("oauth_client"), Some("set")), "{meta}");
    let r = ann.client.get(format!("{}{secret_path}", served.base)).send().await.unwrap();
    responses.push(r.text().await.unwrap());
    let r = ann
        .client
        .get(format!("{}/api/v1/tenants/acme/workspaces/main/connectors/everything/oauth/client-secre", served.base))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404, "no such grant kind");
    // Someone of another tenant finds nothing; a member without credential_administration may not.
    let eve = dev_sign_in(&served, "eve@example.test").await;
    let r = eve.client.get(format!("{}{secret_path}", served.base)).send().await.unwrap();
    assert_eq!(r.status(), 404, "another tenant's connector");
    let r = ann
        .write(Method::POST, "/api/v1/tenants/acme/invitations", json!({ "email": "bob@example.test", "role": "member" }))
        .await;
    assert_eq!(r.status(), 201);
    let bob = dev_sign_in(&served, "bob@example.test").await;
    let r = bob.write(Method::PUT, secret_path, json!({ "client_secret": "another-secret-value" })).await;
    assert_eq!(r.status(), 403);
    let r = ann.write(Method::PUT, &secret_path.replace("/everything/", "/nope/"), json!({ "client_secret": "x" })).await;
    assert_eq!(r.status(), 404, "no such connector");
    let stored = count(&t, "SELECT count(*) FROM credentials WHERE owner = 'oauth_client' AND envelope LIKE 'v1.k1.%'").await;
    assert_eq!(stored, 1);

    // The metadata the 401 names gives a resource that is not this connector's URL: refused,
    // and nothing is started.
    let r = ann.client.get(connect_url(&ann, "wrong").await).send().await.unwrap();
    assert_eq!(r.status(), 409);
    assert!(r.text().await.unwrap().contains("oauth_resource_mismatch"));
    assert_eq!(count(&t, "SELECT count(*) FROM oauth_flows").await, 0);

    // Connect: the authorization and the code exchange name the resource; the exchange is
    // authenticated with the secret (Basic, the default the metadata allows).
    let callback = walk_to_callback(&ann, &connect_url(&ann, "everything").await, "ops").await;
    let r = ann.client.get(&callback).send().await.unwrap();
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    let s = stats(&provider.issuer).await;
    assert_eq!(s["authorizations"].as_array().unwrap().last().unwrap()["resource"], mcp_url.as_str(), "{s}");
    let code = s["tokens"].as_array().unwrap().iter().find(|t| t["grant_type"] == "authorization_code").unwrap().clone();
    assert_eq!(
        (code["auth"].as_str(), code["resource"].as_str(), code["status"].as_u64()),
        (Some("client_secret_basic"), Some(mcp_url.as_str()), Some(200)),
        "{s}"
    );

    // The token is for this server only, and the gate (checking the audience) lets it through.
    let machine = common::provision(&t.url, "acme").await;
    let mcp = format!("{}/t/acme/w/main/mcp", served.base);
    let echo = json!({ "address": "everything.echo", "args": { "message": "confidential" } });
    let (err, body, raw) = tool(&mcp, &machine, "call_tool", echo.clone()).await;
    responses.push(raw.clone());
    assert!(!err && raw.contains("confidential"), "{body}");
    let token = seen.lock().unwrap().last().cloned().unwrap();
    assert_eq!(introspect(&provider.issuer, &token).await["aud"], mcp_url.as_str());

    // A refresh is authenticated and names the resource too.
    expire_access_tokens(&t).await;
    let (err, body, raw) = tool(&mcp, &machine, "call_tool", echo).await;
    responses.push(raw);
    assert!(!err, "{body}");
    let s = stats(&provider.issuer).await;
    assert_eq!(s["refresh_requests"], 1, "{s}");
    let refresh = s["tokens"].as_array().unwrap().iter().find(|t| t["grant_type"] == "refresh_token").unwrap().clone();
    assert_eq!(
        (refresh["auth"].as_str(), refresh["resource"].as_str(), refresh["status"].as_u64()),
        (Some("client_secret_basic"), Some(mcp_url.as_str()), Some(200)),
        "{s}"
    );

    // Disconnect revokes with the secret, and the intent is settled.
    let r = ann.write(Method::DELETE, &grant_path("everything"), json!({})).await;
    let body = r.text().await.unwrap();
    responses.push(body.clone());
    assert!(body.contains("\"revocation\":\"revoked\""), "{body}");
    let s = stats(&provider.issuer).await;
    let revocations: Vec<&Value> = s["tokens"].as_array().unwrap().iter().filter(|t| t["route"] == "revocation").collect();
    assert_eq!(revocations.len(), 2, "refresh and access token: {s}");
    assert!(revocations.iter().all(|r| r["auth"] == "client_secret_basic" && r["status"] == 200), "{s}");
    let last = seen.lock().unwrap().last().cloned().unwrap();
    assert_eq!(introspect(&provider.issuer, &last).await["active"], false);
    assert_eq!(count(&t, "SELECT count(*) FROM oauth_revocations WHERE outcome = 'revoked' AND envelope IS NULL").await, 1);
    assert_eq!(count(&t, "SELECT count(*) FROM oauth_revocations WHERE outcome IS NULL").await, 0);

    // Removing the secret: the next flow is refused again.
    let r = ann.write(Method::DELETE, secret_path, json!({})).await;
    assert_eq!(r.status(), 200);
    let r = ann.client.get(connect_url(&ann, "everything").await).send().await.unwrap();
    assert_eq!(r.status(), 409);

    // The secret is in no log line, admin-log row or response.
    let logs = format!("{}\n{}", served.logs(), admin_log(&t).await);
    assert!(!logs.contains(SECRET));
    assert!(responses.iter().all(|r| !r.contains(SECRET)));
}

#[tokio::test]
async fn a_confidential_client_posts_its_secret_when_that_is_all_the_server_advertises() {
    let t = TestDb::new().await;
    let keys = key("k1");
    let port = free_port();
    let base = format!("http://127.0.0.1:{port}");
    let provider = OidcPeer::start_with(
        &base,
        &[
            ("OIDC_DOWNSTREAM_CLIENT_ID", CLIENT),
            ("OIDC_DOWNSTREAM_CLIENT_SECRET", SECRET),
            ("OIDC_DOWNSTREAM_AUTH_METHOD", "client_secret_post"),
            ("OIDC_CLIENT_AUTH_METHODS", "none,client_secret_post"),
            ("OIDC_TEST_STATS", "1"),
        ],
    )
    .await;
    let everything = common::Everything::start().await;
    let upstream = everything.url.trim_end_matches("/mcp").to_owned();
    let (mcp_url, _) = protected_mcp(&provider.issuer, &upstream, GateOptions::default()).await;
    tenant(&t, &keys).await;
    let auth =
        json!({ "type": "oauth", "grant": "shared", "client_id": CLIENT, "confidential": true, "scopes": ["openid", "mcp"] });
    add_remote(&t, &keys, "everything", &mcp_url, auth).await;
    // The trusted CLI sets the secret too (value from the environment, never an argument).
    let mut set = cmd(&t, &keys);
    set.env("GATEHOUSE_FIELD_CLIENT_SECRET", SECRET);
    let shown = ok(
        set,
        &[
            "credential",
            "set",
            "--tenant",
            "acme",
            "--workspace",
            "main",
            "--connector",
            "everything",
            "--oauth-client",
            "--field",
            "client_secret",
        ],
    )
    .await;
    assert!(shown[0].starts_with("everything\toauth_client\tset\t1\tk1\t"), "{shown:?}");
    assert!(!shown.join("\n").contains(SECRET));
    // A slot of another connector kind is refused: only a confidential client has this slot.
    let mut wrong = cmd(&t, &keys);
    wrong.env("GATEHOUSE_FIELD_TOKEN", SECRET);
    wrong.args([
        "credential",
        "set",
        "--tenant",
        "acme",
        "--workspace",
        "main",
        "--connector",
        "everything",
        "--oauth-client",
        "--field",
        "token",
    ]);
    let (code, _, err) = common::run(wrong).await;
    assert!(code != 0 && err.contains("client_secret"), "{err}");

    // Rotation re-seals the secret; the server then runs with the new key only.
    let new = key("k2");
    let rotated = ok(cmd(&t, &format!("{new},{keys}")), &["vault", "rotate"]).await;
    assert_eq!(rotated, ["resealed\t1", "already_current\t0", "unreadable\t0"]);
    let keys = new;

    let served = Served::start_on(cmd(&t, &keys), port).await;
    let ann = dev_sign_in(&served, "ann@example.test").await;
    let landing = ann.walk(&connect_url(&ann, "everything").await, |f| (f == "login").then(|| "ops".to_owned())).await;
    assert_eq!(landing.status, StatusCode::OK, "{landing:?}");
    let s = stats(&provider.issuer).await;
    let code = s["tokens"].as_array().unwrap().iter().find(|t| t["grant_type"] == "authorization_code").unwrap().clone();
    assert_eq!((code["auth"].as_str(), code["status"].as_u64()), (Some("client_secret_post"), Some(200)), "{s}");
    let machine = common::provision(&t.url, "acme").await;
    let (err, body, _) = tool(
        &format!("{}/t/acme/w/main/mcp", served.base),
        &machine,
        "call_tool",
        json!({ "address": "everything.echo", "args": { "message": "posted" } }),
    )
    .await;
    assert!(!err, "{body}");
    assert!(!served.logs().contains(SECRET));
}

#[tokio::test]
async fn a_member_who_lost_the_permission_before_the_callback_is_refused_and_nothing_is_stored() {
    let t = TestDb::new().await;
    let keys = key("k1");
    let port = free_port();
    let base = format!("http://127.0.0.1:{port}");
    let provider = OidcPeer::start_with(&base, &[("OIDC_DOWNSTREAM_CLIENT_ID", CLIENT)]).await;
    let everything = common::Everything::start().await;
    let upstream = everything.url.trim_end_matches("/mcp").to_owned();
    let (mcp_url, seen) = protected_mcp(&provider.issuer, &upstream, GateOptions::default()).await;
    tenant(&t, &keys).await;
    let auth = json!({ "type": "oauth", "grant": "shared", "client_id": CLIENT, "scopes": ["openid", "mcp"] });
    add_remote(&t, &keys, "everything", &mcp_url, auth).await;
    let served = Served::start_on(cmd(&t, &keys), port).await;
    let ann = dev_sign_in(&served, "ann@example.test").await;
    let callback = walk_to_callback(&ann, &connect_url(&ann, "everything").await, "ops").await;

    // Between the provider's consent and the callback, owners lose credential_administration.
    let deny = ["tenant", "permission", "acme", "--role", "owner", "--permission", "credential_administration", "deny"];
    ok(cmd(&t, &keys), &deny).await;
    let r = ann.client.get(&callback).send().await.unwrap();
    assert_eq!(r.status(), 403);
    assert!(r.text().await.unwrap().contains("permission_denied"));
    assert_eq!(count(&t, "SELECT count(*) FROM oauth_grants").await, 0);
    assert_eq!(count(&t, "SELECT count(*) FROM credentials").await, 0);
    assert_eq!(count(&t, "SELECT count(*) FROM admin_log WHERE action = 'oauth.connect'").await, 0);
    assert!(seen.lock().unwrap().is_empty(), "no token reached the downstream");
    // The claimed flow is spent: restoring the permission does not revive the callback.
    ok(
        cmd(&t, &keys),
        &["tenant", "permission", "acme", "--role", "owner", "--permission", "credential_administration", "default"],
    )
    .await;
    let r = ann.client.get(&callback).send().await.unwrap();
    assert_eq!(r.status(), 409);
    assert_eq!(count(&t, "SELECT count(*) FROM oauth_grants").await, 0);
}

#[tokio::test]
async fn revocation_intents_a_crash_left_are_settled_once_by_the_replicas_sweeps() {
    let t = TestDb::new().await;
    let keys = key("k1");
    let port = free_port();
    let base = format!("http://127.0.0.1:{port}");
    let provider =
        OidcPeer::start_with(&base, &[("OIDC_DOWNSTREAM_CLIENT_ID", CLIENT), ("OIDC_REVOCATION", "1"), ("OIDC_TEST_STATS", "1")])
            .await;
    let everything = common::Everything::start().await;
    let upstream = everything.url.trim_end_matches("/mcp").to_owned();
    let (mcp_url, seen) = protected_mcp(&provider.issuer, &upstream, GateOptions::default()).await;
    tenant(&t, &keys).await;
    let auth = json!({ "type": "oauth", "grant": "shared", "client_id": CLIENT, "scopes": ["openid", "mcp"] });
    add_remote(&t, &keys, "everything", &mcp_url, auth).await;
    let first = Served::start_on(cmd(&t, &keys), port).await;
    let ann = dev_sign_in(&first, "ann@example.test").await;
    let landing = ann.walk(&connect_url(&ann, "everything").await, |f| (f == "login").then(|| "ops".to_owned())).await;
    assert_eq!(landing.status, StatusCode::OK, "{landing:?}");
    let machine = common::provision(&t.url, "acme").await;
    let echo = json!({ "address": "everything.echo", "args": { "message": "before" } });
    let (err, body, _) = tool(&format!("{}/t/acme/w/main/mcp", first.base), &machine, "call_tool", echo).await;
    assert!(!err, "{body}");
    let token = seen.lock().unwrap().last().cloned().unwrap();
    assert_eq!(first.terminate().await, 0);

    // What a disconnect that crashed after its transaction leaves: the grant gone, an intent
    // holding its sealed tokens and no outcome, ten minutes old. Beside it, an intent whose
    // tokens were lost, and a fresh one still inside the grace period.
    let revocation = format!("{}/token/revocation", provider.issuer);
    for (envelope, age) in [("c.envelope", "10 minutes"), ("NULL", "10 minutes"), ("c.envelope", "1 second")] {
        as_owner(
            &t,
            &format!(
                "INSERT INTO oauth_revocations (tenant_id, id, workspace_id, connector_id, owner, endpoint, client_id, client_auth, envelope, created_at)
                 SELECT c.tenant_id, gen_random_uuid(), c.workspace_id, c.connector_id, c.owner, '{revocation}', g.client_id, g.client_auth,
                        {envelope}, now() - interval '{age}'
                   FROM credentials c JOIN oauth_grants g USING (tenant_id, workspace_id, connector_id, owner)"
            ),
        )
        .await;
    }
    as_owner(&t, "DELETE FROM oauth_grants; DELETE FROM credentials").await;
    assert_eq!(stats(&provider.issuer).await["revocations"], 0);

    // Two replicas start and sweep at once: each stale intent is settled exactly once.
    let (b, c) = tokio::join!(Served::start(cmd(&t, &keys)), Served::start(cmd(&t, &keys)));
    let settled = eventually(Duration::from_secs(30), || async {
        count(&t, "SELECT count(*) FROM oauth_revocations WHERE outcome IS NOT NULL").await == 2
    })
    .await;
    assert!(settled, "the sweep settled the stale intents");
    assert_eq!(
        count(
            &t,
            "SELECT count(*) FROM oauth_revocations WHERE outcome = 'revoked' AND envelope IS NULL AND settled_by = 'sweep'"
        )
        .await,
        1
    );
    assert_eq!(count(&t, "SELECT count(*) FROM oauth_revocations WHERE outcome = 'unknown' AND envelope IS NULL").await, 1);
    assert_eq!(
        count(&t, "SELECT count(*) FROM oauth_revocations WHERE outcome IS NULL AND envelope IS NOT NULL").await,
        1,
        "the fresh one waits"
    );
    let s = stats(&provider.issuer).await;
    assert_eq!(s["revocations"], 2, "the refresh and the access token, sent once: {s}");
    assert_eq!(introspect(&provider.issuer, &token).await["active"], false, "the provider revoked the token");
    assert_eq!(
        count(&t, "SELECT count(*) FROM admin_log WHERE action = 'oauth.revocation' AND (after->>'swept')::boolean").await,
        2
    );
    let recorded = eventually(Duration::from_secs(10), || async {
        count(&t, "SELECT count(*) FROM ops_failures WHERE operation = 'oauth.revocation' AND code = 'revocation_unknown'").await
            == 1
    })
    .await;
    assert!(recorded, "an unknown outcome is an ops failure");
    assert!(!format!("{}\n{}", b.logs(), c.logs()).contains(&token));
}

/// A downstream that starts refusing a connected grant (HTTP 401, then 403 after a repair):
/// the agent is answered `auth_required` with the repair path (never `unavailable`), the grant
/// is marked as needing a new authorization (its tokens dropped, an admin-log row), the
/// refusal is an ops failure, and `authorize_connector` says how to connect again.
#[tokio::test]
async fn a_downstream_refusing_a_connected_grant_marks_it_for_repair_and_answers_auth_required() {
    let t = TestDb::new().await;
    let keys = key("k1");
    let port = free_port();
    let base = format!("http://127.0.0.1:{port}");
    let provider = OidcPeer::start_with(&base, &[("OIDC_DOWNSTREAM_CLIENT_ID", CLIENT)]).await;
    let everything = common::Everything::start().await;
    let upstream = everything.url.trim_end_matches("/mcp").to_owned();
    let options = GateOptions::default();
    let refuse = options.refuse.clone();
    let (mcp_url, _seen) = protected_mcp(&provider.issuer, &upstream, options).await;
    tenant(&t, &keys).await;
    let auth = json!({ "type": "oauth", "grant": "shared", "client_id": CLIENT, "scopes": ["openid", "mcp"] });
    add_remote(&t, &keys, "everything", &mcp_url, auth).await;
    let served = Served::start_on(cmd(&t, &keys), port).await;
    let ann = dev_sign_in(&served, "ann@example.test").await;
    let machine = common::provision(&t.url, "acme").await;
    let mcp = format!("{}/t/acme/w/main/mcp", served.base);
    let echo = json!({ "address": "everything.echo", "args": { "message": "hello" } });
    let grant_status = || async {
        let r = ann.client.get(format!("{}{}", served.base, grant_path("everything"))).send().await.unwrap();
        r.json::<Value>().await.unwrap()["status"].clone()
    };

    for (round, (status, challenge)) in
        [(401, r#"Bearer error="invalid_token""#), (403, r#"Bearer error="insufficient_scope", scope="mcp profile""#)]
            .into_iter()
            .enumerate()
    {
        let landing = ann.walk(&connect_url(&ann, "everything").await, |f| (f == "login").then(|| "ops".to_owned())).await;
        assert_eq!(landing.status, StatusCode::OK, "{landing:?}");
        let (err, body, _) = tool(&mcp, &machine, "call_tool", echo.clone()).await;
        assert!(!err, "{body}");
        assert_eq!(grant_status().await, "active");

        // The server now refuses the token it accepted a moment ago.
        *refuse.lock().unwrap() = Some((status, challenge.to_owned()));
        let (err, body, raw) = tool(&mcp, &machine, "call_tool", echo.clone()).await;
        assert!(err && body["error"]["code"] == "auth_required", "HTTP {status} is no outage: {body}");
        assert!(body["error"]["message"].as_str().unwrap().contains("authorize_connector"), "the repair path: {body}");
        assert!(!raw.contains("unavailable"), "{raw}");
        assert_eq!(grant_status().await, "auth_required", "the grant needs repair");
        // Every later call says so at once, and authorize_connector says how to repair it.
        let (err, body, _) = tool(&mcp, &machine, "call_tool", echo.clone()).await;
        assert!(err && body["error"]["code"] == "auth_required", "{body}");
        let (_, body, _) = tool(&mcp, &machine, "authorize_connector", json!({ "connector": "everything" })).await;
        assert_eq!(body["status"], "auth_required", "{body}");
        assert!(body["message"].as_str().unwrap().contains("connect-links"), "{body}");
        let n = round as i64 + 1;
        let recorded = eventually(Duration::from_secs(10), || async {
            count(&t, "SELECT count(*) FROM ops_failures WHERE code = 'credential_refused' AND operation = 'oauth.use'").await
                == n
        })
        .await;
        assert!(recorded, "each refusal is one ops failure");
        assert_eq!(count(&t, "SELECT count(*) FROM admin_log WHERE action = 'oauth.grant_refused'").await, n);
        assert_eq!(count(&t, "SELECT count(*) FROM credentials").await, 0, "the refused tokens are dropped");
        assert_eq!(count(&t, "SELECT count(*) FROM ops_failures WHERE code = 'unavailable'").await, 0);
        // A 403 `insufficient_scope` records a step-up: the grant's scopes and the challenge's.
        let step_up = if status == 403 { "ARRAY['openid', 'mcp', 'profile']" } else { "NULL" };
        let sql = format!("SELECT count(*) FROM oauth_grants WHERE step_up_scopes IS NOT DISTINCT FROM {step_up}");
        assert_eq!(count(&t, &sql).await, 1, "step-up after HTTP {status}");
        *refuse.lock().unwrap() = None;
    }
    // Repaired once more (the authorization asks for the union of scopes, once), the server
    // serves the calls again.
    let landing = ann.walk(&connect_url(&ann, "everything").await, |f| (f == "login").then(|| "ops".to_owned())).await;
    assert_eq!(landing.status, StatusCode::OK, "{landing:?}");
    let sql = "SELECT count(*) FROM oauth_grants WHERE scopes = ARRAY['openid', 'mcp', 'profile'] AND step_up_scopes IS NULL";
    assert_eq!(count(&t, sql).await, 1, "the step-up's authorization asked for the union");
    let (err, body, _) = tool(&mcp, &machine, "call_tool", echo).await;
    assert!(!err, "{body}");
}

/// A native pool of one OAuth connector whose credential needs a person answers `tools/list`
/// with that problem (a JSON-RPC error whose `data.code` is `auth_required`) and a call of its
/// tool `auth_required`, instead of an empty list and an unknown tool, so an agent whose only
/// downstream refuses the grant learns that it must be connected again. A pool of several
/// connectors lists the others' tools and leaves that one out. Connected again, it lists and
/// calls.
#[tokio::test]
async fn a_native_pool_whose_connector_needs_authorization_says_so_when_listing() {
    let t = TestDb::new().await;
    let keys = key("k1");
    let port = free_port();
    let base = format!("http://127.0.0.1:{port}");
    let provider = OidcPeer::start_with(&base, &[("OIDC_DOWNSTREAM_CLIENT_ID", CLIENT)]).await;
    let everything = common::Everything::start().await;
    let upstream = everything.url.trim_end_matches("/mcp").to_owned();
    let options = GateOptions::default();
    let refuse = options.refuse.clone();
    let (mcp_url, _seen) = protected_mcp(&provider.issuer, &upstream, options).await;
    tenant(&t, &keys).await;
    let auth = json!({ "type": "oauth", "grant": "shared", "client_id": CLIENT, "scopes": ["openid", "mcp"] });
    add_remote(&t, &keys, "everything", &mcp_url, auth).await;
    // The same server without a gate: a connector that needs no credential.
    common::add_remote_mcp(&t.url, "acme", "main", "plain", &everything.url).await;
    let pools = json!({ "pools": {
        "solo": { "tools": ["everything"], "native": true },
        "both": { "tools": ["everything", "plain"], "native": true },
    } });
    let configure = ["workspace", "configure", "--tenant", "acme", "--workspace", "main", "--file"];
    ok(cmd(&t, &keys), &[&configure[..], &[common::json_path(&pools).as_str()]].concat()).await;
    let served = Served::start_on(cmd(&t, &keys), port).await;
    let ann = dev_sign_in(&served, "ann@example.test").await;
    let machine = common::provision(&t.url, "acme").await;
    let solo = format!("{}/t/acme/w/main/mcp/solo", served.base);
    let both = format!("{}/t/acme/w/main/mcp/both", served.base);
    let list = |url: String| {
        let machine = &machine;
        async move { common::mcp_post(&url, machine, "tools/list", json!({})).await.json::<Value>().await.unwrap() }
    };
    let names = |body: &Value| -> Vec<String> {
        body["result"]["tools"]
            .as_array()
            .unwrap_or_else(|| panic!("a list: {body}"))
            .iter()
            .map(|t| t["name"].as_str().unwrap().to_owned())
            .collect()
    };
    let echo = json!({ "message": "hello" });

    // Never connected: the pool of one says what is missing; the pool of two lists the other.
    let body = list(solo.clone()).await;
    assert!(body.get("result").is_none(), "{body}");
    assert_eq!(
        body["error"]["data"],
        json!({ "code": "auth_required", "connector": "everything", "state": "missing" }),
        "{body}"
    );
    assert!(body["error"]["message"].as_str().unwrap().contains("OAuth authorization"), "{body}");
    let listed = names(&list(both.clone()).await);
    assert!(listed.contains(&"plain.echo".to_owned()), "{listed:?}");
    assert!(listed.iter().all(|n| n.starts_with("plain.")), "{listed:?}");
    let (err, body, _) = tool(&solo, &machine, "echo", echo.clone()).await;
    assert!(err && body["error"]["code"] == "auth_required", "no unknown tool: {body}");

    let landing = ann.walk(&connect_url(&ann, "everything").await, |f| (f == "login").then(|| "ops".to_owned())).await;
    assert_eq!(landing.status, StatusCode::OK, "{landing:?}");
    assert!(names(&list(solo.clone()).await).contains(&"echo".to_owned()));
    let (err, body, _) = tool(&solo, &machine, "echo", echo.clone()).await;
    assert!(!err, "{body}");

    // The server refuses the grant: the call says so and marks it; from then on the list says
    // so too (the catalog is still cached, but the credential is no longer there to send).
    *refuse.lock().unwrap() = Some((401, r#"Bearer error="invalid_token""#.to_owned()));
    let (err, body, _) = tool(&solo, &machine, "echo", echo.clone()).await;
    assert!(err && body["error"]["code"] == "auth_required", "{body}");
    let body = list(solo.clone()).await;
    assert_eq!(body["error"]["data"]["code"], "auth_required", "{body}");
    assert_eq!(body["error"]["data"]["state"], "auth_required", "{body}");
    let (err, body, _) = tool(&solo, &machine, "echo", echo.clone()).await;
    assert!(err && body["error"]["code"] == "auth_required", "{body}");
    let listed = names(&list(both.clone()).await);
    assert!(!listed.is_empty() && listed.iter().all(|n| n.starts_with("plain.")), "{listed:?}");
    let (err, body, _) = tool(&both, &machine, "everything.echo", echo.clone()).await;
    assert!(err && body["error"]["code"] == "auth_required", "{body}");
    let (err, body, _) = tool(&both, &machine, "plain.echo", echo.clone()).await;
    assert!(!err, "{body}");

    // Connected again: listed and called.
    *refuse.lock().unwrap() = None;
    let landing = ann.walk(&connect_url(&ann, "everything").await, |f| (f == "login").then(|| "ops".to_owned())).await;
    assert_eq!(landing.status, StatusCode::OK, "{landing:?}");
    assert!(names(&list(solo.clone()).await).contains(&"echo".to_owned()));
    assert!(names(&list(both.clone()).await).contains(&"everything.echo".to_owned()));
    let (err, body, _) = tool(&solo, &machine, "echo", echo).await;
    assert!(!err, "{body}");
}

/// A JWT whose claims are `claims` (its signature is the identity provider's to check, not
/// Gatehouse's).
fn identity_token(claims: Value) -> String {
    use base64::Engine;
    let e = |v: &Value| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string());
    format!("{}.{}.c2lnbmF0dXJl", e(&json!({ "alg": "ES256", "typ": "JWT" })), e(&claims))
}

#[tokio::test]
async fn an_identity_token_that_is_not_the_members_or_that_the_provider_refuses_stores_nothing() {
    let t = TestDb::new().await;
    let keys = key("k1");
    let port = free_port();
    let base = format!("http://127.0.0.1:{port}");
    // oidc-provider is both the identity provider and the authorization server; it offers no
    // token exchange, so it refuses the exchange as a provider without the extension does.
    let provider =
        OidcPeer::start_with(&base, &[("OIDC_DOWNSTREAM_CLIENT_ID", CLIENT), ("OIDC_DOWNSTREAM_CLIENT_SECRET", SECRET)]).await;
    let everything = common::Everything::start().await;
    let upstream = everything.url.trim_end_matches("/mcp").to_owned();
    let (mcp_url, seen) = protected_mcp(&provider.issuer, &upstream, GateOptions::default()).await;
    tenant(&t, &keys).await;
    let idp = json!({ "issuer": provider.issuer, "client_id": "gatehouse-at-the-idp" });
    let auth = json!({ "type": "oauth", "grant": "personal", "flow": "identity_assertion", "client_id": CLIENT,
        "confidential": true, "identity_provider": idp });
    add_remote(&t, &keys, "everything", &mcp_url, auth).await;
    let slot = ["credential", "set", "--tenant", "acme", "--workspace", "main", "--connector", "everything", "--oauth-client"];
    let mut set = cmd(&t, &keys);
    set.args(slot).args(["--field", "client_secret"]).env("GATEHOUSE_FIELD_CLIENT_SECRET", SECRET);
    assert_eq!(common::run(set).await.0, 0);
    let served = Served::start_on(cmd(&t, &keys), port).await;
    let ann = dev_sign_in(&served, "ann@example.test").await;
    let r = ann.write(Method::POST, "/api/v1/tenants/acme/tokens", json!({ "name": "ann's agent" })).await;
    assert_eq!(r.status(), 201);
    let mut machine = common::provision(&t.url, "acme").await;
    machine.token = r.json::<Value>().await.unwrap()["secret"].as_str().unwrap().to_owned();
    let mcp = format!("{}/t/acme/w/main/mcp", served.base);
    let path = "/api/v1/tenants/acme/workspaces/main/connectors/everything/oauth/personal/identity-assertion";
    let exp = chrono::Utc::now().timestamp() + 600;
    let ann_claims = json!({ "iss": provider.issuer, "sub": "ann-at-idp", "email": "ann@example.test", "exp": exp });

    // Not connected: the agent is told how a member connects, and gets no connect link.
    let echo = json!({ "address": "everything.echo", "args": { "message": "hi" } });
    let (err, body, _) = tool(&mcp, &machine, "call_tool", echo.clone()).await;
    assert!(err && body["error"]["code"] == "auth_required", "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("identity-assertion"), "{body}");
    let (_, body, _) = tool(&mcp, &machine, "authorize_connector", json!({ "connector": "everything" })).await;
    assert_eq!(body["status"], "identity_assertion", "{body}");
    assert!(body.get("connect_url").is_none(), "{body}");
    let r = ann
        .write(Method::POST, "/api/v1/tenants/acme/workspaces/main/connectors/everything/oauth/personal/connect", json!({}))
        .await;
    assert_eq!(r.status(), 409);
    assert_eq!(r.json::<Value>().await.unwrap()["code"], "oauth_identity_assertion");

    // Refused before anything is sent: not a JWT, another issuer (also a normalised variant),
    // expired, another person's, an unverified email.
    let with = |key: &str, value: Value| {
        let mut c = ann_claims.clone();
        c[key] = value;
        identity_token(c)
    };
    let cases = [
        ("not-a-jwt".to_owned(), 422, "invalid_identity_token"),
        (with("iss", json!("https://elsewhere.example")), 422, "invalid_identity_token"),
        (with("iss", json!(format!("{}/", provider.issuer))), 422, "invalid_identity_token"),
        (with("exp", json!(1_000_000)), 422, "invalid_identity_token"),
        (with("email", json!("bob@example.test")), 403, "identity_token_not_yours"),
        (with("email_verified", json!(false)), 403, "identity_token_not_yours"),
        // Ann's, but the provider refuses the exchange.
        (identity_token(ann_claims.clone()), 403, "identity_exchange_refused"),
    ];
    let mut responses = Vec::new();
    for (token, status, code) in cases {
        let r = ann.write(Method::POST, path, json!({ "identity_token": token })).await;
        assert_eq!(r.status(), status, "{code}");
        let body = r.text().await.unwrap();
        assert!(body.contains(&format!("\"code\":\"{code}\"")), "{body}");
        assert!(!body.contains(&token), "the token is not echoed: {body}");
        responses.push(body);
    }
    // A token cannot present one: only a signed-in person manages a grant.
    let by_token = machine.headers(common::http().post(format!("{}{path}", served.base)));
    let r = by_token.json(&json!({ "identity_token": "x.y.z" })).send().await.unwrap();
    assert_eq!(r.status(), 403);

    // Nothing was stored or logged as a grant; the provider's refusal is an ops failure.
    assert_eq!(count(&t, "SELECT count(*) FROM oauth_grants").await, 0);
    assert_eq!(count(&t, "SELECT count(*) FROM credentials WHERE owner <> 'oauth_client'").await, 0);
    assert_eq!(count(&t, "SELECT count(*) FROM admin_log WHERE action = 'oauth.connect'").await, 0);
    assert_eq!(
        count(&t, "SELECT count(*) FROM ops_failures WHERE operation = 'oauth.identity_assertion' AND stage = 'token_exchange'")
            .await,
        1
    );
    assert!(seen.lock().unwrap().is_empty(), "no token reached the downstream");
    let r = ann
        .client
        .get(format!("{}/api/v1/tenants/acme/workspaces/main/connectors/everything/oauth/personal", served.base))
        .send()
        .await
        .unwrap();
    assert_eq!(r.json::<Value>().await.unwrap()["status"], "missing");
    let log = admin_log(&t).await;
    assert!(!log.contains("ann-at-idp"), "{log}");
}
