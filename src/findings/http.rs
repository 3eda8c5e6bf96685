//! `/api/v1/tenants/{t}/findings` and `/suppress-rules`: a tenant's inbox (people with
//! `activity_access` list, acknowledge and resolve) and its suppress rules (owners and admins
//! write them). Another tenant's finding or rule answers 404.

use axum::{
    Json,
    extract::{Path, Query, State},
    http::StatusCode,
};
use serde::{Deserialize, Serialize};
use utoipa_axum::{router::OpenApiRouter, routes};
use uuid::Uuid;

use super::{Finding, NewRule, Rule, Verdict};
use crate::{
    AppState,
    auth::TenantCtx,
    error::{Error, Result},
    extract::ApiJson,
    members::{Permission, Role},
};

#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
struct FindingQuery {
    status: Option<String>,
    limit: Option<i64>,
}

#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
struct RuleQuery {
    #[serde(default)]
    all: bool,
}

#[derive(Serialize, utoipa::ToSchema)]
#[schema(as = SuppressRuleCreated)]
struct Created {
    rule: Rule,
    /// Findings the rule suppressed at once.
    suppressed: u64,
}

/// Owners and admins with `activity_access` write suppress rules: a rule hides findings from
/// everyone in the tenant.
fn require_rule_writer(ctx: &TenantCtx) -> Result<()> {
    let member = ctx.require_person(Permission::ActivityAccess)?;
    if matches!(member.role, Role::Owner | Role::Admin) {
        Ok(())
    } else {
        Err(Error::Forbidden { code: "permission_denied", message: "only owners and admins write suppress rules".into() })
    }
}

/// The tenant's findings, newest first.
#[utoipa::path(get, path = "/api/v1/tenants/{tenant}/findings", tag = "findings", params(FindingQuery), responses((status = 200, body = Vec<Finding>)))]
async fn list_findings(
    ctx: TenantCtx,
    State(state): State<AppState>,
    Query(q): Query<FindingQuery>,
) -> Result<Json<Vec<Finding>>> {
    ctx.require_person(Permission::ActivityAccess)?;
    Ok(Json(super::list(&state.db, ctx.tenant.id, q.status.as_deref(), q.limit.unwrap_or(100)).await?))
}

/// Acknowledges a finding.
#[utoipa::path(post, path = "/api/v1/tenants/{tenant}/findings/{id}/ack", tag = "findings", responses((status = 200, body = Finding)))]
async fn ack_finding(
    ctx: TenantCtx,
    State(state): State<AppState>,
    Path((_, id)): Path<(String, Uuid)>,
) -> Result<Json<Finding>> {
    ctx.require_person(Permission::ActivityAccess)?;
    Ok(Json(super::set_verdict(&state.db, ctx.tenant.id, &ctx.audit, id, Verdict::Ack).await?))
}

/// Resolves a finding.
#[utoipa::path(post, path = "/api/v1/tenants/{tenant}/findings/{id}/resolve", tag = "findings", responses((status = 200, body = Finding)))]
async fn resolve_finding(
    ctx: TenantCtx,
    State(state): State<AppState>,
    Path((_, id)): Path<(String, Uuid)>,
) -> Result<Json<Finding>> {
    ctx.require_person(Permission::ActivityAccess)?;
    Ok(Json(super::set_verdict(&state.db, ctx.tenant.id, &ctx.audit, id, Verdict::Resolve).await?))
}

/// Suppress rules (live ones, or all with `all`).
#[utoipa::path(get, path = "/api/v1/tenants/{tenant}/suppress-rules", tag = "findings", params(RuleQuery), responses((status = 200, body = Vec<Rule>)))]
async fn list_rules(ctx: TenantCtx, State(state): State<AppState>, Query(q): Query<RuleQuery>) -> Result<Json<Vec<Rule>>> {
    ctx.require_person(Permission::ActivityAccess)?;
    Ok(Json(super::rules(&state.db, ctx.tenant.id, q.all).await?))
}

/// Creates a suppress rule; the findings it matches are suppressed at once.
#[utoipa::path(post, path = "/api/v1/tenants/{tenant}/suppress-rules", tag = "findings", request_body = NewRule, responses((status = 201, body = Created)))]
async fn create_rule(
    ctx: TenantCtx,
    State(state): State<AppState>,
    ApiJson(body): ApiJson<NewRule>,
) -> Result<(StatusCode, Json<Created>)> {
    require_rule_writer(&ctx)?;
    let (rule, suppressed) = super::create_rule(&state.db, ctx.tenant.id, &ctx.audit, &body).await?;
    Ok((StatusCode::CREATED, Json(Created { rule, suppressed })))
}

/// Revokes a suppress rule.
#[utoipa::path(delete, path = "/api/v1/tenants/{tenant}/suppress-rules/{id}", tag = "findings", responses((status = 200, body = Rule)))]
async fn revoke_rule(ctx: TenantCtx, State(state): State<AppState>, Path((_, id)): Path<(String, Uuid)>) -> Result<Json<Rule>> {
    require_rule_writer(&ctx)?;
    Ok(Json(super::revoke_rule(&state.db, ctx.tenant.id, &ctx.audit, id).await?))
}

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_findings))
        .routes(routes!(ack_finding))
        .routes(routes!(resolve_finding))
        .routes(routes!(list_rules, create_rule))
        .routes(routes!(revoke_rule))
}
