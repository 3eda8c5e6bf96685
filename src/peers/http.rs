//! `/api/v1/tenants/{t}/workspaces/{w}/peers`: list a workspace's peer connectors with where
//! each leads now; bind (`PUT …/peers/{connector}` `{"target": "<workspace slug>"}`) and unbind
//! (`DELETE`). Reading needs membership (or a token); binding needs a person with
//! `credential_administration`, like every other configuration change.

use axum::{
    Json, Router,
    extract::{Path, State},
    http::StatusCode,
    routing::{get, put},
};
use serde::Deserialize;

use super::{Binding, PeerView};
use crate::{AppState, auth::TenantCtx, error::Result, extract::ApiJson, members::Permission};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct BindBody {
    /// The target workspace's slug (same tenant).
    target: String,
}

async fn list_peers(
    ctx: TenantCtx,
    State(state): State<AppState>,
    Path((_, workspace)): Path<(String, String)>,
) -> Result<Json<Vec<PeerView>>> {
    Ok(Json(super::list(&state.db, ctx.tenant.id, &workspace).await?))
}

async fn bind_peer(
    ctx: TenantCtx,
    State(state): State<AppState>,
    Path((_, workspace, connector)): Path<(String, String, String)>,
    ApiJson(body): ApiJson<BindBody>,
) -> Result<Json<Binding>> {
    ctx.require_person(Permission::CredentialAdministration)?;
    Ok(Json(super::bind(&state.db, ctx.tenant.id, &ctx.audit, &workspace, &connector, &body.target).await?))
}

async fn unbind_peer(
    ctx: TenantCtx,
    State(state): State<AppState>,
    Path((_, workspace, connector)): Path<(String, String, String)>,
) -> Result<StatusCode> {
    ctx.require_person(Permission::CredentialAdministration)?;
    super::unbind(&state.db, ctx.tenant.id, &ctx.audit, &workspace, &connector).await?;
    Ok(StatusCode::NO_CONTENT)
}

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/v1/tenants/{tenant}/workspaces/{workspace}/peers", get(list_peers))
        .route("/api/v1/tenants/{tenant}/workspaces/{workspace}/peers/{connector}", put(bind_peer).delete(unbind_peer))
}
