//! Acknowledged invalidation across `gatehouse serve` processes on one database (issue 20):
//! replicas answer from the epochs they applied instead of reading them per request, and a
//! change that moves an epoch returns only once every replica with a live lease applied it (or
//! its lease lapsed). So once a revoke has returned, no replica accepts the revoked secret —
//! through a lost LISTEN connection, a frozen process and a lost database.

mod common;

use std::{sync::Arc, time::Duration};

use common::{Machine, Served, TestDb, cli, eventually, gatehouse, http, metric};
use gatehouse::config::Secret;
use nix::{sys::signal, unistd::Pid};

/// Short leases, so a frozen replica's lapses quickly; the wait is longer than the lease.
const LEASES: &[(&str, &str)] = &[
    ("GATEHOUSE_REPLICA_LEASE_MS", "1500"),
    ("GATEHOUSE_REPLICA_RENEW_MS", "200"),
    ("GATEHOUSE_REPLICA_MARGIN_MS", "400"),
    ("GATEHOUSE_REPLICA_ACK_WAIT_MS", "20000"),
];

async fn replica(url: &Secret) -> Served {
    let mut cmd = gatehouse(Some(url));
    cmd.envs(LEASES.iter().copied());
    Served::start(cmd).await
}

/// Waits (bounded, only so that a bug cannot hang the run) until the replica answers from its
/// applied epochs, so the checks below exercise that path and not the per-request read.
async fn until_trusted(served: &Served) {
    let trusted = eventually(Duration::from_secs(30), || async { metric(served, "gatehouse_replica_trusted").await == 1 }).await;
    assert!(trusted, "the replica never registered: {}", served.logs());
}

async fn status(served: &Served, m: &Machine) -> u16 {
    m.headers(http().get(format!("{}/api/v1/tenants/acme", served.base))).send().await.unwrap().status().as_u16()
}

/// The MCP endpoint of a workspace that does not exist: the gateway authenticates first
/// (401 for a revoked token), then finds no workspace (404).
async fn gateway_status(served: &Served, m: &Machine) -> u16 {
    let url = format!("{}/t/acme/w/nowhere/mcp", served.base);
    let req = http().post(url).header("content-type", "application/json").header("accept", "application/json, text/event-stream");
    m.headers(req).body("{}").send().await.unwrap().status().as_u16()
}

/// A fresh token for the tenant's existing service credential.
async fn with_new_token(url: &Secret, base: &Machine) -> Machine {
    let tok = cli(url, &["token", "create", "--tenant", "acme", "--name", "round"]).await;
    Machine { token: tok[1].clone(), token_id: tok[0].clone(), ..base.clone() }
}

async fn revoke(url: &Secret, m: &Machine) {
    assert_eq!(cli(url, &["token", "revoke", "--tenant", "acme", &m.token_id]).await.len(), 1);
}

async fn setup() -> (TestDb, Machine) {
    let t = TestDb::new().await;
    cli(&t.url, &["tenant", "create", "acme", "--name", "Acme"]).await;
    let m = common::provision(&t.url, "acme").await;
    (t, m)
}

#[tokio::test]
async fn a_revoked_token_is_refused_by_every_replica_on_the_first_request_after_the_revoke_returned() {
    let (t, base) = setup().await;
    let (a, b) = (replica(&t.url).await, replica(&t.url).await);
    until_trusted(&a).await;
    until_trusted(&b).await;
    let applied_before = metric(&b, "gatehouse_replica_events_total{event=\"applied\"}").await;
    for round in 0..40 {
        let m = with_new_token(&t.url, &base).await;
        // Both replicas cache the machine and answer it from their applied epochs.
        for served in [&a, &b, &a, &b] {
            assert_eq!(status(served, &m).await, 200, "round {round}");
            assert_eq!(gateway_status(served, &m).await, 404, "round {round}");
        }
        revoke(&t.url, &m).await;
        // Alternate which path asks first, so each is the first request after some revoke.
        if round % 2 == 0 {
            assert_eq!(status(&b, &m).await, 401, "round {round}: replica B accepted a revoked token");
            assert_eq!(gateway_status(&b, &m).await, 401, "round {round}: B's gateway accepted a revoked token");
        } else {
            assert_eq!(gateway_status(&b, &m).await, 401, "round {round}: B's gateway accepted a revoked token");
            assert_eq!(status(&b, &m).await, 401, "round {round}: replica B accepted a revoked token");
        }
        assert_eq!(status(&a, &m).await, 401, "round {round}: replica A accepted a revoked token");
    }
    assert!(metric(&b, "gatehouse_replica_trusted").await == 1, "B stayed registered: {}", b.logs());
    assert!(
        metric(&b, "gatehouse_replica_events_total{event=\"applied\"}").await >= applied_before + 40,
        "B applied the revokes from notifications"
    );
    // The hot path did not read the epoch per request: hits came from applied epochs.
    let hits = metric(&b, "gatehouse_epoch_cache_requests_total{cache=\"machines\",result=\"hit\"}").await;
    assert!(hits >= 20, "{hits}");
}

#[tokio::test]
async fn a_replica_whose_listen_connection_is_killed_never_serves_a_revoked_token() {
    let (t, base) = setup().await;
    let (a, b) = (replica(&t.url).await, replica(&t.url).await);
    let b_listener = format!("gatehouse-replica {}", b.base.trim_start_matches("http://"));
    for round in 0..5 {
        until_trusted(&a).await;
        until_trusted(&b).await;
        let m = with_new_token(&t.url, &base).await;
        assert_eq!(status(&b, &m).await, 200, "round {round}");
        assert_eq!(status(&b, &m).await, 200, "round {round}");
        let mut owner = t.owner_conn().await;
        let killed: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity
              WHERE datname = current_database() AND application_name = $1) k",
        )
        .bind(&b_listener)
        .fetch_one(&mut owner)
        .await
        .unwrap();
        assert_eq!(killed, 1, "round {round}: B's LISTEN connection");
        revoke(&t.url, &m).await;
        for _ in 0..3 {
            assert_eq!(status(&b, &m).await, 401, "round {round}: B served a revoked token after losing LISTEN");
        }
        assert_eq!(status(&a, &m).await, 401, "round {round}");
    }
    assert!(metric(&b, "gatehouse_replica_events_total{event=\"distrusted\"}").await >= 5, "{}", b.logs());
}

#[tokio::test]
async fn a_frozen_replica_delays_the_revoke_until_its_lease_lapses_then_refuses_at_once() {
    let (t, base) = setup().await;
    let (a, b) = (replica(&t.url).await, replica(&t.url).await);
    for round in 0..3 {
        until_trusted(&a).await;
        until_trusted(&b).await;
        let m = with_new_token(&t.url, &base).await;
        assert_eq!(status(&b, &m).await, 200, "round {round}");
        assert_eq!(status(&b, &m).await, 200, "round {round}");
        let pid = Pid::from_raw(b.child.id().unwrap() as i32);
        signal::kill(pid, signal::Signal::SIGSTOP).unwrap();
        revoke(&t.url, &m).await;
        // The revoke returned only once the frozen replica's lease had lapsed (A's is live).
        let mut owner = t.owner_conn().await;
        let (live, lapsed): (i64, i64) = sqlx::query_as(
            "SELECT count(*) FILTER (WHERE lease_expires_at > now()), count(*) FILTER (WHERE lease_expires_at <= now()) FROM replicas",
        )
        .fetch_one(&mut owner)
        .await
        .unwrap();
        signal::kill(pid, signal::Signal::SIGCONT).unwrap();
        assert_eq!((live, lapsed), (1, 1), "round {round}: the revoke returned before B's lease lapsed");
        assert_eq!(status(&b, &m).await, 401, "round {round}: B accepted a revoked token after SIGCONT");
        assert_eq!(status(&a, &m).await, 401, "round {round}");
    }
}

/// A TCP relay to PostgreSQL that can be cut: every relayed connection dropped and the port
/// closed, as when the database host disappears.
struct Relay {
    port: u16,
    tasks: Arc<std::sync::Mutex<Vec<tokio::task::JoinHandle<()>>>>,
    accept: tokio::task::JoinHandle<()>,
}

impl Relay {
    async fn start(target: String) -> Relay {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let tasks: Arc<std::sync::Mutex<Vec<tokio::task::JoinHandle<()>>>> = Arc::default();
        let held = tasks.clone();
        let accept = tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                let target = target.clone();
                held.lock().unwrap().push(tokio::spawn(async move {
                    if let Ok(mut outbound) = tokio::net::TcpStream::connect(target).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                }));
            }
        });
        Relay { port, tasks, accept }
    }

    fn cut(&self) {
        self.accept.abort();
        for task in self.tasks.lock().unwrap().drain(..) {
            task.abort();
        }
    }
}

#[tokio::test]
async fn a_replica_that_loses_its_database_answers_503_not_stale_success() {
    let (t, m) = setup().await;
    let mut direct = url::Url::parse(t.url.expose()).unwrap();
    let relay = Relay::start(format!("{}:{}", direct.host_str().unwrap(), direct.port().unwrap())).await;
    direct.set_port(Some(relay.port)).unwrap();
    let b = replica(&Secret::new(direct.to_string())).await;
    until_trusted(&b).await;
    assert_eq!(status(&b, &m).await, 200);
    assert_eq!(status(&b, &m).await, 200);
    relay.cut();
    // The replica notices at once (its LISTEN connection ends) or at the latest when its own
    // clock ends its lease; the bound only keeps a bug from hanging the run.
    let refused = eventually(Duration::from_secs(30), || async { status(&b, &m).await != 200 }).await;
    assert!(refused, "B kept answering from its caches without a database: {}", b.logs());
    for _ in 0..10 {
        assert_eq!(status(&b, &m).await, 503, "{}", b.logs());
    }
    assert_eq!(metric(&b, "gatehouse_replica_trusted").await, 0);
    let ready = http().get(format!("{}/readyz", b.base)).send().await.unwrap().status().as_u16();
    assert_eq!(ready, 503);
}
