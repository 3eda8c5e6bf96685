//! `/api/v1/tenants/{t}/workspaces/{w}/tool-pins`: a workspace's pinned tool definitions and
//! the changes waiting for approval (readers with `connector_access`), and their approval
//! (owners and admins with `credential_administration`, people only).

use axum::{
    Json, Router,
    extract::{Path, Query, State},
    routing::{get, post},
};
use serde::Deserialize;

use super::Pin;
use crate::{
    AppState,
    auth::TenantCtx,
    error::{Error, Result},
    extract::ApiJson,
    members::{Permission, Role},
};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PinQuery {
    /// `quarantined`: only the pins waiting for approval.
    status: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Approval {
    /// The pending definition's digest, as the approver reviewed it.
    digest: String,
}

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

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/v1/tenants/{tenant}/workspaces/{workspace}/tool-pins", get(list_pins))
        .route("/api/v1/tenants/{tenant}/workspaces/{workspace}/tool-pins/{connector}/{tool}/approve", post(approve_pin))
}
