//! `/api/v1/tenants/{tenant}/service-credentials`: owners and admins only.

use axum::{
    Json, Router,
    extract::{Path, State},
    http::StatusCode,
    response::{IntoResponse, Response},
    routing::{delete, get},
};
use serde::Deserialize;

use crate::{
    AppState,
    auth::TenantCtx,
    error::Result,
    extract::{ApiJson, no_store, parse_id},
    service_credentials::{self, ServiceCredential},
};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateBody {
    name: String,
}

async fn list_credentials(ctx: TenantCtx, State(state): State<AppState>) -> Result<Json<Vec<ServiceCredential>>> {
    ctx.require_admin()?;
    Ok(Json(service_credentials::list(&state.db, ctx.tenant.id).await?))
}

/// The client secret is in this response and nowhere else, ever.
async fn create_credential(
    ctx: TenantCtx,
    State(state): State<AppState>,
    ApiJson(body): ApiJson<CreateBody>,
) -> Result<Response> {
    ctx.require_admin()?;
    let created = service_credentials::create(&state.db, ctx.tenant.id, &ctx.audit, &body.name).await?;
    Ok(no_store((StatusCode::CREATED, Json(created)).into_response()))
}

async fn revoke_credential(
    ctx: TenantCtx,
    State(state): State<AppState>,
    Path((_, id)): Path<(String, String)>,
) -> Result<Json<ServiceCredential>> {
    ctx.require_admin()?;
    Ok(Json(service_credentials::revoke(&state.db, ctx.tenant.id, &ctx.audit, parse_id(&id, "service credential")?).await?))
}

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/v1/tenants/{tenant}/service-credentials", get(list_credentials).post(create_credential))
        .route("/api/v1/tenants/{tenant}/service-credentials/{id}", delete(revoke_credential))
}
