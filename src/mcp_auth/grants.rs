//! Grants: members list and revoke their authorized clients (grants), admins all of a
//! tenant's grants and clients. Each revocation is a compare-and-set with its admin-log row
//! in the same transaction; it takes effect on the next request on every replica because
//! every request reads the grant and client rows.

use serde_json::json;
use uuid::Uuid;

use super::{ClientView, GrantView, store};
use crate::{
    admin_log::{self, Audit, Entry},
    db::{Db, Scope},
    error::{Error, Result},
    ids::TenantId,
};

/// Grants, newest first: one member's (`member`), or the tenant's.
pub async fn grants(db: &Db, tenant: TenantId, member: Option<Uuid>) -> Result<Vec<GrantView>> {
    db.single_decision(Scope::Tenant(tenant), move |conn, _| Box::pin(store::grants(conn, tenant, member))).await
}

/// The tenant's clients, newest first.
pub async fn clients(db: &Db, tenant: TenantId) -> Result<Vec<ClientView>> {
    db.single_decision(Scope::Tenant(tenant), move |conn, _| Box::pin(store::clients(conn, tenant))).await
}

/// Revokes a live grant; with `only`, only that member's (anyone else's is not found).
pub async fn revoke_grant(db: &Db, tenant: TenantId, audit: &Audit, id: Uuid, only: Option<Uuid>) -> Result<()> {
    db.serializable(Scope::Tenant(tenant), |conn, _| {
        let audit = audit.clone();
        Box::pin(async move {
            if !store::revoke_grant(&mut *conn, tenant, id, only, &audit.actor, "revoked").await? {
                return Err(Error::NotFound { what: "grant" });
            }
            let entry = Entry {
                tenant: Some(tenant),
                audit: &audit,
                action: "mcp_grant.revoke",
                target: format!("mcp_grant:{id}"),
                before: None,
                after: Some(json!({ "reason": "revoked" })),
            };
            admin_log::record(conn, entry).await
        })
    })
    .await
}

/// Revokes a live client: all its grants stop working, and it cannot be authorized again.
pub async fn revoke_client(db: &Db, tenant: TenantId, audit: &Audit, id: Uuid) -> Result<()> {
    db.serializable(Scope::Tenant(tenant), |conn, _| {
        let audit = audit.clone();
        Box::pin(async move {
            if !store::revoke_client(&mut *conn, tenant, id, &audit.actor).await? {
                return Err(Error::NotFound { what: "client" });
            }
            let entry = Entry {
                tenant: Some(tenant),
                audit: &audit,
                action: "mcp_client.revoke",
                target: format!("mcp_client:{id}"),
                before: None,
                after: None,
            };
            admin_log::record(conn, entry).await
        })
    })
    .await
}
