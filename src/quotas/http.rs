//! The tenant admins' API for quotas: limits (`…/quotas`) and the ledger's usage
//! (`…/quotas/usage`).

use axum::{
    Json,
    extract::{Path, Query, State},
    http::StatusCode,
};
use serde::Deserialize;
use utoipa_axum::{router::OpenApiRouter, routes};

use super::{Limit, LimitInput, Usage};
use crate::{
    AppState,
    auth::TenantCtx,
    error::Result,
    extract::{ApiJson, parse_id},
};

/// The tenant's limits (owners and admins).
#[utoipa::path(get, path = "/api/v1/tenants/{tenant}/quotas", tag = "quotas", security(("session" = [])),
    responses((status = 200, body = Vec<Limit>)))]
async fn list_limits(ctx: TenantCtx, State(state): State<AppState>) -> Result<Json<Vec<Limit>>> {
    ctx.require_admin()?;
    Ok(Json(super::list(&state.db, ctx.tenant.id).await?))
}

/// Adds a limit; every replica enforces it from its next call.
#[utoipa::path(post, path = "/api/v1/tenants/{tenant}/quotas", tag = "quotas", security(("session" = [])),
    request_body = LimitInput, responses((status = 201, body = Limit)))]
async fn create_limit(
    ctx: TenantCtx,
    State(state): State<AppState>,
    ApiJson(body): ApiJson<LimitInput>,
) -> Result<(StatusCode, Json<Limit>)> {
    ctx.require_admin()?;
    Ok((StatusCode::CREATED, Json(super::create(&state.db, ctx.tenant.id, &ctx.audit, &body).await?)))
}

#[utoipa::path(get, path = "/api/v1/tenants/{tenant}/quotas/{id}", tag = "quotas", security(("session" = [])),
    responses((status = 200, body = Limit)))]
async fn get_limit(ctx: TenantCtx, State(state): State<AppState>, Path((_, id)): Path<(String, String)>) -> Result<Json<Limit>> {
    ctx.require_admin()?;
    Ok(Json(super::get(&state.db, ctx.tenant.id, parse_id(&id, "quota")?).await?))
}

/// Replaces a limit by compare-and-set on `version` (412 `quota_changed` when it moved on).
#[utoipa::path(put, path = "/api/v1/tenants/{tenant}/quotas/{id}", tag = "quotas", security(("session" = [])),
    request_body = LimitInput, responses((status = 200, body = Limit)))]
async fn put_limit(
    ctx: TenantCtx,
    State(state): State<AppState>,
    Path((_, id)): Path<(String, String)>,
    ApiJson(body): ApiJson<LimitInput>,
) -> Result<Json<Limit>> {
    ctx.require_admin()?;
    Ok(Json(super::update(&state.db, ctx.tenant.id, &ctx.audit, parse_id(&id, "quota")?, &body).await?))
}

#[utoipa::path(delete, path = "/api/v1/tenants/{tenant}/quotas/{id}", tag = "quotas", security(("session" = [])),
    responses((status = 204)))]
async fn delete_limit(
    ctx: TenantCtx,
    State(state): State<AppState>,
    Path((_, id)): Path<(String, String)>,
) -> Result<StatusCode> {
    ctx.require_admin()?;
    super::delete(&state.db, ctx.tenant.id, &ctx.audit, parse_id(&id, "quota")?).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
struct UsageQuery {
    /// Rows at most (default 100, at most 1000).
    limit: Option<i64>,
}

/// The newest windows of the ledger: per limit, subject and window, the budget, what replicas
/// hold or spent (`granted`), the admitted calls they reported (`used`) and the refusals.
#[utoipa::path(get, path = "/api/v1/tenants/{tenant}/quotas/usage", tag = "quotas", security(("session" = [])),
    params(UsageQuery), responses((status = 200, body = Vec<Usage>)))]
async fn usage(ctx: TenantCtx, State(state): State<AppState>, Query(q): Query<UsageQuery>) -> Result<Json<Vec<Usage>>> {
    ctx.require_admin()?;
    Ok(Json(super::usage(&state.db, ctx.tenant.id, q.limit.unwrap_or(100).clamp(1, 1000)).await?))
}

pub fn api_router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(list_limits, create_limit)).routes(routes!(usage)).routes(routes!(
        get_limit,
        put_limit,
        delete_limit
    ))
}
