//! The concurrency budgets: each replica holds slots from the ledger with a short expiry,
//! renews them while calls run, and trims them when they are idle.

use super::*;

pub(super) struct SlotEntry {
    pub(super) key: Key,
    pub(super) budget: i32,
    pub(super) state: Mutex<SlotState>,
    pub(super) gate: tokio::sync::Mutex<()>,
}

pub(super) struct SlotState {
    pub(super) unreachable_until: Instant,
    /// After the ledger said every slot is taken, calls are refused at once until then.
    pub(super) busy_until: Instant,
    /// The sequence number of this replica's last decision for these slots.
    pub(super) seq: i64,
    pub(super) held: i32,
    pub(super) in_use: i32,
    /// Conservative local expiry of the held slots.
    pub(super) expires: Instant,
    pub(super) last_busy: Instant,
}

impl Budgets {
    pub(super) fn slot(&self, key: Key, budget: i32) -> Arc<SlotEntry> {
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

    /// One concurrency slot: a free one this replica holds, or more from the ledger (twice
    /// the slots in use when calls queue up, else one). Only one task asks the ledger at a time
    /// (the gate); each that gets through it leaves with an answer.
    pub(super) async fn acquire(&self, entry: &SlotEntry) -> Result<(), Short> {
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
            if Box::pin(self.hold(entry, want)).await? {
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
    pub(super) async fn hold(&self, entry: &SlotEntry, want: i32) -> Result<bool, Short> {
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

    pub(super) async fn tend_slots(&self) {
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

/// A slot decided from what this replica holds: taken, refused (all taken a moment ago, or the
/// ledger just unreachable), or `None` when it takes the ledger.
pub(super) fn acquire_local(s: &mut SlotState, now: Instant) -> Option<Result<(), Short>> {
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
