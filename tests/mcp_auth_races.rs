//! MCP authorization under real concurrency (two server processes), and retention of its
//! tokens, codes and anonymous registrations.

mod common;

use common::{
    Served, dev_sign_in, gatehouse,
    mcp_oauth::{authorize, authorize_url, consent, get, location_query, pkce, register, setup, status_at, token_request},
};
use reqwest::StatusCode;
use serde_json::Value;

#[tokio::test]
async fn concurrent_refreshes_and_code_exchanges_across_two_replicas_have_one_winner() {
    let s = setup().await;
    let one = Served::start(gatehouse(Some(&s.t.url))).await;
    let two = Served::start(gatehouse(Some(&s.t.url))).await;
    let endpoint = format!("{}/t/acme/w/main/mcp", one.base);
    let redirect = "http://127.0.0.1:6000/cb";
    let (_, client) = register(&one.base, "acme", redirect).await;
    let client_id = client["client_id"].as_str().unwrap().to_owned();
    let alice = dev_sign_in(&one, "alice@example.test").await;
    let (_, refresh) = authorize(&alice, "acme", &client_id, redirect, &endpoint).await;

    let attempts = (0..8).map(|i| {
        let base = if i % 2 == 0 { one.base.clone() } else { two.base.clone() };
        let (refresh, client_id) = (refresh.clone(), client_id.clone());
        tokio::spawn(async move {
            token_request(
                &base,
                "acme",
                &[("grant_type", "refresh_token"), ("refresh_token", &refresh), ("client_id", &client_id)],
            )
            .await
        })
    });
    let results: Vec<(StatusCode, Value)> = futures::future::join_all(attempts).await.into_iter().map(Result::unwrap).collect();
    let winners: Vec<&Value> = results.iter().filter(|(s, _)| *s == 200).map(|(_, b)| b).collect();
    assert_eq!(winners.len(), 1, "{results:?}");
    assert!(results.iter().filter(|(s, _)| *s != 200).all(|(s, b)| *s == 400 && b["error"] == "invalid_grant"), "{results:?}");
    // The others presented a spent refresh token: the family is revoked, the winner's too.
    let access = winners[0]["access_token"].as_str().unwrap();
    for replica in [&one.base, &two.base] {
        assert_eq!(status_at(&format!("{replica}/t/acme/w/main/mcp"), access).await, 401, "{replica}");
    }
    let log = common::admin_log_text(&s.t).await;
    assert_eq!(log.matches("refresh_reused").count(), 1, "revoked exactly once");

    // One authorization code raced the same way: one exchange wins, the replays revoke it.
    let (verifier, challenge) = pkce();
    let url = authorize_url(
        &one.base,
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
    let code = get(&location_query(&consent(&alice, &url).await), "code").unwrap().to_owned();
    let attempts = (0..6).map(|i| {
        let base = if i % 2 == 0 { one.base.clone() } else { two.base.clone() };
        let (code, verifier, client_id) = (code.clone(), verifier.clone(), client_id.clone());
        tokio::spawn(async move {
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
        })
    });
    let results: Vec<(StatusCode, Value)> = futures::future::join_all(attempts).await.into_iter().map(Result::unwrap).collect();
    let winners: Vec<&Value> = results.iter().filter(|(s, _)| *s == 200).map(|(_, b)| b).collect();
    assert_eq!(winners.len(), 1, "{results:?}");
    assert_eq!(status_at(&endpoint, winners[0]["access_token"].as_str().unwrap()).await, 401);
    assert_eq!(common::admin_log_text(&s.t).await.matches("code_replayed").count(), 1);
}

#[tokio::test]
async fn expired_tokens_are_pruned_on_write_through_their_index() {
    use sqlx::{Connection, Executor};
    let s = setup().await;
    let tenant = gatehouse::tenants::by_slug(&s.t.db, "acme").await.unwrap().id;
    let mut owner = s.t.owner_conn().await;
    owner.execute("SELECT set_config('gatehouse.platform', 'on', false)").await.unwrap();
    for sql in [
        "INSERT INTO mcp_clients (tenant_id, id, client_id, kind, name, redirect_uris) VALUES ($1, $1, 'gmc_x', 'registered', 'n', ARRAY['http://127.0.0.1/cb'])",
        "INSERT INTO mcp_grants (tenant_id, id, client_ref, member_id, workspace_id, resource, scope)
         SELECT $1, $1, $1, gen_random_uuid(), id, 'r', 'mcp' FROM workspaces WHERE tenant_id = $1 AND slug = 'main'",
        "INSERT INTO mcp_tokens (tenant_id, token_hash, grant_id, kind, expires_at)
         SELECT $1, convert_to('old' || i, 'UTF8'), $1, 'access', now() - interval '25 hours' FROM generate_series(1, 150) i",
        "INSERT INTO mcp_tokens (tenant_id, token_hash, grant_id, kind, expires_at)
         SELECT $1, convert_to('recent' || i, 'UTF8'), $1, 'access', now() - interval '23 hours' FROM generate_series(1, 5) i",
    ] {
        sqlx::query(sql).bind(tenant).execute(&mut owner).await.unwrap();
    }
    let count = |sql: &'static str| {
        let url = s.t.url.clone();
        async move {
            let mut c = sqlx::PgConnection::connect(url.expose()).await.unwrap();
            c.execute("SELECT set_config('gatehouse.platform', 'on', false)").await.unwrap();
            sqlx::query_scalar::<_, i64>(sql).fetch_one(&mut c).await.unwrap()
        }
    };
    let prune = || {
        s.t.db
            .serializable(gatehouse::db::Scope::Tenant(tenant), |conn, _| Box::pin(gatehouse::mcp_auth::tx::prune(conn, tenant)))
    };
    prune().await.unwrap();
    assert_eq!(count("SELECT count(*) FROM mcp_tokens WHERE token_hash::text LIKE '%6f6c64%'").await, 50, "100 pruned per write");
    prune().await.unwrap();
    assert_eq!(count("SELECT count(*) FROM mcp_tokens").await, 5, "only tokens expired over a day ago go");

    // Each prune is one index range, never a sequential scan.
    let mut tx = owner.begin().await.unwrap();
    tx.execute("SET LOCAL enable_seqscan = off").await.unwrap();
    let plan: Vec<String> = sqlx::query_scalar(
        "EXPLAIN WITH doomed AS MATERIALIZED (
            SELECT token_hash FROM mcp_tokens WHERE tenant_id = $1 AND expires_at < now() - interval '1 day'
             ORDER BY expires_at LIMIT 100)
         DELETE FROM mcp_tokens t USING doomed d WHERE t.tenant_id = $1 AND t.token_hash = d.token_hash",
    )
    .bind(tenant)
    .fetch_all(&mut *tx)
    .await
    .unwrap();
    let plan = plan.join("\n");
    assert!(plan.contains("mcp_tokens_expiry") && plan.contains("Limit") && !plan.contains("Seq Scan"), "{plan}");
    tx.rollback().await.unwrap();

    // Anonymous registrations nobody authorized are pruned after a day; used ones stay.
    sqlx::query(
        "INSERT INTO mcp_clients (tenant_id, id, client_id, kind, name, redirect_uris, created_at)
         SELECT $1, gen_random_uuid(), 'gmc_stale' || i, 'registered', 'n', ARRAY['http://127.0.0.1/cb'], now() - interval '25 hours'
           FROM generate_series(1, 3) i",
    )
    .bind(tenant)
    .execute(&mut owner)
    .await
    .unwrap();
    sqlx::query("UPDATE mcp_clients SET created_at = now() - interval '2 days' WHERE tenant_id = $1 AND client_id = 'gmc_x'")
        .bind(tenant)
        .execute(&mut owner)
        .await
        .unwrap();
    let unused =
        s.t.db
            .serializable(gatehouse::db::Scope::Tenant(tenant), |conn, _| {
                Box::pin(gatehouse::mcp_auth::tx::prune_registrations(conn, tenant))
            })
            .await
            .unwrap();
    assert_eq!(unused, 0);
    assert_eq!(count("SELECT count(*) FROM mcp_clients").await, 1, "only the client with a grant is left");
}
