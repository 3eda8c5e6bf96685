//! The window budgets (requests per window, calls a day): each replica leases a slice of a
//! window from the ledger, admits calls from it locally, and settles what it used and what it
//! gives back.

use super::*;

pub(super) struct WindowEntry {
    pub(super) key: Key,
    pub(super) span_ms: i64,
    pub(super) budget: i32,
    pub(super) state: Mutex<WindowState>,
    /// One lease at a time per budget on this replica.
    pub(super) gate: tokio::sync::Mutex<()>,
}

pub(super) struct WindowState {
    /// The window the slice belongs to (-1: none).
    pub(super) no: i64,
    pub(super) ends: Instant,
    pub(super) remaining: i32,
    pub(super) used: i32,
    pub(super) refused: i32,
    /// The ledger had no more for this window.
    pub(super) exhausted: bool,
    pub(super) last_take: Instant,
    pub(super) last_report: Instant,
    /// Windows this replica moved past before settling them: (window, unused, used, refused).
    pub(super) pending: Vec<(i64, i32, i32, i32)>,
    pub(super) last_lease: Instant,
    /// After a failed lease, calls that need one fail at once until then (they would only
    /// queue behind the gate for the same answer).
    pub(super) unreachable_until: Instant,
}

impl Budgets {
    pub(super) fn window(&self, key: Key, budget: i32, span_ms: i64) -> Arc<WindowEntry> {
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

    /// One unit of the window's budget: from the local slice, or from a new lease. Only one
    /// task leases at a time (the gate); each that gets through it leaves with an answer.
    pub(super) async fn take(&self, entry: &WindowEntry) -> Result<(), Short> {
        if let Some(answer) = take_local(&mut lock(&entry.state), Instant::now()) {
            return answer;
        }
        let _gate = entry.gate.lock().await;
        // A lease whose window ended while it was made is made again (at most twice more).
        for _ in 0..3 {
            if let Some(answer) = take_local(&mut lock(&entry.state), Instant::now()) {
                return answer;
            }
            Box::pin(self.lease(entry)).await?;
        }
        Err(Short::Exhausted(Duration::from_millis(1)))
    }

    pub(super) async fn lease(&self, entry: &WindowEntry) -> Result<(), Short> {
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

    /// Writes what is due of every window (`all`: everything, the slices given back too).
    pub(super) async fn settle_windows(&self, all: bool) {
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
}

/// A unit of the window decided from the slice alone: taken, refused (spent, or the ledger
/// just unreachable), or `None` when it takes a lease.
pub(super) fn take_local(s: &mut WindowState, now: Instant) -> Option<Result<(), Short>> {
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

/// Puts back the units a refused call took from earlier windows (still this replica's).
pub(super) fn untake(taken: &[Arc<WindowEntry>]) {
    for e in taken {
        let mut s = lock(&e.state);
        if s.used > 0 && Instant::now() < s.ends {
            s.used -= 1;
            s.remaining += 1;
        }
    }
}
