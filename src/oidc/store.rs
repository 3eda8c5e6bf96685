//! Pending sign-in flows: stored for ten minutes, claimed once at the callback.

use sqlx::PgConnection;

use uuid::Uuid;

use crate::{
    db::{Db, Scope},
    error::Result,
    ids::TenantId,
};

/// A flow about to be stored: its secrets' digests and values, where to land, and the tenant
/// connection it goes through.
pub struct NewFlow<'a> {
    pub state_hash: &'a [u8],
    pub browser_hash: &'a [u8],
    pub verifier: &'a str,
    pub nonce: &'a str,
    pub next: &'a str,
    pub sso: Option<(TenantId, Uuid)>,
}

pub const FLOW_TTL_SECS: i64 = 600;

pub struct Flow {
    pub pkce_verifier: String,
    pub nonce: String,
    pub next_path: String,
    /// The tenant connection the flow signs in through (`None`: the deployment's provider).
    pub sso: Option<(TenantId, Uuid)>,
    /// When the callback claimed the flow (database clock): the accepting request's start, for
    /// the membership fence.
    pub started_at: chrono::DateTime<chrono::Utc>,
}

pub async fn insert(conn: &mut PgConnection, flow: &NewFlow<'_>) -> Result<()> {
    let (tenant, connection) = flow.sso.map_or((None, None), |(t, c)| (Some(t.0), Some(c)));
    sqlx::query!(
        "WITH doomed AS MATERIALIZED (SELECT state_hash FROM oidc_flows WHERE expires_at <= now() LIMIT 100 FOR UPDATE SKIP LOCKED)
         DELETE FROM oidc_flows f USING doomed WHERE f.state_hash = doomed.state_hash",
    )
    .execute(&mut *conn)
    .await?;
    sqlx::query!(
        "INSERT INTO oidc_flows (state_hash, browser_hash, pkce_verifier, nonce, next_path, expires_at, sso_tenant_id, sso_connection_id)
         VALUES ($1, $2, $3, $4, $5, now() + make_interval(secs => $6::float8), $7, $8)",
        flow.state_hash,
        flow.browser_hash,
        flow.verifier,
        flow.nonce,
        flow.next,
        FLOW_TTL_SECS as f64,
        tenant,
        connection,
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// Claims the flow by compare-and-set: only an unclaimed, unexpired flow started by this
/// browser. A replayed or foreign callback gets `None`.
pub async fn claim(conn: &mut PgConnection, state_hash: &[u8], browser_hash: &[u8]) -> Result<Option<Flow>> {
    // `claimed_at` is nullable in the table but just set by this statement.
    let row = sqlx::query!(
        r#"UPDATE oidc_flows SET claimed_at = now()
           WHERE state_hash = $1 AND browser_hash = $2 AND claimed_at IS NULL AND expires_at > now()
           RETURNING pkce_verifier, nonce, next_path, claimed_at AS "started_at!",
                     sso_tenant_id AS "sso_tenant_id: TenantId", sso_connection_id"#,
        state_hash,
        browser_hash,
    )
    .fetch_optional(conn)
    .await?;
    Ok(row.map(|r| Flow {
        pkce_verifier: r.pkce_verifier,
        nonce: r.nonce,
        next_path: r.next_path,
        sso: r.sso_tenant_id.zip(r.sso_connection_id),
        started_at: r.started_at,
    }))
}

/// Stores a started flow (its own transaction).
pub async fn save(db: &Db, flow: &NewFlow<'_>) -> Result<()> {
    db.serializable(Scope::Global, |conn, _| Box::pin(insert(conn, flow))).await
}

/// Claims a flow (its own transaction); see [`claim`].
pub async fn take(db: &Db, state_hash: &[u8], browser_hash: &[u8]) -> Result<Option<Flow>> {
    db.serializable(Scope::Global, |conn, _| Box::pin(claim(conn, state_hash, browser_hash))).await
}
