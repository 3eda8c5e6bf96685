//! The cost of recording an ops failure on the request path: `ops::record` only stamps the
//! time and queues (the writer hashes, caps and writes later), so it must stay far below a
//! microsecond-scale fraction of a call.
//!
//!   cargo bench --bench ops                 # writer part: embedded cluster (durable defaults)
//!   DATABASE_URL=postgres://… cargo bench --bench ops   # a role that may create databases
//!
//! The writer part creates a fresh database for each run (and drops it after).
//!
//! The queue is drained by a task that discards, as the real writer would keep it from
//! filling; `drop` measures the path taken when the queue is full (count, never wait). Then
//! the real writer's throughput: 40,960 failures of one fingerprint (one tenant, so each batch
//! also upserts its recurring finding), recorded in rounds of
//! 4,096 (half the queue) by 4 tasks and flushed after each round, checked to be counted exactly.

use std::{hint::black_box, time::Instant};

use criterion::Criterion;
use gatehouse::ops::{self, Failure, Recorder, Status};

fn failure() -> Failure {
    Failure {
        operation: "downstream.call",
        stage: "remote_mcp".into(),
        tenant: Some(uuid::Uuid::now_v7()),
        workspace: Some(uuid::Uuid::now_v7()),
        status: Status::Failed,
        code: "unavailable".into(),
        message: "connector github: error sending request: connection refused".into(),
        reference: Some("0193f0c2-5d1e-7c1a-9b8e-3c2f1a0d9e77".into()),
    }
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let (recorder, mut rx) = Recorder::channel(ops::QUEUE);
    rt.spawn(async move {
        let mut sink = Vec::with_capacity(ops::BATCH);
        while rx.recv_many(&mut sink, ops::BATCH).await > 0 {
            sink.clear();
        }
    });
    c.bench_function("ops/record", |b| {
        b.iter_batched(failure, |f| ops::record(&recorder, black_box(f)), criterion::BatchSize::SmallInput)
    });
    // Four threads recording at once into one queue (the two cores are shared with the drain).
    // Wall time per failure recorded by any of them.
    c.bench_function("ops/record_4_threads", |b| {
        b.iter_custom(|iters| {
            let per = iters.div_ceil(4);
            let started = Instant::now();
            std::thread::scope(|s| {
                for _ in 0..4 {
                    let recorder = recorder.clone();
                    s.spawn(move || {
                        for _ in 0..per {
                            ops::record(&recorder, failure());
                        }
                    });
                }
            });
            // Wall time per failure recorded (throughput of the shared queue), not per caller.
            started.elapsed()
        })
    });
    let (full, _kept) = Recorder::channel(1);
    ops::record(&full, failure());
    c.bench_function("ops/record_queue_full_drop", |b| {
        b.iter_batched(failure, |f| ops::record(&full, black_box(f)), criterion::BatchSize::SmallInput)
    });
}

fn writer_throughput() {
    use gatehouse::{
        config::Secret,
        db::{Db, embedded, migrate},
    };
    use sqlx::{AssertSqlSafe, Connection, Executor, PgConnection};
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(async {
        // A fresh database per run: a shared bench database may hold another branch's
        // migrations, which this binary's migrator refuses.
        let name = format!("gh_bench_{}", uuid::Uuid::new_v4().simple());
        let (admin_url, owner_url, owner_clause, _cluster) = match std::env::var("DATABASE_URL") {
            Ok(url) => {
                let base = url.rsplit_once('/').map(|(server, _)| server).expect("DATABASE_URL has a database path");
                (url.clone(), Secret::new(format!("{base}/{name}")), String::new(), None)
            }
            Err(_) => {
                let dir = std::env::temp_dir().join("gatehouse-bench-pg");
                let cluster = embedded::Cluster::start(&dir, &["max_connections = 200"]).await.expect("start bench cluster");
                let admin = cluster.admin_url("postgres").expose().to_owned();
                (admin, cluster.owner_url(&name), format!(" OWNER {}", embedded::OWNER_ROLE), Some(cluster))
            }
        };
        let mut admin = PgConnection::connect(&admin_url).await.expect("connect to create the bench database");
        admin.execute(AssertSqlSafe(format!("CREATE DATABASE {name}{owner_clause}"))).await.expect("create the bench database");
        migrate::run(&owner_url).await.unwrap();
        let db = Db::connect(&owner_url, 8).await.unwrap();
        // One tenant for every failure, so each batch also upserts its recurring finding.
        let tenant = gatehouse::tenants::create(&db, &gatehouse::admin_log::Audit::cli(), "bench", "Bench").await.unwrap().id;
        let (recorder, _writer) = Recorder::start(db.clone());
        // A stage of its own, so this run's issue starts from zero.
        let stage = format!("bench-{}", uuid::Uuid::new_v4().simple());
        const ROUNDS: usize = 10;
        const ROUND: usize = 4096;
        let started = Instant::now();
        for _ in 0..ROUNDS {
            let tasks: Vec<_> = (0..4)
                .map(|_| {
                    let (recorder, stage) = (recorder.clone(), stage.clone());
                    tokio::spawn(async move {
                        for _ in 0..ROUND / 4 {
                            let mut f = failure();
                            f.stage = stage.clone();
                            f.tenant = Some(tenant.0);
                            ops::record(&recorder, f);
                        }
                    })
                })
                .collect();
            for t in tasks {
                t.await.unwrap();
            }
            recorder.flush().await;
        }
        let elapsed = started.elapsed();
        let fp = ops::fingerprint("downstream.call", &stage, "unavailable");
        let seen = db
            .single_decision(gatehouse::db::Scope::Platform { reason: "bench" }, |conn, _| {
                Box::pin(ops::tx::get(conn, &fp))
            })
            .await
            .unwrap()
            .map(|i| i.seen);
        let n = ROUNDS * ROUND;
        let dropped = recorder.counts().dropped.load(std::sync::atomic::Ordering::Relaxed);
        println!(
            "ops/writer: {n} failures of one fingerprint written in {:.2} s = {:.0} failures/s; seen = {seen:?}, dropped = {dropped}",
            elapsed.as_secs_f64(),
            n as f64 / elapsed.as_secs_f64()
        );
        assert_eq!(seen, Some(n as i64), "the issue counts every failure exactly once");
        let finding = gatehouse::findings::list(&db, tenant, None, 10).await.unwrap();
        assert_eq!(finding.iter().map(|f| f.occurrences).sum::<i64>(), n as i64, "and the tenant's finding too");
        drop(recorder);
        db.pool().close().await;
        admin.execute(AssertSqlSafe(format!("DROP DATABASE {name} WITH (FORCE)"))).await.expect("drop the bench database");
    });
}

fn main() {
    let mut c = Criterion::default().configure_from_args();
    bench(&mut c);
    c.final_summary();
    writer_throughput();
}
