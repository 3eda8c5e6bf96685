//! `/api/v1/tenants/{t}/approvals`: the calls held back for approval, listed and shown to
//! members with `approval_decision`, and decided by them (people only: a token never approves
//! a call, not even its own).

use axum::{
    Json,
    extract::{Path, Query, State},
};
use serde::Deserialize;
use utoipa_axum::{router::OpenApiRouter, routes};

use super::Approval;
use crate::{
    AppState,
    auth::TenantCtx,
    error::{Error, Result},
    extract::{ApiJson, parse_id},
    members::Permission,
};

#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
struct ListQuery {
    /// `pending`: only those waiting for a decision (the default); `all`: every state.
    status: Option<String>,
}

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
struct Decision {
    /// Why (at most 500 characters; a denial needs one).
    reason: Option<String>,
}

/// The tenant's approvals, newest first: pending ones (default) or all.
#[utoipa::path(get, path = "/api/v1/tenants/{tenant}/approvals", tag = "approvals", params(ListQuery), responses((status = 200, body = Vec<Approval>)))]
async fn list_approvals(
    ctx: TenantCtx,
    State(state): State<AppState>,
    Query(q): Query<ListQuery>,
) -> Result<Json<Vec<Approval>>> {
    ctx.require(Permission::ApprovalDecision)?;
    let pending = match q.status.as_deref() {
        None | Some("pending") => true,
        Some("all") => false,
        Some(_) => return Err(Error::invalid("invalid_status", Some("status"), "status is `pending` or `all`")),
    };
    Ok(Json(super::list(&state.db, ctx.tenant.id, pending).await?))
}

/// One approval.
#[utoipa::path(get, path = "/api/v1/tenants/{tenant}/approvals/{id}", tag = "approvals", responses((status = 200, body = Approval)))]
async fn show_approval(
    ctx: TenantCtx,
    State(state): State<AppState>,
    Path((_, id)): Path<(String, String)>,
) -> Result<Json<Approval>> {
    ctx.require(Permission::ApprovalDecision)?;
    Ok(Json(super::get(&state.db, ctx.tenant.id, parse_id(&id, "approval")?).await?))
}

/// Approves a pending call: the caller's next identical call runs, once. The first decision
/// wins (409 `already_decided`); an expired approval answers 409 `approval_expired`.
#[utoipa::path(post, path = "/api/v1/tenants/{tenant}/approvals/{id}/approve", tag = "approvals", security(("session" = [])), request_body = Decision, responses((status = 200, body = Approval)))]
async fn approve_approval(
    ctx: TenantCtx,
    State(state): State<AppState>,
    Path((_, id)): Path<(String, String)>,
    ApiJson(body): ApiJson<Decision>,
) -> Result<Json<Approval>> {
    decide(ctx, state, id, true, body).await
}

/// Denies a pending call, with a reason the agent is told. The first decision wins.
#[utoipa::path(post, path = "/api/v1/tenants/{tenant}/approvals/{id}/deny", tag = "approvals", security(("session" = [])), request_body = Decision, responses((status = 200, body = Approval)))]
async fn deny_approval(
    ctx: TenantCtx,
    State(state): State<AppState>,
    Path((_, id)): Path<(String, String)>,
    ApiJson(body): ApiJson<Decision>,
) -> Result<Json<Approval>> {
    decide(ctx, state, id, false, body).await
}

async fn decide(ctx: TenantCtx, state: AppState, id: String, approve: bool, body: Decision) -> Result<Json<Approval>> {
    ctx.require_person(Permission::ApprovalDecision)?;
    ctx.refuse_impersonation("decide approvals")?;
    let id = parse_id(&id, "approval")?;
    Ok(Json(super::decide(&state.db, ctx.tenant.id, &ctx.audit, id, approve, body.reason.as_deref()).await?))
}

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_approvals))
        .routes(routes!(show_approval))
        .routes(routes!(approve_approval))
        .routes(routes!(deny_approval))
}
