//! Key-value SQL. "Live" means not expired by the database clock.

use serde_json::Value;
use sqlx::PgConnection;

use super::{Entry, PRUNE_BATCH};
use crate::{error::Result, ids::TenantId};

/// The prune statement (`$1` tenant, `$2` batch). Kept a runtime string: `tests/ops.rs`
/// explains this same text to check its plan. A MATERIALIZED CTE runs the locking
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

// "Live" below is `(expires_at IS NULL OR expires_at > now())`, written out in each statement
// (the query macros take one literal).

pub async fn get(conn: &mut PgConnection, tenant: TenantId, key: &str) -> Result<Option<Entry>> {
    Ok(sqlx::query_as!(
        Entry,
        "SELECT key, value, expires_at, updated_at FROM kv_entries
         WHERE tenant_id = $1 AND key = $2 AND (expires_at IS NULL OR expires_at > now())",
        tenant.0,
        key,
    )
    .fetch_optional(conn)
    .await?)
}

/// Inserts or replaces; returns the new entry and the live value it replaced.
pub async fn upsert(
    conn: &mut PgConnection,
    tenant: TenantId,
    key: &str,
    value: &Value,
    ttl_ms: Option<i64>,
) -> Result<(Entry, Option<Value>)> {
    let row = sqlx::query!(
        r#"WITH old AS (SELECT value FROM kv_entries
                        WHERE tenant_id = $1 AND key = $2 AND (expires_at IS NULL OR expires_at > now()))
           INSERT INTO kv_entries (tenant_id, key, value, expires_at)
           VALUES ($1, $2, $3, now() + $4::bigint * interval '1 millisecond')
           ON CONFLICT (tenant_id, key) DO UPDATE
               SET value = EXCLUDED.value, expires_at = EXCLUDED.expires_at, updated_at = now()
           RETURNING key, value, expires_at, updated_at, (SELECT value FROM old) AS "before?""#,
        tenant.0,
        key,
        value,
        ttl_ms,
    )
    .fetch_one(conn)
    .await?;
    let entry = Entry { key: row.key, value: row.value, expires_at: row.expires_at, updated_at: row.updated_at };
    Ok((entry, row.before))
}

/// The admin-log row a compare-and-set writes when it wins (`before`/`after` as logged).
pub struct Logged<'a> {
    pub id: uuid::Uuid,
    pub audit: &'a crate::admin_log::Audit,
    pub target: String,
    pub before: Option<Value>,
    pub after: Option<Value>,
}

/// What a compare-and-set decides with: the conditional statement at its heart.
#[derive(Clone, Copy)]
pub enum Decision<'a> {
    /// Insert only when no live row holds the key (an expired one is replaced).
    InsertIfAbsent { value: &'a Value, ttl_ms: Option<i64> },
    /// Replace the live value only when it equals `expected`.
    UpdateIfEqual { expected: &'a Value, next: &'a Value, ttl_ms: Option<i64> },
    /// Delete the live row only when it equals `expected`.
    DeleteIfEqual { expected: &'a Value },
}

/// Prunes up to `prune` expired rows of other keys (none when 0), decides and logs a win in
/// one statement (the `gatehouse_kv_cas` function, which takes its own scope first); true when
/// this call won. Run it alone through
/// [`crate::db::Db::one_statement`] (one round trip), or inside a transaction already scoped to
/// `tenant`, where the settings it takes change nothing.
pub async fn compare_and_set(
    conn: &mut PgConnection,
    tenant: TenantId,
    key: &str,
    decision: Decision<'_>,
    prune: i64,
    log: Logged<'_>,
) -> Result<bool> {
    let (kind, expected, next, ttl_ms) = match decision {
        Decision::InsertIfAbsent { value, ttl_ms } => ("insert", None, Some(value), ttl_ms),
        Decision::UpdateIfEqual { expected, next, ttl_ms } => ("update", Some(expected), Some(next), ttl_ms),
        Decision::DeleteIfEqual { expected } => ("delete", Some(expected), None, None),
    };
    Ok(sqlx::query_scalar!(
        r#"SELECT gatehouse_kv_cas($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13) AS "won!""#,
        tenant.0,
        key,
        kind,
        expected,
        next,
        ttl_ms,
        prune,
        log.id,
        &log.audit.actor,
        &log.target,
        log.before.as_ref(),
        log.after.as_ref(),
        log.audit.request_id.as_deref(),
    )
    .fetch_one(conn)
    .await?)
}

/// Deletes the live row (only when it equals `expected`, if given); returns its value.
pub async fn delete(conn: &mut PgConnection, tenant: TenantId, key: &str, expected: Option<&Value>) -> Result<Option<Value>> {
    Ok(sqlx::query_scalar!(
        "DELETE FROM kv_entries
         WHERE tenant_id = $1 AND key = $2 AND (expires_at IS NULL OR expires_at > now())
           AND ($3::jsonb IS NULL OR value = $3)
         RETURNING value",
        tenant.0,
        key,
        expected,
    )
    .fetch_optional(conn)
    .await?)
}

pub async fn list(
    conn: &mut PgConnection,
    tenant: TenantId,
    prefix: &str,
    upper: Option<&str>,
    after: Option<&str>,
    limit: i64,
) -> Result<Vec<Entry>> {
    Ok(sqlx::query_as!(
        Entry,
        "SELECT key, value, expires_at, updated_at FROM kv_entries
         WHERE tenant_id = $1 AND key >= $2 AND ($3::text IS NULL OR key < $3) AND ($4::text IS NULL OR key > $4)
           AND (expires_at IS NULL OR expires_at > now())
         ORDER BY key LIMIT $5",
        tenant.0,
        prefix,
        upper,
        after,
        limit,
    )
    .fetch_all(conn)
    .await?)
}
