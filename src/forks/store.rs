//! Fork SQL: creating a fork's rows from its source, and deleting a disposable workspace.

use sqlx::PgConnection;
use uuid::Uuid;

use crate::{
    error::{Error, Result},
    ids::TenantId,
    ids::WorkspaceId,
    workspaces::Workspace,
};

/// Inserts the fork's workspace row, `provisioning` until its move confirms.
pub async fn insert_fork(
    conn: &mut PgConnection,
    tenant: TenantId,
    id: Uuid,
    slug: &str,
    name: &str,
    source: Uuid,
    ttl_hours: i64,
) -> Result<()> {
    sqlx::query!(
        "INSERT INTO workspaces (tenant_id, id, slug, name, status, bound_version, fork_of, expires_at)
         VALUES ($1, $2, $3, $4, 'provisioning', 1, $5, now() + make_interval(hours => $6::int))",
        tenant.0,
        id,
        slug,
        name,
        source,
        ttl_hours as i32,
    )
    .execute(conn)
    .await
    .map_err(|e| {
        Error::from(e).on_constraint("workspaces_slug_key", || Error::Conflict {
            code: "slug_taken",
            message: format!("this tenant already has a workspace `{slug}`"),
        })
    })?;
    Ok(())
}

/// Copies the source's stored connector catalogs (the connector state) to the fork, with its
/// pinned tool definitions (a fork must not accept a definition its source quarantined).
pub async fn copy_catalogs(conn: &mut PgConnection, tenant: TenantId, source: Uuid, fork: Uuid) -> Result<u64> {
    sqlx::query!(
        "INSERT INTO tool_pins (tenant_id, workspace_id, connector_id, tool_name, digest, definition, pending_digest, pending,
                                pinned_at, changed_at, approved_at, approved_by)
         SELECT tenant_id, $3, connector_id, tool_name, digest, definition, pending_digest, pending,
                pinned_at, changed_at, approved_at, approved_by
           FROM tool_pins WHERE tenant_id = $1 AND workspace_id = $2",
        tenant.0,
        source,
        fork,
    )
    .execute(&mut *conn)
    .await?;
    let done = sqlx::query!(
        "INSERT INTO connector_catalogs (tenant_id, workspace_id, connector_id, config_key, tools, fetched_at, revision, ttl_ms, cache_scope)
         SELECT tenant_id, $3, connector_id, config_key, tools, fetched_at, revision, ttl_ms, cache_scope FROM connector_catalogs
          WHERE tenant_id = $1 AND workspace_id = $2",
        tenant.0,
        source,
        fork,
    )
    .execute(conn)
    .await?;
    Ok(done.rows_affected())
}

/// A shared credential of the source, sealed for the source.
pub struct SharedCredential {
    pub connector: String,
    pub owner: String,
    pub envelope: String,
    pub fields: serde_json::Value,
}

/// The source's workspace-wide credentials: `shared` slots and static OAuth client secrets
/// (never members' own credentials).
pub async fn shared_credentials(conn: &mut PgConnection, tenant: TenantId, source: Uuid) -> Result<Vec<SharedCredential>> {
    Ok(sqlx::query_as!(
        SharedCredential,
        "SELECT connector_id AS connector, owner, envelope, fields FROM credentials
          WHERE tenant_id = $1 AND workspace_id = $2 AND owner IN ('shared', 'oauth_client') ORDER BY connector_id, owner",
        tenant.0,
        source,
    )
    .fetch_all(conn)
    .await?)
}

pub async fn insert_credential(
    conn: &mut PgConnection,
    tenant: TenantId,
    fork: Uuid,
    c: &SharedCredential,
    key_id: &str,
    envelope: &str,
    updated_by: &str,
) -> Result<()> {
    sqlx::query!(
        "INSERT INTO credentials (tenant_id, workspace_id, connector_id, owner, key_id, envelope, fields, updated_by)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
        tenant.0,
        fork,
        c.connector,
        c.owner,
        key_id,
        envelope,
        c.fields,
        updated_by,
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// `provisioning → active` for the fork; `None` when it is not provisioning any more.
pub async fn activate(conn: &mut PgConnection, tenant: TenantId, fork: Uuid) -> Result<Option<Workspace>> {
    Ok(sqlx::query_as!(
        Workspace,
        r#"UPDATE workspaces SET status = 'active', revision = revision + 1, updated_at = now()
          WHERE tenant_id = $1 AND id = $2 AND status = 'provisioning' AND fork_of IS NOT NULL
          RETURNING id AS "id: WorkspaceId", slug, name, status, bound_version, revision, created_at, updated_at"#,
        tenant.0,
        fork,
    )
    .fetch_optional(conn)
    .await?)
}

/// A fork as its page shows it: the workspace it was forked from (its slug, `None` once that
/// one is gone), when it expires and whether it is pinned.
pub struct ForkView {
    pub fork_of: Option<String>,
    pub expires_at: Option<chrono::DateTime<chrono::Utc>>,
    pub pinned: bool,
}

/// The fork state of workspace `slug`; `None` when it is not a fork.
pub async fn view(conn: &mut PgConnection, tenant: TenantId, slug: &str) -> Result<Option<ForkView>> {
    Ok(sqlx::query_as!(
        ForkView,
        r#"SELECT s.slug AS "fork_of?", f.expires_at, f.pinned
             FROM workspaces f LEFT JOIN workspaces s ON s.tenant_id = f.tenant_id AND s.id = f.fork_of
            WHERE f.tenant_id = $1 AND f.slug = $2 AND f.fork_of IS NOT NULL AND f.status <> 'reaped'"#,
        tenant.0,
        slug,
    )
    .fetch_optional(conn)
    .await?)
}

/// A fork's expiry state, locked for update.
pub struct ForkRow {
    pub id: WorkspaceId,
    pub fork_of: Option<WorkspaceId>,
    pub expires_at: Option<chrono::DateTime<chrono::Utc>>,
    pub pinned: bool,
    pub status: String,
}

pub async fn lock_by_slug(conn: &mut PgConnection, tenant: TenantId, slug: &str) -> Result<Option<ForkRow>> {
    Ok(sqlx::query_as!(
        ForkRow,
        r#"SELECT id AS "id: WorkspaceId", fork_of AS "fork_of: WorkspaceId", expires_at, pinned, status
             FROM workspaces WHERE tenant_id = $1 AND slug = $2 FOR UPDATE"#,
        tenant.0,
        slug,
    )
    .fetch_optional(conn)
    .await?)
}

/// Sets a fork's expiry (extended from the later of now and its current expiry) and pin.
pub async fn set_expiry(
    conn: &mut PgConnection,
    tenant: TenantId,
    id: WorkspaceId,
    extend_hours: i64,
    pinned: bool,
) -> Result<(chrono::DateTime<chrono::Utc>, bool)> {
    // `expires_at` is set on every fork (the WHERE keeps to forks), hence the `!`s.
    let row = sqlx::query!(
        r#"UPDATE workspaces
            SET expires_at = CASE WHEN $3 = 0 THEN expires_at ELSE greatest(expires_at, now()) + make_interval(hours => $3::int) END,
                pinned = $4, revision = revision + 1, updated_at = now()
          WHERE tenant_id = $1 AND id = $2 AND fork_of IS NOT NULL
          RETURNING expires_at AS "expires_at!", pinned, expires_at > now() + interval '720 hours' AS "too_far!""#,
        tenant.0,
        id.0,
        extend_hours as i32,
        pinned,
    )
    .fetch_one(conn)
    .await?;
    if row.too_far {
        return Err(Error::invalid("invalid_hours", Some("hours"), "a fork expires at most 720 hours from now"));
    }
    Ok((row.expires_at, row.pinned))
}

/// Expired, unpinned, settled forks not being reaped (platform context): (tenant, id).
pub async fn expired(conn: &mut PgConnection, limit: i64) -> Result<Vec<(TenantId, Uuid)>> {
    Ok(sqlx::query!(
        "SELECT tenant_id, id FROM workspaces
          WHERE fork_of IS NOT NULL AND NOT pinned AND expires_at <= now() AND status <> 'provisioning'
            AND reap_claimed_at IS NULL
          ORDER BY expires_at LIMIT $1",
        limit,
    )
    .fetch_all(conn)
    .await?
    .into_iter()
    .map(|r| (TenantId(r.tenant_id), r.id))
    .collect())
}

/// Locks an expired fork if it still is one (skipping it when another replica holds it): its slug.
pub async fn lock_expired(conn: &mut PgConnection, tenant: TenantId, id: Uuid) -> Result<Option<String>> {
    Ok(sqlx::query_scalar!(
        "SELECT slug FROM workspaces
          WHERE tenant_id = $1 AND id = $2 AND fork_of IS NOT NULL AND NOT pinned AND expires_at <= now()
            AND status <> 'provisioning' AND reap_claimed_at IS NULL
          FOR UPDATE SKIP LOCKED",
        tenant.0,
        id,
    )
    .fetch_optional(conn)
    .await?)
}

/// Deletes a workspace that is disposable — a fork, or one still `provisioning` (a move's
/// destination that never confirmed) — with all of its state; whether there was one.
pub async fn delete_disposable(conn: &mut PgConnection, tenant: TenantId, id: Uuid) -> Result<bool> {
    let found = sqlx::query_scalar!(
        "SELECT 1 AS one FROM workspaces
          WHERE tenant_id = $1 AND id = $2 AND (fork_of IS NOT NULL OR status = 'provisioning') FOR UPDATE",
        tenant.0,
        id,
    )
    .fetch_optional(&mut *conn)
    .await?;
    if found.is_none() {
        return Ok(false);
    }
    // The database lets only a claimed reap of an archived workspace delete its row and its
    // versions (migration 16's guard): deleting a disposable copy is such a reap, claimed and
    // finished in this one transaction, so nobody ever sees it half-way.
    sqlx::query!(
        "UPDATE workspaces SET status = 'archived', reap_claimed_at = now(), reap_owner = $3, updated_at = now()
          WHERE tenant_id = $1 AND id = $2",
        tenant.0,
        id,
        format!("copies:{}", crate::copies::replica_id()),
    )
    .execute(&mut *conn)
    .await?;
    delete_state(conn, tenant, id).await?;
    Ok(true)
}

/// Every row of a workspace (the registry's tables, children first, then the workspace row).
/// The caller has checked it may be deleted.
async fn delete_state(conn: &mut PgConnection, tenant: TenantId, id: Uuid) -> Result<()> {
    crate::workspaces::tables::delete_state(&mut *conn, tenant, &[id], true).await?;
    sqlx::query!("DELETE FROM workspaces WHERE tenant_id = $1 AND id = $2", tenant.0, id).execute(conn).await?;
    Ok(())
}
