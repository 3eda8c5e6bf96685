//! The key-value store: semantics, TTL by the database clock, pruning, and compare-and-set
//! under real concurrency.

mod common;

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use common::{TestDb, eventually};
use gatehouse::{
    admin_log::Audit,
    db::Scope,
    error::Error,
    kv::{self, BoundedValue, CasForm, Expect, Key, Next},
    tenants::{self, TenantId},
};
use serde_json::{Value, json};
use sqlx::{Connection, Executor};

fn key(k: &str) -> Key {
    Key::parse(k).unwrap()
}
fn val(v: Value) -> BoundedValue {
    BoundedValue::parse(v).unwrap()
}

async fn setup() -> (TestDb, TenantId) {
    let t = TestDb::new().await;
    let tenant = tenants::create(&t.db, &Audit::cli(), "acme", "Acme").await.unwrap().id;
    (t, tenant)
}

async fn log_count(t: &TestDb, tenant: TenantId) -> i64 {
    t.db.serializable(Scope::Tenant(tenant), |c, _| {
        Box::pin(async move { Ok(sqlx::query_scalar("SELECT count(*) FROM admin_log").fetch_one(&mut *c).await?) })
    })
    .await
    .unwrap()
}

#[tokio::test]
async fn get_set_delete_and_list() {
    let (t, tenant) = setup().await;
    let audit = Audit::cli();
    assert_eq!(kv::get(&t.db, tenant, &key("a")).await.unwrap(), None);
    let e = kv::set(&t.db, tenant, &audit, &key("a"), &val(json!({"n": 1})), None).await.unwrap();
    assert_eq!(e.value, json!({"n": 1}));
    assert_eq!(e.expires_at, None);
    kv::set(&t.db, tenant, &audit, &key("a"), &val(json!({"n": 2})), Some(60_000)).await.unwrap();
    let got = kv::get(&t.db, tenant, &key("a")).await.unwrap().unwrap();
    assert_eq!(got.value, json!({"n": 2}));
    assert!(got.expires_at.is_some());
    assert!(kv::delete(&t.db, tenant, &audit, &key("a")).await.unwrap());
    assert!(!kv::delete(&t.db, tenant, &audit, &key("a")).await.unwrap());
    assert_eq!(log_count(&t, tenant).await, 3, "two sets and one delete; the no-op delete logs nothing");

    for k in ["p/1", "p/2", "p/3", "q/1", "p", "p0", "pé/1", "p\u{10FFFF}"] {
        kv::set(&t.db, tenant, &audit, &key(k), &val(json!(k)), None).await.unwrap();
    }
    let page = kv::list(&t.db, tenant, "p/", None, 2).await.unwrap();
    assert_eq!(page.entries.iter().map(|e| e.key.as_str()).collect::<Vec<_>>(), ["p/1", "p/2"]);
    let page = kv::list(&t.db, tenant, "p/", page.next.as_deref(), 2).await.unwrap();
    assert_eq!(page.entries.iter().map(|e| e.key.as_str()).collect::<Vec<_>>(), ["p/3"]);
    assert_eq!(page.next, None);
    let all_p = kv::list(&t.db, tenant, "p", None, 100).await.unwrap();
    assert_eq!(
        all_p.entries.iter().map(|e| e.key.as_str()).collect::<Vec<_>>(),
        ["p", "p/1", "p/2", "p/3", "p0", "pé/1", "p\u{10FFFF}"]
    );
    assert_eq!(kv::list(&t.db, tenant, "", None, 100).await.unwrap().entries.len(), 8);
    assert_eq!(kv::list(&t.db, tenant, "", None, 0).await.unwrap_err().code(), "invalid_limit");
}

#[tokio::test]
async fn bad_input_is_refused_with_stable_codes_and_writes_nothing() {
    let (t, tenant) = setup().await;
    assert_eq!(Key::parse("").unwrap_err().code(), "invalid_key");
    assert_eq!(Key::parse("a\0b").unwrap_err().code(), "invalid_key");
    assert_eq!(Key::parse(&"k".repeat(513)).unwrap_err().code(), "invalid_key");
    assert_eq!(BoundedValue::parse(json!("x".repeat(70_000))).unwrap_err().code(), "value_too_large");
    assert_eq!(kv::validate_ttl(Some(0)).unwrap_err().code(), "invalid_ttl");
    assert_eq!(kv::validate_ttl(Some(kv::MAX_TTL_MS + 1)).unwrap_err().code(), "invalid_ttl");
    assert_eq!(log_count(&t, tenant).await, 0);
}

/// Behind the code's own check, the database holds every key to 1–512 bytes: a row written
/// directly with a key out of bounds, or an UPDATE that sets one, fails with SQLSTATE 23514
/// under `kv_entries_key_check` and writes nothing, in a statement with good rows too.
#[tokio::test]
async fn the_database_holds_every_key_to_its_length() {
    let (t, tenant) = setup().await;
    let mut owner = t.owner_conn().await;
    owner.execute("SELECT set_config('gatehouse.platform', 'on', false)").await.unwrap();
    let insert = "INSERT INTO kv_entries (tenant_id, key, value) SELECT $1, k, '1' FROM unnest($2::text[]) k";
    let refused = |e: sqlx::Error| {
        let e = e.as_database_error().expect("a database error").to_owned();
        (e.code().map(|c| c.into_owned()), e.constraint().map(str::to_owned))
    };
    let check = (Some("23514".to_owned()), Some("kv_entries_key_check".to_owned()));
    for bad in [String::new(), "k".repeat(513), "é".repeat(257)] {
        let keys = vec!["fine".to_owned(), bad.clone()];
        let e = sqlx::query(insert).bind(tenant.0).bind(&keys).execute(&mut owner).await.expect_err("refused");
        assert_eq!(refused(e), check, "a key of {} bytes", bad.len());
    }
    let count = "SELECT count(*) FROM kv_entries";
    assert_eq!(sqlx::query_scalar::<_, i64>(count).fetch_one(&mut owner).await.unwrap(), 0, "a refused statement writes nothing");
    let longest = "k".repeat(512);
    sqlx::query(insert).bind(tenant.0).bind(vec!["k".to_owned(), longest.clone()]).execute(&mut owner).await.unwrap();
    let e = sqlx::query("UPDATE kv_entries SET key = '' WHERE key = 'k'").execute(&mut owner).await.expect_err("refused");
    assert_eq!(refused(e), check, "an UPDATE that sets the key");
    sqlx::query("UPDATE kv_entries SET value = '2'").execute(&mut owner).await.unwrap();
    let keys: Vec<String> = sqlx::query_scalar("SELECT key FROM kv_entries ORDER BY key").fetch_all(&mut owner).await.unwrap();
    assert_eq!(keys, vec!["k".to_owned(), longest], "the refusal changed nothing");
}

#[tokio::test]
async fn ttl_is_judged_by_the_database_clock_and_expired_rows_count_as_absent() {
    let (t, tenant) = setup().await;
    let audit = Audit::cli();
    kv::set(&t.db, tenant, &audit, &key("short"), &val(json!(1)), Some(100)).await.unwrap();
    let db = &t.db;
    assert!(
        eventually(Duration::from_secs(10), || async move { kv::get(db, tenant, &key("short")).await.unwrap().is_none() }).await
    );
    assert!(kv::list(&t.db, tenant, "", None, 10).await.unwrap().entries.is_empty());
    // Expired counts as absent for compare-and-set, and a delete of it does nothing.
    assert!(!kv::delete(&t.db, tenant, &audit, &key("short")).await.unwrap());
    assert!(
        kv::compare_and_set(&t.db, tenant, &audit, &key("short"), &Expect::Absent, &Next::Value(val(json!(2))), None)
            .await
            .unwrap()
    );
    assert_eq!(kv::get(&t.db, tenant, &key("short")).await.unwrap().unwrap().value, json!(2));
}

#[tokio::test]
async fn expired_rows_are_pruned_on_write_in_bounded_batches() {
    let (t, tenant) = setup().await;
    let mut owner = t.owner_conn().await;
    let audit = Audit::cli();
    // A set: 250 expired rows take three due writes, each deleting one batch at most.
    expire(&mut owner, tenant, 250).await;
    let pruned = drain(&mut owner, async |i| {
        kv::set(&t.db, tenant, &audit, &key("new"), &val(json!(i)), None).await.unwrap();
    })
    .await;
    assert_eq!(pruned, 3);
    // A delete prunes too, also one that finds nothing to delete.
    expire(&mut owner, tenant, 150).await;
    let pruned = drain(&mut owner, async |_| {
        kv::delete(&t.db, tenant, &audit, &key("absent")).await.unwrap();
    })
    .await;
    assert_eq!(pruned, 2);
    // A compare-and-set prunes too, in both forms and each kind: on a due write its probe
    // finds the expired rows of other keys, and its locking delete takes a batch of them. The
    // writes here insert the key, swap its value and delete it in turn, so every one of them
    // is a decision that won.
    let new = key("new");
    for form in [CasForm::Statement, CasForm::Transaction] {
        kv::delete(&t.db, tenant, &audit, &new).await.unwrap();
        expire(&mut owner, tenant, 150).await;
        let pruned = drain(&mut owner, async |i| {
            let (was, now) = match i % 3 {
                0 => (Expect::Absent, Next::Value(val(json!(0)))),
                1 => (Expect::Value(val(json!(0))), Next::Value(val(json!(1)))),
                _ => (Expect::Value(val(json!(1))), Next::Delete),
            };
            assert!(kv::compare_and_set_as(&t.db, form, tenant, &audit, &new, &was, &now, None).await.unwrap());
        })
        .await;
        assert_eq!(pruned, 2, "{form:?}");
    }
    // The prune is served by the partial expiry index, not a scan of the tenant's keys.
    let mut tx = owner.begin().await.unwrap();
    tx.execute("SET LOCAL enable_seqscan = off").await.unwrap();
    let plan: Vec<String> = sqlx::query_scalar(
        "EXPLAIN SELECT key FROM kv_entries WHERE tenant_id = '00000000-0000-0000-0000-000000000000' AND expires_at <= now() ORDER BY expires_at LIMIT 100",
    )
    .fetch_all(&mut *tx)
    .await
    .unwrap();
    assert!(plan.join("\n").contains("kv_entries_expiry"), "{plan:?}");
}

/// Adds `n` rows under `old/` that expired an hour ago.
async fn expire(owner: &mut sqlx::PgConnection, tenant: TenantId, n: i64) {
    let mut tx = owner.begin().await.unwrap();
    tx.execute("SELECT set_config('gatehouse.platform', 'on', true)").await.unwrap();
    sqlx::query("INSERT INTO kv_entries (tenant_id, key, value, expires_at) SELECT $1, 'old/' || i, '1', now() - interval '1 hour' FROM generate_series(1, $2) i")
        .bind(tenant)
        .bind(n)
        .execute(&mut *tx)
        .await
        .unwrap();
    tx.commit().await.unwrap();
}

/// Runs `write` (given its number) until no expired row is left, checking after each write
/// that it deleted none of them or one batch (or the rest); returns how many writes pruned.
/// A write prunes with probability 1/`kv::PRUNE_EVERY`, so the cap of 100 times that many
/// writes is reached with a probability below 10^-30.
async fn drain(owner: &mut sqlx::PgConnection, mut write: impl AsyncFnMut(i64)) -> usize {
    let cap = i64::from(kv::PRUNE_EVERY) * 100;
    let mut left = remaining(owner).await;
    let mut pruned = 0;
    for i in 0..cap {
        write(i).await;
        let now = remaining(owner).await;
        if now != left {
            assert_eq!(now, (left - kv::PRUNE_BATCH).max(0), "a write deletes one batch at most");
            pruned += 1;
            left = now;
        }
        if left == 0 {
            return pruned;
        }
    }
    panic!("{left} expired rows left after {cap} writes");
}

async fn remaining(owner: &mut sqlx::PgConnection) -> i64 {
    let mut tx = owner.begin().await.unwrap();
    tx.execute("SELECT set_config('gatehouse.platform', 'on', true)").await.unwrap();
    sqlx::query_scalar("SELECT count(*) FROM kv_entries WHERE key LIKE 'old/%'").fetch_one(&mut *tx).await.unwrap()
}

#[tokio::test]
async fn compare_and_set_semantics() {
    for form in [CasForm::Statement, CasForm::Transaction] {
        semantics_through(form).await;
    }
}

async fn semantics_through(form: CasForm) {
    let (t, tenant) = setup().await;
    let a = Audit::cli();
    let k = key("k");
    let cas = |e: Expect, n: Next| {
        let (db, a, k) = (&t.db, &a, &k);
        async move { kv::compare_and_set_as(db, form, tenant, a, k, &e, &n, None).await.unwrap() }
    };
    assert!(cas(Expect::Absent, Next::Delete).await, "absent is absent");
    assert!(cas(Expect::Absent, Next::Value(val(json!({"a": 1, "b": [1, 2]})))).await);
    assert!(!cas(Expect::Absent, Next::Value(val(json!(0)))).await);
    assert!(!cas(Expect::Absent, Next::Delete).await);
    assert!(!cas(Expect::Value(val(json!({"a": 2}))), Next::Value(val(json!(0)))).await);
    // jsonb equality: key order does not matter.
    assert!(cas(Expect::Value(val(json!({"b": [1, 2], "a": 1}))), Next::Value(val(json!("two")))).await);
    assert!(!cas(Expect::Value(val(json!("one"))), Next::Delete).await);
    assert!(cas(Expect::Value(val(json!("two"))), Next::Delete).await);
    assert_eq!(kv::get(&t.db, tenant, &k).await.unwrap(), None);
    assert_eq!(log_count(&t, tenant).await, 3, "only the three winning swaps are logged");
}

/// 64 tasks race compare-and-set on one key, 30 times over in each form: exactly one winner
/// each round, and exactly one admin-log row per round.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn compare_and_set_race_has_exactly_one_winner() {
    let (t, tenant) = setup().await;
    let db = Arc::new(t.db.clone());
    for form in [CasForm::Statement, CasForm::Transaction] {
        for round in 0..30 {
            let k = format!("race/{form:?}/{round}");
            let mut tasks = Vec::new();
            for task in 0..64 {
                let (db, k) = (db.clone(), k.clone());
                tasks.push(tokio::spawn(async move {
                    let audit = Audit { actor: format!("task:{task}"), request_id: None };
                    let value = Next::Value(val(json!(task)));
                    kv::compare_and_set_as(&db, form, tenant, &audit, &key(&k), &Expect::Absent, &value, None).await
                }));
            }
            let mut winners = Vec::new();
            for (i, task) in tasks.into_iter().enumerate() {
                if task.await.unwrap().unwrap() {
                    winners.push(i);
                }
            }
            assert_eq!(winners.len(), 1, "{form:?} round {round}: winners {winners:?}");
            let stored = kv::get(&t.db, tenant, &key(&k)).await.unwrap().unwrap().value;
            assert_eq!(stored, json!(winners[0]), "{form:?} round {round}: the stored value is the winner's");
        }
    }
    assert_eq!(log_count(&t, tenant).await, 60);
}

/// Issue 20 §3: on a direct connection a compare-and-set is one autocommitted statement (the
/// `gatehouse_kv_cas` function, which takes its own scope), not a transaction. It counts each
/// call, wins and loses as the transaction form did, logs exactly its wins, and leaves no
/// scope behind on the pooled connection: the next statement on it sees no tenant's rows.
#[tokio::test]
async fn compare_and_set_is_one_statement_that_takes_and_drops_its_own_scope() {
    let (t, tenant) = setup().await;
    let other = tenants::create(&t.db, &Audit::cli(), "other", "Other").await.unwrap().id;
    let mut owner = t.admin_conn().await;
    owner.execute(sqlx::AssertSqlSafe(format!("ALTER DATABASE {} SET track_functions = 'pl'", t.name))).await.unwrap();
    // One connection, opened after the setting, so every statement below shares it.
    let db = gatehouse::db::Db::connect(&t.url, 1).await.unwrap();
    assert!(db.one_statement_fits(Scope::Tenant(tenant)));
    let a = Audit::cli();
    let cas = |tenant: TenantId, e: Expect, n: Next| {
        let (db, a) = (&db, &a);
        async move { kv::compare_and_set(db, tenant, a, &key("k"), &e, &n, None).await.unwrap() }
    };
    assert!(cas(tenant, Expect::Absent, Next::Value(val(json!(1)))).await);
    assert!(cas(other, Expect::Absent, Next::Value(val(json!("theirs")))).await, "the same key is another tenant's own");
    assert!(!cas(tenant, Expect::Value(val(json!(2))), Next::Value(val(json!(3)))).await);
    assert!(cas(tenant, Expect::Value(val(json!(1))), Next::Value(val(json!(2)))).await);
    assert!(!cas(tenant, Expect::Value(val(json!("theirs"))), Next::Delete).await, "another tenant's value is not seen");
    assert!(cas(tenant, Expect::Value(val(json!(2))), Next::Delete).await);
    assert_eq!(kv::get(&db, tenant, &key("k")).await.unwrap(), None);
    assert_eq!(kv::get(&db, other, &key("k")).await.unwrap().unwrap().value, json!("theirs"));
    assert_eq!(log_count(&t, tenant).await, 3, "the three wins, each logged once");
    assert_eq!(log_count(&t, other).await, 1);

    // The connection the statements ran on (a pool of one connection has one statement
    // connection) carries no scope afterwards.
    let (user, scope, visible, backend): (String, Option<String>, i64, i32) = db
        .one_statement(|conn, _| {
            Box::pin(async move {
                Ok(sqlx::query_as(
                    "SELECT current_user::text, nullif(current_setting('gatehouse.tenant_id', true), ''),
                            (SELECT count(*) FROM kv_entries), pg_backend_pid()",
                )
                .fetch_one(conn)
                .await?)
            })
        })
        .await
        .unwrap();
    assert_eq!((user.as_str(), scope), ("gatehouse_app", None));
    assert_eq!(visible, 0, "row-level security still hides every tenant's rows outside a scope");
    // Six compare-and-sets went through the function; closing the Db ends that backend, which
    // reports the calls it counted.
    db.close().await;
    assert!(backend_ends(&t, backend).await, "closing the Db closed the statement connection");
    let mut seen = 0;
    for _ in 0..750 {
        seen = sqlx::query_scalar::<_, i64>("SELECT calls FROM pg_stat_user_functions WHERE funcname = 'gatehouse_kv_cas'")
            .fetch_optional(&mut owner)
            .await
            .unwrap()
            .unwrap_or(0);
        if seen >= 6 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(seen, 6, "each compare-and-set is one call of gatehouse_kv_cas");
}

/// The function sets the application role only where the caller does not already run as it:
/// a caller connected as the owner (here inside its own transaction) still decides as the
/// application role, for that transaction only.
#[tokio::test]
async fn the_compare_and_set_function_runs_as_the_application_role() {
    let (t, tenant) = setup().await;
    let mut owner = t.owner_conn().await;
    let user = "SELECT current_user::text";
    let session: String = sqlx::query_scalar(user).fetch_one(&mut owner).await.unwrap();
    assert_ne!(session, "gatehouse_app");
    let mut tx = owner.begin().await.unwrap();
    let won: bool = sqlx::query_scalar(
        "SELECT gatehouse_kv_cas($1, 'k', 'insert', NULL, '1', NULL, 100, gen_random_uuid(), 'test', 'kv:k', NULL, '1', NULL)",
    )
    .bind(tenant.0)
    .fetch_one(&mut *tx)
    .await
    .unwrap();
    assert!(won);
    let inside: String = sqlx::query_scalar(user).fetch_one(&mut *tx).await.unwrap();
    assert_eq!(inside, "gatehouse_app", "the rest of the transaction runs as the application role");
    tx.commit().await.unwrap();
    let after: String = sqlx::query_scalar(user).fetch_one(&mut owner).await.unwrap();
    assert_eq!(after, session, "the role ended with the transaction");
    assert_eq!(kv::get(&t.db, tenant, &key("k")).await.unwrap().unwrap().value, json!(1));
}

/// One-statement decisions run on the replica's own connections: a connection whose statement
/// was answered is used again (no pool, no ping on its way back), and one whose statement was
/// cancelled halfway (its future dropped) is closed, never handed to the next statement.
#[tokio::test]
async fn a_statement_connection_is_kept_when_answered_and_closed_when_cancelled() {
    let (t, _) = setup().await;
    // A pool of two: one statement connection.
    let db = gatehouse::db::Db::connect(&t.url, 2).await.unwrap();
    let backend = || statement_backend(&db);
    let first = backend().await.unwrap();
    assert_eq!(backend().await.unwrap(), first, "an answered statement's connection is kept");
    let cancelled =
        db.one_statement(|conn, _| Box::pin(async move { Ok(conn.execute("SELECT pg_sleep(30)").await.map(|_| ())?) }));
    assert!(tokio::time::timeout(Duration::from_millis(300), cancelled).await.is_err(), "the sleep was cancelled");
    let next = backend().await.unwrap();
    assert_ne!(next, first, "the cancelled statement's connection was not reused");
    assert_eq!(backend().await.unwrap(), next);
    db.close().await;
}

/// A statement connection that sat idle while the replica saw a database loss elsewhere (here
/// a pooled connection whose backend was terminated under it) is not used again: it may lead
/// to a server that has gone. It is closed when next taken, and a new one takes its place.
#[tokio::test]
async fn an_idle_statement_connection_opened_before_a_loss_is_closed_not_used() {
    let (t, _) = setup().await;
    let db = gatehouse::db::Db::connect(&t.url, 2).await.unwrap();
    let backend = || statement_backend(&db);
    let first = backend().await.unwrap();
    assert_eq!(backend().await.unwrap(), first, "an answered statement's connection is kept");

    let mut pooled = db.pool().acquire().await.unwrap();
    let victim: i32 = sqlx::query_scalar("SELECT pg_backend_pid()").fetch_one(&mut *pooled).await.unwrap();
    assert_ne!(victim, first);
    let mut admin = t.admin_conn().await;
    sqlx::query("SELECT pg_terminate_backend($1)").bind(victim).execute(&mut admin).await.unwrap();
    let lost = db.noted(sqlx::query("SELECT 1").execute(&mut *pooled).await);
    assert!(lost.as_ref().is_err_and(Error::is_connection_loss), "the pooled connection was lost: {lost:?}");
    drop(pooled);

    let next = backend().await.unwrap();
    assert_ne!(next, first, "the connection opened before the loss was not used");
    assert_eq!(backend().await.unwrap(), next, "its replacement is kept");
    assert!(backend_ends(&t, first).await, "the stale connection was closed, not left open");
    db.close().await;
}

/// The backend pid of the statement connection a one-statement decision runs on.
async fn statement_backend(db: &gatehouse::db::Db) -> gatehouse::error::Result<i32> {
    db.one_statement(|conn, _| {
        Box::pin(async move { Ok(sqlx::query_scalar::<_, i32>("SELECT pg_backend_pid()").fetch_one(conn).await?) })
    })
    .await
}

/// Whether the backend `pid` leaves `pg_stat_activity` within 15 seconds.
async fn backend_ends(t: &TestDb, pid: i32) -> bool {
    eventually(Duration::from_secs(15), || {
        let url = t.url.clone();
        async move {
            let mut conn = sqlx::PgConnection::connect(url.expose()).await.unwrap();
            let left: i64 = sqlx::query_scalar("SELECT count(*) FROM pg_stat_activity WHERE pid = $1")
                .bind(pid)
                .fetch_one(&mut conn)
                .await
                .unwrap();
            left == 0
        }
    })
    .await
}

/// A real write-skew conflict: each transaction reads the key the other writes. One of them
/// must get SQLSTATE 40001 and succeed on a retry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serialization_failures_are_retried() {
    let (t, tenant) = setup().await;
    let barrier = Arc::new(tokio::sync::Barrier::new(2));
    let run = |read: &'static str, write: &'static str| {
        let (db, barrier) = (t.db.clone(), barrier.clone());
        let first = Arc::new(AtomicBool::new(true));
        tokio::spawn(async move {
            db.serializable_counted(Scope::Tenant(tenant), |conn, _| {
                let (barrier, first) = (barrier.clone(), first.clone());
                Box::pin(async move {
                    let seen: i64 = sqlx::query_scalar("SELECT count(*) FROM kv_entries WHERE key = $1").bind(read).fetch_one(&mut *conn).await?;
                    if first.swap(false, Ordering::SeqCst) {
                        barrier.wait().await; // both have read before either writes
                    }
                    sqlx::query("INSERT INTO kv_entries (tenant_id, key, value) VALUES ($1, $2, $3) ON CONFLICT (tenant_id, key) DO UPDATE SET value = EXCLUDED.value")
                        .bind(tenant)
                        .bind(write)
                        .bind(json!(seen))
                        .execute(&mut *conn)
                        .await?;
                    Ok::<_, Error>(())
                })
            })
            .await
        })
    };
    let x = run("x", "y");
    let y = run("y", "x");
    let (x, y) = (x.await.unwrap().unwrap(), y.await.unwrap().unwrap());
    assert!(x.1 + y.1 >= 3, "one transaction must have been retried: attempts {} and {}", x.1, y.1);
    // Serial outcome: whichever ran second saw the first's write.
    let xs = kv::get(&t.db, tenant, &key("x")).await.unwrap().unwrap().value;
    let ys = kv::get(&t.db, tenant, &key("y")).await.unwrap().unwrap().value;
    assert_eq!(xs.as_i64().unwrap() + ys.as_i64().unwrap(), 1, "x={xs} y={ys}");
}
