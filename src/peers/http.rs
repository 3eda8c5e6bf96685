//! `/api/v1/tenants/{t}/workspaces/{w}/peers`: list a workspace's peer connectors with where
//! each leads now; bind (`PUT …/peers/{connector}` `{"target": "<workspace slug>"}`) and unbind
//! (`DELETE`). Reading needs membership (or a token); binding needs a person with
//! `credential_administration`, like every other configuration change.

use axum::{
    Json,
    extract::{Path, State},
    http::StatusCode,
};
use serde::Deserialize;
use utoipa_axum::{router::OpenApiRouter, routes};

use super::{Binding, PeerView};
use crate::{AppState, auth::TenantCtx, error::Result, extract::ApiJson, members::Permission};

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
struct BindBody {
    /// The target workspace's slug (same tenant).
    target: String,
}

/// The workspace's peer connectors and where each leads now.
#[utoipa::path(get, path = "/api/v1/tenants/{tenant}/workspaces/{workspace}/peers", tag = "peers", responses((status = 200, body = Vec<PeerView>)))]
async fn list_peers(
    ctx: TenantCtx,
    State(state): State<AppState>,
    Path((_, workspace)): Path<(String, String)>,
) -> Result<Json<Vec<PeerView>>> {
    Ok(Json(super::list(&state.db, ctx.tenant.id, &workspace).await?))
}

/// Binds a peer connector to a target workspace of the tenant.
#[utoipa::path(put, path = "/api/v1/tenants/{tenant}/workspaces/{workspace}/peers/{connector}", tag = "peers", security(("session" = [])), request_body = BindBody, responses((status = 200, body = Binding)))]
async fn bind_peer(
    ctx: TenantCtx,
    State(state): State<AppState>,
    Path((_, workspace, connector)): Path<(String, String, String)>,
    ApiJson(body): ApiJson<BindBody>,
) -> Result<Json<Binding>> {
    ctx.require_person(Permission::CredentialAdministration)?;
    Ok(Json(super::bind(&state.db, ctx.tenant.id, &ctx.audit, &workspace, &connector, &body.target).await?))
}

/// Removes a peer connector's binding.
#[utoipa::path(delete, path = "/api/v1/tenants/{tenant}/workspaces/{workspace}/peers/{connector}", tag = "peers", security(("session" = [])), responses((status = 204, description = "Unbound")))]
async fn unbind_peer(
    ctx: TenantCtx,
    State(state): State<AppState>,
    Path((_, workspace, connector)): Path<(String, String, String)>,
) -> Result<StatusCode> {
    ctx.require_person(Permission::CredentialAdministration)?;
    super::unbind(&state.db, ctx.tenant.id, &ctx.audit, &workspace, &connector).await?;
    Ok(StatusCode::NO_CONTENT)
}

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(list_peers)).routes(routes!(bind_peer, unbind_peer))
}
