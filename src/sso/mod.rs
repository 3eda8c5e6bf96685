//! Tenant-owned sign-in (issue 22 item 1): each tenant may bring its own OpenID providers.
//!
//! A connection names the provider (issuer), Gatehouse's client there and how Gatehouse
//! authenticates (a client secret or a private key, sealed in the vault), the email domains it
//! signs in, how a groups claim maps to roles, and whether a first sign-in creates the member
//! (`jit: create`) or needs an invitation. `/login` routes a person by email domain (or
//! `?tenant=slug`) to the right provider; a session signed in that way acts in that tenant
//! only. A tenant may require SSO: its members' other sessions are then refused.

mod admit;
pub mod cli;
pub mod http;
mod input;
mod store;

pub use admit::{SignIn, admit, mapped_role};
pub use input::{AuthMethod, ConnectionInput, Jit, domain_of, normalize_domain};

use input::{Checked, check};

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::json;
use uuid::Uuid;
use zeroize::Zeroizing;

use crate::{
    admin_log::{self, Audit, Entry},
    db::{Db, Scope},
    error::{Error, Result},
    ids::TenantId,
    members::Role,
    vault::{Aad, KeyRing, Owner},
};

/// The vault purpose of a connection's client secret or private key.
const PURPOSE: &str = "sso_client";
/// Connections one tenant may hold.
pub const MAX_CONNECTIONS: i64 = 20;

/// A tenant's OpenID connection as the API shows it: never its secret or key.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct Connection {
    pub id: Uuid,
    pub name: String,
    pub issuer: String,
    pub client_id: String,
    pub auth_method: AuthMethod,
    /// Email domains this connection signs in (and that `/login` routes to it).
    pub email_domains: Vec<String>,
    /// The ID token claim whose values `role_mapping` maps (a string or an array of strings).
    pub groups_claim: String,
    /// Claim value → role (`admin`, `operator` or `member`); the highest match wins.
    pub role_mapping: BTreeMap<String, Role>,
    /// The role of a member no mapped value names.
    pub default_role: Role,
    pub jit: Jit,
    /// The compare-and-set token: send it back with an update.
    pub version: i64,
    pub created_by: String,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

fn aad(tenant: TenantId, id: &str) -> Aad<'_> {
    Aad { tenant: tenant.0, workspace: Uuid::nil(), connector: id, owner: Owner::Shared, purpose: PURPOSE }
}

fn ring(state_ring: Option<&KeyRing>) -> Result<&KeyRing> {
    state_ring.ok_or_else(|| Error::Conflict {
        code: "vault_disabled",
        message: "an SSO connection's client secret is sealed in the vault: set GATEHOUSE_VAULT_KEYS on every replica".into(),
    })
}

fn audit_view(c: &Connection) -> serde_json::Value {
    json!({
        "name": c.name, "issuer": c.issuer, "client_id": c.client_id, "auth_method": c.auth_method,
        "email_domains": c.email_domains, "groups_claim": c.groups_claim, "role_mapping": c.role_mapping,
        "default_role": c.default_role, "jit": c.jit, "version": c.version,
    })
}

fn domain_taken() -> Error {
    Error::Conflict {
        code: "sso_domain_taken",
        message: "an email domain of this connection is already routed to another connection".into(),
    }
}

/// A violation of the tenant's one connection per issuer and client id.
fn exists(e: Error) -> Error {
    e.on_constraint("sso_connections_client_key", || Error::Conflict {
        code: "sso_connection_exists",
        message: "this tenant already has a connection for that issuer and client id".into(),
    })
}

/// Stores the connection's domains (one connection per domain in the deployment).
async fn set_domains(conn: &mut sqlx::PgConnection, tenant: TenantId, id: Uuid, checked: &Checked) -> Result<()> {
    store::set_domains(conn, tenant, id, &checked.email_domains)
        .await
        .map_err(|e| e.on_constraint("sso_domains_domain_key", domain_taken))
}

/// The stored connection, or 404.
async fn stored(conn: &mut sqlx::PgConnection, tenant: TenantId, id: Uuid) -> Result<Connection> {
    store::get(conn, tenant, id).await?.ok_or(Error::NotFound { what: "SSO connection" })
}

fn too_many() -> Error {
    Error::Conflict { code: "sso_connection_cap", message: format!("a tenant holds at most {MAX_CONNECTIONS} SSO connections") }
}

/// Adds a connection, its domains and its admin-log row in one transaction.
pub async fn create(
    db: &Db,
    ring_opt: Option<&KeyRing>,
    tenant: TenantId,
    audit: &Audit,
    input: &ConnectionInput,
) -> Result<Connection> {
    let checked = check(input, true)?;
    let ring = ring(ring_opt)?;
    let id = Uuid::now_v7();
    let id_text = id.to_string();
    let material = checked.sealed_material.as_ref().map(|m| m.as_bytes()).unwrap_or_default();
    let envelope = ring.seal(&aad(tenant, &id_text), material);
    let key_id = ring.active().to_owned();
    db.serializable(Scope::Tenant(tenant), |conn, _| {
        let (checked, envelope, key_id) = (&checked, envelope.clone(), key_id.clone());
        Box::pin(async move {
            if store::count(&mut *conn, tenant).await? >= MAX_CONNECTIONS {
                return Err(too_many());
            }
            store::insert(&mut *conn, tenant, &checked.row(id, &key_id, &envelope), &audit.actor).await.map_err(exists)?;
            set_domains(&mut *conn, tenant, id, checked).await?;
            let c = stored(&mut *conn, tenant, id).await?;
            let entry = Entry {
                tenant: Some(tenant),
                audit,
                action: "sso.connection.create",
                target: format!("sso_connection:{id}"),
                before: None,
                after: Some(audit_view(&c)),
            };
            admin_log::record(conn, entry).await?;
            Ok(c)
        })
    })
    .await
}

/// Replaces a connection's settings by compare-and-set on `version` (412
/// `sso_connection_changed` when it moved on); a missing secret and key keep the sealed one.
pub async fn update(
    db: &Db,
    ring_opt: Option<&KeyRing>,
    tenant: TenantId,
    audit: &Audit,
    id: Uuid,
    input: &ConnectionInput,
) -> Result<Connection> {
    let checked = check(input, false)?;
    let version = input.version.ok_or(Error::invalid(
        "invalid_version",
        Some("version"),
        "an update names the version it was made from",
    ))?;
    let id_text = id.to_string();
    let sealed = match &checked.sealed_material {
        Some(m) => {
            let ring = ring(ring_opt)?;
            Some((ring.active().to_owned(), ring.seal(&aad(tenant, &id_text), m.as_bytes())))
        }
        None => None,
    };
    db.serializable(Scope::Tenant(tenant), |conn, _| {
        let (checked, sealed) = (&checked, sealed.clone());
        Box::pin(async move {
            let before = stored(&mut *conn, tenant, id).await?;
            if before.version != version {
                return Err(changed());
            }
            if sealed.is_none()
                && (before.auth_method == AuthMethod::PrivateKeyJwt) != (checked.auth_method == AuthMethod::PrivateKeyJwt)
            {
                return Err(Error::invalid(
                    "invalid_client_auth",
                    Some("auth_method"),
                    "changing between a secret and a private key needs the new client_secret or private_key",
                ));
            }
            let (key_id, envelope) = sealed.as_ref().map_or(("", ""), |(k, e)| (k.as_str(), e.as_str()));
            let row = checked.row(id, key_id, envelope);
            if !store::update(&mut *conn, tenant, &row, version, sealed.is_some()).await.map_err(exists)? {
                return Err(changed());
            }
            set_domains(&mut *conn, tenant, id, checked).await?;
            let after = stored(&mut *conn, tenant, id).await?;
            let entry = Entry {
                tenant: Some(tenant),
                audit,
                action: "sso.connection.update",
                target: format!("sso_connection:{id}"),
                before: Some(audit_view(&before)),
                after: Some(json!({ "settings": audit_view(&after), "secret_replaced": sealed.is_some() })),
            };
            admin_log::record(conn, entry).await?;
            Ok(after)
        })
    })
    .await
}

fn changed() -> Error {
    Error::Precondition {
        code: "sso_connection_changed",
        message: "the connection changed since you read it; read it again and redo your edit".into(),
    }
}

/// Removes a connection (its domains go with it). Sessions it signed in stay until they end;
/// new sign-ins through it are impossible at once.
pub async fn delete(db: &Db, tenant: TenantId, audit: &Audit, id: Uuid) -> Result<()> {
    db.serializable(Scope::Tenant(tenant), |conn, _| {
        Box::pin(async move {
            let before = stored(&mut *conn, tenant, id).await?;
            store::delete(&mut *conn, tenant, id).await?;
            let entry = Entry {
                tenant: Some(tenant),
                audit,
                action: "sso.connection.delete",
                target: format!("sso_connection:{id}"),
                before: Some(audit_view(&before)),
                after: None,
            };
            admin_log::record(conn, entry).await
        })
    })
    .await
}

pub async fn list(db: &Db, tenant: TenantId) -> Result<Vec<Connection>> {
    db.serializable(Scope::Tenant(tenant), |conn, _| Box::pin(store::list(conn, tenant))).await
}

pub async fn get(db: &Db, tenant: TenantId, id: Uuid) -> Result<Connection> {
    db.serializable(Scope::Tenant(tenant), |conn, _| Box::pin(store::get(conn, tenant, id)))
        .await?
        .ok_or(Error::NotFound { what: "SSO connection" })
}

/// The tenant's SSO settings.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct Settings {
    /// The tenant asked that its members sign in only through its connections.
    pub required: bool,
    /// `required`, and the tenant has a connection: what the tenant's requests see.
    pub enforced: bool,
    pub connections: Vec<Connection>,
}

pub async fn settings(db: &Db, tenant: TenantId) -> Result<Settings> {
    db.serializable(Scope::Tenant(tenant), |conn, _| {
        Box::pin(async move {
            let required = store::required(&mut *conn, tenant).await?;
            let connections = store::list(&mut *conn, tenant).await?;
            Ok(Settings { required, enforced: required && !connections.is_empty(), connections })
        })
    })
    .await
}

/// Turns SSO enforcement on or off. On needs a connection (`sso_no_connection`) and, when a
/// person asks, their own session signed in through this tenant's connection
/// (`sso_session_required`): nobody can lock themselves out by enforcing a sign-in they have
/// not used.
pub async fn set_required(
    db: &Db,
    tenant: TenantId,
    audit: &Audit,
    required: bool,
    asking_session: Option<&crate::sessions::Session>,
) -> Result<Settings> {
    if required && asking_session.is_some_and(|s| s.sso_tenant != Some(tenant)) {
        return Err(Error::Conflict {
            code: "sso_session_required",
            message: "sign in through this tenant's SSO connection before requiring it".into(),
        });
    }
    db.serializable(Scope::Platform { reason: "tenant SSO setting" }, |conn, _| {
        Box::pin(async move {
            let before = store::required(&mut *conn, tenant).await?;
            let connections = store::list(&mut *conn, tenant).await?;
            if required && connections.is_empty() {
                return Err(Error::Conflict {
                    code: "sso_no_connection",
                    message: "add an SSO connection before requiring SSO".into(),
                });
            }
            if before != required {
                store::set_required(&mut *conn, tenant, required).await?;
                let entry = Entry {
                    tenant: Some(tenant),
                    audit,
                    action: "sso.require",
                    target: "tenant".into(),
                    before: Some(json!({ "required": before })),
                    after: Some(json!({ "required": required })),
                };
                admin_log::record(conn, entry).await?;
            }
            Ok(Settings { required, enforced: required && !connections.is_empty(), connections })
        })
    })
    .await
}

/// Where `/login` sends a person: a tenant's connection, or `None` for the deployment's own
/// provider. `tenant`: `?tenant=slug` (its connection for the email's domain, else its first);
/// else the connection of the email's domain. An unknown tenant or domain goes to the
/// deployment's provider, exactly like one without SSO, so nothing tells which exist.
pub async fn route(db: &Db, tenant_slug: Option<&str>, email: Option<&str>) -> Result<Option<(TenantId, Uuid)>> {
    let domain = email.and_then(domain_of);
    let (slug, domain) = (tenant_slug.map(str::to_owned), domain);
    db.serializable(Scope::Platform { reason: "route a sign-in" }, move |conn, _| {
        let (slug, domain) = (slug.clone(), domain.clone());
        Box::pin(async move { store::route(conn, slug.as_deref(), domain.as_deref()).await })
    })
    .await
}

/// Whether any tenant of the deployment has a connection (then `/login` asks for the email).
pub async fn any(db: &Db) -> Result<bool> {
    db.serializable(Scope::Platform { reason: "is SSO in use" }, |conn, _| Box::pin(store::any(conn))).await
}

/// A connection with its sealed envelope (`None`: it is gone).
pub async fn sealed(db: &Db, tenant: TenantId, id: Uuid) -> Result<Option<(Connection, String)>> {
    db.serializable(Scope::Tenant(tenant), |conn, _| Box::pin(store::get_sealed(conn, tenant, id))).await
}

/// Opens a connection's envelope: its client secret, or its private key's PEM.
pub fn open(ring_opt: Option<&KeyRing>, tenant: TenantId, id: Uuid, envelope: &str) -> Result<Zeroizing<String>> {
    let id_text = id.to_string();
    let material = ring(ring_opt)?.open(&aad(tenant, &id_text), envelope).map_err(|_| Error::Conflict {
        code: "credential_unreadable",
        message: "this SSO connection's secret cannot be opened with the vault's keys; set it again".into(),
    })?;
    Ok(Zeroizing::new(String::from_utf8_lossy(&material).into_owned()))
}

/// What other nouns may run inside their own transaction; the store itself is private.
pub mod tx {
    use super::*;

    /// Whether `tenant` requires SSO and has a connection to require it with.
    pub async fn enforced(conn: &mut sqlx::PgConnection, tenant: TenantId) -> Result<bool> {
        store::enforced(conn, tenant).await
    }

    /// Refuses a session that may not act in `tenant`: signed in through another tenant's
    /// connection (404, like any tenant one is not in), or not through this tenant's own while
    /// it requires SSO (403 `sso_required`). Call after the membership was found.
    pub async fn check_session(
        conn: &mut sqlx::PgConnection,
        tenant: TenantId,
        session: &crate::sessions::Session,
    ) -> Result<()> {
        if !session.may_enter(tenant) {
            return Err(Error::NotFound { what: "tenant" });
        }
        if session.sso_tenant != Some(tenant) && enforced(conn, tenant).await? {
            return Err(Error::Forbidden {
                code: "sso_required",
                message: "this organisation requires signing in through its SSO; sign out, then sign in with your work email"
                    .into(),
            });
        }
        Ok(())
    }
}
