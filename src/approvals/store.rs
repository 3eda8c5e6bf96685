//! Approvals SQL, tenant first in every function. Every transition is one conditional
//! `UPDATE … RETURNING` on the state it expects.

use chrono::{DateTime, Utc};
use sqlx::PgConnection;
use uuid::Uuid;

use super::{Approval, Call};
use crate::{error::Result, ids::TenantId};

/// One `approvals` row, with its workspace's slug and its state as of now (`expired` once a
/// pending or approved row's time is up).
pub struct Row {
    pub id: Uuid,
    pub workspace: String,
    pub workspace_id: Uuid,
    pub actor_kind: String,
    pub actor_id: String,
    pub member_id: Option<Uuid>,
    pub connector: String,
    pub tool: String,
    pub args_digest: String,
    pub policy_version: i32,
    pub state: String,
    pub requested_at: DateTime<Utc>,
    pub expires_at: DateTime<Utc>,
    pub decided_at: Option<DateTime<Utc>>,
    pub decided_by: Option<String>,
    pub reason: Option<String>,
    pub used_at: Option<DateTime<Utc>>,
}

impl From<Row> for Approval {
    fn from(r: Row) -> Approval {
        Approval {
            id: r.id,
            workspace: r.workspace,
            workspace_id: r.workspace_id,
            actor_kind: r.actor_kind,
            actor_id: r.actor_id,
            member_id: r.member_id,
            connector: r.connector,
            tool: r.tool,
            args_digest: r.args_digest,
            policy_version: r.policy_version,
            state: r.state,
            requested_at: r.requested_at,
            expires_at: r.expires_at,
            decided_at: r.decided_at,
            decided_by: r.decided_by,
            reason: r.reason,
            used_at: r.used_at,
        }
    }
}

/// Runs `query_as!` into a [`Row`] with the one column list of an approval (joined with its
/// workspace as `w`) pasted between the literals `[$before…]` and `$after`.
macro_rules! approval {
    ([$($before:literal),+] $after:literal, $($arg:expr),+ $(,)?) => {
        sqlx::query_as!(
            Row,
            $($before +)+ "a.id, w.slug AS workspace, a.workspace_id, a.actor_kind, a.actor_id, a.member_id, a.connector, \
                           a.tool, a.args_digest, a.policy_version, \
                           CASE WHEN a.state IN ('pending', 'approved') AND a.expires_at <= now() THEN 'expired' \
                                ELSE a.state END AS \"state!\", \
                           a.requested_at, a.expires_at, a.decided_at, a.decided_by, a.reason, a.used_at" + $after,
            $($arg),+
        )
    };
}

pub async fn get(conn: &mut PgConnection, tenant: TenantId, id: Uuid) -> Result<Option<Approval>> {
    Ok(approval!(
        ["SELECT "] " FROM approvals a JOIN workspaces w ON w.tenant_id = a.tenant_id AND w.id = a.workspace_id \
         WHERE a.tenant_id = $1 AND a.id = $2",
        tenant.0,
        id,
    )
    .fetch_optional(conn)
    .await?
    .map(Approval::from))
}

/// The tenant's approvals, newest first (`pending`: only those still waiting for a decision).
pub async fn list(conn: &mut PgConnection, tenant: TenantId, pending: bool, limit: i64) -> Result<Vec<Approval>> {
    Ok(approval!(
        ["SELECT "] " FROM approvals a JOIN workspaces w ON w.tenant_id = a.tenant_id AND w.id = a.workspace_id \
         WHERE a.tenant_id = $1 AND (NOT $2 OR (a.state = 'pending' AND a.expires_at > now())) \
         ORDER BY a.requested_at DESC, a.id DESC LIMIT $3",
        tenant.0,
        pending,
        limit,
    )
    .fetch_all(conn)
    .await?
    .into_iter()
    .map(Approval::from)
    .collect())
}

/// A live (pending, unexpired) approval of this exact call, if one is waiting already.
pub async fn pending_for(conn: &mut PgConnection, tenant: TenantId, call: &Call<'_>) -> Result<Option<Uuid>> {
    Ok(sqlx::query_scalar!(
        "SELECT id FROM approvals
          WHERE tenant_id = $1 AND workspace_id = $2 AND actor_id = $3 AND connector = $4 AND tool = $5
            AND args_digest = $6 AND policy_version = $7 AND state = 'pending' AND expires_at > now()
          ORDER BY requested_at DESC LIMIT 1",
        tenant.0,
        call.workspace,
        call.actor_id,
        call.connector,
        call.tool,
        call.digest,
        call.policy_version,
    )
    .fetch_optional(conn)
    .await?)
}

pub async fn insert(conn: &mut PgConnection, tenant: TenantId, id: Uuid, call: &Call<'_>, expires_in_s: i32) -> Result<()> {
    sqlx::query!(
        "INSERT INTO approvals (tenant_id, id, workspace_id, actor_kind, actor_id, member_id, connector, tool, args_digest,
                                policy_version, request_id, expires_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, now() + make_interval(secs => $12))",
        tenant.0,
        id,
        call.workspace,
        call.actor_kind,
        call.actor_id,
        call.member_id,
        call.connector,
        call.tool,
        call.digest,
        call.policy_version,
        call.request_id,
        f64::from(expires_in_s),
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// The first decision on a pending, unexpired approval: `approved` or `denied`. `None`: it
/// was not pending any more (or is gone, or expired).
pub async fn decide(
    conn: &mut PgConnection,
    tenant: TenantId,
    id: Uuid,
    state: &str,
    by: &str,
    reason: Option<&str>,
) -> Result<Option<Uuid>> {
    Ok(sqlx::query_scalar!(
        "UPDATE approvals SET state = $3, decided_at = now(), decided_by = $4, reason = $5
          WHERE tenant_id = $1 AND id = $2 AND state = 'pending' AND expires_at > now()
          RETURNING id",
        tenant.0,
        id,
        state,
        by,
        reason,
    )
    .fetch_optional(conn)
    .await?)
}

/// Uses an approved, unexpired approval of exactly this call: `id` names it, or (`None`) the
/// oldest such approval of the call. The one statement that lets the call run: a second use
/// finds it `used` and changes nothing.
pub async fn consume(conn: &mut PgConnection, tenant: TenantId, id: Option<Uuid>, call: &Call<'_>) -> Result<Option<Uuid>> {
    Ok(sqlx::query_scalar!(
        "UPDATE approvals SET state = 'used', used_at = now()
          WHERE tenant_id = $1 AND id = (
                SELECT id FROM approvals
                 WHERE tenant_id = $1 AND ($2::uuid IS NULL OR id = $2) AND workspace_id = $3 AND actor_id = $4
                   AND connector = $5 AND tool = $6 AND args_digest = $7 AND policy_version = $8
                   AND state = 'approved' AND expires_at > now()
                 ORDER BY requested_at LIMIT 1)
            AND state = 'approved' AND expires_at > now()
          RETURNING id",
        tenant.0,
        id,
        call.workspace,
        call.actor_id,
        call.connector,
        call.tool,
        call.digest,
        call.policy_version,
    )
    .fetch_optional(conn)
    .await?)
}
