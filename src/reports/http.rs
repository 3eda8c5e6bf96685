//! `/api/v1/tenants/{t}/reports` (owners and admins with `activity_access`: the tenant's rows)
//! and `/api/v1/platform/reports` (platform admins: every tenant's rows), as JSON.

use axum::{
    Json,
    extract::{Path, State},
};
use utoipa_axum::{router::OpenApiRouter, routes};

use super::{Output, Report};
use crate::{
    AppState,
    auth::TenantCtx,
    db::Scope,
    error::{Error, Result},
    members::{Permission, Role},
    ops::http::PlatformAdmin,
};

/// Reports span the tenant's tokens, credentials and audit trail: owners and admins only.
fn require_reader(ctx: &TenantCtx) -> Result<()> {
    let member = ctx.require_person(Permission::ActivityAccess)?;
    if matches!(member.role, Role::Owner | Role::Admin) {
        Ok(())
    } else {
        Err(Error::Forbidden { code: "permission_denied", message: "only owners and admins run reports".into() })
    }
}

/// The reports a tenant may run.
#[utoipa::path(get, path = "/api/v1/tenants/{tenant}/reports", tag = "reports", responses((status = 200, body = Vec<Report>)))]
async fn list_reports(ctx: TenantCtx, State(state): State<AppState>) -> Result<Json<Vec<Report>>> {
    require_reader(&ctx)?;
    Ok(Json(super::list(&state.db).await?))
}

/// Runs a report over the tenant's rows.
#[utoipa::path(get, path = "/api/v1/tenants/{tenant}/reports/{name}", tag = "reports", responses((status = 200, body = Output)))]
async fn run_report(
    ctx: TenantCtx,
    State(state): State<AppState>,
    Path((_, name)): Path<(String, String)>,
) -> Result<Json<Output>> {
    require_reader(&ctx)?;
    Ok(Json(super::run(&state.db, Scope::Tenant(ctx.tenant.id), &name).await?))
}

/// The reports (platform admins).
#[utoipa::path(get, path = "/api/v1/platform/reports", tag = "reports", security(("session" = [])), responses((status = 200, body = Vec<Report>)))]
async fn list_platform_reports(_: PlatformAdmin, State(state): State<AppState>) -> Result<Json<Vec<Report>>> {
    Ok(Json(super::list(&state.db).await?))
}

/// Runs a report over every tenant (platform admins; audited).
#[utoipa::path(get, path = "/api/v1/platform/reports/{name}", tag = "reports", security(("session" = [])), responses((status = 200, body = Output)))]
async fn run_platform_report(
    admin: PlatformAdmin,
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<Json<Output>> {
    tracing::info!(actor = %admin.audit.actor, report = %name, "platform report");
    Ok(Json(super::run(&state.db, Scope::Platform { reason: "platform report (API)" }, &name).await?))
}

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_reports))
        .routes(routes!(run_report))
        .routes(routes!(list_platform_reports))
        .routes(routes!(run_platform_report))
}
