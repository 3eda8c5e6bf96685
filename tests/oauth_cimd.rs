//! Client ID Metadata Documents, against the npm `oidc-provider` (which implements the draft):
//! the document Gatehouse serves, the registration chosen from the server's real metadata
//! (document, dynamic registration, or a clear refusal), and a whole flow in which the server
//! fetches the document over https (a TLS proxy on loopback in front of Gatehouse).

mod common;

use common::{
    OidcPeer, Served, TestDb,
    browser::Browser,
    downstream::{
        GateOptions, TlsProxy, add_remote, count, follow_link, mint_link, protected_mcp, tenant, vault_cmd as cmd,
        walk_to_callback,
    },
    free_port, mcp_tool as tool, vault_key as key,
};
use reqwest::StatusCode;
use serde_json::{Value, json};

const CLIENT: &str = "gatehouse-downstream";

#[tokio::test]
async fn the_registration_follows_the_servers_real_metadata_and_the_client_metadata_document_is_served() {
    let t = TestDb::new().await;
    let keys = key("k1");
    let public = "https://gatehouse.example";
    // One server advertises Client ID Metadata Documents (and dynamic registration); the other
    // neither. Their metadata is oidc-provider's own.
    let cimd =
        OidcPeer::start_with(public, &[("OIDC_DOWNSTREAM_CLIENT_ID", CLIENT), ("OIDC_CIMD", "1"), ("OIDC_REGISTRATION", "1")])
            .await;
    let plain = OidcPeer::start_with(public, &[("OIDC_DOWNSTREAM_CLIENT_ID", CLIENT)]).await;
    let everything = common::Everything::start().await;
    let upstream = everything.url.trim_end_matches("/mcp").to_owned();
    let (cimd_url, _) = protected_mcp(&cimd.issuer, &upstream, GateOptions::default()).await;
    let (plain_url, _) = protected_mcp(&plain.issuer, &upstream, GateOptions::default()).await;
    tenant(&t, &keys).await;
    let auth = json!({ "type": "oauth", "grant": "shared", "scopes": ["openid", "mcp"] });
    add_remote(&t, &keys, "documented", &cimd_url, auth.clone()).await;
    add_remote(&t, &keys, "unregistrable", &plain_url, auth).await;
    // A deployment whose public URL is https (behind its TLS proxy; here served on loopback).
    let mut https = cmd(&t, &keys);
    https.env("GATEHOUSE_PUBLIC_URL", public);
    let served = Served::start(https).await;

    // The document: public, stable, naming its own URL as the client id.
    let document_url = format!("{public}/oauth/client-metadata.json");
    let r = common::http().get(format!("{}/oauth/client-metadata.json", served.base)).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert!(r.headers()["cache-control"].to_str().unwrap().contains("max-age"));
    let doc: Value = r.json().await.unwrap();
    assert_eq!(doc["client_id"], document_url.as_str());
    assert_eq!(doc["redirect_uris"], json!([format!("{public}/oauth/callback")]));
    assert_eq!(doc["token_endpoint_auth_method"], "none");
    assert_eq!(doc["grant_types"], json!(["authorization_code", "refresh_token"]));
    assert_eq!(doc["client_name"], "Gatehouse");

    // The server advertising documents gets the document's URL as client id (not a dynamic
    // registration, though it offers one too), with the resource.
    let r = follow_link(&t, &keys, &served, "documented").await;
    assert!(r.status().is_redirection(), "{}", r.status());
    let location = url::Url::parse(r.headers()["location"].to_str().unwrap()).unwrap();
    assert!(location.as_str().starts_with(&format!("{}/auth", cimd.issuer)), "{location}");
    let query: std::collections::HashMap<String, String> = location.query_pairs().into_owned().collect();
    assert_eq!(query["client_id"], document_url);
    assert_eq!(query["redirect_uri"], format!("{public}/oauth/callback"));
    assert_eq!(query["resource"], cimd_url);
    assert_eq!(query["code_challenge_method"], "S256");
    assert_eq!(count(&t, "SELECT count(*) FROM oauth_clients").await, 0, "no dynamic registration");

    // The server offering neither: a clear refusal, and no flow.
    let flows = count(&t, "SELECT count(*) FROM oauth_flows").await;
    let r = follow_link(&t, &keys, &served, "unregistrable").await;
    assert_eq!(r.status(), 409);
    assert!(r.text().await.unwrap().contains("oauth_registration_unsupported"));
    assert_eq!(count(&t, "SELECT count(*) FROM oauth_flows").await, flows);

    // A deployment on plain http cannot use a document (the draft requires https): the same
    // server's dynamic registration is used instead.
    let served = Served::start(cmd(&t, &keys)).await;
    let r = follow_link(&t, &keys, &served, "documented").await;
    assert!(r.status().is_redirection(), "{}", r.status());
    let location = url::Url::parse(r.headers()["location"].to_str().unwrap()).unwrap();
    let query: std::collections::HashMap<String, String> = location.query_pairs().into_owned().collect();
    let registered: i64 = count(&t, "SELECT count(*) FROM oauth_clients").await;
    assert_eq!(registered, 1, "registered dynamically");
    assert_ne!(query["client_id"], document_url);
    assert!(!query["client_id"].starts_with("http"), "{}", query["client_id"]);
}

#[tokio::test]
async fn a_server_that_fetches_the_document_completes_a_flow_with_it_as_the_client_id() {
    let t = TestDb::new().await;
    let keys = key("k1");
    let port = free_port();
    let proxy = TlsProxy::start(&format!("http://127.0.0.1:{port}")).await;
    let public = proxy.base.clone();
    let cert = proxy.cert.to_str().unwrap().to_owned();
    let provider = OidcPeer::start_with(
        &public,
        &[
            ("OIDC_DOWNSTREAM_CLIENT_ID", CLIENT),
            ("OIDC_CIMD", "1"),
            ("OIDC_FETCH_LOOPBACK", "1"),
            ("NODE_EXTRA_CA_CERTS", &cert),
            ("OIDC_TEST_STATS", "1"),
        ],
    )
    .await;
    let everything = common::Everything::start().await;
    let upstream = everything.url.trim_end_matches("/mcp").to_owned();
    let (mcp_url, seen) = protected_mcp(&provider.issuer, &upstream, GateOptions::default()).await;
    tenant(&t, &keys).await;
    add_remote(&t, &keys, "documented", &mcp_url, json!({ "type": "oauth", "grant": "shared", "scopes": ["openid", "mcp"] }))
        .await;
    let mut https = cmd(&t, &keys);
    https.env("GATEHOUSE_PUBLIC_URL", &public);
    let served = Served::start_on(https, port).await;

    // The person follows a connect link; the provider fetches the document over https from
    // Gatehouse (through the proxy), shows its login, and sends them back to the callback.
    let link = mint_link(&t, &keys, "documented").await;
    let person = Browser::new(&public);
    let callback = walk_to_callback(&person, &format!("{}{link}", served.base), "it-admin").await;
    let callback = callback.replace(&public, &served.base);
    let r = person.client.get(&callback).send().await.unwrap();
    let status = r.status();
    assert_eq!(status, StatusCode::OK, "{}", r.text().await.unwrap());
    let s: Value = common::downstream::stats(&provider.issuer).await;
    let exchange = s["tokens"].as_array().unwrap().iter().find(|t| t["grant_type"] == "authorization_code").unwrap().clone();
    assert_eq!((exchange["auth"].as_str(), exchange["status"].as_u64()), (Some("none"), Some(200)), "{s}");
    assert_eq!(count(&t, "SELECT count(*) FROM oauth_clients").await, 0, "no dynamic registration");
    assert_eq!(
        count(&t, &format!("SELECT count(*) FROM oauth_grants WHERE client_id = '{public}/oauth/client-metadata.json'")).await,
        1
    );

    // The grant serves calls through the gate, which checks the token's audience.
    let machine = common::provision(&t.url, "acme").await;
    let echo = json!({ "address": "documented.echo", "args": { "message": "documented client" } });
    let (err, body, raw) = tool(&format!("{}/t/acme/w/main/mcp", served.base), &machine, "call_tool", echo).await;
    assert!(!err && raw.contains("documented client"), "{body}");
    assert!(!seen.lock().unwrap().is_empty());
}
