//! Workspace lifecycle actions on the workspace page: activate, suspend, resume, archive,
//! unarchive (a person with `credential_administration`, as the lifecycle API) and reap
//! (owners and admins, as the reap API). Each goes through a confirmation page; the
//! destructive ones (archive, reap) also ask for the workspace's slug to be typed. The
//! library's conditional update decides: a workspace someone else moved meanwhile is a 409
//! `invalid_transition`, shown in place, and nothing is written.

use askama::Template;
use axum::{
    Form, Router,
    extract::{Path, State},
    http::StatusCode,
    response::{IntoResponse, Redirect, Response},
    routing::get,
};
use serde::Deserialize;

use super::{Console, FormError, Layout, PageError, render};
use crate::{
    AppState,
    error::Error,
    members::Permission,
    workspaces::{self, lifecycle::Transition},
};

/// A lifecycle action as the workspace page offers it.
pub struct Action {
    pub verb: &'static str,
    pub label: &'static str,
    pub destructive: bool,
}

const ALL: [&str; 6] = ["activate", "suspend", "resume", "archive", "unarchive", "reap"];

fn transition(verb: &str) -> Option<Transition> {
    Some(match verb {
        "activate" => Transition::Activate,
        "suspend" => Transition::Suspend,
        "resume" => Transition::Resume,
        "archive" => Transition::Archive,
        "unarchive" => Transition::Unarchive,
        _ => return None,
    })
}

fn label(verb: &str) -> &'static str {
    match verb {
        "activate" => "Activate",
        "suspend" => "Suspend",
        "resume" => "Resume",
        "archive" => "Archive",
        "unarchive" => "Unarchive",
        _ => "Reap",
    }
}

fn destructive(verb: &str) -> bool {
    matches!(verb, "archive" | "reap")
}

/// May this person take `verb`? The API's rule for each.
fn allowed(c: &Console, verb: &str) -> Result<(), Error> {
    if verb == "reap" {
        c.ctx.require_admin().map(|_| ())
    } else {
        c.ctx.require_person(Permission::CredentialAdministration).map(|_| ())
    }
}

/// The actions a workspace in `status` offers this person (the page shows only these; the
/// handlers check again).
pub fn actions(c: &Console, status: &str) -> Vec<Action> {
    ALL.iter()
        .filter(|verb| match transition(verb) {
            Some(t) => t.from().contains(&status),
            None => status == "archived",
        })
        .filter(|verb| allowed(c, verb).is_ok())
        .map(|&verb| Action { verb, label: label(verb), destructive: destructive(verb) })
        .collect()
}

fn consequence(verb: &str) -> &'static str {
    match verb {
        "activate" => "The workspace starts serving its MCP endpoint.",
        "suspend" => "Its MCP endpoint refuses every call until it is resumed; nothing is deleted.",
        "resume" => "Its MCP endpoint serves calls again.",
        "archive" => "Its MCP endpoint stops serving; it can be unarchived, or reaped for good.",
        "unarchive" => "The workspace becomes active again and serves its MCP endpoint.",
        _ => {
            "Every row of the workspace is deleted for good and its slug is released; only a tombstone stays. This cannot be undone."
        }
    }
}

#[derive(Template)]
#[template(path = "console/lifecycle_confirm.html")]
struct ConfirmPage {
    layout: Layout,
    question: String,
    consequence: &'static str,
    action: String,
    button: &'static str,
    cancel: String,
    /// The slug to type, for destructive actions.
    typed: Option<String>,
    error: Option<FormError>,
}

fn confirm_page(c: &Console, ws: &str, verb: &'static str, error: Option<FormError>) -> ConfirmPage {
    ConfirmPage {
        layout: c.layout(&format!("{} workspace", label(verb)), "workspaces"),
        question: format!("{} the workspace {ws}?", label(verb)),
        consequence: consequence(verb),
        action: format!("/console/t/{}/workspaces/{ws}/lifecycle/{verb}", c.slug()),
        button: label(verb),
        cancel: format!("/console/t/{}/workspaces/{ws}", c.slug()),
        typed: destructive(verb).then(|| ws.to_owned()),
        error,
    }
}

fn verb_of(raw: &str) -> Result<&'static str, Error> {
    ALL.iter().copied().find(|v| *v == raw).ok_or(Error::NotFound { what: "action" })
}

async fn confirm(
    c: Console,
    State(state): State<AppState>,
    Path((_, ws, verb)): Path<(String, String, String)>,
) -> Result<Response, PageError> {
    let verb = verb_of(&verb)?;
    allowed(&c, verb)?;
    // A missing (or another tenant's) workspace is a 404 here too.
    workspaces::bound(&state.db, c.ctx.tenant.id, &ws).await?;
    render(StatusCode::OK, &confirm_page(&c, &ws, verb, None))
}

#[derive(Deserialize)]
struct Typed {
    #[serde(default)]
    slug: Option<String>,
}

async fn apply(
    c: Console,
    State(state): State<AppState>,
    Path((_, ws, verb)): Path<(String, String, String)>,
    Form(form): Form<Typed>,
) -> Result<Response, PageError> {
    let verb = verb_of(&verb)?;
    allowed(&c, verb)?;
    if destructive(verb) && form.slug.as_deref().map(str::trim) != Some(ws.as_str()) {
        let error = FormError::new("slug_mismatch", format!("type the workspace's slug, {ws}, to confirm"));
        return render(StatusCode::UNPROCESSABLE_ENTITY, &confirm_page(&c, &ws, verb, Some(error)));
    }
    let result = match transition(verb) {
        Some(t) => workspaces::lifecycle::transition(&state.db, c.ctx.tenant.id, &c.ctx.audit, &ws, t).await.map(|_| ()),
        None => {
            crate::reap::reap(&state.db, &state.config.copies.snapshot_dir, c.ctx.tenant.id, &c.ctx.audit, &ws).await.map(|_| ())
        }
    };
    match result {
        Ok(()) if verb == "reap" => Ok(Redirect::to(&format!("/console/t/{}/workspaces?reaped={ws}", c.slug())).into_response()),
        Ok(()) => Ok(Redirect::to(&format!("/console/t/{}/workspaces/{ws}?done={verb}", c.slug())).into_response()),
        Err(e @ (Error::Conflict { .. } | Error::Precondition { .. })) => {
            render(StatusCode::CONFLICT, &confirm_page(&c, &ws, verb, Some(FormError::of(e)?)))
        }
        Err(e) => Err(e.into()),
    }
}

pub fn router() -> Router<AppState> {
    Router::new().route("/console/t/{tenant}/workspaces/{workspace}/lifecycle/{verb}", get(confirm).post(apply))
}
