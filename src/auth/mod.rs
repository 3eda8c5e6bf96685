//! Who is calling, and in which tenant: the `TenantCtx` extractor every tenant handler takes.
//!
//! - Machines present a service credential (`Gatehouse-Client-Id` + `Gatehouse-Client-Secret`)
//!   **and** an access token (`Authorization: Bearer gth_…`) of the same tenant, checked in
//!   one database round trip. Anything missing, malformed, unknown, revoked or mismatched
//!   answers the same 401. A request carrying any machine credential never falls back to a
//!   browser session.
//! - People present a session cookie; mutating requests also need the exact same-origin
//!   `Origin` and the session's CSRF token (`X-CSRF-Token`).
//! - Another tenant's path answers 404, exactly like a missing tenant.

use axum::{
    extract::FromRequestParts,
    http::{HeaderMap, HeaderName, Method, header, request::Parts},
};
use serde::Serialize;
use subtle::ConstantTimeEq;
use uuid::Uuid;

use crate::{
    AppState,
    admin_log::Audit,
    db::Scope,
    error::{Error, Result},
    ids::TenantId,
    members::{self, Member, Permission, Permissions, Principal, Role},
    secrets, service_credentials,
    sessions::{self, Session},
    tenants::{self, Status},
    tokens,
};

// Parsed names: a lookup by text parses the name first, on every request.
pub const CLIENT_ID_HEADER: HeaderName = HeaderName::from_static("gatehouse-client-id");
pub const CLIENT_SECRET_HEADER: HeaderName = HeaderName::from_static("gatehouse-client-secret");
pub const CSRF_HEADER: &str = "x-csrf-token";

/// The tenant a request acts in.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct TenantRef {
    pub id: TenantId,
    pub slug: String,
}

/// Who acts.
#[derive(Clone, Debug)]
pub enum Actor {
    /// A signed-in person who is a member of the tenant.
    Person { member: Box<Member>, session: Box<Session> },
    /// A machine: service credential plus access token.
    Machine { token_id: Uuid, credential_id: Uuid, principal: Option<Principal>, member_id: Option<Uuid>, role: Option<Role> },
}

#[derive(Clone, Debug)]
pub struct TenantCtx {
    pub tenant: TenantRef,
    pub actor: Actor,
    pub permissions: Permissions,
    pub audit: Audit,
    /// The tenant's epoch as this request read it (machines), to validate what the replica
    /// cached for the tenant (see [`crate::epochs`]).
    pub epoch: Option<i64>,
    /// Set when a platform admin acts under an impersonation grant (see
    /// [`crate::impersonation`]): the person is then no member, and acts as an admin whose
    /// member id is the grant's id.
    pub impersonation: Option<crate::impersonation::Live>,
}

impl TenantCtx {
    /// Denies unless the actor holds `permission`.
    pub fn require(&self, permission: Permission) -> Result<()> {
        if self.permissions.has(permission) {
            Ok(())
        } else {
            Err(Error::Forbidden { code: "permission_denied", message: format!("this needs the {permission} permission") })
        }
    }

    /// Denies machines outright, then checks the person's permission: a token never
    /// manages tokens, credentials or members, and never carries operator authority.
    pub fn require_person(&self, permission: Permission) -> Result<&Member> {
        let member = self.person()?;
        self.require(permission)?;
        Ok(member)
    }

    /// The signed-in member; machines are refused.
    pub fn person(&self) -> Result<&Member> {
        match &self.actor {
            Actor::Person { member, .. } => Ok(member),
            Actor::Machine { .. } => Err(Error::Forbidden {
                code: "person_required",
                message: "only a signed-in person may do this, not a token".into(),
            }),
        }
    }

    /// Owners and admins only (membership management).
    pub fn require_admin(&self) -> Result<&Member> {
        let member = self.require_person(Permission::AccessTokenManagement)?;
        if matches!(member.role, Role::Owner | Role::Admin) {
            Ok(member)
        } else {
            Err(Error::Forbidden { code: "permission_denied", message: "only owners and admins manage members".into() })
        }
    }

    /// Refuses staff acting under an impersonation grant (403 `impersonation_forbidden`):
    /// minting tokens, credentials or links, exporting sealed secrets, inviting members, and
    /// deciding grants are the tenant's own (docs/decisions.md, "Staff impersonation").
    pub fn refuse_impersonation(&self, what: &str) -> Result<()> {
        match &self.impersonation {
            None => Ok(()),
            Some(_) => Err(Error::Forbidden {
                code: "impersonation_forbidden",
                message: format!("staff under an impersonation grant may not {what}"),
            }),
        }
    }

    /// The signed-in member's own id, for what is personal to them (their credential slots and
    /// OAuth grants): a person with connector access, never staff under an impersonation
    /// grant, who have no member row to own anything.
    pub fn own_member(&self) -> Result<Uuid> {
        let id = self.require_person(Permission::ConnectorAccess)?.id;
        self.refuse_impersonation("hold personal credentials")?;
        Ok(id)
    }

    /// The member behind the request, if any (a person, or a token issued by one). Staff
    /// under an impersonation grant are no member: `None`.
    pub fn member_id(&self) -> Option<Uuid> {
        if self.impersonation.is_some() {
            return None;
        }
        match &self.actor {
            Actor::Person { member, .. } => Some(member.id),
            Actor::Machine { member_id, .. } => *member_id,
        }
    }

    /// The person behind the request, if any (a person, or a token issued by one).
    pub fn principal(&self) -> Option<Principal> {
        match &self.actor {
            Actor::Person { member, .. } => Some(member.principal()),
            Actor::Machine { principal, .. } => principal.clone(),
        }
    }
}

/// What the machine-authentication lookup found.
#[derive(Clone, Debug)]
pub struct MachineRow {
    tenant: TenantRef,
    status: String,
    credential_id: Uuid,
    token_id: Uuid,
    principal: Option<Principal>,
    member_id: Option<Uuid>,
    role: Option<Role>,
}

fn header(headers: &HeaderMap, name: impl header::AsHeaderName) -> Option<&str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

fn has_machine_credentials(headers: &HeaderMap) -> bool {
    headers.contains_key(CLIENT_ID_HEADER)
        || headers.contains_key(CLIENT_SECRET_HEADER)
        || header(headers, header::AUTHORIZATION).is_some_and(|v| v.len() >= 6 && v[..6].eq_ignore_ascii_case("bearer"))
}

/// Checks both machine credentials in one round trip. Every failure is the same 401. A
/// replica remembers a success, labelled with the tenant's epoch, and then only reads the
/// epoch (see [`crate::epochs`]); anything that could change the answer moves the epoch.
#[tracing::instrument(name = "auth::machine", skip_all, fields(tenant), err(level = "debug"))]
async fn authenticate_machine(state: &AppState, headers: &HeaderMap) -> Result<(MachineRow, i64)> {
    let client_id = header(headers, CLIENT_ID_HEADER).ok_or(Error::Unauthorized)?;
    let client_secret = header(headers, CLIENT_SECRET_HEADER).ok_or(Error::Unauthorized)?;
    let bearer = header(headers, header::AUTHORIZATION)
        .and_then(|v| v.split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, token)| token.trim())
        .ok_or(Error::Unauthorized)?;
    let well_formed =
        secrets::well_formed(client_id, service_credentials::CLIENT_ID_PREFIX, service_credentials::CLIENT_ID_CHARS)
            && secrets::well_formed(client_secret, service_credentials::SECRET_PREFIX, service_credentials::SECRET_CHARS)
            && secrets::well_formed(bearer, tokens::PREFIX, tokens::SECRET_CHARS);
    if !well_formed {
        return Err(Error::Unauthorized);
    }
    // The cache's key: one hash over the three values (well formed, so none holds the NUL
    // that separates them); the stored digests are computed only when the database is asked.
    let key: [u8; 32] = {
        use sha2::{Digest, Sha256};
        let mut h = Sha256::new();
        for part in [client_id, client_secret, bearer] {
            h.update(part.as_bytes());
            h.update([0]);
        }
        h.finalize().into()
    };
    if let Some((machine, label)) = state.machines.get(&key) {
        tracing::Span::current().record("tenant", tracing::field::display(machine.tenant.id));
        match crate::epochs::read(&state.db, machine.tenant.id).await? {
            Some(epoch) if epoch == label => {
                state.machines.count(true);
                return Ok((machine, epoch));
            }
            _ => state.machines.remove(&key),
        }
    }
    state.machines.count(false);
    let (secret_digest, token_digest) = (secrets::digest(client_secret), secrets::digest(bearer));
    // A function's result columns carry no nullability the macros can see: the aliases state
    // it (the tenant and epoch are always there; the rest depend on the credential's kind).
    // Boxed: the database's answer is the rare path here, and its future is kilobytes.
    let row = Box::pin(state.db.read(|conn, _| {
        // A read that meets a lost connection runs again, so each run has its own copy.
        let (secret_digest, token_digest) = (secret_digest.clone(), token_digest.clone());
        Box::pin(async move {
            Ok(sqlx::query!(
                r#"SELECT tenant_id AS "tenant_id!: TenantId", tenant_slug AS "tenant_slug!", tenant_status AS "tenant_status!",
                  credential_id AS "credential_id!", token_id AS "token_id!", principal_issuer, principal_subject,
                  member_id, member_role, epoch AS "epoch!"
             FROM gatehouse_authenticate_machine_at($1, $2, $3)"#,
                client_id,
                secret_digest,
                token_digest,
            )
            .fetch_optional(conn)
            .await?)
        })
    }))
    .await?
    .ok_or(Error::Unauthorized)?;
    let machine = MachineRow {
        tenant: TenantRef { id: row.tenant_id, slug: row.tenant_slug },
        status: row.tenant_status,
        credential_id: row.credential_id,
        token_id: row.token_id,
        principal: row.principal_issuer.zip(row.principal_subject).map(|(issuer, subject)| Principal { issuer, subject }),
        member_id: row.member_id,
        role: row.member_role.as_deref().map(Role::parse).transpose()?,
    };
    let epoch = row.epoch;
    tracing::Span::current().record("tenant", tracing::field::display(machine.tenant.id));
    state.db.replica().learn(machine.tenant.id, epoch);
    state.machines.put(key, machine.clone(), epoch);
    Ok((machine, epoch))
}

/// The value of the cookie `name` in the request.
pub fn cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}

/// The raw session id from the request's cookies.
pub fn session_cookie(headers: &HeaderMap, secure: bool) -> Option<&str> {
    cookie(headers, sessions::cookie_name(secure))
}

/// Mutating browser requests need the exact same-origin `Origin` and the CSRF token.
pub fn check_browser_write(
    state: &AppState,
    method: &Method,
    headers: &HeaderMap,
    session: &Session,
    form_token: Option<&str>,
) -> Result<()> {
    if matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS) {
        return Ok(());
    }
    if header(headers, header::ORIGIN) != Some(state.config.public_origin()) {
        return Err(Error::Forbidden { code: "origin_mismatch", message: "cross-origin request refused".into() });
    }
    let presented = header(headers, CSRF_HEADER).or(form_token).unwrap_or("");
    if !bool::from(presented.as_bytes().ct_eq(session.csrf_token.as_bytes())) {
        return Err(Error::Forbidden { code: "csrf_failed", message: "missing or wrong CSRF token".into() });
    }
    Ok(())
}

/// A signed-in person, in no particular tenant.
#[derive(Clone, Debug)]
pub struct SignedIn(pub Session);

impl FromRequestParts<AppState> for SignedIn {
    type Rejection = Error;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self> {
        let raw = session_cookie(&parts.headers, state.config.cookie_secure()).ok_or(Error::Unauthorized)?;
        let session = sessions::lookup(&state.db, raw).await?.ok_or(Error::Unauthorized)?;
        check_browser_write(state, &parts.method, &parts.headers, &session, None)?;
        Ok(SignedIn(session))
    }
}

impl FromRequestParts<AppState> for TenantCtx {
    type Rejection = Error;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self> {
        let [slug] = crate::extract::path_params(parts, ["tenant"]).await.ok_or(Error::NotFound { what: "tenant" })?;
        let slug = slug.ok_or(Error::NotFound { what: "tenant" })?;
        let request_id = crate::extract::request_id(&parts.headers);

        let ctx = if has_machine_credentials(&parts.headers) {
            let (m, epoch) = authenticate_machine(state, &parts.headers).await?;
            if m.tenant.slug != slug {
                return Err(Error::NotFound { what: "tenant" });
            }
            if m.status == Status::Moved.as_str() {
                return Err(Box::pin(moved(state, m.tenant.id, parts)).await);
            }
            refuse_inactive(&m.status)?;
            // A token gets connector access (its person's, when it carries one) and nothing else.
            let permissions = match m.role {
                Some(role) => Permissions::none()
                    .with(Permission::ConnectorAccess, Permissions::of_role(role).has(Permission::ConnectorAccess)),
                None if m.principal.is_none() => Permissions::none().with(Permission::ConnectorAccess, true),
                None => Permissions::none(),
            };
            TenantCtx {
                audit: Audit { actor: format!("token:{}", m.token_id), request_id },
                tenant: m.tenant,
                actor: Actor::Machine {
                    token_id: m.token_id,
                    credential_id: m.credential_id,
                    principal: m.principal,
                    member_id: m.member_id,
                    role: m.role,
                },
                permissions,
                epoch: Some(epoch),
                impersonation: None,
            }
        } else {
            // Boxed, as is every rare path here: a machine's request (the MCP hot path) should not
            // carry a browser session's lookups in its future, which axum moves on every request.
            Box::pin(person_ctx(state, parts, &slug, request_id)).await?
        };
        tracing::Span::current().record("tenant_id", tracing::field::display(ctx.tenant.id.0));
        // A mutating API call's Idempotency-Key is checked once the caller is known.
        crate::idempotency::admit(&state.db, ctx.tenant.id, &ctx.audit.actor).await?;
        Ok(ctx)
    }
}

/// A signed-in person's [`TenantCtx`] in the tenant `slug`: the session cookie, the tenant,
/// and the member (or a platform admin's impersonation grant).
async fn person_ctx(state: &AppState, parts: &Parts, slug: &str, request_id: Option<String>) -> Result<TenantCtx> {
    let raw = session_cookie(&parts.headers, state.config.cookie_secure());
    let session = match raw {
        Some(raw) => sessions::lookup(&state.db, raw).await?,
        None => None,
    };
    // A moved tenant answers where it went even before anyone signs in (a browser
    // follows the 308 to the new deployment's own sign-in).
    let Some(session) = session else { return Err(moved_or(state, slug, parts, Error::Unauthorized).await) };
    check_browser_write(state, &parts.method, &parts.headers, &session, None)?;
    let tenant = tenants::by_slug(&state.db, slug).await?;
    if tenant.status == Status::Moved {
        return Err(moved(state, tenant.id, parts).await);
    }
    // A session from another tenant's own connection is a stranger here.
    if !session.may_enter(tenant.id) {
        return Err(Error::NotFound { what: "tenant" });
    }
    let principal = session.principal.clone();
    // Only a platform admin's session may act under an impersonation grant.
    let staff = platform_admin(state, &session);
    let (member, permissions, impersonation) = state
        .db
        .serializable(Scope::Tenant(tenant.id), |conn, _| {
            let principal = principal.clone();
            let session = &session;
            Box::pin(async move {
                if let Some(member) = members::tx::by_principal(&mut *conn, tenant.id, &principal).await? {
                    crate::sso::tx::check_session(&mut *conn, tenant.id, session).await?;
                    let permissions = members::permissions(&mut *conn, tenant.id, member.role).await?;
                    return Ok(Some((member, permissions, None)));
                }
                if !staff {
                    return Ok(None);
                }
                let Some(live) = crate::impersonation::tx::live_for(&mut *conn, tenant.id, &principal).await? else {
                    return Ok(None);
                };
                let permissions = members::permissions(&mut *conn, tenant.id, IMPERSONATION_ROLE).await?;
                Ok(Some((impersonated_member(&live, &principal), permissions, Some(live))))
            })
        })
        .await?
        .ok_or(Error::NotFound { what: "tenant" })?;
    refuse_inactive(tenant.status.as_str())?;
    let actor = match &impersonation {
        Some(live) => crate::impersonation::actor(&live.staff_email, live.id),
        None => format!("member:{}", member.id),
    };
    Ok(TenantCtx {
        audit: Audit { actor, request_id },
        tenant: TenantRef { id: tenant.id, slug: tenant.slug },
        actor: Actor::Person { member: Box::new(member), session: Box::new(session) },
        permissions,
        epoch: None,
        impersonation,
    })
}

/// The `tenant_moved` answer for a sealed tenant (issue 26): where the request's path lives
/// now. A browser (no machine credentials, asking for HTML) is redirected there with 308;
/// API and MCP clients get 421 with the new address. A seal without a recorded address (it
/// cannot happen: the seal writes both in one transaction) reads as a missing tenant.
pub async fn moved(state: &AppState, tenant: TenantId, parts: &Parts) -> Error {
    let base = match tenants::moved_to(&state.db, tenant).await {
        Ok(Some(base)) => base,
        Ok(None) => return Error::NotFound { what: "tenant" },
        Err(e) => return e,
    };
    let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    let browser = !has_machine_credentials(&parts.headers)
        && header(&parts.headers, header::AUTHORIZATION).is_none()
        && header(&parts.headers, header::ACCEPT).is_some_and(|a| a.contains("text/html"));
    tenants::moved_error(&base, path, browser)
}

/// `e`, unless the tenant named `slug` was moved: then its [`moved`] answer.
async fn moved_or(state: &AppState, slug: &str, parts: &Parts, e: Error) -> Error {
    match tenants::by_slug(&state.db, slug).await {
        Ok(t) if t.status == Status::Moved => moved(state, t.id, parts).await,
        _ => e,
    }
}

/// The role staff act with under an impersonation grant (docs/decisions.md).
pub const IMPERSONATION_ROLE: Role = Role::Admin;

/// Whether a session is a platform admin's: its email is one the deployment names in
/// `GATEHOUSE_PLATFORM_ADMINS` (compared lowercased, as the configuration stores them), and
/// it was signed in by the deployment's own provider. A tenant's own provider asserts whatever
/// email its tenant's admin lets it, so its sessions are never platform admins.
pub fn platform_admin(state: &AppState, session: &Session) -> bool {
    let email = session.email.as_deref().map(str::to_lowercase).unwrap_or_default();
    session.sso_tenant.is_none() && !email.is_empty() && state.config.platform_admins.contains(&email)
}

/// The member staff act as under grant `live`: no row of the tenant's; its id is the grant's.
fn impersonated_member(live: &crate::impersonation::Live, principal: &Principal) -> Member {
    Member {
        id: live.id,
        issuer: principal.issuer.clone(),
        subject: principal.subject.clone(),
        email: Some(live.staff_email.clone()),
        display_name: Some(format!("{} (staff, impersonating)", live.staff_email)),
        role: IMPERSONATION_ROLE,
        created_at: live.starts_at,
    }
}

fn refuse_inactive(status: &str) -> Result<()> {
    if status == Status::Active.as_str() {
        Ok(())
    } else if status == Status::Suspended.as_str() {
        Err(Error::Forbidden { code: "tenant_suspended", message: "this tenant is suspended".into() })
    } else {
        Err(Error::NotFound { what: "tenant" })
    }
}
