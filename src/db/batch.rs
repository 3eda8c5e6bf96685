//! The queue of requests waiting for a shared read of their tenant's epoch. The database
//! handle owns it (every clone of a [`super::Db`] shares one); [`crate::epochs`] runs the reads
//! that drain it, so `db` no longer names `epochs` (which names `db`).

use std::sync::{Mutex, atomic::AtomicU64};

use chrono::{DateTime, Utc};

use crate::{error::Result, ids::TenantId};

pub(crate) type Answer = Result<Option<(i64, DateTime<Utc>)>>;

/// Requests waiting for the next epoch read, and how many reads are running.
#[derive(Default)]
pub struct Batch {
    pub(crate) state: Mutex<BatchState>,
    /// Reads asked for, and statements that answered them (for `/metrics`).
    pub requests: AtomicU64,
    pub statements: AtomicU64,
}

#[derive(Default)]
pub(crate) struct BatchState {
    pub(crate) waiting: Vec<(TenantId, tokio::sync::oneshot::Sender<Answer>)>,
    pub(crate) rounds: usize,
}

impl std::fmt::Debug for Batch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("db::Batch")
    }
}

impl Batch {
    /// Reads under way (for tests: it returns to zero once every request is answered).
    pub fn running(&self) -> usize {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).rounds
    }
}
