//! `POST …/workspaces/{w}/snapshots` (export) and `POST …/snapshots/{file}/restore {slug}`.
//! Both need a person with `credential_administration` (a snapshot holds credentials).

use axum::{
    Json,
    extract::{Path, State},
    http::StatusCode,
};
use serde::Deserialize;
use utoipa_axum::{router::OpenApiRouter, routes};

use super::{Exported, Restored};
use crate::{AppState, auth::TenantCtx, error::Result, extract::ApiJson, members::Permission};

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
struct RestoreBody {
    slug: String,
}

/// Exports a snapshot of the workspace to a file.
#[utoipa::path(post, path = "/api/v1/tenants/{tenant}/workspaces/{workspace}/snapshots", tag = "snapshots", security(("session" = [])), responses((status = 201, body = Exported), (status = 412, response = crate::error::Problem)))]
async fn export_snapshot(
    ctx: TenantCtx,
    State(state): State<AppState>,
    Path((_, slug)): Path<(String, String)>,
) -> Result<(StatusCode, Json<Exported>)> {
    ctx.require_person(Permission::CredentialAdministration)?;
    ctx.refuse_impersonation("export sealed credentials in a snapshot")?;
    let exported = super::export(&state.db, &state.config, ctx.tenant.id, &ctx.audit, &slug).await?;
    Ok((StatusCode::CREATED, Json(exported)))
}

/// Restores a snapshot file into a new workspace `slug`.
#[utoipa::path(post, path = "/api/v1/tenants/{tenant}/snapshots/{file}/restore", tag = "snapshots", security(("session" = [])), request_body = RestoreBody, responses((status = 201, body = Restored), (status = 412, response = crate::error::Problem)))]
async fn restore_snapshot(
    ctx: TenantCtx,
    State(state): State<AppState>,
    Path((_, file)): Path<(String, String)>,
    ApiJson(body): ApiJson<RestoreBody>,
) -> Result<(StatusCode, Json<Restored>)> {
    ctx.require_person(Permission::CredentialAdministration)?;
    let restored = super::restore(&state.db, &state.config, ctx.tenant.id, &ctx.audit, &file, &body.slug).await?;
    Ok((StatusCode::CREATED, Json(restored)))
}

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(export_snapshot)).routes(routes!(restore_snapshot))
}
