//! Quotas in the browser (owners and admins, as their API): the tenant's limits with a create
//! form, one limit's edit form (compare-and-set on its version: a limit changed meanwhile is
//! refused with `quota_changed`, the form keeping what was typed), removal through a
//! confirmation page, and the newest windows of the ledger.

use askama::Template;
use axum::{
    Form, Router,
    extract::{Path, Query, State},
    http::StatusCode,
    response::{IntoResponse, Redirect, Response},
    routing::get,
};
use serde::Deserialize;
use uuid::Uuid;

use super::{ConfirmPage, Console, FormError, Layout, PageError, render, when};
use crate::{
    AppState,
    error::Error,
    quotas::{self, Calls, Limit, LimitInput, Per},
};

/// Ledger windows shown, newest first.
const USAGE_ROWS: i64 = 50;

/// A limit's form as posted (and shown again after a refusal).
#[derive(Deserialize, Default, Clone)]
pub struct Draft {
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub per: String,
    #[serde(default)]
    pub connector: String,
    #[serde(default)]
    pub tool: String,
    #[serde(default)]
    pub class: String,
    #[serde(default)]
    pub requests: String,
    #[serde(default)]
    pub window_seconds: String,
    #[serde(default)]
    pub concurrency: String,
    #[serde(default)]
    pub daily: String,
    #[serde(default)]
    pub fail_open: String,
    #[serde(default)]
    pub version: String,
}

impl Draft {
    fn of(l: &Limit) -> Draft {
        let n = |v: Option<i32>| v.map(|v| v.to_string()).unwrap_or_default();
        Draft {
            name: l.name.clone(),
            per: l.per.as_str().to_owned(),
            connector: l.connector.clone().unwrap_or_default(),
            tool: l.tool.clone().unwrap_or_default(),
            class: l.class.as_str().to_owned(),
            requests: n(l.requests),
            window_seconds: n(l.window_seconds),
            concurrency: n(l.concurrency),
            daily: n(l.daily),
            fail_open: if l.fail_open { "on".into() } else { String::new() },
            version: l.version.to_string(),
        }
    }
}

fn number(raw: &str, code: &'static str, field: &'static str) -> Result<Option<i32>, Error> {
    match raw.trim() {
        "" => Ok(None),
        v => v.parse().map(Some).map_err(|_| Error::invalid(code, Some(field), format!("{field} is a whole number"))),
    }
}

fn text(raw: &str) -> Option<String> {
    Some(raw.trim()).filter(|s| !s.is_empty()).map(str::to_owned)
}

/// The API's input from the form; its checks are the API's (`quotas::check`).
fn input(d: &Draft) -> Result<LimitInput, Error> {
    let per = match d.per.as_str() {
        "" | "tenant" => Per::Tenant,
        "token" => Per::Token,
        "member" => Per::Member,
        _ => return Err(Error::invalid("invalid_quota_per", Some("per"), "per is tenant, token or member")),
    };
    let class = match d.class.as_str() {
        "" | "any" => Calls::Any,
        "read" => Calls::Read,
        "write" => Calls::Write,
        _ => return Err(Error::invalid("invalid_quota_class", Some("class"), "class is read, write or any")),
    };
    let version = match d.version.trim() {
        "" => None,
        v => Some(v.parse().map_err(|_| Error::invalid("invalid_version", Some("version"), "not a version"))?),
    };
    Ok(LimitInput {
        name: d.name.trim().to_owned(),
        per: Some(per),
        connector: text(&d.connector),
        tool: text(&d.tool),
        class: Some(class),
        requests: number(&d.requests, "invalid_quota_requests", "requests")?,
        window_seconds: number(&d.window_seconds, "invalid_quota_window", "window_seconds")?,
        concurrency: number(&d.concurrency, "invalid_quota_concurrency", "concurrency")?,
        daily: number(&d.daily, "invalid_quota_daily", "daily")?,
        fail_open: d.fail_open == "on",
        version,
    })
}

pub struct LimitRow {
    pub id: Uuid,
    pub name: String,
    pub per: &'static str,
    pub scope: String,
    pub class: &'static str,
    pub budgets: String,
    pub fails: &'static str,
    pub version: i64,
}

pub struct UsageRow {
    pub limit: String,
    pub subject: String,
    pub kind: String,
    pub window: String,
    pub budget: i32,
    pub granted: i32,
    pub used: i32,
    pub refused: i32,
}

fn row(l: &Limit) -> LimitRow {
    let mut budgets = Vec::new();
    if let (Some(r), Some(w)) = (l.requests, l.window_seconds) {
        budgets.push(format!("{r} per {w} s"));
    }
    if let Some(c) = l.concurrency {
        budgets.push(format!("{c} at once"));
    }
    if let Some(d) = l.daily {
        budgets.push(format!("{d} a day"));
    }
    let scope = match (&l.connector, &l.tool) {
        (None, _) => "every connector".to_owned(),
        (Some(c), None) => c.clone(),
        (Some(c), Some(t)) => format!("{c}.{t}"),
    };
    LimitRow {
        id: l.id,
        name: l.name.clone(),
        per: l.per.as_str(),
        scope,
        class: l.class.as_str(),
        budgets: budgets.join(", "),
        fails: if l.fail_open { "open" } else { "closed" },
        version: l.version,
    }
}

#[derive(Template)]
#[template(path = "console/quotas.html")]
struct QuotasPage {
    layout: Layout,
    slug: String,
    rows: Vec<LimitRow>,
    usage: Vec<UsageRow>,
    draft: Draft,
    /// The limit being edited (its id), or none for the create form.
    editing: Option<Uuid>,
    notice: Option<String>,
    error: Option<FormError>,
}

async fn page(
    c: &Console,
    state: &AppState,
    status: StatusCode,
    draft: Draft,
    editing: Option<Uuid>,
    notice: Option<String>,
    error: Option<FormError>,
) -> Result<Response, PageError> {
    let tenant = c.ctx.tenant.id;
    let rows = quotas::list(&state.db, tenant).await?.iter().map(row).collect();
    let usage = quotas::usage(&state.db, tenant, USAGE_ROWS)
        .await?
        .into_iter()
        .map(|u| UsageRow {
            limit: u.limit,
            subject: u.subject,
            kind: u.kind,
            window: when(&u.window_start),
            budget: u.budget,
            granted: u.granted,
            used: u.used,
            refused: u.refused,
        })
        .collect();
    let title = if editing.is_some() { format!("Quota {}", draft.name) } else { "Quotas".to_owned() };
    let page =
        QuotasPage { layout: c.layout(&title, "quotas"), slug: c.slug().to_owned(), rows, usage, draft, editing, notice, error };
    render(status, &page)
}

#[derive(Deserialize)]
struct Done {
    done: Option<String>,
}

fn notice(done: Option<&str>) -> Option<String> {
    match done? {
        "created" => Some("Limit added: every replica enforces it from its next call.".into()),
        "updated" => Some("Limit saved.".into()),
        "removed" => Some("Limit removed, with its ledger.".into()),
        _ => None,
    }
}

async fn list(c: Console, State(state): State<AppState>, Query(q): Query<Done>) -> Result<Response, PageError> {
    c.require_admin()?;
    let draft = Draft { per: "tenant".into(), class: "any".into(), ..Draft::default() };
    page(&c, &state, StatusCode::OK, draft, None, notice(q.done.as_deref()), None).await
}

fn refusal_status(error: &FormError) -> StatusCode {
    match error.code.as_str() {
        "quota_changed" => StatusCode::PRECONDITION_FAILED,
        "quota_exists" | "quota_cap" => StatusCode::CONFLICT,
        _ => StatusCode::UNPROCESSABLE_ENTITY,
    }
}

async fn create(c: Console, State(state): State<AppState>, Form(draft): Form<Draft>) -> Result<Response, PageError> {
    c.require_admin()?;
    let created = async { quotas::create(&state.db, c.ctx.tenant.id, &c.ctx.audit, &input(&draft)?).await }.await;
    match created {
        Ok(_) => Ok(Redirect::to(&format!("/console/t/{}/quotas?done=created", c.slug())).into_response()),
        Err(e) => {
            let error = FormError::of(e)?;
            page(&c, &state, refusal_status(&error), draft, None, None, Some(error)).await
        }
    }
}

fn limit_id(raw: &str) -> Result<Uuid, Error> {
    raw.parse().map_err(|_| Error::NotFound { what: "quota" })
}

async fn show(c: Console, State(state): State<AppState>, Path((_, id)): Path<(String, String)>) -> Result<Response, PageError> {
    c.require_admin()?;
    let id = limit_id(&id)?;
    let limit = quotas::get(&state.db, c.ctx.tenant.id, id).await?;
    page(&c, &state, StatusCode::OK, Draft::of(&limit), Some(id), None, None).await
}

async fn update(
    c: Console,
    State(state): State<AppState>,
    Path((_, id)): Path<(String, String)>,
    Form(draft): Form<Draft>,
) -> Result<Response, PageError> {
    c.require_admin()?;
    let id = limit_id(&id)?;
    let updated = async { quotas::update(&state.db, c.ctx.tenant.id, &c.ctx.audit, id, &input(&draft)?).await }.await;
    match updated {
        Ok(_) => Ok(Redirect::to(&format!("/console/t/{}/quotas?done=updated", c.slug())).into_response()),
        Err(e @ Error::NotFound { .. }) => Err(e.into()),
        Err(e) => {
            let mut error = FormError::of(e)?;
            if error.code == "quota_changed" {
                error.message = "This limit changed since you opened it; nothing was saved. The form keeps your values; the list above shows the limit as it is now (its version too): check it, then save again from its page.".into();
            }
            page(&c, &state, refusal_status(&error), draft, Some(id), None, Some(error)).await
        }
    }
}

async fn confirm_remove(
    c: Console,
    State(state): State<AppState>,
    Path((_, id)): Path<(String, String)>,
) -> Result<Response, PageError> {
    c.require_admin()?;
    let id = limit_id(&id)?;
    let limit = quotas::get(&state.db, c.ctx.tenant.id, id).await?;
    let page = ConfirmPage {
        layout: c.layout(&format!("Remove quota {}", limit.name), "quotas"),
        question: format!("Remove the limit {}?", limit.name),
        consequence: "Calls stop counting against it on every replica's next call, and its ledger goes with it.".into(),
        action: format!("/console/t/{}/quotas/{id}/remove", c.slug()),
        button: "Remove limit".into(),
        cancel: format!("/console/t/{}/quotas", c.slug()),
    };
    render(StatusCode::OK, &page)
}

async fn remove(c: Console, State(state): State<AppState>, Path((_, id)): Path<(String, String)>) -> Result<Response, PageError> {
    c.require_admin()?;
    quotas::delete(&state.db, c.ctx.tenant.id, &c.ctx.audit, limit_id(&id)?).await?;
    Ok(Redirect::to(&format!("/console/t/{}/quotas?done=removed", c.slug())).into_response())
}

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/console/t/{tenant}/quotas", get(list).post(create))
        .route("/console/t/{tenant}/quotas/{id}", get(show).post(update))
        .route("/console/t/{tenant}/quotas/{id}/remove", get(confirm_remove).post(remove))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_form_becomes_the_apis_input_and_a_limit_its_form_again() {
        let d = Draft {
            name: " api-calls ".into(),
            per: "member".into(),
            connector: "crm".into(),
            class: "write".into(),
            requests: "10".into(),
            window_seconds: "60".into(),
            fail_open: "on".into(),
            ..Draft::default()
        };
        let i = input(&d).unwrap();
        assert_eq!(
            (i.name.as_str(), i.per, i.class, i.requests, i.window_seconds),
            ("api-calls", Some(Per::Member), Some(Calls::Write), Some(10), Some(60))
        );
        assert!(i.fail_open && i.tool.is_none() && i.daily.is_none() && i.version.is_none());
        for (field, edit) in [
            ("per", Box::new(|d: &mut Draft| d.per = "team".into()) as Box<dyn Fn(&mut Draft)>),
            ("class", Box::new(|d: &mut Draft| d.class = "both".into())),
            ("requests", Box::new(|d: &mut Draft| d.requests = "ten".into())),
            ("version", Box::new(|d: &mut Draft| d.version = "x".into())),
        ] {
            let mut bad = d.clone();
            edit(&mut bad);
            match input(&bad) {
                Err(Error::Invalid { field: Some(f), .. }) => assert_eq!(f, field),
                other => panic!("{field}: {other:?}"),
            }
        }
    }
}
