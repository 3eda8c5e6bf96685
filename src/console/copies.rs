//! A workspace's forks and snapshots in the browser: fork it into a preview workspace that
//! expires; extend, pin or unpin a fork; export a snapshot file; restore a snapshot (this
//! workspace's recent exports are listed from the admin log) into a new workspace.
//!
//! Each form calls the API's function, whose copy lease and erasure epoch decide: a refusal
//! is shown beside the form with its stable code, and nothing is written. Every page and
//! form needs `credential_administration` (a fork and a snapshot hold credentials), and a
//! snapshot export is refused under impersonation, as in the API.

use askama::Template;
use axum::{
    Form, Router,
    extract::{Path, Query, State},
    http::StatusCode,
    response::{IntoResponse, Redirect, Response},
    routing::{get, post},
};
use serde::Deserialize;

use super::{Console, FormError, Layout, PageError, render, when};
use crate::{AppState, db::Scope, error::Error, forks, members::Permission, snapshots};

const EDITOR: Permission = Permission::CredentialAdministration;

/// Exports listed on the page, newest first.
const EXPORTS_SHOWN: i64 = 20;

pub struct ForkState {
    pub fork_of: String,
    pub expires: String,
    pub pinned: bool,
}

pub struct Export {
    pub file: String,
    pub at: String,
}

#[derive(Template)]
#[template(path = "console/copies.html")]
struct CopiesPage {
    layout: Layout,
    slug: String,
    workspace: String,
    fork: Option<ForkState>,
    exports: Vec<Export>,
    notice: Option<String>,
    error: Option<FormError>,
    /// Which form the error belongs to (`fork`, `extend`, `snapshot`, `restore`).
    failed: String,
    max_hours: i64,
}

async fn exports(state: &AppState, c: &Console, ws: &str) -> Result<Vec<Export>, Error> {
    let tenant = c.ctx.tenant.id;
    let filter = crate::admin_log::Filter {
        actor: None,
        action_prefix: Some("snapshot.export".into()),
        target: Some(format!("workspace:{ws}")),
        since: None,
        until: None,
    };
    let records = state
        .db
        .single_decision(Scope::Tenant(tenant), move |conn, _| {
            let filter = filter.clone();
            Box::pin(async move { crate::admin_log::list_filtered(conn, Some(tenant), &filter, None, EXPORTS_SHOWN).await })
        })
        .await?;
    Ok(records
        .into_iter()
        .filter_map(|r| {
            let file = r.after.as_ref()?.get("file")?.as_str()?.to_owned();
            Some(Export { file, at: when(&r.at) })
        })
        .collect())
}

async fn page(
    c: &Console,
    state: &AppState,
    ws: &str,
    status: StatusCode,
    notice: Option<String>,
    refused: Option<(&str, FormError)>,
) -> Result<Response, PageError> {
    // The workspace must exist in this tenant (another tenant's answers 404).
    crate::workspaces::bound(&state.db, c.ctx.tenant.id, ws).await?;
    let fork = forks::view(&state.db, c.ctx.tenant.id, ws).await?.map(|f| ForkState {
        fork_of: f.fork_of.unwrap_or_else(|| "a workspace since removed".into()),
        expires: f.expires_at.as_ref().map(when).unwrap_or_default(),
        pinned: f.pinned,
    });
    let (failed, error) = match refused {
        Some((form, e)) => (form.to_owned(), Some(e)),
        None => (String::new(), None),
    };
    let page = CopiesPage {
        layout: c.layout(&format!("Forks and snapshots of {ws}"), "workspaces"),
        slug: c.slug().to_owned(),
        workspace: ws.to_owned(),
        fork,
        exports: exports(state, c, ws).await?,
        notice,
        error,
        failed,
        max_hours: forks::MAX_TTL_HOURS,
    };
    render(status, &page)
}

#[derive(Deserialize)]
struct Done {
    done: Option<String>,
    file: Option<String>,
}

async fn show(
    c: Console,
    State(state): State<AppState>,
    Path((_, ws)): Path<(String, String)>,
    Query(q): Query<Done>,
) -> Result<Response, PageError> {
    c.require(EDITOR)?;
    let notice = match q.done.as_deref() {
        Some("forked") => Some("Fork created: a preview workspace with copies of the configuration, catalogs and shared credentials, which expires unless pinned.".to_owned()),
        Some("extended") => Some("The fork's life is extended.".to_owned()),
        Some("pinned") => Some("The fork is pinned: it no longer expires.".to_owned()),
        Some("unpinned") => Some("The fork is unpinned: it expires again.".to_owned()),
        Some("exported") => q
            .file
            .filter(|f| f.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b)))
            .map(|f| format!("Snapshot exported to {f}. Restore it below into a new workspace.")),
        _ => None,
    };
    page(&c, &state, &ws, StatusCode::OK, notice, None).await
}

/// A refused form: the page with the error beside that form (a missing workspace or a
/// forbidden action is the error page).
async fn refused(c: &Console, state: &AppState, ws: &str, form: &str, e: Error) -> Result<Response, PageError> {
    if matches!(e, Error::NotFound { .. }) {
        return Err(e.into());
    }
    let error = FormError::of(e)?;
    let status = match error.code.as_str() {
        "copy_lease_lost" | "erasure_epoch_changed" | "workspace_reaping" => StatusCode::PRECONDITION_FAILED,
        c if c.starts_with("invalid_") => StatusCode::UNPROCESSABLE_ENTITY,
        _ => StatusCode::CONFLICT,
    };
    page(c, state, ws, status, None, Some((form, error))).await
}

fn hours(raw: &str, field: &'static str) -> Result<Option<i64>, Error> {
    match raw.trim() {
        "" => Ok(None),
        v => v.parse().map(Some).map_err(|_| Error::invalid("invalid_hours", Some(field), "hours are a whole number")),
    }
}

#[derive(Deserialize)]
struct ForkForm {
    #[serde(default)]
    slug: String,
    #[serde(default)]
    ttl_hours: String,
}

async fn fork(
    c: Console,
    State(state): State<AppState>,
    Path((_, ws)): Path<(String, String)>,
    Form(form): Form<ForkForm>,
) -> Result<Response, PageError> {
    c.require(EDITOR)?;
    let forked = async {
        let ttl = hours(&form.ttl_hours, "ttl_hours")?;
        forks::fork(&state.db, &state.config, c.ctx.tenant.id, &c.ctx.audit, &ws, form.slug.trim(), ttl).await
    }
    .await;
    match forked {
        Ok(f) => {
            Ok(Redirect::to(&format!("/console/t/{}/workspaces/{}/copies?done=forked", c.slug(), f.workspace.slug))
                .into_response())
        }
        Err(e) => refused(&c, &state, &ws, "fork", e).await,
    }
}

#[derive(Deserialize)]
struct ExtendForm {
    #[serde(default)]
    hours: String,
}

async fn extend(
    c: Console,
    State(state): State<AppState>,
    Path((_, ws)): Path<(String, String)>,
    Form(form): Form<ExtendForm>,
) -> Result<Response, PageError> {
    c.require(EDITOR)?;
    let extended = async {
        let hours = hours(&form.hours, "hours")?
            .ok_or_else(|| Error::invalid("invalid_hours", Some("hours"), "say by how many hours"))?;
        forks::extend(&state.db, c.ctx.tenant.id, &c.ctx.audit, &ws, hours).await
    }
    .await;
    match extended {
        Ok(_) => Ok(Redirect::to(&format!("/console/t/{}/workspaces/{ws}/copies?done=extended", c.slug())).into_response()),
        Err(e) => refused(&c, &state, &ws, "extend", e).await,
    }
}

async fn pin(c: &Console, state: &AppState, ws: &str, pinned: bool) -> Result<Response, PageError> {
    c.require(EDITOR)?;
    match forks::pin(&state.db, c.ctx.tenant.id, &c.ctx.audit, ws, pinned).await {
        Ok(e) => Ok(Redirect::to(&format!(
            "/console/t/{}/workspaces/{ws}/copies?done={}",
            c.slug(),
            if e.pinned { "pinned" } else { "unpinned" }
        ))
        .into_response()),
        Err(e) => refused(c, state, ws, "extend", e).await,
    }
}

async fn pin_fork(
    c: Console,
    State(state): State<AppState>,
    Path((_, ws)): Path<(String, String)>,
) -> Result<Response, PageError> {
    pin(&c, &state, &ws, true).await
}

async fn unpin_fork(
    c: Console,
    State(state): State<AppState>,
    Path((_, ws)): Path<(String, String)>,
) -> Result<Response, PageError> {
    pin(&c, &state, &ws, false).await
}

async fn export(c: Console, State(state): State<AppState>, Path((_, ws)): Path<(String, String)>) -> Result<Response, PageError> {
    c.require(EDITOR)?;
    c.ctx.refuse_impersonation("export sealed credentials in a snapshot")?;
    match snapshots::export(&state.db, &state.config, c.ctx.tenant.id, &c.ctx.audit, &ws).await {
        Ok(e) => Ok(Redirect::to(&format!("/console/t/{}/workspaces/{ws}/copies?done=exported&file={}", c.slug(), e.file))
            .into_response()),
        Err(e) => refused(&c, &state, &ws, "snapshot", e).await,
    }
}

#[derive(Deserialize)]
struct RestoreForm {
    #[serde(default)]
    file: String,
    #[serde(default)]
    slug: String,
}

async fn restore(
    c: Console,
    State(state): State<AppState>,
    Path((_, ws)): Path<(String, String)>,
    Form(form): Form<RestoreForm>,
) -> Result<Response, PageError> {
    c.require(EDITOR)?;
    match snapshots::restore(&state.db, &state.config, c.ctx.tenant.id, &c.ctx.audit, form.file.trim(), form.slug.trim()).await {
        Ok(r) => Ok(Redirect::to(&format!("/console/t/{}/workspaces/{}?done=restored", c.slug(), r.workspace)).into_response()),
        // A file that is not there (or not this tenant's) is shown beside the form.
        Err(Error::NotFound { what }) => {
            let error = FormError::new("not_found", format!("no such {what}: check the file name"));
            page(&c, &state, &ws, StatusCode::NOT_FOUND, None, Some(("restore", error))).await
        }
        Err(e) => refused(&c, &state, &ws, "restore", e).await,
    }
}

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/console/t/{tenant}/workspaces/{workspace}/copies", get(show))
        .route("/console/t/{tenant}/workspaces/{workspace}/copies/fork", post(fork))
        .route("/console/t/{tenant}/workspaces/{workspace}/copies/extend", post(extend))
        .route("/console/t/{tenant}/workspaces/{workspace}/copies/pin", post(pin_fork))
        .route("/console/t/{tenant}/workspaces/{workspace}/copies/unpin", post(unpin_fork))
        .route("/console/t/{tenant}/workspaces/{workspace}/copies/snapshot", post(export))
        .route("/console/t/{tenant}/workspaces/{workspace}/copies/restore", post(restore))
}
