//! The recovery sweep: every replica, at start and then every `GATEHOUSE_COPY_SWEEP_MS`, claims
//! pending copy rows whose lease has passed (a move that crashed or stalled), settles them —
//! an orphaned destination is wiped and `done`, a source `retained` — retries the wipes of
//! `eligible` rows, and deletes expired unpinned forks. Claims are conditional updates with
//! `FOR UPDATE SKIP LOCKED`, and each settle locks its row and moves it by compare-and-set in
//! one transaction with its admin-log row, so every row is settled exactly once however many
//! replicas sweep at the same time.

use std::{path::Path, time::Duration};

use serde_json::json;
use sqlx::PgConnection;
use uuid::Uuid;

use super::store::{self, Claimed};
use crate::{
    AppState,
    admin_log::{self, Audit, Entry},
    config::Config,
    db::{Db, Scope},
    error::Result,
    ids::TenantId,
};

/// Rows one pass claims, settles or wipes at most (per step).
pub const BATCH: i64 = 100;
/// A claim whose claimant has not settled it this long after the lease ended is taken over by
/// any replica (the claimant died between its claim and its settle).
pub const ABANDONED_SECS: f64 = 300.0;

const SCOPE: Scope = Scope::Platform { reason: "copy ledger recovery sweep" };

/// What one pass did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Swept {
    pub claimed: u64,
    pub wiped: u64,
    pub retained: u64,
    pub eligible_wiped: u64,
    pub forks_expired: u64,
}

/// Sweeps now and then every `sweep_every_ms`, until the task is dropped.
pub async fn run(state: AppState) {
    let mut tick = tokio::time::interval(Duration::from_millis(state.config.copies.sweep_every_ms));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        match once(&state.db, &state.config).await {
            Ok(s) if s != Swept::default() => tracing::info!(?s, "copy ledger sweep"),
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "copy ledger sweep failed"),
        }
    }
}

fn audit() -> Audit {
    Audit { actor: "system:copy_sweep".into(), request_id: None }
}

/// One bounded pass.
pub async fn once(db: &Db, config: &Config) -> Result<Swept> {
    let me = super::replica_id();
    let mut swept = Swept::default();
    let claimed = db.single_decision(SCOPE, |conn, _| Box::pin(store::claim_expired(conn, me, BATCH))).await?;
    swept.claimed = claimed.len() as u64;
    let due = db.single_decision(SCOPE, |conn, _| Box::pin(store::to_settle(conn, me, ABANDONED_SECS, BATCH))).await?;
    for row in &due {
        match settle_claimed(db, config, row).await? {
            Some("done") => swept.wiped += 1,
            Some(_) => swept.retained += 1,
            None => {}
        }
    }
    let eligible = db.single_decision(SCOPE, |conn, _| Box::pin(store::eligible(conn, BATCH))).await?;
    for row in &eligible {
        if settle_row(db, config, row, "eligible", "done").await? {
            swept.eligible_wiped += 1;
        }
    }
    swept.forks_expired = crate::forks::expire(db, config).await?;
    Ok(swept)
}

/// Settles one claimed pending row: a destination is wiped and `done`, a source `retained`.
/// `None` when another settler got there first.
async fn settle_claimed(db: &Db, config: &Config, row: &Claimed) -> Result<Option<&'static str>> {
    let to = if row.role == "destination" { "done" } else { "retained" };
    Ok(settle_row(db, config, row, "pending", to).await?.then_some(to))
}

/// Locks the row if it is still `from` (else leaves it to whoever holds it), wipes its copy
/// when it goes to `done`, and moves it to `to`, with its admin-log row, in one transaction.
async fn settle_row(db: &Db, config: &Config, row: &Claimed, from: &'static str, to: &'static str) -> Result<bool> {
    let audit = audit();
    let audit = &audit;
    db.serializable(Scope::Tenant(row.tenant), move |conn, _| {
        Box::pin(async move {
            if !store::lock_row(&mut *conn, row, from).await? {
                return Ok(false);
            }
            let wiped = if to == "done" {
                wipe(&mut *conn, config, row.tenant, row.workspace_id.0, &row.copy_ref).await?
            } else {
                "kept"
            };
            if !store::settle(&mut *conn, row, from, to).await? {
                return Ok(false);
            }
            let entry = Entry {
                tenant: Some(row.tenant),
                audit,
                action: "copy.settle",
                target: format!("move:{}", row.move_id),
                before: Some(json!({ "state": from })),
                after: Some(json!({
                    "copy_ref": row.copy_ref, "role": row.role, "kind": row.kind, "state": to, "wipe": wiped,
                    "workspace_id": row.workspace_id,
                })),
            };
            admin_log::record(conn, entry).await?;
            Ok(true)
        })
    })
    .await
}

/// Deletes a copy, idempotently: a fork or a workspace still `provisioning` (with its state),
/// or a snapshot file (and its temporary name). A workspace's own live rows, or any workspace
/// that is neither, are never deleted here: that is what a reap is for. What it did.
pub async fn wipe(
    conn: &mut PgConnection,
    config: &Config,
    tenant: TenantId,
    copied: Uuid,
    copy_ref: &str,
) -> Result<&'static str> {
    if let Some(id) = copy_ref.strip_prefix("workspace:") {
        let Ok(id) = id.parse::<Uuid>() else { return Ok("nothing") };
        if id == copied {
            return Ok("nothing");
        }
        return Ok(if crate::forks::tx::delete_disposable(conn, tenant, id).await? { "workspace_deleted" } else { "nothing" });
    }
    if let Some(file) = copy_ref.strip_prefix("snapshot:") {
        return Ok(if remove_snapshot(&config.copies.snapshot_dir, file)? { "file_removed" } else { "nothing" });
    }
    Ok("nothing")
}

/// Removes a snapshot file and its temporary name; whether anything was there.
pub fn remove_snapshot(dir: &Path, file: &str) -> Result<bool> {
    // copy_ref's CHECK allows only `[A-Za-z0-9._-]`; refuse anything that could leave the dir.
    if file.is_empty() || file.starts_with('.') || file.contains('/') {
        return Ok(false);
    }
    let mut removed = false;
    for name in [file.to_owned(), format!(".{file}.tmp")] {
        match std::fs::remove_file(dir.join(name)) {
            Ok(()) => removed = true,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(anyhow::anyhow!("cannot remove a snapshot file: {e}").into()),
        }
    }
    Ok(removed)
}

/// Gives up a move that failed before confirming: claims its rows now and settles them as the
/// sweep would (nothing written is kept). Errors are logged; the sweep settles what remains.
pub async fn abandon(db: &Db, config: &Config, tenant: TenantId, move_id: Uuid) {
    let me = super::replica_id();
    let claimed =
        db.single_decision(Scope::Tenant(tenant), |conn, _| Box::pin(store::claim_move(conn, tenant, move_id, me))).await;
    if let Err(e) = claimed {
        tracing::warn!(error = %e, %move_id, "cannot give up a failed move; the sweep will");
        return;
    }
    let rows = db.single_decision(SCOPE, |conn, _| Box::pin(store::to_settle(conn, me, ABANDONED_SECS, BATCH))).await;
    for row in rows.unwrap_or_default().iter().filter(|r| r.move_id.0 == move_id) {
        if let Err(e) = settle_claimed(db, config, row).await {
            tracing::warn!(error = %e, %move_id, "cannot settle a failed move; the sweep will");
        }
    }
}
