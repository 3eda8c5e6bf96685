//! `GET /api/v1/tenants/{t}/copies[?workspace=slug]`: the tenant's copy ledger.

use axum::{
    Json,
    extract::{Query, State},
};
use serde::Deserialize;
use utoipa_axum::{router::OpenApiRouter, routes};

use super::Copy;
use crate::{AppState, auth::TenantCtx, error::Result, workspaces};

#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
struct Filter {
    workspace: Option<String>,
}

/// The tenant's copy ledger, optionally of one workspace.
#[utoipa::path(get, path = "/api/v1/tenants/{tenant}/copies", tag = "copies", params(Filter), responses((status = 200, body = Vec<Copy>)))]
async fn list_copies(ctx: TenantCtx, State(state): State<AppState>, Query(filter): Query<Filter>) -> Result<Json<Vec<Copy>>> {
    let workspace = match &filter.workspace {
        Some(slug) => Some(workspaces::bound(&state.db, ctx.tenant.id, slug).await?.workspace.id.0),
        None => None,
    };
    Ok(Json(super::list(&state.db, ctx.tenant.id, workspace).await?))
}

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(list_copies))
}
