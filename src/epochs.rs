//! Per-tenant epochs and the replica caches they validate.
//!
//! Every change that could alter a machine's authentication or a workspace's served
//! configuration bumps its tenant's epoch in the same transaction (database triggers, see the
//! `epochs` migration). A replica keeps what it derived from those rows, labelled with the
//! epoch read *before* deriving it, and reuses it only while one primary-key read of the
//! epoch answers the same number. So a cached answer is never staler than the request that
//! uses it: a revoked token is refused on the very next request on every replica, exactly as
//! without the cache. Entries also expire after [`MAX_AGE`], which keeps `last_used_at`
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

use crate::{db::Db, error::Result, tenants::TenantId};

/// An entry is derived again after this long, whatever the epoch says.
pub const MAX_AGE: Duration = Duration::from_secs(60);
/// Entries per cache; past it the cache starts over (a miss costs one lookup).
const CAPACITY: usize = 16_384;

/// The tenant's current epoch: one primary-key read, outside any transaction.
pub async fn read(db: &Db, tenant: TenantId) -> Result<Option<i64>> {
    db.on_lane(move |conn| {
        Box::pin(async move {
            Ok(sqlx::query_scalar("SELECT epoch FROM tenants WHERE id = $1").bind(tenant).fetch_optional(conn).await?)
        })
    })
    .await
}

/// The tenant's current epoch and the database clock, in the same one primary-key read: for
/// cached answers that also carry an expiry (which is the database clock's to judge).
pub async fn read_at(db: &Db, tenant: TenantId) -> Result<Option<(i64, chrono::DateTime<chrono::Utc>)>> {
    db.on_lane(move |conn| {
        Box::pin(async move {
            Ok(sqlx::query_as("SELECT epoch, now() FROM tenants WHERE id = $1").bind(tenant).fetch_optional(conn).await?)
        })
    })
    .await
}

/// The tenant with this slug and its current epoch, for derivations that start from a slug:
/// the label must be read before anything it labels, the tenant's own row included.
pub async fn read_by_slug(db: &Db, slug: &str) -> Result<Option<(TenantId, i64)>> {
    let slug = slug.to_owned();
    db.on_lane(move |conn| {
        Box::pin(async move {
            Ok(sqlx::query_as("SELECT id, epoch FROM tenants WHERE slug = $1").bind(slug).fetch_optional(conn).await?)
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
    entries: Mutex<HashMap<K, Entry<V>>>,
    /// Requests answered from the cache, and requests that had to derive again (for `/metrics`).
    pub hits: AtomicU64,
    pub misses: AtomicU64,
}

impl<K, V> Default for Cache<K, V> {
    fn default() -> Self {
        Cache { entries: Mutex::new(HashMap::new()), hits: AtomicU64::new(0), misses: AtomicU64::new(0) }
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
}
