//! Reap (issue 7 §6): `archived → reaped`, terminal. A reap first claims the workspace once
//! (`reap_claimed_at`, `reap_owner`), only from `archived`, with no copy pending and no
//! revocation owed (else 412 `reap_retry_later`); from then on no move records or binds. Its
//! final step is one transaction: the workspace's state is deleted in every copy not yet done,
//! those ledger rows settle to done, a tombstone is written, and the workspace row goes (the
//! slug is free again). A reap that crashed after its claim is finished by the next reap call
//! or by the sweep every replica runs, once the claim is older than [`GRACE_SECS`].

pub mod cli;
pub mod http;
mod store;

use std::{path::Path, sync::LazyLock, time::Duration};

use serde::Serialize;

use serde_json::json;
use uuid::Uuid;

use crate::{
    admin_log::{self, Audit, Entry},
    db::{Db, Scope},
    error::{Error, Result},
    ids::TenantId,
    workspaces::tables,
};

/// A claim older than this is presumed abandoned (its replica crashed): longer than a reap's
/// final transaction can take, retries included.
pub const GRACE_SECS: f64 = 120.0;
/// How often each replica looks for abandoned claims.
pub const EVERY: Duration = Duration::from_secs(15);
/// Abandoned claims one sweep pass finishes at most.
const BATCH: i64 = 20;

/// This process's name as a reap owner: unique per process, so a claim is never mistaken for
/// another replica's.
pub static REPLICA: LazyLock<String> = LazyLock::new(|| format!("replica:{}:{}", std::process::id(), Uuid::new_v4().simple()));

/// What a finished reap left behind.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct Tombstone {
    pub workspace_id: Uuid,
    pub slug: String,
    pub reaped_at: chrono::DateTime<chrono::Utc>,
    /// Rows deleted per table, and ledger rows settled.
    #[schema(value_type = Object)]
    pub deleted: serde_json::Map<String, serde_json::Value>,
}

fn retry_later(why: &str) -> Error {
    Error::Precondition { code: "reap_retry_later", message: format!("{why}; nothing was reaped, retry later") }
}

fn in_progress() -> Error {
    Error::Conflict { code: "reap_in_progress", message: "another reap of this workspace is in progress".into() }
}

/// Reaps the archived workspace `slug`, or finishes its abandoned reap. `snapshots` is the
/// snapshot directory: the files of the workspace's unsettled snapshot copies are removed.
pub async fn reap(db: &Db, snapshots: &Path, tenant: TenantId, audit: &Audit, slug: &str) -> Result<Tombstone> {
    let owner = REPLICA.as_str();
    let id = db
        .serializable(Scope::Tenant(tenant), move |conn, _| {
            Box::pin(async move {
                let s =
                    store::by_slug(&mut *conn, tenant, slug, GRACE_SECS).await?.ok_or(Error::NotFound { what: "workspace" })?;
                if s.claimed_at.is_some() {
                    // A claim exists: ours to finish only if it was abandoned.
                    if !s.stale || !take_over(&mut *conn, tenant, audit, s.id, owner).await? {
                        return Err(in_progress());
                    }
                    return Ok(s.id);
                }
                if s.status != "archived" {
                    return Err(Error::Conflict {
                        code: "invalid_transition",
                        message: format!("a {} workspace cannot be reaped; allowed from: archived", s.status),
                    });
                }
                if s.pending > 0 {
                    return Err(retry_later("a copy of this workspace is being made"));
                }
                if s.open_revocations > 0 {
                    return Err(retry_later("a token revocation is still owed to a provider"));
                }
                if !store::claim(&mut *conn, tenant, s.id, owner).await? {
                    return Err(retry_later("the workspace changed"));
                }
                let entry = Entry {
                    tenant: Some(tenant),
                    audit,
                    action: "workspace.reap_claim",
                    target: format!("workspace:{slug}"),
                    before: Some(json!({ "status": s.status })),
                    after: Some(json!({ "reap_owner": owner })),
                };
                admin_log::record(conn, entry).await?;
                Ok(s.id)
            })
        })
        .await?;
    finish(db, snapshots, tenant, audit, id, owner).await
}

/// The final transaction of a reap whose claim `owner` holds.
async fn finish(db: &Db, snapshots: &Path, tenant: TenantId, audit: &Audit, id: Uuid, owner: &str) -> Result<Tombstone> {
    db.serializable(Scope::Tenant(tenant), move |conn, _| {
        Box::pin(async move {
            let s = store::by_id(&mut *conn, tenant, id, GRACE_SECS).await?.ok_or(Error::NotFound { what: "workspace" })?;
            if s.owner.as_deref() != Some(owner) {
                return Err(in_progress());
            }
            if s.pending > 0 || s.open_revocations > 0 {
                // Cannot happen once claimed (moves check the claim); left for the sweep.
                return Err(retry_later("a copy or a revocation is still pending"));
            }
            let unsettled = store::unsettled(&mut *conn, tenant, id).await?;
            let mut deleted = tables::delete_state(&mut *conn, tenant, &[id], true).await?;
            // Copies of this workspace's state in other workspaces not yet settled (a
            // destination the recovery sweep has not wiped yet) lose that state too.
            let others: Vec<Uuid> = unsettled
                .iter()
                .filter_map(|(r, _)| r.strip_prefix("workspace:").and_then(|u| Uuid::parse_str(u).ok()))
                .filter(|other| *other != id)
                .collect();
            if !others.is_empty() {
                let more = tables::delete_state(&mut *conn, tenant, &others, false).await?;
                deleted.insert("other_copies".into(), serde_json::Value::Object(more));
            }
            // Snapshot files of this workspace not yet settled go before their rows are settled.
            // Removing is idempotent, so a retried or failed transaction only finds less to
            // remove; a file removed by a transaction that then fails is a wipe done early.
            let mut files = 0;
            for file in unsettled.iter().filter_map(|(r, _)| r.strip_prefix("snapshot:")) {
                files += u64::from(crate::copies::sweep::remove_snapshot(snapshots, file)?);
            }
            deleted.insert("snapshot_files".into(), json!(files));
            let settled = store::settle(&mut *conn, tenant, id).await?;
            deleted.insert("copies_settled".into(), json!(settled));
            deleted.insert(
                "peer_bindings_invalidated".into(),
                json!(store::invalidate_peer_bindings(&mut *conn, tenant, id).await?),
            );
            let reaped_at = store::tombstone(&mut *conn, tenant, id, &s.slug, &audit.actor).await?;
            if !store::delete_workspace(&mut *conn, tenant, id, owner).await? {
                return Err(in_progress());
            }
            admin_log::record(
                conn,
                Entry {
                    tenant: Some(tenant),
                    audit,
                    action: "workspace.reap",
                    target: format!("workspace:{}", s.slug),
                    before: Some(json!({ "status": s.status, "id": id })),
                    after: Some(json!({ "status": "reaped", "deleted": deleted })),
                },
            )
            .await?;
            Ok(Tombstone { workspace_id: id, slug: s.slug, reaped_at, deleted })
        })
    })
    .await
}

/// Takes over an abandoned claim (older than the grace period), once, with its admin-log row.
async fn take_over(conn: &mut sqlx::PgConnection, tenant: TenantId, audit: &Audit, id: Uuid, owner: &str) -> Result<bool> {
    if !store::take_over(&mut *conn, tenant, id, owner, GRACE_SECS).await? {
        return Ok(false);
    }
    let entry = Entry {
        tenant: Some(tenant),
        audit,
        action: "workspace.reap_resume",
        target: format!("workspace_id:{id}"),
        before: None,
        after: Some(json!({ "reap_owner": owner })),
    };
    admin_log::record(conn, entry).await?;
    Ok(true)
}

/// Finishes abandoned reaps (claims older than the grace period), a bounded batch.
pub async fn sweep_once(db: &Db, snapshots: &Path) -> Result<usize> {
    let scope = Scope::Platform { reason: "reap sweep" };
    let stale = db.single_decision(scope, |conn, _| Box::pin(store::stale_claims(conn, GRACE_SECS, BATCH))).await?;
    let audit = Audit { actor: "system:reap_sweep".into(), request_id: None };
    let owner = REPLICA.as_str();
    let mut finished = 0;
    for (tenant, id) in stale {
        let tenant = TenantId(tenant);
        let audit = &audit;
        let taken =
            db.serializable(Scope::Tenant(tenant), move |conn, _| Box::pin(take_over(conn, tenant, audit, id, owner))).await?;
        if !taken {
            continue; // another replica took it first
        }
        match finish(db, snapshots, tenant, audit, id, owner).await {
            Ok(_) => finished += 1,
            Err(e) => tracing::warn!(error = %e, tenant = %tenant.0, workspace = %id, "reap sweep could not finish a reap"),
        }
    }
    Ok(finished)
}

/// Sweeps now and then every [`EVERY`], until the task is dropped.
pub async fn run(db: Db, snapshots: std::path::PathBuf) {
    let mut tick = tokio::time::interval(EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        match sweep_once(&db, &snapshots).await {
            Ok(0) => {}
            Ok(n) => tracing::info!(finished = n, "reap sweep"),
            Err(e) => tracing::warn!(error = %e, "reap sweep failed"),
        }
    }
}
