//! `POST /api/v1/tenants/{t}/workspaces/{w}/erase`: owners and admins only (a person, never a
//! token), since an erasure destroys keys and cannot be undone.

use axum::{
    Json, Router,
    extract::{Path, State},
    routing::post,
};
use serde::Deserialize;

use super::Outcome;
use crate::{AppState, auth::TenantCtx, error::Result, extract::ApiJson};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EraseBody {
    /// A member's id or email, or an external subject id.
    subject: String,
}

#[tracing::instrument(skip_all, err)]
async fn erase_subject(
    ctx: TenantCtx,
    State(state): State<AppState>,
    Path((_, slug)): Path<(String, String)>,
    ApiJson(body): ApiJson<EraseBody>,
) -> Result<Json<Outcome>> {
    ctx.require_admin()?;
    Ok(Json(super::erase(&state.db, ctx.tenant.id, &ctx.audit, &slug, &body.subject).await?))
}

pub fn router() -> Router<AppState> {
    Router::new().route("/api/v1/tenants/{tenant}/workspaces/{workspace}/erase", post(erase_subject))
}
