//! The authorization endpoint: `GET /t/{tenant}/oauth/authorize` signs the person in through
//! the tenant's OpenID provider (the ordinary `/login`, returning here), then shows a consent
//! page; `POST` (same-origin, CSRF token) records the grant and redirects with a code.
//!
//! Order matters: the client and its redirect URI are checked first and refused with a page
//! (never a redirect), so nothing is ever sent to an unchecked URI; later problems go back
//! to the client as OAuth errors on its redirect URI.

use axum::{
    Form,
    extract::{Path, Query, State},
    http::{HeaderMap, Method, StatusCode},
    response::{IntoResponse, Redirect, Response},
};
use serde::Deserialize;
use serde_json::json;
use url::Url;

use super::{SCOPE, clients, parse_resource, redirect_allowed, redirect_registered, store};
use crate::{
    AppState,
    admin_log::{self, Audit, Entry},
    auth::{check_browser_write, session_cookie},
    db::Scope,
    error::Error,
    members::{self, Member},
    pages::{self, escape},
    secrets,
    sessions::{self, Session},
    tenants::{self, Tenant},
    workspaces,
};

/// The parameters of an authorization request (query on GET, form fields on POST).
#[derive(Clone, Debug, Default, Deserialize)]
pub struct Params {
    pub response_type: Option<String>,
    pub client_id: Option<String>,
    pub redirect_uri: Option<String>,
    pub code_challenge: Option<String>,
    pub code_challenge_method: Option<String>,
    pub state: Option<String>,
    pub scope: Option<String>,
    pub resource: Option<String>,
}

/// The consent form adds these.
#[derive(Deserialize)]
pub struct Decision {
    #[serde(flatten)]
    params: Params,
    csrf_token: Option<String>,
    decision: Option<String>,
}

/// An authorization request that passed every check.
struct Checked {
    tenant: Tenant,
    client: clients::Resolved,
    redirect_uri: String,
    state: Option<String>,
    challenge: String,
    resource: String,
    bound: workspaces::Bound,
    pool: Option<String>,
}

enum Refusal {
    /// Shown to the person: the redirect URI is not (yet) trusted.
    Page(Error),
    /// Sent back to the client on its checked redirect URI.
    Redirect { uri: String, state: Option<String>, issuer: String, error: &'static str, description: String },
}

impl From<Error> for Refusal {
    fn from(e: Error) -> Self {
        Refusal::Page(e)
    }
}

fn page_for(state: &AppState, e: Error) -> Response {
    let status = e.status();
    if status == StatusCode::INTERNAL_SERVER_ERROR || status == StatusCode::SERVICE_UNAVAILABLE {
        return e.into_response();
    }
    pages::page(
        if status == StatusCode::UNPROCESSABLE_ENTITY { StatusCode::BAD_REQUEST } else { status },
        "Authorization refused",
        state.config.dev_sign_in(),
        &format!("<p>{}</p><p><code>{}</code></p>", escape(&e.to_string()), escape(e.code())),
    )
}

/// `uri` with the response parameters appended (RFC 6749 §4.1.2, RFC 9207 `iss`).
fn redirect_with(uri: &str, pairs: &[(&str, &str)]) -> Response {
    let Ok(mut url) = Url::parse(uri) else {
        return Error::invalid("invalid_redirect_uri", Some("redirect_uri"), "malformed").into_response();
    };
    {
        let mut q = url.query_pairs_mut();
        for (k, v) in pairs {
            q.append_pair(k, v);
        }
    }
    let mut response = Redirect::to(url.as_str()).into_response();
    response.headers_mut().insert(axum::http::header::CACHE_CONTROL, axum::http::HeaderValue::from_static("no-store"));
    response
}

fn refuse(state: &AppState, r: Refusal) -> Response {
    match r {
        Refusal::Page(e) => page_for(state, e),
        Refusal::Redirect { uri, state: st, issuer, error, description } => {
            let mut pairs = vec![("error", error), ("error_description", description.as_str()), ("iss", issuer.as_str())];
            if let Some(s) = st.as_deref() {
                pairs.push(("state", s));
            }
            redirect_with(&uri, &pairs)
        }
    }
}

async fn check(state: &AppState, slug: &str, p: &Params) -> Result<Checked, Refusal> {
    let tenant = tenants::by_slug(&state.db, slug).await?;
    match tenant.status {
        tenants::Status::Active => {}
        tenants::Status::Suspended => {
            return Err(Error::Forbidden { code: "tenant_suspended", message: "this tenant is suspended".into() }.into());
        }
        _ => return Err(Error::NotFound { what: "tenant" }.into()),
    }
    let client_id =
        p.client_id.as_deref().ok_or(Error::invalid("invalid_request", Some("client_id"), "client_id is required"))?;
    let client = clients::resolve(state, tenant.id, client_id).await?;
    let redirect_uri =
        p.redirect_uri.clone().ok_or(Error::invalid("invalid_request", Some("redirect_uri"), "redirect_uri is required"))?;
    if !redirect_allowed(&state.config, &redirect_uri) || !redirect_registered(&client.redirect_uris, &redirect_uri) {
        return Err(Error::invalid(
            "invalid_redirect_uri",
            Some("redirect_uri"),
            "the redirect URI is not registered for this client, or not allowed on this deployment",
        )
        .into());
    }
    let issuer = super::issuer(&state.config, &tenant.slug);
    let back = |error: &'static str, description: &str| Refusal::Redirect {
        uri: redirect_uri.clone(),
        state: p.state.clone(),
        issuer: issuer.clone(),
        error,
        description: description.to_owned(),
    };
    if p.response_type.as_deref() != Some("code") {
        return Err(back("unsupported_response_type", "only response_type=code"));
    }
    let challenge = p.code_challenge.clone().unwrap_or_default();
    if challenge.is_empty() {
        return Err(back("invalid_request", "PKCE is required: send code_challenge with code_challenge_method=S256"));
    }
    if p.code_challenge_method.as_deref() != Some("S256") {
        return Err(back("invalid_request", "only code_challenge_method=S256 is accepted (plain is refused)"));
    }
    if challenge.len() != 43 || !challenge.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_') {
        return Err(back("invalid_request", "code_challenge must be base64url(SHA-256(verifier)), 43 characters"));
    }
    if p.scope.as_deref().is_some_and(|s| s.split(' ').any(|s| !s.is_empty() && s != SCOPE)) {
        return Err(back("invalid_scope", "the only scope is `mcp`"));
    }
    let Some(resource) = p.resource.clone() else {
        return Err(back("invalid_target", "resource is required: the URL of the MCP endpoint"));
    };
    let Some((workspace, pool)) = parse_resource(&state.config, &tenant.slug, &resource) else {
        return Err(back("invalid_target", "resource is not an MCP endpoint of this tenant"));
    };
    let bound = match workspaces::bound(&state.db, tenant.id, &workspace).await {
        Ok(b) if b.workspace.status == "active" => b,
        Ok(_) | Err(Error::NotFound { .. }) => return Err(back("invalid_target", "no such active workspace")),
        Err(e) => return Err(e.into()),
    };
    if pool.as_ref().is_some_and(|p| !bound.document.pools.contains_key(p)) {
        return Err(back("invalid_target", "no such pool"));
    }
    Ok(Checked { tenant, client, redirect_uri, state: p.state.clone(), challenge, resource, bound, pool })
}

async fn session(state: &AppState, headers: &HeaderMap) -> Result<Option<Session>, Error> {
    match session_cookie(headers, state.config.cookie_secure()) {
        Some(raw) => sessions::lookup(&state.db, raw).await,
        None => Ok(None),
    }
}

async fn member(state: &AppState, c: &Checked, session: &Session) -> Result<Member, Error> {
    let (tenant, principal) = (c.tenant.id, session.principal.clone());
    if !session.may_enter(tenant) {
        return Err(Error::Forbidden { code: "not_a_member", message: "you are not a member of this tenant".into() });
    }
    state
        .db
        .single_decision(Scope::Tenant(tenant), move |conn, _| {
            let principal = principal.clone();
            Box::pin(async move {
                let member = members::tx::by_principal(&mut *conn, tenant, &principal).await?;
                if member.is_some() {
                    crate::sso::tx::check_session(conn, tenant, session).await?;
                }
                Ok(member)
            })
        })
        .await?
        .ok_or(Error::Forbidden { code: "not_a_member", message: "you are not a member of this tenant".into() })
}

/// `GET`: sign in if needed, then the consent page.
pub async fn show(
    State(state): State<AppState>,
    Path(slug): Path<String>,
    headers: HeaderMap,
    uri: axum::http::Uri,
    Query(p): Query<Params>,
) -> Response {
    let c = match check(&state, &slug, &p).await {
        Ok(c) => c,
        Err(r) => return refuse(&state, r),
    };
    let session = match session(&state, &headers).await {
        Ok(Some(s)) => s,
        Ok(None) => {
            // The ordinary sign-in through the tenant's provider, back to this very request.
            let next = uri.path_and_query().map_or(uri.path(), |pq| pq.as_str());
            let next: String = url::form_urlencoded::byte_serialize(next.as_bytes()).collect();
            // Through the tenant's own connection when it has one.
            let tenant: String = url::form_urlencoded::byte_serialize(slug.as_bytes()).collect();
            return Redirect::to(&format!("/login?next={next}&tenant={tenant}")).into_response();
        }
        Err(e) => return page_for(&state, e),
    };
    if let Err(e) = member(&state, &c, &session).await {
        return page_for(&state, e);
    }
    consent_page(&state, &c, &p, &session)
}

fn consent_page(state: &AppState, c: &Checked, p: &Params, session: &Session) -> Response {
    let redirect_host = Url::parse(&c.redirect_uri)
        .ok()
        .map(|u| format!("{}{}", u.host_str().unwrap_or(""), u.port().map(|p| format!(":{p}")).unwrap_or_default()))
        .unwrap_or_default();
    let hidden = |name: &str, value: &Option<String>| match value {
        Some(v) => format!("<input type=\"hidden\" name=\"{name}\" value=\"{}\">", escape(v)),
        None => String::new(),
    };
    let fields = [
        hidden("response_type", &p.response_type),
        hidden("client_id", &p.client_id),
        hidden("redirect_uri", &p.redirect_uri),
        hidden("code_challenge", &p.code_challenge),
        hidden("code_challenge_method", &p.code_challenge_method),
        hidden("state", &p.state),
        hidden("scope", &p.scope),
        hidden("resource", &p.resource),
        hidden("csrf_token", &Some(session.csrf_token.clone())),
    ]
    .concat();
    let action = format!("/t/{}/oauth/authorize", c.tenant.slug);
    let pool = c.pool.as_deref().map(|p| format!(" (pool <code>{}</code>)", escape(p))).unwrap_or_default();
    let who = session.email.clone().unwrap_or_else(|| session.principal.subject.clone());
    let ttl_minutes = state.config.mcp_access_token_ttl_secs.div_ceil(60);
    let body = format!(
        "<p><strong>{client}</strong> wants to use Gatehouse as <strong>{who}</strong>.</p>\
         <ul><li>Client: {client} <code>{client_id}</code></li>\
         <li>It will receive the authorization at: <strong>{redirect_host}</strong></li>\
         <li>Workspace: <strong>{ws_name}</strong> <code>{ws_slug}</code>{pool} in tenant <code>{tenant}</code></li>\
         <li>Access: call this workspace's tools as you, with your own connector grants (scope <code>mcp</code>); \
         access tokens last {ttl_minutes} minutes and are renewed until you revoke this authorization.</li></ul>\
         <form method=\"post\" action=\"{action}\">{fields}<input type=\"hidden\" name=\"decision\" value=\"allow\">\
         <button type=\"submit\">Allow</button></form>\
         <form method=\"post\" action=\"{action}\">{fields}<input type=\"hidden\" name=\"decision\" value=\"deny\">\
         <button type=\"submit\">Deny</button></form>",
        client = escape(&c.client.name),
        who = escape(&who),
        client_id = escape(&c.client.client_id),
        redirect_host = escape(&redirect_host),
        ws_name = escape(&c.bound.workspace.name),
        ws_slug = escape(&c.bound.workspace.slug),
        tenant = escape(&c.tenant.slug),
        action = escape(&action),
    );
    pages::page(StatusCode::OK, "Authorize an MCP client", state.config.dev_sign_in(), &body)
}

/// `POST`: the consent decision (exact same-origin `Origin`, the session's CSRF token).
pub async fn decide(
    State(state): State<AppState>,
    Path(slug): Path<String>,
    headers: HeaderMap,
    Form(d): Form<Decision>,
) -> Response {
    let session = match session(&state, &headers).await {
        Ok(Some(s)) => s,
        Ok(None) => return page_for(&state, Error::Unauthorized),
        Err(e) => return page_for(&state, e),
    };
    if let Err(e) = check_browser_write(&state, &Method::POST, &headers, &session, Some(d.csrf_token.as_deref().unwrap_or(""))) {
        return page_for(&state, e);
    }
    let c = match check(&state, &slug, &d.params).await {
        Ok(c) => c,
        Err(r) => return refuse(&state, r),
    };
    let member = match member(&state, &c, &session).await {
        Ok(m) => m,
        Err(e) => return page_for(&state, e),
    };
    let issuer = super::issuer(&state.config, &c.tenant.slug);
    if d.decision.as_deref() != Some("allow") {
        let r = Refusal::Redirect {
            uri: c.redirect_uri.clone(),
            state: c.state.clone(),
            issuer,
            error: "access_denied",
            description: "the person declined".into(),
        };
        return refuse(&state, r);
    }
    let code = format!("{}{}", super::CODE_PREFIX, secrets::random_b64(32));
    let audit = Audit { actor: format!("member:{}", member.id), request_id: crate::extract::request_id(&headers) };
    let code_hash = secrets::digest(&code);
    let tenant = c.tenant.id;
    let c_ref = &c;
    let created = state
        .db
        .serializable(Scope::Tenant(tenant), |conn, _| {
            let (audit, code_hash) = (audit.clone(), code_hash.clone());
            Box::pin(async move {
                let client = clients::persist(&mut *conn, tenant, &audit, &c_ref.client).await?;
                if client.revoked {
                    return Err(Error::Forbidden { code: "client_revoked", message: "this client's access was revoked".into() });
                }
                let new = store::NewGrant {
                    client_ref: client.id,
                    member_id: member.id,
                    workspace_id: c_ref.bound.workspace.id.0,
                    resource: &c_ref.resource,
                    pool: c_ref.pool.as_deref(),
                    code_hash: &code_hash,
                    redirect_uri: &c_ref.redirect_uri,
                    code_challenge: &c_ref.challenge,
                };
                let grant = store::insert_grant(&mut *conn, tenant, &new).await?;
                let entry = Entry {
                    tenant: Some(tenant),
                    audit: &audit,
                    action: "mcp_grant.create",
                    target: format!("mcp_grant:{grant}"),
                    before: None,
                    after: Some(json!({
                        "client": client.client_id, "client_name": client.name, "member": member.id,
                        "resource": c_ref.resource, "scope": SCOPE, "redirect_uri": c_ref.redirect_uri,
                    })),
                };
                admin_log::record(conn, entry).await?;
                Ok(grant)
            })
        })
        .await;
    if let Err(e) = created {
        return page_for(&state, e);
    }
    let mut pairs = vec![("code", code.as_str()), ("iss", issuer.as_str())];
    if let Some(s) = c.state.as_deref() {
        pairs.push(("state", s));
    }
    redirect_with(&c.redirect_uri, &pairs)
}
