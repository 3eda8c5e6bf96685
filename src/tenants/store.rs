//! Tenant SQL.

use sqlx::{PgConnection, PgExecutor, Row, postgres::PgRow};
use uuid::Uuid;

use super::{Status, Tenant};
use crate::error::Result;
use crate::ids::TenantId;

macro_rules! columns {
    () => {
        "id, slug, name, status, created_at, updated_at"
    };
}

fn from_row(row: PgRow) -> Result<Tenant> {
    Ok(Tenant {
        id: TenantId(row.try_get::<Uuid, _>("id")?),
        slug: row.try_get("slug")?,
        name: row.try_get("name")?,
        status: Status::parse(row.try_get("status")?)?,
        created_at: row.try_get("created_at")?,
        updated_at: row.try_get("updated_at")?,
    })
}

pub async fn insert(conn: &mut PgConnection, id: TenantId, slug: &str, name: &str) -> Result<Tenant> {
    let row = sqlx::query(concat!("INSERT INTO tenants (id, slug, name) VALUES ($1, $2, $3) RETURNING ", columns!()))
        .bind(id)
        .bind(slug)
        .bind(name)
        .fetch_one(conn)
        .await?;
    from_row(row)
}

pub async fn list(conn: &mut PgConnection) -> Result<Vec<Tenant>> {
    sqlx::query(concat!("SELECT ", columns!(), " FROM tenants ORDER BY slug"))
        .fetch_all(conn)
        .await?
        .into_iter()
        .map(from_row)
        .collect()
}

pub async fn by_slug<'e>(executor: impl PgExecutor<'e>, slug: &str) -> Result<Option<Tenant>> {
    sqlx::query(concat!("SELECT ", columns!(), " FROM tenants WHERE slug = $1"))
        .bind(slug)
        .fetch_optional(executor)
        .await?
        .map(from_row)
        .transpose()
}

/// Compare-and-set on the status the caller read; `None` when it changed meanwhile.
pub async fn update_status(conn: &mut PgConnection, id: TenantId, from: Status, to: Status) -> Result<Option<Tenant>> {
    sqlx::query(concat!(
        "UPDATE tenants SET status = $3, updated_at = now() WHERE id = $1 AND status = $2 RETURNING ",
        columns!()
    ))
    .bind(id)
    .bind(from.as_str())
    .bind(to.as_str())
    .fetch_optional(conn)
    .await?
    .map(from_row)
    .transpose()
}

pub async fn count(conn: &mut PgConnection) -> Result<i64> {
    Ok(sqlx::query_scalar("SELECT count(*) FROM tenants").fetch_one(conn).await?)
}
