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
