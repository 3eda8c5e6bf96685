//! Service credentials: create (the secret shown once), list, revoke with confirmation.
//! Owners and admins only.

use askama::Template;
use axum::{
    Form, Router,
    extract::{Path, State},
    http::StatusCode,
    response::{IntoResponse, Redirect, Response},
    routing::get,
};
use serde::Deserialize;

use super::{ConfirmPage, Console, FormError, Layout, Listed, PageError, SecretRow, render, secret_rows};
use crate::{AppState, error::Error, extract::parse_id, service_credentials};

#[derive(Template)]
#[template(path = "console/credentials.html")]
struct ListPage {
    layout: Layout,
    slug: String,
    rows: Vec<SecretRow>,
    error: Option<FormError>,
    name: String,
    /// Just created: (name, client id, secret). Shown on this response only.
    created: Option<(String, String, String)>,
}

async fn rows(c: &Console, state: &AppState) -> Result<Vec<SecretRow>, PageError> {
    let list = service_credentials::list(&state.db, c.ctx.tenant.id).await?;
    let listed = list
        .into_iter()
        .map(|s| Listed {
            id: s.id.to_string(),
            handle: s.client_id,
            name: s.name,
            created_by: s.created_by,
            created_at: s.created_at,
            last_used_at: s.last_used_at,
            revoked_at: s.revoked_at,
        })
        .collect();
    secret_rows(state, c, listed).await
}

async fn list_page(
    c: &Console,
    state: &AppState,
    status: StatusCode,
    error: Option<FormError>,
    name: String,
    created: Option<(String, String, String)>,
) -> Result<Response, PageError> {
    let page = ListPage {
        layout: c.layout("Service credentials", "credentials"),
        slug: c.slug().to_owned(),
        rows: rows(c, state).await?,
        error,
        name,
        created,
    };
    render(status, &page)
}

async fn list_credentials(c: Console, State(state): State<AppState>) -> Result<Response, PageError> {
    c.require_admin()?;
    list_page(&c, &state, StatusCode::OK, None, String::new(), None).await
}

#[derive(Deserialize)]
struct NameForm {
    #[serde(default)]
    name: String,
}

async fn create_credential(c: Console, State(state): State<AppState>, Form(form): Form<NameForm>) -> Result<Response, PageError> {
    c.require_admin()?;
    c.ctx.refuse_impersonation("mint service credentials")?;
    match service_credentials::create(&state.db, c.ctx.tenant.id, &c.ctx.audit, &form.name).await {
        Ok(created) => {
            let shown = Some((created.credential.name.clone(), created.credential.client_id.clone(), created.client_secret));
            list_page(&c, &state, StatusCode::CREATED, None, String::new(), shown).await
        }
        Err(e) => list_page(&c, &state, StatusCode::UNPROCESSABLE_ENTITY, Some(FormError::of(e)?), form.name, None).await,
    }
}

async fn confirm_revoke(
    c: Console,
    State(state): State<AppState>,
    Path((_, id)): Path<(String, String)>,
) -> Result<Response, PageError> {
    c.require_admin()?;
    let id = parse_id(&id, "service credential")?.to_string();
    let row = rows(&c, &state).await?.into_iter().find(|r| r.id == id).ok_or(Error::NotFound { what: "service credential" })?;
    let page = ConfirmPage {
        layout: c.layout("Revoke service credential", "credentials"),
        question: format!("Revoke the service credential “{}” ({})?", row.name, row.handle),
        consequence:
            "Every machine presenting it is refused from its next request, whatever token it carries. This cannot be undone."
                .into(),
        action: format!("/console/t/{}/service-credentials/{}/revoke", c.slug(), row.id),
        button: "Revoke service credential".into(),
        cancel: format!("/console/t/{}/service-credentials", c.slug()),
    };
    render(StatusCode::OK, &page)
}

async fn revoke_credential(
    c: Console,
    State(state): State<AppState>,
    Path((_, id)): Path<(String, String)>,
) -> Result<Response, PageError> {
    c.require_admin()?;
    service_credentials::revoke(&state.db, c.ctx.tenant.id, &c.ctx.audit, parse_id(&id, "service credential")?).await?;
    Ok(Redirect::to(&format!("/console/t/{}/service-credentials", c.slug())).into_response())
}

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/console/t/{tenant}/service-credentials", get(list_credentials).post(create_credential))
        .route("/console/t/{tenant}/service-credentials/{id}/revoke", get(confirm_revoke).post(revoke_credential))
}
