//! `POST /api/v1/tenants/{t}/workspaces/{w}/reap`: owners and admins only (a person).

use axum::{
    Json,
    extract::{Path, State},
};
use utoipa_axum::{router::OpenApiRouter, routes};

use super::Tombstone;
use crate::{AppState, auth::TenantCtx, error::Result};

#[tracing::instrument(skip_all, err)]
/// Deletes an archived workspace's rows for good (owners and admins).
#[utoipa::path(post, path = "/api/v1/tenants/{tenant}/workspaces/{workspace}/reap", tag = "reap", security(("session" = [])), responses((status = 200, body = Tombstone), (status = 412, response = crate::error::Problem)))]
async fn reap_workspace(
    ctx: TenantCtx,
    State(state): State<AppState>,
    Path((_, slug)): Path<(String, String)>,
) -> Result<Json<Tombstone>> {
    ctx.require_admin()?;
    Ok(Json(super::reap(&state.db, &state.config.copies.snapshot_dir, ctx.tenant.id, &ctx.audit, &slug).await?))
}

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(reap_workspace))
}
