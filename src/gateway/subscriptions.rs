//! Handshake-era agents' resource subscriptions, shared by every replica. An agent subscribes
//! with `resources/subscribe`, a POST any replica may serve, and hears the updates on its GET
//! stream, which any replica may hold; so the subscription is kept in PostgreSQL
//! (`agent_subscriptions`), and the replica holding the stream reads its set with each poll
//! of the tenant's epoch and listens to the downstreams for it ([`super::listen`]).
//!
//! A subscription belongs to a *listener*: the digest of the agent's session id (the one the
//! endpoint gave at `initialize`) with its caller, workspace and pool. A session id presented
//! by another caller, or on another pool, names another listener. Rows expire a day after the
//! subscription and are never read after that.

use sha2::{Digest, Sha256};
use uuid::Uuid;

use super::GatewayCtx;
use crate::{
    db::{Db, Scope},
    error::Result,
    ids::TenantId,
};

/// Resources one listener may have subscribed at once (as a `subscriptions/listen` filter).
pub const MAX_PER_LISTENER: i64 = 64;

/// How long a subscription lasts without being made again: the agent's session is not
/// tracked anywhere (the endpoint is stateless), so an abandoned one ends on its own.
const TTL_SECS: f64 = 86_400.0;

/// The listener of an agent's session id on this endpoint for this caller.
pub fn listener(session: &str, ctx: &GatewayCtx) -> [u8; 32] {
    let mut digest = Sha256::new();
    for part in [
        session.as_bytes(),
        ctx.actor_id.as_bytes(),
        ctx.bound.workspace.id.0.as_bytes(),
        ctx.pool.as_ref().map_or("", |(name, _)| name.as_str()).as_bytes(),
    ] {
        digest.update((part.len() as u64).to_be_bytes());
        digest.update(part);
    }
    digest.finalize().into()
}

/// Subscribes `listener` to `uri` (again: its day starts afresh). `false`: the listener has
/// [`MAX_PER_LISTENER`] other subscriptions, and nothing is written. Otherwise the tenant's
/// expired rows go in the same transaction.
pub async fn subscribe(db: &Db, tenant: TenantId, workspace: Uuid, listener: &[u8; 32], uri: &str) -> Result<bool> {
    db.serializable(Scope::Tenant(tenant), move |conn, _| {
        Box::pin(async move {
            let others = sqlx::query_scalar!(
                r#"SELECT count(*) AS "n!" FROM agent_subscriptions
                    WHERE tenant_id = $1 AND listener = $2 AND uri <> $3 AND expires_at > now()"#,
                tenant.0,
                &listener[..],
                uri,
            )
            .fetch_one(&mut *conn)
            .await?;
            if others >= MAX_PER_LISTENER {
                return Ok(false);
            }
            sqlx::query!("DELETE FROM agent_subscriptions WHERE tenant_id = $1 AND expires_at <= now()", tenant.0)
                .execute(&mut *conn)
                .await?;
            sqlx::query!(
                "INSERT INTO agent_subscriptions (tenant_id, workspace_id, listener, uri, expires_at)
                 VALUES ($1, $2, $3, $4, now() + make_interval(secs => $5))
                 ON CONFLICT (tenant_id, listener, uri) DO UPDATE SET expires_at = EXCLUDED.expires_at",
                tenant.0,
                workspace,
                &listener[..],
                uri,
                TTL_SECS,
            )
            .execute(&mut *conn)
            .await?;
            Ok(true)
        })
    })
    .await
}

/// Ends `listener`'s subscription to `uri`, if it has one.
pub async fn unsubscribe(db: &Db, tenant: TenantId, listener: &[u8; 32], uri: &str) -> Result<()> {
    db.single_decision(Scope::Tenant(tenant), move |conn, _| {
        Box::pin(async move {
            sqlx::query!(
                "DELETE FROM agent_subscriptions WHERE tenant_id = $1 AND listener = $2 AND uri = $3",
                tenant.0,
                &listener[..],
                uri,
            )
            .execute(&mut *conn)
            .await?;
            Ok(())
        })
    })
    .await
}

/// The resources `listener` is subscribed to now, in URI order.
pub async fn uris(db: &Db, tenant: TenantId, listener: &[u8; 32]) -> Result<Vec<String>> {
    db.single_decision(Scope::Tenant(tenant), move |conn, _| {
        Box::pin(async move {
            let uris = sqlx::query_scalar!(
                "SELECT uri FROM agent_subscriptions
                  WHERE tenant_id = $1 AND listener = $2 AND expires_at > now() ORDER BY uri LIMIT $3",
                tenant.0,
                &listener[..],
                MAX_PER_LISTENER,
            )
            .fetch_all(&mut *conn)
            .await?;
            Ok(uris)
        })
    })
    .await
}
