//! Pools of downstream MCP sessions (`deadpool::managed`), one per (connector configuration,
//! credential owner and version) and replica, at most `max_sessions_per_pool` sessions each
//! and `max_pools` pools per replica (the least recently used is closed past it).
//!
//! Two ways to use a pool. A request the downstream may answer with requests of its own to
//! the agent (sampling, elicitation, roots: the agent declared it can be asked) holds a
//! session for itself while it runs ([`Lease::Own`]), so such calls never open more sessions
//! than the pool's bound. Every other request shares the pool's most recently handed-out
//! session ([`Lease::Shared`]) without checking it out: a streamable HTTP session is
//! concurrent, and this is the hot path of a plain `tools/call`, as cheap as the single shared
//! session it replaces (a map lookup and a reference count).
//!
//! A session checked out of the pool is recycled with a liveness check: one that answered
//! within `trust_ms` is handed out as it is, any other must answer a `ping` within
//! `ping_timeout_ms`, else it is dropped and a new one opened. A dropped session is deleted at
//! the downstream (HTTP DELETE with its `Mcp-Session-Id`), and so are the sessions of a pool
//! closed because its configuration or credential was replaced.

use std::{
    sync::{
        Arc, Weak,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use deadpool::managed::{self, Metrics, Object, PoolError, RecycleError, RecycleResult};

use super::{Failure, session::Session};
use crate::{config::SessionsConfig, gateway::credentials::Credential, maps::FastMap, workspaces::Connector};

/// A pooled session and what its liveness check needs.
pub(super) struct Live {
    pub session: Session,
    /// Milliseconds after `born` of the last answer on the session.
    answered_ms: AtomicU64,
    born: Instant,
    /// Set when the server forgot the session or it broke: never handed out again.
    dead: AtomicBool,
}

impl Live {
    fn new(session: Session) -> Live {
        Live { session, answered_ms: AtomicU64::new(0), born: Instant::now(), dead: AtomicBool::new(false) }
    }

    /// The server answered on the session (a result or a JSON-RPC error): it is alive.
    pub fn answered(&self) {
        self.answered_ms.store(self.born.elapsed().as_millis() as u64, Ordering::Relaxed);
    }

    fn quiet_for(&self) -> Duration {
        self.born.elapsed().saturating_sub(Duration::from_millis(self.answered_ms.load(Ordering::Relaxed)))
    }

    /// Never hand this session out again (the pool drops it at its next checkout).
    pub fn kill(&self) {
        self.dead.store(true, Ordering::Relaxed);
    }

    fn usable(&self) -> bool {
        !self.dead.load(Ordering::Relaxed) && !self.session.is_closed()
    }
}

impl Drop for Live {
    /// The last holder of a session is done with it (the pool dropped it, or was closed).
    fn drop(&mut self) {
        if let Session::Http(s) = &self.session {
            s.close();
        }
    }
}

/// Opens and checks the sessions of one (connector configuration, credential).
pub(super) struct Manager {
    http: Option<crate::gateway::outbound::Outbound>,
    connector: Connector,
    credential: Option<Credential>,
    trust: Duration,
    ping: Duration,
}

impl managed::Manager for Manager {
    type Type = Arc<Live>;
    type Error = Failure;

    /// `initialize`, then `notifications/initialized`, under the connector's deadline.
    async fn create(&self) -> Result<Arc<Live>, Failure> {
        let http = self.http.clone().ok_or_else(|| Failure::Unavailable("no HTTP client".into()))?;
        let session = super::session::connect(http, &self.connector, self.credential.as_ref()).await?;
        if let Session::Http(s) = &session {
            s.listen_for_asks();
        }
        let live = Live::new(session);
        live.answered();
        Ok(Arc::new(live))
    }

    async fn recycle(&self, live: &mut Arc<Live>, _: &Metrics) -> RecycleResult<Failure> {
        if !live.usable() {
            return Err(RecycleError::message("the session broke or the server forgot it"));
        }
        if live.quiet_for() < self.trust {
            return Ok(());
        }
        match tokio::time::timeout(self.ping, live.session.ping()).await {
            Ok(true) => {
                live.answered();
                Ok(())
            }
            Ok(false) | Err(_) => {
                live.kill();
                Err(RecycleError::message("the session did not answer a ping"))
            }
        }
    }
}

type Pool = managed::Pool<Manager>;

/// A session for one request.
pub(super) enum Lease {
    /// Checked out of the pool for this request alone; back in the pool when dropped.
    Own(Object<Manager>),
    /// The pool's shared session, used concurrently by other requests.
    Shared(Arc<Live>),
}

impl std::ops::Deref for Lease {
    type Target = Live;
    fn deref(&self) -> &Live {
        match self {
            Lease::Own(object) => object,
            Lease::Shared(live) => live,
        }
    }
}

impl Lease {
    /// The session must not be used again: out of the pool now (deleted at the downstream
    /// once no request uses it).
    pub fn discard(self) {
        self.kill();
        if let Lease::Own(object) = self {
            drop(Object::take(object));
        }
    }
}

struct Entry {
    pool: Pool,
    /// The session requests that need none of their own share, while anyone holds it.
    shared: Weak<Live>,
    used: Instant,
}

impl Entry {
    fn close(self) {
        self.pool.close();
    }
}

/// Every pool of this replica, by [`pool_key`].
pub(super) struct Pools {
    config: SessionsConfig,
    entries: std::sync::Mutex<FastMap<String, Entry>>,
}

impl Default for Pools {
    fn default() -> Self {
        Pools::new(SessionsConfig::default())
    }
}

impl Pools {
    pub fn new(config: SessionsConfig) -> Pools {
        Pools { config, entries: Default::default() }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, FastMap<String, Entry>> {
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A session of the connector's configuration `key` for `credential`; `own`: checked out
    /// for this request alone (waiting while the pool is at its bound). A live shared session
    /// is had without waiting; only a checkout (the first call, or `own`) awaits the pool, in a
    /// box: the pool's wait holds a session's opening, which is kilobytes that every call's
    /// future would otherwise carry and copy.
    pub async fn lease(
        &self,
        http: Option<&crate::gateway::outbound::Outbound>,
        key: &str,
        connector: &Connector,
        credential: Option<&Credential>,
        own: bool,
    ) -> Result<Lease, Failure> {
        let name = pool_key(key, credential);
        match self.live_or_pool(&name, http, connector, credential, own)? {
            Ok(live) => Ok(live),
            Err(pool) => Box::pin(self.checkout(pool, name, own)).await,
        }
    }

    /// The live shared session under `name` (`Ok`), or the pool to check one out of (`Err`),
    /// opened when there is none.
    fn live_or_pool(
        &self,
        name: &str,
        http: Option<&crate::gateway::outbound::Outbound>,
        connector: &Connector,
        credential: Option<&Credential>,
        own: bool,
    ) -> Result<Result<Lease, Pool>, Failure> {
        let mut entries = self.lock();
        Ok(match entries.get_mut(name) {
            Some(entry) => {
                entry.used = Instant::now();
                if !own
                    && let Some(live) = entry.shared.upgrade()
                    && live.usable()
                {
                    return Ok(Ok(Lease::Shared(live)));
                }
                Err(entry.pool.clone())
            }
            None => Err(self.open(&mut entries, name.to_owned(), http, connector, credential)?),
        })
    }

    /// A session checked out of `pool` (waiting while it is at its bound, opening one where
    /// it has room); shared ones are remembered under `name` for the next request.
    async fn checkout(&self, pool: Pool, name: String, own: bool) -> Result<Lease, Failure> {
        let object = pool.get().await.map_err(|e| match e {
            PoolError::Backend(failure) => failure,
            PoolError::Closed => Failure::Unavailable("the connector's configuration changed during the request".into()),
            PoolError::Timeout(_) | PoolError::NoRuntimeSpecified | PoolError::PostCreateHook(_) => {
                Failure::Unavailable("no downstream session could be had".into())
            }
        })?;
        if own {
            return Ok(Lease::Own(object));
        }
        let live = Arc::clone(&object);
        drop(object);
        if let Some(entry) = self.lock().get_mut(&name) {
            entry.shared = Arc::downgrade(&live);
        }
        Ok(Lease::Shared(live))
    }

    /// A new pool under `name`. Past the bound, the least recently used pool is closed; the
    /// pools of the owner's older credential versions are closed too (never used again).
    fn open(
        &self,
        entries: &mut FastMap<String, Entry>,
        name: String,
        http: Option<&crate::gateway::outbound::Outbound>,
        connector: &Connector,
        credential: Option<&Credential>,
    ) -> Result<Pool, Failure> {
        if let Some((config, tag)) = name.split_once('#') {
            let owner = tag.split('@').next().unwrap_or_default();
            let stale = format!("{config}#{owner}@");
            let old: Vec<String> = entries.keys().filter(|k| k.starts_with(&stale)).cloned().collect();
            for k in old {
                if let Some(entry) = entries.remove(&k) {
                    entry.close();
                }
            }
        }
        while entries.len() >= self.config.max_pools {
            let Some(oldest) = entries.iter().min_by_key(|(_, e)| e.used).map(|(k, _)| k.clone()) else { break };
            if let Some(entry) = entries.remove(&oldest) {
                entry.close();
            }
        }
        let manager = Manager {
            http: http.cloned(),
            connector: connector.clone(),
            credential: credential.cloned(),
            trust: Duration::from_millis(self.config.trust_ms),
            ping: Duration::from_millis(self.config.ping_timeout_ms),
        };
        // No timeouts are configured (the request's own deadline bounds the wait), so the
        // builder needs no runtime and does not fail.
        let pool = Pool::builder(manager)
            .max_size(self.config.max_sessions_per_pool)
            .build()
            .map_err(|e| Failure::Unavailable(super::cap(&e.to_string())))?;
        entries.insert(name, Entry { pool: pool.clone(), shared: Weak::new(), used: Instant::now() });
        Ok(pool)
    }

    /// Closes the pools of the workspace's connectors whose configuration is not one of
    /// `current` (configuration keys, [`super::key`]): the workspace's configuration changed.
    pub fn retire(&self, tenant: uuid::Uuid, workspace: uuid::Uuid, current: &[&str]) {
        let prefix = format!("{tenant}/{workspace}/");
        let mut entries = self.lock();
        let old: Vec<String> = entries
            .keys()
            .filter(|k| k.starts_with(&prefix) && !current.contains(&k.split('#').next().unwrap_or_default()))
            .cloned()
            .collect();
        for k in old {
            if let Some(entry) = entries.remove(&k) {
                entry.close();
            }
        }
    }

    /// Sessions open in every pool of this replica.
    pub fn count(&self) -> usize {
        self.lock().values().map(|e| e.pool.status().size).sum()
    }
}

/// A pool's key: the configuration key, then the credential's owner and version tag.
pub(super) fn pool_key(key: &str, credential: Option<&Credential>) -> String {
    match credential {
        Some(c) => format!("{key}#{}", c.tag),
        None => key.to_owned(),
    }
}
