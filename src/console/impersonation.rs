//! The impersonation banner's one action: an owner or admin revokes an active grant at once
//! (the same rule and admin-log row as the API's revoke).

use axum::{
    Router,
    extract::{Path, State},
    response::{IntoResponse, Redirect, Response},
    routing::post,
};

use super::{Console, PageError};
use crate::{AppState, extract::parse_id};

async fn revoke_grant(
    c: Console,
    State(state): State<AppState>,
    Path((_, id)): Path<(String, String)>,
) -> Result<Response, PageError> {
    c.require_admin()?;
    c.ctx.refuse_impersonation("revoke impersonation grants from the console")?;
    let id = parse_id(&id, "impersonation grant")?;
    crate::impersonation::revoke(&state.db, c.ctx.tenant.id, &c.ctx.audit, id).await?;
    Ok(Redirect::to(&format!("/console/t/{}/workspaces", c.slug())).into_response())
}

pub fn router() -> Router<AppState> {
    Router::new().route("/console/t/{tenant}/impersonations/{id}/revoke", post(revoke_grant))
}
