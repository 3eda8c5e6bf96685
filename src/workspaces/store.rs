//! Workspace SQL.

use sqlx::PgConnection;

use super::{Bound, Document, Workspace};
use crate::ids::WorkspaceId;
use crate::{
    error::{Error, Result},
    ids::TenantId,
};

/// Runs `query_as!` into a [`Workspace`] with the one column list of a workspace (`w`) pasted
/// between the literals `[$before…]` and `$after` (the query macros accept literals joined by
/// `+`, never a `const`).
macro_rules! workspace {
    ([$($before:literal),+] $after:literal, $($arg:expr),+ $(,)?) => {
        sqlx::query_as!(
            Workspace,
            $($before +)+ r#"w.id AS "id: WorkspaceId", w.slug, w.name, w.status, w.bound_version, w.revision, w.created_at, w.updated_at"#
                + $after,
            $($arg),+
        )
    };
}

/// The lifecycle's statements (`workspaces::lifecycle::store`) read a workspace with it too.
pub(crate) use workspace;

pub async fn insert(conn: &mut PgConnection, tenant: TenantId, id: WorkspaceId, slug: &str, name: &str) -> Result<Workspace> {
    Ok(workspace!(
        ["INSERT INTO workspaces AS w (tenant_id, id, slug, name, bound_version) VALUES ($1, $2, $3, $4, 1) RETURNING "] "",
        tenant.0,
        id.0,
        slug,
        name,
    )
    .fetch_one(conn)
    .await?)
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
    sqlx::query!(
        "INSERT INTO workspace_versions (tenant_id, workspace_id, version, document, digest, created_by) VALUES ($1, $2, $3, $4, $5, $6)",
        tenant.0,
        id.0,
        version,
        doc,
        digest,
        created_by,
    )
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
    Ok(workspace!(
        ["UPDATE workspaces AS w SET bound_version = $4, revision = revision + 1, updated_at = now()
         WHERE tenant_id = $1 AND id = $2 AND bound_version = $3 RETURNING "] "",
        tenant.0,
        id.0,
        from,
        to,
    )
    .fetch_optional(conn)
    .await?)
}

pub async fn list(conn: &mut PgConnection, tenant: TenantId) -> Result<Vec<Workspace>> {
    Ok(workspace!(["SELECT "] " FROM workspaces w WHERE tenant_id = $1 ORDER BY slug", tenant.0).fetch_all(conn).await?)
}

/// The slug of the first workspace (by slug) whose bound configuration has a connector, in one
/// statement (the console's onboarding checklist).
pub async fn first_with_connector(conn: &mut PgConnection, tenant: TenantId) -> Result<Option<String>> {
    Ok(sqlx::query_scalar!(
        "SELECT w.slug FROM workspaces w
           JOIN workspace_versions v ON v.tenant_id = w.tenant_id AND v.workspace_id = w.id AND v.version = w.bound_version
          WHERE w.tenant_id = $1 AND w.status <> 'reaped' AND v.document->'connectors' <> '{}'::jsonb
          ORDER BY w.slug LIMIT 1",
        tenant.0,
    )
    .fetch_optional(conn)
    .await?)
}

/// The workspace with its bound document and which of its connectors' catalogs are fresh in
/// the shared cache, in one query.
pub async fn bound(conn: &mut PgConnection, tenant: TenantId, slug: &str) -> Result<Option<Bound>> {
    // The aggregate and the epoch are expressions the macros cannot see through: the first is
    // never NULL (coalesce), and the second was always read as required ("!").
    let row = sqlx::query!(
        r#"SELECT w.id AS "id: WorkspaceId", w.slug, w.name, w.status, w.bound_version, w.revision, w.created_at, w.updated_at, v.document,
           (SELECT coalesce(jsonb_object_agg(c.connector_id, jsonb_build_array(c.config_key, c.fetched_at)), '{}')
              FROM connector_catalogs c
             WHERE c.tenant_id = w.tenant_id AND c.workspace_id = w.id
               AND c.fetched_at > now() - make_interval(secs => $3)) AS "catalogs!",
           (SELECT t.epoch FROM tenants t WHERE t.id = w.tenant_id) AS "epoch!"
         FROM workspaces w
         JOIN workspace_versions v ON v.tenant_id = w.tenant_id AND v.workspace_id = w.id AND v.version = w.bound_version
         WHERE w.tenant_id = $1 AND w.slug = $2"#,
        tenant.0,
        slug,
        super::CATALOG_TTL.as_secs_f64(),
    )
    .fetch_optional(conn)
    .await?;
    let Some(row) = row else { return Ok(None) };
    let document: Document =
        serde_json::from_value(row.document).map_err(|e| anyhow::anyhow!("stored configuration unreadable: {e}"))?;
    let catalogs = serde_json::from_value(row.catalogs).map_err(|e| anyhow::anyhow!("catalog stamps unreadable: {e}"))?;
    Ok(Some(Bound {
        workspace: Workspace {
            id: row.id,
            slug: row.slug,
            name: row.name,
            status: row.status,
            bound_version: row.bound_version,
            revision: row.revision,
            created_at: row.created_at,
            updated_at: row.updated_at,
        },
        document,
        catalogs,
        epoch: row.epoch,
        keys: Default::default(),
        redactor: Default::default(),
    }))
}

/// A workspace's slug by its id.
pub async fn slug_of(conn: &mut PgConnection, tenant: TenantId, id: uuid::Uuid) -> Result<Option<String>> {
    Ok(sqlx::query_scalar!("SELECT slug FROM workspaces WHERE tenant_id = $1 AND id = $2", tenant.0, id)
        .fetch_optional(conn)
        .await?)
}
