//! Membership fences (issue 7 §8): removing a member raises its principal's fence in the same
//! transaction; an invitation accept whose request started before the latest removal is refused
//! (409 `membership_fenced`, nothing written), one started after it is admitted, and a fence is
//! never lowered. The race is real: the accepting request is held mid-transaction in the
//! database while the removal commits.

mod common;

use std::time::Duration;

use common::{Served, TestDb, browser::Browser, cli, dev_sign_in, downstream::count, email_fill, eventually, gatehouse};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use sqlx::{Connection, Executor};

/// Walks a sign-in from `/login` through the development provider as `email`, and stops at
/// the redirect to Gatehouse's callback (the request that accepts invitations), returned
/// unfollowed.
async fn walk_to_sign_in_callback(b: &Browser, email: &'static str) -> String {
    let fill = email_fill(email);
    let mut method = Method::GET;
    let mut url = url::Url::parse(&format!("{}/login?next=/", b.base)).unwrap();
    let mut form: Vec<(String, String)> = Vec::new();
    for _ in 0..25 {
        let request = b.client.request(method.clone(), url.clone());
        let request = if method == Method::POST { request.form(&form) } else { request };
        let response = request.send().await.unwrap();
        let status = response.status();
        if status.is_redirection() {
            let location = response.headers()["location"].to_str().unwrap().to_owned();
            url = url.join(&location).unwrap();
            method = Method::GET;
            if url.as_str().starts_with(&format!("{}/auth/callback", b.base)) {
                return url.to_string();
            }
            continue;
        }
        let body = response.text().await.unwrap();
        let (action, fields) = common::browser::first_form(&body).unwrap_or_else(|| panic!("no form at {url}: {status} {body}"));
        url = url.join(&action).unwrap();
        method = Method::POST;
        form = fields.into_iter().map(|(k, v)| (k.clone(), fill(&k).unwrap_or(v))).collect();
    }
    panic!("the sign-in walk did not reach the callback");
}

async fn member_id(alice: &Browser, email: &str) -> Option<String> {
    let members: Value =
        alice.client.get(format!("{}/api/v1/tenants/acme/members", alice.base)).send().await.unwrap().json().await.unwrap();
    members.as_array().unwrap().iter().find(|m| m["email"] == email).map(|m| m["id"].as_str().unwrap().to_owned())
}

async fn invite(alice: &Browser, email: &str) -> String {
    let r = alice.write(Method::POST, "/api/v1/tenants/acme/invitations", json!({ "email": email, "role": "member" })).await;
    assert_eq!(r.status(), 201);
    r.json::<Value>().await.unwrap()["id"].as_str().unwrap().to_owned()
}

/// The raised time of the one fence of this test (only bob is ever removed).
async fn fence_of_bob(t: &TestDb) -> Option<String> {
    let mut owner = t.owner_conn().await;
    let mut tx = owner.begin().await.unwrap();
    tx.execute("SELECT set_config('gatehouse.platform', 'on', true)").await.unwrap();
    sqlx::query_scalar("SELECT raised_at::text FROM member_fences").fetch_optional(&mut *tx).await.unwrap()
}

#[tokio::test]
async fn a_removal_fences_out_an_accept_already_in_flight_and_never_a_later_one() {
    let t = TestDb::new().await;
    cli(&t.url, &["tenant", "create", "acme", "--name", "Acme", "--owner-email", "alice@example.test"]).await;
    let served = Served::start(gatehouse(Some(&t.url))).await;
    let alice = dev_sign_in(&served, "alice@example.test").await;
    invite(&alice, "bob@example.test").await;
    let _bob = dev_sign_in(&served, "bob@example.test").await;
    let bob_id = member_id(&alice, "bob@example.test").await.expect("bob joined");
    assert!(fence_of_bob(&t).await.is_none(), "no removal yet, no fence");
    // A second invitation for bob is outstanding while he is a member.
    let second = invite(&alice, "bob@example.test").await;

    // Bob's next sign-in reaches its callback; the test holds the invitation's row so the
    // callback's transaction stops inside the database, after the request began.
    let bob = Browser::new(&served.base);
    let callback = walk_to_sign_in_callback(&bob, "bob@example.test").await;
    let mut holder = t.owner_conn().await;
    let mut hold = holder.begin().await.unwrap();
    hold.execute("SELECT set_config('gatehouse.platform', 'on', true)").await.unwrap();
    sqlx::query(sqlx::AssertSqlSafe(format!("SELECT 1 FROM invitations WHERE id = '{second}' FOR UPDATE")))
        .fetch_one(&mut *hold)
        .await
        .unwrap();
    let holder_pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()").fetch_one(&mut *hold).await.unwrap();
    let client = bob.client.clone();
    let accept = tokio::spawn(async move {
        let r = client.get(callback).send().await.unwrap();
        (r.status(), r.text().await.unwrap())
    });
    let waiting = eventually(Duration::from_secs(60), || async {
        let blocked = format!("SELECT count(*) FROM pg_locks WHERE NOT granted AND {holder_pid} = ANY(pg_blocking_pids(pid))");
        count(&t, &blocked).await >= 1 || accept.is_finished()
    })
    .await;
    assert!(waiting && !accept.is_finished(), "the accepting request is in flight, waiting inside its transaction");

    // The removal commits while the accept is in flight.
    let r = alice.write(Method::DELETE, &format!("/api/v1/tenants/acme/members/{bob_id}"), json!({})).await;
    assert_eq!(r.status(), 204);
    let raised = fence_of_bob(&t).await.expect("the removal raised bob's fence");
    hold.rollback().await.unwrap();
    let (status, body) = accept.await.unwrap();
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert!(body.contains("membership_fenced"), "{body}");
    // Nothing written: not a member, the invitation still outstanding, no session, one join.
    assert!(member_id(&alice, "bob@example.test").await.is_none());
    let outstanding = format!("SELECT count(*) FROM invitations WHERE id = '{second}' AND consumed_at IS NULL");
    assert_eq!(count(&t, &outstanding).await, 1);
    assert_eq!(count(&t, "SELECT count(*) FROM sessions WHERE email = 'bob@example.test'").await, 0);
    let joins = "SELECT count(*) FROM admin_log WHERE action = 'member.join' AND after->>'role' = 'member'";
    assert_eq!(count(&t, joins).await, 1);

    // A sign-in that starts after the removal is admitted.
    let _bob = dev_sign_in(&served, "bob@example.test").await;
    let bob_id = member_id(&alice, "bob@example.test").await.expect("bob joined again");
    assert_eq!(count(&t, &outstanding).await, 0);
    assert_eq!(count(&t, joins).await, 2);

    // The fence is only ever raised: a second removal moves it later, and lowering it is
    // refused by the database itself.
    let r = alice.write(Method::DELETE, &format!("/api/v1/tenants/acme/members/{bob_id}"), json!({})).await;
    assert_eq!(r.status(), 204);
    let later = fence_of_bob(&t).await.unwrap();
    assert_eq!(count(&t, &format!("SELECT ('{later}'::timestamptz > '{raised}'::timestamptz)::int::bigint")).await, 1);
    let mut owner = t.owner_conn().await;
    let mut tx = owner.begin().await.unwrap();
    tx.execute("SELECT set_config('gatehouse.platform', 'on', true)").await.unwrap();
    let lowered = tx.execute("UPDATE member_fences SET raised_at = raised_at - interval '1 second'").await;
    let error = lowered.expect_err("a fence cannot be lowered").to_string();
    assert!(error.contains("only ever raised"), "{error}");
    assert_eq!(served.terminate().await, 0);
}
