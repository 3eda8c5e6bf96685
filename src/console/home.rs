//! `/console`: the tenants a person belongs to, and the tenant switcher.

use askama::Template;
use axum::{
    Router,
    extract::{Path, Query, State},
    http::StatusCode,
    response::{IntoResponse, Redirect, Response},
    routing::get,
};
use serde::Deserialize;

use super::{Console, Layout, PageError, render, who};
use crate::{AppState, auth::SignedIn, error::Error};

#[derive(Template)]
#[template(path = "console/home.html")]
struct HomePage {
    layout: Layout,
    email: String,
}

async fn home(State(state): State<AppState>, signed_in: Result<SignedIn, Error>) -> Result<Response, PageError> {
    let session = match signed_in {
        Ok(SignedIn(session)) => session,
        Err(Error::Unauthorized) => return Ok(Redirect::to("/login?next=%2Fconsole").into_response()),
        Err(e) => return Err(e.into()),
    };
    let tenants: Vec<(String, String)> = crate::members::memberships(&state.db, &session.principal)
        .await?
        .into_iter()
        .filter(|(tenant, ..)| session.may_enter(*tenant))
        .map(|(_, slug, name, _)| (slug, name))
        .collect();
    // With one tenant there is nothing to choose.
    if let [(slug, _)] = tenants.as_slice() {
        return Ok(Redirect::to(&format!("/console/t/{slug}/workspaces")).into_response());
    }
    let layout = Layout {
        title: "Your tenants".into(),
        current: "",
        dev_banner: state.config.dev_sign_in(),
        csrf: session.csrf_token.clone(),
        who: who(session.email.as_deref(), session.display_name.as_deref(), &session.principal.subject),
        tenant: None,
        role: String::new(),
        tenants,
        nav: Vec::new(),
        impersonations: Vec::new(),
        can_revoke: false,
    };
    let email = session.email.clone().unwrap_or_else(|| "your email address".into());
    render(StatusCode::OK, &HomePage { layout, email })
}

#[derive(Deserialize)]
struct Switch {
    tenant: String,
}

/// The switcher's target; the tenant page itself checks membership (404 otherwise).
async fn switch(Query(q): Query<Switch>) -> Result<Response, PageError> {
    crate::tenants::validate_slug(&q.tenant).map_err(|_| Error::NotFound { what: "tenant" })?;
    Ok(Redirect::to(&format!("/console/t/{}/workspaces", q.tenant)).into_response())
}

async fn tenant_home(c: Console, Path(_): Path<String>) -> Response {
    Redirect::to(&format!("/console/t/{}/workspaces", c.slug())).into_response()
}

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/console", get(home))
        .route("/console/switch", get(switch))
        .route("/console/t/{tenant}", get(tenant_home))
}
