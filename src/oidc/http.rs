//! People's sign-in routes: `/login`, `/auth/callback`, `/logout`, `/api/v1/me`, and the
//! landing page `/`.

use axum::{
    Json,
    extract::{Query, State},
    http::{HeaderMap, HeaderValue, Method, StatusCode, header},
    response::{IntoResponse, Redirect, Response},
    routing::{get, post},
};
use serde::Deserialize;
use serde_json::{Value, json};

use super::{Identity, store};
use crate::{
    AppState,
    admin_log::{self, Audit, Entry},
    auth::{SignedIn, check_browser_write, session_cookie},
    db::Scope,
    error::{Error, Result},
    members::{self, Role},
    pages::{self, escape},
    secrets, sessions, tenants,
};

const FLOW_COOKIE: &str = "gh_flow";
/// The tenant the first person to sign in to a fresh embedded deployment owns.
pub const DEFAULT_TENANT: &str = "default";

fn cookie(state: &AppState, name: &str, value: &str, path: &str, max_age: i64) -> HeaderValue {
    let secure = if state.config.cookie_secure() { "; Secure" } else { "" };
    HeaderValue::from_str(&format!("{name}={value}; HttpOnly; SameSite=Lax; Path={path}; Max-Age={max_age}{secure}"))
        .unwrap_or(HeaderValue::from_static(""))
}

/// Only same-origin relative paths: `/…` but not `//…` or `/\…` (which browsers treat as
/// another host), and no control characters.
pub fn safe_next(next: Option<&str>) -> Result<String> {
    let next = next.unwrap_or("/");
    let ok = next.starts_with('/')
        && !next.starts_with("//")
        && !next.starts_with("/\\")
        && next.len() <= 2048
        && !next.chars().any(|c| c.is_control() || c == '\\');
    if ok { Ok(next.to_owned()) } else { Err(Error::invalid("invalid_next", Some("next"), "next must be a path on this site")) }
}

fn browser_error(state: &AppState, e: Error) -> Response {
    let status = match e.status() {
        StatusCode::INTERNAL_SERVER_ERROR => {
            tracing::error!(error = %e, "sign-in failed");
            return pages::error_page(
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal",
                "internal error",
                state.config.dev_sign_in(),
            );
        }
        s => s,
    };
    pages::error_page(status, e.code(), &e.to_string(), state.config.dev_sign_in())
}

#[derive(Deserialize)]
struct LoginQuery {
    next: Option<String>,
    /// `?tenant=slug`: sign in through that tenant's own connection, when it has one.
    tenant: Option<String>,
    /// The person's email address: its domain picks the tenant connection, if any.
    email: Option<String>,
}

async fn login(State(state): State<AppState>, Query(q): Query<LoginQuery>) -> Response {
    match start_login(&state, q).await {
        Ok(r) => r,
        Err(e) => browser_error(&state, e),
    }
}

/// `POST /login`: the discovery form's answer (`email`, `next`).
async fn login_form(State(state): State<AppState>, axum::Form(q): axum::Form<LoginQuery>) -> Response {
    let q = LoginQuery { email: Some(q.email.unwrap_or_default()), ..q };
    match start_login(&state, q).await {
        Ok(r) => r,
        Err(e) => browser_error(&state, e),
    }
}

/// Sign-in discovery: a tenant's own connection for `?tenant=` or the email's domain, else the
/// deployment's provider. With tenant connections in the deployment and neither given, the
/// person is first asked for their email address. Unknown tenants and domains go to the
/// deployment's provider, exactly as ones without SSO do: nothing here tells which exist.
async fn start_login(state: &AppState, q: LoginQuery) -> Result<Response> {
    let next = safe_next(q.next.as_deref())?;
    let email = q.email.as_deref().map(str::trim).filter(|e| !e.is_empty());
    let asked = q.tenant.is_some() || q.email.is_some();
    if !asked && crate::sso::any(&state.db).await? {
        return Ok(discovery_page(state, &next));
    }
    let route = if asked { crate::sso::route(&state.db, q.tenant.as_deref(), email).await? } else { None };
    let party = match route {
        Some((tenant, id)) => super::tenant::party(state, tenant, id).await?,
        None => None,
    };
    let rp = party.as_ref().map_or(&state.rp, |p| &p.rp);
    let started = rp.start().await?;
    let mut authorize_url = started.authorize_url.clone();
    if let (Some(_), Some(email)) = (&party, email) {
        // The provider may skip asking who it is.
        let mut url = url::Url::parse(&authorize_url).map_err(anyhow::Error::from)?;
        url.query_pairs_mut().append_pair("login_hint", email);
        authorize_url = url.to_string();
    }
    // The flow cookie binds the flow to this browser, so a callback URL planted in another
    // browser (login CSRF) is refused.
    let browser = secrets::random_b64(32);
    let (state_hash, browser_hash) = (secrets::digest(&started.state), secrets::digest(&browser));
    let flow = store::NewFlow {
        state_hash: &state_hash,
        browser_hash: &browser_hash,
        verifier: &started.pkce_verifier,
        nonce: &started.nonce,
        next: &next,
        sso: party.as_ref().map(|p| (p.tenant, p.connection.id)),
    };
    store::save(&state.db, &flow).await?;
    let mut response = Redirect::to(&authorize_url).into_response();
    response.headers_mut().append(header::SET_COOKIE, cookie(state, FLOW_COOKIE, &browser, "/auth", store::FLOW_TTL_SECS));
    Ok(response)
}

/// The email prompt of sign-in discovery.
fn discovery_page(state: &AppState, next: &str) -> Response {
    let body = format!(
        "<form method=\"post\" action=\"/login\">\
         <p><label for=\"email\">Work email</label> \
         <input id=\"email\" name=\"email\" type=\"email\" autocomplete=\"email\" required></p>\
         <input type=\"hidden\" name=\"next\" value=\"{}\">\
         <p><button>Continue</button></p></form>\
         <p>Your organisation's sign-in is found from your email address. Anyone else signs in with this \
         deployment's own provider.</p>",
        escape(next)
    );
    pages::page(StatusCode::OK, "Sign in", state.config.dev_sign_in(), &body)
}

#[derive(Deserialize)]
struct CallbackQuery {
    code: Option<String>,
    state: Option<String>,
    error: Option<String>,
}

async fn callback(State(state): State<AppState>, headers: HeaderMap, Query(q): Query<CallbackQuery>) -> Response {
    match finish_login(&state, &headers, q).await {
        Ok(r) => r,
        Err(e) => browser_error(&state, e),
    }
}

async fn finish_login(state: &AppState, headers: &HeaderMap, q: CallbackQuery) -> Result<Response> {
    if let Some(error) = q.error {
        let shown: String = error.chars().filter(|c| c.is_ascii_graphic()).take(64).collect();
        return Err(Error::Forbidden { code: "provider_error", message: format!("the sign-in provider answered `{shown}`") });
    }
    let st = q.state.ok_or(Error::invalid("missing_state", Some("state"), "the callback carries no state"))?;
    let code = q.code.ok_or(Error::invalid("missing_code", Some("code"), "the callback carries no code"))?;
    let browser = crate::auth::cookie(headers, FLOW_COOKIE).ok_or(Error::invalid(
        "invalid_state",
        Some("state"),
        "no sign-in was started in this browser",
    ))?;
    let (state_hash, browser_hash) = (secrets::digest(&st), secrets::digest(browser));
    let flow = store::take(&state.db, &state_hash, &browser_hash).await?.ok_or(Error::invalid(
        "invalid_state",
        Some("state"),
        "unknown, expired or already used sign-in state",
    ))?;
    let party =
        match flow.sso {
            Some((tenant, id)) => Some(super::tenant::party(state, tenant, id).await?.ok_or(Error::Forbidden {
                code: "sso_connection_gone",
                message: "this sign-in's connection was removed".into(),
            })?),
            None => None,
        };
    // The flow's own provider checks the code and the ID token (its issuer, and its audience:
    // this connection's client id), so nothing of another provider signs in here.
    let identity = match &party {
        Some(p) => p.rp.finish_with(&code, &flow.pkce_verifier, &flow.nonce, p.token_params()?).await?,
        None => state.rp.finish(&code, &flow.pkce_verifier, &flow.nonce).await?,
    };
    let raw = sign_in(state, &identity, party.as_ref(), flow.started_at, crate::extract::request_id(headers)).await?;
    let mut response = Redirect::to(&flow.next_path).into_response();
    let secure = state.config.cookie_secure();
    let h = response.headers_mut();
    h.append(header::SET_COOKIE, cookie(state, sessions::cookie_name(secure), &raw, "/", sessions::ABSOLUTE_SECS));
    h.append(header::SET_COOKIE, cookie(state, FLOW_COOKIE, "", "/auth", 0));
    Ok(response)
}

/// Records the sign-in: consumes invitations for a provider-verified email, makes the first
/// person on a fresh embedded deployment owner of a default tenant, opens the session, and
/// writes the admin-log rows, all in one transaction. `started_at`: when this request claimed
/// its flow (the database clock), for the membership fence.
async fn sign_in(
    state: &AppState,
    identity: &Identity,
    party: Option<&super::tenant::Party>,
    started_at: chrono::DateTime<chrono::Utc>,
    request_id: Option<String>,
) -> Result<String> {
    let audit = Audit { actor: format!("person:{}", identity.principal.subject), request_id };
    let bootstrap = state.config.database_url.is_none();
    state
        .db
        .serializable(Scope::Platform { reason: "sign in" }, move |conn, _| {
            let audit = audit.clone();
            Box::pin(async move {
                let p = &identity.principal;
                let (email, name) = (identity.email.as_deref(), identity.name.as_deref());
                if let Some(party) = party {
                    let who = crate::sso::SignIn {
                        principal: p,
                        email,
                        email_verified: identity.email_verified,
                        name,
                        claims: &identity.claims,
                    };
                    crate::sso::admit(&mut *conn, &audit, party.tenant, &party.connection, &who, started_at).await?;
                } else if identity.email_verified
                    && let Some(email) = email.and_then(|e| members::normalize_email(e).ok())
                {
                    members::accept_invitations(&mut *conn, &audit, p, &email, name, started_at).await?;
                }
                if party.is_none() && bootstrap && tenants::tx::count(&mut *conn).await? == 0 {
                    let tenant = tenants::create_in(&mut *conn, &audit, DEFAULT_TENANT, "Default").await?;
                    let (member, _) = members::tx::upsert(&mut *conn, tenant.id, p, email, name, Role::Owner).await?;
                    let after = Some(json!({ "member": member.id, "role": member.role, "bootstrap": true }));
                    let entry = Entry {
                        tenant: Some(tenant.id),
                        audit: &audit,
                        action: "member.join",
                        target: format!("member:{}", member.id),
                        before: None,
                        after,
                    };
                    admin_log::record(&mut *conn, entry).await?;
                }
                let sso_tenant = party.map(|p| p.tenant);
                let (raw, _) = sessions::create(&mut *conn, p, email, name, sso_tenant).await?;
                let via = party.map(|p| p.connection.id);
                let after = Some(json!({ "issuer": p.issuer, "subject": p.subject, "email": email, "sso_connection": via }));
                admin_log::record(
                    conn,
                    Entry {
                        tenant: sso_tenant,
                        audit: &audit,
                        action: "session.sign_in",
                        target: format!("person:{}", p.subject),
                        before: None,
                        after,
                    },
                )
                .await?;
                Ok(raw)
            })
        })
        .await
}

/// Ends the session (Origin and CSRF token checked), then RP-initiated logout at the
/// provider when it advertises an end-session endpoint.
async fn logout(State(state): State<AppState>, headers: HeaderMap, body: axum::body::Bytes) -> Result<Response> {
    let raw = session_cookie(&headers, state.config.cookie_secure()).ok_or(Error::Unauthorized)?;
    let session = sessions::lookup(&state.db, raw).await?.ok_or(Error::Unauthorized)?;
    let form_token = url::form_urlencoded::parse(&body).find(|(k, _)| k == "csrf_token").map(|(_, v)| v.into_owned());
    check_browser_write(&state, &Method::POST, &headers, &session, form_token.as_deref())?;
    let audit =
        Audit { actor: format!("person:{}", session.principal.subject), request_id: crate::extract::request_id(&headers) };
    sessions::sign_out(&state.db, &session, &audit).await?;
    let target = match state.rp.end_session_endpoint().await {
        Some(endpoint) => {
            let mut url = url::Url::parse(&endpoint).map_err(anyhow::Error::from)?;
            url.query_pairs_mut()
                .append_pair("client_id", state.rp.client_id())
                .append_pair("post_logout_redirect_uri", &format!("{}/", state.config.public_url));
            url.to_string()
        }
        None => "/".to_owned(),
    };
    let mut response = Redirect::to(&target).into_response();
    let secure = state.config.cookie_secure();
    response.headers_mut().append(header::SET_COOKIE, cookie(&state, sessions::cookie_name(secure), "", "/", 0));
    Ok(response)
}

/// The tenants this session may act in (one, for a session of a tenant's own connection).
async fn memberships(state: &AppState, session: &sessions::Session) -> Result<Vec<Value>> {
    let p = &session.principal;
    let rows = state
        .db
        .serializable(Scope::Platform { reason: "list own memberships" }, move |conn, _| {
            Box::pin(members::tx::memberships_of(conn, p))
        })
        .await?;
    Ok(rows
        .into_iter()
        .filter(|(tenant, ..)| session.may_enter(*tenant))
        .map(|(_, slug, name, role)| json!({ "tenant": slug, "name": name, "role": role }))
        .collect())
}

/// The answer of `GET /api/v1/me`.
#[derive(utoipa::ToSchema)]
#[allow(dead_code)]
struct Me {
    principal: crate::members::Principal,
    email: Option<String>,
    name: Option<String>,
    /// Send as `X-CSRF-Token` with every mutating API request made with the session cookie.
    csrf_token: String,
    memberships: Vec<Membership>,
    dev_sign_in: bool,
}

#[derive(utoipa::ToSchema)]
#[allow(dead_code)]
struct Membership {
    /// The tenant's slug.
    tenant: String,
    name: String,
    role: crate::members::Role,
}

/// The signed-in person, their memberships and their CSRF token (for API writes).
#[utoipa::path(get, path = "/api/v1/me", tag = "me", security(("session" = [])), responses((status = 200, body = Me)))]
async fn me(State(state): State<AppState>, SignedIn(session): SignedIn) -> Result<Response> {
    let memberships = memberships(&state, &session).await?;
    let body = json!({
        "principal": session.principal,
        "email": session.email,
        "name": session.display_name,
        "csrf_token": session.csrf_token,
        "memberships": memberships,
        "dev_sign_in": state.config.dev_sign_in(),
    });
    Ok(crate::extract::no_store(Json(body).into_response()))
}

async fn home(State(state): State<AppState>, headers: HeaderMap) -> Result<Response> {
    let dev = state.config.dev_sign_in();
    let session = match session_cookie(&headers, state.config.cookie_secure()) {
        Some(raw) => sessions::lookup(&state.db, raw).await?,
        None => None,
    };
    let Some(session) = session else {
        return Ok(pages::page(StatusCode::OK, "Gatehouse", dev, "<p><a href=\"/login\">Sign in</a></p>"));
    };
    let who = session.email.clone().or(session.display_name.clone()).unwrap_or_else(|| session.principal.subject.clone());
    let list = memberships(&state, &session).await?;
    let mut body = format!("<p>Signed in as <strong>{}</strong>.</p>", escape(&who));
    if list.is_empty() {
        body.push_str(&format!(
            "<p>You are signed in, but you are not a member of any tenant yet. Ask an owner or admin of your organisation \
             to invite <strong>{}</strong>; the invitation is accepted the next time you sign in.</p>",
            escape(session.email.as_deref().unwrap_or("your email address"))
        ));
    } else {
        body.push_str("<p><a href=\"/console\">Open the console</a></p><ul>");
        for m in &list {
            body.push_str(&format!(
                "<li>{} ({}) — {}</li>",
                escape(m["name"].as_str().unwrap_or("")),
                escape(m["tenant"].as_str().unwrap_or("")),
                escape(m["role"].as_str().unwrap_or(""))
            ));
        }
        body.push_str("</ul>");
    }
    body.push_str(&format!(
        "<form method=\"post\" action=\"/logout\"><input type=\"hidden\" name=\"csrf_token\" value=\"{}\"><button>Sign out</button></form>",
        escape(&session.csrf_token)
    ));
    Ok(pages::page(StatusCode::OK, "Gatehouse", dev, &body))
}

pub fn router() -> utoipa_axum::router::OpenApiRouter<AppState> {
    utoipa_axum::router::OpenApiRouter::new()
        .route("/", get(home))
        .route("/login", get(login).post(login_form))
        .route("/auth/callback", get(callback))
        .route("/logout", post(logout))
        .routes(utoipa_axum::routes!(me))
}

#[cfg(test)]
mod tests {
    use super::safe_next;
    use proptest::prelude::*;

    #[test]
    fn next_must_stay_on_this_site() {
        assert_eq!(safe_next(None).unwrap(), "/");
        assert_eq!(safe_next(Some("/t/acme?x=1")).unwrap(), "/t/acme?x=1");
        for bad in ["//evil.example", "/\\evil.example", "https://evil.example", "evil", "", "/a\nb", "/a\\b"] {
            assert!(safe_next(Some(bad)).is_err(), "{bad:?}");
        }
    }

    proptest! {
        #[test]
        fn accepted_next_is_a_local_path(s in "\\PC{0,40}") {
            if let Ok(next) = safe_next(Some(&s)) {
                prop_assert!(next.starts_with('/') && !next.starts_with("//") && !next.contains('\\'));
            }
        }
    }
}
