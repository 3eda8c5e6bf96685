//! `POST /api/v1/tenants/{t}/workspaces/{w}/bind | activate | suspend | resume | archive |
//! unarchive`: a person with `credential_administration`, the permission that configures
//! workspaces.

use axum::{
    Json, Router,
    extract::{Path, State},
    routing::post,
};
use serde::Deserialize;

use super::{Binding, Transition};
use crate::{AppState, auth::TenantCtx, error::Result, extract::ApiJson, members::Permission, workspaces::Workspace};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Bind {
    /// The blueprint's slug.
    blueprint: String,
    version: i32,
    /// The workspace's `bound_version` as the caller read it.
    expected_version: i32,
}

async fn bind(
    ctx: TenantCtx,
    State(state): State<AppState>,
    Path((_, slug)): Path<(String, String)>,
    ApiJson(body): ApiJson<Bind>,
) -> Result<Json<Binding>> {
    ctx.require_person(Permission::CredentialAdministration)?;
    let binding =
        super::bind(&state.db, ctx.tenant.id, &ctx.audit, &slug, &body.blueprint, body.version, body.expected_version).await?;
    Ok(Json(binding))
}

async fn apply(ctx: TenantCtx, state: AppState, slug: String, transition: Transition) -> Result<Json<Workspace>> {
    ctx.require_person(Permission::CredentialAdministration)?;
    Ok(Json(super::transition(&state.db, ctx.tenant.id, &ctx.audit, &slug, transition).await?))
}

async fn activate(
    ctx: TenantCtx,
    State(state): State<AppState>,
    Path((_, slug)): Path<(String, String)>,
) -> Result<Json<Workspace>> {
    apply(ctx, state, slug, Transition::Activate).await
}

async fn suspend(
    ctx: TenantCtx,
    State(state): State<AppState>,
    Path((_, slug)): Path<(String, String)>,
) -> Result<Json<Workspace>> {
    apply(ctx, state, slug, Transition::Suspend).await
}

async fn resume(
    ctx: TenantCtx,
    State(state): State<AppState>,
    Path((_, slug)): Path<(String, String)>,
) -> Result<Json<Workspace>> {
    apply(ctx, state, slug, Transition::Resume).await
}

async fn archive(
    ctx: TenantCtx,
    State(state): State<AppState>,
    Path((_, slug)): Path<(String, String)>,
) -> Result<Json<Workspace>> {
    apply(ctx, state, slug, Transition::Archive).await
}

async fn unarchive(
    ctx: TenantCtx,
    State(state): State<AppState>,
    Path((_, slug)): Path<(String, String)>,
) -> Result<Json<Workspace>> {
    apply(ctx, state, slug, Transition::Unarchive).await
}

pub fn router() -> Router<AppState> {
    let at = |verb: &str| format!("/api/v1/tenants/{{tenant}}/workspaces/{{workspace}}/{verb}");
    Router::new()
        .route(&at("bind"), post(bind))
        .route(&at("activate"), post(activate))
        .route(&at("suspend"), post(suspend))
        .route(&at("resume"), post(resume))
        .route(&at("archive"), post(archive))
        .route(&at("unarchive"), post(unarchive))
}
