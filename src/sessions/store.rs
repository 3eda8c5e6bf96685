//! Session SQL.

use chrono::{DateTime, Utc};
use sqlx::PgConnection;

use super::Principal;
use super::{PRUNE_BATCH, Session};
use crate::{error::Result, ids::TenantId};

/// A `sessions` row as the statements here return it.
struct Row {
    id_hash: Vec<u8>,
    issuer: String,
    subject: String,
    email: Option<String>,
    display_name: Option<String>,
    csrf_token: String,
    created_at: DateTime<Utc>,
    idle_expires_at: DateTime<Utc>,
    absolute_expires_at: DateTime<Utc>,
    sso_tenant_id: Option<TenantId>,
}

impl From<Row> for Session {
    fn from(row: Row) -> Session {
        Session {
            id_hash: row.id_hash,
            principal: Principal { issuer: row.issuer, subject: row.subject },
            email: row.email,
            display_name: row.display_name,
            csrf_token: row.csrf_token,
            created_at: row.created_at,
            idle_expires_at: row.idle_expires_at,
            absolute_expires_at: row.absolute_expires_at,
            sso_tenant: row.sso_tenant_id,
        }
    }
}

/// Deletes at most `$1` expired sessions, oldest first, through `sessions_expiry`. The idle
/// expiry alone decides: it is never past the absolute one (set below it, extended with
/// `least(…, absolute_expires_at)`), so a session past its absolute expiry is past its idle one
/// too, and the condition stays one index range (an `OR` on the unindexed absolute expiry
/// would scan the table). Kept a runtime string: `tests/ops.rs` explains this same text.
pub const PRUNE: &str = "WITH doomed AS MATERIALIZED (
         SELECT id_hash FROM sessions WHERE idle_expires_at <= now()
         ORDER BY idle_expires_at LIMIT $1 FOR UPDATE SKIP LOCKED)
     DELETE FROM sessions s USING doomed WHERE s.id_hash = doomed.id_hash";

pub async fn prune(conn: &mut PgConnection) -> Result<u64> {
    Ok(sqlx::query(PRUNE).bind(PRUNE_BATCH).execute(conn).await?.rows_affected())
}

/// A session's row before it is inserted: the digest of its id, who signed in, and its CSRF
/// token.
pub struct NewSession<'a> {
    pub id_hash: &'a [u8],
    pub principal: &'a Principal,
    pub email: Option<&'a str>,
    pub name: Option<&'a str>,
    pub csrf: &'a str,
    /// The tenant whose connection signed the person in, if any.
    pub sso_tenant: Option<TenantId>,
}

/// Inserts a session that expires after `idle_secs` unused or `absolute_secs` in all.
pub async fn insert(conn: &mut PgConnection, new: &NewSession<'_>, idle_secs: i64, absolute_secs: i64) -> Result<Session> {
    let NewSession { id_hash, principal: p, email, name, csrf, sso_tenant } = *new;
    let row = sqlx::query_as!(
        Row,
        r#"INSERT INTO sessions (id_hash, issuer, subject, email, display_name, csrf_token, idle_expires_at, absolute_expires_at, sso_tenant_id)
         VALUES ($1, $2, $3, $4, $5, $6, now() + make_interval(secs => $7::float8), now() + make_interval(secs => $8::float8), $9)
         RETURNING id_hash, issuer, subject, email, display_name, csrf_token, created_at, idle_expires_at, absolute_expires_at,
                   sso_tenant_id AS "sso_tenant_id: TenantId""#,
        id_hash,
        p.issuer,
        p.subject,
        email,
        name,
        csrf,
        idle_secs as f64,
        absolute_secs as f64,
        sso_tenant.map(|t| t.0),
    )
    .fetch_one(conn)
    .await?;
    Ok(row.into())
}

/// Reads a live session; extends its idle expiry (never past the absolute one) when it was
/// last extended more than a minute ago.
pub async fn touch(conn: &mut PgConnection, id_hash: &[u8], idle_secs: i64) -> Result<Option<Session>> {
    let row = sqlx::query!(
        r#"SELECT id_hash, issuer, subject, email, display_name, csrf_token, created_at, idle_expires_at, absolute_expires_at,
                  sso_tenant_id AS "sso_tenant_id: TenantId", last_seen_at < now() - interval '1 minute' AS "stale!"
           FROM sessions
           WHERE id_hash = $1 AND idle_expires_at > now() AND absolute_expires_at > now()"#,
        id_hash,
    )
    .fetch_optional(&mut *conn)
    .await?;
    let Some(row) = row else { return Ok(None) };
    if row.stale {
        sqlx::query!(
            "UPDATE sessions SET last_seen_at = now(),
                 idle_expires_at = least(now() + make_interval(secs => $2::float8), absolute_expires_at)
             WHERE id_hash = $1",
            id_hash,
            idle_secs as f64,
        )
        .execute(conn)
        .await?;
    }
    Ok(Some(
        Row {
            id_hash: row.id_hash,
            issuer: row.issuer,
            subject: row.subject,
            email: row.email,
            display_name: row.display_name,
            csrf_token: row.csrf_token,
            created_at: row.created_at,
            idle_expires_at: row.idle_expires_at,
            absolute_expires_at: row.absolute_expires_at,
            sso_tenant_id: row.sso_tenant_id,
        }
        .into(),
    ))
}

pub async fn delete(conn: &mut PgConnection, id_hash: &[u8]) -> Result<bool> {
    Ok(sqlx::query!("DELETE FROM sessions WHERE id_hash = $1", id_hash).execute(conn).await?.rows_affected() == 1)
}

pub async fn end_for_principal(conn: &mut PgConnection, p: &Principal) -> Result<u64> {
    Ok(sqlx::query!("DELETE FROM sessions WHERE issuer = $1 AND subject = $2", p.issuer, p.subject)
        .execute(conn)
        .await?
        .rows_affected())
}
