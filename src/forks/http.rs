//! `POST …/workspaces/{w}/fork {slug, ttl_hours?}`, `…/fork/extend {hours}`, `…/fork/pin`,
//! `…/fork/unpin`. Forking and changing a fork's life need a person with
//! `credential_administration` (a fork holds copies of the shared credentials).

use axum::{
    Json,
    extract::{Path, State},
    http::StatusCode,
};
use serde::Deserialize;
use utoipa_axum::{router::OpenApiRouter, routes};

use super::{Expiry, Forked};
use crate::{AppState, auth::TenantCtx, error::Result, extract::ApiJson, members::Permission};

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
struct ForkBody {
    slug: String,
    ttl_hours: Option<i64>,
}

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
struct ExtendBody {
    hours: i64,
}

/// Forks the workspace into a new preview workspace `slug` that expires.
#[utoipa::path(post, path = "/api/v1/tenants/{tenant}/workspaces/{workspace}/fork", tag = "forks", security(("session" = [])), request_body = ForkBody, responses((status = 201, body = Forked), (status = 412, response = crate::error::Problem)))]
async fn fork_workspace(
    ctx: TenantCtx,
    State(state): State<AppState>,
    Path((_, source)): Path<(String, String)>,
    ApiJson(body): ApiJson<ForkBody>,
) -> Result<(StatusCode, Json<Forked>)> {
    ctx.require_person(Permission::CredentialAdministration)?;
    let forked = super::fork(&state.db, &state.config, ctx.tenant.id, &ctx.audit, &source, &body.slug, body.ttl_hours).await?;
    Ok((StatusCode::CREATED, Json(forked)))
}

/// Extends a fork's life by `hours`.
#[utoipa::path(post, path = "/api/v1/tenants/{tenant}/workspaces/{workspace}/fork/extend", tag = "forks", security(("session" = [])), request_body = ExtendBody, responses((status = 200, body = Expiry), (status = 412, response = crate::error::Problem)))]
async fn extend_fork(
    ctx: TenantCtx,
    State(state): State<AppState>,
    Path((_, slug)): Path<(String, String)>,
    ApiJson(body): ApiJson<ExtendBody>,
) -> Result<Json<Expiry>> {
    ctx.require_person(Permission::CredentialAdministration)?;
    Ok(Json(super::extend(&state.db, ctx.tenant.id, &ctx.audit, &slug, body.hours).await?))
}

/// Pins a fork: it no longer expires.
#[utoipa::path(post, path = "/api/v1/tenants/{tenant}/workspaces/{workspace}/fork/pin", tag = "forks", security(("session" = [])), responses((status = 200, body = Expiry), (status = 412, response = crate::error::Problem)))]
async fn pin_fork(
    ctx: TenantCtx,
    State(state): State<AppState>,
    Path((_, slug)): Path<(String, String)>,
) -> Result<Json<Expiry>> {
    ctx.require_person(Permission::CredentialAdministration)?;
    Ok(Json(super::pin(&state.db, ctx.tenant.id, &ctx.audit, &slug, true).await?))
}

/// Unpins a fork: it expires again.
#[utoipa::path(post, path = "/api/v1/tenants/{tenant}/workspaces/{workspace}/fork/unpin", tag = "forks", security(("session" = [])), responses((status = 200, body = Expiry), (status = 412, response = crate::error::Problem)))]
async fn unpin_fork(
    ctx: TenantCtx,
    State(state): State<AppState>,
    Path((_, slug)): Path<(String, String)>,
) -> Result<Json<Expiry>> {
    ctx.require_person(Permission::CredentialAdministration)?;
    Ok(Json(super::pin(&state.db, ctx.tenant.id, &ctx.audit, &slug, false).await?))
}

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(fork_workspace))
        .routes(routes!(extend_fork))
        .routes(routes!(pin_fork))
        .routes(routes!(unpin_fork))
}
