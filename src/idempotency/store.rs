//! The `idempotency_keys` table.

use crate::{
    db::{Db, Scope, idempotency::KEPT},
    error::Result,
    ids::TenantId,
};

/// A stored answer.
pub struct Answer {
    pub status: u16,
    pub content_type: Option<String>,
    pub body: Vec<u8>,
}

/// A live key: the digest of the request that claimed it, and its answer once stored.
pub struct Found {
    pub digest: Vec<u8>,
    pub answer: Option<Answer>,
    /// No answer, and claimed longer than [`ORPHANED`] ago: the request's change committed
    /// (the claim is written by its transaction) but its answer was never stored, because the
    /// database failed between the COMMIT and the answer, or the COMMIT's answer was lost.
    pub orphaned: bool,
}

/// How long after its claim (just before COMMIT) a key's answer must have been stored.
pub const ORPHANED: std::time::Duration = std::time::Duration::from_secs(30);

pub async fn find(db: &Db, tenant: TenantId, key: &str) -> Result<Option<Found>> {
    let row = db
        .single_decision(Scope::Tenant(tenant), |conn, _| {
            Box::pin(async move {
                Ok(sqlx::query!(
                    r#"SELECT request_digest, status, content_type, body,
                            status IS NULL AND created_at < clock_timestamp() - make_interval(secs => $4) AS "orphaned!"
                       FROM idempotency_keys
                      WHERE tenant_id = $1 AND key = $2 AND created_at >= now() - make_interval(secs => $3)"#,
                    tenant.0,
                    key,
                    KEPT.as_secs_f64(),
                    ORPHANED.as_secs_f64(),
                )
                .fetch_optional(conn)
                .await?)
            })
        })
        .await?;
    Ok(row.map(|r| Found {
        digest: r.request_digest,
        answer: r.status.map(|s| Answer {
            status: u16::try_from(s).unwrap_or(500),
            content_type: r.content_type,
            body: r.body.unwrap_or_default(),
        }),
        orphaned: r.orphaned,
    }))
}

pub async fn answer(db: &Db, tenant: TenantId, key: &str, answer: &Answer) -> Result<()> {
    db.single_decision(Scope::Tenant(tenant), |conn, _| {
        Box::pin(async move {
            sqlx::query!(
                "UPDATE idempotency_keys SET status = $3, content_type = $4, body = $5
                  WHERE tenant_id = $1 AND key = $2 AND status IS NULL",
                tenant.0,
                key,
                i16::try_from(answer.status).unwrap_or(500),
                answer.content_type.as_deref(),
                answer.body.as_slice(),
            )
            .execute(conn)
            .await?;
            Ok(())
        })
    })
    .await
}

pub async fn sweep(db: &Db) -> Result<u64> {
    db.single_decision(Scope::Platform { reason: "expire idempotency keys" }, |conn, _| {
        Box::pin(async move {
            Ok(sqlx::query!(
                "DELETE FROM idempotency_keys WHERE created_at < now() - make_interval(secs => $1)",
                KEPT.as_secs_f64()
            )
            .execute(conn)
            .await?
            .rows_affected())
        })
    })
    .await
}
