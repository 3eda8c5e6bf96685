//! Admin-log SQL.

use sqlx::PgConnection;
use uuid::Uuid;

use super::{Entry, Record};
use crate::{error::Result, tenants::TenantId};

/// Appends one row; call inside the transaction that makes the change it describes.
pub async fn record(conn: &mut PgConnection, entry: Entry<'_>) -> Result<()> {
    sqlx::query(
        "INSERT INTO admin_log (id, tenant_id, actor, action, target, before, after, request_id)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
    )
    .bind(Uuid::now_v7())
    .bind(entry.tenant.map(|t| t.0))
    .bind(&entry.audit.actor)
    .bind(entry.action)
    .bind(&entry.target)
    .bind(&entry.before)
    .bind(&entry.after)
    .bind(&entry.audit.request_id)
    .execute(conn)
    .await?;
    Ok(())
}

/// A tenant's rows (or, with `None` in platform context, the platform's), newest first,
/// keyset-paged by id (ids are time-ordered).
pub async fn list(conn: &mut PgConnection, tenant: Option<TenantId>, before: Option<Uuid>, limit: i64) -> Result<Vec<Record>> {
    Ok(sqlx::query_as::<_, Record>(
        "SELECT id, tenant_id, actor, action, target, before, after, request_id, at FROM admin_log
         WHERE tenant_id IS NOT DISTINCT FROM $1 AND ($2::uuid IS NULL OR id < $2)
         ORDER BY id DESC LIMIT $3",
    )
    .bind(tenant.map(|t| t.0))
    .bind(before)
    .bind(limit)
    .fetch_all(conn)
    .await?)
}
