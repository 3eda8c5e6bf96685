//! Access-token SQL.

use sqlx::{PgConnection, Row, postgres::PgRow};
use uuid::Uuid;

use super::Token;
use crate::{error::Result, ids::TenantId, members::Principal};

macro_rules! columns {
    () => {
        "id, prefix, name, created_by, principal_issuer, principal_subject, created_at, last_used_at, revoked_at"
    };
}

fn token(row: &PgRow) -> Result<Token> {
    let issuer: Option<String> = row.try_get("principal_issuer")?;
    let subject: Option<String> = row.try_get("principal_subject")?;
    Ok(Token {
        id: row.try_get("id")?,
        prefix: row.try_get("prefix")?,
        name: row.try_get("name")?,
        created_by: row.try_get("created_by")?,
        principal: issuer.zip(subject).map(|(issuer, subject)| Principal { issuer, subject }),
        created_at: row.try_get("created_at")?,
        last_used_at: row.try_get("last_used_at")?,
        revoked_at: row.try_get("revoked_at")?,
    })
}

/// Takes one live slot if the tenant is below its cap: one conditional upsert.
pub async fn reserve(conn: &mut PgConnection, tenant: TenantId, cap: i32) -> Result<bool> {
    let row = sqlx::query(
        "INSERT INTO token_quotas (tenant_id, live, cap) VALUES ($1, 1, $2)
         ON CONFLICT (tenant_id) DO UPDATE SET live = token_quotas.live + 1, cap = EXCLUDED.cap
             WHERE token_quotas.live < EXCLUDED.cap
         RETURNING live",
    )
    .bind(tenant)
    .bind(cap)
    .fetch_optional(conn)
    .await?;
    Ok(row.is_some())
}

pub async fn release(conn: &mut PgConnection, tenant: TenantId) -> Result<()> {
    sqlx::query("UPDATE token_quotas SET live = live - 1 WHERE tenant_id = $1 AND live > 0").bind(tenant).execute(conn).await?;
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
    let row = sqlx::query(concat!(
        "INSERT INTO access_tokens (tenant_id, id, token_hash, prefix, name, created_by, principal_issuer, principal_subject)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING ",
        columns!()
    ))
    .bind(tenant)
    .bind(Uuid::now_v7())
    .bind(hash)
    .bind(prefix)
    .bind(name)
    .bind(created_by)
    .bind(principal.map(|p| &p.issuer))
    .bind(principal.map(|p| &p.subject))
    .fetch_one(conn)
    .await?;
    token(&row)
}

pub async fn get(conn: &mut PgConnection, tenant: TenantId, id: Uuid) -> Result<Option<Token>> {
    sqlx::query(concat!("SELECT ", columns!(), " FROM access_tokens WHERE tenant_id = $1 AND id = $2"))
        .bind(tenant)
        .bind(id)
        .fetch_optional(conn)
        .await?
        .as_ref()
        .map(token)
        .transpose()
}

pub async fn list(conn: &mut PgConnection, tenant: TenantId) -> Result<Vec<Token>> {
    sqlx::query(concat!("SELECT ", columns!(), " FROM access_tokens WHERE tenant_id = $1 ORDER BY created_at DESC, id DESC"))
        .bind(tenant)
        .fetch_all(conn)
        .await?
        .iter()
        .map(token)
        .collect()
}

pub async fn rename(conn: &mut PgConnection, tenant: TenantId, id: Uuid, name: &str) -> Result<Option<Token>> {
    sqlx::query(concat!("UPDATE access_tokens SET name = $3 WHERE tenant_id = $1 AND id = $2 RETURNING ", columns!()))
        .bind(tenant)
        .bind(id)
        .bind(name)
        .fetch_optional(conn)
        .await?
        .as_ref()
        .map(token)
        .transpose()
}

/// Revokes a live token; `None` when it is missing or already revoked.
pub async fn revoke(conn: &mut PgConnection, tenant: TenantId, id: Uuid) -> Result<Option<Token>> {
    sqlx::query(concat!(
        "UPDATE access_tokens SET revoked_at = now() WHERE tenant_id = $1 AND id = $2 AND revoked_at IS NULL RETURNING ",
        columns!()
    ))
    .bind(tenant)
    .bind(id)
    .fetch_optional(conn)
    .await?
    .as_ref()
    .map(token)
    .transpose()
}
