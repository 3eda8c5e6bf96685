//! The replica registry and acknowledged invalidation (issue 20, `replicas` migration).
//!
//! Each `gatehouse serve` holds a lease in `replicas`, renewed every few seconds over one
//! dedicated connection (never a pooled one) that also `LISTEN`s for epoch changes and records
//! what this replica has applied (`replica_acks`). A transaction that moved an epoch waits,
//! after its commit, until every replica with a live lease has acknowledged the new epoch or
//! its lease has lapsed ([`Db`]'s transaction helper calls [`wait_for_acks`]). So while this
//! replica is *trusted* — registered, caught up, listening, and inside its own lease as its
//! monotonic clock judges it, minus a margin — the epochs it has applied are at least every
//! epoch whose change has returned to its caller, and the hot path may use them instead of
//! reading the epoch per request. Untrusted, it reads the epoch per request, as before.

use std::{
    collections::HashMap,
    sync::{
        RwLock,
        atomic::{AtomicI64, AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use sqlx::{
    Executor,
    postgres::{PgListener, PgPoolOptions},
};
use uuid::Uuid;

use super::Db;
use crate::{
    config::ReplicaConfig,
    error::{Error, Result},
    ids::TenantId,
};

/// The channel the `tenants_epoch_moved` trigger notifies, payload `tenant:epoch`.
pub const CHANNEL: &str = "gatehouse_epochs";

/// This process's place in the registry, and the epochs it has applied.
#[derive(Debug)]
pub struct Replica {
    /// Stable for the process: registering again updates the same row.
    pub id: Uuid,
    base: Instant,
    /// Nanoseconds after `base` until which this replica trusts what it applied (0: not).
    trusted_until_ns: AtomicU64,
    applied: RwLock<crate::maps::FastMap<TenantId, i64>>,
    /// How far the database clock is ahead of this process's wall clock, in microseconds, as
    /// the last renewal measured it (`i64::MIN`: not measured yet). Measured against the wall
    /// clock *before* the renewal was sent, so the estimate of the database's clock it gives
    /// is never behind the database's own (an expiry judged with it comes early, never late).
    db_ahead_us: AtomicI64,
    /// Notifications applied, registrations and trust losses (for `/metrics`).
    pub notifications: AtomicU64,
    pub registrations: AtomicU64,
    pub distrusts: AtomicU64,
}

impl Default for Replica {
    fn default() -> Self {
        Replica {
            id: Uuid::new_v4(),
            base: Instant::now(),
            trusted_until_ns: AtomicU64::new(0),
            applied: RwLock::default(),
            db_ahead_us: AtomicI64::new(i64::MIN),
            notifications: AtomicU64::new(0),
            registrations: AtomicU64::new(0),
            distrusts: AtomicU64::new(0),
        }
    }
}

impl Replica {
    fn now_ns(&self) -> u64 {
        u64::try_from(self.base.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    /// Whether this replica may answer from what it applied, judged now on its own clock.
    pub fn trusted(&self) -> bool {
        self.now_ns() < self.trusted_until_ns.load(Ordering::Acquire)
    }

    /// The tenant's epoch as this replica applied it, while it is trusted. Trust is checked
    /// after the read, so a pause between the two (SIGSTOP, a long GC-like stall) past the
    /// lease is caught here rather than answered from a stale number.
    pub fn applied(&self, tenant: TenantId) -> Option<i64> {
        let epoch = self.applied.read().unwrap_or_else(|p| p.into_inner()).get(&tenant).copied()?;
        self.trusted().then_some(epoch)
    }

    /// Takes note of an epoch known to be committed (a notification, a catch-up, a read of the
    /// database). Epochs only grow, so the larger number wins and nothing is ever lowered.
    pub fn learn(&self, tenant: TenantId, epoch: i64) {
        let mut applied = self.applied.write().unwrap_or_else(|p| p.into_inner());
        let slot = applied.entry(tenant).or_insert(epoch);
        *slot = (*slot).max(epoch);
    }

    /// The database's clock as this replica can tell it without asking, while it is trusted
    /// and has measured the clocks' difference: for expiries that are the database clock's to
    /// judge (an OAuth access token's), on the hot path. Never behind the database's clock
    /// by more than the drift since the last renewal.
    pub fn database_now(&self) -> Option<chrono::DateTime<chrono::Utc>> {
        let ahead = self.db_ahead_us.load(Ordering::Acquire);
        if ahead == i64::MIN || !self.trusted() {
            return None;
        }
        Some(chrono::Utc::now() + chrono::TimeDelta::microseconds(ahead))
    }

    fn measured_clock(&self, asked_at: chrono::DateTime<chrono::Utc>, database: chrono::DateTime<chrono::Utc>) {
        let ahead = (database - asked_at).num_microseconds().unwrap_or(0);
        self.db_ahead_us.store(ahead.max(i64::MIN + 1), Ordering::Release);
    }

    fn trust_until(&self, deadline_ns: u64) {
        self.trusted_until_ns.store(deadline_ns, Ordering::Release);
    }

    fn distrust(&self) {
        if self.trusted_until_ns.swap(0, Ordering::AcqRel) != 0 {
            self.distrusts.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Keeps this replica registered for as long as the process serves: registers, catches up,
/// listens, renews; after any failure it distrusts its caches at once and starts over.
/// `label` names the connection in `pg_stat_activity` (`gatehouse-replica <label>`).
pub async fn run(db: Db, config: ReplicaConfig, label: String) {
    let retry = Duration::from_millis(config.renew_ms.min(500));
    loop {
        let outcome = session(&db, config, &label).await;
        db.replica().distrust();
        match outcome {
            Ok(()) => return,
            Err(e) => {
                tracing::warn!(error = %e, replica = %db.replica().id, "replica lease lost; reading epochs per request until registered again")
            }
        }
        tokio::time::sleep(retry).await;
    }
}

/// One registration: returns only on failure (or when the pool is closed for shutdown).
async fn session(db: &Db, config: ReplicaConfig, label: &str) -> Result<()> {
    let lease = Duration::from_millis(config.lease_ms);
    let renew = Duration::from_millis(config.renew_ms);
    let lease_ms = i64::try_from(config.lease_ms).unwrap_or(i64::MAX);
    let margin_ns = config.margin_ms.saturating_mul(1_000_000);
    // Its own one-connection pool: the listener's connection is never shared, and its loss is
    // this session's end (no silent reconnect that could miss notifications).
    let options = db.session_options().application_name(&format!("gatehouse-replica {label}"));
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .min_connections(0)
        .acquire_timeout(lease)
        .idle_timeout(None)
        .max_lifetime(None)
        .after_connect(|conn, _| Box::pin(async move { conn.execute("SET ROLE gatehouse_app").await.map(|_| ()) }))
        .connect_lazy_with(options);
    let outcome = listen(db, &pool, lease, renew, lease_ms, margin_ns).await;
    pool.close().await;
    if db.pool().is_closed() {
        return Ok(());
    }
    outcome
}

async fn listen(db: &Db, pool: &sqlx::PgPool, lease: Duration, renew: Duration, lease_ms: i64, margin_ns: u64) -> Result<()> {
    let replica = db.replica();
    let within =
        |what: &'static str| move |_| Error::Internal(anyhow::anyhow!("the replica's {what} took longer than its lease"));
    let mut listener = tokio::time::timeout(lease, PgListener::connect_with(pool)).await.map_err(within("connection"))??;
    listener.eager_reconnect(false);
    listener.ignore_pool_close_event(true);
    tokio::time::timeout(lease, listener.listen(CHANNEL)).await.map_err(within("LISTEN"))??;

    // Catch up: LISTEN is in force, so whatever this snapshot misses will be notified.
    let asked = replica.now_ns();
    let caught = tokio::time::timeout(
        lease,
        sqlx::query!(
            r#"SELECT tenant_id AS "tenant_id!: TenantId", epoch AS "epoch!" FROM gatehouse_replica_register($1, $2)"#,
            replica.id,
            lease_ms
        )
        .fetch_all(&mut listener),
    )
    .await
    .map_err(within("registration"))??;
    for row in caught {
        replica.learn(row.tenant_id, row.epoch);
    }
    let lease_ns = u64::try_from(lease.as_nanos()).unwrap_or(u64::MAX);
    // The database started the lease after `asked`, so this deadline falls before its own.
    replica.trust_until(asked.saturating_add(lease_ns).saturating_sub(margin_ns));
    replica.registrations.fetch_add(1, Ordering::Relaxed);
    tracing::info!(replica = %replica.id, "replica registered; answering from applied epochs");

    let mut next_renewal = tokio::time::Instant::now() + renew;
    loop {
        match tokio::time::timeout_at(next_renewal, listener.try_recv()).await {
            Err(_due) => {
                let asked = replica.now_ns();
                let asked_at = chrono::Utc::now();
                let renewal = tokio::time::timeout(
                    lease,
                    sqlx::query!(
                        r#"SELECT gatehouse_replica_renew($1, $2) AS "renewed!", now() AS "database!""#,
                        replica.id,
                        lease_ms
                    )
                    .fetch_one(&mut listener),
                )
                .await
                .map_err(within("renewal"))??;
                let (renewed, database) = (renewal.renewed, renewal.database);
                if !renewed {
                    return Err(Error::Internal(anyhow::anyhow!("the replica's lease lapsed before it renewed it")));
                }
                replica.measured_clock(asked_at, database);
                replica.trust_until(asked.saturating_add(lease_ns).saturating_sub(margin_ns));
                next_renewal = tokio::time::Instant::now() + renew;
            }
            Ok(Ok(Some(first))) => {
                // Apply everything already received, then acknowledge it in one statement.
                let mut moved: HashMap<TenantId, i64> = HashMap::new();
                let mut note = |payload: &str| {
                    if let Some((tenant, epoch)) = parse_note(payload) {
                        let slot = moved.entry(tenant).or_insert(epoch);
                        *slot = (*slot).max(epoch);
                    }
                };
                note(first.payload());
                while let Some(more) = listener.next_buffered() {
                    note(more.payload());
                }
                for (tenant, epoch) in &moved {
                    replica.learn(*tenant, *epoch);
                }
                replica.notifications.fetch_add(moved.len() as u64, Ordering::Relaxed);
                let (tenants, epochs): (Vec<Uuid>, Vec<i64>) = moved.into_iter().map(|(t, e)| (t.0, e)).unzip();
                tokio::time::timeout(
                    lease,
                    sqlx::query!("SELECT gatehouse_replica_ack($1, $2, $3)", replica.id, &tenants, &epochs)
                        .execute(&mut listener),
                )
                .await
                .map_err(within("acknowledgement"))??;
            }
            Ok(Ok(None)) => return Err(Error::Internal(anyhow::anyhow!("the replica's LISTEN connection was lost"))),
            Ok(Err(e)) => return Err(e.into()),
        }
    }
}

/// Leaves the registry (on shutdown), so no change waits for this replica's lease.
pub async fn leave(db: &Db) {
    db.replica().distrust();
    let id = db.replica().id;
    let left = db
        .read(|conn, _| Box::pin(async move { Ok(sqlx::query!("SELECT gatehouse_replica_leave($1)", id).execute(conn).await?) }))
        .await;
    if let Err(e) = left {
        tracing::warn!(error = %e, "could not leave the replica registry; changes wait for its lease");
    }
}

/// One `tenant:epoch` entry (a notification's payload, or one of the transaction's notes).
pub(crate) fn parse_note(entry: &str) -> Option<(TenantId, i64)> {
    let (tenant, epoch) = entry.trim().split_once(':')?;
    Some((TenantId(tenant.parse().ok()?), epoch.parse().ok()?))
}

/// Every `tenant:epoch` a transaction noted (`gatehouse.bumped`), the largest per tenant.
pub(crate) fn parse_notes(noted: &str) -> Vec<(TenantId, i64)> {
    let mut moved: HashMap<TenantId, i64> = HashMap::new();
    for (tenant, epoch) in noted.split(',').filter_map(parse_note) {
        let slot = moved.entry(tenant).or_insert(epoch);
        *slot = (*slot).max(epoch);
    }
    moved.into_iter().collect()
}

/// Waits until every replica with a live lease has acknowledged these epochs, or its lease
/// has lapsed, for at most `within`. Polls with a growing interval: the replicas' own
/// acknowledgements usually land within a round trip or two of the commit.
pub(crate) async fn wait_for_acks(db: &Db, moved: &[(TenantId, i64)], within: Duration) -> Result<()> {
    if moved.is_empty() {
        return Ok(());
    }
    // This replica saw the commit itself: nothing it answers may be older than it.
    for (tenant, epoch) in moved {
        db.replica().learn(*tenant, *epoch);
    }
    let (tenants, epochs): (Vec<Uuid>, Vec<i64>) = moved.iter().map(|(t, e)| (t.0, *e)).unzip();
    let deadline = Instant::now() + within;
    let mut pause = Duration::from_millis(1);
    loop {
        let (tenants, epochs) = (&tenants, &epochs);
        let behind: i64 = db
            .read(|conn, _| {
                Box::pin(async move {
                    Ok(sqlx::query_scalar!(r#"SELECT gatehouse_replicas_behind($1, $2) AS "behind!""#, tenants, epochs)
                        .fetch_one(conn)
                        .await?)
                })
            })
            .await?;
        if behind == 0 {
            return Ok(());
        }
        if Instant::now() + pause > deadline {
            tracing::warn!(behind, "replicas did not acknowledge an epoch change in time");
            return Err(Error::Unavailable {
                code: "replicas_unconfirmed",
                message: "the change is saved, but not every replica has confirmed it yet; retry to confirm".into(),
                retry_after_ms: Some(1_000),
            });
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_millis(20));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notes_keep_the_largest_epoch_per_tenant_and_skip_garbage() {
        let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
        let mut got = parse_notes(&format!("{a}:3,{b}:7,{a}:5,nonsense,{b}:x"));
        got.sort_by_key(|(_, e)| *e);
        assert_eq!(got, vec![(TenantId(a), 5), (TenantId(b), 7)]);
        assert!(parse_notes("").is_empty());
    }

    #[test]
    fn applied_epochs_never_go_down_and_are_hidden_when_untrusted() {
        let r = Replica::default();
        let t = TenantId(Uuid::new_v4());
        r.learn(t, 4);
        r.learn(t, 2);
        assert_eq!(r.applied(t), None, "not trusted before registering");
        r.trust_until(r.now_ns() + 60_000_000_000);
        assert_eq!(r.applied(t), Some(4));
        let before = chrono::Utc::now();
        assert_eq!(r.database_now(), None, "no clock measured yet");
        r.measured_clock(before, before + chrono::TimeDelta::seconds(3));
        let told = r.database_now().unwrap();
        assert!(told >= before + chrono::TimeDelta::seconds(3), "the database's clock, never behind it");
        r.distrust();
        assert_eq!(r.database_now(), None, "untrusted: ask the database");
        assert_eq!(r.applied(t), None);
        assert_eq!(r.distrusts.load(Ordering::Relaxed), 1);
    }
}
