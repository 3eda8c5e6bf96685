//! Quota SQL, tenant first: the limits, and the ledger's leases and returns.

use chrono::{DateTime, Utc};
use sqlx::PgConnection;
use uuid::Uuid;

use super::{Calls, Limit, Per, Usage, input::Checked};
use crate::{error::Result, ids::TenantId};

struct Row {
    id: Uuid,
    name: String,
    per: String,
    connector: Option<String>,
    tool: Option<String>,
    class: String,
    requests: Option<i32>,
    window_seconds: Option<i32>,
    concurrency: Option<i32>,
    daily: Option<i32>,
    fail_open: bool,
    version: i64,
    created_by: String,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
}

impl Row {
    fn limit(self) -> Result<Limit> {
        Ok(Limit {
            id: self.id,
            name: self.name,
            per: Per::parse(&self.per)?,
            connector: self.connector,
            tool: self.tool,
            class: Calls::parse(&self.class)?,
            requests: self.requests,
            window_seconds: self.window_seconds,
            concurrency: self.concurrency,
            daily: self.daily,
            fail_open: self.fail_open,
            version: self.version,
            created_by: self.created_by,
            created_at: self.created_at,
            updated_at: self.updated_at,
        })
    }
}

pub async fn count(conn: &mut PgConnection, tenant: TenantId) -> Result<i64> {
    Ok(sqlx::query_scalar!(r#"SELECT count(*) AS "n!" FROM quota_limits WHERE tenant_id = $1"#, tenant.0).fetch_one(conn).await?)
}

pub async fn insert(conn: &mut PgConnection, tenant: TenantId, id: Uuid, c: &Checked, created_by: &str) -> Result<()> {
    sqlx::query!(
        "INSERT INTO quota_limits (tenant_id, id, name, per, connector, tool, class, requests, window_seconds, concurrency,
                                   daily, fail_open, created_by)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)",
        tenant.0,
        id,
        c.name,
        c.per.as_str(),
        c.connector,
        c.tool,
        c.class.as_str(),
        c.requests.map(|r| r.0),
        c.requests.map(|r| r.1),
        c.concurrency,
        c.daily,
        c.fail_open,
        created_by,
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// The compare-and-set update: false when the version moved on.
pub async fn update(conn: &mut PgConnection, tenant: TenantId, id: Uuid, c: &Checked, version: i64) -> Result<bool> {
    let done = sqlx::query!(
        "UPDATE quota_limits SET name = $3, per = $4, connector = $5, tool = $6, class = $7, requests = $8,
                window_seconds = $9, concurrency = $10, daily = $11, fail_open = $12, version = version + 1, updated_at = now()
         WHERE tenant_id = $1 AND id = $2 AND version = $13",
        tenant.0,
        id,
        c.name,
        c.per.as_str(),
        c.connector,
        c.tool,
        c.class.as_str(),
        c.requests.map(|r| r.0),
        c.requests.map(|r| r.1),
        c.concurrency,
        c.daily,
        c.fail_open,
        version,
    )
    .execute(conn)
    .await?;
    Ok(done.rows_affected() == 1)
}

pub async fn delete(conn: &mut PgConnection, tenant: TenantId, id: Uuid) -> Result<()> {
    sqlx::query!("DELETE FROM quota_limits WHERE tenant_id = $1 AND id = $2", tenant.0, id).execute(conn).await?;
    Ok(())
}

pub async fn get(conn: &mut PgConnection, tenant: TenantId, id: Uuid) -> Result<Option<Limit>> {
    sqlx::query_as!(
        Row,
        "SELECT id, name, per, connector, tool, class, requests, window_seconds, concurrency, daily, fail_open, version,
                created_by, created_at, updated_at
         FROM quota_limits WHERE tenant_id = $1 AND id = $2",
        tenant.0,
        id
    )
    .fetch_optional(conn)
    .await?
    .map(Row::limit)
    .transpose()
}

pub async fn list(conn: &mut PgConnection, tenant: TenantId) -> Result<Vec<Limit>> {
    sqlx::query_as!(
        Row,
        "SELECT id, name, per, connector, tool, class, requests, window_seconds, concurrency, daily, fail_open, version,
                created_by, created_at, updated_at
         FROM quota_limits WHERE tenant_id = $1 ORDER BY name",
        tenant.0
    )
    .fetch_all(conn)
    .await?
    .into_iter()
    .map(Row::limit)
    .collect()
}

pub async fn usage(conn: &mut PgConnection, tenant: TenantId, limit: i64) -> Result<Vec<Usage>> {
    Ok(sqlx::query_as!(
        Usage,
        r#"SELECT l.name AS "limit!", w.subject, w.kind,
                  to_timestamp(w.window_no * w.span_ms / 1000.0) AS "window_start!", w.budget, w.granted, w.used, w.refused
           FROM quota_windows w JOIN quota_limits l ON l.tenant_id = w.tenant_id AND l.id = w.limit_id
           WHERE w.tenant_id = $1
           ORDER BY w.window_no * w.span_ms DESC, l.name, w.subject, w.kind
           LIMIT $2"#,
        tenant.0,
        limit
    )
    .fetch_all(conn)
    .await?)
}

/// Where one budget's ledger rows are.
pub struct WindowKey<'a> {
    pub limit: Uuid,
    pub subject: &'a str,
    pub kind: &'static str,
    pub span_ms: i64,
}

/// A slice leased from the window that holds the database's clock now.
pub struct Leased {
    pub window_no: i64,
    pub slice: i32,
    /// The database's clock, in milliseconds since the Unix epoch, read after the lease.
    pub now_ms: i64,
}

/// Leases up to `want` of `budget` from the current window (creating its row): the ledger
/// never grants past the budget, so `slice` may be 0. `last_slice` is computed from the row
/// as it was before this statement (an UPDATE's SET sees the old row).
pub async fn lease(conn: &mut PgConnection, tenant: TenantId, key: &WindowKey<'_>, budget: i32, want: i32) -> Result<Leased> {
    let row = sqlx::query!(
        r#"INSERT INTO quota_windows AS q (tenant_id, limit_id, subject, kind, span_ms, window_no, budget, granted, last_slice)
           SELECT $1, $2, $3, $4, $5::bigint, c.ms / $5::bigint, $6::int, LEAST($7::int, $6::int), LEAST($7::int, $6::int)
           FROM (SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint AS ms) c
           ON CONFLICT (tenant_id, limit_id, subject, kind, window_no) DO UPDATE
           SET granted = q.granted + LEAST($7::int, q.budget - q.granted), last_slice = LEAST($7::int, q.budget - q.granted)
           RETURNING window_no, last_slice, (extract(epoch FROM clock_timestamp()) * 1000)::bigint AS "now_ms!""#,
        tenant.0,
        key.limit,
        key.subject,
        key.kind,
        key.span_ms,
        budget,
        want,
    )
    .fetch_one(conn)
    .await?;
    Ok(Leased { window_no: row.window_no, slice: row.last_slice, now_ms: row.now_ms })
}

/// Gives back what a replica did not use of a window's slices, and reports what it admitted
/// and refused there.
pub async fn settle(
    conn: &mut PgConnection,
    tenant: TenantId,
    key: &WindowKey<'_>,
    window_no: i64,
    (unused, used, refused): (i32, i32, i32),
) -> Result<()> {
    sqlx::query!(
        "UPDATE quota_windows SET granted = GREATEST(granted - $6, 0), used = used + $7, refused = refused + $8
         WHERE tenant_id = $1 AND limit_id = $2 AND subject = $3 AND kind = $4 AND window_no = $5",
        tenant.0,
        key.limit,
        key.subject,
        key.kind,
        window_no,
        unused,
        used,
        refused,
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// Sets this replica's concurrency slots of a limit and subject to `held`, with a fresh expiry,
/// if the live slots of every replica then fit `budget`: true when set. Every replica deciding
/// for one limit and subject first takes the same transaction-scoped advisory lock, so the
/// count and the write are one decision at a time (at READ COMMITTED, with no serialization
/// failures to retry): two replicas can never both take the last slot.
pub async fn hold(
    conn: &mut PgConnection,
    tenant: TenantId,
    (limit, subject): (Uuid, &str),
    (replica, seq): (Uuid, i64),
    (held, budget): (i32, i32),
    ttl_ms: i64,
) -> Result<bool> {
    sqlx::query!(
        "SELECT pg_advisory_xact_lock(hashtextextended($1::uuid::text || ':' || $2::uuid::text || ':' || $3::text, 0))",
        tenant.0,
        limit,
        subject
    )
    .execute(&mut *conn)
    .await?;
    let others = sqlx::query_scalar!(
        r#"SELECT COALESCE(sum(held), 0)::int AS "n!" FROM quota_slots
           WHERE tenant_id = $1 AND limit_id = $2 AND subject = $3 AND replica_id <> $4 AND expires_at > clock_timestamp()"#,
        tenant.0,
        limit,
        subject,
        replica
    )
    .fetch_one(&mut *conn)
    .await?;
    if held > 0 && others + held > budget {
        return Ok(false);
    }
    sqlx::query!(
        "INSERT INTO quota_slots (tenant_id, limit_id, subject, replica_id, held, expires_at, seq)
         VALUES ($1, $2, $3, $4, $5, clock_timestamp() + make_interval(secs => $6::bigint / 1000.0), $7)
         ON CONFLICT (tenant_id, limit_id, subject, replica_id) DO UPDATE SET held = $5, expires_at = EXCLUDED.expires_at, seq = $7
         WHERE quota_slots.seq < $7",
        tenant.0,
        limit,
        subject,
        replica,
        held,
        ttl_ms,
        seq,
    )
    .execute(conn)
    .await?;
    Ok(true)
}
