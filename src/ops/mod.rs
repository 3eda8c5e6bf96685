//! Operations: what the platform could not do. A failure is queued in memory by [`record`],
//! which never fails and never waits, and a background task per replica writes the queue in
//! batches: one statement inserts the evidence rows (`ops_failures`) and upserts one issue per
//! fingerprint (`ops_issues`), so counts stay exact however many tasks and replicas record at
//! once. Each batch also prunes old evidence (90 days) and old issues (180 days after their
//! last occurrence) in bounded, index-served deletes. Platform admins set verdicts on issues
//! (`gatehouse ops …`).

pub mod cli;
pub mod http;
mod store;

pub use store::{Issue, PRUNE_FAILURES, PRUNE_ISSUES};

use std::{
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use chrono::{DateTime, Utc};
use sha2::{Digest, Sha256};
use tokio::sync::{mpsc, oneshot};
use uuid::Uuid;

use crate::{
    admin_log::{self, Audit},
    db::{Db, Scope},
    error::{Error, Result},
};

/// Failures waiting to be written, per replica.
pub const QUEUE: usize = 8192;
/// Failures one write carries at most.
pub const BATCH: usize = 512;
/// Evidence is kept this long.
pub const FAILURE_RETENTION_DAYS: i32 = 90;
/// An issue is deleted this long after its last occurrence.
pub const ISSUE_RETENTION_DAYS: i32 = 180;
/// Rows one prune deletes at most, per table.
pub const PRUNE_BATCH: i64 = 1000;
/// A failure's message is cut to this many characters.
pub const MESSAGE_CAP: usize = 2000;

/// How a failed operation ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    /// It was attempted and did not work (unreachable, refused by the other side, lost).
    Failed,
    /// It ran out of time.
    TimedOut,
    /// The platform refused to do it (a safety check).
    Refused,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Failed => "failed",
            Status::TimedOut => "timed_out",
            Status::Refused => "refused",
        }
    }
}

/// One thing the platform could not do. The message must never carry a secret or a token:
/// pass text the platform produced (error codes, capped error text), never a downstream body.
#[derive(Clone, Debug)]
pub struct Failure {
    /// What was attempted, e.g. `downstream.call`, `activity.write`.
    pub operation: &'static str,
    /// Where in it, e.g. the connector kind.
    pub stage: String,
    /// `None` for platform failures.
    pub tenant: Option<Uuid>,
    pub workspace: Option<Uuid>,
    pub status: Status,
    /// Stable code, e.g. `unavailable`, `timeout`.
    pub code: String,
    /// Cut to [`MESSAGE_CAP`] characters when written.
    pub message: String,
    /// The request id, when there is one.
    pub reference: Option<String>,
}

/// SHA-256 (hex) of `operation|stage|code`: the issue a failure belongs to. Never the message,
/// so failures differing only in detail group together.
pub fn fingerprint(operation: &str, stage: &str, code: &str) -> String {
    hex::encode(Sha256::digest(format!("{operation}|{stage}|{code}")))
}

/// A failure as queued: stamped with its time, nothing computed yet (the writer hashes).
#[derive(Debug)]
pub struct Queued {
    pub failure: Failure,
    pub at: DateTime<Utc>,
}

/// What the writer is asked to do.
#[derive(Debug)]
pub enum Message {
    Record(Box<Queued>),
    /// Answer once everything queued before it is written (tests, shutdown).
    Flush(oneshot::Sender<()>),
}

/// What happened to recorded failures, for `/metrics`.
#[derive(Debug, Default)]
pub struct Counts {
    pub written: AtomicU64,
    /// Refused at once because the queue was full (the caller was not delayed).
    pub dropped: AtomicU64,
    /// Given up on after three failed writes.
    pub lost: AtomicU64,
}

/// The replica's failure queue. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Recorder {
    tx: mpsc::Sender<Message>,
    counts: Arc<Counts>,
}

impl Recorder {
    /// Starts the writer task; it stops after the last `Recorder` is dropped and the queue has
    /// been written.
    pub fn start(db: Db) -> (Recorder, tokio::task::JoinHandle<()>) {
        let (recorder, rx) = Recorder::channel(QUEUE);
        let handle = tokio::spawn(writer(db, rx, recorder.counts.clone()));
        (recorder, handle)
    }

    /// A recorder whose queue the caller drains itself (benchmarks, unit tests).
    pub fn channel(capacity: usize) -> (Recorder, mpsc::Receiver<Message>) {
        let (tx, rx) = mpsc::channel(capacity);
        (Recorder { tx, counts: Arc::default() }, rx)
    }

    /// Queues a failure without waiting; a full queue drops it and counts the drop.
    pub fn record(&self, failure: Failure) {
        let queued = Box::new(Queued { failure, at: Utc::now() });
        if self.tx.try_send(Message::Record(queued)).is_err() {
            let before = self.counts.dropped.fetch_add(1, Ordering::Relaxed);
            // One line per thousand drops: a full queue means a flood, and logging each drop
            // would make the flood worse.
            if before.is_multiple_of(1000) {
                tracing::warn!(dropped_total = before + 1, "ops failures dropped: queue full");
            }
        }
    }

    /// Waits until everything recorded before this call has been written (or given up on).
    pub async fn flush(&self) {
        let (tx, rx) = oneshot::channel();
        if self.tx.send(Message::Flush(tx)).await.is_ok() {
            let _ = rx.await;
        }
    }

    pub fn counts(&self) -> &Counts {
        &self.counts
    }

    /// Failures waiting to be written.
    pub fn queued(&self) -> usize {
        self.tx.max_capacity() - self.tx.capacity()
    }
}

/// Records a failure; never returns an error and never waits (see [`Recorder::record`]).
pub fn record(ops: &Recorder, failure: Failure) {
    ops.record(failure);
}

/// How long the writer lets a partial batch fill before writing it.
const LINGER: Duration = Duration::from_millis(50);

async fn writer(db: Db, mut rx: mpsc::Receiver<Message>, counts: Arc<Counts>) {
    let mut inbox = Vec::with_capacity(BATCH);
    let mut batch: Vec<store::Row> = Vec::with_capacity(BATCH);
    let mut waiting = Vec::new();
    while rx.recv_many(&mut inbox, BATCH).await > 0 {
        let flushing = |inbox: &Vec<Message>| inbox.iter().any(|m| matches!(m, Message::Flush(_)));
        if inbox.len() < BATCH && !flushing(&inbox) {
            let _ = tokio::time::timeout(LINGER, async {
                while inbox.len() < BATCH && !flushing(&inbox) {
                    let room = BATCH - inbox.len();
                    if rx.recv_many(&mut inbox, room).await == 0 {
                        break;
                    }
                }
            })
            .await;
        }
        for message in inbox.drain(..) {
            match message {
                Message::Record(q) => batch.push(store::Row::of(*q)),
                Message::Flush(done) => waiting.push(done),
            }
        }
        if !batch.is_empty() {
            write_batch(&db, &batch, &counts).await;
            batch.clear();
        }
        for done in waiting.drain(..) {
            let _ = done.send(());
        }
    }
}

async fn write_batch(db: &Db, batch: &[store::Row], counts: &Counts) {
    let mut attempt = 0;
    loop {
        let result = db
            .single_decision(Scope::Platform { reason: "ops failure writer" }, |conn, _| Box::pin(store::write(conn, batch)))
            .await;
        match result {
            Ok(()) => {
                counts.written.fetch_add(batch.len() as u64, Ordering::Relaxed);
                return;
            }
            Err(e) => {
                attempt += 1;
                tracing::warn!(error = %e, rows = batch.len(), attempt, "ops failure batch not written");
                if attempt >= 3 {
                    counts.lost.fetch_add(batch.len() as u64, Ordering::Relaxed);
                    return;
                }
                tokio::time::sleep(Duration::from_millis(200 * attempt)).await;
            }
        }
    }
}

/// A verdict a platform admin sets on an issue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Fixed (in `version`); a later occurrence makes it `regressed`.
    Resolve,
    /// Not worth attention; later occurrences are counted but it stays `ignored`.
    Ignore,
    /// Back to `new` (undoes resolve or ignore).
    Reopen,
}

impl Verdict {
    pub fn status(self) -> &'static str {
        match self {
            Verdict::Resolve => "resolved",
            Verdict::Ignore => "ignored",
            Verdict::Reopen => "new",
        }
    }
}

/// Issue statuses, for validating filters.
pub const STATUSES: [&str; 4] = ["new", "resolved", "ignored", "regressed"];

/// Sets a verdict on an issue and writes its admin-log row (platform action) in the same
/// transaction. Unknown fingerprint: `not_found`.
pub async fn set_verdict(
    db: &Db,
    audit: &Audit,
    fingerprint: &str,
    verdict: Verdict,
    version: Option<&str>,
) -> Result<store::Issue> {
    if verdict != Verdict::Resolve && version.is_some() {
        return Err(Error::invalid("version_without_resolve", Some("version"), "--version is only for resolve"));
    }
    db.serializable(Scope::Platform { reason: "ops issue verdict" }, |conn, _| {
        Box::pin(verdict_tx(conn, audit, fingerprint, verdict, version))
    })
    .await
}

async fn verdict_tx(
    conn: &mut sqlx::PgConnection,
    audit: &Audit,
    fingerprint: &str,
    verdict: Verdict,
    version: Option<&str>,
) -> Result<store::Issue> {
    let before = store::get(&mut *conn, fingerprint).await?.ok_or_else(|| Error::NotFound { what: "issue" })?;
    let after = store::set_status(&mut *conn, fingerprint, verdict.status(), version).await?;
    admin_log::record(
        &mut *conn,
        admin_log::Entry {
            tenant: None,
            audit,
            action: "ops.issue.set_status",
            target: fingerprint.to_owned(),
            before: Some(serde_json::json!({ "status": before.status })),
            after: Some(serde_json::json!({ "status": after.status, "resolved_version": after.resolved_version })),
        },
    )
    .await?;
    Ok(after)
}

/// Issues, most recently seen first, optionally of one status.
pub async fn issues(db: &Db, status: Option<&str>, limit: i64) -> Result<Vec<store::Issue>> {
    issues_page(db, status, None, limit).await
}

/// One keyset page of [`issues`]: those after `after`, the (last seen, fingerprint) of the
/// previous page's last issue.
pub async fn issues_page(
    db: &Db,
    status: Option<&str>,
    after: Option<(chrono::DateTime<chrono::Utc>, String)>,
    limit: i64,
) -> Result<Vec<store::Issue>> {
    if let Some(s) = status
        && !STATUSES.contains(&s)
    {
        return Err(Error::invalid("invalid_status", Some("status"), "status is new, resolved, ignored or regressed"));
    }
    db.single_decision(Scope::Platform { reason: "ops issue list" }, |conn, _| {
        let after = after.clone();
        Box::pin(store::list(conn, status, after, limit))
    })
    .await
}

/// What other nouns may run inside their own transaction; the store itself is private.
pub mod tx {
    pub use super::store::get;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failure() -> Failure {
        Failure {
            operation: "downstream.call",
            stage: "remote_mcp".into(),
            tenant: None,
            workspace: None,
            status: Status::Failed,
            code: "unavailable".into(),
            message: "x".into(),
            reference: None,
        }
    }

    #[test]
    fn a_full_queue_drops_and_counts_without_waiting() {
        let (recorder, _rx) = Recorder::channel(2);
        for _ in 0..5 {
            record(&recorder, failure());
        }
        assert_eq!(recorder.queued(), 2);
        assert_eq!(recorder.counts().dropped.load(Ordering::Relaxed), 3);
    }

    #[test]
    fn the_fingerprint_is_the_hash_of_operation_stage_and_code() {
        assert_eq!(fingerprint("a", "b", "c").len(), 64);
        // Known answer: sha256("downstream.call|remote_mcp|timeout").
        assert_eq!(
            fingerprint("downstream.call", "remote_mcp", "timeout"),
            hex::encode(Sha256::digest("downstream.call|remote_mcp|timeout"))
        );
        assert_ne!(fingerprint("a", "b", "c"), fingerprint("a", "b", "d"));
    }

    #[test]
    fn messages_are_cut_to_the_cap_in_characters() {
        let mut f = failure();
        f.message = "é".repeat(MESSAGE_CAP + 10);
        let row = store::Row::of(Queued { failure: f, at: Utc::now() });
        assert_eq!(row.message.chars().count(), MESSAGE_CAP);
    }
}
