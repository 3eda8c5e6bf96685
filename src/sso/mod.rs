//! Tenant-owned sign-in (issue 22 item 1): each tenant may bring its own OpenID providers.
//!
//! A connection names the provider (issuer), Gatehouse's client there and how Gatehouse
//! authenticates (a client secret or a private key, sealed in the vault), the email domains it
//! signs in, how a groups claim maps to roles, and whether a first sign-in creates the member
//! (`jit: create`) or needs an invitation. `/login` routes a person by email domain (or
//! `?tenant=slug`) to the right provider; a session signed in that way acts in that tenant
//! only. A tenant may require SSO: its members' other sessions are then refused.

pub mod cli;
pub mod http;
mod store;

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::json;
use uuid::Uuid;
use zeroize::Zeroizing;

use crate::{
    admin_log::{self, Audit, Entry},
    db::{Db, Scope},
    error::{Error, Result},
    ids::TenantId,
    members::{self, Role},
    sessions::Principal,
    vault::{Aad, KeyRing, Owner},
};

/// The vault purpose of a connection's client secret or private key.
const PURPOSE: &str = "sso_client";
/// Domains one connection may claim.
const MAX_DOMAINS: usize = 50;
/// Group values one connection may map.
const MAX_MAPPINGS: usize = 100;
/// Connections one tenant may hold.
pub const MAX_CONNECTIONS: i64 = 20;

/// How a first sign-in of someone who is not yet a member is treated.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Jit {
    /// Create the member, with the role the groups claim maps to (else the default role).
    Create,
    /// Only someone with an outstanding invitation of the tenant (for a verified email) joins.
    Invitation,
}

impl Jit {
    pub fn as_str(self) -> &'static str {
        match self {
            Jit::Create => "create",
            Jit::Invitation => "invitation",
        }
    }

    fn parse(s: &str) -> Result<Jit> {
        match s {
            "create" => Ok(Jit::Create),
            "invitation" => Ok(Jit::Invitation),
            _ => Err(Error::invalid("invalid_jit", Some("jit"), "jit is `create` or `invitation`")),
        }
    }
}

/// How Gatehouse authenticates at the connection's token endpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum AuthMethod {
    ClientSecretBasic,
    ClientSecretPost,
    PrivateKeyJwt,
}

impl AuthMethod {
    pub fn as_str(self) -> &'static str {
        match self {
            AuthMethod::ClientSecretBasic => "client_secret_basic",
            AuthMethod::ClientSecretPost => "client_secret_post",
            AuthMethod::PrivateKeyJwt => "private_key_jwt",
        }
    }

    fn parse(s: &str) -> Result<AuthMethod> {
        match s {
            "client_secret_basic" => Ok(AuthMethod::ClientSecretBasic),
            "client_secret_post" => Ok(AuthMethod::ClientSecretPost),
            "private_key_jwt" => Ok(AuthMethod::PrivateKeyJwt),
            _ => Err(Error::invalid(
                "invalid_auth_method",
                Some("auth_method"),
                "auth_method is client_secret_basic, client_secret_post or private_key_jwt",
            )),
        }
    }
}

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

/// A connection to create, or the new state of one (`version` required then; a missing
/// secret and key keep the sealed one).
#[derive(Clone, Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ConnectionInput {
    pub name: String,
    pub issuer: String,
    pub client_id: String,
    /// Default: `client_secret_basic` with a secret, `private_key_jwt` with a key.
    #[serde(default)]
    pub auth_method: Option<String>,
    /// Write-only.
    #[serde(default)]
    pub client_secret: Option<String>,
    /// Write-only: a PKCS#8 PEM (P-256, RSA or Ed25519) for `private_key_jwt`.
    #[serde(default)]
    pub private_key: Option<String>,
    pub email_domains: Vec<String>,
    #[serde(default)]
    pub groups_claim: Option<String>,
    #[serde(default)]
    pub role_mapping: BTreeMap<String, String>,
    #[serde(default)]
    pub default_role: Option<String>,
    #[serde(default)]
    pub jit: Option<String>,
    /// Update only: the version this edit was made from.
    #[serde(default)]
    pub version: Option<i64>,
}

/// A validated connection, ready to store.
struct Checked {
    name: String,
    issuer: String,
    client_id: String,
    auth_method: AuthMethod,
    /// The secret or PEM to seal; `None`: keep the sealed one (updates only).
    sealed_material: Option<Zeroizing<String>>,
    email_domains: Vec<String>,
    groups_claim: String,
    role_mapping: BTreeMap<String, Role>,
    default_role: Role,
    jit: Jit,
}

/// Lowercases and checks an email domain: dot-separated labels of letters, digits and
/// hyphens, at least two labels.
pub fn normalize_domain(raw: &str) -> Result<String> {
    let d = raw.trim().trim_end_matches('.').to_ascii_lowercase();
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && !l.starts_with('-')
            && !l.ends_with('-')
            && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
    };
    if d.len() < 3 || d.len() > 253 || !d.contains('.') || !d.split('.').all(label_ok) {
        return Err(Error::invalid(
            "invalid_email_domain",
            Some("email_domains"),
            format!("`{}` is not an email domain such as example.com", raw.chars().take(80).collect::<String>()),
        ));
    }
    Ok(d)
}

/// The domain of an email address, normalized (`None` when it has none).
pub fn domain_of(email: &str) -> Option<String> {
    let (_, domain) = email.trim().rsplit_once('@')?;
    normalize_domain(domain).ok()
}

/// An issuer: an `https` URL without query or fragment, or `http` on a loopback host (a
/// provider on this machine).
fn check_issuer(raw: &str) -> Result<String> {
    let bad = || Error::invalid("invalid_issuer", Some("issuer"), "issuer is an https URL (http only on loopback)");
    let url = url::Url::parse(raw.trim()).map_err(|_| bad())?;
    let loopback = matches!(url.host_str(), Some("localhost" | "127.0.0.1" | "[::1]"));
    let scheme_ok = url.scheme() == "https" || (url.scheme() == "http" && loopback);
    if !scheme_ok || url.query().is_some() || url.fragment().is_some() || !url.username().is_empty() || raw.len() > 2048 {
        return Err(bad());
    }
    Ok(raw.trim().to_owned())
}

fn check_text(value: &str, field: &'static str, code: &'static str, max: usize) -> Result<String> {
    let v = value.trim();
    if v.is_empty() || v.len() > max || v.chars().any(char::is_control) {
        return Err(Error::invalid(code, Some(field), format!("{field} is 1 to {max} characters without control characters")));
    }
    Ok(v.to_owned())
}

/// A client secret: 1 to 4096 bytes, no control characters.
fn check_secret(value: &str) -> Result<()> {
    if value.is_empty() || value.len() > 4096 || value.chars().any(char::is_control) {
        return Err(Error::invalid(
            "invalid_client_secret",
            Some("client_secret"),
            "a client secret is 1 to 4096 bytes without control characters",
        ));
    }
    Ok(())
}

fn parse_role(value: &str, field: &'static str) -> Result<Role> {
    match Role::parse(value) {
        Ok(Role::Owner) | Err(_) => Err(Error::invalid(
            "invalid_role",
            Some(field),
            "a mapped role is `admin`, `operator` or `member` (owners are the tenant's own)",
        )),
        Ok(role) => Ok(role),
    }
}

/// Validates an input. `creating`: a secret or a key is required.
fn check(input: &ConnectionInput, creating: bool) -> Result<Checked> {
    let name = check_text(&input.name, "name", "invalid_name", 80)?;
    let issuer = check_issuer(&input.issuer)?;
    let client_id = check_text(&input.client_id, "client_id", "invalid_client_id", 255)?;
    let material = match (&input.client_secret, &input.private_key) {
        (Some(_), Some(_)) => {
            return Err(Error::invalid(
                "invalid_client_auth",
                Some("client_secret"),
                "give a client_secret or a private_key, not both",
            ));
        }
        (Some(secret), None) => {
            check_secret(secret)?;
            Some((false, Zeroizing::new(secret.clone())))
        }
        (None, Some(pem)) => {
            // A key that cannot sign is refused now, not at the first sign-in.
            crate::oauth::assertion::assertion(pem, &client_id, &issuer).map_err(|_| {
                Error::invalid(
                    "invalid_private_key",
                    Some("private_key"),
                    "private_key is a PKCS#8 PEM of a P-256, RSA or Ed25519 key",
                )
            })?;
            Some((true, Zeroizing::new(pem.clone())))
        }
        (None, None) if creating => {
            return Err(Error::invalid(
                "invalid_client_auth",
                Some("client_secret"),
                "a connection needs a client_secret or a private_key",
            ));
        }
        (None, None) => None,
    };
    let auth_method = match (input.auth_method.as_deref(), &material) {
        (Some(m), _) => AuthMethod::parse(m)?,
        (None, Some((true, _))) => AuthMethod::PrivateKeyJwt,
        (None, _) => AuthMethod::ClientSecretBasic,
    };
    if let Some((is_key, _)) = &material
        && *is_key != (auth_method == AuthMethod::PrivateKeyJwt)
    {
        return Err(Error::invalid(
            "invalid_client_auth",
            Some("auth_method"),
            "private_key_jwt takes a private_key; the client_secret methods take a client_secret",
        ));
    }
    if input.email_domains.is_empty() || input.email_domains.len() > MAX_DOMAINS {
        return Err(Error::invalid(
            "invalid_email_domain",
            Some("email_domains"),
            format!("a connection signs in 1 to {MAX_DOMAINS} email domains"),
        ));
    }
    let mut email_domains: Vec<String> = input.email_domains.iter().map(|d| normalize_domain(d)).collect::<Result<_>>()?;
    email_domains.sort();
    email_domains.dedup();
    let groups_claim = match &input.groups_claim {
        None => "groups".to_owned(),
        Some(c) => {
            let c = check_text(c, "groups_claim", "invalid_groups_claim", 100)?;
            if !c.chars().all(|ch| ch.is_ascii_alphanumeric() || "_-.:/".contains(ch)) {
                return Err(Error::invalid("invalid_groups_claim", Some("groups_claim"), "groups_claim is a claim name"));
            }
            c
        }
    };
    if input.role_mapping.len() > MAX_MAPPINGS {
        return Err(Error::invalid(
            "invalid_role_mapping",
            Some("role_mapping"),
            format!("at most {MAX_MAPPINGS} mapped values"),
        ));
    }
    let mut role_mapping = BTreeMap::new();
    for (value, role) in &input.role_mapping {
        let value = check_text(value, "role_mapping", "invalid_role_mapping", 256)?;
        role_mapping.insert(value, parse_role(role, "role_mapping")?);
    }
    let default_role = match &input.default_role {
        None => Role::Member,
        Some(r) => parse_role(r, "default_role")?,
    };
    let jit = match &input.jit {
        None => Jit::Invitation,
        Some(j) => Jit::parse(j)?,
    };
    Ok(Checked {
        name,
        issuer,
        client_id,
        auth_method,
        sealed_material: material.map(|(_, m)| m),
        email_domains,
        groups_claim,
        role_mapping,
        default_role,
        jit,
    })
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
            let row = store::NewRow {
                id,
                name: &checked.name,
                issuer: &checked.issuer,
                client_id: &checked.client_id,
                auth_method: checked.auth_method,
                key_id: &key_id,
                envelope: &envelope,
                groups_claim: &checked.groups_claim,
                role_mapping: &checked.role_mapping,
                default_role: checked.default_role,
                jit: checked.jit,
            };
            store::insert(&mut *conn, tenant, &row, &audit.actor).await.map_err(|e| {
                e.on_constraint("sso_connections_client_key", || Error::Conflict {
                    code: "sso_connection_exists",
                    message: "this tenant already has a connection for that issuer and client id".into(),
                })
            })?;
            store::set_domains(&mut *conn, tenant, id, &checked.email_domains)
                .await
                .map_err(|e| e.on_constraint("sso_domains_domain_key", domain_taken))?;
            let c = store::get(&mut *conn, tenant, id).await?.ok_or(Error::NotFound { what: "SSO connection" })?;
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
            let before = store::get(&mut *conn, tenant, id).await?.ok_or(Error::NotFound { what: "SSO connection" })?;
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
            let row = store::NewRow {
                id,
                name: &checked.name,
                issuer: &checked.issuer,
                client_id: &checked.client_id,
                auth_method: checked.auth_method,
                key_id: sealed.as_ref().map_or("", |(k, _)| k),
                envelope: sealed.as_ref().map_or("", |(_, e)| e),
                groups_claim: &checked.groups_claim,
                role_mapping: &checked.role_mapping,
                default_role: checked.default_role,
                jit: checked.jit,
            };
            if !store::update(&mut *conn, tenant, &row, version, sealed.is_some()).await.map_err(|e| {
                e.on_constraint("sso_connections_client_key", || Error::Conflict {
                    code: "sso_connection_exists",
                    message: "this tenant already has a connection for that issuer and client id".into(),
                })
            })? {
                return Err(changed());
            }
            store::set_domains(&mut *conn, tenant, id, &checked.email_domains)
                .await
                .map_err(|e| e.on_constraint("sso_domains_domain_key", domain_taken))?;
            let after = store::get(&mut *conn, tenant, id).await?.ok_or(Error::NotFound { what: "SSO connection" })?;
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
            let before = store::get(&mut *conn, tenant, id).await?.ok_or(Error::NotFound { what: "SSO connection" })?;
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

/// Who a connection's provider says signed in (from the verified ID token).
pub struct SignIn<'a> {
    pub principal: &'a Principal,
    pub email: Option<&'a str>,
    pub email_verified: bool,
    pub name: Option<&'a str>,
    /// Every claim of the ID token (the groups claim among them).
    pub claims: &'a serde_json::Map<String, serde_json::Value>,
}

/// The role the connection maps the ID token's groups to: the highest mapped value present,
/// else the default role.
pub fn mapped_role(connection: &Connection, claims: &serde_json::Map<String, serde_json::Value>) -> Role {
    let values: Vec<&str> = match claims.get(&connection.groups_claim) {
        Some(serde_json::Value::String(s)) => vec![s.as_str()],
        Some(serde_json::Value::Array(items)) => items.iter().filter_map(|v| v.as_str()).collect(),
        _ => Vec::new(),
    };
    values
        .iter()
        .filter_map(|v| connection.role_mapping.get(*v).copied())
        .max_by_key(|r| rank(*r))
        .unwrap_or(connection.default_role)
}

fn rank(role: Role) -> u8 {
    match role {
        Role::Member => 0,
        Role::Operator => 1,
        Role::Admin => 2,
        Role::Owner => 3,
    }
}

/// Admits `identity` into the connection's tenant inside the sign-in transaction (platform
/// context): the email must be verified and of one of the connection's domains; the tenant's
/// own invitations for it are accepted; a person still not a member joins when the connection
/// creates members (`jit: create`), else is refused `sso_not_provisioned`; when the connection
/// maps groups, the member's role follows the groups claim (owners keep theirs). Every change
/// is admin-logged.
pub async fn admit(
    conn: &mut sqlx::PgConnection,
    audit: &Audit,
    tenant: TenantId,
    c: &Connection,
    who: &SignIn<'_>,
    started_at: DateTime<Utc>,
) -> Result<()> {
    let email = who.email.and_then(|e| members::normalize_email(e).ok());
    let Some(email) = email.filter(|e| who.email_verified && domain_of(e).is_some_and(|d| c.email_domains.contains(&d))) else {
        return Err(Error::Forbidden {
            code: "sso_email_not_allowed",
            message: "this connection signs in verified email addresses of its domains only".into(),
        });
    };
    let (p, name) = (who.principal, who.name);
    members::accept_invitations_in(&mut *conn, audit, p, &email, name, started_at, Some(tenant)).await?;
    // A connection that maps groups decides the role at every sign-in; one that maps none
    // leaves roles to the tenant (an invitation's, an admin's change), and gives new members
    // its default role.
    let from_groups = (!c.role_mapping.is_empty()).then(|| mapped_role(c, who.claims));
    match members::tx::by_principal(&mut *conn, tenant, p).await? {
        Some(member) => {
            if let Some(role) = from_groups {
                members::set_role_in(&mut *conn, tenant, audit, &member, role).await?;
            }
        }
        None if c.jit == Jit::Create => {
            let role = from_groups.unwrap_or(c.default_role);
            members::join_in(&mut *conn, tenant, audit, p, &email, name, role, started_at).await?
        }
        None => {
            return Err(Error::Forbidden {
                code: "sso_not_provisioned",
                message: "you are not a member of this organisation yet; ask an admin to invite you".into(),
            });
        }
    }
    Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn input() -> ConnectionInput {
        ConnectionInput {
            name: "Okta".into(),
            issuer: "https://acme.okta.example".into(),
            client_id: "gatehouse".into(),
            client_secret: Some("s3cret".into()),
            email_domains: vec!["Acme.Example".into()],
            ..Default::default()
        }
    }

    #[test]
    fn a_valid_input_is_normalized() {
        let c = check(&input(), true).unwrap();
        assert_eq!(c.email_domains, ["acme.example"]);
        assert_eq!(c.auth_method, AuthMethod::ClientSecretBasic);
        assert_eq!((c.jit, c.default_role, c.groups_claim.as_str()), (Jit::Invitation, Role::Member, "groups"));
    }

    #[test]
    fn bad_inputs_name_their_field() {
        let cases: Vec<(ConnectionInput, &str)> = vec![
            (ConnectionInput { issuer: "http://idp.example".into(), ..input() }, "invalid_issuer"),
            (ConnectionInput { issuer: "https://idp.example?x=1".into(), ..input() }, "invalid_issuer"),
            (ConnectionInput { email_domains: vec![], ..input() }, "invalid_email_domain"),
            (ConnectionInput { email_domains: vec!["localhost".into()], ..input() }, "invalid_email_domain"),
            (ConnectionInput { client_secret: None, ..input() }, "invalid_client_auth"),
            (ConnectionInput { private_key: Some("x".into()), ..input() }, "invalid_client_auth"),
            (ConnectionInput { client_secret: None, private_key: Some("not a pem".into()), ..input() }, "invalid_private_key"),
            (ConnectionInput { auth_method: Some("private_key_jwt".into()), ..input() }, "invalid_client_auth"),
            (ConnectionInput { jit: Some("always".into()), ..input() }, "invalid_jit"),
            (ConnectionInput { default_role: Some("owner".into()), ..input() }, "invalid_role"),
            (ConnectionInput { role_mapping: [("g".into(), "root".into())].into(), ..input() }, "invalid_role"),
            (ConnectionInput { name: " ".into(), ..input() }, "invalid_name"),
            (ConnectionInput { groups_claim: Some("a b".into()), ..input() }, "invalid_groups_claim"),
        ];
        for (bad, code) in cases {
            assert_eq!(check(&bad, true).err().map(|e| e.code()), Some(code), "{bad:?}");
        }
        assert!(check(&ConnectionInput { client_secret: None, ..input() }, false).is_ok(), "an update may keep the secret");
        assert!(check(&ConnectionInput { issuer: "http://127.0.0.1:4000".into(), ..input() }, true).is_ok(), "loopback");
    }

    fn identity(groups: serde_json::Value) -> serde_json::Map<String, serde_json::Value> {
        [("groups".to_owned(), groups)].into_iter().collect()
    }

    #[test]
    fn the_highest_mapped_group_wins_else_the_default() {
        let mut c = check(&input(), true).unwrap();
        c.role_mapping = [("eng".to_owned(), Role::Operator), ("admins".to_owned(), Role::Admin)].into();
        let conn = Connection {
            id: Uuid::nil(),
            name: c.name,
            issuer: c.issuer,
            client_id: c.client_id,
            auth_method: c.auth_method,
            email_domains: c.email_domains,
            groups_claim: c.groups_claim,
            role_mapping: c.role_mapping,
            default_role: Role::Member,
            jit: c.jit,
            version: 1,
            created_by: String::new(),
            created_at: Utc::now(),
            updated_at: Utc::now(),
        };
        assert_eq!(mapped_role(&conn, &identity(json!(["eng", "admins"]))), Role::Admin);
        assert_eq!(mapped_role(&conn, &identity(json!("eng"))), Role::Operator);
        assert_eq!(mapped_role(&conn, &identity(json!(["other"]))), Role::Member);
        assert_eq!(mapped_role(&conn, &identity(json!(42))), Role::Member);
    }

    proptest! {
        #[test]
        fn an_accepted_domain_is_lowercase_labels(s in "\\PC{0,40}") {
            if let Ok(d) = normalize_domain(&s) {
                prop_assert!(d.contains('.') && d == d.to_ascii_lowercase());
                prop_assert!(d.split('.').all(|l| !l.is_empty() && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')));
            }
        }

        #[test]
        fn domain_of_takes_the_last_at(local in "[a-z0-9.+]{1,10}", domain in "[a-z]{1,8}\\.[a-z]{2,5}") {
            prop_assert_eq!(domain_of(&format!("{local}@{domain}")), Some(domain.clone()));
            prop_assert_eq!(domain_of(&format!("{local}@x@{}", domain.to_uppercase())), Some(domain));
        }
    }
}
