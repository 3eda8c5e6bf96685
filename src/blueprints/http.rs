//! `/api/v1/tenants/{t}/blueprints…`. Reading needs membership (or a token); creating, adding
//! versions and deciding admission need a person with `credential_administration`, the
//! permission that configures workspaces.

use axum::{
    Json,
    body::Bytes,
    extract::{Path, State},
    http::StatusCode,
};
use serde::Deserialize;
use serde_json::Value;
use utoipa_axum::{router::OpenApiRouter, routes};

use super::{Blueprint, Decision, Shown, Version};
use crate::{
    AppState,
    auth::TenantCtx,
    blueprints,
    error::{Error, Result},
    extract::ApiJson,
    members::Permission,
};

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
struct CreateBlueprint {
    slug: String,
    name: Option<String>,
}

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
struct AddVersion {
    /// The configuration document (connectors, classification, grants, pools).
    document: Value,
    /// The latest version number the author read (0 for none); 412 if another was added since.
    expected_latest: Option<i32>,
}

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
struct Decide {
    reason: Option<String>,
}

/// The tenant's blueprints.
#[utoipa::path(get, path = "/api/v1/tenants/{tenant}/blueprints", tag = "blueprints", responses((status = 200, body = Vec<Blueprint>)))]
async fn list_blueprints(ctx: TenantCtx, State(state): State<AppState>) -> Result<Json<Vec<Blueprint>>> {
    Ok(Json(blueprints::list(&state.db, ctx.tenant.id).await?))
}

/// Creates a blueprint.
#[utoipa::path(post, path = "/api/v1/tenants/{tenant}/blueprints", tag = "blueprints", security(("session" = [])), request_body = CreateBlueprint, responses((status = 201, body = Blueprint)))]
async fn create_blueprint(
    ctx: TenantCtx,
    State(state): State<AppState>,
    ApiJson(body): ApiJson<CreateBlueprint>,
) -> Result<(StatusCode, Json<Blueprint>)> {
    ctx.require_person(Permission::CredentialAdministration)?;
    let created = blueprints::create(&state.db, ctx.tenant.id, &ctx.audit, &body.slug, body.name.as_deref()).await?;
    Ok((StatusCode::CREATED, Json(created)))
}

/// A blueprint with all its versions.
#[utoipa::path(get, path = "/api/v1/tenants/{tenant}/blueprints/{blueprint}", tag = "blueprints", responses((status = 200, body = Shown)))]
async fn show_blueprint(
    ctx: TenantCtx,
    State(state): State<AppState>,
    Path((_, slug)): Path<(String, String)>,
) -> Result<Json<Shown>> {
    Ok(Json(blueprints::show(&state.db, ctx.tenant.id, &slug).await?))
}

/// Adds a version (pending admission); 412 if another was added since `expected_latest`.
#[utoipa::path(post, path = "/api/v1/tenants/{tenant}/blueprints/{blueprint}/versions", tag = "blueprints", security(("session" = [])), request_body = AddVersion, responses((status = 201, body = Version), (status = 412, response = crate::error::Problem)))]
async fn add_version(
    ctx: TenantCtx,
    State(state): State<AppState>,
    Path((_, slug)): Path<(String, String)>,
    ApiJson(body): ApiJson<AddVersion>,
) -> Result<(StatusCode, Json<Version>)> {
    ctx.require_person(Permission::CredentialAdministration)?;
    let document = blueprints::parse_document(body.document, state.config.vault_keys.as_ref())?;
    let version = blueprints::add_version(&state.db, ctx.tenant.id, &ctx.audit, &slug, &document, body.expected_latest).await?;
    Ok((StatusCode::CREATED, Json(version)))
}

async fn decide(
    ctx: TenantCtx,
    state: AppState,
    slug: String,
    version: i32,
    decision: Decision,
    body: &[u8],
) -> Result<Json<Version>> {
    ctx.require_person(Permission::CredentialAdministration)?;
    // The body is optional: nothing, or `{"reason": …}`.
    let reason = if body.iter().all(u8::is_ascii_whitespace) {
        None
    } else {
        serde_json::from_slice::<Decide>(body).map_err(|e| Error::invalid("invalid_json", None, e.to_string()))?.reason
    };
    Ok(Json(blueprints::decide(&state.db, ctx.tenant.id, &ctx.audit, &slug, version, decision, reason.as_deref()).await?))
}

/// `POST …/blueprints/{b}/versions/{n}/admit` (an optional `{"reason": …}` body).
#[utoipa::path(post, path = "/api/v1/tenants/{tenant}/blueprints/{blueprint}/versions/{version}/admit", tag = "blueprints", security(("session" = [])), request_body(content = Option<Decide>, content_type = "application/json"), responses((status = 200, body = Version), (status = 412, response = crate::error::Problem)))]
async fn admit_version(
    ctx: TenantCtx,
    State(state): State<AppState>,
    Path((_, slug, version)): Path<(String, String, i32)>,
    body: Bytes,
) -> Result<Json<Version>> {
    decide(ctx, state, slug, version, Decision::Admit, &body).await
}

/// `POST …/blueprints/{b}/versions/{n}/reject` (an optional `{"reason": …}` body).
#[utoipa::path(post, path = "/api/v1/tenants/{tenant}/blueprints/{blueprint}/versions/{version}/reject", tag = "blueprints", security(("session" = [])), request_body(content = Option<Decide>, content_type = "application/json"), responses((status = 200, body = Version), (status = 412, response = crate::error::Problem)))]
async fn reject_version(
    ctx: TenantCtx,
    State(state): State<AppState>,
    Path((_, slug, version)): Path<(String, String, i32)>,
    body: Bytes,
) -> Result<Json<Version>> {
    decide(ctx, state, slug, version, Decision::Reject, &body).await
}

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_blueprints, create_blueprint))
        .routes(routes!(show_blueprint))
        .routes(routes!(add_version))
        .routes(routes!(admit_version))
        .routes(routes!(reject_version))
}
