//! `/api/v1/tenants/{tenant}/members` and `/invitations`: owners and admins manage them; any
//! member may list members.

use axum::{
    Json, Router,
    extract::{Path, State},
    http::StatusCode,
    routing::{delete, get},
};
use serde::Deserialize;

use crate::{
    AppState,
    auth::TenantCtx,
    error::{Error, Result},
    extract::{ApiJson, parse_id},
    members::{self, Invitation, Member, Role},
};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct InviteBody {
    email: String,
    role: Role,
}

async fn list_members(ctx: TenantCtx, State(state): State<AppState>) -> Result<Json<Vec<Member>>> {
    ctx.person()?;
    Ok(Json(members::list(&state.db, ctx.tenant.id).await?))
}

async fn remove_member(
    ctx: TenantCtx,
    State(state): State<AppState>,
    Path((_, id)): Path<(String, String)>,
) -> Result<StatusCode> {
    ctx.require_admin()?;
    members::remove(&state.db, ctx.tenant.id, &ctx.audit, parse_id(&id, "member")?).await?;
    Ok(StatusCode::NO_CONTENT)
}

async fn list_invitations(ctx: TenantCtx, State(state): State<AppState>) -> Result<Json<Vec<Invitation>>> {
    ctx.require_admin()?;
    Ok(Json(members::list_invitations(&state.db, ctx.tenant.id).await?))
}

async fn invite(
    ctx: TenantCtx,
    State(state): State<AppState>,
    ApiJson(body): ApiJson<InviteBody>,
) -> Result<(StatusCode, Json<Invitation>)> {
    let me = ctx.require_admin()?;
    if body.role == Role::Owner && me.role != Role::Owner {
        return Err(Error::Forbidden { code: "permission_denied", message: "only an owner may invite an owner".into() });
    }
    Ok((StatusCode::CREATED, Json(members::invite(&state.db, ctx.tenant.id, &ctx.audit, &body.email, body.role).await?)))
}

async fn revoke_invitation(
    ctx: TenantCtx,
    State(state): State<AppState>,
    Path((_, id)): Path<(String, String)>,
) -> Result<StatusCode> {
    ctx.require_admin()?;
    members::revoke_invitation(&state.db, ctx.tenant.id, &ctx.audit, parse_id(&id, "invitation")?).await?;
    Ok(StatusCode::NO_CONTENT)
}

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/v1/tenants/{tenant}/members", get(list_members))
        .route("/api/v1/tenants/{tenant}/members/{id}", delete(remove_member))
        .route("/api/v1/tenants/{tenant}/invitations", get(list_invitations).post(invite))
        .route("/api/v1/tenants/{tenant}/invitations/{id}", delete(revoke_invitation))
}
