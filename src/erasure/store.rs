//! Erasure SQL. Every function takes the tenant first and runs inside the caller's one
//! serializable transaction.

use sqlx::PgConnection;
use uuid::Uuid;

use crate::{error::Result, ids::TenantId};

/// What the redaction pass read of the workspace: the claim compares all of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Read {
    pub id: Uuid,
    pub bound_version: i32,
    pub revision: i64,
    pub epoch: i64,
    /// Every ledger row of the workspace, whatever its state.
    pub copies: i64,
    /// Ledger rows of the workspace still pending (a move in flight).
    pub pending: i64,
}

pub async fn read(conn: &mut PgConnection, tenant: TenantId, slug: &str) -> Result<Option<Read>> {
    Ok(sqlx::query_as!(
        Read,
        r#"SELECT w.id, w.bound_version, w.revision, w.erasure_epoch AS epoch,
                (SELECT count(*) FROM copies c WHERE c.tenant_id = w.tenant_id AND c.workspace_id = w.id) AS "copies!",
                (SELECT count(*) FROM copies c WHERE c.tenant_id = w.tenant_id AND c.workspace_id = w.id
                    AND c.state = 'pending') AS "pending!"
           FROM workspaces w WHERE w.tenant_id = $1 AND w.slug = $2"#,
        tenant.0,
        slug,
    )
    .fetch_optional(conn)
    .await?)
}

/// A member of the tenant, by id (when `raw` is a UUID) or by email (case-insensitive):
/// (id, issuer, subject, email).
pub async fn member(
    conn: &mut PgConnection,
    tenant: TenantId,
    raw: &str,
) -> Result<Option<(Uuid, String, String, Option<String>)>> {
    let id = Uuid::parse_str(raw).ok();
    let row = sqlx::query!(
        "SELECT id, issuer, subject, email FROM members
          WHERE tenant_id = $1 AND (id = $2 OR ($2 IS NULL AND lower(email) = lower($3)))",
        tenant.0,
        id,
        raw,
    )
    .fetch_optional(conn)
    .await?;
    Ok(row.map(|r| (r.id, r.issuer, r.subject, r.email)))
}

/// The actor ids a member's calls carry in activity rows: its access tokens (`principal` is
/// the member's) and its MCP authorization grants.
pub async fn member_actor_ids(
    conn: &mut PgConnection,
    tenant: TenantId,
    member: Uuid,
    issuer: &str,
    subject: &str,
) -> Result<Vec<String>> {
    Ok(sqlx::query_scalar!(
        r#"SELECT id::text AS "id!" FROM access_tokens WHERE tenant_id = $1 AND principal_issuer = $3 AND principal_subject = $4
         UNION SELECT id::text FROM mcp_grants WHERE tenant_id = $1 AND member_id = $2"#,
        tenant.0,
        member,
        issuer,
        subject,
    )
    .fetch_all(conn)
    .await?)
}

/// Every copy of the workspace's state that lives in workspace rows: itself, and every
/// workspace a ledger destination row names (a fork), transitively, plus forks that name it
/// in `fork_of` (in case a fork's ledger rows were settled and pruned).
pub async fn reach(conn: &mut PgConnection, tenant: TenantId, workspace: Uuid) -> Result<Vec<Uuid>> {
    Ok(sqlx::query_scalar!(
        r#"WITH RECURSIVE edge(src, dst) AS (
             SELECT c.workspace_id, substring(c.copy_ref FROM 11)::uuid
               FROM copies c
              WHERE c.tenant_id = $1 AND c.role = 'destination'
                AND c.copy_ref ~ '^workspace:[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$'
             UNION
             SELECT w.fork_of, w.id FROM workspaces w WHERE w.tenant_id = $1 AND w.fork_of IS NOT NULL
         ), reach(id) AS (
             SELECT $2::uuid
             UNION
             SELECT e.dst FROM reach r JOIN edge e ON e.src = r.id
         )
         SELECT r.id AS "id!" FROM reach r JOIN workspaces w ON w.tenant_id = $1 AND w.id = r.id"#,
        tenant.0,
        workspace,
    )
    .fetch_all(conn)
    .await?)
}

/// Snapshot copies the ledger names for these workspaces (sealed per subject: the key
/// destruction makes the subject's part of them unreadable).
pub async fn snapshots(conn: &mut PgConnection, tenant: TenantId, workspaces: &[Uuid]) -> Result<i64> {
    Ok(sqlx::query_scalar!(
        r#"SELECT count(DISTINCT copy_ref) AS "count!" FROM copies
          WHERE tenant_id = $1 AND workspace_id = ANY($2) AND copy_ref LIKE 'snapshot:%' AND state <> 'done'"#,
        tenant.0,
        workspaces,
    )
    .fetch_one(conn)
    .await?)
}

pub async fn redact_activity(
    conn: &mut PgConnection,
    tenant: TenantId,
    workspaces: &[Uuid],
    actors: &[String],
    marker: &str,
) -> Result<u64> {
    Ok(sqlx::query!(
        "UPDATE activity SET actor_id = $4 WHERE tenant_id = $1 AND workspace_id = ANY($2) AND actor_id = ANY($3)",
        tenant.0,
        workspaces,
        actors,
        marker,
    )
    .execute(conn)
    .await?
    .rows_affected())
}

/// The subject's calls held back for approval and its decisions on them: the caller, the
/// caller's person and the approver become the marker.
pub async fn redact_approvals(
    conn: &mut PgConnection,
    tenant: TenantId,
    workspaces: &[Uuid],
    actors: &[String],
    member: Option<Uuid>,
    marker: &str,
) -> Result<u64> {
    Ok(sqlx::query!(
        "UPDATE approvals
            SET actor_id = CASE WHEN actor_id = ANY($3) THEN $4 ELSE actor_id END,
                member_id = CASE WHEN member_id = $5 THEN NULL ELSE member_id END,
                decided_by = CASE WHEN decided_by = ANY($3) THEN $4 ELSE decided_by END
          WHERE tenant_id = $1 AND workspace_id = ANY($2)
            AND (actor_id = ANY($3) OR decided_by = ANY($3) OR member_id IS NOT DISTINCT FROM $5 AND $5 IS NOT NULL)",
        tenant.0,
        workspaces,
        actors,
        marker,
        member,
    )
    .execute(conn)
    .await?
    .rows_affected())
}

/// The member's personal credential slots (OAuth grant tokens included: they are sealed in
/// `credentials` under the same owner).
pub async fn delete_credentials(conn: &mut PgConnection, tenant: TenantId, workspaces: &[Uuid], member: Uuid) -> Result<u64> {
    Ok(sqlx::query!(
        "DELETE FROM credentials WHERE tenant_id = $1 AND workspace_id = ANY($2) AND member_id = $3",
        tenant.0,
        workspaces,
        member,
    )
    .execute(conn)
    .await?
    .rows_affected())
}

pub async fn delete_oauth_grants(conn: &mut PgConnection, tenant: TenantId, workspaces: &[Uuid], member: Uuid) -> Result<u64> {
    Ok(sqlx::query!(
        "DELETE FROM oauth_grants WHERE tenant_id = $1 AND workspace_id = ANY($2) AND member_id = $3",
        tenant.0,
        workspaces,
        member,
    )
    .execute(conn)
    .await?
    .rows_affected())
}

/// The member's MCP authorization grants on these workspaces, with their codes and tokens.
pub async fn delete_mcp_grants(conn: &mut PgConnection, tenant: TenantId, workspaces: &[Uuid], member: Uuid) -> Result<u64> {
    sqlx::query!(
        "DELETE FROM mcp_tokens WHERE tenant_id = $1 AND grant_id IN
           (SELECT id FROM mcp_grants WHERE tenant_id = $1 AND workspace_id = ANY($2) AND member_id = $3)",
        tenant.0,
        workspaces,
        member,
    )
    .execute(&mut *conn)
    .await?;
    sqlx::query!(
        "DELETE FROM mcp_codes WHERE tenant_id = $1 AND grant_id IN
           (SELECT id FROM mcp_grants WHERE tenant_id = $1 AND workspace_id = ANY($2) AND member_id = $3)",
        tenant.0,
        workspaces,
        member,
    )
    .execute(&mut *conn)
    .await?;
    Ok(sqlx::query!(
        "DELETE FROM mcp_grants WHERE tenant_id = $1 AND workspace_id = ANY($2) AND member_id = $3",
        tenant.0,
        workspaces,
        member,
    )
    .execute(conn)
    .await?
    .rows_affected())
}

/// Rewrites every needle out of the tenant's failure text (message and reference).
pub async fn redact_ops_failures(conn: &mut PgConnection, tenant: TenantId, needles: &[String], marker: &str) -> Result<u64> {
    Ok(sqlx::query!(
        "UPDATE ops_failures SET message = gatehouse_redact(message, $2, $3), reference = gatehouse_redact(reference, $2, $3)
          WHERE tenant_id = $1
            AND EXISTS (SELECT 1 FROM unnest($2::text[]) n WHERE strpos(message, n) > 0 OR strpos(coalesce(reference, ''), n) > 0)",
        tenant.0,
        needles,
        marker,
    )
    .execute(conn)
    .await?
    .rows_affected())
}

/// Destroys the live keys of the subject (any of its names).
pub async fn destroy_keys(conn: &mut PgConnection, tenant: TenantId, names: &[String]) -> Result<u64> {
    Ok(sqlx::query!(
        "UPDATE subject_keys SET envelope = NULL, key_id = NULL, destroyed_at = now()
          WHERE tenant_id = $1 AND subject = ANY($2) AND destroyed_at IS NULL",
        tenant.0,
        names,
    )
    .execute(conn)
    .await?
    .rows_affected())
}

/// The claim: epoch + 1 only if nothing the redaction pass read has moved and no copy of the
/// workspace is pending. Returns the new epoch, or `None` when the claim is lost.
pub async fn claim(conn: &mut PgConnection, tenant: TenantId, read: &Read) -> Result<Option<i64>> {
    Ok(sqlx::query_scalar!(
        "UPDATE workspaces w SET erasure_epoch = erasure_epoch + 1, updated_at = now()
          WHERE w.tenant_id = $1 AND w.id = $2 AND w.bound_version = $3 AND w.revision = $4 AND w.erasure_epoch = $5
            AND (SELECT count(*) FROM copies c WHERE c.tenant_id = w.tenant_id AND c.workspace_id = w.id) = $6
            AND NOT EXISTS (SELECT 1 FROM copies c WHERE c.tenant_id = w.tenant_id AND c.workspace_id = w.id
                              AND c.state = 'pending')
          RETURNING erasure_epoch",
        tenant.0,
        read.id,
        read.bound_version,
        read.revision,
        read.epoch,
        read.copies,
    )
    .fetch_optional(conn)
    .await?)
}

/// One stored receipt (the subject only as its digest).
pub struct Receipt<'a> {
    pub id: Uuid,
    pub workspace: Uuid,
    pub subject_digest: &'a str,
    pub epoch: i64,
    pub counts: &'a serde_json::Value,
    pub erased_by: &'a str,
}

pub async fn insert_receipt(conn: &mut PgConnection, tenant: TenantId, r: &Receipt<'_>) -> Result<chrono::DateTime<chrono::Utc>> {
    Ok(sqlx::query_scalar!(
        "INSERT INTO erasure_receipts (tenant_id, id, workspace_id, subject_digest, epoch, counts, erased_by)
         VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING erased_at",
        tenant.0,
        r.id,
        r.workspace,
        r.subject_digest,
        r.epoch,
        r.counts,
        r.erased_by,
    )
    .fetch_one(conn)
    .await?)
}
