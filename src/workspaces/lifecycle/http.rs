//! `POST /api/v1/tenants/{t}/workspaces/{w}/bind | activate | suspend | resume | archive |
//! unarchive`: a person with `credential_administration`, the permission that configures
//! workspaces.

use axum::{
    Json,
    extract::{Path, State},
};
use serde::Deserialize;
use utoipa_axum::{router::OpenApiRouter, routes};

use super::{Binding, Transition};
use crate::{AppState, auth::TenantCtx, error::Result, extract::ApiJson, members::Permission, workspaces::Workspace};

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
struct Bind {
    /// The blueprint's slug.
    blueprint: String,
    version: i32,
    /// The workspace's `bound_version` as the caller read it.
    expected_version: i32,
}

/// Binds the workspace to an admitted blueprint version (compare-and-set on `expected_version`).
#[utoipa::path(post, path = "/api/v1/tenants/{tenant}/workspaces/{workspace}/bind", tag = "workspaces", security(("session" = [])), request_body = Bind, responses((status = 200, body = Binding), (status = 412, response = crate::error::Problem)))]
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

/// Activates a workspace.
#[utoipa::path(post, path = "/api/v1/tenants/{tenant}/workspaces/{workspace}/activate", tag = "workspaces", security(("session" = [])), responses((status = 200, body = Workspace), (status = 412, response = crate::error::Problem)))]
async fn activate(
    ctx: TenantCtx,
    State(state): State<AppState>,
    Path((_, slug)): Path<(String, String)>,
) -> Result<Json<Workspace>> {
    apply(ctx, state, slug, Transition::Activate).await
}

/// Suspends a workspace.
#[utoipa::path(post, path = "/api/v1/tenants/{tenant}/workspaces/{workspace}/suspend", tag = "workspaces", security(("session" = [])), responses((status = 200, body = Workspace), (status = 412, response = crate::error::Problem)))]
async fn suspend(
    ctx: TenantCtx,
    State(state): State<AppState>,
    Path((_, slug)): Path<(String, String)>,
) -> Result<Json<Workspace>> {
    apply(ctx, state, slug, Transition::Suspend).await
}

/// Resumes a suspended workspace.
#[utoipa::path(post, path = "/api/v1/tenants/{tenant}/workspaces/{workspace}/resume", tag = "workspaces", security(("session" = [])), responses((status = 200, body = Workspace), (status = 412, response = crate::error::Problem)))]
async fn resume(
    ctx: TenantCtx,
    State(state): State<AppState>,
    Path((_, slug)): Path<(String, String)>,
) -> Result<Json<Workspace>> {
    apply(ctx, state, slug, Transition::Resume).await
}

/// Archives a workspace.
#[utoipa::path(post, path = "/api/v1/tenants/{tenant}/workspaces/{workspace}/archive", tag = "workspaces", security(("session" = [])), responses((status = 200, body = Workspace), (status = 412, response = crate::error::Problem)))]
async fn archive(
    ctx: TenantCtx,
    State(state): State<AppState>,
    Path((_, slug)): Path<(String, String)>,
) -> Result<Json<Workspace>> {
    apply(ctx, state, slug, Transition::Archive).await
}

/// Brings an archived workspace back.
#[utoipa::path(post, path = "/api/v1/tenants/{tenant}/workspaces/{workspace}/unarchive", tag = "workspaces", security(("session" = [])), responses((status = 200, body = Workspace), (status = 412, response = crate::error::Problem)))]
async fn unarchive(
    ctx: TenantCtx,
    State(state): State<AppState>,
    Path((_, slug)): Path<(String, String)>,
) -> Result<Json<Workspace>> {
    apply(ctx, state, slug, Transition::Unarchive).await
}

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(bind))
        .routes(routes!(activate))
        .routes(routes!(suspend))
        .routes(routes!(resume))
        .routes(routes!(archive))
        .routes(routes!(unarchive))
}
