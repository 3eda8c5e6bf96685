//! Access tokens: create (the secret shown once), list, rename, revoke with confirmation.
//! People with `access_token_management` only; anyone else gets 403 on every route.

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
use crate::{AppState, error::Error, extract::parse_id, members::Permission, tokens};

#[derive(Template)]
#[template(path = "console/tokens.html")]
struct ListPage {
    layout: Layout,
    slug: String,
    rows: Vec<SecretRow>,
    error: Option<FormError>,
    name: String,
    /// The token just created: (name, secret). Shown on this response only.
    created: Option<(String, String)>,
}

#[derive(Template)]
#[template(path = "console/token.html")]
struct TokenPage {
    layout: Layout,
    slug: String,
    row: SecretRow,
    error: Option<FormError>,
    name: String,
}

async fn rows(c: &Console, state: &AppState) -> Result<Vec<SecretRow>, PageError> {
    let list = tokens::list(&state.db, c.ctx.tenant.id).await?;
    let listed = list
        .into_iter()
        .map(|t| Listed {
            id: t.id.to_string(),
            handle: t.prefix,
            name: t.name,
            created_by: t.created_by,
            created_at: t.created_at,
            last_used_at: t.last_used_at,
            revoked_at: t.revoked_at,
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
    created: Option<(String, String)>,
) -> Result<Response, PageError> {
    let page = ListPage {
        layout: c.layout("Access tokens", "tokens"),
        slug: c.slug().to_owned(),
        rows: rows(c, state).await?,
        error,
        name,
        created,
    };
    render(status, &page)
}

async fn list_tokens(c: Console, State(state): State<AppState>) -> Result<Response, PageError> {
    c.require(Permission::AccessTokenManagement)?;
    list_page(&c, &state, StatusCode::OK, None, String::new(), None).await
}

#[derive(Deserialize)]
struct NameForm {
    #[serde(default)]
    name: String,
}

/// The secret is in this response and nowhere else; the page swaps its URL for the list's
/// (console.js) so a reload shows the list without it.
async fn create_token(c: Console, State(state): State<AppState>, Form(form): Form<NameForm>) -> Result<Response, PageError> {
    c.require(Permission::AccessTokenManagement)?;
    let principal = c.ctx.principal();
    c.ctx.refuse_impersonation("mint access tokens")?;
    match tokens::create(&state.db, c.ctx.tenant.id, &c.ctx.audit, &form.name, principal.as_ref(), state.config.token_cap).await {
        Ok(created) => {
            let shown = Some((created.token.name.clone(), created.secret));
            list_page(&c, &state, StatusCode::CREATED, None, String::new(), shown).await
        }
        Err(e) => list_page(&c, &state, StatusCode::UNPROCESSABLE_ENTITY, Some(FormError::of(e)?), form.name, None).await,
    }
}

async fn one(c: &Console, state: &AppState, id: &str) -> Result<SecretRow, PageError> {
    let id = parse_id(id, "token")?.to_string();
    Ok(rows(c, state).await?.into_iter().find(|r| r.id == id).ok_or(Error::NotFound { what: "token" })?)
}

async fn show_token(
    c: Console,
    State(state): State<AppState>,
    Path((_, id)): Path<(String, String)>,
) -> Result<Response, PageError> {
    c.require(Permission::AccessTokenManagement)?;
    let row = one(&c, &state, &id).await?;
    let page = TokenPage {
        layout: c.layout(&format!("Token {}", row.name), "tokens"),
        slug: c.slug().to_owned(),
        name: row.name.clone(),
        row,
        error: None,
    };
    render(StatusCode::OK, &page)
}

async fn rename_token(
    c: Console,
    State(state): State<AppState>,
    Path((_, id)): Path<(String, String)>,
    Form(form): Form<NameForm>,
) -> Result<Response, PageError> {
    c.require(Permission::AccessTokenManagement)?;
    let uuid = parse_id(&id, "token")?;
    match tokens::rename(&state.db, c.ctx.tenant.id, &c.ctx.audit, uuid, &form.name).await {
        Ok(_) => Ok(Redirect::to(&format!("/console/t/{}/tokens", c.slug())).into_response()),
        Err(e) => {
            let error = Some(FormError::of(e)?);
            let row = one(&c, &state, &id).await?;
            let page = TokenPage {
                layout: c.layout(&format!("Token {}", row.name), "tokens"),
                slug: c.slug().to_owned(),
                row,
                error,
                name: form.name,
            };
            render(StatusCode::UNPROCESSABLE_ENTITY, &page)
        }
    }
}

async fn confirm_revoke(
    c: Console,
    State(state): State<AppState>,
    Path((_, id)): Path<(String, String)>,
) -> Result<Response, PageError> {
    c.require(Permission::AccessTokenManagement)?;
    let row = one(&c, &state, &id).await?;
    let page = ConfirmPage {
        layout: c.layout("Revoke access token", "tokens"),
        question: format!("Revoke the token “{}” ({}…)?", row.name, row.handle),
        consequence: "Every client using it is refused from its next request, on every replica. This cannot be undone.".into(),
        action: format!("/console/t/{}/tokens/{}/revoke", c.slug(), row.id),
        button: "Revoke token".into(),
        cancel: format!("/console/t/{}/tokens", c.slug()),
    };
    render(StatusCode::OK, &page)
}

async fn revoke_token(
    c: Console,
    State(state): State<AppState>,
    Path((_, id)): Path<(String, String)>,
) -> Result<Response, PageError> {
    c.require(Permission::AccessTokenManagement)?;
    tokens::revoke(&state.db, c.ctx.tenant.id, &c.ctx.audit, parse_id(&id, "token")?).await?;
    Ok(Redirect::to(&format!("/console/t/{}/tokens", c.slug())).into_response())
}

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/console/t/{tenant}/tokens", get(list_tokens).post(create_token))
        .route("/console/t/{tenant}/tokens/{id}", get(show_token).post(rename_token))
        .route("/console/t/{tenant}/tokens/{id}/revoke", get(confirm_revoke).post(revoke_token))
}
