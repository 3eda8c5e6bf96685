//! The copy ledger (issue 7 §4): every move that creates or relocates a copy of a workspace's
//! state (a fork, a snapshot export or restore, a carry to a new version) first records its
//! rows as `pending` under a lease, does its work, and confirms all of them in one transaction
//! with the workspace update — only if every row is still pending, unclaimed, inside its lease,
//! and the workspace's erasure epoch is still the one the move read. The recovery sweep
//! ([`sweep`]) of any replica claims rows whose lease has passed (a claimed row can never be
//! confirmed, so a late confirm loses with 412) and settles them.
//!
//! The schema (migration 13) keeps the invariants itself: `done` is terminal, a row never
//! returns to `pending`, and a claimed row stays claimed by its claimant.

pub mod cli;
pub mod http;
mod store;
pub mod sweep;

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::json;
use sqlx::PgConnection;
use uuid::Uuid;

use crate::{
    admin_log::{self, Audit, Entry},
    config::Config,
    db::{Db, Scope},
    error::{Error, Result},
    ids::{MoveId, TenantId, WorkspaceId},
};

/// What kind of move recorded a row (the `kind` column).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Fork,
    SnapshotExport,
    SnapshotRestore,
    Carry,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Fork => "fork",
            Kind::SnapshotExport => "snapshot_export",
            Kind::SnapshotRestore => "snapshot_restore",
            Kind::Carry => "carry",
        }
    }
}

/// A copy's role in its move.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Source,
    Destination,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Source => "source",
            Role::Destination => "destination",
        }
    }
}

/// Where a copy is: the live rows of a workspace (a fork's included) or a snapshot file.
pub fn workspace_ref(id: Uuid) -> String {
    format!("workspace:{id}")
}

pub fn snapshot_ref(file: &str) -> String {
    format!("snapshot:{file}")
}

/// One move: its id, kind, the workspace whose state it copies, and its rows.
#[derive(Clone, Debug)]
pub struct Move {
    pub id: Uuid,
    pub kind: Kind,
    pub workspace: Uuid,
    pub rows: Vec<(String, Role)>,
}

/// What [`record`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Recorded {
    /// The rows are pending; the move read this erasure epoch.
    Recorded { epoch: i64 },
    /// The workspace's reap is claimed: no move may start.
    Reaping,
    /// No such workspace in this tenant.
    Missing,
}

impl Recorded {
    /// The epoch read, or the typed refusal.
    pub fn epoch(self) -> Result<i64> {
        match self {
            Recorded::Recorded { epoch } => Ok(epoch),
            Recorded::Reaping => Err(Error::Precondition {
                code: "workspace_reaping",
                message: "the workspace is being reaped; no copy of it can be made".into(),
            }),
            Recorded::Missing => Err(Error::NotFound { what: "workspace" }),
        }
    }
}

/// What becomes of a move's sources when it confirms: `eligible` (the sweep wipes them: the
/// state moved) or `retained` (the state stays where it was: a fork or an export copies).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SourceOutcome {
    Eligible,
    Retained,
}

impl SourceOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            SourceOutcome::Eligible => "eligible",
            SourceOutcome::Retained => "retained",
        }
    }
}

/// One ledger row as the API shows it.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct Copy {
    pub move_id: MoveId,
    pub copy_ref: String,
    pub role: String,
    pub workspace_id: WorkspaceId,
    pub kind: String,
    pub state: String,
    pub epoch_read: i64,
    pub lease_until: DateTime<Utc>,
    pub lease_owner: Option<String>,
    pub created_at: DateTime<Utc>,
    pub settled_at: Option<DateTime<Utc>>,
}

/// Records a move's rows as pending (lease `lease_ms` on the database clock), only if the
/// workspace exists and no reap is claimed; one serializable transaction with its admin-log row.
pub async fn record(db: &Db, tenant: TenantId, audit: &Audit, lease_ms: u64, mv: &Move) -> Result<Recorded> {
    db.serializable(Scope::Tenant(tenant), move |conn, _| Box::pin(record_in(conn, tenant, audit, lease_ms, mv))).await
}

/// [`record`] inside the caller's transaction.
pub async fn record_in(conn: &mut PgConnection, tenant: TenantId, audit: &Audit, lease_ms: u64, mv: &Move) -> Result<Recorded> {
    // FOR SHARE: a reap claim or an erasure on this workspace waits for this transaction, so
    // it sees these rows pending (and refuses) or this move sees its claim (and refuses).
    let Some((epoch, reaping)) = store::workspace_gate(&mut *conn, tenant, mv.workspace).await? else {
        return Ok(Recorded::Missing);
    };
    if reaping {
        return Ok(Recorded::Reaping);
    }
    for (copy_ref, role) in &mv.rows {
        store::insert(&mut *conn, tenant, mv, copy_ref, *role, epoch, lease_ms).await?;
    }
    let rows: Vec<_> = mv.rows.iter().map(|(r, role)| json!({ "copy_ref": r, "role": role.as_str() })).collect();
    let entry = Entry {
        tenant: Some(tenant),
        audit,
        action: "copy.record",
        target: format!("move:{}", mv.id),
        before: None,
        after: Some(
            json!({ "kind": mv.kind.as_str(), "workspace_id": mv.workspace, "rows": rows, "epoch_read": epoch, "lease_ms": lease_ms }),
        ),
    };
    admin_log::record(conn, entry).await?;
    Ok(Recorded::Recorded { epoch })
}

fn lease_lost() -> Error {
    Error::Precondition {
        code: "copy_lease_lost",
        message: "the move's lease passed and the recovery sweep claimed it; start the move again".into(),
    }
}

/// Checks, inside a move's intermediate transaction, that the move still holds every row
/// (pending, unclaimed, inside its lease) and locks them, so the sweep cannot claim them while
/// this transaction writes the copy. Anything else answers 412 `copy_lease_lost`.
pub async fn hold(conn: &mut PgConnection, tenant: TenantId, move_id: Uuid) -> Result<()> {
    let (total, held) = store::lock_move(conn, tenant, move_id).await?;
    if total == 0 || held != total { Err(lease_lost()) } else { Ok(()) }
}

/// Confirms a move inside its final transaction (the caller's, together with the workspace
/// update): every row must still be pending, unclaimed, inside its lease, and the workspace's
/// erasure epoch the one read. Destinations become `done`, sources `sources`. Otherwise 412
/// `copy_lease_lost` or `erasure_epoch_changed`, and the caller's transaction writes nothing.
pub async fn confirm(
    conn: &mut PgConnection,
    tenant: TenantId,
    audit: &Audit,
    move_id: Uuid,
    sources: SourceOutcome,
) -> Result<()> {
    let (total, held) = store::lock_move(&mut *conn, tenant, move_id).await?;
    if total == 0 || held != total {
        return Err(lease_lost());
    }
    if !store::epoch_unchanged(&mut *conn, tenant, move_id).await? {
        return Err(Error::Precondition {
            code: "erasure_epoch_changed",
            message: "a subject erasure ran since this move read the workspace; start the move again".into(),
        });
    }
    let settled = store::confirm(&mut *conn, tenant, move_id, sources.as_str()).await?;
    if settled != total {
        return Err(lease_lost());
    }
    let entry = Entry {
        tenant: Some(tenant),
        audit,
        action: "copy.confirm",
        target: format!("move:{move_id}"),
        before: Some(json!({ "state": "pending" })),
        after: Some(json!({ "rows": settled, "destinations": "done", "sources": sources.as_str() })),
    };
    admin_log::record(conn, entry).await
}

/// A tenant's ledger rows, newest first, optionally of one workspace (by id).
pub async fn list(db: &Db, tenant: TenantId, workspace: Option<Uuid>) -> Result<Vec<Copy>> {
    db.single_decision(Scope::Tenant(tenant), move |conn, _| Box::pin(store::list(conn, tenant, workspace))).await
}

/// A test-only crash point: aborts the process when `GATEHOUSE_FAULT` names `point`
/// (configuration refuses the variable in production).
pub fn fault(config: &Config, point: &str) {
    if config.copies.fault.as_deref() == Some(point) {
        eprintln!("GATEHOUSE_FAULT: aborting at {point}");
        std::process::abort();
    }
}

/// This process's name as a claimant of expired leases: host, pid and a random suffix.
pub fn replica_id() -> &'static str {
    static ID: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    ID.get_or_init(|| {
        let host = std::fs::read_to_string("/etc/hostname").map(|h| h.trim().to_owned()).unwrap_or_default();
        let suffix = Uuid::new_v4().simple().to_string();
        format!("{}:{}:{}", if host.is_empty() { "replica" } else { &host }, std::process::id(), &suffix[..8])
    })
}

/// What other nouns may run inside their own transaction; the store itself is private.
pub mod tx {
    pub use super::store::{close_ref, pending_for};
}
