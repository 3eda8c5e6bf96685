//! `/api/v1/tenants/{t}/…/connect-links`: mint, list and revoke mailed connect links (people
//! with `credential_administration`). No answer ever carries a link's secret.

use axum::{
    Json, Router,
    extract::{Path, Query, State},
    http::StatusCode,
    routing::{delete, get, post},
};
use serde::Deserialize;
use uuid::Uuid;

use super::{Link, Minted};
use crate::{AppState, auth::TenantCtx, error::Result, http::ApiJson, members::Permission};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct MintLink {
    email: String,
    ttl_days: Option<i64>,
}

#[derive(Deserialize)]
struct ListQuery {
    #[serde(default)]
    history: bool,
}

async fn create_link(
    ctx: TenantCtx,
    State(state): State<AppState>,
    Path((_, ws, connector)): Path<(String, String, String)>,
    ApiJson(body): ApiJson<MintLink>,
) -> Result<(StatusCode, Json<Minted>)> {
    ctx.require_person(Permission::CredentialAdministration)?;
    let minted = super::mint(
        &state.db,
        ctx.tenant.id,
        &ctx.tenant.slug,
        state.config.public_origin(),
        &ctx.audit,
        &ws,
        &connector,
        &body.email,
        body.ttl_days,
    )
    .await?;
    Ok((StatusCode::CREATED, Json(minted)))
}

async fn list_links(ctx: TenantCtx, State(state): State<AppState>, Query(q): Query<ListQuery>) -> Result<Json<Vec<Link>>> {
    ctx.require_person(Permission::CredentialAdministration)?;
    Ok(Json(super::list(&state.db, ctx.tenant.id, q.history).await?))
}

async fn revoke_link(ctx: TenantCtx, State(state): State<AppState>, Path((_, id)): Path<(String, Uuid)>) -> Result<Json<Link>> {
    ctx.require_person(Permission::CredentialAdministration)?;
    Ok(Json(super::revoke(&state.db, ctx.tenant.id, &ctx.audit, id).await?))
}

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/v1/tenants/{tenant}/workspaces/{workspace}/connectors/{id}/connect-links", post(create_link))
        .route("/api/v1/tenants/{tenant}/connect-links", get(list_links))
        .route("/api/v1/tenants/{tenant}/connect-links/{id}", delete(revoke_link))
}
