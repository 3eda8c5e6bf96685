//! Revocation intents (RFC 7009): written with the disconnect that owes them, settled when
//! the provider answered, and claimed by the sweep when a crash left them.

use sqlx::PgConnection;
use uuid::Uuid;

use crate::{error::Result, ids::TenantId, vault::Owner};

/// A revocation owed to a provider (RFC 7009), written with the disconnect that owes it.
pub struct Intent<'a> {
    pub id: Uuid,
    pub workspace: Uuid,
    pub connector: &'a str,
    pub owner: Owner,
    pub endpoint: &'a str,
    pub client_id: &'a str,
    pub client_auth: &'a str,
    /// The grant's sealed tokens, moved unchanged from `credentials`.
    pub envelope: &'a str,
}

pub async fn insert_intent(conn: &mut PgConnection, tenant: TenantId, i: Intent<'_>) -> Result<()> {
    sqlx::query!(
        "INSERT INTO oauth_revocations (tenant_id, id, workspace_id, connector_id, owner, endpoint, client_id, client_auth, envelope)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
        tenant.0,
        i.id,
        i.workspace,
        i.connector,
        i.owner.as_text(),
        i.endpoint,
        i.client_id,
        i.client_auth,
        i.envelope,
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// Records an intent's outcome and drops its tokens, once: whether this call settled it.
pub async fn settle_intent(conn: &mut PgConnection, tenant: TenantId, id: Uuid, outcome: &str, by: &str) -> Result<bool> {
    let done = sqlx::query!(
        "UPDATE oauth_revocations SET outcome = $3, settled_at = now(), settled_by = $4, envelope = NULL, claimed_until = NULL
          WHERE tenant_id = $1 AND id = $2 AND outcome IS NULL",
        tenant.0,
        id,
        outcome,
        by,
    )
    .execute(conn)
    .await?;
    Ok(done.rows_affected() == 1)
}

/// An unsettled intent a sweep claimed.
pub struct Stale {
    pub tenant: TenantId,
    pub id: Uuid,
    pub workspace: Uuid,
    pub connector: String,
    pub owner: String,
    pub endpoint: String,
    pub client_id: String,
    pub client_auth: String,
    pub envelope: Option<String>,
}

/// Claims (platform context) up to `limit` intents older than `grace_secs` without an outcome
/// and without a live claim, for `claim_secs`: racing sweeps claim disjoint rows.
pub async fn claim_stale(conn: &mut PgConnection, grace_secs: i64, claim_secs: i64, limit: i64) -> Result<Vec<Stale>> {
    Ok(sqlx::query_as!(
        Stale,
        r#"UPDATE oauth_revocations r SET claimed_until = now() + make_interval(secs => $2::float8)
           FROM (SELECT tenant_id, id FROM oauth_revocations
                  WHERE outcome IS NULL AND created_at < now() - make_interval(secs => $1::float8)
                    AND (claimed_until IS NULL OR claimed_until <= now())
                  ORDER BY created_at LIMIT $3 FOR UPDATE SKIP LOCKED) pick
          WHERE r.tenant_id = pick.tenant_id AND r.id = pick.id
            AND r.outcome IS NULL AND (r.claimed_until IS NULL OR r.claimed_until <= now())
          RETURNING r.tenant_id AS "tenant: TenantId", r.id, r.workspace_id AS workspace, r.connector_id AS connector, r.owner,
                    r.endpoint, r.client_id, r.client_auth, r.envelope"#,
        grace_secs as f64,
        claim_secs as f64,
        limit,
    )
    .fetch_all(conn)
    .await?)
}

/// Deletes up to `limit` intents settled more than `days` ago.
pub async fn prune_settled(conn: &mut PgConnection, days: i32, limit: i64) -> Result<u64> {
    let done = sqlx::query!(
        "DELETE FROM oauth_revocations WHERE (tenant_id, id) IN (
            SELECT tenant_id, id FROM oauth_revocations
             WHERE outcome IS NOT NULL AND settled_at < now() - make_interval(days => $1) LIMIT $2)",
        days,
        limit,
    )
    .execute(conn)
    .await?;
    Ok(done.rows_affected())
}
