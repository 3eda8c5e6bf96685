//! Several `gatehouse` processes against one database: compare-and-set and migration races,
//! the HTTP conventions of a running server, graceful shutdown, the embedded default.

mod common;

use common::{Served, TestDb, gatehouse, run};
use futures::future::join_all;
use sqlx::{Connection, Executor};

/// Three separate processes race the same compare-and-set, 10 rounds: exactly one prints
/// `swapped` and exits 0, the others print `refused` and exit 3.
#[tokio::test]
async fn compare_and_set_raced_by_three_processes() {
    let t = TestDb::new().await;
    let (code, _, err) = run({
        let mut c = gatehouse(Some(&t.url));
        c.args(["tenant", "create", "acme", "--name", "Acme"]);
        c
    })
    .await;
    assert_eq!(code, 0, "{err}");
    for round in 0..10 {
        let key = format!("lock/{round}");
        let racers = (0..3).map(|p| {
            let mut c = gatehouse(Some(&t.url));
            c.args(["kv", "cas", "--tenant", "acme", &key, "--expect-absent", "--next", &format!("\"process-{p}\"")]);
            run(c)
        });
        let results = join_all(racers).await;
        let winners: Vec<_> = results.iter().enumerate().filter(|(_, r)| r.0 == 0).map(|(i, _)| i).collect();
        assert_eq!(winners.len(), 1, "round {round}: {results:?}");
        for (i, (code, out, err)) in results.iter().enumerate() {
            if i == winners[0] {
                assert_eq!(out.trim(), "swapped");
            } else {
                assert_eq!((*code, out.trim()), (3, "refused"), "{err}");
            }
        }
        let mut get = gatehouse(Some(&t.url));
        get.args(["kv", "get", "--tenant", "acme", &key]);
        assert_eq!(run(get).await.1.trim(), format!("\"process-{}\"", winners[0]));
    }
}

/// Three processes migrate one fresh database at once: all succeed, each migration applied once.
#[tokio::test]
async fn migration_race_applies_each_migration_once() {
    let (url, _) = TestDb::empty().await;
    let results = join_all((0..3).map(|_| {
        let mut c = gatehouse(Some(&url));
        c.arg("migrate");
        run(c)
    }))
    .await;
    for (code, _, err) in &results {
        assert_eq!(*code, 0, "{err}");
    }
    let mut conn = sqlx::PgConnection::connect(url.expose()).await.unwrap();
    let rows: Vec<(i64, i64)> =
        sqlx::query_as("SELECT version, count(*) FROM _sqlx_migrations GROUP BY version ORDER BY version")
            .fetch_all(&mut conn)
            .await
            .unwrap();
    let known: Vec<i64> = gatehouse::db::migrate::MIGRATOR.iter().map(|m| m.version).collect();
    assert_eq!(rows.iter().map(|r| r.0).collect::<Vec<_>>(), known);
    assert!(rows.iter().all(|r| r.1 == 1));
    let tables: i64 =
        sqlx::query_scalar("SELECT count(*) FROM pg_tables WHERE tablename = 'kv_entries'").fetch_one(&mut conn).await.unwrap();
    assert_eq!(tables, 1);
}

#[tokio::test]
async fn http_conventions_problem_json_request_ids_and_limits() {
    let t = TestDb::new().await;
    let mut cmd = gatehouse(Some(&t.url));
    cmd.env("GATEHOUSE_BODY_LIMIT_BYTES", "4096");
    let served = Served::start(cmd).await;
    let http = common::http();

    let r = http.get(format!("{}/healthz", served.base)).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let generated = r.headers()["x-request-id"].to_str().unwrap().to_owned();
    assert_eq!(generated.len(), 36, "a generated request id is a UUID");

    let r = http.get(format!("{}/readyz", served.base)).header("x-request-id", "trace-me-123").send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["x-request-id"], "trace-me-123");

    let r = http.get(format!("{}/api/v1/nothing-here", served.base)).send().await.unwrap();
    assert_eq!(r.status(), 404);
    assert_eq!(r.headers()["content-type"], "application/problem+json");
    assert!(r.headers().contains_key("x-request-id"));
    let body: serde_json::Value = r.json().await.unwrap();
    assert_eq!(body["code"], "not_found");
    assert_eq!(body["status"], 404);

    let r = http.post(format!("{}/api/v1/anything", served.base)).body(vec![b'x'; 5000]).send().await.unwrap();
    assert_eq!(r.status(), 413);
    assert_eq!(r.headers()["content-type"], "application/problem+json");
    assert_eq!(r.json::<serde_json::Value>().await.unwrap()["code"], "payload_too_large");

    let r = http.post(format!("{}/healthz", served.base)).send().await.unwrap();
    assert_eq!(r.status(), 405);
    assert_eq!(r.json::<serde_json::Value>().await.unwrap()["code"], "method_not_allowed");

    // Every log line is JSON, and request-scoped lines carry the request id.
    let logs = served.logs();
    let mut traced = false;
    for line in logs.lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap_or_else(|_| panic!("not a JSON log line: {line}"));
        if v["span"]["request_id"] == "trace-me-123" {
            assert_eq!(v["span"]["http.route"], "/readyz");
            traced = true;
        }
    }
    assert!(traced, "no log line carries the propagated request id: {logs}");
    assert_eq!(served.terminate().await, 0);
}

#[tokio::test]
async fn readiness_fails_when_a_migration_is_missing() {
    let t = TestDb::new().await;
    let mut served = Served::start(gatehouse(Some(&t.url))).await;
    let mut owner = t.owner_conn().await;
    owner.execute("DELETE FROM _sqlx_migrations WHERE version = (SELECT max(version) FROM _sqlx_migrations)").await.unwrap();
    let r = common::http().get(format!("{}/readyz", served.base)).send().await.unwrap();
    assert_eq!(r.status(), 503);
    assert_eq!(r.json::<serde_json::Value>().await.unwrap()["code"], "not_ready");
    assert_eq!(
        common::http().get(format!("{}/healthz", served.base)).send().await.unwrap().status(),
        200,
        "liveness does not depend on the database"
    );
    served.child.kill().await.unwrap();
}

#[tokio::test]
async fn bad_configuration_is_named_and_refused() {
    let mut cmd = gatehouse(None);
    cmd.env("GATEHOUSE_LISTEN", "not-an-address").env("GATEHOUSE_ENV", "production").arg("serve");
    let (code, _, err) = run(cmd).await;
    assert_eq!(code, 2);
    assert!(err.contains("GATEHOUSE_LISTEN: must be an address"), "{err}");
    assert!(err.contains("GATEHOUSE_OIDC_ISSUER: is required when GATEHOUSE_ENV=production"), "{err}");
}

/// The binary's allocator (feature "mimalloc", on by default) is mimalloc with the defaults
/// compiled in from `.cargo/config.toml`, so nobody has to set a `MIMALLOC_` variable
/// (docs/decisions.md, "The allocator"): what is larger than 4 MiB comes from the system and
/// goes back to it, not to an arena that keeps it resident; arenas commit memory as it is used.
/// mimalloc prints its options when asked to be verbose.
#[cfg(feature = "mimalloc")]
#[tokio::test]
async fn the_allocator_returns_memory_without_configuration() {
    let mut cmd = gatehouse(None);
    cmd.env("MIMALLOC_VERBOSE", "1")
        .env_remove("MIMALLOC_ARENA_EAGER_COMMIT")
        .env_remove("MIMALLOC_ARENA_MAX_OBJECT_SIZE")
        .arg("--version");
    let (code, out, err) = run(cmd).await;
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("gatehouse "), "{out}");
    let option = |name: &str| {
        err.lines()
            .find_map(|l| l.split_once(&format!("option '{name}': ")).map(|(_, v)| v.trim().to_owned()))
            .unwrap_or_else(|| panic!("mimalloc did not print its option {name}: {err}"))
    };
    assert_eq!(option("arena_max_object_size"), "4096 KiB");
    assert_eq!(option("arena_eager_commit"), "0");
    // Only those options moved: purging still returns freed pages to the system.
    assert_eq!(option("purge_decommits"), "1");
}

/// The README's first command: no DATABASE_URL, a private cluster in the data dir, kept
/// across restarts, a stale pid file recovered, the CLI attaching to the running cluster.
#[tokio::test]
async fn embedded_default_survives_restarts_and_stale_pid_files() {
    let dir = std::env::temp_dir().join(format!("gatehouse-embedded-{}", uuid::Uuid::new_v4().simple()));
    let serve = || {
        let mut c = gatehouse(None);
        c.env("GATEHOUSE_DATA_DIR", &dir);
        c
    };
    let served = Served::start(serve()).await;
    let mut create = serve();
    create.args(["tenant", "create", "first", "--name", "First"]);
    let (code, _, err) = run(create).await;
    assert_eq!(code, 0, "the CLI attaches to the server's running cluster: {err}");
    assert_eq!(served.terminate().await, 0);
    let pid_file = dir.join("pg/postmaster.pid");
    assert!(!pid_file.exists(), "the cluster is stopped with the server");

    // A stale pid file left by a crash (pointing at a live process that is not postgres).
    std::fs::write(
        &pid_file,
        format!("{}\n{}\n0\n5432\n\n127.0.0.1\n0 0\nready\n", std::process::id(), dir.join("pg").display()),
    )
    .unwrap();
    let served = Served::start(serve()).await;
    let mut list = serve();
    list.args(["tenant", "list"]);
    let (code, out, err) = run(list).await;
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("first\tactive\t"), "data kept across restarts: {out}");
    assert_eq!(served.terminate().await, 0);
    std::fs::remove_dir_all(&dir).ok();
}

/// The same race through the HTTP API: three server processes behind one database, one
/// client per process, 10 rounds. Exactly one 200 each round; the others get 412.
#[tokio::test]
async fn compare_and_set_raced_through_three_servers_over_http() {
    let t = TestDb::new().await;
    common::cli(&t.url, &["tenant", "create", "acme", "--name", "Acme"]).await;
    let m = common::provision(&t.url, "acme").await;
    let servers = join_all((0..3).map(|_| Served::start(gatehouse(Some(&t.url))))).await;
    let client = common::http();
    for round in 0..10 {
        let key = format!("http/{round}");
        let attempts = servers.iter().enumerate().map(|(i, s)| {
            let body = serde_json::json!({ "key": key, "expect": { "absent": true }, "next": { "value": i } });
            m.headers(client.post(format!("{}/api/v1/tenants/acme/kv-cas", s.base))).json(&body).send()
        });
        let statuses: Vec<u16> = join_all(attempts).await.into_iter().map(|r| r.unwrap().status().as_u16()).collect();
        assert_eq!(statuses.iter().filter(|s| **s == 200).count(), 1, "round {round}: {statuses:?}");
        assert_eq!(statuses.iter().filter(|s| **s == 412).count(), 2, "round {round}: {statuses:?}");
        let winner = statuses.iter().position(|s| *s == 200).unwrap();
        let got: serde_json::Value = m
            .headers(client.get(format!("{}/api/v1/tenants/acme/kv/{}", servers[(round + 1) % 3].base, key.replace('/', "%2F"))))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(got["value"], winner, "round {round}");
    }
    // Bad input over HTTP: stable codes, nothing written.
    let bad = m
        .headers(client.post(format!("{}/api/v1/tenants/acme/kv-cas", servers[0].base)))
        .json(&serde_json::json!({ "key": "k", "expect": { "absent": true, "value": 1 }, "next": { "value": 1 } }))
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), 422);
    assert_eq!(bad.json::<serde_json::Value>().await.unwrap()["code"], "invalid_expect");
    let bad = m
        .headers(client.put(format!("{}/api/v1/tenants/acme/kv/k", servers[0].base)))
        .header("content-type", "application/json")
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(bad.json::<serde_json::Value>().await.unwrap()["code"], "invalid_json");
    let missing = m.headers(client.get(format!("{}/api/v1/tenants/acme/kv/k", servers[0].base))).send().await.unwrap();
    assert_eq!(missing.status(), 404);
    for s in servers {
        assert_eq!(s.terminate().await, 0);
    }
}

/// With OTEL_EXPORTER_OTLP_ENDPOINT set, request spans reach an OTLP/HTTP collector (here a
/// loopback receiver that records what it is sent).
#[tokio::test]
async fn traces_are_exported_over_otlp_when_configured() {
    use std::sync::{Arc, Mutex};
    let received: Arc<Mutex<Vec<(String, usize)>>> = Arc::default();
    let sink = received.clone();
    let app = axum::Router::new().route(
        "/v1/traces",
        axum::routing::post(move |headers: axum::http::HeaderMap, body: axum::body::Bytes| {
            let sink = sink.clone();
            async move {
                let kind = headers.get("content-type").and_then(|v| v.to_str().ok()).unwrap_or("").to_owned();
                sink.lock().unwrap().push((kind, body.len()));
                axum::http::StatusCode::OK
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let collector = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });

    let t = TestDb::new().await;
    let mut cmd = gatehouse(Some(&t.url));
    cmd.env("OTEL_EXPORTER_OTLP_ENDPOINT", &collector).env("OTEL_BSP_SCHEDULE_DELAY", "100");
    let served = Served::start(cmd).await;
    for _ in 0..3 {
        common::http().get(format!("{}/healthz", served.base)).send().await.unwrap();
    }
    assert_eq!(served.terminate().await, 0, "shutdown flushes the exporter");
    let got = received.lock().unwrap().clone();
    assert!(!got.is_empty(), "no OTLP export arrived");
    assert!(got.iter().all(|(kind, len)| kind.starts_with("application/x-protobuf") && *len > 0), "{got:?}");
}
