//! A replica's share of the tenants' budgets: slices leased from the ledger, spent locally.
//!
//! **Windows** (`requests` per `window_seconds`, and `daily`): windows are fixed, numbered on
//! the database's clock. When its slice of the current window is spent, a replica leases
//! another ([`store::lease`]): one statement that never grants past the budget. The slice
//! expires locally when the window ends, judged conservatively (from when the lease was
//! *sent*, with the database's clock read *after* it), so a slice is never spent in a window
//! it was not leased from. A replica gives back the unspent part of a slice it has not drawn
//! on for [`IDLE`], and reports what it admitted and refused ([`Budgets::run`]).
//!
//! **Concurrency**: a replica holds slots ([`store::hold`], one decision at a time per limit and
//! subject, under an advisory lock): the unexpired slots
//! of every replica never add up to more than the limit. It renews them while it uses them,
//! gives back idle ones, and a dead replica's slots lapse after [`SLOT_TTL`].
//!
//! Only a spent slice or a full set of slots costs a database round trip; every other call is
//! decided in memory. When the database cannot be reached and the slice is spent, the limit's
//! `fail_open` decides: refuse (`quota_unavailable`, the default) or admit uncounted.

use std::{
    collections::HashMap,
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
};

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
    /// The token's (or credential's) stable key.
    pub token: &'a str,
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

struct WindowEntry {
    key: Key,
    span_ms: i64,
    budget: i32,
    state: Mutex<WindowState>,
    /// One lease at a time per budget on this replica.
    gate: tokio::sync::Mutex<()>,
}

struct WindowState {
    /// The window the slice belongs to (-1: none).
    no: i64,
    ends: Instant,
    remaining: i32,
    used: i32,
    refused: i32,
    /// The ledger had no more for this window.
    exhausted: bool,
    last_take: Instant,
    last_report: Instant,
    /// Windows this replica moved past before settling them: (window, unused, used, refused).
    pending: Vec<(i64, i32, i32, i32)>,
    last_lease: Instant,
    /// After a failed lease, calls that need one fail at once until then (they would only
    /// queue behind the gate for the same answer).
    unreachable_until: Instant,
}

struct SlotEntry {
    key: Key,
    budget: i32,
    state: Mutex<SlotState>,
    gate: tokio::sync::Mutex<()>,
}

struct SlotState {
    unreachable_until: Instant,
    /// After the ledger said every slot is taken, calls are refused at once until then.
    busy_until: Instant,
    /// The sequence number of this replica's last decision for these slots.
    seq: i64,
    held: i32,
    in_use: i32,
    /// Conservative local expiry of the held slots.
    expires: Instant,
    last_busy: Instant,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// This replica's leases of every tenant's budgets.
pub struct Budgets {
    db: Db,
    replica: Uuid,
    limits: epochs::Cache<TenantId, Arc<Vec<Limit>>>,
    windows: Mutex<HashMap<Key, Arc<WindowEntry>>>,
    slots: Mutex<HashMap<Key, Arc<SlotEntry>>>,
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
        (Per::Member | Per::Token, _) => format!("token:{}", call.token),
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
        let limits = Arc::new(super::list(&self.db, tenant).await?);
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

    fn window(&self, key: Key, budget: i32, span_ms: i64) -> Arc<WindowEntry> {
        let mut windows = lock(&self.windows);
        if let Some(e) = windows.get(&key)
            && e.budget == budget
            && e.span_ms == span_ms
        {
            return e.clone();
        }
        let now = Instant::now();
        let entry = Arc::new(WindowEntry {
            key: key.clone(),
            span_ms,
            budget,
            state: Mutex::new(WindowState {
                no: -1,
                ends: now,
                remaining: 0,
                used: 0,
                refused: 0,
                exhausted: false,
                last_take: now,
                last_report: now,
                pending: Vec::new(),
                last_lease: now,
                unreachable_until: now,
            }),
            gate: tokio::sync::Mutex::new(()),
        });
        // A changed budget replaces the entry; the old one's counts are settled by `run`
        // through the entries it already holds, or lost with its slice (never over-granted).
        windows.insert(key, entry.clone());
        entry
    }

    fn slot(&self, key: Key, budget: i32) -> Arc<SlotEntry> {
        let mut slots = lock(&self.slots);
        if let Some(e) = slots.get(&key)
            && e.budget == budget
        {
            return e.clone();
        }
        let now = Instant::now();
        let entry = Arc::new(SlotEntry {
            key: key.clone(),
            budget,
            state: Mutex::new(SlotState {
                unreachable_until: now,
                busy_until: now,
                seq: 0,
                held: 0,
                in_use: 0,
                expires: now,
                last_busy: now,
            }),
            gate: tokio::sync::Mutex::new(()),
        });
        slots.insert(key, entry.clone());
        entry
    }

    /// One unit of the window's budget: from the local slice, or from a new lease. Only one
    /// task leases at a time (the gate); each that gets through it leaves with an answer.
    async fn take(&self, entry: &WindowEntry) -> Result<(), Short> {
        if let Some(answer) = take_local(&mut lock(&entry.state), Instant::now()) {
            return answer;
        }
        let _gate = entry.gate.lock().await;
        // A lease whose window ended while it was made is made again (at most twice more).
        for _ in 0..3 {
            if let Some(answer) = take_local(&mut lock(&entry.state), Instant::now()) {
                return answer;
            }
            self.lease(entry).await?;
        }
        Err(Short::Exhausted(Duration::from_millis(1)))
    }

    async fn lease(&self, entry: &WindowEntry) -> Result<(), Short> {
        let want = slice_of(entry.budget);
        let key = &entry.key;
        let wkey = WindowKey { limit: key.limit, subject: &key.subject, kind: key.kind, span_ms: entry.span_ms };
        let sent = Instant::now();
        let leased = tokio::time::timeout(
            LEASE_WAIT,
            self.db.single_decision(Scope::Tenant(key.tenant), |conn, _| {
                let wkey = &wkey;
                Box::pin(async move { store::lease(conn, key.tenant, wkey, entry.budget, want).await })
            }),
        )
        .await;
        let leased = match leased {
            Ok(Ok(leased)) => leased,
            _ => {
                self.counts.lease_failures.fetch_add(1, Ordering::Relaxed);
                let mut s = lock(&entry.state);
                s.unreachable_until = Instant::now() + BACKOFF;
                return Err(Short::Unreachable);
            }
        };
        self.counts.leases.fetch_add(1, Ordering::Relaxed);
        let end_ms = (leased.window_no + 1).saturating_mul(entry.span_ms);
        let ends = sent + Duration::from_millis(u64::try_from(end_ms - leased.now_ms).unwrap_or(0));
        let mut s = lock(&entry.state);
        if s.no != leased.window_no {
            if s.no >= 0 && (s.remaining > 0 || s.used > 0 || s.refused > 0) {
                let moved = (s.no, s.remaining, s.used, s.refused);
                s.pending.push(moved);
            }
            s.no = leased.window_no;
            s.remaining = 0;
            s.used = 0;
            s.refused = 0;
        }
        s.remaining += leased.slice;
        s.exhausted = leased.slice < want;
        s.ends = ends;
        s.last_lease = Instant::now();
        Ok(())
    }

    /// One concurrency slot: a free one this replica holds, or more from the ledger (twice
    /// the slots in use when calls queue up, else one). Only one task asks the ledger at a time
    /// (the gate); each that gets through it leaves with an answer.
    async fn acquire(&self, entry: &SlotEntry) -> Result<(), Short> {
        if let Some(answer) = acquire_local(&mut lock(&entry.state), Instant::now()) {
            return answer;
        }
        let _gate = entry.gate.lock().await;
        if let Some(answer) = acquire_local(&mut lock(&entry.state), Instant::now()) {
            return answer;
        }
        let in_use = lock(&entry.state).in_use;
        let mut fits = false;
        for want in [(in_use * 2).clamp(in_use + 1, entry.budget.max(in_use + 1)), in_use + 1] {
            if self.hold(entry, want).await? {
                fits = true;
                break;
            }
            if want == in_use + 1 {
                break;
            }
        }
        let mut s = lock(&entry.state);
        if fits && let Some(answer) = acquire_local(&mut s, Instant::now()) {
            return answer;
        }
        s.busy_until = Instant::now() + BUSY_PROBE;
        Err(Short::Busy)
    }

    /// Sets this replica's slots to `want` in the ledger: false when they would not fit.
    async fn hold(&self, entry: &SlotEntry, want: i32) -> Result<bool, Short> {
        let key = &entry.key;
        let seq = {
            let mut s = lock(&entry.state);
            s.seq += 1;
            s.seq
        };
        let sent = Instant::now();
        let held = tokio::time::timeout(
            LEASE_WAIT,
            self.db.single_decision(Scope::Tenant(key.tenant), |conn, _| {
                let ttl = i64::try_from(SLOT_TTL.as_millis()).unwrap_or(i64::MAX);
                Box::pin(async move {
                    store::hold(conn, key.tenant, (key.limit, &key.subject), (self.replica, seq), (want, entry.budget), ttl).await
                })
            }),
        )
        .await;
        let fits = match held {
            Ok(Ok(fits)) => fits,
            _ => {
                self.counts.lease_failures.fetch_add(1, Ordering::Relaxed);
                let mut s = lock(&entry.state);
                s.unreachable_until = Instant::now() + BACKOFF;
                return Err(Short::Unreachable);
            }
        };
        self.counts.leases.fetch_add(1, Ordering::Relaxed);
        let mut s = lock(&entry.state);
        if fits {
            s.held = want;
            s.expires = sent + SLOT_TTL;
        }
        Ok(fits)
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

    /// Writes what is due of every window (`all`: everything, the slices given back too).
    async fn settle_windows(&self, all: bool) {
        let now = Instant::now();
        let entries: Vec<_> = lock(&self.windows).values().cloned().collect();
        for e in entries {
            let due = {
                let mut s = lock(&e.state);
                let mut due = std::mem::take(&mut s.pending);
                let counted = s.remaining > 0 || s.used > 0 || s.refused > 0;
                if s.no >= 0 && counted {
                    let ended = now >= s.ends;
                    let idle = now.duration_since(s.last_take) >= IDLE;
                    if all || ended || (idle && s.remaining > 0) {
                        due.push((s.no, s.remaining, s.used, s.refused));
                        (s.remaining, s.used, s.refused) = (0, 0, 0);
                        s.exhausted = false;
                        s.last_report = now;
                    } else if now.duration_since(s.last_report) >= IDLE && (s.used > 0 || s.refused > 0) {
                        due.push((s.no, 0, s.used, s.refused));
                        (s.used, s.refused) = (0, 0);
                        s.last_report = now;
                    }
                }
                due
            };
            for (no, unused, used, refused) in due {
                let key = &e.key;
                let wkey = WindowKey { limit: key.limit, subject: &key.subject, kind: key.kind, span_ms: e.span_ms };
                let settled = self
                    .db
                    .single_decision(Scope::Tenant(key.tenant), |conn, _| {
                        let wkey = &wkey;
                        Box::pin(async move { store::settle(conn, key.tenant, wkey, no, (unused, used, refused)).await })
                    })
                    .await;
                if let Err(error) = settled {
                    // The unused part is never offered twice (a write whose commit went
                    // unanswered may have returned it already): it stays granted, as a dead
                    // replica's would. The counts are reported again on the next round.
                    tracing::warn!(%error, unused, used, "a quota window could not be settled; its counts are retried");
                    if used > 0 || refused > 0 {
                        lock(&e.state).pending.push((no, 0, used, refused));
                    }
                }
            }
        }
        let mut windows = lock(&self.windows);
        windows.retain(|_, e| {
            let s = lock(&e.state);
            !(s.pending.is_empty() && s.remaining == 0 && s.used == 0 && s.refused == 0 && s.last_take.elapsed() > FORGET)
        });
    }

    async fn tend_slots(&self) {
        let now = Instant::now();
        let entries: Vec<_> = lock(&self.slots).values().cloned().collect();
        for e in entries {
            let _gate = e.gate.lock().await;
            let want = {
                let mut s = lock(&e.state);
                if s.held == 0 {
                    continue;
                }
                let idle = s.in_use < s.held && now.duration_since(s.last_busy) >= IDLE;
                let renew = s.expires.saturating_duration_since(now) < SLOT_TTL / 2;
                if !idle && !renew {
                    continue;
                }
                // Trimmed locally first: no call takes a slot that is on its way back.
                if idle {
                    s.held = s.in_use;
                }
                s.held
            };
            match self.hold(&e, want).await {
                Ok(true) => {}
                // Lapsed and taken elsewhere meanwhile: hold nothing until a call leases again.
                Ok(false) => {
                    let mut s = lock(&e.state);
                    s.held = 0;
                    s.expires = Instant::now();
                }
                Err(_) => {}
            }
        }
        let mut slots = lock(&self.slots);
        slots.retain(|_, e| {
            let s = lock(&e.state);
            s.held > 0 || s.in_use > 0 || s.last_busy.elapsed() < FORGET
        });
    }
}

/// A unit of the window decided from the slice alone: taken, refused (spent, or the ledger
/// just unreachable), or `None` when it takes a lease.
fn take_local(s: &mut WindowState, now: Instant) -> Option<Result<(), Short>> {
    if s.no >= 0 && now < s.ends {
        if s.remaining > 0 {
            s.remaining -= 1;
            s.used += 1;
            s.last_take = now;
            return Some(Ok(()));
        }
        if s.exhausted && now.duration_since(s.last_lease) < PROBE {
            s.refused += 1;
            return Some(Err(Short::Exhausted(s.ends - now)));
        }
    }
    if now < s.unreachable_until {
        return Some(Err(Short::Unreachable));
    }
    None
}

/// A slot decided from what this replica holds: taken, refused (all taken a moment ago, or the
/// ledger just unreachable), or `None` when it takes the ledger.
fn acquire_local(s: &mut SlotState, now: Instant) -> Option<Result<(), Short>> {
    if now < s.expires && s.in_use < s.held {
        s.in_use += 1;
        s.last_busy = now;
        return Some(Ok(()));
    }
    if now < s.unreachable_until {
        return Some(Err(Short::Unreachable));
    }
    if now < s.busy_until {
        return Some(Err(Short::Busy));
    }
    None
}

/// Puts back the units a refused call took from earlier windows (still this replica's).
fn untake(taken: &[Arc<WindowEntry>]) {
    for e in taken {
        let mut s = lock(&e.state);
        if s.used > 0 && Instant::now() < s.ends {
            s.used -= 1;
            s.remaining += 1;
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
        let call = Call { connector: "c", tool: "t", write: false, token: "tok", member: Some(m) };
        assert_eq!(subject(Per::Tenant, &call), "tenant");
        assert_eq!(subject(Per::Member, &call), format!("member:{m}"));
        assert_eq!(subject(Per::Token, &call), "token:tok");
        let machine = Call { member: None, ..call };
        assert_eq!(subject(Per::Member, &machine), "token:tok");
    }
}
