//! MCP authorization for interactive agents: the official Python SDK's OAuth client end to
//! end, and the refusals (audience, pool, PKCE, replayed codes and refresh tokens, foreign
//! redirect URIs, expiry, revoked clients and grants, removed members).

mod common;

use std::time::Duration;

use common::{
    Served,
    browser::first_form,
    cli, dev_sign_in, eventually, gatehouse, http,
    mcp_oauth::{
        authorize, authorize_url, consent, get, location_query, pkce, python_oauth_agent, register, rpc, setup, status_at,
        token_request,
    },
};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

#[tokio::test]
async fn python_sdk_oauth_flow_end_to_end_then_audience_and_refresh_rotation() {
    let s = setup().await;
    let served = Served::start(gatehouse(Some(&s.t.url))).await;
    let base = served.base.clone();
    let endpoint = format!("{base}/t/acme/w/main/mcp");

    // Without credentials: 401 naming the protected resource metadata and the scope.
    let r = http().post(&endpoint).json(&json!({})).send().await.unwrap();
    assert_eq!(r.status(), 401);
    let challenge = r.headers()["www-authenticate"].to_str().unwrap().to_owned();
    assert_eq!(
        challenge,
        format!("Bearer resource_metadata=\"{base}/.well-known/oauth-protected-resource/t/acme/w/main/mcp\", scope=\"mcp\"")
    );
    let prm: Value = http()
        .get(format!("{base}/.well-known/oauth-protected-resource/t/acme/w/main/mcp/reads"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(prm["resource"], format!("{endpoint}/reads"));
    assert_eq!(prm["authorization_servers"], json!([format!("{base}/t/acme")]));
    let asm: Value =
        http().get(format!("{base}/.well-known/oauth-authorization-server/t/acme")).send().await.unwrap().json().await.unwrap();
    assert_eq!(asm["issuer"], format!("{base}/t/acme"));
    assert_eq!(asm["code_challenge_methods_supported"], json!(["S256"]));

    // The SDK's own OAuth client: discovery, registration, sign-in, consent, token, tool calls.
    let out = python_oauth_agent(
        &endpoint,
        "alice@example.test",
        json!([["call_tool", { "address": "everything.echo", "args": { "message": "hello with oauth" } }]]),
    )
    .await;
    assert_eq!(out["server"], "gatehouse");
    assert!(out["tools"].as_array().unwrap().contains(&json!("call_tool")), "{out}");
    assert_eq!(out["calls"][0]["isError"], false, "{out}");
    assert!(out["calls"][0]["text"][0].as_str().unwrap().contains("hello with oauth"), "{out}");
    let access = out["access_token"].as_str().unwrap().to_owned();
    let refresh = out["refresh_token"].as_str().unwrap().to_owned();
    let client_id = out["client_id"].as_str().unwrap().to_owned();
    assert!(access.starts_with("gha_") && refresh.starts_with("ghr_"));
    assert_eq!(out["expires_in"], 3600);
    assert_eq!(status_at(&endpoint, &access).await, 200);

    // Bound to exactly this endpoint: another workspace, a pool, another tenant all refuse it.
    for other in [format!("{base}/t/acme/w/other/mcp"), format!("{endpoint}/reads"), format!("{base}/t/globex/w/main/mcp")] {
        let r = rpc(&other, &access, "tools/list", json!({})).await;
        assert_eq!(r.status(), 401, "{other}");
        assert!(r.headers()["www-authenticate"].to_str().unwrap().contains("error=\"invalid_token\""));
    }

    // Only digests are stored.
    let log = common::admin_log_text(&s.t).await;
    assert!(log.contains("mcp_client.register") && log.contains("mcp_grant.create"), "{log}");
    assert!(!log.contains(&access) && !log.contains(&refresh));
    assert!(!served.logs().contains(&access) && !served.logs().contains(&refresh));

    // Refresh rotates; the spent refresh token presented again revokes the whole family.
    let (status, rotated) =
        token_request(&base, "acme", &[("grant_type", "refresh_token"), ("refresh_token", &refresh), ("client_id", &client_id)])
            .await;
    assert_eq!(status, 200, "{rotated}");
    let (access2, refresh2) = (rotated["access_token"].as_str().unwrap(), rotated["refresh_token"].as_str().unwrap());
    assert_ne!(refresh2, refresh);
    assert_eq!(status_at(&endpoint, access2).await, 200);
    let (status, body) =
        token_request(&base, "acme", &[("grant_type", "refresh_token"), ("refresh_token", &refresh), ("client_id", &client_id)])
            .await;
    assert_eq!((status, body["error"].as_str()), (StatusCode::BAD_REQUEST, Some("invalid_grant")));
    assert_eq!(status_at(&endpoint, access2).await, 401, "the rotated access token dies with its family");
    assert_eq!(status_at(&endpoint, &access).await, 401);
    let (status, body) =
        token_request(&base, "acme", &[("grant_type", "refresh_token"), ("refresh_token", refresh2), ("client_id", &client_id)])
            .await;
    assert_eq!(
        (status, body["error"].as_str()),
        (StatusCode::BAD_REQUEST, Some("invalid_grant")),
        "the rotated refresh token too"
    );
    assert!(common::admin_log_text(&s.t).await.contains("refresh_reused"));
}

#[tokio::test]
async fn refusals_pkce_redirects_codes_and_consent_checks() {
    let s = setup().await;
    let served = Served::start(gatehouse(Some(&s.t.url))).await;
    let base = served.base.clone();
    let endpoint = format!("{base}/t/acme/w/main/mcp");
    let redirect = "http://127.0.0.1:4567/callback";

    // Foreign redirect URIs: refused at registration, and at authorization before any page.
    let (status, body) = register(&base, "acme", "https://evil.example/callback").await;
    assert_eq!((status, body["error"].as_str()), (StatusCode::BAD_REQUEST, Some("invalid_redirect_uri")));
    let (status, client) = register(&base, "acme", redirect).await;
    assert_eq!(status, 201);
    let client_id = client["client_id"].as_str().unwrap().to_owned();
    let alice = dev_sign_in(&served, "alice@example.test").await;
    let (_, challenge) = pkce();
    let params = |redirect: &'static str, method: Option<&'static str>, challenge: Option<&str>| {
        let mut p: Vec<(&str, String)> = vec![
            ("response_type", "code".into()),
            ("client_id", client_id.clone()),
            ("redirect_uri", redirect.into()),
            ("state", "xyz".into()),
            ("resource", endpoint.clone()),
        ];
        if let Some(m) = method {
            p.push(("code_challenge_method", m.into()));
        }
        if let Some(c) = challenge {
            p.push(("code_challenge", c.into()));
        }
        p
    };
    let url_of = |p: Vec<(&str, String)>| {
        let pairs: Vec<(&str, &str)> = p.iter().map(|(k, v)| (*k, v.as_str())).collect();
        authorize_url(&base, "acme", &pairs)
    };
    for foreign in ["https://evil.example/callback", "http://127.0.0.1:4567/other"] {
        let r = alice.client.get(url_of(params(foreign, Some("S256"), Some(&challenge)))).send().await.unwrap();
        assert_eq!(r.status(), 400, "{foreign}");
        assert!(r.headers().get("location").is_none(), "nothing is sent to an unchecked redirect URI");
        assert!(r.text().await.unwrap().contains("invalid_redirect_uri"));
    }
    // A loopback redirect may use any port.
    let r =
        alice.client.get(url_of(params("http://127.0.0.1:9999/callback", Some("S256"), Some(&challenge)))).send().await.unwrap();
    assert_eq!(r.status(), 200);

    // Missing PKCE and `plain` PKCE go back to the client as errors, with no code.
    for (method, ch) in [(None, None), (Some("plain"), Some(challenge.as_str())), (None, Some(challenge.as_str()))] {
        let r = alice.client.get(url_of(params(redirect, method, ch))).send().await.unwrap();
        assert_eq!(r.status(), 303, "{method:?}");
        let q = location_query(&r);
        assert_eq!(get(&q, "error"), Some("invalid_request"), "{method:?}");
        assert_eq!(get(&q, "state"), Some("xyz"));
        assert!(get(&q, "code").is_none());
    }
    // A resource of another tenant or an unknown workspace is not a target.
    let mut p = params(redirect, Some("S256"), Some(&challenge));
    p[4].1 = format!("{base}/t/globex/w/main/mcp");
    let r = alice.client.get(url_of(p)).send().await.unwrap();
    assert_eq!(get(&location_query(&r), "error"), Some("invalid_target"));

    // Signed in but no member of the tenant: refused with a page.
    let carol = dev_sign_in(&served, "carol@example.test").await;
    let r = carol.client.get(url_of(params(redirect, Some("S256"), Some(&challenge)))).send().await.unwrap();
    assert_eq!(r.status(), 403);
    assert!(r.text().await.unwrap().contains("not_a_member"));

    // Not signed in: off to the ordinary sign-in, back to this request.
    let r = http().get(url_of(params(redirect, Some("S256"), Some(&challenge)))).send().await.unwrap();
    assert_eq!(r.status(), 303);
    let location = r.headers()["location"].to_str().unwrap();
    assert!(location.starts_with("/login?next=%2Ft%2Facme%2Foauth%2Fauthorize"));
    assert!(location.ends_with("&tenant=acme"), "through the tenant's own connection when it has one: {location}");

    // The consent form needs the exact Origin and the session's CSRF token.
    let page =
        alice.client.get(url_of(params(redirect, Some("S256"), Some(&challenge)))).send().await.unwrap().text().await.unwrap();
    assert!(page.contains("Test agent") && page.contains("127.0.0.1:4567") && page.contains("main"), "{page}");
    let (action, fields) = first_form(&page).unwrap();
    let post = |origin: Option<&str>, fields: Vec<(String, String)>| {
        let mut req = alice.client.post(format!("{base}{action}")).form(&fields);
        if let Some(o) = origin {
            req = req.header("origin", o);
        }
        req.send()
    };
    let r = post(None, fields.clone()).await.unwrap();
    assert_eq!(r.status(), 403);
    let r = post(Some("http://evil.example"), fields.clone()).await.unwrap();
    assert_eq!(r.status(), 403);
    let forged: Vec<_> =
        fields.iter().map(|(k, v)| (k.clone(), if k == "csrf_token" { "x".into() } else { v.clone() })).collect();
    let r = post(Some(&base), forged).await.unwrap();
    assert_eq!(r.status(), 403);
    assert!(!common::admin_log_text(&s.t).await.contains("mcp_grant.create"), "a refusal writes nothing");

    // A code is good once; its replay revokes what it produced.
    let (verifier, challenge) = pkce();
    let r = consent(&alice, &url_of(params(redirect, Some("S256"), Some(&challenge)))).await;
    let code = get(&location_query(&r), "code").unwrap().to_owned();
    assert!(get(&location_query(&r), "iss").is_some_and(|iss| iss == format!("{base}/t/acme")));
    let exchange = |verifier: String| {
        let (code, client_id) = (code.clone(), client_id.clone());
        let base = base.clone();
        async move {
            token_request(
                &base,
                "acme",
                &[
                    ("grant_type", "authorization_code"),
                    ("code", &code),
                    ("redirect_uri", redirect),
                    ("client_id", &client_id),
                    ("code_verifier", &verifier),
                ],
            )
            .await
        }
    };
    let (status, body) = exchange("wrong-verifier-wrong-verifier-wrong-verifier-0".into()).await;
    assert_eq!((status, body["error"].as_str()), (StatusCode::BAD_REQUEST, Some("invalid_grant")));
    let (status, tokens) = exchange(verifier.clone()).await;
    assert_eq!(status, 200, "a failed PKCE check did not spend the code: {tokens}");
    let access = tokens["access_token"].as_str().unwrap().to_owned();
    assert_eq!(status_at(&endpoint, &access).await, 200);
    let (status, body) = exchange(verifier).await;
    assert_eq!((status, body["error"].as_str()), (StatusCode::BAD_REQUEST, Some("invalid_grant")));
    assert_eq!(status_at(&endpoint, &access).await, 401, "a replayed code revokes its grant");

    // Anonymous registrations are capped: unused ones of the last day count.
    use sqlx::Executor;
    let mut owner = s.t.owner_conn().await;
    owner.execute("SELECT set_config('gatehouse.platform', 'on', false)").await.unwrap();
    sqlx::query(
        "INSERT INTO mcp_clients (tenant_id, id, client_id, kind, name, redirect_uris)
         SELECT t.id, gen_random_uuid(), 'gmc_filler' || i, 'registered', 'n', ARRAY['http://127.0.0.1/cb']
           FROM tenants t, generate_series(1, 1000) i WHERE t.slug = 'acme'",
    )
    .execute(&mut owner)
    .await
    .unwrap();
    let r =
        http().post(format!("{base}/t/acme/oauth/register")).json(&json!({ "redirect_uris": [redirect] })).send().await.unwrap();
    assert_eq!(r.status(), 503);
    assert_eq!(r.json::<Value>().await.unwrap()["code"], "registration_limit");
    let (status, _) = register(&base, "globex", redirect).await;
    assert_eq!(status, 201, "the cap is per tenant");
}

#[tokio::test]
async fn revoked_clients_grants_and_removed_members_are_refused_on_the_next_request() {
    let s = setup().await;
    let served = Served::start(gatehouse(Some(&s.t.url))).await;
    let base = served.base.clone();
    let endpoint = format!("{base}/t/acme/w/main/mcp");
    // A second replica behind the same public URL: each keeps its own checked tokens, and a
    // revocation committed through the first is refused by both on their next request.
    let mut second = gatehouse(Some(&s.t.url));
    second.env("GATEHOUSE_PUBLIC_URL", &base);
    let replica = Served::start(second).await;
    let endpoint2 = format!("{}/t/acme/w/main/mcp", replica.base);
    let both = |token: &str| {
        let (a, b, token) = (endpoint.clone(), endpoint2.clone(), token.to_owned());
        async move { [status_at(&a, &token).await.as_u16(), status_at(&b, &token).await.as_u16()] }
    };
    let redirect = "http://localhost:7000/cb";
    let (_, client) = register(&base, "acme", redirect).await;
    let client_id = client["client_id"].as_str().unwrap().to_owned();
    let alice = dev_sign_in(&served, "alice@example.test").await;
    let r = alice
        .write(Method::POST, "/api/v1/tenants/acme/invitations", json!({ "email": "bob@example.test", "role": "member" }))
        .await;
    assert_eq!(r.status(), 201);
    let bob = dev_sign_in(&served, "bob@example.test").await;

    // A pool's token works at the pool only.
    let (pool_access, _) = authorize(&alice, "acme", &client_id, redirect, &format!("{endpoint}/reads")).await;
    assert_eq!(status_at(&format!("{endpoint}/reads"), &pool_access).await, 200);
    assert_eq!(status_at(&endpoint, &pool_access).await, 401);

    // A member lists and revokes their own grant; another member's is not found for them.
    let (alice_access, _) = authorize(&alice, "acme", &client_id, redirect, &endpoint).await;
    let (bob_access, _) = authorize(&bob, "acme", &client_id, redirect, &endpoint).await;
    let mine: Value =
        bob.client.get(format!("{base}/api/v1/tenants/acme/mcp-grants")).send().await.unwrap().json().await.unwrap();
    assert_eq!(mine["grants"].as_array().unwrap().len(), 1, "{mine}");
    let alice_grants: Value =
        alice.client.get(format!("{base}/api/v1/tenants/acme/mcp-grants")).send().await.unwrap().json().await.unwrap();
    let alice_grant =
        alice_grants["grants"].as_array().unwrap().iter().find(|g| g["resource"] == endpoint.as_str()).unwrap()["id"]
            .as_str()
            .unwrap()
            .to_owned();
    let r = bob.write(Method::DELETE, &format!("/api/v1/tenants/acme/mcp-grants/{alice_grant}"), json!({})).await;
    assert_eq!(r.status(), 404);
    let r = bob.client.get(format!("{base}/api/v1/tenants/acme/mcp-grants?scope=all")).send().await.unwrap();
    assert_eq!(r.status(), 403, "only admins see every member's grants");
    let all: Value =
        alice.client.get(format!("{base}/api/v1/tenants/acme/mcp-grants?scope=all")).send().await.unwrap().json().await.unwrap();
    assert_eq!(all["grants"].as_array().unwrap().len(), 3);
    // Checked twice on each replica: the second answer comes from its cache.
    for _ in 0..2 {
        assert_eq!(both(&alice_access).await, [200, 200]);
    }
    let r = alice.write(Method::DELETE, &format!("/api/v1/tenants/acme/mcp-grants/{alice_grant}"), json!({})).await;
    assert_eq!(r.status(), 200);
    assert_eq!(both(&alice_access).await, [401, 401]);
    assert_eq!(both(&bob_access).await, [200, 200]);

    // Each token carries its member's own grants: granted to role member, bob sees the tool
    // and alice (owner) does not.
    let pools = common::json_path(&json!({ "grants": [{ "to": "role:member", "tools": ["everything.echo"] }] }));
    cli(&s.t.url, &["workspace", "configure", "--tenant", "acme", "--workspace", "main", "--file", &pools]).await;
    let found = |token: String| {
        let endpoint = endpoint.clone();
        async move {
            let r = rpc(&endpoint, &token, "tools/call", json!({ "name": "search_tools", "arguments": { "limit": 100 } })).await;
            let answer: Value = r.json().await.unwrap();
            let text: Value = serde_json::from_str(answer["result"]["content"][0]["text"].as_str().unwrap()).unwrap();
            text["total"].clone()
        }
    };
    assert_eq!(found(bob_access.clone()).await, 1);
    let (alice_now, _) = authorize(&alice, "acme", &client_id, redirect, &endpoint).await;
    assert_eq!(found(alice_now).await, 0);

    // A removed member's token stops working.
    let members: Value =
        alice.client.get(format!("{base}/api/v1/tenants/acme/members")).send().await.unwrap().json().await.unwrap();
    let bob_id =
        members.as_array().or(members["members"].as_array()).unwrap().iter().find(|m| m["email"] == "bob@example.test").unwrap()
            ["id"]
            .as_str()
            .unwrap()
            .to_owned();
    assert_eq!(both(&bob_access).await, [200, 200]);
    let r = alice.write(Method::DELETE, &format!("/api/v1/tenants/acme/members/{bob_id}"), json!({})).await;
    assert!(r.status().is_success(), "{}", r.text().await.unwrap());
    assert_eq!(both(&bob_access).await, [401, 401]);

    // A client revokes its own token (RFC 7009): the grant ends; another client cannot.
    let (held, held_refresh) = authorize(&alice, "acme", &client_id, redirect, &endpoint).await;
    let revoke = |token: String, client: String| {
        let base = base.clone();
        async move {
            http()
                .post(format!("{base}/t/acme/oauth/revoke"))
                .form(&[("token", token), ("client_id", client)])
                .send()
                .await
                .unwrap()
        }
    };
    assert_eq!(revoke(held_refresh.clone(), "gmc_someoneelse".into()).await.status(), 200);
    assert_eq!(status_at(&endpoint, &held).await, 200, "another client's revocation changes nothing");
    assert_eq!(revoke(held_refresh, client_id.clone()).await.status(), 200);
    assert_eq!(status_at(&endpoint, &held).await, 401);

    // The operator's CLI lists grants and revokes one.
    let (by_cli, _) = authorize(&alice, "acme", &client_id, redirect, &endpoint).await;
    let lines = cli(&s.t.url, &["mcp-auth", "grants", "--tenant", "acme"]).await;
    let newest: Value = serde_json::from_str(&lines[0]).unwrap();
    assert!(newest["revoked_at"].is_null() && newest["client"]["client_id"] == client_id.as_str(), "{newest}");
    cli(&s.t.url, &["mcp-auth", "revoke-grant", "--tenant", "acme", newest["id"].as_str().unwrap()]).await;
    assert_eq!(status_at(&endpoint, &by_cli).await, 401);
    assert_eq!(cli(&s.t.url, &["mcp-auth", "clients", "--tenant", "acme"]).await.len(), 1);

    // An admin revokes the client: its tokens die, and it cannot be authorized again.
    let (fresh, fresh_refresh) = authorize(&alice, "acme", &client_id, redirect, &endpoint).await;
    assert_eq!(both(&fresh).await, [200, 200]);
    let clients: Value =
        alice.client.get(format!("{base}/api/v1/tenants/acme/mcp-clients")).send().await.unwrap().json().await.unwrap();
    let id = clients["clients"][0]["id"].as_str().unwrap().to_owned();
    let r = alice.write(Method::DELETE, &format!("/api/v1/tenants/acme/mcp-clients/{id}"), json!({})).await;
    assert_eq!(r.status(), 200);
    assert_eq!(both(&fresh).await, [401, 401]);
    let (status, body) = token_request(
        &base,
        "acme",
        &[("grant_type", "refresh_token"), ("refresh_token", &fresh_refresh), ("client_id", &client_id)],
    )
    .await;
    assert_eq!((status, body["error"].as_str()), (StatusCode::BAD_REQUEST, Some("invalid_grant")));
    let (_, challenge) = pkce();
    let url = authorize_url(
        &base,
        "acme",
        &[
            ("response_type", "code"),
            ("client_id", &client_id),
            ("redirect_uri", redirect),
            ("code_challenge", &challenge),
            ("code_challenge_method", "S256"),
            ("resource", &endpoint),
        ],
    );
    let r = alice.client.get(url).send().await.unwrap();
    assert_eq!(r.status(), 403);
    assert!(r.text().await.unwrap().contains("client_revoked"));

    // The second replica answered repeated checks from its cache (the refusals above show the
    // cache never outlived a revocation).
    let metrics = http().get(format!("{}/metrics", replica.base)).send().await.unwrap().text().await.unwrap();
    let hits = metrics
        .lines()
        .find_map(|l| l.strip_prefix("gatehouse_epoch_cache_requests_total{cache=\"mcp_tokens\",result=\"hit\"} "))
        .and_then(|v| v.trim().parse::<u64>().ok())
        .unwrap_or_else(|| panic!("no mcp_tokens hit series:\n{metrics}"));
    assert!(hits >= 1, "{metrics}");

    let log = common::admin_log_text(&s.t).await;
    for action in ["mcp_grant.create", "mcp_grant.revoke", "mcp_client.revoke"] {
        assert!(log.contains(action), "{action}");
    }
}

#[tokio::test]
async fn expired_tokens_are_refused_and_client_metadata_documents_identify_clients() {
    let s = setup().await;
    let mut cmd = gatehouse(Some(&s.t.url));
    cmd.env("GATEHOUSE_MCP_ACCESS_TOKEN_TTL_SECS", "2");
    let served = Served::start(cmd).await;
    let base = served.base.clone();
    let endpoint = format!("{base}/t/acme/w/main/mcp");
    let redirect = "http://127.0.0.1:5555/cb";

    // A client named by the URL of its metadata document (served on loopback: development).
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let doc_url = format!("http://{}/client.json", listener.local_addr().unwrap());
    let document = json!({ "client_id": doc_url, "client_name": "Document Agent", "redirect_uris": [redirect] });
    let app = axum::Router::new().route("/client.json", axum::routing::get(move || async move { axum::Json(document) }));
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });

    let alice = dev_sign_in(&served, "alice@example.test").await;
    let (_, challenge) = pkce();
    let page = alice
        .client
        .get(authorize_url(
            &base,
            "acme",
            &[
                ("response_type", "code"),
                ("client_id", &doc_url),
                ("redirect_uri", redirect),
                ("code_challenge", &challenge),
                ("code_challenge_method", "S256"),
                ("resource", &endpoint),
            ],
        ))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(page.contains("Document Agent"), "{page}");
    // The document lists no other redirect URI: refused before any page.
    let r = alice
        .client
        .get(authorize_url(
            &base,
            "acme",
            &[
                ("response_type", "code"),
                ("client_id", &doc_url),
                ("redirect_uri", "http://127.0.0.1:5555/elsewhere"),
                ("code_challenge", &challenge),
                ("code_challenge_method", "S256"),
                ("resource", &endpoint),
            ],
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);

    let (access, _) = authorize(&alice, "acme", &doc_url, redirect, &endpoint).await;
    assert_eq!(status_at(&endpoint, &access).await, 200);
    let expired = eventually(Duration::from_secs(10), || {
        let (endpoint, access) = (endpoint.clone(), access.clone());
        async move { status_at(&endpoint, &access).await == 401 }
    })
    .await;
    assert!(expired, "an access token past its lifetime is refused");
}
