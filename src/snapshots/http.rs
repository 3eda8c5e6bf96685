//! `POST …/workspaces/{w}/snapshots` (export) and `POST …/snapshots/{file}/restore {slug}`.
//! Both need a person with `credential_administration` (a snapshot holds credentials).

use axum::{
    Json, Router,
    extract::{Path, State},
    http::StatusCode,
    routing::post,
};
use serde::Deserialize;

use super::{Exported, Restored};
use crate::{AppState, auth::TenantCtx, error::Result, extract::ApiJson, members::Permission};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RestoreBody {
    slug: String,
}

async fn export_snapshot(
    ctx: TenantCtx,
    State(state): State<AppState>,
    Path((_, slug)): Path<(String, String)>,
) -> Result<(StatusCode, Json<Exported>)> {
    ctx.require_person(Permission::CredentialAdministration)?;
    let exported = super::export(&state.db, &state.config, ctx.tenant.id, &ctx.audit, &slug).await?;
    Ok((StatusCode::CREATED, Json(exported)))
}

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

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/v1/tenants/{tenant}/workspaces/{workspace}/snapshots", post(export_snapshot))
        .route("/api/v1/tenants/{tenant}/snapshots/{file}/restore", post(restore_snapshot))
}
