//! `/api/v1/tenants/{tenant}/tokens`: people with `access_token_management` only.

use axum::{
    Json, Router,
    extract::{Path, State},
    http::StatusCode,
    response::{IntoResponse, Response},
    routing::{get, patch},
};
use serde::Deserialize;

use crate::{
    AppState,
    auth::TenantCtx,
    error::Result,
    extract::{ApiJson, no_store, parse_id},
    members::Permission,
    tokens::{self, Token},
};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NameBody {
    name: String,
}

async fn list_tokens(ctx: TenantCtx, State(state): State<AppState>) -> Result<Json<Vec<Token>>> {
    ctx.require_person(Permission::AccessTokenManagement)?;
    Ok(Json(tokens::list(&state.db, ctx.tenant.id).await?))
}

/// The secret is in this response and nowhere else, ever.
async fn create_token(ctx: TenantCtx, State(state): State<AppState>, ApiJson(body): ApiJson<NameBody>) -> Result<Response> {
    ctx.require_person(Permission::AccessTokenManagement)?;
    let created =
        tokens::create(&state.db, ctx.tenant.id, &ctx.audit, &body.name, ctx.principal().as_ref(), state.config.token_cap)
            .await?;
    Ok(no_store((StatusCode::CREATED, Json(created)).into_response()))
}

async fn rename_token(
    ctx: TenantCtx,
    State(state): State<AppState>,
    Path((_, id)): Path<(String, String)>,
    ApiJson(body): ApiJson<NameBody>,
) -> Result<Json<Token>> {
    ctx.require_person(Permission::AccessTokenManagement)?;
    Ok(Json(tokens::rename(&state.db, ctx.tenant.id, &ctx.audit, parse_id(&id, "token")?, &body.name).await?))
}

async fn revoke_token(
    ctx: TenantCtx,
    State(state): State<AppState>,
    Path((_, id)): Path<(String, String)>,
) -> Result<Json<Token>> {
    ctx.require_person(Permission::AccessTokenManagement)?;
    Ok(Json(tokens::revoke(&state.db, ctx.tenant.id, &ctx.audit, parse_id(&id, "token")?).await?))
}

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/v1/tenants/{tenant}/tokens", get(list_tokens).post(create_token))
        .route("/api/v1/tenants/{tenant}/tokens/{id}", patch(rename_token).delete(revoke_token))
}
