//! Key-value SQL. "Live" means not expired by the database clock.

use serde_json::Value;
use sqlx::{PgConnection, Row, postgres::PgRow};

use super::{Entry, PRUNE_BATCH};
use crate::{error::Result, ids::TenantId};

/// The condition "not expired by the database clock", spliced into static SQL.
macro_rules! live {
    () => {
        "(expires_at IS NULL OR expires_at > now())"
    };
}

fn entry(row: &PgRow) -> Result<Entry> {
    Ok(Entry {
        key: row.try_get("key")?,
        value: row.try_get("value")?,
        expires_at: row.try_get("expires_at")?,
        updated_at: row.try_get("updated_at")?,
    })
}

/// The prune statement (`$1` tenant, `$2` batch). A MATERIALIZED CTE runs the locking
/// sub-select once. As an IN (…) sub-plan it may be rescanned per outer row, and each rescan
/// skips the rows this statement already deleted, so the batch would grow without bound.
pub const PRUNE: &str = "WITH doomed AS MATERIALIZED (
         SELECT key FROM kv_entries WHERE tenant_id = $1 AND expires_at <= now()
         ORDER BY expires_at LIMIT $2 FOR UPDATE SKIP LOCKED)
     DELETE FROM kv_entries k USING doomed WHERE k.tenant_id = $1 AND k.key = doomed.key";

/// Deletes at most [`PRUNE_BATCH`] expired rows of the tenant, skipping rows another
/// writer holds. Served by the partial index `kv_entries_expiry`.
pub async fn prune(conn: &mut PgConnection, tenant: TenantId) -> Result<u64> {
    let done = sqlx::query(PRUNE).bind(tenant).bind(PRUNE_BATCH).execute(conn).await?;
    Ok(done.rows_affected())
}

pub async fn get(conn: &mut PgConnection, tenant: TenantId, key: &str) -> Result<Option<Entry>> {
    sqlx::query(concat!(
        "SELECT key, value, expires_at, updated_at FROM kv_entries WHERE tenant_id = $1 AND key = $2 AND ",
        live!(),
        ""
    ))
    .bind(tenant)
    .bind(key)
    .fetch_optional(conn)
    .await?
    .as_ref()
    .map(entry)
    .transpose()
}

/// Inserts or replaces; returns the new entry and the live value it replaced.
pub async fn upsert(
    conn: &mut PgConnection,
    tenant: TenantId,
    key: &str,
    value: &Value,
    ttl_ms: Option<i64>,
) -> Result<(Entry, Option<Value>)> {
    let row = sqlx::query(concat!(
        "WITH old AS (SELECT value FROM kv_entries WHERE tenant_id = $1 AND key = $2 AND ",
        live!(),
        ")
         INSERT INTO kv_entries (tenant_id, key, value, expires_at)
         VALUES ($1, $2, $3, now() + $4 * interval '1 millisecond')
         ON CONFLICT (tenant_id, key) DO UPDATE
             SET value = EXCLUDED.value, expires_at = EXCLUDED.expires_at, updated_at = now()
         RETURNING key, value, expires_at, updated_at, (SELECT value FROM old) AS before"
    ))
    .bind(tenant)
    .bind(key)
    .bind(value)
    .bind(ttl_ms)
    .fetch_one(conn)
    .await?;
    Ok((entry(&row)?, row.try_get("before")?))
}

/// Inserts only when no live row holds the key (an expired one is replaced).
pub async fn insert_if_absent(
    conn: &mut PgConnection,
    tenant: TenantId,
    key: &str,
    value: &Value,
    ttl_ms: Option<i64>,
) -> Result<bool> {
    let row = sqlx::query(
        "INSERT INTO kv_entries (tenant_id, key, value, expires_at)
         VALUES ($1, $2, $3, now() + $4 * interval '1 millisecond')
         ON CONFLICT (tenant_id, key) DO UPDATE
             SET value = EXCLUDED.value, expires_at = EXCLUDED.expires_at, updated_at = now()
             WHERE kv_entries.expires_at IS NOT NULL AND kv_entries.expires_at <= now()
         RETURNING 1",
    )
    .bind(tenant)
    .bind(key)
    .bind(value)
    .bind(ttl_ms)
    .fetch_optional(conn)
    .await?;
    Ok(row.is_some())
}

/// Replaces the live value only when it equals `expected`.
pub async fn update_if_equal(
    conn: &mut PgConnection,
    tenant: TenantId,
    key: &str,
    expected: &Value,
    next: &Value,
    ttl_ms: Option<i64>,
) -> Result<bool> {
    let row = sqlx::query(concat!(
        "UPDATE kv_entries SET value = $4, expires_at = now() + $5 * interval '1 millisecond', updated_at = now()
         WHERE tenant_id = $1 AND key = $2 AND value = $3 AND ",
        live!(),
        "
         RETURNING 1"
    ))
    .bind(tenant)
    .bind(key)
    .bind(expected)
    .bind(next)
    .bind(ttl_ms)
    .fetch_optional(conn)
    .await?;
    Ok(row.is_some())
}

/// Deletes the live row (only when it equals `expected`, if given); returns its value.
pub async fn delete(conn: &mut PgConnection, tenant: TenantId, key: &str, expected: Option<&Value>) -> Result<Option<Value>> {
    let row = sqlx::query(concat!(
        "DELETE FROM kv_entries WHERE tenant_id = $1 AND key = $2 AND ",
        live!(),
        " AND ($3::jsonb IS NULL OR value = $3)
         RETURNING value"
    ))
    .bind(tenant)
    .bind(key)
    .bind(expected)
    .fetch_optional(conn)
    .await?;
    Ok(row.map(|r| r.try_get("value")).transpose()?)
}

pub async fn list(
    conn: &mut PgConnection,
    tenant: TenantId,
    prefix: &str,
    upper: Option<&str>,
    after: Option<&str>,
    limit: i64,
) -> Result<Vec<Entry>> {
    sqlx::query(concat!(
        "SELECT key, value, expires_at, updated_at FROM kv_entries
         WHERE tenant_id = $1 AND key >= $2 AND ($3::text IS NULL OR key < $3) AND ($4::text IS NULL OR key > $4) AND ",
        live!(),
        "
         ORDER BY key LIMIT $5"
    ))
    .bind(tenant)
    .bind(prefix)
    .bind(upper)
    .bind(after)
    .bind(limit)
    .fetch_all(conn)
    .await?
    .iter()
    .map(entry)
    .collect()
}
