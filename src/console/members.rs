//! Members and invitations. Every member sees who else is a member; owners and admins invite,
//! revoke invitations and remove members (only an owner invites an owner).

use askama::Template;
use axum::{
    Form, Router,
    extract::{Path, State},
    http::StatusCode,
    response::{IntoResponse, Redirect, Response},
    routing::{get, post},
};
use serde::Deserialize;

use super::{ConfirmPage, Console, FormError, Layout, PageError, creators, is_admin, render, when, who};
use crate::{
    AppState,
    error::Error,
    http::parse_id,
    members::{self, Role},
};

pub struct MemberRow {
    pub id: String,
    pub who: String,
    pub role: String,
    pub since: String,
    pub me: bool,
}

pub struct InvitationRow {
    pub id: String,
    pub email: String,
    pub role: String,
    pub invited_by: String,
    pub expires: String,
    pub state: String,
    pub open: bool,
}

#[derive(Template)]
#[template(path = "console/members.html")]
struct MembersPage {
    layout: Layout,
    slug: String,
    admin: bool,
    owner: bool,
    members: Vec<MemberRow>,
    invitations: Vec<InvitationRow>,
    error: Option<FormError>,
    email: String,
    notice: Option<String>,
}

async fn page(
    c: &Console,
    state: &AppState,
    status: StatusCode,
    error: Option<FormError>,
    email: String,
    notice: Option<String>,
) -> Result<Response, PageError> {
    let admin = is_admin(c.member.role);
    let mut list = members::list(&state.db, c.ctx.tenant.id).await?;
    list.sort_by_key(|m| m.created_at);
    let rows = list
        .into_iter()
        .map(|m| MemberRow {
            id: m.id.to_string(),
            who: who(m.email.as_deref(), m.display_name.as_deref(), &m.subject),
            role: m.role.as_str().into(),
            since: when(&m.created_at),
            me: m.id == c.member.id,
        })
        .collect();
    let invitations = if admin {
        let names = creators(state, c).await?;
        members::list_invitations(&state.db, c.ctx.tenant.id)
            .await?
            .into_iter()
            .map(|i| {
                let state = if i.consumed_at.is_some() {
                    "accepted"
                } else if i.revoked_at.is_some() {
                    "revoked"
                } else if i.expires_at < chrono::Utc::now() {
                    "expired"
                } else {
                    "open"
                };
                InvitationRow {
                    id: i.id.to_string(),
                    email: i.email,
                    role: i.role.as_str().into(),
                    invited_by: names.get(&i.invited_by).cloned().unwrap_or(i.invited_by),
                    expires: when(&i.expires_at),
                    state: state.into(),
                    open: state == "open",
                }
            })
            .collect()
    } else {
        Vec::new()
    };
    let page = MembersPage {
        layout: c.layout("Members", "members"),
        slug: c.slug().to_owned(),
        admin,
        owner: c.member.role == Role::Owner,
        members: rows,
        invitations,
        error,
        email,
        notice,
    };
    render(status, &page)
}

async fn list_members(c: Console, State(state): State<AppState>) -> Result<Response, PageError> {
    page(&c, &state, StatusCode::OK, None, String::new(), None).await
}

#[derive(Deserialize)]
struct InviteForm {
    #[serde(default)]
    email: String,
    #[serde(default)]
    role: String,
}

async fn invite(c: Console, State(state): State<AppState>, Form(form): Form<InviteForm>) -> Result<Response, PageError> {
    c.require_admin()?;
    let result = async {
        let role = Role::parse(&form.role)?;
        if role == Role::Owner && c.member.role != Role::Owner {
            return Err(Error::Forbidden { code: "permission_denied", message: "only an owner may invite an owner".into() });
        }
        members::invite(&state.db, c.ctx.tenant.id, &c.ctx.audit, &form.email, role).await
    }
    .await;
    match result {
        Ok(i) => {
            let notice =
                format!("Invited {} as {}. They join when they next sign in with that verified email.", i.email, i.role.as_str());
            page(&c, &state, StatusCode::CREATED, None, String::new(), Some(notice)).await
        }
        // The owner-only rule is a refusal of this form's input, shown in place.
        Err(Error::Forbidden { code, message }) => {
            let error = FormError { code: code.into(), message };
            page(&c, &state, StatusCode::FORBIDDEN, Some(error), form.email, None).await
        }
        Err(e) => page(&c, &state, StatusCode::UNPROCESSABLE_ENTITY, Some(FormError::of(e)?), form.email, None).await,
    }
}

async fn revoke_invitation(
    c: Console,
    State(state): State<AppState>,
    Path((_, id)): Path<(String, String)>,
) -> Result<Response, PageError> {
    c.require_admin()?;
    match members::revoke_invitation(&state.db, c.ctx.tenant.id, &c.ctx.audit, parse_id(&id, "invitation")?).await {
        Ok(()) => Ok(Redirect::to(&format!("/console/t/{}/members", c.slug())).into_response()),
        Err(e) => page(&c, &state, StatusCode::CONFLICT, Some(FormError::of(e)?), String::new(), None).await,
    }
}

async fn confirm_remove(
    c: Console,
    State(state): State<AppState>,
    Path((_, id)): Path<(String, String)>,
) -> Result<Response, PageError> {
    c.require_admin()?;
    let id = parse_id(&id, "member")?;
    let m = members::list(&state.db, c.ctx.tenant.id)
        .await?
        .into_iter()
        .find(|m| m.id == id)
        .ok_or(Error::NotFound { what: "member" })?;
    let page = ConfirmPage {
        layout: c.layout("Remove member", "members"),
        question: format!(
            "Remove {} ({}) from this tenant?",
            who(m.email.as_deref(), m.display_name.as_deref(), &m.subject),
            m.role.as_str()
        ),
        consequence: "Their sessions end and the tokens they created stop working at once.".into(),
        action: format!("/console/t/{}/members/{}/remove", c.slug(), m.id),
        button: "Remove member".into(),
        cancel: format!("/console/t/{}/members", c.slug()),
    };
    render(StatusCode::OK, &page)
}

async fn remove(c: Console, State(state): State<AppState>, Path((_, id)): Path<(String, String)>) -> Result<Response, PageError> {
    c.require_admin()?;
    match members::remove(&state.db, c.ctx.tenant.id, &c.ctx.audit, parse_id(&id, "member")?).await {
        Ok(()) => Ok(Redirect::to(&format!("/console/t/{}/members", c.slug())).into_response()),
        Err(e) => page(&c, &state, StatusCode::CONFLICT, Some(FormError::of(e)?), String::new(), None).await,
    }
}

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/console/t/{tenant}/members", get(list_members))
        .route("/console/t/{tenant}/members/{id}/remove", get(confirm_remove).post(remove))
        .route("/console/t/{tenant}/invitations", post(invite))
        .route("/console/t/{tenant}/invitations/{id}/revoke", post(revoke_invitation))
}
