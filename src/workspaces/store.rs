//! Workspace SQL.

use sqlx::{PgConnection, Row, postgres::PgRow};

use super::{Bound, Document, Workspace};
use crate::ids::WorkspaceId;
use crate::{
    error::{Error, Result},
    ids::TenantId,
};

macro_rules! columns {
    () => {
        "w.id, w.slug, w.name, w.status, w.bound_version, w.revision, w.created_at, w.updated_at"
    };
}

pub(crate) fn workspace(row: &PgRow) -> Result<Workspace> {
    Ok(Workspace {
        id: WorkspaceId(row.try_get("id")?),
        slug: row.try_get("slug")?,
        name: row.try_get("name")?,
        status: row.try_get("status")?,
        bound_version: row.try_get("bound_version")?,
        revision: row.try_get("revision")?,
        created_at: row.try_get("created_at")?,
        updated_at: row.try_get("updated_at")?,
    })
}

pub async fn insert(conn: &mut PgConnection, tenant: TenantId, id: WorkspaceId, slug: &str, name: &str) -> Result<Workspace> {
    let row = sqlx::query(concat!(
        "INSERT INTO workspaces AS w (tenant_id, id, slug, name, bound_version) VALUES ($1, $2, $3, $4, 1) RETURNING ",
        columns!()
    ))
    .bind(tenant)
    .bind(id)
    .bind(slug)
    .bind(name)
    .fetch_one(conn)
    .await?;
    workspace(&row)
}

pub async fn insert_version(
    conn: &mut PgConnection,
    tenant: TenantId,
    id: WorkspaceId,
    version: i32,
    document: &Document,
    digest: &str,
    created_by: &str,
) -> Result<()> {
    let doc = serde_json::to_value(document).map_err(anyhow::Error::from)?;
    sqlx::query(
        "INSERT INTO workspace_versions (tenant_id, workspace_id, version, document, digest, created_by) VALUES ($1, $2, $3, $4, $5, $6)",
    )
    .bind(tenant)
    .bind(id)
    .bind(version)
    .bind(doc)
    .bind(digest)
    .bind(created_by)
    .execute(conn)
    .await
    .map_err(|e| {
        Error::from(e).on_constraint("workspace_versions_pkey", || Error::Precondition {
            code: "binding_changed",
            message: "the workspace's configuration changed; reload and retry".into(),
        })
    })?;
    Ok(())
}

/// Binds `to` only if the workspace still runs `from`: the compare-and-set of every edit.
pub async fn bind(conn: &mut PgConnection, tenant: TenantId, id: WorkspaceId, from: i32, to: i32) -> Result<Option<Workspace>> {
    sqlx::query(concat!(
        "UPDATE workspaces AS w SET bound_version = $4, revision = revision + 1, updated_at = now()
         WHERE tenant_id = $1 AND id = $2 AND bound_version = $3 RETURNING ",
        columns!()
    ))
    .bind(tenant)
    .bind(id)
    .bind(from)
    .bind(to)
    .fetch_optional(conn)
    .await?
    .as_ref()
    .map(workspace)
    .transpose()
}

pub async fn list(conn: &mut PgConnection, tenant: TenantId) -> Result<Vec<Workspace>> {
    sqlx::query(concat!("SELECT ", columns!(), " FROM workspaces w WHERE tenant_id = $1 ORDER BY slug"))
        .bind(tenant)
        .fetch_all(conn)
        .await?
        .iter()
        .map(workspace)
        .collect()
}

/// The workspace with its bound document and which of its connectors' catalogs are fresh in
/// the shared cache, in one query.
pub async fn bound(conn: &mut PgConnection, tenant: TenantId, slug: &str) -> Result<Option<Bound>> {
    let row = sqlx::query(concat!(
        "SELECT ",
        columns!(),
        ", v.document,
           (SELECT coalesce(jsonb_object_agg(c.connector_id, jsonb_build_array(c.config_key, c.fetched_at)), '{}')
              FROM connector_catalogs c
             WHERE c.tenant_id = w.tenant_id AND c.workspace_id = w.id
               AND c.fetched_at > now() - make_interval(secs => $3)) AS catalogs,
           (SELECT t.epoch FROM tenants t WHERE t.id = w.tenant_id) AS epoch
         FROM workspaces w
         JOIN workspace_versions v ON v.tenant_id = w.tenant_id AND v.workspace_id = w.id AND v.version = w.bound_version
         WHERE w.tenant_id = $1 AND w.slug = $2"
    ))
    .bind(tenant)
    .bind(slug)
    .bind(super::CATALOG_TTL.as_secs_f64())
    .fetch_optional(conn)
    .await?;
    let Some(row) = row else { return Ok(None) };
    let document: serde_json::Value = row.try_get("document")?;
    let document: Document =
        serde_json::from_value(document).map_err(|e| anyhow::anyhow!("stored configuration unreadable: {e}"))?;
    let catalogs: serde_json::Value = row.try_get("catalogs")?;
    let catalogs = serde_json::from_value(catalogs).map_err(|e| anyhow::anyhow!("catalog stamps unreadable: {e}"))?;
    Ok(Some(Bound {
        workspace: workspace(&row)?,
        document,
        catalogs,
        epoch: row.try_get("epoch")?,
        keys: Default::default(),
        redactor: Default::default(),
    }))
}

/// A workspace's slug by its id.
pub async fn slug_of(conn: &mut PgConnection, tenant: TenantId, id: uuid::Uuid) -> Result<Option<String>> {
    Ok(sqlx::query_scalar("SELECT slug FROM workspaces WHERE tenant_id = $1 AND id = $2")
        .bind(tenant)
        .bind(id)
        .fetch_optional(conn)
        .await?)
}
