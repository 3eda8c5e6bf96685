//! `/api/v1/tenants/{tenant}/tokens`: people with `access_token_management` only.

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
    members::Permission,
    tokens::{self, Token},
};

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
struct NameBody {
    name: String,
}

/// The tenant's access tokens (never their secrets).
#[utoipa::path(get, path = "/api/v1/tenants/{tenant}/tokens", tag = "tokens", security(("session" = [])),
    responses((status = 200, body = Vec<Token>)))]
async fn list_tokens(ctx: TenantCtx, State(state): State<AppState>) -> Result<Json<Vec<Token>>> {
    ctx.require_person(Permission::AccessTokenManagement)?;
    Ok(Json(tokens::list(&state.db, ctx.tenant.id).await?))
}

/// Creates a token. The secret is in this response and nowhere else, ever.
#[utoipa::path(post, path = "/api/v1/tenants/{tenant}/tokens", tag = "tokens", security(("session" = [])), request_body = NameBody,
    responses((status = 201, body = tokens::Created)))]
async fn create_token(ctx: TenantCtx, State(state): State<AppState>, ApiJson(body): ApiJson<NameBody>) -> Result<Response> {
    ctx.require_person(Permission::AccessTokenManagement)?;
    ctx.refuse_impersonation("mint access tokens")?;
    let created =
        tokens::create(&state.db, ctx.tenant.id, &ctx.audit, &body.name, ctx.principal().as_ref(), state.config.token_cap)
            .await?;
    Ok(no_store((StatusCode::CREATED, Json(created)).into_response()))
}

/// Renames a token.
#[utoipa::path(patch, path = "/api/v1/tenants/{tenant}/tokens/{id}", tag = "tokens", security(("session" = [])), request_body = NameBody,
    responses((status = 200, body = Token)))]
async fn rename_token(
    ctx: TenantCtx,
    State(state): State<AppState>,
    Path((_, id)): Path<(String, String)>,
    ApiJson(body): ApiJson<NameBody>,
) -> Result<Json<Token>> {
    ctx.require_person(Permission::AccessTokenManagement)?;
    Ok(Json(tokens::rename(&state.db, ctx.tenant.id, &ctx.audit, parse_id(&id, "token")?, &body.name).await?))
}

/// Revokes a token (idempotent: the revoked token is answered).
#[utoipa::path(delete, path = "/api/v1/tenants/{tenant}/tokens/{id}", tag = "tokens", security(("session" = [])),
    responses((status = 200, body = Token)))]
async fn revoke_token(
    ctx: TenantCtx,
    State(state): State<AppState>,
    Path((_, id)): Path<(String, String)>,
) -> Result<Json<Token>> {
    ctx.require_person(Permission::AccessTokenManagement)?;
    Ok(Json(tokens::revoke(&state.db, ctx.tenant.id, &ctx.audit, parse_id(&id, "token")?).await?))
}

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(list_tokens, create_token)).routes(routes!(rename_token, revoke_token))
}
