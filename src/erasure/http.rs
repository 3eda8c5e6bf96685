//! `POST /api/v1/tenants/{t}/workspaces/{w}/erase`: owners and admins only (a person, never a
//! token), since an erasure destroys keys and cannot be undone.

use axum::{
    Json,
    extract::{Path, State},
};
use serde::Deserialize;
use utoipa_axum::{router::OpenApiRouter, routes};

use super::Outcome;
use crate::{AppState, auth::TenantCtx, error::Result, extract::ApiJson};

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
struct EraseBody {
    /// A member's id or email, or an external subject id.
    subject: String,
}

#[tracing::instrument(skip_all, err)]
/// Erases a subject's data in the workspace (owners and admins; cannot be undone).
#[utoipa::path(post, path = "/api/v1/tenants/{tenant}/workspaces/{workspace}/erase", tag = "erasure", security(("session" = [])), request_body = EraseBody, responses((status = 200, body = Outcome), (status = 412, response = crate::error::Problem)))]
async fn erase_subject(
    ctx: TenantCtx,
    State(state): State<AppState>,
    Path((_, slug)): Path<(String, String)>,
    ApiJson(body): ApiJson<EraseBody>,
) -> Result<Json<Outcome>> {
    ctx.require_admin()?;
    Ok(Json(super::erase(&state.db, ctx.tenant.id, &ctx.audit, &slug, &body.subject).await?))
}

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(erase_subject))
}
