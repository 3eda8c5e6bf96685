//! `POST …/workspaces/{w}/fork {slug, ttl_hours?}`, `…/fork/extend {hours}`, `…/fork/pin`,
//! `…/fork/unpin`. Forking and changing a fork's life need a person with
//! `credential_administration` (a fork holds copies of the shared credentials).

use axum::{
    Json, Router,
    extract::{Path, State},
    http::StatusCode,
    routing::post,
};
use serde::Deserialize;

use super::{Expiry, Forked};
use crate::{AppState, auth::TenantCtx, error::Result, extract::ApiJson, members::Permission};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ForkBody {
    slug: String,
    ttl_hours: Option<i64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ExtendBody {
    hours: i64,
}

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

async fn extend_fork(
    ctx: TenantCtx,
    State(state): State<AppState>,
    Path((_, slug)): Path<(String, String)>,
    ApiJson(body): ApiJson<ExtendBody>,
) -> Result<Json<Expiry>> {
    ctx.require_person(Permission::CredentialAdministration)?;
    Ok(Json(super::extend(&state.db, ctx.tenant.id, &ctx.audit, &slug, body.hours).await?))
}

async fn pin_fork(
    ctx: TenantCtx,
    State(state): State<AppState>,
    Path((_, slug)): Path<(String, String)>,
) -> Result<Json<Expiry>> {
    ctx.require_person(Permission::CredentialAdministration)?;
    Ok(Json(super::pin(&state.db, ctx.tenant.id, &ctx.audit, &slug, true).await?))
}

async fn unpin_fork(
    ctx: TenantCtx,
    State(state): State<AppState>,
    Path((_, slug)): Path<(String, String)>,
) -> Result<Json<Expiry>> {
    ctx.require_person(Permission::CredentialAdministration)?;
    Ok(Json(super::pin(&state.db, ctx.tenant.id, &ctx.audit, &slug, false).await?))
}

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/v1/tenants/{tenant}/workspaces/{workspace}/fork", post(fork_workspace))
        .route("/api/v1/tenants/{tenant}/workspaces/{workspace}/fork/extend", post(extend_fork))
        .route("/api/v1/tenants/{tenant}/workspaces/{workspace}/fork/pin", post(pin_fork))
        .route("/api/v1/tenants/{tenant}/workspaces/{workspace}/fork/unpin", post(unpin_fork))
}
