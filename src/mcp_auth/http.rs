//! Routes of MCP authorization: discovery, the authorization server's endpoints, and the
//! grants API where members and admins list and revoke authorized clients.

use axum::{
    Json,
    extract::{Path, Query, State},
    routing::{get, post},
};
use serde::Deserialize;
use serde_json::{Value, json};
use utoipa_axum::{router::OpenApiRouter, routes};

use super::{authorize, clients, grants, metadata, token};
use crate::{
    AppState,
    auth::TenantCtx,
    error::{Error, Result},
    extract::parse_id,
};

#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
struct ListQuery {
    /// `all`: every member's grants (owners and admins only).
    scope: Option<String>,
}

/// The answer of `GET …/mcp-grants`: one object per authorized client grant.
#[derive(utoipa::ToSchema)]
#[allow(dead_code)]
struct GrantList {
    grants: Vec<Value>,
}

/// The answer of `GET …/mcp-clients`: one object per registered MCP client.
#[derive(utoipa::ToSchema)]
#[allow(dead_code)]
struct ClientList {
    clients: Vec<Value>,
}

/// The answer of a revocation.
#[derive(utoipa::ToSchema)]
#[allow(dead_code)]
struct Revoked {
    id: uuid::Uuid,
    /// Always `true`.
    revoked: bool,
}

/// `GET /api/v1/tenants/{tenant}/mcp-grants`: the caller's authorized clients, or with
/// `?scope=all` the tenant's (admins).
#[utoipa::path(get, path = "/api/v1/tenants/{tenant}/mcp-grants", tag = "mcp-grants", security(("session" = [])), params(ListQuery), responses((status = 200, body = GrantList)))]
async fn list_grants(ctx: TenantCtx, State(state): State<AppState>, Query(q): Query<ListQuery>) -> Result<Json<Value>> {
    let member = match q.scope.as_deref() {
        Some("all") => {
            ctx.require_admin()?;
            None
        }
        None | Some("mine") => Some(ctx.person()?.id),
        Some(_) => return Err(Error::invalid("invalid_scope", Some("scope"), "scope is `mine` or `all`")),
    };
    Ok(Json(json!({ "grants": grants::grants(&state.db, ctx.tenant.id, member).await? })))
}

/// `DELETE /api/v1/tenants/{tenant}/mcp-grants/{id}`: a member revokes their own; an admin
/// any. Someone else's grant, for a member, is not found.
#[utoipa::path(delete, path = "/api/v1/tenants/{tenant}/mcp-grants/{id}", tag = "mcp-grants", security(("session" = [])), responses((status = 200, body = Revoked)))]
async fn revoke_grant(
    ctx: TenantCtx,
    State(state): State<AppState>,
    Path((_, id)): Path<(String, String)>,
) -> Result<Json<Value>> {
    let id = parse_id(&id, "grant")?;
    let person = ctx.person()?;
    let only = if ctx.require_admin().is_ok() { None } else { Some(person.id) };
    grants::revoke_grant(&state.db, ctx.tenant.id, &ctx.audit, id, only).await?;
    Ok(Json(json!({ "id": id, "revoked": true })))
}

/// `GET /api/v1/tenants/{tenant}/mcp-clients` (admins).
#[utoipa::path(get, path = "/api/v1/tenants/{tenant}/mcp-clients", tag = "mcp-grants", security(("session" = [])), responses((status = 200, body = ClientList)))]
async fn list_clients(ctx: TenantCtx, State(state): State<AppState>) -> Result<Json<Value>> {
    ctx.require_admin()?;
    Ok(Json(json!({ "clients": grants::clients(&state.db, ctx.tenant.id).await? })))
}

/// `DELETE /api/v1/tenants/{tenant}/mcp-clients/{id}` (admins): every grant of the client
/// stops working on the next request, and the client cannot be authorized again.
#[utoipa::path(delete, path = "/api/v1/tenants/{tenant}/mcp-clients/{id}", tag = "mcp-grants", security(("session" = [])), responses((status = 200, body = Revoked)))]
async fn revoke_client(
    ctx: TenantCtx,
    State(state): State<AppState>,
    Path((_, id)): Path<(String, String)>,
) -> Result<Json<Value>> {
    ctx.require_admin()?;
    let id = parse_id(&id, "client")?;
    grants::revoke_client(&state.db, ctx.tenant.id, &ctx.audit, id).await?;
    Ok(Json(json!({ "id": id, "revoked": true })))
}

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_grants))
        .routes(routes!(revoke_grant))
        .routes(routes!(list_clients))
        .routes(routes!(revoke_client))
        .route("/.well-known/oauth-protected-resource/t/{tenant}/w/{workspace}/mcp", get(metadata::endpoint))
        .route("/.well-known/oauth-protected-resource/t/{tenant}/w/{workspace}/mcp/{pool}", get(metadata::pool))
        .route("/.well-known/oauth-authorization-server/t/{tenant}", get(metadata::authorization_server))
        .route("/t/{tenant}/oauth/authorize", get(authorize::show).post(authorize::decide))
        .route("/t/{tenant}/oauth/token", post(token::exchange))
        .route("/t/{tenant}/oauth/revoke", post(token::revoke))
        .route("/t/{tenant}/oauth/register", post(clients::register))
}
