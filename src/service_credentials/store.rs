//! Service-credential SQL.

use sqlx::{PgConnection, Row, postgres::PgRow};
use uuid::Uuid;

use super::ServiceCredential;
use crate::{error::Result, ids::TenantId};

macro_rules! columns {
    () => {
        "id, client_id, name, created_by, created_at, last_used_at, revoked_at"
    };
}

fn credential(row: &PgRow) -> Result<ServiceCredential> {
    Ok(ServiceCredential {
        id: row.try_get("id")?,
        client_id: row.try_get("client_id")?,
        name: row.try_get("name")?,
        created_by: row.try_get("created_by")?,
        created_at: row.try_get("created_at")?,
        last_used_at: row.try_get("last_used_at")?,
        revoked_at: row.try_get("revoked_at")?,
    })
}

pub async fn insert(
    conn: &mut PgConnection,
    tenant: TenantId,
    client_id: &str,
    hash: &[u8],
    name: &str,
    created_by: &str,
) -> Result<ServiceCredential> {
    let row = sqlx::query(concat!(
        "INSERT INTO service_credentials (tenant_id, id, client_id, secret_hash, name, created_by)
         VALUES ($1, $2, $3, $4, $5, $6) RETURNING ",
        columns!()
    ))
    .bind(tenant)
    .bind(Uuid::now_v7())
    .bind(client_id)
    .bind(hash)
    .bind(name)
    .bind(created_by)
    .fetch_one(conn)
    .await?;
    credential(&row)
}

pub async fn get(conn: &mut PgConnection, tenant: TenantId, id: Uuid) -> Result<Option<ServiceCredential>> {
    sqlx::query(concat!("SELECT ", columns!(), " FROM service_credentials WHERE tenant_id = $1 AND id = $2"))
        .bind(tenant)
        .bind(id)
        .fetch_optional(conn)
        .await?
        .as_ref()
        .map(credential)
        .transpose()
}

pub async fn list(conn: &mut PgConnection, tenant: TenantId) -> Result<Vec<ServiceCredential>> {
    sqlx::query(concat!(
        "SELECT ",
        columns!(),
        " FROM service_credentials WHERE tenant_id = $1 ORDER BY created_at DESC, id DESC"
    ))
    .bind(tenant)
    .fetch_all(conn)
    .await?
    .iter()
    .map(credential)
    .collect()
}

pub async fn revoke(conn: &mut PgConnection, tenant: TenantId, id: Uuid) -> Result<Option<ServiceCredential>> {
    sqlx::query(concat!(
        "UPDATE service_credentials SET revoked_at = now() WHERE tenant_id = $1 AND id = $2 AND revoked_at IS NULL RETURNING ",
        columns!()
    ))
    .bind(tenant)
    .bind(id)
    .fetch_optional(conn)
    .await?
    .as_ref()
    .map(credential)
    .transpose()
}
