//! Access-token SQL.

use chrono::{DateTime, Utc};
use sqlx::PgConnection;
use uuid::Uuid;

use super::Token;
use crate::{error::Result, ids::TenantId, members::Principal};

/// An `access_tokens` row as every statement here returns it.
struct Row {
    id: Uuid,
    prefix: String,
    name: String,
    created_by: String,
    principal_issuer: Option<String>,
    principal_subject: Option<String>,
    created_at: DateTime<Utc>,
    last_used_at: Option<DateTime<Utc>>,
    revoked_at: Option<DateTime<Utc>>,
}

impl From<Row> for Token {
    fn from(row: Row) -> Token {
        Token {
            id: row.id,
            prefix: row.prefix,
            name: row.name,
            created_by: row.created_by,
            principal: row.principal_issuer.zip(row.principal_subject).map(|(issuer, subject)| Principal { issuer, subject }),
            created_at: row.created_at,
            last_used_at: row.last_used_at,
            revoked_at: row.revoked_at,
        }
    }
}

/// Takes one live slot if the tenant is below its cap: one conditional upsert.
pub async fn reserve(conn: &mut PgConnection, tenant: TenantId, cap: i32) -> Result<bool> {
    let live = sqlx::query_scalar!(
        "INSERT INTO token_quotas (tenant_id, live, cap) VALUES ($1, 1, $2)
         ON CONFLICT (tenant_id) DO UPDATE SET live = token_quotas.live + 1, cap = EXCLUDED.cap
             WHERE token_quotas.live < EXCLUDED.cap
         RETURNING live",
        tenant.0,
        cap,
    )
    .fetch_optional(conn)
    .await?;
    Ok(live.is_some())
}

pub async fn release(conn: &mut PgConnection, tenant: TenantId) -> Result<()> {
    sqlx::query!("UPDATE token_quotas SET live = live - 1 WHERE tenant_id = $1 AND live > 0", tenant.0).execute(conn).await?;
    Ok(())
}

pub async fn insert(
    conn: &mut PgConnection,
    tenant: TenantId,
    hash: &[u8],
    prefix: &str,
    name: &str,
    created_by: &str,
    principal: Option<&Principal>,
) -> Result<Token> {
    let row = sqlx::query_as!(
        Row,
        "INSERT INTO access_tokens (tenant_id, id, token_hash, prefix, name, created_by, principal_issuer, principal_subject)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
         RETURNING id, prefix, name, created_by, principal_issuer, principal_subject, created_at, last_used_at, revoked_at",
        tenant.0,
        Uuid::now_v7(),
        hash,
        prefix,
        name,
        created_by,
        principal.map(|p| p.issuer.as_str()),
        principal.map(|p| p.subject.as_str()),
    )
    .fetch_one(conn)
    .await?;
    Ok(row.into())
}

pub async fn get(conn: &mut PgConnection, tenant: TenantId, id: Uuid) -> Result<Option<Token>> {
    let row = sqlx::query_as!(
        Row,
        "SELECT id, prefix, name, created_by, principal_issuer, principal_subject, created_at, last_used_at, revoked_at
         FROM access_tokens WHERE tenant_id = $1 AND id = $2",
        tenant.0,
        id,
    )
    .fetch_optional(conn)
    .await?;
    Ok(row.map(Token::from))
}

pub async fn list(conn: &mut PgConnection, tenant: TenantId) -> Result<Vec<Token>> {
    let rows = sqlx::query_as!(
        Row,
        "SELECT id, prefix, name, created_by, principal_issuer, principal_subject, created_at, last_used_at, revoked_at
         FROM access_tokens WHERE tenant_id = $1 ORDER BY created_at DESC, id DESC",
        tenant.0,
    )
    .fetch_all(conn)
    .await?;
    Ok(rows.into_iter().map(Token::from).collect())
}

pub async fn rename(conn: &mut PgConnection, tenant: TenantId, id: Uuid, name: &str) -> Result<Option<Token>> {
    let row = sqlx::query_as!(
        Row,
        "UPDATE access_tokens SET name = $3 WHERE tenant_id = $1 AND id = $2
         RETURNING id, prefix, name, created_by, principal_issuer, principal_subject, created_at, last_used_at, revoked_at",
        tenant.0,
        id,
        name,
    )
    .fetch_optional(conn)
    .await?;
    Ok(row.map(Token::from))
}

/// Revokes a live token; `None` when it is missing or already revoked.
pub async fn revoke(conn: &mut PgConnection, tenant: TenantId, id: Uuid) -> Result<Option<Token>> {
    let row = sqlx::query_as!(
        Row,
        "UPDATE access_tokens SET revoked_at = now() WHERE tenant_id = $1 AND id = $2 AND revoked_at IS NULL
         RETURNING id, prefix, name, created_by, principal_issuer, principal_subject, created_at, last_used_at, revoked_at",
        tenant.0,
        id,
    )
    .fetch_optional(conn)
    .await?;
    Ok(row.map(Token::from))
}

/// Revokes every live token issued to `p` (a person's personal tokens); their ids.
pub async fn revoke_for_principal(conn: &mut PgConnection, tenant: TenantId, p: &Principal) -> Result<Vec<Uuid>> {
    Ok(sqlx::query_scalar!(
        "UPDATE access_tokens SET revoked_at = now()
          WHERE tenant_id = $1 AND principal_issuer = $2 AND principal_subject = $3 AND revoked_at IS NULL
         RETURNING id",
        tenant.0,
        p.issuer,
        p.subject,
    )
    .fetch_all(conn)
    .await?)
}
