//! Members and invitations. Every member sees who else is a member; owners and admins invite,
//! revoke invitations and remove members (only an owner invites an owner).

use askama::Template;
use axum::{
    Form, Router,
    extract::{Path, Query, State},
    http::StatusCode,
    response::{IntoResponse, Redirect, Response},
    routing::{get, post},
};
use serde::Deserialize;

use super::{ConfirmPage, Console, FormError, Layout, PageError, creators, is_admin, render, when, who};
use crate::{
    AppState,
    error::Error,
    extract::parse_id,
    members::{self, Permission, Permissions, Role},
};

use std::collections::HashMap;

pub struct MemberRow {
    pub id: String,
    pub who: String,
    pub role: String,
    pub since: String,
    pub me: bool,
    /// What this member may do: the role's permissions after the tenant's overrides.
    pub permissions: String,
}

/// One role's permission in the overrides table.
pub struct OverrideCell {
    pub permission: &'static str,
    /// `default`, `allow` or `deny`.
    pub state: &'static str,
    /// What the role grants without an override.
    pub by_role: bool,
    pub effective: bool,
}

pub struct OverrideRow {
    pub role: &'static str,
    pub cells: Vec<OverrideCell>,
}

const ROLES: [Role; 4] = [Role::Owner, Role::Admin, Role::Operator, Role::Member];

/// The tenant's overrides as a role × permission table, and each role's effective set.
fn override_rows(overrides: &[(Role, Permission, bool)]) -> (Vec<OverrideRow>, HashMap<&'static str, Permissions>) {
    let mut effective = HashMap::new();
    let rows = ROLES
        .iter()
        .map(|&role| {
            let base = Permissions::of_role(role);
            let mut eff = base;
            let cells = Permission::ALL
                .iter()
                .map(|&p| {
                    let o = overrides.iter().find(|(r, q, _)| *r == role && *q == p).map(|(_, _, a)| *a);
                    if let Some(allowed) = o {
                        eff = eff.with(p, allowed);
                    }
                    OverrideCell {
                        permission: p.as_str(),
                        state: match o {
                            None => "default",
                            Some(true) => "allow",
                            Some(false) => "deny",
                        },
                        by_role: base.has(p),
                        effective: o.unwrap_or(base.has(p)),
                    }
                })
                .collect();
            effective.insert(role.as_str(), eff);
            OverrideRow { role: role.as_str(), cells }
        })
        .collect();
    (rows, effective)
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
    overrides: Vec<OverrideRow>,
    /// Only owners change overrides (an admin could otherwise narrow an owner).
    can_override: bool,
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
    let (overrides, effective) = override_rows(&members::overrides(&state.db, c.ctx.tenant.id).await?);
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
            permissions: effective
                .get(m.role.as_str())
                .map(|p| p.list().iter().map(|p| p.as_str()).collect::<Vec<_>>().join(", "))
                .unwrap_or_default(),
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
        overrides: if admin { overrides } else { Vec::new() },
        can_override: c.member.role == Role::Owner,
    };
    render(status, &page)
}

#[derive(Deserialize)]
struct Saved {
    saved: Option<String>,
}

async fn list_members(c: Console, State(state): State<AppState>, Query(q): Query<Saved>) -> Result<Response, PageError> {
    let notice = (q.saved.as_deref() == Some("overrides")).then(|| "What the roles grant is saved.".to_owned());
    page(&c, &state, StatusCode::OK, None, String::new(), notice).await
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
            let error = FormError::new(code, message);
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

/// Owners change what each role grants: the form carries `ROLE.PERMISSION` = `default`,
/// `allow` or `deny` for every cell; all of them are set in one decision, with an admin-log
/// row per changed cell (unchanged ones write nothing).
async fn set_overrides(
    c: Console,
    State(state): State<AppState>,
    Form(form): Form<Vec<(String, String)>>,
) -> Result<Response, PageError> {
    if c.member.role != Role::Owner {
        return Err(Error::Forbidden { code: "permission_denied", message: "only owners change what roles grant".into() }.into());
    }
    let mut changes = Vec::new();
    let parsed: Result<(), Error> = (|| {
        for (key, value) in form.iter().filter(|(k, _)| k != "csrf_token") {
            let (role, permission) = key
                .split_once('.')
                .ok_or_else(|| Error::invalid("invalid_override", Some("override"), "a field is ROLE.PERMISSION"))?;
            let allowed = match value.as_str() {
                "default" => None,
                "allow" => Some(true),
                "deny" => Some(false),
                _ => return Err(Error::invalid("invalid_override", Some("override"), "a value is default, allow or deny")),
            };
            changes.push((Role::parse(role)?, Permission::parse(permission)?, allowed));
        }
        Ok(())
    })();
    let result = match parsed {
        Ok(()) => members::set_overrides(&state.db, c.ctx.tenant.id, &c.ctx.audit, &changes).await,
        Err(e) => Err(e),
    };
    match result {
        Ok(()) => Ok(Redirect::to(&format!("/console/t/{}/members?saved=overrides", c.slug())).into_response()),
        Err(e) => page(&c, &state, StatusCode::UNPROCESSABLE_ENTITY, Some(FormError::of(e)?), String::new(), None).await,
    }
}

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/console/t/{tenant}/members", get(list_members))
        .route("/console/t/{tenant}/members/overrides", post(set_overrides))
        .route("/console/t/{tenant}/members/{id}/remove", get(confirm_remove).post(remove))
        .route("/console/t/{tenant}/invitations", post(invite))
        .route("/console/t/{tenant}/invitations/{id}/revoke", post(revoke_invitation))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overrides_show_per_role_and_change_what_the_role_grants() {
        let (rows, effective) = override_rows(&[
            (Role::Member, Permission::ActivityAccess, true),
            (Role::Operator, Permission::CredentialAdministration, false),
        ]);
        assert_eq!(rows.iter().map(|r| r.role).collect::<Vec<_>>(), ["owner", "admin", "operator", "member"]);
        let member = &rows[3].cells;
        let activity = member.iter().find(|c| c.permission == "activity_access").unwrap();
        assert_eq!((activity.state, activity.by_role, activity.effective), ("allow", false, true));
        assert!(effective["member"].has(Permission::ActivityAccess) && effective["member"].has(Permission::ConnectorAccess));
        assert!(!effective["operator"].has(Permission::CredentialAdministration));
        assert_eq!(effective["owner"], Permissions::of_role(Role::Owner), "no override: the role's own");
    }
}
