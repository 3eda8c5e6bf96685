//! `/api/v1/tenants/{tenant}/service-credentials`: owners and admins only.

use axum::{
    Json,
    extract::{Path, State},
    http::StatusCode,
    response::{IntoResponse, Response},
};
use serde::Deserialize;
use utoipa_axum::{router::OpenApiRouter, routes};

use crate::{
    AppState,
    auth::TenantCtx,
    error::Result,
    extract::{ApiJson, no_store, parse_id},
    service_credentials::{self, ServiceCredential},
};

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
struct CreateBody {
    name: String,
}

/// The tenant's service credentials (owners and admins).
#[utoipa::path(get, path = "/api/v1/tenants/{tenant}/service-credentials", tag = "service-credentials", security(("session" = [])), responses((status = 200, body = Vec<ServiceCredential>)))]
async fn list_credentials(ctx: TenantCtx, State(state): State<AppState>) -> Result<Json<Vec<ServiceCredential>>> {
    ctx.require_admin()?;
    Ok(Json(service_credentials::list(&state.db, ctx.tenant.id).await?))
}

/// The client secret is in this response and nowhere else, ever.
#[utoipa::path(post, path = "/api/v1/tenants/{tenant}/service-credentials", tag = "service-credentials", security(("session" = [])), request_body = CreateBody, responses((status = 201, body = service_credentials::Created)))]
async fn create_credential(
    ctx: TenantCtx,
    State(state): State<AppState>,
    ApiJson(body): ApiJson<CreateBody>,
) -> Result<Response> {
    ctx.require_admin()?;
    ctx.refuse_impersonation("mint service credentials")?;
    let created = service_credentials::create(&state.db, ctx.tenant.id, &ctx.audit, &body.name).await?;
    Ok(no_store((StatusCode::CREATED, Json(created)).into_response()))
}

/// Revokes a service credential.
#[utoipa::path(delete, path = "/api/v1/tenants/{tenant}/service-credentials/{id}", tag = "service-credentials", security(("session" = [])), responses((status = 200, body = ServiceCredential)))]
async fn revoke_credential(
    ctx: TenantCtx,
    State(state): State<AppState>,
    Path((_, id)): Path<(String, String)>,
) -> Result<Json<ServiceCredential>> {
    ctx.require_admin()?;
    Ok(Json(service_credentials::revoke(&state.db, ctx.tenant.id, &ctx.audit, parse_id(&id, "service credential")?).await?))
}

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(list_credentials, create_credential)).routes(routes!(revoke_credential))
}
