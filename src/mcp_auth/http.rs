//! Routes of MCP authorization: discovery, the authorization server's endpoints, and the
//! grants API where members and admins list and revoke authorized clients.

use axum::{
    Json, Router,
    extract::{Path, Query, State},
    routing::{delete, get, post},
};
use serde::Deserialize;
use serde_json::{Value, json};

use super::{authorize, clients, grants, metadata, token};
use crate::{
    AppState,
    auth::TenantCtx,
    error::{Error, Result},
    extract::parse_id,
};

#[derive(Deserialize)]
struct ListQuery {
    /// `all`: every member's grants (owners and admins only).
    scope: Option<String>,
}

/// `GET /api/v1/tenants/{tenant}/mcp-grants`: the caller's authorized clients, or with
/// `?scope=all` the tenant's (admins).
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
async fn list_clients(ctx: TenantCtx, State(state): State<AppState>) -> Result<Json<Value>> {
    ctx.require_admin()?;
    Ok(Json(json!({ "clients": grants::clients(&state.db, ctx.tenant.id).await? })))
}

/// `DELETE /api/v1/tenants/{tenant}/mcp-clients/{id}` (admins): every grant of the client
/// stops working on the next request, and the client cannot be authorized again.
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

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/.well-known/oauth-protected-resource/t/{tenant}/w/{workspace}/mcp", get(metadata::endpoint))
        .route("/.well-known/oauth-protected-resource/t/{tenant}/w/{workspace}/mcp/{pool}", get(metadata::pool))
        .route("/.well-known/oauth-authorization-server/t/{tenant}", get(metadata::authorization_server))
        .route("/t/{tenant}/oauth/authorize", get(authorize::show).post(authorize::decide))
        .route("/t/{tenant}/oauth/token", post(token::exchange))
        .route("/t/{tenant}/oauth/revoke", post(token::revoke))
        .route("/t/{tenant}/oauth/register", post(clients::register))
        .route("/api/v1/tenants/{tenant}/mcp-grants", get(list_grants))
        .route("/api/v1/tenants/{tenant}/mcp-grants/{id}", delete(revoke_grant))
        .route("/api/v1/tenants/{tenant}/mcp-clients", get(list_clients))
        .route("/api/v1/tenants/{tenant}/mcp-clients/{id}", delete(revoke_client))
}
