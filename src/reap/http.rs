//! `POST /api/v1/tenants/{t}/workspaces/{w}/reap`: owners and admins only (a person).

use axum::{
    Json, Router,
    extract::{Path, State},
    routing::post,
};

use super::Tombstone;
use crate::{AppState, auth::TenantCtx, error::Result};

#[tracing::instrument(skip_all, err)]
async fn reap_workspace(
    ctx: TenantCtx,
    State(state): State<AppState>,
    Path((_, slug)): Path<(String, String)>,
) -> Result<Json<Tombstone>> {
    ctx.require_admin()?;
    Ok(Json(super::reap(&state.db, &state.config.copies.snapshot_dir, ctx.tenant.id, &ctx.audit, &slug).await?))
}

pub fn router() -> Router<AppState> {
    Router::new().route("/api/v1/tenants/{tenant}/workspaces/{workspace}/reap", post(reap_workspace))
}
