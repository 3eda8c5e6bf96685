//! The database: the application pool, the tenant context, and the one serializable helper
//! every multi-statement decision runs through.

pub mod batch;
pub mod embedded;
pub mod idempotency;
pub mod migrate;
pub mod replica;
mod report;
mod tx;

use std::{future::Future, marker::PhantomData, time::Duration};

use report::Operation;
use tx::{BEGIN_READ_COMMITTED_POOLED, OpenTx};

use futures::future::BoxFuture;
use rand::Rng;
use sqlx::{
    Executor, PgConnection, PgPool,
    postgres::{PgConnectOptions, PgPoolOptions},
};

use crate::{
    config::{Pooler, Secret},
    error::{Error, Result},
    ids::TenantId,
};

/// The role every request runs as. It owns no table and cannot bypass row-level security;
/// migrations create it (see `migrations/`), and each pooled connection switches to it.
pub const APP_ROLE: &str = "gatehouse_app";

/// Most attempts a serializable transaction gets before the caller sees `contention`.
const MAX_ATTEMPTS: u32 = 12;

/// How long work that met a lost connection before anything was committed (a transaction
/// before its COMMIT, an idempotent read) keeps being retried, with backoff, on fresh
/// connections: long enough to ride out a pooler's or proxy's reconnect, short against the
/// request deadline (`GATEHOUSE_REQUEST_TIMEOUT_MS`, 60 s by default).
const LOSS_RETRY_BUDGET: Duration = Duration::from_secs(3);

/// How long a readiness probe waits for the database (see [`Db::probe`]): under the 2 s
/// `timeoutSeconds` of `deploy/base/deployment.yaml`, past which the kubelet has given up on
/// the probe anyway, and long enough for a fresh connection on a busy replica.
const PROBE_WAIT: Duration = Duration::from_millis(1500);

/// The pause before retry `attempt` (1-based) after a lost connection: 25 ms doubling,
/// at most 400 ms, jittered.
fn loss_backoff(attempt: u32) -> Duration {
    let cap_ms = (25u64 << attempt.min(4)).min(400);
    Duration::from_millis(rand::rng().random_range(cap_ms / 2..=cap_ms))
}

/// Whether another retry after a lost connection fits in [`LOSS_RETRY_BUDGET`].
fn loss_retry_fits(started: std::time::Instant, pause: Duration) -> bool {
    started.elapsed() + pause < LOSS_RETRY_BUDGET
}

/// Whose rows a transaction may see.
#[derive(Clone, Copy, Debug)]
pub enum Scope {
    /// One tenant's rows, enforced by row-level security on `gatehouse.tenant_id`.
    Tenant(TenantId),
    /// Platform-wide work (provisioning, sweeps, reports). Every use names why, and the
    /// reason is logged, so nothing reaches across tenants by accident.
    Platform { reason: &'static str },
    /// No tenant at all: only tables that are not tenant-owned (sign-in flows, sessions)
    /// are visible.
    Global,
}

#[derive(Clone, Copy, Debug)]
enum Isolation {
    Serializable,
    ReadCommitted,
}

/// The application's connection pool. Every connection runs as [`APP_ROLE`].
#[derive(Clone, Debug)]
pub struct Db {
    pool: PgPool,
    /// When this replica last saw a connection die (see [`Losses`]).
    losses: std::sync::Arc<Losses>,
    lanes: std::sync::Arc<Lanes>,
    statements: std::sync::Arc<Statements>,
    /// Requests waiting for a shared read of their tenant's epoch (see [`crate::epochs`]).
    epoch_batch: std::sync::Arc<batch::Batch>,
    /// This process's place in the replica registry and the epochs it applied.
    replica: std::sync::Arc<replica::Replica>,
    /// How long a transaction that moved an epoch waits for the replicas' acknowledgements.
    ack_wait: Duration,
    pooler: Pooler,
    /// Where a session of its own is opened (the replica's `LISTEN`): `GATEHOUSE_MIGRATE_URL`
    /// behind a transaction pooler, else the pool's own server.
    session: std::sync::Arc<PgConnectOptions>,
}

/// Dedicated connections for the one-statement reads every request makes (the tenant epoch):
/// sqlx's pool tests a connection with a ping round trip each time it is returned, which would
/// double the database work of the hot path.
#[derive(Debug, Default)]
struct Lanes {
    /// Each lane's connection, with when it was opened (on [`Losses`]' clock).
    conns: Vec<tokio::sync::Mutex<Option<(PgConnection, u64)>>>,
    next: std::sync::atomic::AtomicUsize,
}

/// Hot-path lanes per replica.
const LANES: usize = 4;

/// Connections for autocommitted one-statement decisions ([`Db::one_statement`]), kept
/// outside sqlx's pool: the pool pings every connection that comes back to it, which is a
/// second round trip for a decision that is one statement. A connection goes back to `idle`
/// only after its statement was answered, so one whose statement was cancelled halfway (its
/// future dropped) is closed, never reused; one opened before the latest loss is closed when
/// it is next taken.
#[derive(Debug)]
struct Statements {
    /// Each idle connection, with when it was opened (on [`Losses`]' clock).
    idle: std::sync::Mutex<Vec<(PgConnection, u64)>>,
    /// One permit per connection in use or idle: at most half the pool's size again.
    room: tokio::sync::Semaphore,
}

/// When a connection last died, so the pool can drop every connection opened before then at
/// its next use instead of failing one request per dead connection. sqlx cannot evict idle
/// connections, and pinging each one before use costs a round trip per query; this check is
/// one atomic load per acquire. After a database restart or failover every pooled connection
/// is dead at once, so the first failure condemns them all, and readiness and requests see the
/// database again as soon as a fresh connection can be opened.
#[derive(Debug)]
struct Losses {
    base: std::time::Instant,
    /// Nanoseconds after `base` of the latest loss (0: none seen).
    last_ns: std::sync::atomic::AtomicU64,
}

impl Losses {
    fn new() -> Self {
        Losses { base: std::time::Instant::now(), last_ns: Default::default() }
    }

    fn now_ns(&self) -> u64 {
        u64::try_from(self.base.elapsed().as_nanos()).unwrap_or(u64::MAX).max(1)
    }

    fn record(&self) {
        self.last_ns.fetch_max(self.now_ns(), std::sync::atomic::Ordering::Relaxed);
    }

    /// Whether a connection of this age was opened before the latest loss.
    fn predates_loss(&self, age: Duration) -> bool {
        self.opened_before_loss(self.now_ns().saturating_sub(u64::try_from(age.as_nanos()).unwrap_or(u64::MAX)))
    }

    /// Whether a connection opened at `opened` (see [`Losses::now_ns`]) predates the latest loss.
    fn opened_before_loss(&self, opened: u64) -> bool {
        let last = self.last_ns.load(std::sync::atomic::Ordering::Relaxed);
        last != 0 && opened <= last
    }
}

/// Marks, in a closure's signature, that the closure's future may borrow data of lifetime
/// `'a` for as long as the connection borrow `'c` lasts (`&'c &'a ()` implies `'a: 'c`).
pub type Borrow<'c, 'a> = PhantomData<&'c &'a ()>;

impl Db {
    /// Connects the application pool. Whatever role `url` names (owner, superuser), each
    /// connection switches to [`APP_ROLE`] before it is used, so row-level security holds.
    pub async fn connect(url: &Secret, max_connections: u32) -> Result<Self> {
        Self::connect_through(url, max_connections, Pooler::Session, None).await
    }

    /// [`Db::connect`] through `pooler`; `session_url` (a direct URL, for what needs a session
    /// of its own) defaults to `url`.
    pub async fn connect_through(
        url: &Secret,
        max_connections: u32,
        pooler: Pooler,
        session_url: Option<&Secret>,
    ) -> Result<Self> {
        let parse = |url: &Secret, var: &str| {
            url.expose()
                .parse::<PgConnectOptions>()
                .map(|o| o.application_name("gatehouse"))
                .map_err(|_| Error::invalid("invalid_database_url", None, format!("{var} is not a valid PostgreSQL URL")))
        };
        let mut options = parse(url, "DATABASE_URL")?;
        let session = match session_url {
            Some(direct) => parse(direct, "GATEHOUSE_MIGRATE_URL")?,
            None => options.clone(),
        };
        if pooler == Pooler::Transaction {
            // A cached statement would be named on a server session this connection may never
            // see again; uncached ones are prepared in the transaction that runs them.
            options = options.statement_cache_capacity(0);
        }
        let losses = std::sync::Arc::new(Losses::new());
        let judge = losses.clone();
        let pool = PgPoolOptions::new()
            .max_connections(max_connections)
            .min_connections(1)
            .acquire_timeout(Duration::from_secs(10))
            // No ping before every use: it is a round trip per query. A connection the server
            // dropped fails its next query (answered 503 `database_unavailable`) and is closed.
            .test_before_acquire(false)
            // A connection opened before the latest loss is closed instead of used.
            .before_acquire(move |_conn, meta| {
                let stale = judge.predates_loss(meta.age);
                Box::pin(async move { Ok(!stale) })
            })
            .after_connect(move |conn, _meta| {
                Box::pin(async move {
                    // Behind a transaction pooler a session setting would stay on a server
                    // session other clients get next; each transaction sets the role instead.
                    if pooler == Pooler::Session {
                        // Spelled out: SQL must be a static string. Keep in step with APP_ROLE.
                        conn.execute("SET ROLE gatehouse_app").await?;
                    }
                    Ok(())
                })
            })
            .connect_with(options)
            .await?;
        let lanes = Lanes { conns: (0..LANES).map(|_| tokio::sync::Mutex::new(None)).collect(), next: Default::default() };
        let room = usize::try_from(max_connections / 2).unwrap_or(1).max(1);
        let statements = Statements { idle: Default::default(), room: tokio::sync::Semaphore::new(room) };
        Ok(Db {
            pool,
            losses,
            lanes: std::sync::Arc::new(lanes),
            statements: std::sync::Arc::new(statements),
            epoch_batch: Default::default(),
            replica: Default::default(),
            ack_wait: Duration::from_millis(crate::config::ReplicaConfig::default().ack_wait_ms),
            pooler,
            session: std::sync::Arc::new(session),
        })
    }

    /// How the pool reaches the server.
    pub fn pooler(&self) -> Pooler {
        self.pooler
    }

    /// Options for a connection that needs a server session of its own (`LISTEN`): never
    /// through a transaction pooler.
    pub fn session_options(&self) -> PgConnectOptions {
        (*self.session).clone()
    }

    /// Runs `work`, an idempotent read, outside any transaction helper: on a pooled
    /// connection as it is, or, behind a transaction pooler (where a statement outside a
    /// transaction is not pinned to one server session), inside a transaction of its own.
    /// A read that meets a lost connection runs again on a fresh one, with backoff, for up to
    /// [`LOSS_RETRY_BUDGET`]. A database error it ends with is logged with the caller's
    /// `file:line` (see [`report`]).
    #[track_caller]
    pub fn read<'a, T, F>(&self, mut work: F) -> impl Future<Output = Result<T>>
    where
        F: for<'c> FnMut(&'c mut PgConnection, Borrow<'c, 'a>) -> BoxFuture<'c, Result<T>> + 'a,
    {
        let operation = Operation::caller();
        async move {
            let started = std::time::Instant::now();
            let mut attempt = 1;
            loop {
                match self.read_once(&mut work).await {
                    Err(e) if e.is_connection_loss() && loss_retry_fits(started, loss_backoff(attempt)) => {
                        tracing::debug!(attempt, "read met a lost connection; retrying on a fresh one");
                        tokio::time::sleep(loss_backoff(attempt)).await;
                        attempt += 1;
                    }
                    outcome => return outcome.inspect_err(|e| report::ended(operation, e)),
                }
            }
        }
    }

    /// [`Db::read`] for a readiness probe: one attempt, and an answer within
    /// [`PROBE_WAIT`] whatever the database does. A probe must say "not ready" promptly while
    /// the database is gone, and must not still be sleeping in a retry's backoff (or the
    /// pool's reconnect backoff) when it comes back: the next probe then sees it at once.
    #[track_caller]
    pub fn probe<'a, T, F>(&self, mut work: F) -> impl Future<Output = Result<T>>
    where
        F: for<'c> FnMut(&'c mut PgConnection, Borrow<'c, 'a>) -> BoxFuture<'c, Result<T>> + 'a,
    {
        let operation = Operation::caller();
        async move {
            match tokio::time::timeout(PROBE_WAIT, self.read_once(&mut work)).await {
                Ok(outcome) => outcome.inspect_err(|e| report::ended(operation, e)),
                Err(_) => Err(Error::Unavailable {
                    code: "database_unavailable",
                    message: format!("the database did not answer within {} ms", PROBE_WAIT.as_millis()),
                    retry_after_ms: None,
                }),
            }
        }
    }

    async fn read_once<'a, T, F>(&self, work: &mut F) -> Result<T>
    where
        F: for<'c> FnMut(&'c mut PgConnection, Borrow<'c, 'a>) -> BoxFuture<'c, Result<T>> + 'a,
    {
        let mut conn = self.noted(self.pool.acquire().await)?;
        match self.pooler {
            Pooler::Session => self.noted(work(&mut conn, PhantomData).await),
            Pooler::Transaction => {
                // Dropped mid-way, the connection closes rather than return mid-transaction.
                let mut open = OpenTx(Some(conn));
                let conn = open.conn()?;
                self.noted(conn.execute(BEGIN_READ_COMMITTED_POOLED).await)?;
                let value = self.noted(work(&mut *conn, PhantomData).await)?;
                self.noted(conn.execute("COMMIT").await)?;
                open.finish();
                Ok(value)
            }
        }
    }

    /// The same handle, with changes that move an epoch waiting at most `ack_wait` for the
    /// replicas' acknowledgements (`GATEHOUSE_REPLICA_ACK_WAIT_MS`).
    pub fn with_ack_wait(mut self, ack_wait: Duration) -> Self {
        self.ack_wait = ack_wait;
        self
    }

    /// This process's place in the replica registry (see [`replica`]).
    pub fn replica(&self) -> &replica::Replica {
        &self.replica
    }

    /// Runs one autocommit read on a dedicated lane connection (opened on first use, as
    /// [`APP_ROLE`], and dropped after any error so the next use reconnects). For statements
    /// every request makes; everything else uses the pool. `work` must be an idempotent read:
    /// one that meets a lost connection runs once more, at once, on a fresh one (the loss
    /// condemned every connection opened before it), so a database restart costs the hot path
    /// no failed request. A database error it ends with is logged with the caller's
    /// `file:line` (see [`report`]).
    #[track_caller]
    pub fn on_lane<T, F>(&self, work: F) -> impl Future<Output = Result<T>>
    where
        F: for<'c> FnMut(&'c mut PgConnection) -> BoxFuture<'c, Result<T>>,
    {
        let operation = Operation::caller();
        async move { self.lane(work).await.inspect_err(|e| report::ended(operation, e)) }
    }

    /// A connection of this replica's own, outside the pool, as [`APP_ROLE`] (in a session
    /// pool), with when it was opened.
    async fn own_connection(&self) -> Result<(PgConnection, u64)> {
        let opened = self.losses.now_ns();
        let connected = <PgConnection as sqlx::Connection>::connect_with(&*self.pool.connect_options()).await;
        let mut conn = self.noted(connected)?;
        if self.pooler == Pooler::Session {
            self.noted(conn.execute("SET ROLE gatehouse_app").await)?;
        }
        Ok((conn, opened))
    }

    /// An idle statement connection not opened before the latest loss, else a new one; with
    /// the permit it holds until it is [given back](Db::give_back_statement_connection) or
    /// dropped.
    async fn statement_connection(&self) -> Result<(PgConnection, u64, tokio::sync::SemaphorePermit<'_>)> {
        let permit = self.statements.room.acquire().await.map_err(|e| Error::Internal(e.into()))?;
        loop {
            let kept = self.statements.idle.lock().unwrap_or_else(std::sync::PoisonError::into_inner).pop();
            match kept {
                Some((_, opened)) if self.losses.opened_before_loss(opened) => continue,
                Some((conn, opened)) => return Ok((conn, opened, permit)),
                None => {
                    let (conn, opened) = self.own_connection().await?;
                    return Ok((conn, opened, permit));
                }
            }
        }
    }

    /// Keeps a statement connection whose statement was answered for the next one, unless
    /// the replica is [closing](Db::close).
    fn give_back_statement_connection(&self, conn: PgConnection, opened: u64) {
        if !self.statements.room.is_closed() {
            self.statements.idle.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push((conn, opened));
        }
    }

    async fn lane<T, F>(&self, mut work: F) -> Result<T>
    where
        F: for<'c> FnMut(&'c mut PgConnection) -> BoxFuture<'c, Result<T>>,
    {
        use std::sync::atomic::Ordering;
        let i = self.lanes.next.fetch_add(1, Ordering::Relaxed) % self.lanes.conns.len().max(1);
        let Some(lane) = self.lanes.conns.get(i) else { return Err(Error::Internal(anyhow::anyhow!("no lanes"))) };
        let mut slot = lane.lock().await;
        let mut retried = false;
        loop {
            if slot.as_ref().is_some_and(|(_, opened)| self.losses.opened_before_loss(*opened)) {
                *slot = None;
            }
            let conn = match &mut *slot {
                Some((conn, _)) => conn,
                empty => &mut empty.insert(self.own_connection().await?).0,
            };
            let result = match self.pooler {
                Pooler::Session => work(conn).await,
                // An error drops the lane's connection (below), so a transaction left open
                // never outlives it.
                Pooler::Transaction => match conn.execute(BEGIN_READ_COMMITTED_POOLED).await {
                    Ok(_) => match work(conn).await {
                        Ok(value) => conn.execute("COMMIT").await.map(|_| value).map_err(Error::from),
                        Err(e) => Err(e),
                    },
                    Err(e) => Err(e.into()),
                },
            };
            if let Err(e) = &result {
                *slot = None;
                self.saw(e);
                if e.is_connection_loss() && !retried {
                    retried = true;
                    continue;
                }
            }
            return result;
        }
    }

    /// Requests waiting for shared epoch reads, and the counters of those reads.
    pub fn epoch_batch(&self) -> &batch::Batch {
        &self.epoch_batch
    }

    /// The raw pool, for health checks and tests. Whoever uses it directly reports its errors
    /// through [`Db::saw`].
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// Closes the pool and this replica's idle statement connections, each with a goodbye to
    /// its server; a statement connection in use is closed when its statement ends, and no
    /// new one is opened.
    pub async fn close(&self) {
        self.statements.room.close();
        self.pool.close().await;
        let idle = std::mem::take(&mut *self.statements.idle.lock().unwrap_or_else(std::sync::PoisonError::into_inner));
        for (conn, _) in idle {
            let _ = sqlx::Connection::close(conn).await;
        }
    }

    /// Takes note of a database error: a lost connection condemns every pooled connection
    /// opened before it (they are closed at their next acquire, not used).
    pub fn saw(&self, e: &Error) {
        if e.is_connection_loss() {
            self.losses.record();
        }
    }

    /// An outcome with its error noted (see [`Db::saw`]): for work run on [`Db::pool`] or a
    /// lane directly.
    pub fn noted<T, E: Into<Error>>(&self, outcome: std::result::Result<T, E>) -> Result<T> {
        outcome.map_err(|e| {
            let e = e.into();
            self.saw(&e);
            e
        })
    }
}

/// A column that is NOT NULL in its table but read from the outer side of a join (so the
/// query macros type it `Option`), once its row is known to be there: a NULL is the decode
/// error reading it as required always gave, never a default.
pub fn required<T>(value: Option<T>, column: &str) -> Result<T> {
    value.ok_or_else(|| {
        sqlx::Error::ColumnDecode { index: format!("{column:?}"), source: Box::new(sqlx::error::UnexpectedNullError) }.into()
    })
}
