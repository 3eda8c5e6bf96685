//! The tenant's own sign-in (owners and admins): its OpenID connections, added and removed
//! here, and whether the tenant requires them.

use std::collections::BTreeMap;

use askama::Template;
use axum::{
    Form, Router,
    extract::{Path, State},
    http::StatusCode,
    response::{IntoResponse, Redirect, Response},
    routing::{get, post},
};
use serde::Deserialize;

use super::{ConfirmPage, Console, FormError, Layout, PageError, render};
use crate::{
    AppState,
    auth::Actor,
    error::Error,
    extract::parse_id,
    sso::{self, ConnectionInput},
};

pub struct ConnectionRow {
    pub id: String,
    pub name: String,
    pub issuer: String,
    pub client_id: String,
    pub auth_method: &'static str,
    pub domains: String,
    pub mapping: String,
    pub default_role: &'static str,
    pub jit: &'static str,
}

/// What the add form held (kept on a refusal; never the secret).
#[derive(Default, Deserialize)]
pub struct AddForm {
    #[serde(default)]
    name: String,
    #[serde(default)]
    issuer: String,
    #[serde(default)]
    client_id: String,
    #[serde(default)]
    client_secret: String,
    #[serde(default)]
    domains: String,
    #[serde(default)]
    groups_claim: String,
    /// One `value=role` per line.
    #[serde(default)]
    role_mapping: String,
    #[serde(default)]
    default_role: String,
    #[serde(default)]
    jit: String,
}

#[derive(Template)]
#[template(path = "console/sso.html")]
struct SsoPage {
    layout: Layout,
    slug: String,
    connections: Vec<ConnectionRow>,
    required: bool,
    enforced: bool,
    /// The viewer's own session signed in through this tenant's connection.
    via_sso: bool,
    callback: String,
    form: AddForm,
    error: Option<FormError>,
    notice: Option<String>,
}

async fn page(
    c: &Console,
    state: &AppState,
    status: StatusCode,
    form: AddForm,
    error: Option<FormError>,
    notice: Option<String>,
) -> Result<Response, PageError> {
    let settings = sso::settings(&state.db, c.ctx.tenant.id).await?;
    let connections = settings
        .connections
        .into_iter()
        .map(|k| ConnectionRow {
            id: k.id.to_string(),
            name: k.name,
            issuer: k.issuer,
            client_id: k.client_id,
            auth_method: k.auth_method.as_str(),
            domains: k.email_domains.join(", "),
            mapping: k.role_mapping.iter().map(|(v, r)| format!("{v} → {}", r.as_str())).collect::<Vec<_>>().join(", "),
            default_role: k.default_role.as_str(),
            jit: k.jit.as_str(),
        })
        .collect();
    let via_sso = matches!(&c.ctx.actor, Actor::Person { session, .. } if session.sso_tenant == Some(c.ctx.tenant.id));
    let page = SsoPage {
        layout: c.layout("Single sign-on", "sso"),
        slug: c.slug().to_owned(),
        connections,
        required: settings.required,
        enforced: settings.enforced,
        via_sso,
        callback: format!("{}/auth/callback", state.config.public_url),
        form: AddForm { client_secret: String::new(), ..form },
        error,
        notice,
    };
    render(status, &page)
}

async fn show(c: Console, State(state): State<AppState>) -> Result<Response, PageError> {
    c.require_admin()?;
    page(&c, &state, StatusCode::OK, AddForm::default(), None, None).await
}

fn input(form: &AddForm) -> Result<ConnectionInput, Error> {
    let mut role_mapping = BTreeMap::new();
    for line in form.role_mapping.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let (value, role) = line
            .rsplit_once('=')
            .ok_or_else(|| Error::invalid("invalid_role_mapping", Some("role_mapping"), "write one `value=role` per line"))?;
        role_mapping.insert(value.trim().to_owned(), role.trim().to_owned());
    }
    let opt = |s: &str| Some(s.trim().to_owned()).filter(|s| !s.is_empty());
    Ok(ConnectionInput {
        name: form.name.clone(),
        issuer: form.issuer.clone(),
        client_id: form.client_id.clone(),
        client_secret: opt(&form.client_secret),
        email_domains: form.domains.split([',', ' ', '\n']).map(str::trim).filter(|d| !d.is_empty()).map(str::to_owned).collect(),
        groups_claim: opt(&form.groups_claim),
        role_mapping,
        default_role: opt(&form.default_role),
        jit: opt(&form.jit),
        ..Default::default()
    })
}

async fn add(c: Console, State(state): State<AppState>, Form(form): Form<AddForm>) -> Result<Response, PageError> {
    c.require_admin()?;
    let result = match input(&form) {
        Ok(i) => sso::create(&state.db, state.config.vault_keys.as_ref(), c.ctx.tenant.id, &c.ctx.audit, &i).await,
        Err(e) => Err(e),
    };
    match result {
        Ok(k) => {
            let notice = format!("Added {}. Its secret is sealed and is not shown again.", k.name);
            page(&c, &state, StatusCode::CREATED, AddForm::default(), None, Some(notice)).await
        }
        Err(e) => {
            let status = e.status();
            page(&c, &state, status, form, Some(FormError::of(e)?), None).await
        }
    }
}

#[derive(Deserialize)]
struct RequireForm {
    required: String,
}

async fn require(c: Console, State(state): State<AppState>, Form(form): Form<RequireForm>) -> Result<Response, PageError> {
    c.require_admin()?;
    let session = match &c.ctx.actor {
        Actor::Person { session, .. } => Some(&**session),
        Actor::Machine { .. } => None,
    };
    let on = form.required == "on";
    match sso::set_required(&state.db, c.ctx.tenant.id, &c.ctx.audit, on, session).await {
        Ok(_) => Ok(Redirect::to(&format!("/console/t/{}/sso", c.slug())).into_response()),
        Err(e) => {
            let status = e.status();
            page(&c, &state, status, AddForm::default(), Some(FormError::of(e)?), None).await
        }
    }
}

async fn confirm_remove(
    c: Console,
    State(state): State<AppState>,
    Path((_, id)): Path<(String, String)>,
) -> Result<Response, PageError> {
    c.require_admin()?;
    let k = sso::get(&state.db, c.ctx.tenant.id, parse_id(&id, "SSO connection")?).await?;
    let page = ConfirmPage {
        layout: c.layout("Remove connection", "sso"),
        question: format!("Remove the connection {} ({})?", k.name, k.issuer),
        consequence: format!(
            "Nobody signs in through it any more; {} then sign in through the deployment's provider. Sessions it already \
             opened last until they end.",
            k.email_domains.join(", ")
        ),
        action: format!("/console/t/{}/sso/{}/remove", c.slug(), k.id),
        button: "Remove connection".into(),
        cancel: format!("/console/t/{}/sso", c.slug()),
    };
    render(StatusCode::OK, &page)
}

async fn remove(c: Console, State(state): State<AppState>, Path((_, id)): Path<(String, String)>) -> Result<Response, PageError> {
    c.require_admin()?;
    sso::delete(&state.db, c.ctx.tenant.id, &c.ctx.audit, parse_id(&id, "SSO connection")?).await?;
    Ok(Redirect::to(&format!("/console/t/{}/sso", c.slug())).into_response())
}

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/console/t/{tenant}/sso", get(show).post(add))
        .route("/console/t/{tenant}/sso/require", post(require))
        .route("/console/t/{tenant}/sso/{id}/remove", get(confirm_remove).post(remove))
}
