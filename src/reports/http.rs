//! `/api/v1/tenants/{t}/reports` (owners and admins with `activity_access`: the tenant's rows)
//! and `/api/v1/platform/reports` (platform admins: every tenant's rows), as JSON.

use axum::{
    Json, Router,
    extract::{Path, State},
    routing::get,
};

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

async fn list_reports(ctx: TenantCtx, State(state): State<AppState>) -> Result<Json<Vec<Report>>> {
    require_reader(&ctx)?;
    Ok(Json(super::list(&state.db).await?))
}

async fn run_report(
    ctx: TenantCtx,
    State(state): State<AppState>,
    Path((_, name)): Path<(String, String)>,
) -> Result<Json<Output>> {
    require_reader(&ctx)?;
    Ok(Json(super::run(&state.db, Scope::Tenant(ctx.tenant.id), &name).await?))
}

async fn list_platform_reports(_: PlatformAdmin, State(state): State<AppState>) -> Result<Json<Vec<Report>>> {
    Ok(Json(super::list(&state.db).await?))
}

async fn run_platform_report(
    admin: PlatformAdmin,
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<Json<Output>> {
    tracing::info!(actor = %admin.audit.actor, report = %name, "platform report");
    Ok(Json(super::run(&state.db, Scope::Platform { reason: "platform report (API)" }, &name).await?))
}

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/v1/tenants/{tenant}/reports", get(list_reports))
        .route("/api/v1/tenants/{tenant}/reports/{name}", get(run_report))
        .route("/api/v1/platform/reports", get(list_platform_reports))
        .route("/api/v1/platform/reports/{name}", get(run_platform_report))
}
