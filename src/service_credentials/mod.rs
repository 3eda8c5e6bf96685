//! Service credentials: a tenant's client id (`gsc_…`) and 256-bit secret (`gss_…`) that admit
//! a machine at the edge, always together with an access token. Only the secret's SHA-256
//! is stored; the secret is shown once, at creation.

pub mod cli;
pub mod http;
mod store;

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::json;
use uuid::Uuid;

use crate::{
    admin_log::{self, Audit, Entry},
    db::{Db, Scope},
    error::{Error, Result},
    ids::TenantId,
    secrets,
    tokens::normalize_name,
};

pub const CLIENT_ID_PREFIX: &str = "gsc_";
pub const CLIENT_ID_CHARS: usize = 22;
pub const SECRET_PREFIX: &str = "gss_";
pub const SECRET_CHARS: usize = 43;

#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct ServiceCredential {
    pub id: Uuid,
    pub client_id: String,
    pub name: String,
    pub created_by: String,
    pub created_at: DateTime<Utc>,
    pub last_used_at: Option<DateTime<Utc>>,
    pub revoked_at: Option<DateTime<Utc>>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
#[schema(as = ServiceCredentialCreated)]
pub struct Created {
    pub credential: ServiceCredential,
    pub client_secret: String,
}

#[tracing::instrument(name = "service_credentials::create", skip_all, fields(tenant = %tenant))]
pub async fn create(db: &Db, tenant: TenantId, audit: &Audit, name: &str) -> Result<Created> {
    let name = normalize_name(name)?;
    let client_id = format!("{CLIENT_ID_PREFIX}{}", secrets::random_b64(16));
    let client_secret = format!("{SECRET_PREFIX}{}", secrets::random_b64(32));
    let hash = secrets::digest(&client_secret);
    let credential = db
        .serializable(Scope::Tenant(tenant), |conn, _| {
            let (name, hash, client_id) = (name.clone(), hash.clone(), client_id.clone());
            Box::pin(async move {
                let c = store::insert(&mut *conn, tenant, &client_id, &hash, &name, &audit.actor).await?;
                admin_log::record(
                    conn,
                    Entry {
                        tenant: Some(tenant),
                        audit,
                        action: "service_credential.create",
                        target: format!("service_credential:{}", c.id),
                        before: None,
                        after: Some(json!({ "name": c.name, "client_id": c.client_id })),
                    },
                )
                .await?;
                Ok(c)
            })
        })
        .await?;
    Ok(Created { credential, client_secret })
}

#[tracing::instrument(name = "service_credentials::list", skip_all, fields(tenant = %tenant))]
pub async fn list(db: &Db, tenant: TenantId) -> Result<Vec<ServiceCredential>> {
    db.serializable(Scope::Tenant(tenant), |conn, _| Box::pin(store::list(conn, tenant))).await
}

/// Revokes (idempotent); effective on the next request on every replica.
#[tracing::instrument(name = "service_credentials::revoke", skip_all, fields(tenant = %tenant, credential = %id))]
pub async fn revoke(db: &Db, tenant: TenantId, audit: &Audit, id: Uuid) -> Result<ServiceCredential> {
    db.serializable(Scope::Tenant(tenant), |conn, _| {
        Box::pin(async move {
            match store::revoke(&mut *conn, tenant, id).await? {
                Some(c) => {
                    admin_log::record(
                        conn,
                        Entry {
                            tenant: Some(tenant),
                            audit,
                            action: "service_credential.revoke",
                            target: format!("service_credential:{id}"),
                            before: None,
                            after: Some(json!({ "revoked_at": c.revoked_at })),
                        },
                    )
                    .await?;
                    Ok(c)
                }
                None => store::get(&mut *conn, tenant, id).await?.ok_or(Error::NotFound { what: "service credential" }),
            }
        })
    })
    .await
}
