//! The cost of recording an ops failure on the request path: `ops::record` only stamps the
//! time and queues (the writer hashes, caps and writes later), so it must stay far below a
//! microsecond-scale fraction of a call.
//!
//!   cargo bench --bench ops
//!
//! The queue is drained by a task that discards, as the real writer would keep it from
//! filling; `drop` measures the path taken when the queue is full (count, never wait).

use std::{hint::black_box, time::Instant};

use criterion::{Criterion, criterion_group, criterion_main};
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

criterion_group!(benches, bench);
criterion_main!(benches);
