//! A workspace's pinned tool definitions in the browser: every pin with its state, and for a
//! quarantined one the changes field by field (pinned → pending) with an "Approve" button that
//! sends the pending digest the page showed. The approval is the API's (owners and admins,
//! compare-and-set on the digest): a definition that changed again since the page was opened
//! is refused with `pin_changed` and nothing is approved.

use askama::Template;
use axum::{
    Form, Router,
    extract::{Path, Query, State},
    http::StatusCode,
    response::{IntoResponse, Redirect, Response},
    routing::{get, post},
};
use serde::Deserialize;

use super::{Console, FormError, Layout, PageError, render, when, when_opt};
use crate::{AppState, gateway::pins, members::Permission};

pub struct Change {
    pub field: String,
    pub pinned: String,
    pub pending: String,
}

pub struct PinRow {
    pub connector: String,
    pub tool: String,
    pub status: &'static str,
    pub digest: String,
    pub pending_digest: String,
    pub changes: Vec<Change>,
    pub pinned: String,
    pub approved: String,
}

#[derive(Template)]
#[template(path = "console/pins.html")]
struct PinsPage {
    layout: Layout,
    slug: String,
    workspace: String,
    rows: Vec<PinRow>,
    /// Owners and admins approve.
    approver: bool,
    notice: Option<String>,
    error: Option<FormError>,
}

/// A side of a change as text (absent: "none").
fn side(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::Null => "none".into(),
        serde_json::Value::String(s) => s.clone(),
        other => serde_json::to_string_pretty(other).unwrap_or_default(),
    }
}

fn short(digest: &Option<String>) -> String {
    digest.as_deref().map(|d| d.chars().take(12).collect()).unwrap_or_default()
}

fn approver(c: &Console) -> bool {
    c.ctx.permissions.has(Permission::CredentialAdministration)
        && matches!(c.member.role, crate::members::Role::Owner | crate::members::Role::Admin)
}

async fn page(
    c: &Console,
    state: &AppState,
    ws: &str,
    status: StatusCode,
    notice: Option<String>,
    error: Option<FormError>,
) -> Result<Response, PageError> {
    let rows = pins::list(&state.db, c.ctx.tenant.id, ws, false)
        .await?
        .into_iter()
        .map(|p| PinRow {
            changes: p
                .changes
                .iter()
                .map(|ch| Change {
                    field: ch["field"].as_str().unwrap_or_default().to_owned(),
                    pinned: side(&ch["pinned"]),
                    pending: side(&ch["pending"]),
                })
                .collect(),
            digest: short(&p.digest),
            pending_digest: p.pending_digest.clone().unwrap_or_default(),
            pinned: when(&p.pinned_at),
            approved: match &p.approved_by {
                Some(by) => format!("{} by {by}", when_opt(&p.approved_at)),
                None => String::new(),
            },
            connector: p.connector,
            tool: p.tool,
            status: p.status,
        })
        .collect();
    let page = PinsPage {
        layout: c.layout(&format!("Tool definitions of {ws}"), "workspaces"),
        slug: c.slug().to_owned(),
        workspace: ws.to_owned(),
        rows,
        approver: approver(c),
        notice,
        error,
    };
    render(status, &page)
}

#[derive(Deserialize)]
struct Approved {
    approved: Option<String>,
}

async fn show(
    c: Console,
    State(state): State<AppState>,
    Path((_, ws)): Path<(String, String)>,
    Query(q): Query<Approved>,
) -> Result<Response, PageError> {
    c.require(Permission::ConnectorAccess)?;
    let notice = q
        .approved
        .filter(|a| a.len() <= 200 && !a.chars().any(char::is_control))
        .map(|a| format!("The new definition of {a} is approved: agents see it from their next request."));
    page(&c, &state, &ws, StatusCode::OK, notice, None).await
}

#[derive(Deserialize)]
struct Approve {
    #[serde(default)]
    digest: String,
}

async fn approve(
    c: Console,
    State(state): State<AppState>,
    Path((_, ws, connector, tool)): Path<(String, String, String, String)>,
    Form(form): Form<Approve>,
) -> Result<Response, PageError> {
    c.require(Permission::CredentialAdministration)?;
    if !approver(&c) {
        return Err(crate::error::Error::Forbidden {
            code: "permission_denied",
            message: "only owners and admins approve tool changes".into(),
        }
        .into());
    }
    match pins::approve(&state.db, c.ctx.tenant.id, &c.ctx.audit, &ws, &connector, &tool, form.digest.trim()).await {
        Ok(_) => {
            let address = url::form_urlencoded::Serializer::new(String::new())
                .append_pair("approved", &format!("{connector}.{tool}"))
                .finish();
            Ok(Redirect::to(&format!("/console/t/{}/workspaces/{ws}/tool-pins?{address}", c.slug())).into_response())
        }
        Err(e @ crate::error::Error::NotFound { .. }) => Err(e.into()),
        Err(e) => {
            let mut error = FormError::of(e)?;
            if error.code == "pin_changed" {
                error.message = format!(
                    "The definition of {connector}.{tool} changed again since you opened this page; nothing was approved. Review the changes shown now and approve again."
                );
            }
            let status = if error.code == "pin_changed" { StatusCode::PRECONDITION_FAILED } else { StatusCode::CONFLICT };
            page(&c, &state, &ws, status, None, Some(error)).await
        }
    }
}

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/console/t/{tenant}/workspaces/{workspace}/tool-pins", get(show))
        .route("/console/t/{tenant}/workspaces/{workspace}/tool-pins/{connector}/{tool}/approve", post(approve))
}
