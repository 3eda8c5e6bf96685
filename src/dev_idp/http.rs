//! The development provider's endpoints: discovery, JWKS, a "sign in as" page, token.

use std::sync::Arc;

use axum::{
    Form, Json, Router,
    extract::{Query, State},
    http::{HeaderMap, StatusCode, header},
    response::{IntoResponse, Redirect, Response},
    routing::get,
};
use base64::{Engine, engine::general_purpose::STANDARD};
use chrono::{Duration, Utc};
use openidconnect::{
    Audience, EmptyAdditionalClaims, EndUserEmail, EndUserName, IssuerUrl, LocalizedClaim, Nonce, StandardClaims,
    SubjectIdentifier,
    core::{CoreIdToken, CoreIdTokenClaims, CoreJwsSigningAlgorithm},
};
use serde::Deserialize;
use serde_json::json;
use subtle::ConstantTimeEq;

use super::{CLIENT_ID, DevIdp};
use crate::{
    AppState,
    db::Scope,
    error::{Error, Result},
    members::normalize_email,
    pages::{self, escape},
    secrets,
};

const CODE_TTL_SECS: f64 = 60.0;
const ID_TOKEN_TTL_MINUTES: i64 = 5;

fn idp(state: &AppState) -> Result<Arc<DevIdp>> {
    state.dev_idp.clone().ok_or(Error::NotFound { what: "route" })
}

async fn discovery(State(state): State<AppState>) -> Result<Json<serde_json::Value>> {
    let idp = idp(&state)?;
    Ok(Json(json!({
        "issuer": idp.issuer,
        "authorization_endpoint": format!("{}/authorize", idp.issuer),
        "token_endpoint": format!("{}/token", idp.issuer),
        "jwks_uri": format!("{}/jwks", idp.issuer),
        "response_types_supported": ["code"],
        "subject_types_supported": ["public"],
        "id_token_signing_alg_values_supported": ["EdDSA"],
        "scopes_supported": ["openid", "email", "profile"],
        "token_endpoint_auth_methods_supported": ["client_secret_basic", "client_secret_post"],
        "code_challenge_methods_supported": ["S256"],
        "grant_types_supported": ["authorization_code"],
        "claims_supported": ["sub", "iss", "aud", "exp", "iat", "nonce", "email", "email_verified", "name"],
    })))
}

async fn jwks(State(state): State<AppState>) -> Result<Json<serde_json::Value>> {
    Ok(Json(idp(&state)?.jwks.clone()))
}

#[derive(Deserialize)]
struct AuthorizeQuery {
    client_id: Option<String>,
    redirect_uri: Option<String>,
    response_type: Option<String>,
    scope: Option<String>,
    state: Option<String>,
    nonce: Option<String>,
    code_challenge: Option<String>,
    code_challenge_method: Option<String>,
}

fn refuse(message: &str) -> Response {
    pages::error_page(StatusCode::BAD_REQUEST, "invalid_request", message, true)
}

/// The "sign in as" page. Nothing redirects anywhere unless client and redirect URI match.
async fn authorize_page(State(state): State<AppState>, Query(q): Query<AuthorizeQuery>) -> Result<Response> {
    let idp = idp(&state)?;
    if q.client_id.as_deref() != Some(CLIENT_ID) || q.redirect_uri.as_deref() != Some(idp.redirect_uri.as_str()) {
        return Ok(refuse("unknown client or redirect URI"));
    }
    if q.response_type.as_deref() != Some("code")
        || !q.scope.as_deref().unwrap_or("").split(' ').any(|s| s == "openid")
        || q.code_challenge_method.as_deref() != Some("S256")
        || q.code_challenge.as_deref().is_none_or(|c| c.len() < 43)
    {
        return Ok(refuse("this provider needs response_type=code, scope openid and a PKCE S256 challenge"));
    }
    let hidden = |name: &str, value: &Option<String>| {
        format!("<input type=\"hidden\" name=\"{name}\" value=\"{}\">", escape(value.as_deref().unwrap_or("")))
    };
    let body = format!(
        "<p>This is Gatehouse's built-in development provider. Choose who to be:</p>\
         <form method=\"post\" action=\"{issuer}/authorize\">{}{}{}{}\
         <label>Email <input name=\"email\" type=\"email\" required value=\"dev@example.test\"></label>\
         <label>Name <input name=\"name\" value=\"Dev User\"></label>\
         <button type=\"submit\">Sign in</button></form>",
        hidden("redirect_uri", &q.redirect_uri),
        hidden("state", &q.state),
        hidden("nonce", &q.nonce),
        hidden("code_challenge", &q.code_challenge),
        issuer = escape(&idp.issuer),
    );
    Ok(pages::page(StatusCode::OK, "Sign in as", true, &body))
}

#[derive(Deserialize)]
struct AuthorizeForm {
    redirect_uri: String,
    state: Option<String>,
    nonce: Option<String>,
    code_challenge: String,
    email: String,
    name: Option<String>,
}

async fn authorize_submit(State(state): State<AppState>, Form(f): Form<AuthorizeForm>) -> Result<Response> {
    let idp = idp(&state)?;
    if f.redirect_uri != idp.redirect_uri {
        return Ok(refuse("unknown redirect URI"));
    }
    let email = normalize_email(&f.email)?;
    let name = f.name.map(|n| n.trim().to_owned()).filter(|n| !n.is_empty()).unwrap_or_else(|| email.clone());
    let code = secrets::random_b64(32);
    let hash = secrets::digest(&code);
    state
        .db
        .serializable(Scope::Global, |conn, _| {
            let (hash, f_nonce, challenge, email, name) = (hash.clone(), f.nonce.clone(), f.code_challenge.clone(), email.clone(), name.clone());
            let redirect = idp.redirect_uri.clone();
            Box::pin(async move {
                sqlx::query!("DELETE FROM dev_idp_codes WHERE expires_at <= now() - interval '1 hour'").execute(&mut *conn).await?;
                sqlx::query!(
                    "INSERT INTO dev_idp_codes (code_hash, redirect_uri, code_challenge, nonce, subject, email, display_name, expires_at)
                     VALUES ($1, $2, $3, $4, $5, $6, $7, now() + make_interval(secs => $8))",
                    hash,
                    redirect,
                    challenge,
                    f_nonce,
                    format!("dev|{email}"),
                    &email,
                    name,
                    CODE_TTL_SECS,
                )
                .execute(&mut *conn)
                .await?;
                Ok(())
            })
        })
        .await?;
    let mut target = url::Url::parse(&idp.redirect_uri).map_err(anyhow::Error::from)?;
    target.query_pairs_mut().append_pair("code", &code);
    if let Some(s) = &f.state {
        target.query_pairs_mut().append_pair("state", s);
    }
    Ok(Redirect::to(target.as_str()).into_response())
}

#[derive(Deserialize)]
struct TokenForm {
    grant_type: String,
    code: String,
    redirect_uri: String,
    code_verifier: Option<String>,
    client_id: Option<String>,
    client_secret: Option<String>,
}

fn oauth_error(status: StatusCode, error: &str) -> Response {
    (status, Json(json!({ "error": error }))).into_response()
}

/// client_secret_basic (RFC 6749 §2.3.1, form-urlencoded parts) or client_secret_post.
fn client_authenticated(idp: &DevIdp, headers: &HeaderMap, form: &TokenForm) -> bool {
    let (id, secret) =
        match headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()).and_then(|v| v.strip_prefix("Basic ")) {
            Some(b64) => {
                let Ok(decoded) = STANDARD.decode(b64.trim()) else { return false };
                let Ok(text) = String::from_utf8(decoded) else { return false };
                let Some((id, secret)) = text.split_once(':') else { return false };
                let decode =
                    |s: &str| url::form_urlencoded::parse(format!("x={s}").as_bytes()).next().map(|(_, v)| v.into_owned());
                (decode(id).unwrap_or_default(), decode(secret).unwrap_or_default())
            }
            None => (form.client_id.clone().unwrap_or_default(), form.client_secret.clone().unwrap_or_default()),
        };
    id == CLIENT_ID && bool::from(secret.as_bytes().ct_eq(idp.client_secret.as_bytes()))
}

async fn token(State(state): State<AppState>, headers: HeaderMap, Form(form): Form<TokenForm>) -> Result<Response> {
    let idp = idp(&state)?;
    if !client_authenticated(&idp, &headers, &form) {
        return Ok(oauth_error(StatusCode::UNAUTHORIZED, "invalid_client"));
    }
    if form.grant_type != "authorization_code" {
        return Ok(oauth_error(StatusCode::BAD_REQUEST, "unsupported_grant_type"));
    }
    let hash = secrets::digest(&form.code);
    // Single use: the code is claimed by one conditional update.
    let row = state
        .db
        .serializable(Scope::Global, |conn, _| {
            let hash = hash.clone();
            Box::pin(async move {
                Ok(sqlx::query!(
                    "UPDATE dev_idp_codes SET used_at = now() WHERE code_hash = $1 AND used_at IS NULL AND expires_at > now()
                     RETURNING redirect_uri, code_challenge, nonce, subject, email, display_name",
                    hash,
                )
                .fetch_optional(&mut *conn)
                .await?)
            })
        })
        .await?;
    let Some(row) = row else { return Ok(oauth_error(StatusCode::BAD_REQUEST, "invalid_grant")) };
    let verifier_ok = form
        .code_verifier
        .as_deref()
        .is_some_and(|v| bool::from(secrets::s256(v).as_bytes().ct_eq(row.code_challenge.as_bytes())));
    if row.redirect_uri != form.redirect_uri || !verifier_ok {
        return Ok(oauth_error(StatusCode::BAD_REQUEST, "invalid_grant"));
    }
    let now = Utc::now();
    let claims = CoreIdTokenClaims::new(
        IssuerUrl::new(idp.issuer.clone()).map_err(anyhow::Error::from)?,
        vec![Audience::new(CLIENT_ID.into())],
        now + Duration::minutes(ID_TOKEN_TTL_MINUTES),
        now,
        StandardClaims::new(SubjectIdentifier::new(row.subject))
            .set_email(Some(EndUserEmail::new(row.email)))
            .set_email_verified(Some(true))
            .set_name(Some(LocalizedClaim::from(EndUserName::new(row.display_name)))),
        EmptyAdditionalClaims {},
    )
    .set_nonce(row.nonce.filter(|n| !n.is_empty()).map(Nonce::new));
    let id_token =
        CoreIdToken::new(claims, &idp.key, CoreJwsSigningAlgorithm::EdDsa, None, None).map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut response = Json(json!({
        "access_token": secrets::random_b64(32),
        "token_type": "Bearer",
        "expires_in": ID_TOKEN_TTL_MINUTES * 60,
        "id_token": id_token.to_string(),
    }))
    .into_response();
    response.headers_mut().insert(header::CACHE_CONTROL, header::HeaderValue::from_static("no-store"));
    Ok(response)
}

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/dev-idp/.well-known/openid-configuration", get(discovery))
        .route("/dev-idp/jwks", get(jwks))
        .route("/dev-idp/authorize", get(authorize_page).post(authorize_submit))
        .route("/dev-idp/token", axum::routing::post(token))
}
