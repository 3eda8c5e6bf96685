//! Activity (filters in the query string, keyset-paged, grouped by request) and the admin log
//! (keyset-paged, before/after shown side by side).

use askama::Template;
use axum::{
    Router,
    extract::{Query, State},
    http::StatusCode,
    response::Response,
    routing::get,
};
use serde::Deserialize;
use serde_json::Value;

use super::{Console, FormError, Layout, PageError, creators, when};
use crate::{AppState, error::Error, gateway::activity::http::Filters, members::Permission};

pub struct ActivityRow {
    pub at: String,
    pub request: String,
    /// True on the first row of a request's group.
    pub first_of_request: bool,
    pub workspace: String,
    pub actor: String,
    pub tool: String,
    pub connector: String,
    pub outcome: String,
    pub error_code: String,
    pub duration_ms: i64,
}

#[derive(Template)]
#[template(path = "console/activity.html")]
struct ActivityPage {
    layout: Layout,
    slug: String,
    rows: Vec<ActivityRow>,
    workspace: String,
    connector: String,
    outcome: String,
    error: Option<FormError>,
    /// The query string of the next (older) page, if there is one.
    next: Option<String>,
}

#[derive(Deserialize)]
struct ActivityQuery {
    #[serde(default)]
    workspace: String,
    #[serde(default)]
    connector: String,
    #[serde(default)]
    outcome: String,
    cursor: Option<String>,
}

fn nonempty(s: &str) -> Option<String> {
    let s = s.trim();
    (!s.is_empty()).then(|| s.to_owned())
}

fn text(v: &Value) -> String {
    v.as_str().unwrap_or("").to_owned()
}

async fn activity(c: Console, State(state): State<AppState>, Query(q): Query<ActivityQuery>) -> Result<Response, PageError> {
    c.require(Permission::ActivityAccess)?;
    let filters = Filters {
        cursor: q.cursor.clone(),
        limit: Some(50),
        workspace: nonempty(&q.workspace),
        connector: nonempty(&q.connector),
        outcome: nonempty(&q.outcome),
        ..Filters::default()
    };
    let names = creators(&state, &c).await?;
    let (rows, next, error) = match crate::gateway::activity::http::page(&state.db, c.ctx.tenant.id, &filters).await {
        Ok(page) => {
            let mut rows: Vec<ActivityRow> = Vec::new();
            for item in page["items"].as_array().into_iter().flatten() {
                let request = text(&item["request_id"]);
                let first = rows.last().is_none_or(|r| request.is_empty() || r.request != request);
                let actor = format!("{}:{}", text(&item["actor"]["kind"]), text(&item["actor"]["id"]));
                rows.push(ActivityRow {
                    at: text(&item["occurred_at"]),
                    first_of_request: first,
                    request,
                    workspace: text(&item["workspace"]),
                    actor: names.get(&actor).cloned().unwrap_or(actor),
                    tool: text(&item["tool"]),
                    connector: text(&item["connector"]),
                    outcome: text(&item["outcome"]),
                    error_code: text(&item["error_code"]),
                    duration_ms: item["duration_ms"].as_i64().unwrap_or(0),
                });
            }
            let next = page["next_cursor"].as_str().map(|cursor| {
                url::form_urlencoded::Serializer::new(String::new())
                    .append_pair("workspace", &q.workspace)
                    .append_pair("connector", &q.connector)
                    .append_pair("outcome", &q.outcome)
                    .append_pair("cursor", cursor)
                    .finish()
            });
            (rows, next, None)
        }
        Err(e) => (Vec::new(), None, Some(FormError::of(e)?)),
    };
    let status = if error.is_some() { StatusCode::UNPROCESSABLE_ENTITY } else { StatusCode::OK };
    let page = ActivityPage {
        layout: c.layout("Activity", "activity"),
        slug: c.slug().to_owned(),
        rows,
        workspace: q.workspace,
        connector: q.connector,
        outcome: q.outcome,
        error,
        next,
    };
    super::render(status, &page)
}

pub struct LogRow {
    pub at: String,
    pub actor: String,
    pub action: String,
    pub target: String,
    pub before: String,
    pub after: String,
}

#[derive(Template)]
#[template(path = "console/admin_log.html")]
struct AdminLogPage {
    layout: Layout,
    slug: String,
    rows: Vec<LogRow>,
    next: Option<String>,
}

#[derive(Deserialize)]
struct LogQuery {
    before: Option<String>,
}

const LOG_PAGE: i64 = 50;

fn pretty(v: &Option<Value>) -> String {
    v.as_ref().map(|v| serde_json::to_string_pretty(v).unwrap_or_default()).unwrap_or_default()
}

async fn admin_log(c: Console, State(state): State<AppState>, Query(q): Query<LogQuery>) -> Result<Response, PageError> {
    c.require_admin()?;
    let before = match q.before.as_deref().filter(|b| !b.is_empty()) {
        Some(b) => Some(
            b.parse::<uuid::Uuid>()
                .map_err(|_| Error::invalid("invalid_cursor", Some("before"), "not a cursor this page made"))?,
        ),
        None => None,
    };
    let tenant = c.ctx.tenant.id;
    let records = state
        .db
        .single_decision(crate::db::Scope::Tenant(tenant), move |conn, _| {
            Box::pin(crate::admin_log::list(conn, Some(tenant), before, LOG_PAGE))
        })
        .await?;
    let names = creators(&state, &c).await?;
    let next = (records.len() as i64 == LOG_PAGE).then(|| records.last().map(|r| r.id.to_string())).flatten();
    let rows = records
        .into_iter()
        .map(|r| LogRow {
            at: when(&r.at),
            actor: names.get(&r.actor).cloned().unwrap_or(r.actor),
            action: r.action,
            target: r.target,
            before: pretty(&r.before),
            after: pretty(&r.after),
        })
        .collect();
    super::render(
        StatusCode::OK,
        &AdminLogPage { layout: c.layout("Admin log", "admin-log"), slug: c.slug().to_owned(), rows, next },
    )
}

pub fn router() -> Router<AppState> {
    Router::new().route("/console/t/{tenant}/activity", get(activity)).route("/console/t/{tenant}/admin-log", get(admin_log))
}
