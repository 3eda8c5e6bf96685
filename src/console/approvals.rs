//! Approvals: the calls a workspace's approval policy held back, listed for the members who
//! may decide them (`approval_decision`), each with its page where it is approved or denied
//! with a reason (the same rules and admin-log rows as the API's decisions).

use askama::Template;
use axum::{
    Form, Router,
    extract::{Path, State},
    http::StatusCode,
    response::{IntoResponse, Redirect, Response},
    routing::{get, post},
};
use serde::Deserialize;

use super::{Console, FormError, Layout, PageError, render, when, when_opt};
use crate::{AppState, approvals, extract::parse_id, members::Permission};

/// One approval as the pages show it.
struct Row {
    id: String,
    workspace: String,
    tool: String,
    caller: String,
    digest: String,
    policy_version: i32,
    state: String,
    requested: String,
    expires: String,
    decided: String,
    decided_by: String,
    reason: String,
}

impl From<approvals::Approval> for Row {
    fn from(a: approvals::Approval) -> Row {
        Row {
            id: a.id.to_string(),
            workspace: a.workspace,
            tool: format!("{}.{}", a.connector, a.tool),
            caller: match a.member_id {
                Some(m) => format!("{} {} (member {m})", a.actor_kind, a.actor_id),
                None => format!("{} {}", a.actor_kind, a.actor_id),
            },
            digest: a.args_digest,
            policy_version: a.policy_version,
            state: a.state,
            requested: when(&a.requested_at),
            expires: when(&a.expires_at),
            decided: when_opt(&a.decided_at),
            decided_by: a.decided_by.unwrap_or_default(),
            reason: a.reason.unwrap_or_default(),
        }
    }
}

#[derive(Template)]
#[template(path = "console/approvals.html")]
struct ListPage {
    layout: Layout,
    slug: String,
    rows: Vec<Row>,
}

#[derive(Template)]
#[template(path = "console/approval.html")]
struct ApprovalPage {
    layout: Layout,
    slug: String,
    row: Row,
    error: Option<FormError>,
    reason: String,
}

async fn list_approvals(c: Console, State(state): State<AppState>) -> Result<Response, PageError> {
    c.require(Permission::ApprovalDecision)?;
    let rows = approvals::list(&state.db, c.ctx.tenant.id, true).await?.into_iter().map(Row::from).collect();
    render(StatusCode::OK, &ListPage { layout: c.layout("Approvals", "approvals"), slug: c.slug().to_owned(), rows })
}

async fn page(
    c: &Console,
    state: &AppState,
    id: &str,
    status: StatusCode,
    error: Option<FormError>,
    reason: String,
) -> Result<Response, PageError> {
    let approval = approvals::get(&state.db, c.ctx.tenant.id, parse_id(id, "approval")?).await?;
    let row = Row::from(approval);
    let page = ApprovalPage {
        layout: c.layout(&format!("Approval of {}", row.tool), "approvals"),
        slug: c.slug().to_owned(),
        row,
        error,
        reason,
    };
    render(status, &page)
}

async fn show_approval(
    c: Console,
    State(state): State<AppState>,
    Path((_, id)): Path<(String, String)>,
) -> Result<Response, PageError> {
    c.require(Permission::ApprovalDecision)?;
    page(&c, &state, &id, StatusCode::OK, None, String::new()).await
}

#[derive(Deserialize)]
struct DecisionForm {
    #[serde(default)]
    reason: String,
}

async fn decide(c: Console, state: AppState, id: String, approve: bool, form: DecisionForm) -> Result<Response, PageError> {
    c.require(Permission::ApprovalDecision)?;
    c.ctx.refuse_impersonation("decide approvals")?;
    let parsed = parse_id(&id, "approval")?;
    match approvals::decide(&state.db, c.ctx.tenant.id, &c.ctx.audit, parsed, approve, Some(&form.reason)).await {
        Ok(_) => Ok(Redirect::to(&format!("/console/t/{}/approvals/{id}", c.slug())).into_response()),
        Err(e) => {
            let status = e.status();
            page(&c, &state, &id, status, Some(FormError::of(e)?), form.reason).await
        }
    }
}

async fn approve_approval(
    c: Console,
    State(state): State<AppState>,
    Path((_, id)): Path<(String, String)>,
    Form(form): Form<DecisionForm>,
) -> Result<Response, PageError> {
    decide(c, state, id, true, form).await
}

async fn deny_approval(
    c: Console,
    State(state): State<AppState>,
    Path((_, id)): Path<(String, String)>,
    Form(form): Form<DecisionForm>,
) -> Result<Response, PageError> {
    decide(c, state, id, false, form).await
}

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/console/t/{tenant}/approvals", get(list_approvals))
        .route("/console/t/{tenant}/approvals/{id}", get(show_approval))
        .route("/console/t/{tenant}/approvals/{id}/approve", post(approve_approval))
        .route("/console/t/{tenant}/approvals/{id}/deny", post(deny_approval))
}
