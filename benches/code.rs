//! The `execute_code` engine: latency of `async () => 42` cold and warm, of a program with one
//! host call (answered by an in-process host on tokio, so this is the sandbox's own round
//! trip, not a downstream's), and programs per second per replica.
//!
//!   cargo bench --bench code
//!
//! "Cold" is the first program of a fresh process (printed before criterion starts; run the
//! command several times for several samples). Each program gets a fresh QuickJS runtime and
//! a thread of its own, as in the server. The gateway path with a real downstream is
//! `bash bench/code.sh`.

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use criterion::{Criterion, criterion_group};
use gatehouse::{
    code::{
        recover::{Program, recover},
        sandbox::{self, Dispatch, End, Limits, Reply},
    },
    config::CodeConfig,
};

fn limits() -> Limits {
    let c = CodeConfig::default();
    Limits {
        heap_bytes: c.heap_bytes,
        stack_bytes: 1 << 20,
        cpu: Duration::from_millis(c.cpu_ms),
        wall: Duration::from_millis(c.wall_ms),
        host_calls: c.host_calls,
        log_chars: c.log_chars,
        emit_bytes: c.emit_bytes,
        emit_blocks: c.emit_blocks,
    }
}

/// Runs `program` on a fresh thread (as the executor does) with host calls answered on `rt`.
fn run(program: &Program, rt: &tokio::runtime::Handle) -> End {
    let (program, handle) = (program.clone(), rt.clone());
    std::thread::Builder::new()
        .stack_size(8 << 20)
        .spawn(move || {
            let dispatch: Dispatch = Box::new(move |req, tx| {
                handle.spawn(async move {
                    let _ = tx.send((req.id, Reply { ok: true, json: req.payload.to_string(), fatal: None }));
                });
            });
            sandbox::run(&program, &limits(), dispatch, Arc::new(AtomicBool::new(false))).end
        })
        .unwrap()
        .join()
        .unwrap()
}

fn expect(end: End, value: &str) {
    match end {
        End::Value(v) if v == value => {}
        other => panic!("expected {value}, got {other:?}"),
    }
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let answer = recover("async () => 42").unwrap();
    let one_call = recover("async () => (await gatehouse.call('fastecho.echo', { message: 'hello' })).args.message").unwrap();
    c.bench_function("async () => 42 (warm: fresh runtime and thread)", |b| b.iter(|| expect(run(&answer, rt.handle()), "42")));
    c.bench_function("async () => 42 (engine only, no thread)", |b| {
        b.iter(|| {
            let dispatch: Dispatch = Box::new(|_, _| {});
            expect(sandbox::run(&answer, &limits(), dispatch, Arc::new(AtomicBool::new(false))).end, "42")
        })
    });
    c.bench_function("one host call (in-process host)", |b| b.iter(|| expect(run(&one_call, rt.handle()), "\"hello\"")));
}

/// Programs per second with `workers` running at once (the default replica runs 2).
fn throughput(workers: usize, seconds: u64) -> f64 {
    let answer = recover("async () => 42").unwrap();
    let done = Arc::new(AtomicU64::new(0));
    let stop = Instant::now() + Duration::from_secs(seconds);
    let threads: Vec<_> = (0..workers)
        .map(|_| {
            let (answer, done) = (answer.clone(), done.clone());
            std::thread::spawn(move || {
                while Instant::now() < stop {
                    let dispatch: Dispatch = Box::new(|_, _| {});
                    expect(sandbox::run(&answer, &limits(), dispatch, Arc::new(AtomicBool::new(false))).end, "42");
                    done.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    done.load(Ordering::Relaxed) as f64 / seconds as f64
}

criterion_group!(benches, bench);

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let answer = recover("async () => 42").unwrap();
    let started = Instant::now();
    expect(run(&answer, rt.handle()), "42");
    println!("cold: first `async () => 42` of this process: {:.3} ms", started.elapsed().as_secs_f64() * 1e3);
    drop(rt);
    for workers in [1, 2] {
        println!("throughput: {workers} running at once: {:.0} programs/s", throughput(workers, 5));
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
}
