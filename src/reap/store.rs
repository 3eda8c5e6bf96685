//! Reap SQL: the claim, and the deletions of the final transaction.

use sqlx::PgConnection;
use uuid::Uuid;

use crate::{error::Result, ids::TenantId};

/// What the claim decides on.
#[derive(Debug, Clone)]
pub struct State {
    pub id: Uuid,
    pub slug: String,
    pub status: String,
    pub claimed_at: Option<chrono::DateTime<chrono::Utc>>,
    pub owner: Option<String>,
    /// The claim is older than the grace period (its owner is presumed gone).
    pub stale: bool,
    pub pending: i64,
    /// Revocations owed to a provider for this workspace's grants, not yet settled.
    pub open_revocations: i64,
}

/// The workspace by slug (`$2`) or by id (`$3`), whichever is given: one statement, so the
/// claim's view of a workspace is written once.
async fn by(
    conn: &mut PgConnection,
    tenant: TenantId,
    slug: Option<&str>,
    id: Option<Uuid>,
    grace_secs: f64,
) -> Result<Option<State>> {
    Ok(sqlx::query_as!(
        State,
        r#"SELECT w.id, w.slug, w.status, w.reap_claimed_at AS claimed_at, w.reap_owner AS owner,
                coalesce(w.reap_claimed_at < now() - make_interval(secs => $4), false) AS "stale!",
                (SELECT count(*) FROM copies c WHERE c.tenant_id = w.tenant_id AND c.workspace_id = w.id
                    AND c.state = 'pending') AS "pending!",
                (SELECT count(*) FROM oauth_revocations r WHERE r.tenant_id = w.tenant_id AND r.workspace_id = w.id
                    AND r.outcome IS NULL) AS "open_revocations!"
           FROM workspaces w WHERE w.tenant_id = $1 AND (w.slug = $2 OR w.id = $3)"#,
        tenant.0,
        slug,
        id,
        grace_secs,
    )
    .fetch_optional(conn)
    .await?)
}

pub async fn by_slug(conn: &mut PgConnection, tenant: TenantId, slug: &str, grace_secs: f64) -> Result<Option<State>> {
    by(conn, tenant, Some(slug), None, grace_secs).await
}

pub async fn by_id(conn: &mut PgConnection, tenant: TenantId, id: Uuid, grace_secs: f64) -> Result<Option<State>> {
    by(conn, tenant, None, Some(id), grace_secs).await
}

/// The claim: once, only from archived, only with no copy pending and no revocation owed.
pub async fn claim(conn: &mut PgConnection, tenant: TenantId, id: Uuid, owner: &str) -> Result<bool> {
    Ok(sqlx::query!(
        "UPDATE workspaces w SET reap_claimed_at = now(), reap_owner = $3, revision = revision + 1, updated_at = now()
          WHERE w.tenant_id = $1 AND w.id = $2 AND w.status = 'archived' AND w.reap_claimed_at IS NULL
            AND NOT EXISTS (SELECT 1 FROM copies c WHERE c.tenant_id = w.tenant_id AND c.workspace_id = w.id AND c.state = 'pending')
            AND NOT EXISTS (SELECT 1 FROM oauth_revocations r WHERE r.tenant_id = w.tenant_id AND r.workspace_id = w.id
                              AND r.outcome IS NULL)",
        tenant.0,
        id,
        owner,
    )
    .execute(conn)
    .await?
    .rows_affected()
        == 1)
}

/// Takes over a claim whose owner is presumed gone (older than the grace period), once.
pub async fn take_over(conn: &mut PgConnection, tenant: TenantId, id: Uuid, owner: &str, grace_secs: f64) -> Result<bool> {
    Ok(sqlx::query!(
        "UPDATE workspaces SET reap_claimed_at = now(), reap_owner = $3
          WHERE tenant_id = $1 AND id = $2 AND reap_claimed_at < now() - make_interval(secs => $4)",
        tenant.0,
        id,
        owner,
        grace_secs,
    )
    .execute(conn)
    .await?
    .rows_affected()
        == 1)
}

/// Non-done ledger rows of the workspace: (copy_ref, state).
pub async fn unsettled(conn: &mut PgConnection, tenant: TenantId, id: Uuid) -> Result<Vec<(String, String)>> {
    Ok(sqlx::query!(
        "SELECT copy_ref, state FROM copies WHERE tenant_id = $1 AND workspace_id = $2 AND state <> 'done'",
        tenant.0,
        id,
    )
    .fetch_all(conn)
    .await?
    .into_iter()
    .map(|r| (r.copy_ref, r.state))
    .collect())
}

/// Peer bindings that call the reaped workspace stop working, visibly (`bound_unavailable`).
pub async fn invalidate_peer_bindings(conn: &mut PgConnection, tenant: TenantId, id: Uuid) -> Result<u64> {
    Ok(sqlx::query!(
        "UPDATE peer_bindings SET invalidated_at = now(), invalidated_reason = 'reaped'
          WHERE tenant_id = $1 AND target_workspace_id = $2 AND invalidated_at IS NULL",
        tenant.0,
        id,
    )
    .execute(conn)
    .await?
    .rows_affected())
}

/// Settles the workspace's eligible and retained ledger rows: their copies are gone.
pub async fn settle(conn: &mut PgConnection, tenant: TenantId, id: Uuid) -> Result<u64> {
    Ok(sqlx::query!(
        "UPDATE copies SET state = 'done', settled_at = now()
          WHERE tenant_id = $1 AND workspace_id = $2 AND state IN ('eligible', 'retained')",
        tenant.0,
        id,
    )
    .execute(conn)
    .await?
    .rows_affected())
}

pub async fn tombstone(
    conn: &mut PgConnection,
    tenant: TenantId,
    id: Uuid,
    slug: &str,
    by: &str,
) -> Result<chrono::DateTime<chrono::Utc>> {
    Ok(sqlx::query_scalar!(
        "INSERT INTO workspace_tombstones (tenant_id, workspace_id, slug, reaped_by) VALUES ($1, $2, $3, $4) RETURNING reaped_at",
        tenant.0,
        id,
        slug,
        by,
    )
    .fetch_one(conn)
    .await?)
}

/// The last step: the workspace row goes (its slug is free again), only under our claim.
pub async fn delete_workspace(conn: &mut PgConnection, tenant: TenantId, id: Uuid, owner: &str) -> Result<bool> {
    Ok(sqlx::query!(
        "DELETE FROM workspaces WHERE tenant_id = $1 AND id = $2 AND reap_claimed_at IS NOT NULL AND reap_owner = $3",
        tenant.0,
        id,
        owner,
    )
    .execute(conn)
    .await?
    .rows_affected()
        == 1)
}

/// Claims older than the grace period, across tenants (platform context): (tenant, workspace).
pub async fn stale_claims(conn: &mut PgConnection, grace_secs: f64, limit: i64) -> Result<Vec<(Uuid, Uuid)>> {
    Ok(sqlx::query!(
        "SELECT tenant_id, id FROM workspaces WHERE reap_claimed_at < now() - make_interval(secs => $1)
          ORDER BY reap_claimed_at LIMIT $2",
        grace_secs,
        limit,
    )
    .fetch_all(conn)
    .await?
    .into_iter()
    .map(|r| (r.tenant_id, r.id))
    .collect())
}
