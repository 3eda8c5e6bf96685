//! `Idempotency-Key` on mutating API calls (issue 21 §2): the same key with the same request
//! answers the stored answer and runs nothing; another request under the key is refused with
//! 422 `idempotency_key_reused` and writes nothing; concurrent duplicates, spread over two
//! `serve` processes, run exactly once and all answer the one stored answer.

mod common;

use common::{Machine, Served, TestDb, cli, gatehouse, provision};
use serde_json::{Value, json};
use sqlx::{Connection, Executor};

/// How many admin-log entries target `target` (each kv write logs one).
async fn logged(t: &TestDb, target: &str) -> i64 {
    let mut owner = t.owner_conn().await;
    let mut tx = owner.begin().await.unwrap();
    tx.execute("SELECT set_config('gatehouse.platform', 'on', true)").await.unwrap();
    sqlx::query_scalar("SELECT count(*) FROM admin_log WHERE target = $1").bind(target).fetch_one(&mut *tx).await.unwrap()
}

/// How many keys are stored, over every tenant.
async fn stored_keys(t: &TestDb) -> i64 {
    let mut owner = t.owner_conn().await;
    let mut tx = owner.begin().await.unwrap();
    tx.execute("SELECT set_config('gatehouse.platform', 'on', true)").await.unwrap();
    sqlx::query_scalar("SELECT count(*) FROM idempotency_keys").fetch_one(&mut *tx).await.unwrap()
}

async fn send(m: &Machine, req: reqwest::RequestBuilder, key: Option<&str>, body: Value) -> (u16, Value, bool) {
    let mut req = m.headers(req).json(&body);
    if let Some(key) = key {
        req = req.header("idempotency-key", key);
    }
    let r = req.send().await.unwrap();
    let status = r.status().as_u16();
    let replayed = r.headers().get("idempotent-replayed").is_some_and(|v| v == "true");
    (status, r.json().await.unwrap_or(Value::Null), replayed)
}

#[tokio::test]
async fn the_same_request_replays_its_answer_and_another_request_under_the_key_is_refused() {
    let t = TestDb::new().await;
    cli(&t.url, &["tenant", "create", "acme", "--name", "Acme"]).await;
    cli(&t.url, &["tenant", "create", "bolt", "--name", "Bolt"]).await;
    let (ann, ben, other) = (provision(&t.url, "acme").await, provision(&t.url, "acme").await, provision(&t.url, "bolt").await);
    let s = Served::start(gatehouse(Some(&t.url))).await;
    let put = |tenant: &str, key: &str| common::http().put(format!("{}/api/v1/tenants/{tenant}/kv/{key}", s.base));

    let first = send(&ann, put("acme", "a"), Some("k-1"), json!({ "value": 1 })).await;
    assert_eq!((first.0, first.2), (200, false), "{first:?}");
    // Each execution stamps its own updated_at: a replay answers the first one's, byte for byte.
    let again = send(&ann, put("acme", "a"), Some("k-1"), json!({ "value": 1 })).await;
    assert_eq!(again, (200, first.1.clone(), true));
    assert_eq!(logged(&t, "kv:a").await, 1, "the replay ran nothing");

    // The key with another body, another path, or from another caller of the tenant: refused,
    // and nothing written.
    for (who, req, body) in [
        (&ann, put("acme", "a"), json!({ "value": 2 })),
        (&ann, put("acme", "b"), json!({ "value": 1 })),
        (&ben, put("acme", "a"), json!({ "value": 1 })),
    ] {
        let (status, problem, _) = send(who, req, Some("k-1"), body).await;
        assert_eq!((status, problem["code"].as_str()), (422, Some("idempotency_key_reused")), "{problem}");
    }
    assert_eq!(logged(&t, "kv:a").await + logged(&t, "kv:b").await, 1);
    let r = ann.headers(common::http().get(format!("{}/api/v1/tenants/acme/kv/a", s.base))).send().await.unwrap();
    assert_eq!(r.json::<Value>().await.unwrap()["value"], 1);
    assert_eq!(stored_keys(&t).await, 1);

    // Keys are per tenant: another tenant's caller with the same key and body runs its own.
    let theirs = send(&other, put("bolt", "a"), Some("k-1"), json!({ "value": 1 })).await;
    assert_eq!((theirs.0, theirs.2), (200, false), "{theirs:?}");
    assert_eq!(stored_keys(&t).await, 2);

    // A request the handler refuses (a compare-and-set whose expectation fails) stores nothing,
    // so once the expectation holds the same key and request run.
    let cas = || common::http().post(format!("{}/api/v1/tenants/acme/kv-cas", s.base));
    let body = json!({ "key": "c", "expect": { "value": 1 }, "next": { "value": 2 } });
    assert_eq!(send(&ann, cas(), Some("k-2"), body.clone()).await.0, 412);
    assert_eq!(stored_keys(&t).await, 2);
    assert_eq!(send(&ann, put("acme", "c"), None, json!({ "value": 1 })).await.0, 200);
    assert_eq!(send(&ann, cas(), Some("k-2"), body.clone()).await, (200, json!({ "swapped": true }), false));
    assert_eq!(send(&ann, cas(), Some("k-2"), body).await, (200, json!({ "swapped": true }), true));

    // Without a key, nothing is stored and a repeat runs again.
    send(&ann, put("acme", "d"), None, json!({ "value": 1 })).await;
    send(&ann, put("acme", "d"), None, json!({ "value": 1 })).await;
    assert_eq!(logged(&t, "kv:d").await, 2);

    // A malformed key is refused before anything runs.
    for key in ["has space", &"x".repeat(256)] {
        let (status, problem, _) = send(&ann, put("acme", "e"), Some(key), json!({ "value": 1 })).await;
        assert_eq!((status, problem["code"].as_str()), (422, Some("invalid_idempotency_key")), "{problem}");
    }
    assert_eq!(logged(&t, "kv:e").await, 0);
}

#[tokio::test]
async fn concurrent_duplicates_on_two_replicas_run_once_and_all_answer_the_stored_answer() {
    let t = TestDb::new().await;
    cli(&t.url, &["tenant", "create", "acme", "--name", "Acme"]).await;
    let m = provision(&t.url, "acme").await;
    let replicas = [Served::start(gatehouse(Some(&t.url))).await, Served::start(gatehouse(Some(&t.url))).await];
    let bases: Vec<String> = replicas.iter().map(|r| r.base.clone()).collect();

    // A compare-and-set only one of many can win, and a plain write each of many would repeat:
    // under one key, both run once and every duplicate answers the winner's answer.
    let cases = [
        ("kv-cas", "race", json!({ "key": "race", "expect": { "absent": true }, "next": { "value": "won" } })),
        ("kv/plain", "plain", json!({ "value": "once" })),
    ];
    for round in 0..3 {
        for (path, target, body) in &cases {
            let key = format!("dup-{path}-{round}");
            let mut tasks = Vec::new();
            for i in 0..32 {
                let (m, body, key, cas) = (m.clone(), body.clone(), key.clone(), path.starts_with("kv-cas"));
                let url = format!("{}/api/v1/tenants/acme/{path}", bases[i % 2]);
                tasks.push(tokio::spawn(async move {
                    let req = if cas { common::http().post(url) } else { common::http().put(url) };
                    send(&m, req, Some(&key), body).await
                }));
            }
            let mut answers = Vec::new();
            for task in tasks {
                answers.push(task.await.unwrap());
            }
            let first = answers[0].1.clone();
            assert!(answers.iter().all(|(s, b, _)| *s == 200 && *b == first), "round {round} {path}: {answers:?}");
            let fresh = answers.iter().filter(|(_, _, replayed)| !replayed).count();
            assert_eq!(fresh, 1, "round {round} {path}: exactly one answer is the execution's own");
            // Each earlier round of the race also logged the delete that reset it.
            let expected = if *target == "race" { 2 * round + 1 } else { round + 1 };
            assert_eq!(logged(&t, &format!("kv:{target}")).await, expected, "round {round} {path}: ran exactly once");
        }
        // The next round starts from absent again.
        let r = m.headers(common::http().delete(format!("{}/api/v1/tenants/acme/kv/race", bases[0]))).send().await.unwrap();
        assert_eq!(r.status(), 204);
    }
}

/// An answer that hands out a secret (a new token) is not kept under its key: a retry creates
/// nothing and is told so, and the key's row holds no secret (the suite's secret scan, which
/// reads bytea columns too, checks every row when the test ends).
#[tokio::test]
async fn an_answer_that_hands_out_a_secret_is_withheld_from_a_retry_and_not_stored() {
    let t = TestDb::new().await;
    cli(&t.url, &["tenant", "create", "acme", "--name", "Acme", "--owner-email", "alice@example.test"]).await;
    let s = Served::start(gatehouse(Some(&t.url))).await;
    let alice = common::dev_sign_in(&s, "alice@example.test").await;
    let create = || async {
        let csrf = alice.csrf().await;
        let r = alice
            .client
            .post(format!("{}/api/v1/tenants/acme/tokens", s.base))
            .header("origin", &s.base)
            .header("x-csrf-token", csrf)
            .header("idempotency-key", "k-token")
            .json(&json!({ "name": "deploy" }))
            .send()
            .await
            .unwrap();
        let replayed = r.headers().get("idempotent-replayed").is_some_and(|v| v == "true");
        (r.status().as_u16(), r.json::<Value>().await.unwrap(), replayed)
    };
    let (status, made, replayed) = create().await;
    assert_eq!((status, replayed), (201, false), "{made}");
    assert!(made["secret"].as_str().is_some_and(|t| t.starts_with("gth_")), "{made}");
    let (status, retry, replayed) = create().await;
    assert_eq!((status, retry["code"].as_str(), replayed), (409, Some("idempotency_answer_withheld"), true), "{retry}");
    assert!(!retry.to_string().contains("gth_"), "{retry}");
    let id = made["token"]["id"].as_str().unwrap();
    assert_eq!(logged(&t, &format!("token:{id}")).await, 1, "the retry created nothing");
    assert_eq!(stored_keys(&t).await, 1);
}

/// A change that committed but whose answer was never stored (the database failed between the
/// COMMIT and storing the answer, or the COMMIT's answer was lost) is no longer "in progress"
/// once its claim is 30 s old: a retry learns, definitely, that it was carried out, and runs
/// nothing. The state is made the way a failover leaves it: the stored answer removed, the
/// claim aged.
#[tokio::test]
async fn a_committed_change_whose_answer_was_lost_answers_answer_lost_and_runs_nothing_again() {
    let t = TestDb::new().await;
    cli(&t.url, &["tenant", "create", "acme", "--name", "Acme"]).await;
    let ann = provision(&t.url, "acme").await;
    let s = Served::start(gatehouse(Some(&t.url))).await;
    let put = || common::http().put(format!("{}/api/v1/tenants/acme/kv/lost", s.base));
    assert_eq!(send(&ann, put(), Some("k-lost"), json!({ "value": 1 })).await.0, 200);

    let orphan = |age_secs: i32| {
        let t = &t;
        async move {
            let mut owner = t.owner_conn().await;
            let mut tx = owner.begin().await.unwrap();
            tx.execute("SELECT set_config('gatehouse.platform', 'on', true)").await.unwrap();
            sqlx::query(
                "UPDATE idempotency_keys SET status = NULL, content_type = NULL, body = NULL,
                        created_at = clock_timestamp() - make_interval(secs => $1) WHERE key = 'k-lost'",
            )
            .bind(f64::from(age_secs))
            .execute(&mut *tx)
            .await
            .unwrap();
            tx.commit().await.unwrap();
        }
    };
    orphan(31).await;
    let (status, problem, _) = send(&ann, put(), Some("k-lost"), json!({ "value": 1 })).await;
    assert_eq!((status, problem["code"].as_str()), (409, Some("idempotency_answer_lost")), "{problem}");
    // The same key with another body is still refused as reused, not told about the first.
    let (status, problem, _) = send(&ann, put(), Some("k-lost"), json!({ "value": 2 })).await;
    assert_eq!((status, problem["code"].as_str()), (422, Some("idempotency_key_reused")), "{problem}");
    assert_eq!(logged(&t, "kv:lost").await, 1, "the retries ran nothing");

    // A claim still young is in progress: the retry waits for the answer, then says so.
    orphan(0).await;
    let (status, problem, _) = send(&ann, put(), Some("k-lost"), json!({ "value": 1 })).await;
    assert_eq!((status, problem["code"].as_str()), (409, Some("idempotency_key_in_progress")), "{problem}");
    assert_eq!(logged(&t, "kv:lost").await, 1);
}
