//! `/api/v1/tenants/{t}/workspaces/{w}/tool-pins`: a workspace's pinned tool definitions and
//! the changes waiting for approval (readers with `connector_access`), and their approval
//! (owners and admins with `credential_administration`, people only).

use axum::{
    Json,
    extract::{Path, Query, State},
};
use serde::Deserialize;
use utoipa_axum::{router::OpenApiRouter, routes};

use super::Pin;
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
struct PinQuery {
    /// `quarantined`: only the pins waiting for approval.
    status: Option<String>,
}

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
struct Approval {
    /// The pending definition's digest, as the approver reviewed it.
    digest: String,
}

/// The workspace's tool pins (all, or only `quarantined`).
#[utoipa::path(get, path = "/api/v1/tenants/{tenant}/workspaces/{workspace}/tool-pins", tag = "tool-pins", params(PinQuery), responses((status = 200, body = Vec<Pin>)))]
async fn list_pins(
    ctx: TenantCtx,
    State(state): State<AppState>,
    Path((_, slug)): Path<(String, String)>,
    Query(q): Query<PinQuery>,
) -> Result<Json<Vec<Pin>>> {
    ctx.require(Permission::ConnectorAccess)?;
    let quarantined = match q.status.as_deref() {
        None => false,
        Some("quarantined") => true,
        Some(_) => return Err(Error::invalid("invalid_status", Some("status"), "status is `quarantined` or absent")),
    };
    Ok(Json(super::list(&state.db, ctx.tenant.id, &slug, quarantined).await?))
}

/// Approves a quarantined tool's pending definition by its digest.
#[utoipa::path(post, path = "/api/v1/tenants/{tenant}/workspaces/{workspace}/tool-pins/{connector}/{tool}/approve", tag = "tool-pins", security(("session" = [])), request_body = Approval, responses((status = 200, body = Pin), (status = 412, response = crate::error::Problem)))]
async fn approve_pin(
    ctx: TenantCtx,
    State(state): State<AppState>,
    Path((_, slug, connector, tool)): Path<(String, String, String, String)>,
    ApiJson(body): ApiJson<Approval>,
) -> Result<Json<Pin>> {
    let member = ctx.require_person(Permission::CredentialAdministration)?;
    if !matches!(member.role, Role::Owner | Role::Admin) {
        return Err(Error::Forbidden {
            code: "permission_denied",
            message: "only owners and admins approve tool changes".into(),
        });
    }
    Ok(Json(super::approve(&state.db, ctx.tenant.id, &ctx.audit, &slug, &connector, &tool, &body.digest).await?))
}

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(list_pins)).routes(routes!(approve_pin))
}
