//! Session SQL.

use sqlx::{PgConnection, Row, postgres::PgRow};

use super::Principal;
use super::{PRUNE_BATCH, Session};
use crate::error::Result;

macro_rules! columns {
    () => {
        "id_hash, issuer, subject, email, display_name, csrf_token, created_at, idle_expires_at, absolute_expires_at"
    };
}

fn session(row: &PgRow) -> Result<Session> {
    Ok(Session {
        id_hash: row.try_get("id_hash")?,
        principal: Principal { issuer: row.try_get("issuer")?, subject: row.try_get("subject")? },
        email: row.try_get("email")?,
        display_name: row.try_get("display_name")?,
        csrf_token: row.try_get("csrf_token")?,
        created_at: row.try_get("created_at")?,
        idle_expires_at: row.try_get("idle_expires_at")?,
        absolute_expires_at: row.try_get("absolute_expires_at")?,
    })
}

/// Deletes at most `$1` expired sessions, oldest first, through `sessions_expiry`. The idle
/// expiry alone decides: it is never past the absolute one (set below it, extended with
/// `least(…, absolute_expires_at)`), so a session past its absolute expiry is past its idle one
/// too, and the condition stays one index range (an `OR` on the unindexed absolute expiry
/// would scan the table).
pub const PRUNE: &str = "WITH doomed AS MATERIALIZED (
         SELECT id_hash FROM sessions WHERE idle_expires_at <= now()
         ORDER BY idle_expires_at LIMIT $1 FOR UPDATE SKIP LOCKED)
     DELETE FROM sessions s USING doomed WHERE s.id_hash = doomed.id_hash";

pub async fn prune(conn: &mut PgConnection) -> Result<u64> {
    Ok(sqlx::query(PRUNE).bind(PRUNE_BATCH).execute(conn).await?.rows_affected())
}

#[allow(clippy::too_many_arguments)]
pub async fn insert(
    conn: &mut PgConnection,
    id_hash: &[u8],
    p: &Principal,
    email: Option<&str>,
    name: Option<&str>,
    csrf: &str,
    idle_secs: i64,
    absolute_secs: i64,
) -> Result<Session> {
    let row = sqlx::query(concat!(
        "INSERT INTO sessions (id_hash, issuer, subject, email, display_name, csrf_token, idle_expires_at, absolute_expires_at)
         VALUES ($1, $2, $3, $4, $5, $6, now() + make_interval(secs => $7::float8), now() + make_interval(secs => $8::float8))
         RETURNING ",
        columns!()
    ))
    .bind(id_hash)
    .bind(&p.issuer)
    .bind(&p.subject)
    .bind(email)
    .bind(name)
    .bind(csrf)
    .bind(idle_secs as f64)
    .bind(absolute_secs as f64)
    .fetch_one(conn)
    .await?;
    session(&row)
}

/// Reads a live session; extends its idle expiry (never past the absolute one) when it was
/// last extended more than a minute ago.
pub async fn touch(conn: &mut PgConnection, id_hash: &[u8], idle_secs: i64) -> Result<Option<Session>> {
    let row = sqlx::query(concat!(
        "SELECT ",
        columns!(),
        ", last_seen_at < now() - interval '1 minute' AS stale FROM sessions
         WHERE id_hash = $1 AND idle_expires_at > now() AND absolute_expires_at > now()"
    ))
    .bind(id_hash)
    .fetch_optional(&mut *conn)
    .await?;
    let Some(row) = row else { return Ok(None) };
    if row.try_get::<bool, _>("stale")? {
        sqlx::query(
            "UPDATE sessions SET last_seen_at = now(),
                 idle_expires_at = least(now() + make_interval(secs => $2::float8), absolute_expires_at)
             WHERE id_hash = $1",
        )
        .bind(id_hash)
        .bind(idle_secs as f64)
        .execute(conn)
        .await?;
    }
    session(&row).map(Some)
}

pub async fn delete(conn: &mut PgConnection, id_hash: &[u8]) -> Result<bool> {
    Ok(sqlx::query("DELETE FROM sessions WHERE id_hash = $1").bind(id_hash).execute(conn).await?.rows_affected() == 1)
}

pub async fn end_for_principal(conn: &mut PgConnection, p: &Principal) -> Result<u64> {
    Ok(sqlx::query("DELETE FROM sessions WHERE issuer = $1 AND subject = $2")
        .bind(&p.issuer)
        .bind(&p.subject)
        .execute(conn)
        .await?
        .rows_affected())
}
