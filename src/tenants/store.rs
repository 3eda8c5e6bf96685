//! Tenant SQL.

use chrono::{DateTime, Utc};
use sqlx::{PgConnection, PgExecutor};

use super::{Status, Tenant};
use crate::error::Result;
use crate::ids::TenantId;

/// A `tenants` row before its status is parsed.
struct Row {
    id: TenantId,
    slug: String,
    name: String,
    status: String,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
}

impl TryFrom<Row> for Tenant {
    type Error = crate::error::Error;

    fn try_from(row: Row) -> Result<Tenant> {
        Ok(Tenant {
            id: row.id,
            slug: row.slug,
            name: row.name,
            status: Status::parse(&row.status)?,
            created_at: row.created_at,
            updated_at: row.updated_at,
        })
    }
}

pub async fn insert(conn: &mut PgConnection, id: TenantId, slug: &str, name: &str) -> Result<Tenant> {
    sqlx::query_as!(
        Row,
        r#"INSERT INTO tenants (id, slug, name) VALUES ($1, $2, $3)
           RETURNING id AS "id: TenantId", slug, name, status, created_at, updated_at"#,
        id.0,
        slug,
        name,
    )
    .fetch_one(conn)
    .await?
    .try_into()
}

pub async fn list(conn: &mut PgConnection) -> Result<Vec<Tenant>> {
    sqlx::query_as!(Row, r#"SELECT id AS "id: TenantId", slug, name, status, created_at, updated_at FROM tenants ORDER BY slug"#)
        .fetch_all(conn)
        .await?
        .into_iter()
        .map(Tenant::try_from)
        .collect()
}

pub async fn by_slug<'e>(executor: impl PgExecutor<'e>, slug: &str) -> Result<Option<Tenant>> {
    sqlx::query_as!(
        Row,
        r#"SELECT id AS "id: TenantId", slug, name, status, created_at, updated_at FROM tenants WHERE slug = $1"#,
        slug,
    )
    .fetch_optional(executor)
    .await?
    .map(Tenant::try_from)
    .transpose()
}

/// Compare-and-set on the status the caller read; `None` when it changed meanwhile.
pub async fn update_status(conn: &mut PgConnection, id: TenantId, from: Status, to: Status) -> Result<Option<Tenant>> {
    sqlx::query_as!(
        Row,
        r#"UPDATE tenants SET status = $3, updated_at = now() WHERE id = $1 AND status = $2
           RETURNING id AS "id: TenantId", slug, name, status, created_at, updated_at"#,
        id.0,
        from.as_str(),
        to.as_str(),
    )
    .fetch_optional(conn)
    .await?
    .map(Tenant::try_from)
    .transpose()
}

pub async fn count(conn: &mut PgConnection) -> Result<i64> {
    Ok(sqlx::query_scalar!(r#"SELECT count(*) AS "count!" FROM tenants"#).fetch_one(conn).await?)
}

pub async fn by_id(conn: &mut PgConnection, id: TenantId) -> Result<Option<Tenant>> {
    sqlx::query_as!(
        Row,
        r#"SELECT id AS "id: TenantId", slug, name, status, created_at, updated_at FROM tenants WHERE id = $1"#,
        id.0,
    )
    .fetch_optional(conn)
    .await?
    .map(Tenant::try_from)
    .transpose()
}

/// One step of a move, as `tenant_moves` records it (see its migration).
pub struct MoveRecord<'a> {
    pub tenant: TenantId,
    pub direction: &'static str,
    pub export_id: uuid::Uuid,
    pub manifest_digest: &'a str,
    pub base_url: Option<&'a str>,
    pub prior_status: Option<Status>,
}

/// Records a move step. A second import of one export violates `tenant_moves_import_once`,
/// a second seal `tenant_moves_one_seal`: the caller maps both by name.
pub async fn record_move(conn: &mut PgConnection, m: &MoveRecord<'_>) -> Result<()> {
    sqlx::query!(
        "INSERT INTO tenant_moves (tenant_id, id, direction, export_id, manifest_digest, base_url, prior_status)
         VALUES ($1, $2, $3, $4, $5, $6, $7)",
        m.tenant.0,
        uuid::Uuid::now_v7(),
        m.direction,
        m.export_id,
        m.manifest_digest,
        m.base_url,
        m.prior_status.map(Status::as_str),
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// Where the tenant's live seal says it went.
pub async fn moved_to(conn: &mut PgConnection, tenant: TenantId) -> Result<Option<String>> {
    Ok(sqlx::query_scalar!(
        "SELECT base_url FROM tenant_moves WHERE tenant_id = $1 AND direction = 'out' AND unsealed_at IS NULL",
        tenant.0,
    )
    .fetch_optional(conn)
    .await?
    .flatten())
}

/// Lifts the live seal; the status it recorded before sealing, or `None` when none is live.
pub async fn unseal_record(conn: &mut PgConnection, tenant: TenantId) -> Result<Option<Status>> {
    let prior = sqlx::query_scalar!(
        "UPDATE tenant_moves SET unsealed_at = now()
          WHERE tenant_id = $1 AND direction = 'out' AND unsealed_at IS NULL
         RETURNING prior_status",
        tenant.0,
    )
    .fetch_optional(conn)
    .await?
    .flatten();
    prior.map(|s| Status::parse(&s)).transpose()
}

/// The import this deployment recorded for `tenant`: (export id, manifest digest).
pub async fn imported(conn: &mut PgConnection, tenant: TenantId) -> Result<Option<(uuid::Uuid, String)>> {
    Ok(sqlx::query!(
        "SELECT export_id, manifest_digest FROM tenant_moves WHERE tenant_id = $1 AND direction = 'in' ORDER BY at DESC LIMIT 1",
        tenant.0,
    )
    .fetch_optional(conn)
    .await?
    .map(|r| (r.export_id, r.manifest_digest)))
}
