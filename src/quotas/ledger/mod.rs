//! A replica's share of the tenants' budgets: slices leased from the ledger, spent locally.
//!
//! **Windows** (`windows.rs`; `requests` per `window_seconds`, and `daily`): windows are fixed, numbered on
//! the database's clock. When its slice of the current window is spent, a replica leases
//! another ([`store::lease`]): one statement that never grants past the budget. The slice
//! expires locally when the window ends, judged conservatively (from when the lease was
//! *sent*, with the database's clock read *after* it), so a slice is never spent in a window
//! it was not leased from. A replica gives back the unspent part of a slice it has not drawn
//! on for [`IDLE`], and reports what it admitted and refused ([`Budgets::run`]).
//!
//! **Concurrency** (`slots.rs`): a replica holds slots ([`store::hold`], one decision at a time per limit and
//! subject, under an advisory lock): the unexpired slots
//! of every replica never add up to more than the limit. It renews them while it uses them,
//! gives back idle ones, and a dead replica's slots lapse after [`SLOT_TTL`].
//!
//! Only a spent slice or a full set of slots costs a database round trip; every other call is
//! decided in memory. When the database cannot be reached and the slice is spent, the limit's
//! `fail_open` decides: refuse (`quota_unavailable`, the default) or admit uncounted.

use std::{
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use uuid::Uuid;

use super::{
    Limit, Per,
    store::{self, WindowKey},
};
use crate::{
    db::{Db, Scope},
    epochs,
    ids::TenantId,
    maps::FastMap,
};

mod slots;
mod windows;

use self::{slots::*, windows::*};

/// A slice not drawn on for this long is given back.
pub const IDLE: Duration = Duration::from_secs(1);
/// How often the background task settles and renews.
const TICK: Duration = Duration::from_millis(250);
/// How long a concurrency slot lives without renewal (a dead replica's slots lapse after it).
pub const SLOT_TTL: Duration = Duration::from_secs(10);
/// How long a call waits for a lease before the database counts as unreachable.
const LEASE_WAIT: Duration = Duration::from_millis(2_000);
/// How long calls are refused at once after the ledger said every slot is taken (a refused
/// call costs no round trip then).
const BUSY_PROBE: Duration = Duration::from_millis(50);
/// How long calls fail at once after a lease failed.
const BACKOFF: Duration = Duration::from_millis(1_000);
/// Entries idle this long (with nothing to settle) are forgotten.
const FORGET: Duration = Duration::from_secs(120);
const DAY_MS: i64 = 86_400_000;
/// A spent window is asked again at most this often (other replicas may have given back).
const PROBE: Duration = Duration::from_millis(250);
/// The most one lease asks for.
const MAX_SLICE: i32 = 100_000;

/// One call, as the limits see it.
pub struct Call<'a> {
    pub connector: &'a str,
    pub tool: &'a str,
    pub write: bool,
    /// The token's (or credential's) stable key: its kind and id, joined with `:` only when a
    /// limit counts per token (most calls meet no such limit).
    pub token: (&'a str, &'a str),
    pub member: Option<Uuid>,
}

/// Why a call was refused.
#[derive(Debug)]
pub struct Refusal {
    /// `rate_limited` or `quota_unavailable`.
    pub code: &'static str,
    /// The limit's name.
    pub limit: String,
    pub retry_after_ms: u64,
    pub message: String,
}

/// The concurrency slots a call holds until it ends (dropped: given back to this replica).
#[derive(Default)]
pub struct Permit {
    slots: Vec<Arc<SlotEntry>>,
}

impl Drop for Permit {
    fn drop(&mut self) {
        for slot in &self.slots {
            let mut s = lock(&slot.state);
            s.in_use = s.in_use.saturating_sub(1);
            s.last_busy = Instant::now();
        }
    }
}

/// What [`Budgets::admit`] answers for an admitted call.
pub type Admission = Permit;

/// Counters for `/metrics`.
#[derive(Debug, Default)]
pub struct Counts {
    pub leases: AtomicU64,
    pub lease_failures: AtomicU64,
    pub refused: AtomicU64,
    pub admitted_open: AtomicU64,
}

#[derive(Clone, PartialEq, Eq, Hash)]
struct Key {
    tenant: TenantId,
    limit: Uuid,
    subject: String,
    kind: &'static str,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// This replica's leases of every tenant's budgets.
pub struct Budgets {
    db: Db,
    replica: Uuid,
    limits: epochs::Cache<TenantId, Arc<Vec<Limit>>>,
    windows: Mutex<FastMap<Key, Arc<WindowEntry>>>,
    slots: Mutex<FastMap<Key, Arc<SlotEntry>>>,
    pub counts: Counts,
}

impl std::fmt::Debug for Budgets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("quotas::Budgets")
    }
}

enum Short {
    /// Spent for this window: retry after this long.
    Exhausted(Duration),
    /// The slots are all held elsewhere.
    Busy,
    Unreachable,
}

fn subject(per: Per, call: &Call<'_>) -> String {
    match (per, call.member) {
        (Per::Tenant, _) => "tenant".to_owned(),
        (Per::Member, Some(m)) => format!("member:{m}"),
        (Per::Member | Per::Token, _) => format!("token:{}:{}", call.token.0, call.token.1),
    }
}

/// A slice size: a sixteenth of the budget, so several replicas share a small budget finely.
fn slice_of(budget: i32) -> i32 {
    (budget / 16).clamp(1, MAX_SLICE)
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
}

impl Budgets {
    pub fn new(db: Db) -> Budgets {
        let replica = db.replica().id;
        Budgets {
            db,
            replica,
            limits: epochs::Cache::default(),
            windows: Mutex::default(),
            slots: Mutex::default(),
            counts: Counts::default(),
        }
    }

    /// The tenant's limits as of `epoch` (the epoch this request's configuration was bound
    /// under): this replica's copy, or read again.
    async fn limits(&self, tenant: TenantId, epoch: i64) -> crate::error::Result<Arc<Vec<Limit>>> {
        if let Some((limits, label)) = self.limits.get(&tenant)
            && label == epoch
        {
            return Ok(limits);
        }
        let limits = Arc::new(Box::pin(super::list(&self.db, tenant)).await?);
        self.limits.put(tenant, limits.clone(), epoch);
        Ok(limits)
    }

    /// Admits `call` under every limit of the tenant that covers it, or refuses it. The
    /// permit holds its concurrency slots until dropped.
    pub async fn admit(&self, tenant: TenantId, epoch: i64, call: &Call<'_>) -> Result<Permit, Refusal> {
        let limits = match self.limits(tenant, epoch).await {
            Ok(limits) => limits,
            Err(_) => {
                return Err(Refusal {
                    code: "quota_unavailable",
                    limit: String::new(),
                    retry_after_ms: 1_000,
                    message: "the tenant's limits could not be read; retry shortly".into(),
                });
            }
        };
        let mut permit = Permit::default();
        let mut taken: Vec<Arc<WindowEntry>> = Vec::new();
        for limit in limits.iter().filter(|l| l.covers(call.connector, call.tool, call.write)) {
            let subject = subject(limit.per, call);
            let windows = [
                limit.requests.zip(limit.window_seconds).map(|(r, w)| ("rate", r, i64::from(w) * 1000)),
                limit.daily.map(|d| ("daily", d, DAY_MS)),
            ];
            for (kind, budget, span_ms) in windows.into_iter().flatten() {
                let entry = self.window(Key { tenant, limit: limit.id, subject: subject.clone(), kind }, budget, span_ms);
                match self.take(&entry).await {
                    Ok(()) => taken.push(entry),
                    Err(short) => {
                        if let Some(refusal) = self.short(limit, short) {
                            untake(&taken);
                            return Err(refusal);
                        }
                    }
                }
            }
            if let Some(budget) = limit.concurrency {
                let entry = self.slot(Key { tenant, limit: limit.id, subject: subject.clone(), kind: "slots" }, budget);
                match self.acquire(&entry).await {
                    Ok(()) => permit.slots.push(entry),
                    Err(short) => {
                        if let Some(refusal) = self.short(limit, short) {
                            untake(&taken);
                            return Err(refusal);
                        }
                    }
                }
            }
        }
        Ok(permit)
    }

    /// The refusal a shortfall means under `limit`, or `None` to admit the call uncounted
    /// (the database unreachable, and the limit fails open).
    fn short(&self, limit: &Limit, short: Short) -> Option<Refusal> {
        let (code, retry, message) = match short {
            Short::Exhausted(retry) => {
                ("rate_limited", millis(retry), format!("the limit `{}` admits no more calls in this window", limit.name))
            }
            Short::Busy => ("rate_limited", 100, format!("the limit `{}` has as many calls in flight as it allows", limit.name)),
            Short::Unreachable if limit.fail_open => {
                self.counts.admitted_open.fetch_add(1, Ordering::Relaxed);
                return None;
            }
            Short::Unreachable => (
                "quota_unavailable",
                1_000,
                format!("the limit `{}` could not lease budget from the database; retry shortly", limit.name),
            ),
        };
        self.counts.refused.fetch_add(1, Ordering::Relaxed);
        Some(Refusal { code, limit: limit.name.clone(), retry_after_ms: retry, message })
    }

    /// Settles windows and renews or trims slots, every [`TICK`], until `stop` turns true
    /// (never in the middle of a round: counts taken out of a window are always written).
    pub async fn run(self: Arc<Self>, mut stop: tokio::sync::watch::Receiver<bool>) {
        let mut tick = tokio::time::interval(TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        while !*stop.borrow() {
            tokio::select! {
                _ = tick.tick() => {}
                _ = stop.changed() => break,
            }
            self.settle_windows(false).await;
            self.tend_slots().await;
        }
    }

    /// Gives back every slice this replica holds and reports its counts (at shutdown).
    pub async fn release_all(&self) {
        self.settle_windows(true).await;
        let slots: Vec<_> = lock(&self.slots).values().cloned().collect();
        for e in slots {
            let _ = self.hold(&e, 0).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slices_share_small_budgets_finely() {
        assert_eq!(slice_of(1), 1);
        assert_eq!(slice_of(40), 2);
        assert_eq!(slice_of(1_600), 100);
        assert_eq!(slice_of(crate::quotas::MAX_BUDGET), MAX_SLICE);
    }

    #[test]
    fn subjects() {
        let m = Uuid::nil();
        let call = Call { connector: "c", tool: "t", write: false, token: ("token", "tok"), member: Some(m) };
        assert_eq!(subject(Per::Tenant, &call), "tenant");
        assert_eq!(subject(Per::Member, &call), format!("member:{m}"));
        assert_eq!(subject(Per::Token, &call), "token:token:tok");
        let machine = Call { member: None, ..call };
        assert_eq!(subject(Per::Member, &machine), "token:token:tok");
    }
}
