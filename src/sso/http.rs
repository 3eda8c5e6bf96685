//! The tenant admins' API for SSO: connections (`…/sso/connections`) and the requirement
//! (`…/sso`). Secrets and keys go in, never out.

use axum::{
    Json,
    extract::{Path, State},
    http::StatusCode,
    response::{IntoResponse, Response},
};
use serde::Deserialize;
use utoipa_axum::{router::OpenApiRouter, routes};

use super::{Connection, ConnectionInput, Settings};
use crate::{
    AppState,
    auth::{Actor, TenantCtx},
    error::Result,
    extract::{ApiJson, no_store, parse_id},
};

/// The tenant's SSO settings and connections (owners and admins).
#[utoipa::path(get, path = "/api/v1/tenants/{tenant}/sso", tag = "sso", security(("session" = [])),
    responses((status = 200, body = Settings)))]
async fn get_sso(ctx: TenantCtx, State(state): State<AppState>) -> Result<Json<Settings>> {
    ctx.require_admin()?;
    Ok(Json(super::settings(&state.db, ctx.tenant.id).await?))
}

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
struct RequireBody {
    /// Sign-in through the tenant's connections only, for its members.
    required: bool,
}

/// Requires SSO for the tenant's members, or stops requiring it. Requiring it needs a
/// connection, and a session that itself signed in through one of this tenant's connections.
#[utoipa::path(put, path = "/api/v1/tenants/{tenant}/sso", tag = "sso", security(("session" = [])), request_body = RequireBody,
    responses((status = 200, body = Settings)))]
async fn put_sso(ctx: TenantCtx, State(state): State<AppState>, ApiJson(body): ApiJson<RequireBody>) -> Result<Json<Settings>> {
    ctx.require_admin()?;
    let session = match &ctx.actor {
        Actor::Person { session, .. } => Some(&**session),
        Actor::Machine { .. } => None,
    };
    Ok(Json(super::set_required(&state.db, ctx.tenant.id, &ctx.audit, body.required, session).await?))
}

/// The tenant's connections (never their secrets or keys).
#[utoipa::path(get, path = "/api/v1/tenants/{tenant}/sso/connections", tag = "sso", security(("session" = [])),
    responses((status = 200, body = Vec<Connection>)))]
async fn list_connections(ctx: TenantCtx, State(state): State<AppState>) -> Result<Json<Vec<Connection>>> {
    ctx.require_admin()?;
    Ok(Json(super::list(&state.db, ctx.tenant.id).await?))
}

/// Adds a connection: the secret or private key is sealed in the vault and never shown again.
#[utoipa::path(post, path = "/api/v1/tenants/{tenant}/sso/connections", tag = "sso", security(("session" = [])),
    request_body = ConnectionInput, responses((status = 201, body = Connection)))]
async fn create_connection(
    ctx: TenantCtx,
    State(state): State<AppState>,
    ApiJson(body): ApiJson<ConnectionInput>,
) -> Result<Response> {
    ctx.require_admin()?;
    let c = super::create(&state.db, state.config.vault_keys.as_ref(), ctx.tenant.id, &ctx.audit, &body).await?;
    Ok(no_store((StatusCode::CREATED, Json(c)).into_response()))
}

#[utoipa::path(get, path = "/api/v1/tenants/{tenant}/sso/connections/{id}", tag = "sso", security(("session" = [])),
    responses((status = 200, body = Connection)))]
async fn get_connection(
    ctx: TenantCtx,
    State(state): State<AppState>,
    Path((_, id)): Path<(String, String)>,
) -> Result<Json<Connection>> {
    ctx.require_admin()?;
    Ok(Json(super::get(&state.db, ctx.tenant.id, parse_id(&id, "SSO connection")?).await?))
}

/// Replaces a connection's settings, by compare-and-set on `version` (412 when it changed
/// since it was read). Without `client_secret` and `private_key` the sealed one stays.
#[utoipa::path(put, path = "/api/v1/tenants/{tenant}/sso/connections/{id}", tag = "sso", security(("session" = [])),
    request_body = ConnectionInput, responses((status = 200, body = Connection)))]
async fn put_connection(
    ctx: TenantCtx,
    State(state): State<AppState>,
    Path((_, id)): Path<(String, String)>,
    ApiJson(body): ApiJson<ConnectionInput>,
) -> Result<Json<Connection>> {
    ctx.require_admin()?;
    let id = parse_id(&id, "SSO connection")?;
    Ok(Json(super::update(&state.db, state.config.vault_keys.as_ref(), ctx.tenant.id, &ctx.audit, id, &body).await?))
}

/// Removes a connection: sign-in through it stops at once.
#[utoipa::path(delete, path = "/api/v1/tenants/{tenant}/sso/connections/{id}", tag = "sso", security(("session" = [])),
    responses((status = 204)))]
async fn delete_connection(
    ctx: TenantCtx,
    State(state): State<AppState>,
    Path((_, id)): Path<(String, String)>,
) -> Result<StatusCode> {
    ctx.require_admin()?;
    super::delete(&state.db, ctx.tenant.id, &ctx.audit, parse_id(&id, "SSO connection")?).await?;
    Ok(StatusCode::NO_CONTENT)
}

pub fn api_router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(get_sso, put_sso)).routes(routes!(list_connections, create_connection)).routes(routes!(
        get_connection,
        put_connection,
        delete_connection
    ))
}
