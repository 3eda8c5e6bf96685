//! A replica whose database connections all die at once (a PostgreSQL restart, a failover, an
//! administrator terminating backends) recovers at once: the first failure condemns every
//! pooled and lane connection opened before it, so at most one request fails, and readiness
//! answers from a fresh connection on its first probe, idle replicas included.

mod common;

use common::{Served, TestDb, cli, gatehouse, provision};
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
