//! Compare-and-set throughput next to pgbench's single-row UPDATE on the same database in
//! the same run (the physical ceiling of one round trip that writes a row).
//!
//!   cargo bench --bench cas                 # embedded cluster in target/bench-pg (durable defaults)
//!   DATABASE_URL=postgres://… cargo bench --bench cas
//!
//! Each CAS client owns one key and swaps n → n+1 in a loop, so the figure is the cost of
//! the whole decision (tenant scope, a prune on one call in 16, conditional UPDATE, admin-log
//! row, commit: one autocommitted statement on a direct connection), not of contention. In
//! the same rounds pgbench drives that statement itself (no Rust client), and the floor of
//! any compare-and-set that logs its win in the same transaction (the conditional UPDATE and
//! a log row, no row-level security, no prune). A contended run (16 clients, one key) is
//! reported too. Environment: BENCH_SECONDS (default 10).

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use gatehouse::{
    admin_log::Audit,
    config::Secret,
    db::{Db, embedded, migrate},
    kv::{self, BoundedValue, CasForm, Expect, Key, Next},
    tenants::{self, TenantId},
};
use serde_json::json;
use sqlx::{Connection, Executor};

/// Rounds per figure; each round measures every path in turn.
const ROUNDS: usize = 2;

fn seconds() -> u64 {
    std::env::var("BENCH_SECONDS").ok().and_then(|s| s.parse().ok()).unwrap_or(10)
}

async fn cas_run(db: &Db, form: CasForm, tenant: TenantId, clients: usize, shared_key: bool) -> (f64, f64) {
    let stop = Arc::new(AtomicBool::new(false));
    let (swaps, attempts) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let run_id = uuid::Uuid::new_v4().simple().to_string();
    let mut tasks = Vec::new();
    for c in 0..clients {
        let (db, stop, swaps, attempts) = (db.clone(), stop.clone(), swaps.clone(), attempts.clone());
        let key = Key::parse(&if shared_key { format!("bench/{run_id}") } else { format!("bench/{run_id}/{c}") }).unwrap();
        tasks.push(tokio::spawn(async move {
            let audit = Audit { actor: format!("bench:{c}"), request_id: None };
            let mut current: Option<i64> = None;
            while !stop.load(Ordering::Relaxed) {
                let expect = match current {
                    None => Expect::Absent,
                    Some(n) => Expect::Value(BoundedValue::parse(json!(n)).unwrap()),
                };
                let next_n = current.map_or(0, |n| n + 1);
                let next = Next::Value(BoundedValue::parse(json!(next_n)).unwrap());
                attempts.fetch_add(1, Ordering::Relaxed);
                if kv::compare_and_set_as(&db, form, tenant, &audit, &key, &expect, &next, None).await.unwrap() {
                    swaps.fetch_add(1, Ordering::Relaxed);
                    current = Some(next_n);
                } else {
                    // Lost to another client: read what is there and try from it.
                    current = kv::get(&db, tenant, &key).await.unwrap().map(|e| e.value.as_i64().unwrap());
                }
            }
        }));
    }
    let started = Instant::now();
    tokio::time::sleep(Duration::from_secs(seconds())).await;
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.unwrap();
    }
    let secs = started.elapsed().as_secs_f64();
    (swaps.load(Ordering::Relaxed) as f64 / secs, attempts.load(Ordering::Relaxed) as f64 / secs)
}

fn pgbench(bin_dir: &std::path::Path, url: &str, clients: usize, script: &std::path::Path) -> f64 {
    let pgbench =
        [bin_dir.join("pgbench"), "pgbench".into()].into_iter().find(|p| p.is_file() || p.to_str() == Some("pgbench")).unwrap();
    let out = std::process::Command::new(pgbench)
        .args([
            "-n",
            "-M",
            "prepared",
            "-c",
            &clients.to_string(),
            "-j",
            &clients.min(2).to_string(),
            "-T",
            &seconds().to_string(),
            "-f",
        ])
        .arg(script)
        .arg(url)
        .output()
        .expect("run pgbench");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "pgbench failed: {text}{}", String::from_utf8_lossy(&out.stderr));
    text.lines()
        .find_map(|l| l.strip_prefix("tps = ").and_then(|r| r.split_whitespace().next()).and_then(|n| n.parse().ok()))
        .expect("pgbench printed tps")
}

#[tokio::main]
async fn main() {
    let (owner_url, bin_dir, _cluster) = match std::env::var("DATABASE_URL") {
        Ok(url) => (Secret::new(url), embedded::find_binaries().unwrap_or_default(), None),
        Err(_) => {
            let dir = std::env::temp_dir().join("gatehouse-bench-pg");
            let cluster = embedded::Cluster::start(&dir, &["max_connections = 200"]).await.expect("start bench cluster");
            let url = cluster.owner_url(embedded::DATABASE);
            (url, embedded::find_binaries().unwrap(), Some(cluster))
        }
    };
    migrate::run(&owner_url).await.unwrap();
    let db = Db::connect(&owner_url, 32).await.unwrap();
    let slug = format!("bench-{}", &uuid::Uuid::new_v4().simple().to_string()[..8]);
    let tenant = tenants::create(&db, &Audit::cli(), &slug, "Bench").await.unwrap().id;

    let mut owner = sqlx::PgConnection::connect(owner_url.expose()).await.unwrap();
    owner.execute("DROP TABLE IF EXISTS bench_counter, bench_kv, bench_log").await.unwrap();
    owner.execute("CREATE TABLE bench_counter (id int PRIMARY KEY, v bigint NOT NULL)").await.unwrap();
    owner.execute("INSERT INTO bench_counter SELECT i, 0 FROM generate_series(1, 64) i").await.unwrap();
    // The floor of any compare-and-set that logs its win in the same transaction: the
    // conditional UPDATE and the log row (same columns, indexes and tenant check as
    // `admin_log`) as one autocommitted statement, without row-level security or the prune.
    owner
        .execute(
            "CREATE TABLE bench_kv (tenant_id uuid NOT NULL REFERENCES tenants (id), key text NOT NULL, value jsonb NOT NULL,
                                    updated_at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (tenant_id, key));
             CREATE TABLE bench_log (LIKE admin_log INCLUDING DEFAULTS, PRIMARY KEY (id));
             CREATE INDEX ON bench_log (tenant_id, at, id);
             CREATE TRIGGER bench_log_tenant_check BEFORE INSERT ON bench_log
                 FOR EACH ROW EXECUTE FUNCTION gatehouse_admin_log_tenant_exists()",
        )
        .await
        .unwrap();
    sqlx::query("INSERT INTO bench_kv (tenant_id, key, value) SELECT $1, 'k' || i, '1' FROM generate_series(1, 64) i")
        .bind(tenant.0)
        .execute(&mut owner)
        .await
        .unwrap();
    let script = |name: &str, text: String| {
        let path = std::env::temp_dir().join(format!("gatehouse-bench-{name}.sql"));
        std::fs::write(&path, text).unwrap();
        path
    };
    let update = script("update", "UPDATE bench_counter SET v = v + 1 WHERE id = :client_id + 1;\n".into());
    let floor = script(
        "floor",
        format!(
            "\\set id :client_id + 1\n\
             WITH swapped AS (UPDATE bench_kv SET value = '1', updated_at = now()\
             WHERE tenant_id = '{tenant}' AND key = 'k' || :id AND value = '1' RETURNING 1) \
             INSERT INTO bench_log (id, tenant_id, actor, action, target, before, after) \
             SELECT gen_random_uuid(), '{tenant}', 'bench', 'kv.compare_and_set', 'kv-k', '1', '1' FROM swapped;\n",
            tenant = tenant.0
        ),
    );
    // The whole compare-and-set statement (scope, prune, decision, log row) with pgbench as
    // the client: what the Rust client's own cost adds shows as the difference. A prune is
    // due on one call in `kv::PRUNE_EVERY`, drawn per call, as the library draws it.
    owner.execute(sqlx::AssertSqlSafe(format!("SET gatehouse.tenant_id = '{}'", tenant.0))).await.unwrap();
    sqlx::query("INSERT INTO kv_entries (tenant_id, key, value) SELECT $1, 'p' || i, '1' FROM generate_series(1, 64) i")
        .bind(tenant.0)
        .execute(&mut owner)
        .await
        .unwrap();
    owner.execute("RESET gatehouse.tenant_id").await.unwrap();
    let statement = script(
        "statement",
        format!(
            "\\set id :client_id + 1\n\
             \\set prune case when random(1, {every}) = 1 then {batch} else 0 end\n\
             SELECT gatehouse_kv_cas('{tenant}', 'p' || :id, 'update', '1', '1', NULL, :prune, gen_random_uuid(), 'bench', \
             'kv-p', '1', '1', NULL);\n",
            tenant = tenant.0,
            every = kv::PRUNE_EVERY,
            batch = kv::PRUNE_BATCH,
        ),
    );

    let version: String = sqlx::query_scalar("SHOW server_version").fetch_one(&mut owner).await.unwrap();
    let fsync: String = sqlx::query_scalar("SHOW fsync").fetch_one(&mut owner).await.unwrap();
    let sync_commit: String = sqlx::query_scalar("SHOW synchronous_commit").fetch_one(&mut owner).await.unwrap();
    println!(
        "PostgreSQL {version}, fsync={fsync}, synchronous_commit={sync_commit}, {} s per figure, {ROUNDS} rounds",
        seconds()
    );
    println!(
        "| clients | round | CAS, one statement | CAS, transaction | its statement from pgbench | floor: UPDATE + log row | pgbench single-row UPDATE tps |"
    );
    println!("|---|---|---|---|---|---|---|");
    let share = |n: f64, of: f64| format!("{n:.0} ({:.0}%)", n / of * 100.0);
    for clients in [1usize, 16] {
        for round in 1..=ROUNDS {
            let (swaps, _) = cas_run(&db, CasForm::Statement, tenant, clients, false).await;
            let (in_tx, _) = cas_run(&db, CasForm::Transaction, tenant, clients, false).await;
            let alone = pgbench(&bin_dir, owner_url.expose(), clients, &statement);
            let least = pgbench(&bin_dir, owner_url.expose(), clients, &floor);
            let tps = pgbench(&bin_dir, owner_url.expose(), clients, &update);
            println!(
                "| {clients} | {round} | {} | {} | {} | {} | {tps:.0} |",
                share(swaps, tps),
                share(in_tx, tps),
                share(alone, tps),
                share(least, tps)
            );
        }
    }
    let (swaps, attempts) = cas_run(&db, CasForm::Statement, tenant, 16, true).await;
    println!("\ncontended: 16 clients on one key: {swaps:.0} swaps/s won, {attempts:.0} attempts/s");
    owner.execute("DROP TABLE bench_kv, bench_log").await.unwrap();
    owner.execute("DROP TABLE bench_counter").await.unwrap();
}
