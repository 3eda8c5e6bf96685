//! The operator web console under `/console`: server-rendered askama pages (templates in
//! `templates/console/`), one file per page group, calling the nouns' public functions.
//!
//! Security, in the order a request meets it:
//! - [`guard`] refuses any request that carries machine credentials (a token never drives the
//!   console), copies a form's `csrf_token` field into the `X-CSRF-Token` header so the one
//!   shared check in [`crate::auth::check_browser_write`] (exact same-origin `Origin` plus the
//!   session's CSRF token) runs on every form POST, and sets a strict Content-Security-Policy
//!   (no inline script or style: `console.js` and `console.css` are static files).
//! - [`Console`] authenticates the person through [`TenantCtx`] (another tenant's path is a 404),
//!   and every handler checks its permission on the server before doing anything.

mod activity;
mod approvals;
mod blueprints;
mod charts;
mod connector;
mod copies;
mod credentials;
mod dashboard;
mod editor;
mod findings;
mod home;
mod impersonation;
mod lifecycle;
mod mcp_clients;
mod members;
mod onboarding;
mod ops;
mod page;
mod pins;
mod policy;
mod quotas;
mod reports;
mod secret_rows;
mod setup;
mod sso;
mod tokens;
mod workspaces;

use crate::{
    AppState,
    auth::{Actor, CSRF_HEADER, TenantCtx},
    error::Error,
    members::{Member, Permission, Role},
};
use askama::Template;
use axum::{
    Router,
    body::Body,
    extract::{FromRequestParts, Request, State},
    http::{HeaderValue, Method, header, request::Parts},
    middleware::{self, Next},
    response::{IntoResponse, Response},
    routing::get,
};

pub use page::{FormError, PageError, render, when, when_opt, who};
pub use secret_rows::{Listed, SecretRow, creators, secret_rows};

/// Largest console form body; every console form is a few short fields.
const FORM_LIMIT_BYTES: usize = 64 * 1024;

pub fn router(state: &AppState) -> Router<AppState> {
    Router::new()
        .route("/console/static/console.css", get(css))
        .route("/console/static/console.js", get(js))
        .merge(home::router())
        .merge(tokens::router())
        .merge(credentials::router())
        .merge(members::router())
        .merge(workspaces::router())
        .merge(setup::router())
        .merge(editor::router())
        .merge(policy::router())
        .merge(blueprints::router())
        .merge(copies::router())
        .merge(quotas::router())
        .merge(pins::router())
        .merge(activity::router())
        .merge(dashboard::router())
        .merge(approvals::router())
        .merge(findings::router())
        .merge(ops::router())
        .merge(reports::router())
        .merge(mcp_clients::router())
        .merge(connector::router())
        .merge(lifecycle::router())
        .merge(sso::router())
        .merge(impersonation::router())
        .route_layer(middleware::from_fn_with_state(state.clone(), guard))
}

/// The Content-Security-Policy of every console page. `form-action` also names the sign-in
/// provider's origin, because signing out posts to `/logout`, which redirects there.
fn csp(state: &AppState) -> String {
    let provider = state
        .config
        .oidc_issuer
        .as_deref()
        .and_then(|i| url::Url::parse(i).ok())
        .map(|u| format!(" {}", u.origin().ascii_serialization()))
        .unwrap_or_default();
    format!(
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; \
         form-action 'self'{provider}; frame-ancestors 'none'; base-uri 'none'"
    )
}

fn has_machine_credentials(parts: &Parts) -> bool {
    parts.headers.contains_key(crate::auth::CLIENT_ID_HEADER)
        || parts.headers.contains_key(crate::auth::CLIENT_SECRET_HEADER)
        || parts.headers.contains_key(header::AUTHORIZATION)
}

async fn guard(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let (mut parts, body) = req.into_parts();
    let mut response = if has_machine_credentials(&parts) {
        PageError::from(Error::Forbidden {
            code: "person_required",
            message: "the console is for signed-in people; tokens use the API".into(),
        })
        .into_response()
    } else if parts.method == Method::POST {
        match axum::body::to_bytes(body, FORM_LIMIT_BYTES).await {
            Err(_) => PageError::from(Error::PayloadTooLarge).into_response(),
            Ok(bytes) => {
                // Only the form's own field counts for a form post: a header a page could not
                // have set is dropped, so the shared check sees exactly what the form carried.
                parts.headers.remove(CSRF_HEADER);
                let token = url::form_urlencoded::parse(&bytes).find(|(k, _)| k == "csrf_token").map(|(_, v)| v.into_owned());
                if let Some(value) = token.and_then(|t| HeaderValue::from_str(&t).ok()) {
                    parts.headers.insert(CSRF_HEADER, value);
                }
                next.run(Request::from_parts(parts, Body::from(bytes))).await
            }
        }
    } else {
        next.run(Request::from_parts(parts, body)).await
    };
    let headers = response.headers_mut();
    if let Ok(value) = HeaderValue::from_str(&csp(&state)) {
        headers.insert(header::CONTENT_SECURITY_POLICY, value);
    }
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    // Not `no-referrer`: under it Chromium sends `Origin: null` on the console's own form
    // posts, which the same-origin check must refuse.
    headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("same-origin"));
    if !headers.contains_key(header::CACHE_CONTROL) {
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    response
}

async fn css() -> Response {
    asset("text/css; charset=utf-8", include_str!("../../templates/console/static/console.css"))
}

async fn js() -> Response {
    asset("text/javascript; charset=utf-8", include_str!("../../templates/console/static/console.js"))
}

fn asset(content_type: &'static str, text: &'static str) -> Response {
    let mut response = text.into_response();
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    response.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("public, max-age=300"));
    response
}

/// One entry of the navigation.
pub struct NavItem {
    pub key: &'static str,
    pub label: &'static str,
    pub href: String,
}

/// The navigation's groups, by task, in their order; each entry's key names its group.
const NAV_GROUPS: [(&str, &[&str]); 3] = [
    ("Set up", &["workspaces", "blueprints", "setup"]),
    ("Access", &["tokens", "credentials", "members", "sso", "mcp-clients", "quotas"]),
    ("Observe", &["dashboard", "activity", "approvals", "findings", "suppress-rules", "reports", "admin-log", "ops-issues"]),
];

/// What the base template needs on every page.
pub struct Layout {
    pub title: String,
    /// The navigation entry of this page.
    pub current: &'static str,
    pub dev_banner: bool,
    pub csrf: String,
    pub who: String,
    pub tenant: Option<String>,
    pub role: String,
    /// (slug, name) of every tenant the person belongs to, for the switcher.
    pub tenants: Vec<(String, String)>,
    pub nav: Vec<NavItem>,
    /// The tenant's active impersonation grants: a banner on every page, for every member.
    pub impersonations: Vec<Banner>,
    /// Whether the viewer may revoke those grants from the banner (owners and admins).
    pub can_revoke: bool,
}

/// One active impersonation grant, as the banner shows it.
#[derive(Clone)]
pub struct Banner {
    pub id: String,
    pub staff_email: String,
    pub reason: String,
    pub expires_at: String,
}

/// A signed-in person in a tenant, with the page layout. Machines are refused.
pub struct Console {
    pub ctx: TenantCtx,
    pub member: Member,
    pub layout: Layout,
    /// Listed in `GATEHOUSE_PLATFORM_ADMINS` (ops issues are platform-wide).
    pub platform_admin: bool,
    /// The admin-log actor of a platform action by this person (as the platform API writes it).
    pub platform_actor: String,
}

impl Console {
    pub fn require(&self, permission: Permission) -> Result<(), PageError> {
        Ok(self.ctx.require_person(permission).map(|_| ())?)
    }

    /// Owners and admins (service credentials, members' management, the admin log).
    pub fn require_admin(&self) -> Result<(), PageError> {
        Ok(self.ctx.require_admin().map(|_| ())?)
    }

    /// Owners and admins with `activity_access` (suppress rules, reports), as their API.
    pub fn require_admin_with_activity(&self, what: &str) -> Result<(), PageError> {
        self.require(Permission::ActivityAccess)?;
        if is_admin(self.member.role) {
            Ok(())
        } else {
            Err(Error::Forbidden { code: "permission_denied", message: format!("only owners and admins {what}") }.into())
        }
    }

    /// Platform admins only (ops issues), as the platform API.
    pub fn require_platform_admin(&self) -> Result<(), PageError> {
        if self.platform_admin {
            Ok(())
        } else {
            Err(Error::Forbidden { code: "platform_admin_required", message: "this needs a platform admin".into() }.into())
        }
    }

    pub fn slug(&self) -> &str {
        &self.ctx.tenant.slug
    }

    /// The layout titled `title`, with `current` marked in the navigation.
    pub fn layout(&self, title: &str, current: &'static str) -> Layout {
        Layout { title: title.to_owned(), current, ..self.layout.clone_base() }
    }
}

impl Layout {
    fn clone_base(&self) -> Layout {
        Layout {
            title: self.title.clone(),
            current: self.current,
            dev_banner: self.dev_banner,
            csrf: self.csrf.clone(),
            who: self.who.clone(),
            tenant: self.tenant.clone(),
            role: self.role.clone(),
            tenants: self.tenants.clone(),
            nav: self.nav.iter().map(|n| NavItem { key: n.key, label: n.label, href: n.href.clone() }).collect(),
            impersonations: self.impersonations.clone(),
            can_revoke: self.can_revoke,
        }
    }
}

fn is_admin(role: Role) -> bool {
    matches!(role, Role::Owner | Role::Admin)
}

/// Owners and admins with `activity_access`: who writes suppress rules and runs reports
/// (the same rule as their API routes).
fn is_admin_with_activity(role: Role, ctx: &TenantCtx) -> bool {
    is_admin(role) && ctx.permissions.has(Permission::ActivityAccess)
}

/// The navigation shows only what the person may open; the handlers check again.
fn nav(slug: &str, role: Role, ctx: &TenantCtx, platform_admin: bool) -> Vec<NavItem> {
    let item = |key, label, path: &str| NavItem { key, label, href: format!("/console/t/{slug}{path}") };
    let mut items = vec![item("workspaces", "Workspaces", "/workspaces")];
    if ctx.permissions.has(Permission::CredentialAdministration) {
        items.push(item("blueprints", "Blueprints", "/blueprints"));
    }
    if ctx.permissions.has(Permission::AccessTokenManagement) {
        items.push(item("tokens", "Access tokens", "/tokens"));
    }
    if is_admin(role) {
        items.push(item("credentials", "Service credentials", "/service-credentials"));
    }
    items.push(item("members", "Members", "/members"));
    if ctx.permissions.has(Permission::ActivityAccess) {
        items.push(item("dashboard", "Dashboard", "/dashboard"));
        items.push(item("activity", "Activity", "/activity"));
    }
    if ctx.permissions.has(Permission::ApprovalDecision) {
        items.push(item("approvals", "Approvals", "/approvals"));
    }
    if ctx.permissions.has(Permission::ActivityAccess) {
        items.push(item("findings", "Findings", "/findings"));
        items.push(item("suppress-rules", "Suppress rules", "/suppress-rules"));
    }
    if is_admin_with_activity(role, ctx) {
        items.push(item("reports", "Reports", "/reports"));
    }
    if is_admin(role) {
        items.push(item("quotas", "Quotas", "/quotas"));
        items.push(item("admin-log", "Admin log", "/admin-log"));
        items.push(item("mcp-clients", "MCP clients", "/mcp-clients"));
        items.push(item("sso", "Single sign-on", "/sso"));
    }
    if platform_admin {
        items.push(item("ops-issues", "Ops issues", "/ops-issues"));
    }
    items.push(item("setup", "Client setup", "/setup"));
    items
}

impl Layout {
    /// The navigation grouped by task (a group with nothing this person may open is left out;
    /// an entry of no group goes last, under "More").
    pub fn nav_groups(&self) -> Vec<(&'static str, Vec<&NavItem>)> {
        let mut groups: Vec<(&'static str, Vec<&NavItem>)> =
            NAV_GROUPS.iter().map(|(name, keys)| (*name, self.nav.iter().filter(|n| keys.contains(&n.key)).collect())).collect();
        let placed = |n: &&NavItem| NAV_GROUPS.iter().any(|(_, keys)| keys.contains(&n.key));
        groups.push(("More", self.nav.iter().filter(|n| !placed(n)).collect()));
        groups.retain(|(_, items)| !items.is_empty());
        groups
    }
}

impl FromRequestParts<AppState> for Console {
    type Rejection = PageError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, PageError> {
        let next = parts.uri.path_and_query().map(|p| p.as_str().to_owned()).unwrap_or_else(|| "/console".into());
        let ctx = TenantCtx::from_request_parts(parts, state).await.map_err(|e| PageError::with_next(e, &next))?;
        let (member, session) = match &ctx.actor {
            Actor::Person { member, session } => ((**member).clone(), session),
            Actor::Machine { .. } => return Err(ctx.person().map(|_| ()).unwrap_err().into()),
        };
        let impersonations = crate::impersonation::active(&state.db, ctx.tenant.id)
            .await?
            .into_iter()
            .map(|g| Banner {
                id: g.id.to_string(),
                staff_email: g.staff_email,
                reason: g.reason,
                expires_at: g.expires_at.as_ref().map(when).unwrap_or_default(),
            })
            .collect();
        let tenants = crate::members::memberships(&state.db, &session.principal)
            .await?
            .into_iter()
            .filter(|(tenant, ..)| session.may_enter(*tenant))
            .map(|(_, slug, name, _)| (slug, name))
            .collect();
        let layout = Layout {
            title: String::new(),
            current: "",
            dev_banner: state.config.dev_sign_in(),
            csrf: session.csrf_token.clone(),
            who: who(session.email.as_deref(), session.display_name.as_deref(), &session.principal.subject),
            tenant: Some(ctx.tenant.slug.clone()),
            role: member.role.as_str().to_owned(),
            tenants,
            nav: nav(&ctx.tenant.slug, member.role, &ctx, crate::auth::platform_admin(state, session)),
            impersonations,
            // Staff under a grant may end their own grant through the API, not others' here.
            can_revoke: is_admin(member.role) && ctx.impersonation.is_none(),
        };
        let platform_admin = crate::auth::platform_admin(state, session);
        let platform_actor = format!("platform:{}#{}", session.principal.issuer, session.principal.subject);
        Ok(Console { ctx, member, layout, platform_admin, platform_actor })
    }
}

/// The keyset cursor of a list ordered by (time descending, key): `<time, RFC 3339 with
/// microseconds>_<key>` of the previous page's last row.
fn after_cursor(at: &chrono::DateTime<chrono::Utc>, key: &str) -> String {
    format!("{}_{key}", at.to_rfc3339_opts(chrono::SecondsFormat::Micros, true))
}

fn bad_cursor() -> Error {
    Error::invalid("invalid_cursor", Some("after"), "not a cursor this page made")
}

/// Parses an [`after_cursor`] from the query string (empty or absent: the first page).
fn parse_after(raw: Option<&str>) -> Result<Option<(chrono::DateTime<chrono::Utc>, String)>, Error> {
    let Some(raw) = raw.filter(|r| !r.is_empty()) else { return Ok(None) };
    let (at, key) = raw.split_once('_').ok_or_else(bad_cursor)?;
    let at = chrono::DateTime::parse_from_rfc3339(at).map_err(|_| bad_cursor())?.with_timezone(&chrono::Utc);
    if key.is_empty() {
        return Err(bad_cursor());
    }
    Ok(Some((at, key.to_owned())))
}

/// "Are you sure?" before a destructive action: a real page with a form, so it works without
/// script and the action itself is still a CSRF-checked POST.
#[derive(Template)]
#[template(path = "console/confirm.html")]
pub struct ConfirmPage {
    pub layout: Layout,
    pub question: String,
    pub consequence: String,
    pub action: String,
    pub button: String,
    pub cancel: String,
}
