//! Admin-log SQL.

use sqlx::PgConnection;
use uuid::Uuid;

use super::{Entry, Record};
use crate::{error::Result, ids::TenantId};

/// Appends one row; call inside the transaction that makes the change it describes.
pub async fn record(conn: &mut PgConnection, entry: Entry<'_>) -> Result<()> {
    sqlx::query!(
        "INSERT INTO admin_log (id, tenant_id, actor, action, target, before, after, request_id)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
        Uuid::now_v7(),
        entry.tenant.map(|t| t.0),
        entry.audit.actor,
        entry.action,
        entry.target,
        entry.before,
        entry.after,
        entry.audit.request_id,
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// A tenant's rows (or, with `None` in platform context, the platform's), newest first,
/// keyset-paged by id (ids are time-ordered).
pub async fn list(conn: &mut PgConnection, tenant: Option<TenantId>, before: Option<Uuid>, limit: i64) -> Result<Vec<Record>> {
    Ok(sqlx::query_as!(
        Record,
        "SELECT id, tenant_id, actor, action, target, before, after, request_id, at FROM admin_log
         WHERE tenant_id IS NOT DISTINCT FROM $1 AND ($2::uuid IS NULL OR id < $2)
         ORDER BY id DESC LIMIT $3",
        tenant.map(|t| t.0),
        before,
        limit,
    )
    .fetch_all(conn)
    .await?)
}

/// What the console's admin-log page narrows by; every field is optional.
#[derive(Debug, Default, Clone)]
pub struct Filter {
    /// Exactly this actor (`member:<id>`, `cli`, …).
    pub actor: Option<String>,
    /// Actions starting with this (`token.` matches `token.create` and `token.revoke`).
    pub action_prefix: Option<String>,
    /// Exactly this target.
    pub target: Option<String>,
    pub since: Option<chrono::DateTime<chrono::Utc>>,
    pub until: Option<chrono::DateTime<chrono::Utc>>,
}

/// [`list`] narrowed by `filter`, with the same keyset paging (newest first, `before` an id).
/// The prefix is matched with `starts_with`, so `%` and `_` in it are plain characters.
pub async fn list_filtered(
    conn: &mut PgConnection,
    tenant: Option<TenantId>,
    filter: &Filter,
    before: Option<Uuid>,
    limit: i64,
) -> Result<Vec<Record>> {
    Ok(sqlx::query_as!(
        Record,
        "SELECT id, tenant_id, actor, action, target, before, after, request_id, at FROM admin_log
         WHERE tenant_id IS NOT DISTINCT FROM $1 AND ($2::uuid IS NULL OR id < $2)
           AND ($4::text IS NULL OR actor = $4) AND ($5::text IS NULL OR starts_with(action, $5))
           AND ($6::text IS NULL OR target = $6)
           AND ($7::timestamptz IS NULL OR at >= $7) AND ($8::timestamptz IS NULL OR at < $8)
         ORDER BY id DESC LIMIT $3",
        tenant.map(|t| t.0),
        before,
        limit,
        filter.actor,
        filter.action_prefix,
        filter.target,
        filter.since,
        filter.until,
    )
    .fetch_all(conn)
    .await?)
}
