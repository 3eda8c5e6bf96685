//! `/api/v1/tenants/{tenant}/members` and `/invitations`: owners and admins manage them; any
//! member may list members.

use axum::{
    Json,
    extract::{Path, State},
    http::StatusCode,
};
use serde::Deserialize;
use utoipa_axum::{router::OpenApiRouter, routes};

use crate::{
    AppState,
    auth::TenantCtx,
    error::{Error, Result},
    extract::{ApiJson, parse_id},
    members::{self, Invitation, Member, Role},
};

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
struct InviteBody {
    email: String,
    role: Role,
}

/// The tenant's members (any member may list them).
#[utoipa::path(get, path = "/api/v1/tenants/{tenant}/members", tag = "members", security(("session" = [])), responses((status = 200, body = Vec<Member>)))]
async fn list_members(ctx: TenantCtx, State(state): State<AppState>) -> Result<Json<Vec<Member>>> {
    ctx.person()?;
    Ok(Json(members::list(&state.db, ctx.tenant.id).await?))
}

/// Removes a member (owners and admins).
#[utoipa::path(delete, path = "/api/v1/tenants/{tenant}/members/{id}", tag = "members", security(("session" = [])), responses((status = 204, description = "Removed")))]
async fn remove_member(
    ctx: TenantCtx,
    State(state): State<AppState>,
    Path((_, id)): Path<(String, String)>,
) -> Result<StatusCode> {
    ctx.require_admin()?;
    members::remove(&state.db, ctx.tenant.id, &ctx.audit, parse_id(&id, "member")?).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Pending and past invitations (owners and admins).
#[utoipa::path(get, path = "/api/v1/tenants/{tenant}/invitations", tag = "members", security(("session" = [])), responses((status = 200, body = Vec<Invitation>)))]
async fn list_invitations(ctx: TenantCtx, State(state): State<AppState>) -> Result<Json<Vec<Invitation>>> {
    ctx.require_admin()?;
    Ok(Json(members::list_invitations(&state.db, ctx.tenant.id).await?))
}

/// Invites a person by email with a role (owners and admins; only an owner invites an owner).
#[utoipa::path(post, path = "/api/v1/tenants/{tenant}/invitations", tag = "members", security(("session" = [])), request_body = InviteBody, responses((status = 201, body = Invitation)))]
async fn invite(
    ctx: TenantCtx,
    State(state): State<AppState>,
    ApiJson(body): ApiJson<InviteBody>,
) -> Result<(StatusCode, Json<Invitation>)> {
    let me = ctx.require_admin()?;
    ctx.refuse_impersonation("invite members")?;
    if body.role == Role::Owner && me.role != Role::Owner {
        return Err(Error::Forbidden { code: "permission_denied", message: "only an owner may invite an owner".into() });
    }
    Ok((StatusCode::CREATED, Json(members::invite(&state.db, ctx.tenant.id, &ctx.audit, &body.email, body.role).await?)))
}

/// Revokes an invitation.
#[utoipa::path(delete, path = "/api/v1/tenants/{tenant}/invitations/{id}", tag = "members", security(("session" = [])), responses((status = 204, description = "Revoked")))]
async fn revoke_invitation(
    ctx: TenantCtx,
    State(state): State<AppState>,
    Path((_, id)): Path<(String, String)>,
) -> Result<StatusCode> {
    ctx.require_admin()?;
    members::revoke_invitation(&state.db, ctx.tenant.id, &ctx.audit, parse_id(&id, "invitation")?).await?;
    Ok(StatusCode::NO_CONTENT)
}

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_members))
        .routes(routes!(remove_member))
        .routes(routes!(list_invitations, invite))
        .routes(routes!(revoke_invitation))
}
