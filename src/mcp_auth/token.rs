//! The token endpoint `POST /t/{tenant}/oauth/token`: authorization code (+ PKCE S256) and
//! refresh token grants for public clients. Codes and refresh tokens are spent by a
//! compare-and-set inside one serializable transaction; presenting a spent one again revokes
//! its whole grant (every access and refresh token of the family) and commits only that.

use std::collections::HashMap;

use axum::{
    Json,
    body::Bytes,
    extract::{Path, State},
    http::{HeaderMap, StatusCode},
    response::{IntoResponse, Response},
};
use serde_json::json;
use subtle::ConstantTimeEq;
use uuid::Uuid;

use super::{ACCESS_PREFIX, REFRESH_PREFIX, SCOPE, oauth_error, store};
use crate::{
    AppState,
    admin_log::{self, Audit, Entry},
    db::Scope,
    error::{Error, Result},
    ids::TenantId,
    secrets, tenants,
};

enum Outcome {
    Issued {
        access: String,
        refresh: String,
    },
    /// A spent code or refresh token came back: its grant is now revoked.
    Replayed,
}

fn invalid(code: &'static str, message: &str) -> Error {
    Error::invalid(code, None, message)
}

/// `POST /t/{tenant}/oauth/token` (form-encoded). Errors are RFC 6749 §5.2 JSON.
pub async fn exchange(State(state): State<AppState>, Path(slug): Path<String>, headers: HeaderMap, body: Bytes) -> Response {
    let form: HashMap<String, String> = url::form_urlencoded::parse(&body).into_owned().collect();
    match exchange_form(&state, &slug, &headers, &form).await {
        Ok(r) => r,
        Err(e @ Error::Invalid { .. }) => oauth_error(StatusCode::BAD_REQUEST, e.code(), &e.to_string()),
        Err(Error::NotFound { .. }) => oauth_error(StatusCode::NOT_FOUND, "not_found", "tenant not found"),
        Err(e) => e.into_response(),
    }
}

#[tracing::instrument(name = "mcp_auth::token", skip_all, fields(tenant = slug), err(level = "debug"))]
async fn exchange_form(state: &AppState, slug: &str, headers: &HeaderMap, f: &HashMap<String, String>) -> Result<Response> {
    let tenant = tenants::by_slug(&state.db, slug).await?;
    if tenant.status != tenants::Status::Active {
        return Err(invalid("invalid_grant", "this tenant is not active"));
    }
    let field = |name: &str| f.get(name).map(String::as_str).filter(|v| !v.is_empty());
    let client_id = field("client_id").ok_or(invalid("invalid_client", "client_id is required (public clients)"))?.to_owned();
    let resource = field("resource").map(str::to_owned);
    let audit = Audit {
        actor: format!("mcp_client:{}", client_id.chars().take(200).collect::<String>()),
        request_id: crate::extract::request_id(headers),
    };
    let ttl = state.config.mcp_access_token_ttl_secs;
    let outcome = match field("grant_type") {
        Some("authorization_code") => {
            let code = field("code").ok_or(invalid("invalid_request", "code is required"))?.to_owned();
            let redirect_uri = field("redirect_uri").ok_or(invalid("invalid_request", "redirect_uri is required"))?.to_owned();
            let verifier =
                field("code_verifier").ok_or(invalid("invalid_request", "code_verifier is required (PKCE)"))?.to_owned();
            state
                .db
                .serializable(Scope::Tenant(tenant.id), |conn, _| {
                    let (code, redirect_uri, verifier, client_id, resource, audit) = (
                        code.clone(),
                        redirect_uri.clone(),
                        verifier.clone(),
                        client_id.clone(),
                        resource.clone(),
                        audit.clone(),
                    );
                    Box::pin(async move {
                        let taken = store::take_code(&mut *conn, tenant.id, &secrets::digest(&code)).await?;
                        let code = match taken {
                            Ok(code) => code,
                            Err(Some(grant)) => {
                                revoke_family(&mut *conn, tenant.id, &audit, grant, "code_replayed").await?;
                                return Ok(Outcome::Replayed);
                            }
                            Err(None) => return Err(invalid("invalid_grant", "unknown or expired authorization code")),
                        };
                        let grant = store::grant(&mut *conn, tenant.id, code.grant_id).await?;
                        let grant = grant.filter(|g| g.usable && g.client_id == client_id);
                        let Some(grant) = grant else {
                            return Err(invalid("invalid_grant", "the code was not issued to this client"));
                        };
                        if code.redirect_uri != redirect_uri {
                            return Err(invalid("invalid_grant", "redirect_uri differs from the authorization request"));
                        }
                        let computed = secrets::s256(&verifier);
                        if !bool::from(computed.as_bytes().ct_eq(code.code_challenge.as_bytes())) {
                            return Err(invalid("invalid_grant", "code_verifier does not match the code_challenge"));
                        }
                        if resource.as_ref().is_some_and(|r| *r != grant.resource) {
                            return Err(invalid("invalid_target", "resource differs from the one authorized"));
                        }
                        issue(conn, tenant.id, grant.id, ttl).await
                    })
                })
                .await?
        }
        Some("refresh_token") => {
            let refresh = field("refresh_token").ok_or(invalid("invalid_request", "refresh_token is required"))?.to_owned();
            if !secrets::well_formed(&refresh, REFRESH_PREFIX, super::SECRET_CHARS) {
                return Err(invalid("invalid_grant", "unknown refresh token"));
            }
            state
                .db
                .serializable(Scope::Tenant(tenant.id), |conn, _| {
                    let (refresh, client_id, resource, audit) =
                        (refresh.clone(), client_id.clone(), resource.clone(), audit.clone());
                    Box::pin(async move {
                        let grant = match store::spend_refresh(&mut *conn, tenant.id, &secrets::digest(&refresh)).await? {
                            Ok(grant) => grant,
                            Err(Some(grant)) => {
                                revoke_family(&mut *conn, tenant.id, &audit, grant, "refresh_reused").await?;
                                return Ok(Outcome::Replayed);
                            }
                            Err(None) => return Err(invalid("invalid_grant", "unknown or expired refresh token")),
                        };
                        let grant = store::grant(&mut *conn, tenant.id, grant).await?;
                        let Some(grant) = grant.filter(|g| g.usable && g.client_id == client_id) else {
                            return Err(invalid("invalid_grant", "the refresh token is revoked or belongs to another client"));
                        };
                        if resource.as_ref().is_some_and(|r| *r != grant.resource) {
                            return Err(invalid("invalid_target", "resource differs from the one authorized"));
                        }
                        issue(conn, tenant.id, grant.id, ttl).await
                    })
                })
                .await?
        }
        _ => return Err(invalid("unsupported_grant_type", "grant_type must be authorization_code or refresh_token")),
    };
    match outcome {
        Outcome::Replayed => Err(invalid("invalid_grant", "this grant was already used; its authorization is now revoked")),
        Outcome::Issued { access, refresh } => {
            let body = json!({
                "access_token": access,
                "token_type": "Bearer",
                "expires_in": ttl,
                "refresh_token": refresh,
                "scope": SCOPE,
            });
            Ok(crate::extract::no_store((StatusCode::OK, Json(body)).into_response()))
        }
    }
}

async fn issue(conn: &mut sqlx::PgConnection, tenant: TenantId, grant: Uuid, ttl: u64) -> Result<Outcome> {
    let access = format!("{ACCESS_PREFIX}{}", secrets::random_b64(32));
    let refresh = format!("{REFRESH_PREFIX}{}", secrets::random_b64(32));
    store::insert_tokens(&mut *conn, tenant, grant, &secrets::digest(&access), ttl, &secrets::digest(&refresh)).await?;
    store::prune(conn, tenant).await?;
    Ok(Outcome::Issued { access, refresh })
}

/// Revokes a grant (the token family) with its admin-log row, in the caller's transaction.
/// Already revoked: nothing to write.
pub async fn revoke_family(
    conn: &mut sqlx::PgConnection,
    tenant: TenantId,
    audit: &Audit,
    grant: Uuid,
    reason: &str,
) -> Result<()> {
    if store::revoke_grant(&mut *conn, tenant, grant, None, &audit.actor, reason).await? {
        let entry = Entry {
            tenant: Some(tenant),
            audit,
            action: "mcp_grant.revoke",
            target: format!("mcp_grant:{grant}"),
            before: None,
            after: Some(json!({ "reason": reason })),
        };
        admin_log::record(conn, entry).await?;
    }
    Ok(())
}

/// `POST /t/{tenant}/oauth/revoke` (RFC 7009): a client revokes an access or refresh token it
/// holds, which ends its whole grant. Unknown tokens and other clients' tokens answer 200
/// too and change nothing (the RFC's answer; it tells a caller nothing).
pub async fn revoke(State(state): State<AppState>, Path(slug): Path<String>, headers: HeaderMap, body: Bytes) -> Response {
    let form: HashMap<String, String> = url::form_urlencoded::parse(&body).into_owned().collect();
    let (Some(token), Some(client_id)) = (form.get("token"), form.get("client_id")) else {
        return oauth_error(StatusCode::BAD_REQUEST, "invalid_request", "token and client_id are required");
    };
    let tenant = match tenants::by_slug(&state.db, &slug).await {
        Ok(t) => t,
        Err(e) => return e.into_response(),
    };
    let audit = Audit {
        actor: format!("mcp_client:{}", client_id.chars().take(200).collect::<String>()),
        request_id: crate::extract::request_id(&headers),
    };
    let digest = secrets::digest(token);
    let done = state
        .db
        .serializable(Scope::Tenant(tenant.id), |conn, _| {
            let (digest, client_id, audit) = (digest.clone(), client_id.clone(), audit.clone());
            Box::pin(async move {
                let Some(grant) = store::grant_of_token(&mut *conn, tenant.id, &digest).await? else { return Ok(()) };
                match store::grant(&mut *conn, tenant.id, grant).await? {
                    Some(g) if g.client_id == client_id => {
                        revoke_family(conn, tenant.id, &audit, grant, "client_revoked_token").await
                    }
                    _ => Ok(()),
                }
            })
        })
        .await;
    match done {
        Ok(()) => crate::extract::no_store(StatusCode::OK.into_response()),
        Err(e) => e.into_response(),
    }
}
