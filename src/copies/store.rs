//! Copy ledger SQL, tenant first in every function (the sweep's claim is platform work).

use sqlx::PgConnection;
use uuid::Uuid;

use super::{Copy, Move, Role};
use crate::{
    error::Result,
    ids::{MoveId, TenantId, WorkspaceId},
};

/// The workspace's erasure epoch and whether a reap is claimed, locked FOR SHARE; `None` when
/// the workspace does not exist in this tenant.
pub async fn workspace_gate(conn: &mut PgConnection, tenant: TenantId, workspace: Uuid) -> Result<Option<(i64, bool)>> {
    let row = sqlx::query!(
        r#"SELECT erasure_epoch, reap_claimed_at IS NOT NULL AS "reaping!" FROM workspaces
          WHERE tenant_id = $1 AND id = $2 AND status <> 'reaped' FOR SHARE"#,
        tenant.0,
        workspace,
    )
    .fetch_optional(conn)
    .await?;
    Ok(row.map(|r| (r.erasure_epoch, r.reaping)))
}

pub async fn insert(
    conn: &mut PgConnection,
    tenant: TenantId,
    mv: &Move,
    copy_ref: &str,
    role: Role,
    epoch: i64,
    lease_ms: u64,
) -> Result<()> {
    sqlx::query!(
        "INSERT INTO copies (tenant_id, move_id, copy_ref, role, workspace_id, kind, epoch_read, lease_until)
         VALUES ($1, $2, $3, $4, $5, $6, $7, now() + make_interval(secs => $8))",
        tenant.0,
        mv.id,
        copy_ref,
        role.as_str(),
        mv.workspace,
        mv.kind.as_str(),
        epoch,
        lease_ms as f64 / 1000.0,
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// Locks a move's rows (FOR UPDATE, so a sweep's claim skips them while the caller writes):
/// (rows, rows still held by the move: pending, unclaimed, inside the lease).
pub async fn lock_move(conn: &mut PgConnection, tenant: TenantId, move_id: Uuid) -> Result<(i64, i64)> {
    let held = sqlx::query_scalar!(
        r#"SELECT state = 'pending' AND lease_owner IS NULL AND lease_until > now() AS "held!" FROM copies
          WHERE tenant_id = $1 AND move_id = $2 FOR UPDATE"#,
        tenant.0,
        move_id,
    )
    .fetch_all(conn)
    .await?;
    Ok((held.len() as i64, held.iter().filter(|h| **h).count() as i64))
}

/// Whether the workspace of the move still has the erasure epoch every row read (read FOR
/// SHARE: an erasure's epoch bump waits for this transaction).
pub async fn epoch_unchanged(conn: &mut PgConnection, tenant: TenantId, move_id: Uuid) -> Result<bool> {
    Ok(sqlx::query_scalar!(
        r#"SELECT coalesce(bool_and(c.epoch_read = w.erasure_epoch AND w.reap_claimed_at IS NULL), false) AS "unchanged!"
           FROM copies c
           JOIN LATERAL (SELECT erasure_epoch, reap_claimed_at FROM workspaces w
                          WHERE w.tenant_id = c.tenant_id AND w.id = c.workspace_id FOR SHARE) w ON true
          WHERE c.tenant_id = $1 AND c.move_id = $2"#,
        tenant.0,
        move_id,
    )
    .fetch_one(conn)
    .await?)
}

/// The conditional update of a confirm: how many rows it settled.
pub async fn confirm(conn: &mut PgConnection, tenant: TenantId, move_id: Uuid, sources: &str) -> Result<i64> {
    let done = sqlx::query!(
        "UPDATE copies SET state = CASE role WHEN 'destination' THEN 'done' ELSE $3 END, settled_at = now()
          WHERE tenant_id = $1 AND move_id = $2 AND state = 'pending' AND lease_owner IS NULL AND lease_until > now()",
        tenant.0,
        move_id,
        sources,
    )
    .execute(conn)
    .await?;
    Ok(done.rows_affected() as i64)
}

pub async fn list(conn: &mut PgConnection, tenant: TenantId, workspace: Option<Uuid>) -> Result<Vec<Copy>> {
    Ok(sqlx::query_as!(
        Copy,
        r#"SELECT move_id AS "move_id: MoveId", copy_ref, role, workspace_id AS "workspace_id: WorkspaceId", kind, state,
                  epoch_read, lease_until, lease_owner, created_at, settled_at
           FROM copies WHERE tenant_id = $1 AND ($2::uuid IS NULL OR workspace_id = $2 OR copy_ref = 'workspace:' || $2::text)
          ORDER BY created_at DESC, move_id, role, copy_ref LIMIT 1000"#,
        tenant.0,
        workspace,
    )
    .fetch_all(conn)
    .await?)
}

/// A row the sweep works on.
#[derive(Clone, Debug)]
pub struct Claimed {
    pub tenant: TenantId,
    pub move_id: MoveId,
    pub copy_ref: String,
    pub role: String,
    pub workspace_id: WorkspaceId,
    pub kind: String,
}

/// Claims up to `limit` pending rows whose lease has passed (platform context). Rows another
/// transaction holds locked are skipped, not waited for; the conditional update re-checks each.
pub async fn claim_expired(conn: &mut PgConnection, owner: &str, limit: i64) -> Result<Vec<Claimed>> {
    Ok(sqlx::query_as!(
        Claimed,
        r#"UPDATE copies c SET lease_owner = $1
           FROM (SELECT tenant_id, move_id, copy_ref, role FROM copies
                  WHERE state = 'pending' AND lease_owner IS NULL AND lease_until <= now()
                  ORDER BY lease_until LIMIT $2 FOR UPDATE SKIP LOCKED) p
          WHERE c.tenant_id = p.tenant_id AND c.move_id = p.move_id AND c.copy_ref = p.copy_ref AND c.role = p.role
            AND c.state = 'pending' AND c.lease_owner IS NULL AND c.lease_until <= now()
          RETURNING c.tenant_id AS "tenant: TenantId", c.move_id AS "move_id: MoveId", c.copy_ref, c.role,
                    c.workspace_id AS "workspace_id: WorkspaceId", c.kind"#,
        owner,
        limit,
    )
    .fetch_all(conn)
    .await?)
}

/// Claims every pending, unclaimed row of one move now, lease or not: a move that failed
/// before confirming gives its rows up at once instead of waiting for the sweep.
pub async fn claim_move(conn: &mut PgConnection, tenant: TenantId, move_id: Uuid, owner: &str) -> Result<u64> {
    let done = sqlx::query!(
        "UPDATE copies SET lease_owner = $3 WHERE tenant_id = $1 AND move_id = $2 AND state = 'pending' AND lease_owner IS NULL",
        tenant.0,
        move_id,
        owner,
    )
    .execute(conn)
    .await?;
    Ok(done.rows_affected())
}

/// Claimed rows still pending that this replica should settle: its own claims, and claims
/// older than `abandoned_secs` past their lease (their claimant died before settling).
pub async fn to_settle(conn: &mut PgConnection, owner: &str, abandoned_secs: f64, limit: i64) -> Result<Vec<Claimed>> {
    Ok(sqlx::query_as!(
        Claimed,
        r#"SELECT tenant_id AS "tenant: TenantId", move_id AS "move_id: MoveId", copy_ref, role,
                  workspace_id AS "workspace_id: WorkspaceId", kind FROM copies
          WHERE state = 'pending' AND lease_owner IS NOT NULL
            AND (lease_owner = $1 OR lease_until < now() - make_interval(secs => $2))
          ORDER BY lease_until LIMIT $3"#,
        owner,
        abandoned_secs,
        limit,
    )
    .fetch_all(conn)
    .await?)
}

/// Rows whose wipe is due (`eligible`), oldest first.
pub async fn eligible(conn: &mut PgConnection, limit: i64) -> Result<Vec<Claimed>> {
    Ok(sqlx::query_as!(
        Claimed,
        r#"SELECT tenant_id AS "tenant: TenantId", move_id AS "move_id: MoveId", copy_ref, role,
                  workspace_id AS "workspace_id: WorkspaceId", kind FROM copies
          WHERE state = 'eligible' ORDER BY settled_at LIMIT $1"#,
        limit,
    )
    .fetch_all(conn)
    .await?)
}

/// Locks one row if it is still in `state` (skipping it when another settler holds it).
pub async fn lock_row(conn: &mut PgConnection, c: &Claimed, state: &str) -> Result<bool> {
    Ok(sqlx::query_scalar!(
        "SELECT 1 AS one FROM copies WHERE tenant_id = $1 AND move_id = $2 AND copy_ref = $3 AND role = $4 AND state = $5
            FOR UPDATE SKIP LOCKED",
        c.tenant.0,
        c.move_id.0,
        c.copy_ref,
        c.role,
        state,
    )
    .fetch_optional(conn)
    .await?
    .is_some())
}

/// Moves one row from `from` to `to` (compare-and-set); whether it did.
pub async fn settle(conn: &mut PgConnection, c: &Claimed, from: &str, to: &str) -> Result<bool> {
    let done = sqlx::query!(
        "UPDATE copies SET state = $6, settled_at = now()
          WHERE tenant_id = $1 AND move_id = $2 AND copy_ref = $3 AND role = $4 AND state = $5",
        c.tenant.0,
        c.move_id.0,
        c.copy_ref,
        c.role,
        from,
        to,
    )
    .execute(conn)
    .await?;
    Ok(done.rows_affected() == 1)
}

/// Settles every not-yet-done row naming `copy_ref` (its copy was deleted): how many.
pub async fn close_ref(conn: &mut PgConnection, tenant: TenantId, copy_ref: &str) -> Result<u64> {
    let done = sqlx::query!(
        "UPDATE copies SET state = 'done', settled_at = now()
          WHERE tenant_id = $1 AND copy_ref = $2 AND state IN ('eligible', 'retained')",
        tenant.0,
        copy_ref,
    )
    .execute(conn)
    .await?;
    Ok(done.rows_affected())
}

/// Whether any pending row names the workspace (as the copied workspace or as a copy).
pub async fn pending_for(conn: &mut PgConnection, tenant: TenantId, workspace: Uuid) -> Result<bool> {
    Ok(sqlx::query_scalar!(
        r#"SELECT EXISTS (SELECT 1 FROM copies WHERE tenant_id = $1 AND state = 'pending'
                          AND (workspace_id = $2 OR copy_ref = 'workspace:' || $2::text)) AS "pending!""#,
        tenant.0,
        workspace,
    )
    .fetch_one(conn)
    .await?)
}
