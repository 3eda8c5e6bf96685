//! Pending sign-in flows: stored for ten minutes, claimed once at the callback.

use sqlx::PgConnection;

use crate::{
    db::{Db, Scope},
    error::Result,
};

pub const FLOW_TTL_SECS: i64 = 600;

pub struct Flow {
    pub pkce_verifier: String,
    pub nonce: String,
    pub next_path: String,
    /// When the callback claimed the flow (database clock): the accepting request's start, for
    /// the membership fence.
    pub started_at: chrono::DateTime<chrono::Utc>,
}

pub async fn insert(
    conn: &mut PgConnection,
    state_hash: &[u8],
    browser_hash: &[u8],
    verifier: &str,
    nonce: &str,
    next: &str,
) -> Result<()> {
    sqlx::query!(
        "WITH doomed AS MATERIALIZED (SELECT state_hash FROM oidc_flows WHERE expires_at <= now() LIMIT 100 FOR UPDATE SKIP LOCKED)
         DELETE FROM oidc_flows f USING doomed WHERE f.state_hash = doomed.state_hash",
    )
    .execute(&mut *conn)
    .await?;
    sqlx::query!(
        "INSERT INTO oidc_flows (state_hash, browser_hash, pkce_verifier, nonce, next_path, expires_at)
         VALUES ($1, $2, $3, $4, $5, now() + make_interval(secs => $6::float8))",
        state_hash,
        browser_hash,
        verifier,
        nonce,
        next,
        FLOW_TTL_SECS as f64,
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// Claims the flow by compare-and-set: only an unclaimed, unexpired flow started by this
/// browser. A replayed or foreign callback gets `None`.
pub async fn claim(conn: &mut PgConnection, state_hash: &[u8], browser_hash: &[u8]) -> Result<Option<Flow>> {
    // `claimed_at` is nullable in the table but just set by this statement.
    Ok(sqlx::query_as!(
        Flow,
        r#"UPDATE oidc_flows SET claimed_at = now()
           WHERE state_hash = $1 AND browser_hash = $2 AND claimed_at IS NULL AND expires_at > now()
           RETURNING pkce_verifier, nonce, next_path, claimed_at AS "started_at!""#,
        state_hash,
        browser_hash,
    )
    .fetch_optional(conn)
    .await?)
}

/// Stores a started flow (its own transaction).
pub async fn save(db: &Db, state_hash: &[u8], browser_hash: &[u8], verifier: &str, nonce: &str, next: &str) -> Result<()> {
    db.serializable(Scope::Global, |conn, _| Box::pin(insert(conn, state_hash, browser_hash, verifier, nonce, next))).await
}

/// Claims a flow (its own transaction); see [`claim`].
pub async fn take(db: &Db, state_hash: &[u8], browser_hash: &[u8]) -> Result<Option<Flow>> {
    db.serializable(Scope::Global, |conn, _| Box::pin(claim(conn, state_hash, browser_hash))).await
}
