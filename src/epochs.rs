//! Per-tenant epochs and the replica caches they validate.
//!
//! Every change that could alter a machine's authentication or a workspace's served
//! configuration bumps its tenant's epoch in the same transaction (database triggers, see the
//! `epochs` migration). A replica keeps what it derived from those rows, labelled with the
//! epoch read *before* deriving it, and reuses it only while one primary-key read of the
//! epoch answers the same number. So a cached answer is never staler than the request that
//! uses it: a revoked token is refused on the very next request on every replica, exactly as
//! without the cache. A replica that holds a live lease in the registry and listens for epoch
//! changes skips even that read (see [`read`]). Entries also expire after [`MAX_AGE`], which keeps `last_used_at`
//! current and bounds what a missed trigger could ever cost.

use std::{
    collections::HashMap,
    hash::Hash,
    sync::{
        Mutex,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use chrono::{DateTime, Utc};

use crate::{
    db::Db,
    error::{Error, Result},
    ids::TenantId,
};

/// An entry is derived again after this long, whatever the epoch says.
pub const MAX_AGE: Duration = Duration::from_secs(60);
/// Entries per cache; past it the cache starts over (a miss costs one lookup).
const CAPACITY: usize = 16_384;

/// The tenant's current epoch as far as any request may tell: while this replica is trusted
/// (registered, listening, inside its lease; see [`crate::db::replica`]), the epoch it
/// applied, with no database round trip — every change that moved the epoch waited for this
/// replica's acknowledgement, or for its lease to lapse, before it returned. Otherwise one
/// primary-key read, outside any transaction (shared with concurrent requests, see
/// [`read_at`]), whose answer this replica also takes note of.
pub async fn read(db: &Db, tenant: TenantId) -> Result<Option<i64>> {
    if let Some(epoch) = db.replica().applied(tenant) {
        return Ok(Some(epoch));
    }
    let read = read_at(db, tenant).await?.map(|(epoch, _)| epoch);
    if let Some(epoch) = read {
        db.replica().learn(tenant, epoch);
    }
    Ok(read)
}

/// The tenant's current epoch and the database clock (for cached answers that also carry an
/// expiry, which is the database clock's to judge).
///
/// Concurrent requests share reads: each request joins the next read that *starts after it
/// arrived*, never one already under way, so its answer is exactly as fresh as a read of its
/// own (a change committed before the request arrived is always seen). A read serves every
/// tenant waiting for it with one statement (`WHERE id = ANY(…)`, or `= $1` for one); at most [`ROUNDS`] run at
/// once. Under load this turns one statement per request into one per batch; a lone request
/// pays one spawned task more than a read of its own.
pub async fn read_at(db: &Db, tenant: TenantId) -> Result<Option<(i64, DateTime<Utc>)>> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let batch = db.epoch_batch();
    let lead = {
        let mut state = batch.state.lock().unwrap_or_else(|p| p.into_inner());
        state.waiting.push((tenant, tx));
        batch.requests.fetch_add(1, Ordering::Relaxed);
        let lead = state.rounds < ROUNDS;
        if lead {
            state.rounds += 1;
        }
        lead
    };
    if lead {
        tokio::spawn(rounds(db.clone()));
    }
    match rx.await {
        Ok(answer) => answer,
        Err(_) => Err(Error::Internal(anyhow::anyhow!("the epoch read was dropped"))),
    }
}

/// Reads running at once at most. One: a request that arrives during a read waits for it to
/// end and joins the next, so everyone who arrived meanwhile shares that next statement. With
/// four at once (one per hot-path lane, as before) most reads at 8 connections served a single
/// request; one at a time halved the statements per request at 8 connections and cut them to a
/// fifth at 32 (`docs/benchmarks.md`, session 6). It costs a waiting request at most one round
/// trip more.
const ROUNDS: usize = 1;

/// Should a round ever panic, frees its place and fails its waiters instead of leaving them
/// (and, after [`ROUNDS`] panics, every later request) waiting forever.
struct RoundGuard(Db);

impl Drop for RoundGuard {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let mut state = self.0.epoch_batch().state.lock().unwrap_or_else(|p| p.into_inner());
            state.rounds -= 1;
            state.waiting.clear();
        }
    }
}

/// Runs reads while requests wait: each read takes everyone who was waiting *before* it
/// starts, and answers them all.
async fn rounds(db: Db) {
    let _guard = RoundGuard(db.clone());
    loop {
        let waiting = {
            let mut state = db.epoch_batch().state.lock().unwrap_or_else(|p| p.into_inner());
            if state.waiting.is_empty() {
                state.rounds -= 1;
                return;
            }
            std::mem::take(&mut state.waiting)
        };
        db.epoch_batch().statements.fetch_add(1, Ordering::Relaxed);
        let mut ids: Vec<TenantId> = waiting.iter().map(|(t, _)| *t).collect();
        ids.sort_by_key(|t| t.0);
        ids.dedup();
        let read = db
            .on_lane(|conn| {
                let ids = ids.clone();
                Box::pin(async move {
                    // One tenant (every round at low concurrency): the plain primary-key
                    // lookup, cheaper for PostgreSQL than the array form.
                    let rows: Vec<(TenantId, i64, DateTime<Utc>)> = match ids.as_slice() {
                        [one] => sqlx::query!(
                            r#"SELECT id AS "id: TenantId", epoch, now() AS "at!" FROM tenants WHERE id = $1"#,
                            one.0
                        )
                        .fetch_all(conn)
                        .await?
                        .into_iter()
                        .map(|r| (r.id, r.epoch, r.at))
                        .collect(),
                        _ => {
                            let ids: Vec<uuid::Uuid> = ids.iter().map(|t| t.0).collect();
                            sqlx::query!(
                                r#"SELECT id AS "id: TenantId", epoch, now() AS "at!" FROM tenants WHERE id = ANY($1)"#,
                                &ids
                            )
                            .fetch_all(conn)
                            .await?
                            .into_iter()
                            .map(|r| (r.id, r.epoch, r.at))
                            .collect()
                        }
                    };
                    Ok(rows)
                })
            })
            .await;
        match read {
            Ok(rows) => {
                let found: HashMap<TenantId, (i64, DateTime<Utc>)> = rows.into_iter().map(|(t, e, at)| (t, (e, at))).collect();
                for (tenant, tx) in waiting {
                    let _ = tx.send(Ok(found.get(&tenant).copied()));
                }
            }
            Err(e) => {
                // Every waiter gets the same kind of answer the read got: 503 when the database
                // is unreachable, a bare 500 otherwise (logged once, here).
                let lost = e.code() == "database_unavailable";
                tracing::warn!(error = %e, "epoch read failed");
                for (_, tx) in waiting {
                    let shared = if lost {
                        Error::Unavailable {
                            code: "database_unavailable",
                            message: "the database is unavailable".into(),
                            retry_after_ms: None,
                        }
                    } else {
                        Error::Internal(anyhow::anyhow!("epoch read failed"))
                    };
                    let _ = tx.send(Err(shared));
                }
            }
        }
    }
}

/// The tenant with this slug and its current epoch, for derivations that start from a slug:
/// the label must be read before anything it labels, the tenant's own row included.
pub async fn read_by_slug(db: &Db, slug: &str) -> Result<Option<(TenantId, i64)>> {
    let slug = slug.to_owned();
    db.on_lane(|conn| {
        let slug = slug.clone();
        Box::pin(async move {
            let row = sqlx::query!(r#"SELECT id AS "id: TenantId", epoch FROM tenants WHERE slug = $1"#, slug)
                .fetch_optional(conn)
                .await?;
            Ok(row.map(|r| (r.id, r.epoch)))
        })
    })
    .await
}

struct Entry<V> {
    value: V,
    epoch: i64,
    at: Instant,
}

/// Values labelled with the epoch they were derived under.
pub struct Cache<K, V> {
    entries: Mutex<crate::maps::FastMap<K, Entry<V>>>,
    /// Requests answered from the cache, and requests that had to derive again (for `/metrics`).
    pub hits: AtomicU64,
    pub misses: AtomicU64,
}

impl<K, V> Default for Cache<K, V> {
    fn default() -> Self {
        Cache { entries: Mutex::new(Default::default()), hits: AtomicU64::new(0), misses: AtomicU64::new(0) }
    }
}

impl<K, V> std::fmt::Debug for Cache<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("epochs::Cache")
    }
}

impl<K: Eq + Hash, V: Clone> Cache<K, V> {
    /// The value and its epoch label, if present and younger than [`MAX_AGE`]. The caller
    /// must compare the label with the epoch it reads for this request.
    pub fn get(&self, key: &K) -> Option<(V, i64)> {
        let entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        entries.get(key).filter(|e| e.at.elapsed() < MAX_AGE).map(|e| (e.value.clone(), e.epoch))
    }

    /// Stores `value` derived under `epoch` (read before deriving it).
    pub fn put(&self, key: K, value: V, epoch: i64) {
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        if entries.len() >= CAPACITY {
            entries.clear();
        }
        entries.insert(key, Entry { value, epoch, at: Instant::now() });
    }

    /// The value if present, younger than [`MAX_AGE`] and labelled with `epoch` (the epoch read
    /// for this request; `None`, unknown, never matches), counted as a hit; else a miss.
    pub fn current(&self, key: &K, epoch: Option<i64>) -> Option<V> {
        let found = self.get(key).filter(|(_, label)| Some(*label) == epoch).map(|(value, _)| value);
        self.count(found.is_some());
        found
    }

    /// Counts a request answered from the cache (`hit`) or derived again.
    pub fn count(&self, hit: bool) {
        if hit { &self.hits } else { &self.misses }.fetch_add(1, Ordering::Relaxed);
    }

    pub fn len(&self) -> usize {
        self.entries.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn remove(&self, key: &K) {
        self.entries.lock().unwrap_or_else(|p| p.into_inner()).remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_carry_their_label_and_start_over_at_capacity() {
        let cache = Cache::default();
        cache.put("a", 1, 7);
        assert_eq!(cache.get(&"a"), Some((1, 7)));
        cache.remove(&"a");
        assert_eq!(cache.get(&"a"), None);
        let full = Cache::default();
        for i in 0..=CAPACITY {
            full.put(i, i, 0);
        }
        assert_eq!(full.entries.lock().unwrap().len(), 1);
    }

    #[test]
    fn a_value_is_current_only_under_its_own_label_and_every_lookup_is_counted() {
        let cache = Cache::default();
        cache.put("a", 1, 7);
        assert_eq!(cache.current(&"a", Some(7)), Some(1));
        assert_eq!(cache.current(&"a", Some(8)), None, "another epoch");
        assert_eq!(cache.current(&"a", None), None, "an unknown epoch");
        assert_eq!(cache.current(&"b", Some(7)), None, "absent");
        assert_eq!((cache.hits.load(Ordering::Relaxed), cache.misses.load(Ordering::Relaxed)), (1, 3));
    }
}
