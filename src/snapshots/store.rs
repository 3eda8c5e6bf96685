//! Snapshot SQL: what an export reads, per-subject keys, and what a restore writes.

use sqlx::PgConnection;
use uuid::Uuid;

use crate::{error::Result, ids::TenantId, vault::slots::Slot};

/// The workspace's stored catalogs, as JSON rows without tenant and workspace.
pub async fn catalogs(conn: &mut PgConnection, tenant: TenantId, workspace: Uuid) -> Result<Vec<serde_json::Value>> {
    Ok(sqlx::query_scalar!(
        r#"SELECT to_jsonb(c) - 'tenant_id' - 'workspace_id' AS "row!" FROM connector_catalogs c
          WHERE tenant_id = $1 AND workspace_id = $2 ORDER BY connector_id"#,
        tenant.0,
        workspace,
    )
    .fetch_all(conn)
    .await?)
}

/// Every credential of the workspace: (connector, owner, envelope, fields).
pub async fn credentials(
    conn: &mut PgConnection,
    tenant: TenantId,
    workspace: Uuid,
) -> Result<Vec<(String, String, String, serde_json::Value)>> {
    Ok(sqlx::query!(
        "SELECT connector_id, owner, envelope, fields FROM credentials WHERE tenant_id = $1 AND workspace_id = $2
          ORDER BY connector_id, owner",
        tenant.0,
        workspace,
    )
    .fetch_all(conn)
    .await?
    .into_iter()
    .map(|r| (r.connector_id, r.owner, r.envelope, r.fields))
    .collect())
}

/// The workspace's activity rows (without tenant and workspace), each with its subject: the
/// member behind a token or an MCP grant (`member:<id>`), else the actor id itself.
pub async fn activity(conn: &mut PgConnection, tenant: TenantId, workspace: Uuid) -> Result<Vec<(String, serde_json::Value)>> {
    Ok(sqlx::query!(
        r#"SELECT coalesce(
                  (SELECT 'member:' || m.id FROM access_tokens t
                     JOIN members m ON m.tenant_id = t.tenant_id AND m.issuer = t.principal_issuer AND m.subject = t.principal_subject
                    WHERE t.tenant_id = a.tenant_id AND t.id::text = a.actor_id),
                  (SELECT 'member:' || g.member_id FROM mcp_grants g WHERE g.tenant_id = a.tenant_id AND g.id::text = a.actor_id),
                  a.actor_id) AS "subject!",
                to_jsonb(a) - 'tenant_id' - 'workspace_id' AS "row!"
           FROM activity a WHERE a.tenant_id = $1 AND a.workspace_id = $2 ORDER BY a.occurred_at, a.id"#,
        tenant.0,
        workspace,
    )
    .fetch_all(conn)
    .await?
    .into_iter()
    .map(|r| (r.subject, r.row))
    .collect())
}

/// The subject's sealed key: `Some(None)` when it was destroyed (erased), `None` when absent.
pub async fn subject_key(conn: &mut PgConnection, tenant: TenantId, subject: &str) -> Result<Option<Option<String>>> {
    Ok(sqlx::query_scalar!("SELECT envelope FROM subject_keys WHERE tenant_id = $1 AND subject = $2", tenant.0, subject)
        .fetch_optional(conn)
        .await?)
}

/// The tenant's live subject keys: (subject, sealed key).
pub async fn live_subject_keys(conn: &mut PgConnection, tenant: TenantId) -> Result<Vec<(String, String)>> {
    Ok(sqlx::query!(
        r#"SELECT subject, envelope AS "envelope!" FROM subject_keys WHERE tenant_id = $1 AND envelope IS NOT NULL"#,
        tenant.0,
    )
    .fetch_all(conn)
    .await?
    .into_iter()
    .map(|r| (r.subject, r.envelope))
    .collect())
}

/// Stores a new subject key unless one exists (live or destroyed); whether it was stored.
pub async fn insert_subject_key(
    conn: &mut PgConnection,
    tenant: TenantId,
    subject: &str,
    key_id: &str,
    envelope: &str,
) -> Result<bool> {
    Ok(sqlx::query!(
        "INSERT INTO subject_keys (tenant_id, subject, key_id, envelope) VALUES ($1, $2, $3, $4)
         ON CONFLICT (tenant_id, subject) DO NOTHING",
        tenant.0,
        subject,
        key_id,
        envelope,
    )
    .execute(conn)
    .await?
    .rows_affected()
        == 1)
}

/// The restored workspace's row, `provisioning` until its move confirms.
pub async fn insert_provisioning(conn: &mut PgConnection, tenant: TenantId, id: Uuid, slug: &str, name: &str) -> Result<()> {
    sqlx::query!(
        "INSERT INTO workspaces (tenant_id, id, slug, name, status, bound_version) VALUES ($1, $2, $3, $4, 'provisioning', 1)",
        tenant.0,
        id,
        slug,
        name,
    )
    .execute(conn)
    .await
    .map_err(|e| {
        crate::error::Error::from(e).on_constraint("workspaces_slug_key", || crate::error::Error::Conflict {
            code: "slug_taken",
            message: format!("this tenant already has a workspace `{slug}`"),
        })
    })?;
    Ok(())
}

pub async fn restore_catalog(conn: &mut PgConnection, tenant: TenantId, workspace: Uuid, row: &serde_json::Value) -> Result<()> {
    sqlx::query!(
        "INSERT INTO connector_catalogs SELECT * FROM jsonb_populate_record(null::connector_catalogs,
            $3 || jsonb_build_object('tenant_id', $1::uuid, 'workspace_id', $2::uuid))",
        tenant.0,
        workspace,
        row,
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// Restores an activity row under a fresh id (the source may still hold the original).
pub async fn restore_activity(conn: &mut PgConnection, tenant: TenantId, workspace: Uuid, row: &serde_json::Value) -> Result<()> {
    sqlx::query!(
        "INSERT INTO activity SELECT * FROM jsonb_populate_record(null::activity,
            $3 || jsonb_build_object('tenant_id', $1::uuid, 'workspace_id', $2::uuid, 'id', gen_random_uuid()))",
        tenant.0,
        workspace,
        row,
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// Inserts a restored credential into its slot, which carries the tenant (personal ones only
/// while the member exists).
pub async fn restore_credential(
    conn: &mut PgConnection,
    slot: &Slot<'_>,
    key_id: &str,
    envelope: &str,
    fields: &serde_json::Value,
    by: &str,
) -> Result<bool> {
    Ok(sqlx::query!(
        "INSERT INTO credentials (tenant_id, workspace_id, connector_id, owner, member_id, key_id, envelope, fields, updated_by)
         SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9
          WHERE $5::uuid IS NULL OR EXISTS (SELECT 1 FROM members WHERE tenant_id = $1 AND id = $5)",
        slot.tenant.0,
        slot.workspace,
        slot.connector,
        slot.owner.as_text(),
        slot.owner.member_id(),
        key_id,
        envelope,
        fields,
        by,
    )
    .execute(conn)
    .await?
    .rows_affected()
        == 1)
}

/// `provisioning → active` for a restored workspace; whether it was still provisioning.
pub async fn activate(conn: &mut PgConnection, tenant: TenantId, id: Uuid) -> Result<bool> {
    Ok(sqlx::query!(
        "UPDATE workspaces SET status = 'active', revision = revision + 1, updated_at = now()
          WHERE tenant_id = $1 AND id = $2 AND status = 'provisioning'",
        tenant.0,
        id,
    )
    .execute(conn)
    .await?
    .rows_affected()
        == 1)
}
