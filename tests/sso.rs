//! Tenant-owned sign-in (issue 22 item 1) with two real OpenID providers (two `oidc-provider`
//! instances on loopback), one per tenant, and the deployment's own (development) provider for
//! everyone else: sign-in routed by email domain, roles from the groups claim (updated at the
//! next sign-in), just-in-time members or invitations only, one tenant's provider never signing
//! anyone into another, forged and swapped callbacks refused, and SSO enforcement.

mod common;

use common::{
    OidcPeer, Served, TestDb,
    browser::Browser,
    cli, email_fill, free_port, gatehouse,
    rogue::{self, Defect, Rogue},
};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

async fn me(b: &Browser) -> (StatusCode, Value) {
    let r = b.client.get(format!("{}/api/v1/me", b.base)).send().await.unwrap();
    let status = r.status();
    (status, r.json().await.unwrap_or(Value::Null))
}

/// A person's sign-in from `/login` (discovery asks for the email, the provider for the login):
/// the landing page.
async fn sign_in(base: &str, email: &'static str) -> (common::browser::Landing, Browser) {
    let b = Browser::new(base);
    let landing = b.walk(&format!("{base}/login?next=/api/v1/me"), email_fill(email)).await;
    (landing, b)
}

fn memberships(me: &Value) -> Vec<(String, String)> {
    me["memberships"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| (m["tenant"].as_str().unwrap().to_owned(), m["role"].as_str().unwrap().to_owned()))
        .collect()
}

async fn status_of(b: &Browser, path: &str) -> (u16, String) {
    let r = b.client.get(format!("{}{path}", b.base)).send().await.unwrap();
    (r.status().as_u16(), r.text().await.unwrap())
}

/// Runs `sql` (one column, binding `arg`) in platform context, as the schema owner.
async fn platform_rows(t: &TestDb, sql: &'static str, arg: &str) -> Vec<String> {
    use sqlx::{Connection, Executor};
    let mut owner = t.owner_conn().await;
    let mut tx = owner.begin().await.unwrap();
    tx.execute("SELECT set_config('gatehouse.platform', 'on', true)").await.unwrap();
    sqlx::query_scalar(sql).bind(arg).fetch_all(&mut *tx).await.unwrap()
}

async fn admin_actions(t: &TestDb, tenant: &str) -> Vec<String> {
    let sql = "SELECT l.action FROM admin_log l JOIN tenants t ON t.id = l.tenant_id WHERE t.slug = $1 ORDER BY l.at, l.id";
    platform_rows(t, sql, tenant).await
}

#[tokio::test]
async fn each_tenant_signs_in_through_its_own_provider_and_never_into_another() {
    let t = TestDb::new().await;
    cli(&t.url, &["tenant", "create", "acme", "--name", "Acme", "--owner-email", "owner@example.test"]).await;
    cli(&t.url, &["tenant", "create", "bravo", "--name", "Bravo", "--owner-email", "boss@example.test"]).await;
    let port = free_port();
    let base = format!("http://127.0.0.1:{port}");
    let groups = std::env::temp_dir().join(format!("gatehouse-sso-groups-{}.json", uuid::Uuid::new_v4()));
    std::fs::write(&groups, json!({ "alice": ["gh-admins", "staff"] }).to_string()).unwrap();
    let groups_path = groups.to_str().unwrap();
    let peer_a = OidcPeer::start_with(
        &base,
        &[
            ("OIDC_CLIENT_ID", "acme-gatehouse"),
            ("OIDC_CLIENT_SECRET", "acme-peer-secret-1"),
            ("OIDC_EMAIL_DOMAIN", "acme.test"),
            ("OIDC_GROUPS_FILE", groups_path),
        ],
    )
    .await;
    let peer_b = OidcPeer::start_with(
        &base,
        &[
            ("OIDC_CLIENT_ID", "bravo-gatehouse"),
            ("OIDC_CLIENT_SECRET", "bravo-peer-secret-2"),
            ("OIDC_EMAIL_DOMAIN", "bravo.test"),
        ],
    )
    .await;
    let keys = common::vault_key("k1");
    let mut cmd = gatehouse(Some(&t.url));
    cmd.env("GATEHOUSE_PUBLIC_URL", &base).env("GATEHOUSE_VAULT_KEYS", &keys);
    let served = Served::start_on(cmd, port).await;

    // Acme's owner (the deployment's development provider) adds Acme's connection by the API.
    let owner = Browser::new(&base);
    assert_eq!(owner.walk(&format!("{base}/login?next=/"), email_fill("owner@example.test")).await.status, 200);
    let connection = json!({
        "name": "Acme IdP",
        "issuer": peer_a.issuer,
        "client_id": "acme-gatehouse",
        "client_secret": "acme-peer-secret-1",
        "email_domains": ["ACME.test"],
        "role_mapping": { "gh-admins": "admin", "gh-ops": "operator" },
        "jit": "create",
    });
    // Bad input is refused with its field, and writes nothing.
    let mut bad = connection.clone();
    bad["email_domains"] = json!(["not a domain"]);
    let r = owner.write(Method::POST, "/api/v1/tenants/acme/sso/connections", bad).await;
    assert_eq!(r.status(), 422);
    assert_eq!(r.json::<Value>().await.unwrap()["code"], "invalid_email_domain");
    let r = owner.write(Method::POST, "/api/v1/tenants/acme/sso/connections", connection.clone()).await;
    assert_eq!(r.status(), 201);
    let created = r.text().await.unwrap();
    assert!(!created.contains("acme-peer-secret-1"), "the secret is never echoed: {created}");
    let created: Value = serde_json::from_str(&created).unwrap();
    assert_eq!(created["email_domains"], json!(["acme.test"]));
    assert_eq!(created["auth_method"], "client_secret_basic");
    let sealed = platform_rows(&t, "SELECT envelope FROM sso_connections WHERE $1 <> ''", "x").await;
    assert_eq!(sealed.len(), 1);
    assert!(sealed.iter().all(|e| !e.contains("acme-peer-secret-1")), "sealed at rest");
    assert!(admin_actions(&t, "acme").await.contains(&"sso.connection.create".to_owned()));
    // An edit is compare-and-set on the version read; without a secret the sealed one stays.
    let id = created["id"].as_str().unwrap();
    let mut edit = connection.clone();
    edit.as_object_mut().unwrap().remove("client_secret");
    edit["version"] = json!(0);
    let path = format!("/api/v1/tenants/acme/sso/connections/{id}");
    let r = owner.write(Method::PUT, &path, edit.clone()).await;
    assert_eq!(r.status(), 412);
    assert_eq!(r.json::<Value>().await.unwrap()["code"], "sso_connection_changed");
    edit["version"] = created["version"].clone();
    edit["name"] = json!("Acme's IdP");
    let r = owner.write(Method::PUT, &path, edit).await;
    assert_eq!(r.status(), 200);
    let edited: Value = r.json().await.unwrap();
    assert_eq!((edited["name"].as_str(), edited["version"].as_i64()), (Some("Acme's IdP"), Some(2)));
    assert_eq!(platform_rows(&t, "SELECT envelope FROM sso_connections WHERE $1 <> ''", "x").await, sealed, "secret kept");

    // Bravo's connection by the CLI (invitations only), secret from the environment.
    let mut add = gatehouse(Some(&t.url));
    add.env("GATEHOUSE_VAULT_KEYS", &keys).env("BRAVO_SECRET", "bravo-peer-secret-2").args([
        "sso",
        "connection",
        "add",
        "--tenant",
        "bravo",
        "--name",
        "Bravo IdP",
        "--issuer",
        &peer_b.issuer,
        "--client-id",
        "bravo-gatehouse",
        "--client-secret-env",
        "BRAVO_SECRET",
        "--domain",
        "bravo.test",
    ]);
    let (code, _, err) = common::run(add).await;
    assert_eq!(code, 0, "{err}");
    // A domain routes to one connection only.
    let mut taken = connection.clone();
    taken["client_id"] = json!("other-client");
    taken["email_domains"] = json!(["bravo.test"]);
    let r = owner.write(Method::POST, "/api/v1/tenants/acme/sso/connections", taken).await;
    assert_eq!(r.status(), 409);
    assert_eq!(r.json::<Value>().await.unwrap()["code"], "sso_domain_taken");
    let list: Value =
        owner.client.get(format!("{base}/api/v1/tenants/acme/sso/connections")).send().await.unwrap().json().await.unwrap();
    assert_eq!(list.as_array().unwrap().len(), 1, "the refused connection wrote nothing");

    // Discovery: `/login` now asks for the email; `?tenant=` and a domain go to that tenant's
    // provider; an unknown domain goes to the deployment's own, like one without SSO.
    let plain = common::http();
    let r = plain.get(format!("{base}/login")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert!(r.text().await.unwrap().contains("name=\"email\""));
    let location = |r: reqwest::Response| r.headers()["location"].to_str().unwrap().to_owned();
    let r = plain.get(format!("{base}/login?tenant=acme")).send().await.unwrap();
    assert!(location(r).starts_with(&peer_a.issuer));
    let r = plain.post(format!("{base}/login")).form(&[("email", "x@Bravo.TEST"), ("next", "/")]).send().await.unwrap();
    assert!(location(r).starts_with(&peer_b.issuer));
    for unknown in ["/login?email=x@unknown.test", "/login?tenant=no-such-tenant"] {
        let r = plain.get(format!("{base}{unknown}")).send().await.unwrap();
        assert!(location(r).starts_with(&format!("{base}/dev-idp/")), "{unknown}");
    }

    // Alice's first sign-in creates her Acme membership with the role her groups map to.
    let (landing, alice) = sign_in(&base, "alice@acme.test").await;
    assert_eq!(landing.status, 200, "{landing:?}");
    let me_alice: Value = serde_json::from_str(&landing.body).unwrap();
    assert_eq!(me_alice["principal"]["issuer"], peer_a.issuer);
    assert_eq!(memberships(&me_alice), [("acme".to_owned(), "admin".to_owned())]);
    let actions = admin_actions(&t, "acme").await;
    assert!(actions.contains(&"member.join".to_owned()) && actions.contains(&"session.sign_in".to_owned()), "{actions:?}");
    assert_eq!(status_of(&alice, "/api/v1/tenants/acme/workspaces").await.0, 200);

    // Her groups change at the provider: the next sign-in follows.
    std::fs::write(&groups, json!({ "alice": ["staff"] }).to_string()).unwrap();
    let (landing, alice) = sign_in(&base, "alice@acme.test").await;
    assert_eq!(landing.status, 200, "{landing:?}");
    assert_eq!(memberships(&serde_json::from_str(&landing.body).unwrap()), [("acme".to_owned(), "member".to_owned())]);
    assert!(admin_actions(&t, "acme").await.contains(&"member.role".to_owned()));

    // Bravo's connection needs an invitation: Bob is refused until one exists.
    let (landing, _) = sign_in(&base, "bob@bravo.test").await;
    assert_eq!(landing.status, 403, "{landing:?}");
    assert!(landing.body.contains("sso_not_provisioned"), "{}", landing.body);
    let boss = Browser::new(&base);
    assert_eq!(boss.walk(&format!("{base}/login?next=/"), email_fill("boss@example.test")).await.status, 200);
    for (email, role) in [("bob@bravo.test", "operator"), ("alice@acme.test", "member")] {
        let r = boss.write(Method::POST, "/api/v1/tenants/bravo/invitations", json!({ "email": email, "role": role })).await;
        assert_eq!(r.status(), 201, "{email}");
    }
    let (landing, bob) = sign_in(&base, "bob@bravo.test").await;
    assert_eq!(landing.status, 200, "{landing:?}");
    let me_bob: Value = serde_json::from_str(&landing.body).unwrap();
    assert_eq!(me_bob["principal"]["issuer"], peer_b.issuer);
    // Bravo's connection maps no groups: the invitation's role stands.
    assert_eq!(memberships(&me_bob), [("bravo".to_owned(), "operator".to_owned())]);

    // Acme's provider never signs anyone into Bravo: Alice's sign-in through it did not take
    // Bravo's invitation, and her session is a stranger there (404), as Bob's is in Acme.
    let (landing, alice) = {
        let _ = alice;
        sign_in(&base, "alice@acme.test").await
    };
    assert_eq!(memberships(&serde_json::from_str(&landing.body).unwrap()), [("acme".to_owned(), "member".to_owned())]);
    let outstanding =
        platform_rows(&t, "SELECT count(*)::text FROM invitations WHERE email = $1 AND consumed_at IS NULL", "alice@acme.test")
            .await;
    assert_eq!(outstanding, ["1"], "Bravo's invitation is still waiting");
    assert_eq!(status_of(&alice, "/api/v1/tenants/bravo/workspaces").await.0, 404);
    assert_eq!(status_of(&bob, "/api/v1/tenants/acme/workspaces").await.0, 404);
    assert_eq!(status_of(&bob, "/api/v1/tenants/acme/sso/connections").await.0, 404);

    // A forged callback, and a swapped state: Acme's code delivered with the state of the
    // browser's Bravo flow goes to Bravo's provider, which refuses it. No session either way.
    let x = Browser::new(&base);
    let r = x.client.get(format!("{base}/auth/callback?code=forged&state=forged")).send().await.unwrap();
    assert_eq!(r.status(), 422);
    assert!(r.text().await.unwrap().contains("invalid_state"));
    let callback = format!("{base}/auth/callback");
    let acme_cb = x.walk_until(&format!("{base}/login?tenant=acme"), &callback, email_fill("alice@acme.test")).await;
    let bravo_cb = x.walk_until(&format!("{base}/login?tenant=bravo"), &callback, email_fill("bob@bravo.test")).await;
    let param =
        |u: &str, k: &str| url::Url::parse(u).unwrap().query_pairs().find(|(n, _)| n == k).map(|(_, v)| v.into_owned()).unwrap();
    let swapped = format!(
        "{callback}?code={}&state={}",
        param(&acme_cb, "code"),
        url::form_urlencoded::byte_serialize(param(&bravo_cb, "state").as_bytes()).collect::<String>()
    );
    let r = x.client.get(&swapped).send().await.unwrap();
    assert_eq!(r.status(), 403);
    assert!(r.text().await.unwrap().contains("token_exchange_failed"));
    assert_eq!(me(&x).await.0, 401);

    // SSO enforcement. Bravo's owner cannot require it from a session of another provider
    // (that would lock them out); the CLI can. Then Acme's owner, signed in through the
    // deployment's provider, is refused in Acme; Alice, through Acme's, is not.
    let r = boss.write(Method::PUT, "/api/v1/tenants/bravo/sso", json!({ "required": true })).await;
    assert_eq!(r.status(), 409);
    assert_eq!(r.json::<Value>().await.unwrap()["code"], "sso_session_required");
    cli(&t.url, &["sso", "require", "--tenant", "acme", "on"]).await;
    let (status, body) = status_of(&owner, "/api/v1/tenants/acme/workspaces").await;
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("sso_required"));
    assert_eq!(status_of(&alice, "/api/v1/tenants/acme/workspaces").await.0, 200);
    assert_eq!(status_of(&boss, "/api/v1/tenants/bravo/workspaces").await.0, 200, "Bravo does not require it");
    assert!(admin_actions(&t, "acme").await.contains(&"sso.require".to_owned()));

    assert_eq!(served.terminate().await, 0);
    drop((peer_a, peer_b));
    std::fs::remove_file(&groups).ok();
}

/// A tenant connection checks the ID token exactly as the deployment's sign-in does: a token
/// of another issuer or for another client signs nobody in.
#[tokio::test]
async fn a_connection_refuses_id_tokens_of_another_issuer_or_audience() {
    let t = TestDb::new().await;
    cli(&t.url, &["tenant", "create", "charlie", "--name", "Charlie", "--owner-email", "owner@example.test"]).await;
    let rogue = Rogue::start().await;
    let keys = common::vault_key("k1");
    let mut add = gatehouse(Some(&t.url));
    add.env("GATEHOUSE_VAULT_KEYS", &keys).env("ROGUE_SECRET", rogue::CLIENT_SECRET).args([
        "sso",
        "connection",
        "add",
        "--tenant",
        "charlie",
        "--name",
        "Charlie IdP",
        "--issuer",
        rogue.issuer(),
        "--client-id",
        rogue::CLIENT_ID,
        "--client-secret-env",
        "ROGUE_SECRET",
        "--domain",
        "example.test",
        "--jit",
        "create",
    ]);
    let (code, _, err) = common::run(add).await;
    assert_eq!(code, 0, "{err}");
    let mut cmd = gatehouse(Some(&t.url));
    // The provider asserts this address; through a tenant's connection it is no platform admin.
    cmd.env("GATEHOUSE_VAULT_KEYS", &keys).env("GATEHOUSE_PLATFORM_ADMINS", "rogue@example.test");
    let served = Served::start(cmd).await;
    let attempt = || async {
        let b = Browser::new(&served.base);
        let landing = b.walk(&format!("{}/login?tenant=charlie&next=/api/v1/me", served.base), |_| None).await;
        (landing, b)
    };
    let (ok, b) = attempt().await;
    assert_eq!(ok.status, 200, "the well-behaved provider signs in: {ok:?}");
    assert_eq!(memberships(&me(&b).await.1), [("charlie".to_owned(), "member".to_owned())]);
    let r = b.client.get(format!("{}/api/v1/platform/issues", served.base)).send().await.unwrap();
    assert_eq!(r.status(), 403, "a tenant's provider cannot make anyone a platform admin");
    assert_eq!(r.json::<Value>().await.unwrap()["code"], "platform_admin_required");
    for (defect, reason) in [(Defect::WrongIssuer, "issuer"), (Defect::WrongAudience, "audience")] {
        rogue.set(defect);
        let (landing, b) = attempt().await;
        assert_eq!(landing.status, 403, "{defect:?}: {landing:?}");
        assert!(landing.body.contains("invalid_id_token") && landing.body.to_lowercase().contains(reason), "{}", landing.body);
        assert_eq!(me(&b).await.0, 401);
    }
    assert_eq!(served.terminate().await, 0);
}

/// A P-256 key made by `openssl`: its PKCS#8 PEM and its public JWK.
async fn p256_key(dir: &std::path::Path) -> (String, Value) {
    use base64::Engine;
    let (pem, der) = (dir.join("key.pem"), dir.join("pub.der"));
    for args in [
        vec!["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", pem.to_str().unwrap()],
        vec!["pkey", "-in", pem.to_str().unwrap(), "-pubout", "-outform", "DER", "-out", der.to_str().unwrap()],
    ] {
        let out = tokio::process::Command::new("openssl").args(&args).output().await.expect("run openssl");
        assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
    let spki = std::fs::read(&der).unwrap();
    // The SubjectPublicKeyInfo ends with the uncompressed point: 04 || x || y.
    let point = &spki[spki.len() - 64..];
    let b64 = |b: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b);
    let jwk =
        json!({ "kty": "EC", "crv": "P-256", "x": b64(&point[..32]), "y": b64(&point[32..]), "use": "sig", "alg": "ES256" });
    (std::fs::read_to_string(&pem).unwrap(), jwk)
}

/// The two other ways a connection authenticates at its provider, each against a real
/// `oidc-provider` whose client is registered with only that method (it refuses any other).
#[tokio::test]
async fn a_connection_authenticates_with_client_secret_post_or_private_key_jwt() {
    let t = TestDb::new().await;
    cli(&t.url, &["tenant", "create", "delta", "--name", "Delta", "--owner-email", "owner@example.test"]).await;
    let port = free_port();
    let base = format!("http://127.0.0.1:{port}");
    let dir = std::env::temp_dir().join(format!("gatehouse-sso-key-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    let (pem, jwk) = p256_key(&dir).await;
    let jwks = json!({ "keys": [jwk] }).to_string();
    let post = OidcPeer::start_with(
        &base,
        &[
            ("OIDC_CLIENT_ID", "delta-post"),
            ("OIDC_CLIENT_SECRET", "delta-post-secret-3"),
            ("OIDC_CLIENT_AUTH_METHOD", "client_secret_post"),
            ("OIDC_EMAIL_DOMAIN", "post.delta.test"),
        ],
    )
    .await;
    let keyed = OidcPeer::start_with(
        &base,
        &[
            ("OIDC_CLIENT_ID", "delta-key"),
            ("OIDC_CLIENT_AUTH_METHOD", "private_key_jwt"),
            ("OIDC_CLIENT_JWKS", &jwks),
            ("OIDC_EMAIL_DOMAIN", "key.delta.test"),
        ],
    )
    .await;
    let keys = common::vault_key("k1");
    let mut cmd = gatehouse(Some(&t.url));
    cmd.env("GATEHOUSE_PUBLIC_URL", &base).env("GATEHOUSE_VAULT_KEYS", &keys);
    let served = Served::start_on(cmd, port).await;
    let owner = Browser::new(&base);
    assert_eq!(owner.walk(&format!("{base}/login?next=/"), email_fill("owner@example.test")).await.status, 200);
    for body in [
        json!({ "name": "Post", "issuer": post.issuer, "client_id": "delta-post", "client_secret": "delta-post-secret-3",
                "auth_method": "client_secret_post", "email_domains": ["post.delta.test"], "jit": "create" }),
        json!({ "name": "Key", "issuer": keyed.issuer, "client_id": "delta-key", "private_key": pem,
                "email_domains": ["key.delta.test"], "jit": "create" }),
    ] {
        let r = owner.write(Method::POST, "/api/v1/tenants/delta/sso/connections", body).await;
        assert_eq!(r.status(), 201);
        let text = r.text().await.unwrap();
        assert!(!text.contains("PRIVATE KEY") && !text.contains("delta-post-secret-3"), "{text}");
    }
    for (email, issuer) in [("erin@post.delta.test", &post.issuer), ("finn@key.delta.test", &keyed.issuer)] {
        let (landing, _) = sign_in(&base, email).await;
        assert_eq!(landing.status, 200, "{email}: {landing:?}");
        let me: Value = serde_json::from_str(&landing.body).unwrap();
        assert_eq!(&me["principal"]["issuer"], issuer);
        assert_eq!(memberships(&me), [("delta".to_owned(), "member".to_owned())]);
    }
    assert_eq!(served.terminate().await, 0);
    drop((post, keyed));
    std::fs::remove_dir_all(&dir).ok();
}
