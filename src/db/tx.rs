//! The one transaction helper every multi-statement decision runs through
//! ([`Db::serializable`], [`Db::single_decision`]): BEGIN with the scope in one round trip,
//! retries on serialization failures and lost connections before COMMIT, never after it.
//! Each entry point is `#[track_caller]`: a database error the transaction ends with is logged
//! once, naming the caller's `file:line` (see [`super::report`]).

use std::{
    future::Future,
    marker::PhantomData,
    sync::{Arc, Mutex, PoisonError},
    time::Duration,
};

use futures::future::BoxFuture;
use rand::Rng;
use sqlx::{Executor, PgConnection};

use super::{
    Borrow, Db, Isolation, MAX_ATTEMPTS, Scope, idempotency, loss_backoff, loss_retry_fits, replica,
    report::{self, Operation},
};
use crate::{
    config::Pooler,
    error::{Error, Result},
};

impl Db {
    /// Runs `work` in one `SERIALIZABLE` transaction with `scope` applied, retrying on
    /// serialization failures (40001) and deadlocks (40P01) with jittered exponential
    /// backoff. Anything `work` returns as `Err` rolls the transaction back.
    #[track_caller]
    pub fn serializable<'a, T, F>(&self, scope: Scope, work: F) -> impl Future<Output = Result<T>>
    where
        F: for<'c> FnMut(&'c mut PgConnection, Borrow<'c, 'a>) -> BoxFuture<'c, Result<T>> + Send + 'a,
        T: Send + 'a,
    {
        let operation = Operation::caller();
        async move { self.run(Shape::Transaction(scope, Isolation::Serializable), work, operation).await.map(|(value, _)| value) }
    }

    /// [`Db::serializable`], also returning how many attempts it took.
    #[track_caller]
    pub fn serializable_counted<'a, T, F>(&self, scope: Scope, work: F) -> impl Future<Output = Result<(T, u32)>>
    where
        F: for<'c> FnMut(&'c mut PgConnection, Borrow<'c, 'a>) -> BoxFuture<'c, Result<T>> + Send + 'a,
        T: Send + 'a,
    {
        let operation = Operation::caller();
        async move { self.run(Shape::Transaction(scope, Isolation::Serializable), work, operation).await }
    }

    /// The same helper at READ COMMITTED, for transactions whose only decision is one
    /// conditional statement (a compare-and-set `UPDATE … WHERE … RETURNING`, or a
    /// `DELETE … RETURNING`), whose outcome PostgreSQL re-checks on the latest row version
    /// under the row lock. Serializable would add only false conflicts between unrelated rows
    /// that share an index page. Anything that reads and then decides uses [`Db::serializable`].
    #[track_caller]
    pub fn single_decision<'a, T, F>(&self, scope: Scope, work: F) -> impl Future<Output = Result<T>>
    where
        F: for<'c> FnMut(&'c mut PgConnection, Borrow<'c, 'a>) -> BoxFuture<'c, Result<T>> + Send + 'a,
        T: Send + 'a,
    {
        let operation = Operation::caller();
        async move { self.run(Shape::Transaction(scope, Isolation::ReadCommitted), work, operation).await.map(|(value, _)| value) }
    }

    /// A single decision written as one autocommitted statement that takes its own
    /// transaction-local scope first (a database function such as `gatehouse_kv_cas`): one
    /// round trip instead of three. Retried like a transaction on a conflict, a read-only node
    /// or a connection lost before the statement was sent; a connection lost after it was sent
    /// answers 503 `database_commit_unknown`, as a lost COMMIT does. Such a statement must
    /// move no tenant epoch (nothing waits for replicas after it). Callers check
    /// [`Db::one_statement_fits`] first and run their transaction form otherwise.
    #[track_caller]
    pub fn one_statement<'a, T, F>(&self, work: F) -> impl Future<Output = Result<T>>
    where
        F: for<'c> FnMut(&'c mut PgConnection, Borrow<'c, 'a>) -> BoxFuture<'c, Result<T>> + Send + 'a,
        T: Send + 'a,
    {
        let operation = Operation::caller();
        async move { self.run(Shape::Statement, work, operation).await.map(|(value, _)| value) }
    }

    /// Whether a decision for `scope` may run through [`Db::one_statement`]: not behind a
    /// transaction pooler (the statement's prepare and its execution could land on different
    /// server sessions), and not when the request's Idempotency-Key is to be claimed, which
    /// takes a statement of the same transaction.
    pub fn one_statement_fits(&self, scope: Scope) -> bool {
        self.pooler == Pooler::Session && !idempotency::armed_for(scope)
    }

    /// Runs `work` through [`Db::run_erased`], which sees it with its answer's type erased: the
    /// answer waits in a slot until the transaction has committed. The retry, commit and
    /// acknowledgement code is then compiled once, not once for each of the hundreds of
    /// callers (5.5 MB of the release binary's code before; see docs/benchmarks.md).
    async fn run<'a, T, F>(&self, shape: Shape, mut work: F, operation: Operation) -> Result<(T, u32)>
    where
        F: for<'c> FnMut(&'c mut PgConnection, Borrow<'c, 'a>) -> BoxFuture<'c, Result<T>> + Send + 'a,
        T: Send + 'a,
    {
        let slot: Arc<Mutex<Option<T>>> = Arc::new(Mutex::new(None));
        let answer = slot.clone();
        let erased: &mut ErasedWork<'_, 'a> = &mut move |conn, borrow| {
            let value = work(conn, borrow);
            let slot = slot.clone();
            Box::pin(async move {
                let value = value.await?;
                *slot.lock().unwrap_or_else(PoisonError::into_inner) = Some(value);
                Ok(())
            })
        };
        let attempts = self.run_erased(shape, erased, operation).await?;
        let value = answer.lock().unwrap_or_else(PoisonError::into_inner).take();
        let value = value.ok_or_else(|| Error::Internal(anyhow::anyhow!("a committed transaction left no answer")))?;
        Ok((value, attempts))
    }

    #[tracing::instrument(name = "run", skip_all, fields(attempts))]
    async fn run_erased<'a>(&self, shape: Shape, work: &mut ErasedWork<'_, 'a>, operation: Operation) -> Result<u32> {
        let mut attempt = 1;
        let started = std::time::Instant::now();
        loop {
            match self.attempt(shape, &mut *work).await {
                Ok(()) => {
                    tracing::Span::current().record("attempts", attempt);
                    if attempt > 1 {
                        tracing::debug!(retries = attempt - 1, "serializable transaction retried");
                    }
                    return Ok(attempt);
                }
                Err(Failed::BeforeCommit(e)) if e.is_retryable_conflict() && attempt < MAX_ATTEMPTS => {
                    let cap_ms = (2u64 << attempt.min(7)).min(250);
                    let sleep_ms = rand::rng().random_range(1..=cap_ms);
                    tracing::debug!(
                        attempt,
                        sleep_ms,
                        sqlstate = e.sqlstate().unwrap_or_default(),
                        "serialization conflict, retrying"
                    );
                    tokio::time::sleep(Duration::from_millis(sleep_ms)).await;
                    attempt += 1;
                }
                Err(Failed::BeforeCommit(e)) if e.is_retryable_conflict() => {
                    tracing::warn!(attempts = attempt, "serializable transaction gave up after repeated conflicts");
                    return Err(Error::Unavailable {
                        code: "contention",
                        message: "too much contention on this object; retry shortly".into(),
                        retry_after_ms: Some(100),
                    });
                }
                // Nothing was committed (the COMMIT was never sent), so running the whole
                // transaction again on a fresh connection is as safe as after a conflict: a
                // restart, failover or read-only node (25006) costs a short wait, not an error.
                Err(Failed::BeforeCommit(e))
                    if e.is_connection_loss() && loss_retry_fits(started, loss_backoff(attempt)) && attempt < MAX_ATTEMPTS =>
                {
                    tracing::debug!(
                        attempt,
                        sqlstate = e.sqlstate().unwrap_or_default(),
                        "connection lost before COMMIT, retrying"
                    );
                    tokio::time::sleep(loss_backoff(attempt)).await;
                    attempt += 1;
                }
                Err(Failed::BeforeCommit(e) | Failed::AtCommit(e)) => {
                    report::ended(operation, &e);
                    return Err(e);
                }
            }
        }
    }

    async fn attempt<'a>(&self, shape: Shape, work: &mut ErasedWork<'_, 'a>) -> Result<(), Failed> {
        let attempted = match shape {
            Shape::Transaction(scope, isolation) => self.attempt_once(scope, isolation, work).await,
            Shape::Statement => self.attempt_statement(work).await,
        };
        attempted.inspect_err(|failed| {
            let (Failed::BeforeCommit(e) | Failed::AtCommit(e)) = failed;
            self.saw(e);
        })
    }

    async fn attempt_once<'a>(&self, scope: Scope, isolation: Isolation, work: &mut ErasedWork<'_, 'a>) -> Result<(), Failed> {
        let before = Failed::BeforeCommit;
        // The role is set for the transaction too (a no-op where the session already has
        // it), so no transaction depends on session state.
        let begin = match (isolation, self.pooler) {
            (Isolation::Serializable, Pooler::Session) => "BEGIN ISOLATION LEVEL SERIALIZABLE; SET LOCAL ROLE gatehouse_app",
            (Isolation::ReadCommitted, Pooler::Session) => "BEGIN ISOLATION LEVEL READ COMMITTED; SET LOCAL ROLE gatehouse_app",
            (Isolation::Serializable, Pooler::Transaction) => BEGIN_SERIALIZABLE_POOLED,
            (Isolation::ReadCommitted, Pooler::Transaction) => BEGIN_READ_COMMITTED_POOLED,
        };
        // The transaction is ours to end (not sqlx's), so its COMMIT can share a round trip
        // with reading which epochs it moved. Should this future be dropped or fail halfway,
        // the guard closes the connection instead of returning it mid-transaction.
        let mut open = OpenTx(Some(self.pool.acquire().await.map_err(|e| before(e.into()))?));
        let conn = open.conn().map_err(before)?;
        // The scope rides in the BEGIN's round trip (one simple-protocol message).
        conn.execute(sqlx::AssertSqlSafe(begin_scoped(begin, scope))).await.map_err(|e| before(e.into()))?;
        if let Err(e) = work(conn, PhantomData).await {
            if conn.execute("ROLLBACK").await.is_ok() {
                open.finish();
            }
            return Err(before(e));
        }
        // A mutating API call's Idempotency-Key is recorded by the transaction that wrote.
        if let Err(e) = idempotency::claim(conn, scope).await {
            if conn.execute("ROLLBACK").await.is_ok() {
                open.finish();
            }
            return Err(before(e));
        }
        // One simple-protocol message: the note the epoch trigger left (see the `replicas`
        // migration), then COMMIT. The note is transaction-local, so it is gone afterwards.
        let rows = match conn.fetch_all(COMMIT_NOTING_EPOCHS).await {
            Ok(rows) => rows,
            Err(e) => {
                let e = Error::from(e);
                if !e.is_connection_loss() {
                    // The server answered: the transaction did not commit (a serialization
                    // failure found at COMMIT is retried like any other).
                    idempotency::rolled_back();
                    return Err(before(e));
                }
                idempotency::commit_unknown();
                // The COMMIT was sent and no answer came: it may or may not have committed,
                // so this is never retried here (the client may, with an Idempotency-Key).
                self.saw(&e);
                tracing::warn!(error = %e, "connection lost during COMMIT; outcome unknown");
                return Err(Failed::AtCommit(commit_unknown()));
            }
        };
        open.finish();
        idempotency::committed();
        let noted: Option<String> = match rows.first() {
            Some(row) => sqlx::Row::try_get(row, 0).map_err(|e| Failed::AtCommit(e.into()))?,
            None => None,
        };
        let moved = replica::parse_notes(noted.as_deref().unwrap_or(""));
        // Committed: whatever moved an epoch returns only once every live replica applied it.
        replica::wait_for_acks(self, &moved, self.ack_wait).await.map_err(Failed::AtCommit)?;
        Ok(())
    }

    /// One autocommitted statement on a pooled connection. An error the server answered with
    /// rolled the statement back (nothing was saved), so it may run again; a connection lost
    /// after the statement was sent leaves the outcome unknown.
    async fn attempt_statement<'a>(&self, work: &mut ErasedWork<'_, 'a>) -> Result<(), Failed> {
        // Not from the pool, which would ping the connection on its way back: one round trip
        // per decision instead of two. Dropped halfway, this future drops the connection too.
        let (mut conn, opened, _permit) = self.statement_connection().await.map_err(Failed::BeforeCommit)?;
        match work(&mut conn, PhantomData).await {
            Ok(()) => {
                self.give_back_statement_connection(conn, opened);
                Ok(())
            }
            Err(e) if e.is_connection_loss() && e.sqlstate().as_deref() != Some(READ_ONLY) => {
                // The connection is dropped (closed) with this arm.
                self.saw(&e);
                tracing::warn!(error = %e, "connection lost during an autocommitted statement; outcome unknown");
                Err(Failed::AtCommit(commit_unknown()))
            }
            // The server refused the statement and ended its implicit transaction: the
            // connection is in a clean state. A connection lost on a read-only node is not kept.
            Err(e) => {
                if !e.is_connection_loss() {
                    self.give_back_statement_connection(conn, opened);
                }
                Err(Failed::BeforeCommit(e))
            }
        }
    }
}

/// A transaction's work as [`Db::run_erased`] sees it: what it answers is left in a slot of
/// [`Db::run`]'s, so one compiled copy of the helper serves every caller.
type ErasedWork<'w, 'a> = dyn for<'c> FnMut(&'c mut PgConnection, Borrow<'c, 'a>) -> BoxFuture<'c, Result<()>> + Send + 'w;

/// A write reached a read-only node: refused, so nothing was saved.
const READ_ONLY: &str = "25006";

/// The answer when a commit was sent and no answer came.
fn commit_unknown() -> Error {
    Error::Unavailable {
        code: "database_commit_unknown",
        message: "the database connection was lost during commit: the change may or may not have been saved; retry \
                  with the same Idempotency-Key to find out"
            .into(),
        retry_after_ms: Some(500),
    }
}

/// What one attempt runs: a transaction this helper begins and commits, or one autocommitted
/// statement that carries its own scope.
#[derive(Clone, Copy)]
enum Shape {
    Transaction(Scope, Isolation),
    Statement,
}

/// How a transaction attempt failed: before its COMMIT was sent (nothing was saved, so it may
/// run again), or at or after it (it may have been saved: never run again).
enum Failed {
    BeforeCommit(Error),
    AtCommit(Error),
}

/// How a transaction begins behind a transaction pooler, in one round trip: its isolation,
/// the application role for this transaction only, and `DEALLOCATE ALL`. The server session
/// may have served another client's transaction before, with statements prepared under names
/// this connection's own counter will reach too (and, as statements are not cached here,
/// never reuses): dropping them first keeps the names unique.
const BEGIN_SERIALIZABLE_POOLED: &str = "BEGIN ISOLATION LEVEL SERIALIZABLE; SET LOCAL ROLE gatehouse_app; DEALLOCATE ALL";
pub(super) const BEGIN_READ_COMMITTED_POOLED: &str =
    "BEGIN ISOLATION LEVEL READ COMMITTED; SET LOCAL ROLE gatehouse_app; DEALLOCATE ALL";

/// Reads the epochs the transaction moved and commits, in one round trip.
const COMMIT_NOTING_EPOCHS: &str = "SELECT current_setting('gatehouse.bumped', true); COMMIT";

/// A pooled connection inside a transaction this helper began. Unless [`OpenTx::finish`] ran
/// (COMMIT or ROLLBACK answered), dropping it closes the connection: a transaction left open,
/// or in an unknown state, never goes back to the pool.
pub(super) struct OpenTx(pub(super) Option<sqlx::pool::PoolConnection<sqlx::Postgres>>);

impl OpenTx {
    pub(super) fn conn(&mut self) -> Result<&mut PgConnection> {
        self.0.as_deref_mut().ok_or_else(|| Error::Internal(anyhow::anyhow!("the transaction's connection is gone")))
    }

    pub(super) fn finish(&mut self) {
        drop(self.0.take());
    }
}

impl Drop for OpenTx {
    fn drop(&mut self) {
        if let Some(conn) = &mut self.0 {
            conn.close_on_drop();
        }
    }
}

/// The BEGIN message with the transaction-local tenant (or platform) context appended, so a
/// transaction's scope costs no round trip of its own. The one value spliced into the text is
/// a [`TenantId`]'s UUID, whose text form is hexadecimal digits and hyphens only (formatted by
/// the `uuid` crate, never taken from a request as text), so nothing can be injected.
fn begin_scoped(begin: &str, scope: Scope) -> String {
    match scope {
        Scope::Tenant(tenant) => {
            format!("{begin}; SELECT set_config('gatehouse.tenant_id', '{}', true)", tenant.0.as_hyphenated())
        }
        Scope::Platform { reason } => {
            tracing::debug!(reason, "platform context");
            format!("{begin}; SELECT set_config('gatehouse.platform', 'on', true)")
        }
        Scope::Global => begin.to_owned(),
    }
}
