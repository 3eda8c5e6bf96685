//! Blueprints in the browser: the list with a create form; one blueprint's versions, each
//! admitted or rejected (with a reason) while pending, each admitted one bound to a workspace;
//! and a new version from a JSON document, started from the latest version or from a
//! workspace's current configuration.
//!
//! Everything goes through the API's functions, with their compare-and-set: a version added
//! meanwhile (`blueprint_changed`), a version decided meanwhile (`already_decided`) and a
//! workspace changed meanwhile (`binding_changed`) are refused and nothing is written. Every
//! page and form needs `credential_administration`, the permission that configures workspaces.

use askama::Template;
use axum::{
    Form, Router,
    extract::{Path, Query, State},
    http::StatusCode,
    response::{IntoResponse, Redirect, Response},
    routing::{get, post},
};
use serde::Deserialize;
use serde_json::Value;

use super::{Console, FormError, Layout, PageError, editor::field_issue, render, when, when_opt};
use crate::{
    AppState,
    blueprints::{self, Decision},
    error::Error,
    members::Permission,
    workspaces,
};

const EDITOR: Permission = Permission::CredentialAdministration;

pub struct BlueprintRow {
    pub slug: String,
    pub name: String,
    pub latest: String,
    pub created: String,
    pub created_by: String,
}

#[derive(Template)]
#[template(path = "console/blueprints.html")]
struct ListPage {
    layout: Layout,
    slug: String,
    rows: Vec<BlueprintRow>,
    error: Option<FormError>,
    draft_slug: String,
    draft_name: String,
}

#[derive(Deserialize, Default)]
struct NewBlueprint {
    #[serde(default)]
    slug: String,
    #[serde(default)]
    name: String,
}

async fn list_page(
    c: &Console,
    state: &AppState,
    status: StatusCode,
    refused: Option<(FormError, NewBlueprint)>,
) -> Result<Response, PageError> {
    let rows = blueprints::list(&state.db, c.ctx.tenant.id)
        .await?
        .into_iter()
        .map(|b| BlueprintRow {
            slug: b.slug,
            name: b.name,
            latest: b.latest_version.map(|v| v.to_string()).unwrap_or_else(|| "none yet".into()),
            created: when(&b.created_at),
            created_by: b.created_by,
        })
        .collect();
    let (error, draft) = match refused {
        Some((e, d)) => (Some(e), d),
        None => (None, NewBlueprint::default()),
    };
    let page = ListPage {
        layout: c.layout("Blueprints", "blueprints"),
        slug: c.slug().to_owned(),
        rows,
        error,
        draft_slug: draft.slug,
        draft_name: draft.name,
    };
    render(status, &page)
}

async fn list(c: Console, State(state): State<AppState>) -> Result<Response, PageError> {
    c.require(EDITOR)?;
    list_page(&c, &state, StatusCode::OK, None).await
}

async fn create(c: Console, State(state): State<AppState>, Form(form): Form<NewBlueprint>) -> Result<Response, PageError> {
    c.require(EDITOR)?;
    let name = Some(form.name.trim()).filter(|n| !n.is_empty());
    match blueprints::create(&state.db, c.ctx.tenant.id, &c.ctx.audit, form.slug.trim(), name).await {
        Ok(b) => Ok(Redirect::to(&format!("/console/t/{}/blueprints/{}?done=created", c.slug(), b.slug)).into_response()),
        Err(e) => list_page(&c, &state, StatusCode::UNPROCESSABLE_ENTITY, Some((FormError::of(e)?, form))).await,
    }
}

pub struct VersionRow {
    pub version: i32,
    pub admission: String,
    pub digest: String,
    pub created: String,
    pub created_by: String,
    pub decided: String,
    pub reason: String,
    pub document: String,
}

#[derive(Template)]
#[template(path = "console/blueprint.html")]
struct ShowPage {
    layout: Layout,
    slug: String,
    blueprint: String,
    name: String,
    versions: Vec<VersionRow>,
    /// The latest version number (0 for none): the new-version form's expected one.
    latest: i32,
    /// The new-version form's document.
    document: String,
    /// (slug, `slug@version`) of each workspace, for the bind and start-from choices.
    workspaces: Vec<(String, String)>,
    notice: Option<String>,
    error: Option<FormError>,
}

#[derive(Deserialize)]
struct ShowQuery {
    done: Option<String>,
    /// Start the new version from this workspace's current configuration.
    from: Option<String>,
}

/// What the page does after a form: its notice, the error beside the form, and the new-version
/// document (the refused one, or the one to start from).
#[derive(Default)]
struct Shown {
    notice: Option<String>,
    error: Option<FormError>,
    document: Option<String>,
}

async fn show_page(
    c: &Console,
    state: &AppState,
    slug: &str,
    status: StatusCode,
    shown: Shown,
    from: Option<&str>,
) -> Result<Response, PageError> {
    let b = blueprints::show(&state.db, c.ctx.tenant.id, slug).await?;
    let latest = b.blueprint.latest_version.unwrap_or(0);
    let all = workspaces::list(&state.db, c.ctx.tenant.id).await?;
    let workspaces = all.iter().map(|w| (w.slug.clone(), format!("{}@{}", w.slug, w.bound_version))).collect();
    let pretty = |v: &crate::workspaces::config::Document| serde_json::to_string_pretty(v).unwrap_or_default();
    let document = match (shown.document, from) {
        (Some(d), _) => d,
        (None, Some(ws)) => pretty(&workspaces::bound(&state.db, c.ctx.tenant.id, ws).await?.document),
        (None, None) => b
            .versions
            .iter()
            .max_by_key(|v| v.version)
            .map(|v| pretty(&v.document))
            .unwrap_or_else(|| "{\n  \"connectors\": {}\n}".into()),
    };
    let mut versions: Vec<VersionRow> = b
        .versions
        .iter()
        .map(|v| VersionRow {
            version: v.version,
            admission: v.admission.clone(),
            digest: v.digest.chars().take(12).collect(),
            created: when(&v.created_at),
            created_by: v.created_by.clone(),
            decided: match &v.decided_by {
                Some(by) => format!("{} by {by}", when_opt(&v.decided_at)),
                None => String::new(),
            },
            reason: v.reason.clone().unwrap_or_default(),
            document: pretty(&v.document),
        })
        .collect();
    versions.sort_by_key(|v| std::cmp::Reverse(v.version));
    let page = ShowPage {
        layout: c.layout(&format!("Blueprint {slug}"), "blueprints"),
        slug: c.slug().to_owned(),
        blueprint: slug.to_owned(),
        name: b.blueprint.name,
        versions,
        latest,
        document,
        workspaces,
        notice: shown.notice,
        error: shown.error,
    };
    render(status, &page)
}

async fn show(
    c: Console,
    State(state): State<AppState>,
    Path((_, slug)): Path<(String, String)>,
    Query(q): Query<ShowQuery>,
) -> Result<Response, PageError> {
    c.require(EDITOR)?;
    let notice = match q.done.as_deref() {
        Some("created") => Some("Blueprint created. Add its first version below.".to_owned()),
        Some("version") => Some("Version added, pending admission.".to_owned()),
        Some("admitted") => Some("Version admitted: it can be bound to workspaces.".to_owned()),
        Some("rejected") => Some("Version rejected.".to_owned()),
        Some("bound") => Some("Workspace bound: it runs the version's configuration now.".to_owned()),
        _ => None,
    };
    let from = q.from.filter(|f| crate::tenants::validate_slug(f).is_ok());
    show_page(&c, &state, &slug, StatusCode::OK, Shown { notice, ..Shown::default() }, from.as_deref()).await
}

fn status_of(error: &FormError) -> StatusCode {
    match error.code.as_str() {
        "blueprint_changed" | "binding_changed" => StatusCode::PRECONDITION_FAILED,
        "already_decided" | "version_not_admitted" | "workspace_not_bindable" | "reaping" | "vault_disabled" => {
            StatusCode::CONFLICT
        }
        _ => StatusCode::UNPROCESSABLE_ENTITY,
    }
}

/// A refused form: the page again with the error (and the document posted, if any).
async fn refused(c: &Console, state: &AppState, slug: &str, e: Error, document: Option<String>) -> Result<Response, PageError> {
    if matches!(e, Error::NotFound { .. }) {
        return Err(e.into());
    }
    let mut error = FormError::of(e)?;
    match error.code.as_str() {
        "blueprint_changed" => {
            error.message = "Another version of this blueprint was added since you opened this page; nothing was saved. Your document is kept below: check the versions above and add it again.".into()
        }
        "binding_changed" => {
            error.message = "That workspace's configuration changed since you opened this page; nothing was bound. The choices below show its current version: check it and bind again.".into()
        }
        _ => {}
    }
    let status = status_of(&error);
    show_page(c, state, slug, status, Shown { error: Some(error), document, ..Shown::default() }, None).await
}

#[derive(Deserialize)]
struct NewVersion {
    #[serde(default)]
    document: String,
    #[serde(default)]
    expected_latest: String,
}

async fn add_version(
    c: Console,
    State(state): State<AppState>,
    Path((_, slug)): Path<(String, String)>,
    Form(form): Form<NewVersion>,
) -> Result<Response, PageError> {
    c.require(EDITOR)?;
    let added = async {
        let value: Value = serde_json::from_str(&form.document).map_err(|e| field_issue("document", format!("not JSON: {e}")))?;
        let expected: i32 =
            form.expected_latest.trim().parse().map_err(|_| field_issue("expected_latest", "not a version number"))?;
        let document = blueprints::parse_document(value, state.config.vault_keys.as_ref())?;
        blueprints::add_version(&state.db, c.ctx.tenant.id, &c.ctx.audit, &slug, &document, Some(expected)).await
    }
    .await;
    match added {
        Ok(v) => Ok(Redirect::to(&format!("/console/t/{}/blueprints/{slug}?done=version#version-{}", c.slug(), v.version))
            .into_response()),
        Err(e) => refused(&c, &state, &slug, e, Some(form.document)).await,
    }
}

#[derive(Deserialize)]
struct DecideForm {
    #[serde(default)]
    reason: String,
}

async fn decide(
    c: Console,
    state: AppState,
    slug: String,
    version: i32,
    decision: Decision,
    form: DecideForm,
) -> Result<Response, PageError> {
    c.require(EDITOR)?;
    let reason = Some(form.reason.trim()).filter(|r| !r.is_empty());
    match blueprints::decide(&state.db, c.ctx.tenant.id, &c.ctx.audit, &slug, version, decision, reason).await {
        Ok(v) => {
            Ok(Redirect::to(&format!("/console/t/{}/blueprints/{slug}?done={}#version-{}", c.slug(), v.admission, v.version))
                .into_response())
        }
        Err(e) => refused(&c, &state, &slug, e, None).await,
    }
}

async fn admit(
    c: Console,
    State(state): State<AppState>,
    Path((_, slug, version)): Path<(String, String, i32)>,
    Form(form): Form<DecideForm>,
) -> Result<Response, PageError> {
    decide(c, state, slug, version, Decision::Admit, form).await
}

async fn reject(
    c: Console,
    State(state): State<AppState>,
    Path((_, slug, version)): Path<(String, String, i32)>,
    Form(form): Form<DecideForm>,
) -> Result<Response, PageError> {
    decide(c, state, slug, version, Decision::Reject, form).await
}

#[derive(Deserialize)]
struct BindForm {
    /// `workspace@bound version`, as the page listed it.
    #[serde(default)]
    target: String,
}

/// `workspace@version` as the workspace's slug and the bound version the page showed.
fn target(raw: &str) -> Result<(&str, i32), Error> {
    raw.rsplit_once('@')
        .and_then(|(ws, v)| Some((ws, v.parse().ok()?)))
        .filter(|(ws, _)| crate::tenants::validate_slug(ws).is_ok())
        .ok_or_else(|| Error::invalid("invalid_target", Some("target"), "choose a workspace to bind"))
}

async fn bind(
    c: Console,
    State(state): State<AppState>,
    Path((_, slug, version)): Path<(String, String, i32)>,
    Form(form): Form<BindForm>,
) -> Result<Response, PageError> {
    c.require(EDITOR)?;
    let bound = async {
        let (ws, expected) = target(&form.target)?;
        workspaces::lifecycle::bind(&state.db, c.ctx.tenant.id, &c.ctx.audit, ws, &slug, version, expected).await
    }
    .await;
    match bound {
        Ok(b) => Ok(Redirect::to(&format!("/console/t/{}/workspaces/{}?done=bound", c.slug(), b.workspace.slug)).into_response()),
        Err(e @ Error::NotFound { .. }) => Err(e.into()),
        Err(e) => refused(&c, &state, &slug, e, None).await,
    }
}

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/console/t/{tenant}/blueprints", get(list).post(create))
        .route("/console/t/{tenant}/blueprints/{blueprint}", get(show))
        .route("/console/t/{tenant}/blueprints/{blueprint}/versions", post(add_version))
        .route("/console/t/{tenant}/blueprints/{blueprint}/versions/{version}/admit", post(admit))
        .route("/console/t/{tenant}/blueprints/{blueprint}/versions/{version}/reject", post(reject))
        .route("/console/t/{tenant}/blueprints/{blueprint}/versions/{version}/bind", post(bind))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bind_target_is_a_slug_and_the_version_the_page_showed() {
        assert_eq!(target("main@3").unwrap(), ("main", 3));
        assert_eq!(target("a@b@4").map_err(|e| e.code()), Err("invalid_target"));
        for bad in ["", "main", "main@", "@3", "main@x", "Main Street@2"] {
            assert_eq!(target(bad).map_err(|e| e.code()), Err("invalid_target"), "{bad}");
        }
    }
}
