//! Impersonation routes: a platform admin asks for a grant
//! (`POST /api/v1/platform/tenants/{tenant}/impersonations`); the tenant's owners and admins
//! list, approve and revoke grants and set whether grants need approval
//! (`/api/v1/tenants/{tenant}/impersonations…`, `…/impersonation-settings`).

use axum::{
    Json,
    extract::{Path, State},
    http::StatusCode,
};
use serde::Deserialize;
use utoipa_axum::{router::OpenApiRouter, routes};

use super::{Grant, Settings, Staff};
use crate::{
    AppState,
    auth::TenantCtx,
    error::{Error, Result},
    extract::{ApiJson, parse_id},
    ops::http::PlatformAdmin,
};

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
struct RequestBody {
    /// Why staff need to act in the tenant (1 to 500 characters), shown to its members.
    #[serde(default)]
    reason: String,
    /// How long the grant lasts once active: 1 to 60 minutes, 30 when absent.
    minutes: Option<i64>,
}

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
struct SettingsBody {
    approval_required: bool,
}

/// Asks for an impersonation grant in a tenant (platform admins). Active at once, or pending
/// until a tenant owner or admin approves it when the tenant requires approval.
#[utoipa::path(post, path = "/api/v1/platform/tenants/{tenant}/impersonations", tag = "impersonation", security(("session" = [])),
    request_body = RequestBody, responses((status = 201, body = Grant)))]
async fn request_impersonation(
    admin: PlatformAdmin,
    State(state): State<AppState>,
    Path(slug): Path<String>,
    ApiJson(body): ApiJson<RequestBody>,
) -> Result<(StatusCode, Json<Grant>)> {
    let tenant = crate::tenants::by_slug(&state.db, &slug).await?;
    if tenant.status != crate::tenants::Status::Active {
        return Err(Error::NotFound { what: "tenant" });
    }
    let email = admin.session.email.as_deref().map(str::to_lowercase).unwrap_or_default();
    let staff = Staff { principal: &admin.session.principal, email: &email };
    let grant = super::request(&state.db, tenant.id, &admin.audit, &staff, &body.reason, body.minutes).await?;
    Ok((StatusCode::CREATED, Json(grant)))
}

/// The tenant's impersonation grants, newest first (owners and admins).
#[utoipa::path(get, path = "/api/v1/tenants/{tenant}/impersonations", tag = "impersonation", security(("session" = [])),
    responses((status = 200, body = Vec<Grant>)))]
async fn list_impersonations(ctx: TenantCtx, State(state): State<AppState>) -> Result<Json<Vec<Grant>>> {
    ctx.require_admin()?;
    Ok(Json(super::list(&state.db, ctx.tenant.id).await?))
}

/// Approves a pending grant (owners and admins; not under impersonation). The first decision
/// on a grant wins: a second one answers 409 `already_decided`.
#[utoipa::path(post, path = "/api/v1/tenants/{tenant}/impersonations/{id}/approve", tag = "impersonation", security(("session" = [])),
    responses((status = 200, body = Grant)))]
async fn approve_impersonation(
    ctx: TenantCtx,
    State(state): State<AppState>,
    Path((_, id)): Path<(String, String)>,
) -> Result<Json<Grant>> {
    ctx.require_admin()?;
    ctx.refuse_impersonation("approve impersonation grants")?;
    Ok(Json(super::approve(&state.db, ctx.tenant.id, &ctx.audit, parse_id(&id, "impersonation grant")?).await?))
}

/// Revokes a grant at once (owners and admins, or the staff person ending their own grant):
/// the staff person's next request, on any replica, is a stranger's again.
#[utoipa::path(post, path = "/api/v1/tenants/{tenant}/impersonations/{id}/revoke", tag = "impersonation", security(("session" = [])),
    responses((status = 200, body = Grant)))]
async fn revoke_impersonation(
    ctx: TenantCtx,
    State(state): State<AppState>,
    Path((_, id)): Path<(String, String)>,
) -> Result<Json<Grant>> {
    ctx.require_admin()?;
    let id = parse_id(&id, "impersonation grant")?;
    if let Some(own) = &ctx.impersonation
        && own.id != id
    {
        ctx.refuse_impersonation("revoke another impersonation grant")?;
    }
    Ok(Json(super::revoke(&state.db, ctx.tenant.id, &ctx.audit, id).await?))
}

/// Whether impersonation grants need the tenant's approval (owners and admins).
#[utoipa::path(get, path = "/api/v1/tenants/{tenant}/impersonation-settings", tag = "impersonation", security(("session" = [])),
    responses((status = 200, body = Settings)))]
async fn show_settings(ctx: TenantCtx, State(state): State<AppState>) -> Result<Json<Settings>> {
    ctx.require_admin()?;
    Ok(Json(super::settings(&state.db, ctx.tenant.id).await?))
}

/// Sets whether impersonation grants need the tenant's approval (owners and admins; not
/// under impersonation). Admin-logged.
#[utoipa::path(put, path = "/api/v1/tenants/{tenant}/impersonation-settings", tag = "impersonation", security(("session" = [])),
    request_body = SettingsBody, responses((status = 200, body = Settings)))]
async fn set_settings(
    ctx: TenantCtx,
    State(state): State<AppState>,
    ApiJson(body): ApiJson<SettingsBody>,
) -> Result<Json<Settings>> {
    ctx.require_admin()?;
    ctx.refuse_impersonation("change the impersonation setting")?;
    let next = Settings { approval_required: body.approval_required };
    Ok(Json(super::set_settings(&state.db, ctx.tenant.id, &ctx.audit, next).await?))
}

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(request_impersonation))
        .routes(routes!(list_impersonations))
        .routes(routes!(approve_impersonation))
        .routes(routes!(revoke_impersonation))
        .routes(routes!(show_settings, set_settings))
}
