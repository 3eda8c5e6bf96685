//! `GET /api/v1/tenants/{t}/copies[?workspace=slug]`: the tenant's copy ledger.

use axum::{
    Json, Router,
    extract::{Query, State},
    routing::get,
};
use serde::Deserialize;

use super::Copy;
use crate::{AppState, auth::TenantCtx, error::Result, workspaces};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Filter {
    workspace: Option<String>,
}

async fn list_copies(ctx: TenantCtx, State(state): State<AppState>, Query(filter): Query<Filter>) -> Result<Json<Vec<Copy>>> {
    let workspace = match &filter.workspace {
        Some(slug) => Some(workspaces::bound(&state.db, ctx.tenant.id, slug).await?.workspace.id.0),
        None => None,
    };
    Ok(Json(super::list(&state.db, ctx.tenant.id, workspace).await?))
}

pub fn router() -> Router<AppState> {
    Router::new().route("/api/v1/tenants/{tenant}/copies", get(list_copies))
}
