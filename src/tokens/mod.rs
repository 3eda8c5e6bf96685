//! Access tokens: `gth_` + 43 characters of base64url (32 random bytes). Only the SHA-256 and
//! a 12-character display prefix are stored; the secret is shown once, at creation.

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
    members::Principal,
    secrets,
};

pub const PREFIX: &str = "gth_";
/// Characters after the prefix.
pub const SECRET_CHARS: usize = 43;
pub const DISPLAY_PREFIX_CHARS: usize = 12;
pub const MAX_NAME_CHARS: usize = 80;
/// Live tokens per tenant unless the deployment says otherwise.
pub const DEFAULT_CAP: i32 = 100;
pub const MAX_CAP: i32 = 1000;

#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct Token {
    pub id: Uuid,
    /// The first 12 characters of the secret, for recognising it.
    pub prefix: String,
    pub name: String,
    pub created_by: String,
    pub principal: Option<Principal>,
    pub created_at: DateTime<Utc>,
    pub last_used_at: Option<DateTime<Utc>>,
    pub revoked_at: Option<DateTime<Utc>>,
}

/// A token just created: the only time its secret exists outside the caller's hands.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[schema(as = TokenCreated)]
pub struct Created {
    pub token: Token,
    pub secret: String,
}

/// A display name: whitespace runs collapsed to one space, 1 to 80 characters.
pub fn normalize_name(raw: &str) -> Result<String> {
    let name = raw.split_whitespace().collect::<Vec<_>>().join(" ");
    if name.is_empty() || name.chars().count() > MAX_NAME_CHARS || name.chars().any(char::is_control) {
        return Err(Error::invalid("invalid_name", Some("name"), format!("a name is 1 to {MAX_NAME_CHARS} characters")));
    }
    Ok(name)
}

/// Creates a token, reserving a live slot by compare-and-set on the tenant's quota, so
/// concurrent creates never exceed the cap. `principal` is the person creating it from the
/// console (their grants then apply on every request); `None` for CLI-provisioned tokens.
#[tracing::instrument(name = "tokens::create", skip_all, fields(tenant = %tenant))]
pub async fn create(
    db: &Db,
    tenant: TenantId,
    audit: &Audit,
    name: &str,
    principal: Option<&Principal>,
    cap: i32,
) -> Result<Created> {
    let name = normalize_name(name)?;
    let secret = format!("{PREFIX}{}", secrets::random_b64(32));
    let hash = secrets::digest(&secret);
    let prefix: String = secret.chars().take(DISPLAY_PREFIX_CHARS).collect();
    let token = db
        .serializable(Scope::Tenant(tenant), |conn, _| {
            let (name, hash, prefix) = (name.clone(), hash.clone(), prefix.clone());
            Box::pin(async move {
                if !store::reserve(&mut *conn, tenant, cap).await? {
                    return Err(Error::Conflict {
                        code: "token_cap_reached",
                        message: format!("this tenant has reached its cap of {cap} live tokens; revoke one first"),
                    });
                }
                let token = store::insert(&mut *conn, tenant, &hash, &prefix, &name, &audit.actor, principal).await?;
                admin_log::record(
                    conn,
                    Entry {
                        tenant: Some(tenant),
                        audit,
                        action: "token.create",
                        target: format!("token:{}", token.id),
                        before: None,
                        after: Some(json!({ "name": token.name, "prefix": token.prefix, "principal": token.principal })),
                    },
                )
                .await?;
                Ok(token)
            })
        })
        .await?;
    Ok(Created { token, secret })
}

#[tracing::instrument(name = "tokens::list", skip_all, fields(tenant = %tenant))]
pub async fn list(db: &Db, tenant: TenantId) -> Result<Vec<Token>> {
    db.serializable(Scope::Tenant(tenant), |conn, _| Box::pin(store::list(conn, tenant))).await
}

#[tracing::instrument(name = "tokens::rename", skip_all, fields(tenant = %tenant, token = %id))]
pub async fn rename(db: &Db, tenant: TenantId, audit: &Audit, id: Uuid, name: &str) -> Result<Token> {
    let name = normalize_name(name)?;
    db.serializable(Scope::Tenant(tenant), |conn, _| {
        let name = name.clone();
        Box::pin(async move {
            let before = store::get(&mut *conn, tenant, id).await?.ok_or(Error::NotFound { what: "token" })?;
            if before.name == name {
                return Ok(before);
            }
            let after = store::rename(&mut *conn, tenant, id, &name).await?.ok_or(Error::NotFound { what: "token" })?;
            admin_log::record(
                conn,
                Entry {
                    tenant: Some(tenant),
                    audit,
                    action: "token.rename",
                    target: format!("token:{id}"),
                    before: Some(json!({ "name": before.name })),
                    after: Some(json!({ "name": after.name })),
                },
            )
            .await?;
            Ok(after)
        })
    })
    .await
}

/// Revokes a token (idempotent) and releases its live slot. Takes effect on the next
/// request on every replica: machine authentication reads the row every time.
#[tracing::instrument(name = "tokens::revoke", skip_all, fields(tenant = %tenant, token = %id))]
pub async fn revoke(db: &Db, tenant: TenantId, audit: &Audit, id: Uuid) -> Result<Token> {
    db.serializable(Scope::Tenant(tenant), |conn, _| {
        Box::pin(async move {
            match store::revoke(&mut *conn, tenant, id).await? {
                Some(token) => {
                    store::release(&mut *conn, tenant).await?;
                    admin_log::record(
                        conn,
                        Entry {
                            tenant: Some(tenant),
                            audit,
                            action: "token.revoke",
                            target: format!("token:{id}"),
                            before: None,
                            after: Some(json!({ "revoked_at": token.revoked_at })),
                        },
                    )
                    .await?;
                    Ok(token)
                }
                None => store::get(&mut *conn, tenant, id).await?.ok_or(Error::NotFound { what: "token" }),
            }
        })
    })
    .await
}

/// Revokes every live personal token of `principal` inside the caller's tenant transaction,
/// releasing their live slots, with an admin-log row each (SCIM deprovisioning: a person
/// invited again later does not get their old tokens back). The count revoked.
pub async fn revoke_for_principal_in(
    conn: &mut sqlx::PgConnection,
    tenant: TenantId,
    audit: &Audit,
    principal: &Principal,
) -> Result<usize> {
    let ids = store::revoke_for_principal(&mut *conn, tenant, principal).await?;
    for id in &ids {
        store::release(&mut *conn, tenant).await?;
        let entry = Entry {
            tenant: Some(tenant),
            audit,
            action: "token.revoke",
            target: format!("token:{id}"),
            before: None,
            after: Some(json!({ "reason": "member_deprovisioned" })),
        };
        admin_log::record(&mut *conn, entry).await?;
    }
    Ok(ids.len())
}
