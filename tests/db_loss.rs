//! A replica whose database connections all die at once (a PostgreSQL restart, a failover, an
//! administrator terminating backends) recovers at once: the first failure condemns every
//! pooled and lane connection opened before it, so at most one request fails, and readiness
//! answers from a fresh connection on its first probe, idle replicas included. A database
//! that goes away and comes back (a TCP gate in front of it) is seen ready again at once, and a
//! write on a read-only node answers 503 `database_read_only` while its next attempt, on a
//! fresh connection, goes through.

mod common;

use common::{DbGate as Gate, Served, TestDb, cli, gatehouse, provision};
use sqlx::Executor;

/// Terminates every backend of the test database that Gatehouse opened.
async fn kill_backends(t: &TestDb) -> i64 {
    let mut owner = t.owner_conn().await;
    let killed: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity
          WHERE datname = current_database() AND application_name = 'gatehouse' AND pid <> pg_backend_pid()) k",
    )
    .fetch_one(&mut owner)
    .await
    .unwrap();
    owner.execute("SELECT 1").await.unwrap();
    killed
}

/// Opens many pooled connections at once, so the pool holds several idle ones.
async fn widen_pool(base: &str, machine: &common::Machine) {
    let mut calls = Vec::new();
    for _ in 0..12 {
        let (ready, api) = (format!("{base}/readyz"), format!("{base}/api/v1/tenants/acme"));
        let m = machine.clone();
        calls.push(tokio::spawn(async move {
            common::http().get(ready).send().await.unwrap();
            m.headers(common::http().get(api)).send().await.unwrap();
        }));
    }
    for c in calls {
        c.await.unwrap();
    }
}

#[tokio::test]
async fn lost_connections_are_dropped_at_once_and_readiness_follows_the_database() {
    let t = TestDb::new().await;
    cli(&t.url, &["tenant", "create", "acme", "--name", "Acme"]).await;
    let machine = provision(&t.url, "acme").await;
    let busy = Served::start(gatehouse(Some(&t.url))).await;
    let idle = Served::start(gatehouse(Some(&t.url))).await;
    let api = format!("{}/api/v1/tenants/acme", busy.base);

    for round in 0..3 {
        widen_pool(&busy.base, &machine).await;
        widen_pool(&idle.base, &machine).await;
        let killed = kill_backends(&t).await;
        assert!(killed >= 4, "round {round}: the replicas held several connections ({killed})");

        // The idle replica's first probe meets a dead connection, and answers from a fresh one.
        let r = common::http().get(format!("{}/readyz", idle.base)).send().await.unwrap();
        assert_eq!(r.status(), 200, "round {round}: readiness on the first probe: {}", r.text().await.unwrap());

        // On the busy replica at most one request fails (503, retryable): the first dead pooled
        // connection met condemns the rest, and the hot path's epoch reads retry on a fresh
        // lane connection.
        let mut statuses = Vec::new();
        for _ in 0..12 {
            statuses.push(machine.headers(common::http().get(&api)).send().await.unwrap().status().as_u16());
        }
        let failed = statuses.iter().filter(|s| **s != 200).count();
        assert!(failed <= 1, "round {round}: {statuses:?}");
        assert!(statuses.iter().all(|s| *s == 200 || *s == 503), "round {round}: {statuses:?}");
    }
}

#[tokio::test]
async fn readiness_follows_a_database_that_went_away_and_came_back() {
    let t = TestDb::new().await;
    cli(&t.url, &["tenant", "create", "acme", "--name", "Acme"]).await;
    let machine = provision(&t.url, "acme").await;
    let mut url = reqwest::Url::parse(t.url.expose()).unwrap();
    let mut gate = Gate::new(url.port().unwrap()).await;
    url.set_port(Some(gate.port)).unwrap();
    let via = gatehouse::config::Secret::new(url.to_string());
    // One replica probed throughout (as a kubelet would), one never probed while it was down.
    let probed = Served::start(gatehouse(Some(&via))).await;
    let unprobed = Served::start(gatehouse(Some(&via))).await;
    let client = reqwest::Client::builder().timeout(std::time::Duration::from_secs(5)).build().unwrap();
    let ready = |base: &str| {
        let (client, url) = (client.clone(), format!("{base}/readyz"));
        async move { client.get(url).send().await.map(|r| r.status().as_u16()).unwrap_or(0) }
    };

    for round in 0..3 {
        widen_pool(&probed.base, &machine).await;
        widen_pool(&unprobed.base, &machine).await;
        gate.shut().await;
        // Down for ten probes, 100 ms apart: none of them is ready.
        for probe in 0..10 {
            let started = std::time::Instant::now();
            assert_ne!(ready(&probed.base).await, 200, "round {round}, probe {probe}: ready while the database is gone");
            tokio::time::sleep(std::time::Duration::from_millis(100).saturating_sub(started.elapsed())).await;
        }
        gate.open();
        let back = std::time::Instant::now();
        let mut probes = 0;
        let deadline = back + std::time::Duration::from_secs(30);
        loop {
            probes += 1;
            if ready(&probed.base).await == 200 {
                break;
            }
            assert!(std::time::Instant::now() < deadline, "round {round}: not ready 30 s after the database came back");
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        let probed_ms = back.elapsed().as_millis();
        let first = std::time::Instant::now();
        let unprobed_first = ready(&unprobed.base).await;
        println!(
            "round {round}: probed replica ready {probed_ms} ms after the database came back ({probes} probes); \
             the unprobed replica's first probe answered {unprobed_first} in {} ms",
            first.elapsed().as_millis()
        );
        assert_eq!(unprobed_first, 200, "round {round}: an idle replica's first probe after the database is back");
        let r = machine.headers(common::http().get(format!("{}/api/v1/tenants/acme", unprobed.base))).send().await.unwrap();
        assert_eq!(r.status(), 200, "round {round}: requests go through again");
    }
    gate.shut().await;
}

#[tokio::test]
async fn a_write_on_a_read_only_node_answers_database_read_only_and_the_next_attempt_goes_through() {
    let t = TestDb::new().await;
    cli(&t.url, &["tenant", "create", "acme", "--name", "Acme"]).await;
    let machine = provision(&t.url, "acme").await;
    let served = Served::start(gatehouse(Some(&t.url))).await;
    let key = format!("{}/api/v1/tenants/acme/kv/x", served.base);
    let put = |value: i64| machine.headers(common::http().put(&key)).json(&serde_json::json!({ "value": value })).send();
    let value = || async {
        machine.headers(common::http().get(&key)).send().await.unwrap().json::<serde_json::Value>().await.unwrap()["value"]
            .clone()
    };
    assert_eq!(put(1).await.unwrap().status(), 200);

    // The node turns read-only (as a demoted primary does) under connections the pool holds.
    let mut owner = t.owner_conn().await;
    owner
        .execute(sqlx::AssertSqlSafe(format!("ALTER DATABASE {} SET default_transaction_read_only = on", t.name)))
        .await
        .unwrap();
    kill_backends(&t).await;
    let r = put(2).await.unwrap();
    assert_eq!(r.status(), 503);
    let problem: serde_json::Value = r.json().await.unwrap();
    assert_eq!(problem["code"], "database_read_only", "{problem}");
    assert_eq!(value().await, 1, "reads still answer, and the refused write left nothing");

    // Writable again (the failover finished): the pooled connections opened while it was
    // read-only fail their first write, which condemns them and runs again on a fresh one.
    owner.execute(sqlx::AssertSqlSafe(format!("ALTER DATABASE {} RESET default_transaction_read_only", t.name))).await.unwrap();
    let r = put(3).await.unwrap();
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    assert_eq!(value().await, 3);
}
