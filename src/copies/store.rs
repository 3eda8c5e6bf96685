//! Copy ledger SQL, tenant first in every function (the sweep's claim is platform work).

use sqlx::{PgConnection, Row, postgres::PgRow};
use uuid::Uuid;

use super::{Copy, Move, Role};
use crate::{error::Result, ids::TenantId};

/// The workspace's erasure epoch and whether a reap is claimed, locked FOR SHARE; `None` when
/// the workspace does not exist in this tenant.
pub async fn workspace_gate(conn: &mut PgConnection, tenant: TenantId, workspace: Uuid) -> Result<Option<(i64, bool)>> {
    let row = sqlx::query(
        "SELECT erasure_epoch, reap_claimed_at IS NOT NULL AS reaping FROM workspaces
          WHERE tenant_id = $1 AND id = $2 AND status <> 'reaped' FOR SHARE",
    )
    .bind(tenant)
    .bind(workspace)
    .fetch_optional(conn)
    .await?;
    row.map(|r| Ok((r.try_get("erasure_epoch")?, r.try_get("reaping")?))).transpose()
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
    sqlx::query(
        "INSERT INTO copies (tenant_id, move_id, copy_ref, role, workspace_id, kind, epoch_read, lease_until)
         VALUES ($1, $2, $3, $4, $5, $6, $7, now() + make_interval(secs => $8))",
    )
    .bind(tenant)
    .bind(mv.id)
    .bind(copy_ref)
    .bind(role.as_str())
    .bind(mv.workspace)
    .bind(mv.kind.as_str())
    .bind(epoch)
    .bind(lease_ms as f64 / 1000.0)
    .execute(conn)
    .await?;
    Ok(())
}

/// Locks a move's rows (FOR UPDATE, so a sweep's claim skips them while the caller writes):
/// (rows, rows still held by the move: pending, unclaimed, inside the lease).
pub async fn lock_move(conn: &mut PgConnection, tenant: TenantId, move_id: Uuid) -> Result<(i64, i64)> {
    let held: Vec<bool> = sqlx::query_scalar(
        "SELECT state = 'pending' AND lease_owner IS NULL AND lease_until > now() FROM copies
          WHERE tenant_id = $1 AND move_id = $2 FOR UPDATE",
    )
    .bind(tenant)
    .bind(move_id)
    .fetch_all(conn)
    .await?;
    Ok((held.len() as i64, held.iter().filter(|h| **h).count() as i64))
}

/// Whether the workspace of the move still has the erasure epoch every row read (read FOR
/// SHARE: an erasure's epoch bump waits for this transaction).
pub async fn epoch_unchanged(conn: &mut PgConnection, tenant: TenantId, move_id: Uuid) -> Result<bool> {
    Ok(sqlx::query_scalar(
        "SELECT coalesce(bool_and(c.epoch_read = w.erasure_epoch AND w.reap_claimed_at IS NULL), false)
           FROM copies c
           JOIN LATERAL (SELECT erasure_epoch, reap_claimed_at FROM workspaces w
                          WHERE w.tenant_id = c.tenant_id AND w.id = c.workspace_id FOR SHARE) w ON true
          WHERE c.tenant_id = $1 AND c.move_id = $2",
    )
    .bind(tenant)
    .bind(move_id)
    .fetch_one(conn)
    .await?)
}

/// The conditional update of a confirm: how many rows it settled.
pub async fn confirm(conn: &mut PgConnection, tenant: TenantId, move_id: Uuid, sources: &str) -> Result<i64> {
    let done = sqlx::query(
        "UPDATE copies SET state = CASE role WHEN 'destination' THEN 'done' ELSE $3 END, settled_at = now()
          WHERE tenant_id = $1 AND move_id = $2 AND state = 'pending' AND lease_owner IS NULL AND lease_until > now()",
    )
    .bind(tenant)
    .bind(move_id)
    .bind(sources)
    .execute(conn)
    .await?;
    Ok(done.rows_affected() as i64)
}

fn copy(row: &PgRow) -> Result<Copy> {
    Ok(Copy {
        move_id: row.try_get("move_id")?,
        copy_ref: row.try_get("copy_ref")?,
        role: row.try_get("role")?,
        workspace_id: row.try_get("workspace_id")?,
        kind: row.try_get("kind")?,
        state: row.try_get("state")?,
        epoch_read: row.try_get("epoch_read")?,
        lease_until: row.try_get("lease_until")?,
        lease_owner: row.try_get("lease_owner")?,
        created_at: row.try_get("created_at")?,
        settled_at: row.try_get("settled_at")?,
    })
}

pub async fn list(conn: &mut PgConnection, tenant: TenantId, workspace: Option<Uuid>) -> Result<Vec<Copy>> {
    sqlx::query(
        "SELECT move_id, copy_ref, role, workspace_id, kind, state, epoch_read, lease_until, lease_owner, created_at, settled_at
           FROM copies WHERE tenant_id = $1 AND ($2::uuid IS NULL OR workspace_id = $2 OR copy_ref = 'workspace:' || $2::text)
          ORDER BY created_at DESC, move_id, role, copy_ref LIMIT 1000",
    )
    .bind(tenant)
    .bind(workspace)
    .fetch_all(conn)
    .await?
    .iter()
    .map(copy)
    .collect()
}

/// A row the sweep works on.
#[derive(Clone, Debug)]
pub struct Claimed {
    pub tenant: TenantId,
    pub move_id: Uuid,
    pub copy_ref: String,
    pub role: String,
    pub workspace_id: Uuid,
    pub kind: String,
}

fn claimed(row: &PgRow) -> Result<Claimed> {
    Ok(Claimed {
        tenant: TenantId(row.try_get("tenant_id")?),
        move_id: row.try_get("move_id")?,
        copy_ref: row.try_get("copy_ref")?,
        role: row.try_get("role")?,
        workspace_id: row.try_get("workspace_id")?,
        kind: row.try_get("kind")?,
    })
}

/// Claims up to `limit` pending rows whose lease has passed (platform context). Rows another
/// transaction holds locked are skipped, not waited for; the conditional update re-checks each.
pub async fn claim_expired(conn: &mut PgConnection, owner: &str, limit: i64) -> Result<Vec<Claimed>> {
    sqlx::query(
        "UPDATE copies c SET lease_owner = $1
           FROM (SELECT tenant_id, move_id, copy_ref, role FROM copies
                  WHERE state = 'pending' AND lease_owner IS NULL AND lease_until <= now()
                  ORDER BY lease_until LIMIT $2 FOR UPDATE SKIP LOCKED) p
          WHERE c.tenant_id = p.tenant_id AND c.move_id = p.move_id AND c.copy_ref = p.copy_ref AND c.role = p.role
            AND c.state = 'pending' AND c.lease_owner IS NULL AND c.lease_until <= now()
          RETURNING c.tenant_id, c.move_id, c.copy_ref, c.role, c.workspace_id, c.kind",
    )
    .bind(owner)
    .bind(limit)
    .fetch_all(conn)
    .await?
    .iter()
    .map(claimed)
    .collect()
}

/// Claims every pending, unclaimed row of one move now, lease or not: a move that failed
/// before confirming gives its rows up at once instead of waiting for the sweep.
pub async fn claim_move(conn: &mut PgConnection, tenant: TenantId, move_id: Uuid, owner: &str) -> Result<u64> {
    let done = sqlx::query(
        "UPDATE copies SET lease_owner = $3 WHERE tenant_id = $1 AND move_id = $2 AND state = 'pending' AND lease_owner IS NULL",
    )
    .bind(tenant)
    .bind(move_id)
    .bind(owner)
    .execute(conn)
    .await?;
    Ok(done.rows_affected())
}

/// Claimed rows still pending that this replica should settle: its own claims, and claims
/// older than `abandoned_secs` past their lease (their claimant died before settling).
pub async fn to_settle(conn: &mut PgConnection, owner: &str, abandoned_secs: f64, limit: i64) -> Result<Vec<Claimed>> {
    sqlx::query(
        "SELECT tenant_id, move_id, copy_ref, role, workspace_id, kind FROM copies
          WHERE state = 'pending' AND lease_owner IS NOT NULL
            AND (lease_owner = $1 OR lease_until < now() - make_interval(secs => $2))
          ORDER BY lease_until LIMIT $3",
    )
    .bind(owner)
    .bind(abandoned_secs)
    .bind(limit)
    .fetch_all(conn)
    .await?
    .iter()
    .map(claimed)
    .collect()
}

/// Rows whose wipe is due (`eligible`), oldest first.
pub async fn eligible(conn: &mut PgConnection, limit: i64) -> Result<Vec<Claimed>> {
    sqlx::query(
        "SELECT tenant_id, move_id, copy_ref, role, workspace_id, kind FROM copies
          WHERE state = 'eligible' ORDER BY settled_at LIMIT $1",
    )
    .bind(limit)
    .fetch_all(conn)
    .await?
    .iter()
    .map(claimed)
    .collect()
}

/// Locks one row if it is still in `state` (skipping it when another settler holds it).
pub async fn lock_row(conn: &mut PgConnection, c: &Claimed, state: &str) -> Result<bool> {
    Ok(sqlx::query_scalar::<_, i32>(
        "SELECT 1 FROM copies WHERE tenant_id = $1 AND move_id = $2 AND copy_ref = $3 AND role = $4 AND state = $5
            FOR UPDATE SKIP LOCKED",
    )
    .bind(c.tenant)
    .bind(c.move_id)
    .bind(&c.copy_ref)
    .bind(&c.role)
    .bind(state)
    .fetch_optional(conn)
    .await?
    .is_some())
}

/// Moves one row from `from` to `to` (compare-and-set); whether it did.
pub async fn settle(conn: &mut PgConnection, c: &Claimed, from: &str, to: &str) -> Result<bool> {
    let done = sqlx::query(
        "UPDATE copies SET state = $6, settled_at = now()
          WHERE tenant_id = $1 AND move_id = $2 AND copy_ref = $3 AND role = $4 AND state = $5",
    )
    .bind(c.tenant)
    .bind(c.move_id)
    .bind(&c.copy_ref)
    .bind(&c.role)
    .bind(from)
    .bind(to)
    .execute(conn)
    .await?;
    Ok(done.rows_affected() == 1)
}

/// Settles every not-yet-done row naming `copy_ref` (its copy was deleted): how many.
pub async fn close_ref(conn: &mut PgConnection, tenant: TenantId, copy_ref: &str) -> Result<u64> {
    let done = sqlx::query(
        "UPDATE copies SET state = 'done', settled_at = now()
          WHERE tenant_id = $1 AND copy_ref = $2 AND state IN ('eligible', 'retained')",
    )
    .bind(tenant)
    .bind(copy_ref)
    .execute(conn)
    .await?;
    Ok(done.rows_affected())
}

/// Whether any pending row names the workspace (as the copied workspace or as a copy).
pub async fn pending_for(conn: &mut PgConnection, tenant: TenantId, workspace: Uuid) -> Result<bool> {
    Ok(sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM copies WHERE tenant_id = $1 AND state = 'pending'
                          AND (workspace_id = $2 OR copy_ref = 'workspace:' || $2::text))",
    )
    .bind(tenant)
    .bind(workspace)
    .fetch_one(conn)
    .await?)
}
