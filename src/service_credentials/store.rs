//! Service-credential SQL.

use sqlx::PgConnection;
use uuid::Uuid;

use super::ServiceCredential;
use crate::{error::Result, ids::TenantId};

pub async fn insert(
    conn: &mut PgConnection,
    tenant: TenantId,
    client_id: &str,
    hash: &[u8],
    name: &str,
    created_by: &str,
) -> Result<ServiceCredential> {
    Ok(sqlx::query_as!(
        ServiceCredential,
        "INSERT INTO service_credentials (tenant_id, id, client_id, secret_hash, name, created_by)
         VALUES ($1, $2, $3, $4, $5, $6)
         RETURNING id, client_id, name, created_by, created_at, last_used_at, revoked_at",
        tenant.0,
        Uuid::now_v7(),
        client_id,
        hash,
        name,
        created_by,
    )
    .fetch_one(conn)
    .await?)
}

pub async fn get(conn: &mut PgConnection, tenant: TenantId, id: Uuid) -> Result<Option<ServiceCredential>> {
    Ok(sqlx::query_as!(
        ServiceCredential,
        "SELECT id, client_id, name, created_by, created_at, last_used_at, revoked_at
         FROM service_credentials WHERE tenant_id = $1 AND id = $2",
        tenant.0,
        id,
    )
    .fetch_optional(conn)
    .await?)
}

pub async fn list(conn: &mut PgConnection, tenant: TenantId) -> Result<Vec<ServiceCredential>> {
    Ok(sqlx::query_as!(
        ServiceCredential,
        "SELECT id, client_id, name, created_by, created_at, last_used_at, revoked_at
         FROM service_credentials WHERE tenant_id = $1 ORDER BY created_at DESC, id DESC",
        tenant.0,
    )
    .fetch_all(conn)
    .await?)
}

pub async fn revoke(conn: &mut PgConnection, tenant: TenantId, id: Uuid) -> Result<Option<ServiceCredential>> {
    Ok(sqlx::query_as!(
        ServiceCredential,
        "UPDATE service_credentials SET revoked_at = now() WHERE tenant_id = $1 AND id = $2 AND revoked_at IS NULL
         RETURNING id, client_id, name, created_by, created_at, last_used_at, revoked_at",
        tenant.0,
        id,
    )
    .fetch_optional(conn)
    .await?)
}
