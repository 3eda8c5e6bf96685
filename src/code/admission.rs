//! Admission of programs on one replica: at most `running` at once and `queued` waiting (for
//! at most `queue_timeout`), and a per-tenant share of both, so one tenant can never hold
//! every slot or fill the queue. A refusal is immediate when the queue is full.

use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use uuid::Uuid;

use crate::config::CodeConfig;

/// How long a refused caller should wait before trying again.
pub const RETRY_AFTER_MS: u64 = 1_000;

#[derive(Debug)]
struct Tenant {
    running: Arc<Semaphore>,
    queued: AtomicUsize,
}

#[derive(Debug)]
pub struct Admission {
    running: Arc<Semaphore>,
    queued: AtomicUsize,
    max_queued: usize,
    tenant_running: usize,
    tenant_queued: usize,
    queue_timeout: Duration,
    tenants: Mutex<HashMap<Uuid, Arc<Tenant>>>,
}

/// A running slot, the tenant's and the replica's; freed when dropped.
#[derive(Debug)]
pub struct Slot {
    _tenant: OwnedSemaphorePermit,
    _replica: OwnedSemaphorePermit,
}

/// Why a program was not admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The replica's queue, or the tenant's share of it, is full.
    QueueFull,
    /// No slot freed up within the queue timeout.
    Timeout,
}

/// Counts one waiter while it waits.
struct Waiting<'a>(&'a AtomicUsize, &'a AtomicUsize);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
        self.1.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Admission {
    pub fn new(config: &CodeConfig) -> Admission {
        Admission {
            running: Arc::new(Semaphore::new(config.running)),
            queued: AtomicUsize::new(0),
            max_queued: config.queued,
            tenant_running: config.tenant_running,
            tenant_queued: config.tenant_queued,
            queue_timeout: Duration::from_millis(config.queue_timeout_ms),
            tenants: Mutex::default(),
        }
    }

    fn tenant(&self, id: Uuid) -> Arc<Tenant> {
        let mut tenants = self.tenants.lock().unwrap_or_else(|p| p.into_inner());
        tenants
            .entry(id)
            .or_insert_with(|| {
                Arc::new(Tenant { running: Arc::new(Semaphore::new(self.tenant_running)), queued: AtomicUsize::new(0) })
            })
            .clone()
    }

    /// A slot for one of `tenant`'s programs, waiting in the queue if need be.
    pub async fn admit(&self, tenant: Uuid) -> Result<Slot, Refusal> {
        let share = self.tenant(tenant);
        if let Ok(own) = share.running.clone().try_acquire_owned() {
            if let Ok(replica) = self.running.clone().try_acquire_owned() {
                return Ok(Slot { _tenant: own, _replica: replica });
            }
            drop(own);
        }
        // Reserve a place in both queues, or refuse at once.
        if share.queued.fetch_add(1, Ordering::SeqCst) >= self.tenant_queued {
            share.queued.fetch_sub(1, Ordering::SeqCst);
            return Err(Refusal::QueueFull);
        }
        if self.queued.fetch_add(1, Ordering::SeqCst) >= self.max_queued {
            self.queued.fetch_sub(1, Ordering::SeqCst);
            share.queued.fetch_sub(1, Ordering::SeqCst);
            return Err(Refusal::QueueFull);
        }
        let _waiting = Waiting(&self.queued, &share.queued);
        // The tenant's own slot first: a tenant over its share waits behind itself, not in
        // front of other tenants for the replica's slots.
        let wait = async {
            let own = share.running.clone().acquire_owned().await.ok()?;
            let replica = self.running.clone().acquire_owned().await.ok()?;
            Some(Slot { _tenant: own, _replica: replica })
        };
        match tokio::time::timeout(self.queue_timeout, wait).await {
            Ok(Some(slot)) => Ok(slot),
            _ => Err(Refusal::Timeout),
        }
    }

    /// Programs waiting for a slot on this replica.
    pub fn waiting(&self) -> usize {
        self.queued.load(Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn admission(running: usize, queued: usize, tenant_running: usize, tenant_queued: usize) -> Admission {
        Admission::new(&CodeConfig {
            running,
            queued,
            tenant_running,
            tenant_queued,
            queue_timeout_ms: 200,
            ..Default::default()
        })
    }

    async fn until_waiting(a: &Admission, n: usize) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while a.waiting() != n {
            assert!(tokio::time::Instant::now() < deadline, "never {n} waiting");
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test]
    async fn one_tenant_cannot_take_every_slot_or_the_whole_queue() {
        let a = Arc::new(admission(2, 8, 1, 4));
        let (t1, t2) = (Uuid::new_v4(), Uuid::new_v4());
        let _first = a.admit(t1).await.unwrap();
        // t1's next programs wait (its share is one running), so t2 still gets the other slot.
        let waiting: Vec<_> = (0..4)
            .map(|_| {
                let a = a.clone();
                tokio::spawn(async move { a.admit(t1).await.map(|_| ()) })
            })
            .collect();
        until_waiting(&a, 4).await;
        let other = a.admit(t2).await;
        assert!(other.is_ok(), "another tenant is served while the first waits");
        assert_eq!(a.admit(t1).await.unwrap_err(), Refusal::QueueFull, "the tenant's share of the queue is full");
        let results = futures::future::join_all(waiting).await;
        assert!(results.iter().all(|r| r.as_ref().unwrap().as_ref().unwrap_err() == &Refusal::Timeout), "{results:?}");
    }

    #[tokio::test]
    async fn a_freed_slot_goes_to_a_waiter_and_the_queue_is_bounded() {
        let a = Arc::new(admission(1, 1, 1, 1));
        let t = Uuid::new_v4();
        let first = a.admit(t).await.unwrap();
        let a2 = a.clone();
        let waiter = tokio::spawn(async move { a2.admit(t).await.map(|_| ()) });
        until_waiting(&a, 1).await;
        assert_eq!(a.admit(Uuid::new_v4()).await.unwrap_err(), Refusal::QueueFull, "the replica's queue holds one");
        drop(first);
        assert!(waiter.await.unwrap().is_ok());
        assert!(a.admit(t).await.is_ok(), "every slot and place is given back");
    }
}
