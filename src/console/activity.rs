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

pub(super) fn nonempty(s: &str) -> Option<String> {
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
    q: LogQuery,
    error: Option<FormError>,
    /// The query string of the next (older) page, filters kept.
    next: Option<String>,
}

/// The admin log's filters, all in the query string so a filtered view is a link.
#[derive(Deserialize, Default)]
struct LogQuery {
    #[serde(default)]
    actor: String,
    #[serde(default)]
    action: String,
    #[serde(default)]
    target: String,
    /// `YYYY-MM-DDTHH:MM` (a `datetime-local` field), read as UTC.
    #[serde(default)]
    since: String,
    #[serde(default)]
    until: String,
    before: Option<String>,
}

const LOG_PAGE: i64 = 50;

fn pretty(v: &Option<Value>) -> String {
    v.as_ref().map(|v| serde_json::to_string_pretty(v).unwrap_or_default()).unwrap_or_default()
}

/// A `datetime-local` value (or a full RFC 3339 instant) as UTC.
pub(super) fn instant(raw: &str, field: &'static str) -> Result<Option<chrono::DateTime<chrono::Utc>>, Error> {
    let raw = raw.trim();
    if raw.is_empty() {
        return Ok(None);
    }
    if let Ok(at) = chrono::DateTime::parse_from_rfc3339(raw) {
        return Ok(Some(at.with_timezone(&chrono::Utc)));
    }
    ["%Y-%m-%dT%H:%M", "%Y-%m-%dT%H:%M:%S"]
        .iter()
        .find_map(|f| chrono::NaiveDateTime::parse_from_str(raw, f).ok())
        .map(|n| Some(n.and_utc()))
        .ok_or_else(|| Error::invalid("invalid_time", Some(field), "a time is YYYY-MM-DDTHH:MM (UTC)"))
}

/// The filters as the library takes them. An actor given as a member's email is that
/// member's `member:<id>`.
fn log_filter(q: &LogQuery, names: &std::collections::HashMap<String, String>) -> Result<crate::admin_log::Filter, Error> {
    let actor = nonempty(&q.actor)
        .map(|a| names.iter().find(|(_, name)| name.eq_ignore_ascii_case(&a)).map(|(actor, _)| actor.clone()).unwrap_or(a));
    for (value, field) in [(&q.actor, "actor"), (&q.action, "action"), (&q.target, "target")] {
        if value.chars().count() > 200 {
            return Err(Error::invalid("invalid_filter", Some(field), "a filter is at most 200 characters"));
        }
    }
    let (since, until) = (instant(&q.since, "since")?, instant(&q.until, "until")?);
    if let (Some(s), Some(u)) = (since, until)
        && s >= u
    {
        return Err(Error::invalid("invalid_time", Some("until"), "`until` is after `since`"));
    }
    Ok(crate::admin_log::Filter { actor, action_prefix: nonempty(&q.action), target: nonempty(&q.target), since, until })
}

/// The query string of the next (older) page: the same filters, before `id`.
fn older(q: &LogQuery, id: &str) -> String {
    url::form_urlencoded::Serializer::new(String::new())
        .append_pair("actor", &q.actor)
        .append_pair("action", &q.action)
        .append_pair("target", &q.target)
        .append_pair("since", &q.since)
        .append_pair("until", &q.until)
        .append_pair("before", id)
        .finish()
}

async fn admin_log(c: Console, State(state): State<AppState>, Query(q): Query<LogQuery>) -> Result<Response, PageError> {
    c.require_admin()?;
    let names = creators(&state, &c).await?;
    let tenant = c.ctx.tenant.id;
    let parsed = log_filter(&q, &names).and_then(|f| {
        let before = match q.before.as_deref().filter(|b| !b.is_empty()) {
            Some(b) => Some(
                b.parse::<uuid::Uuid>()
                    .map_err(|_| Error::invalid("invalid_cursor", Some("before"), "not a cursor this page made"))?,
            ),
            None => None,
        };
        Ok((f, before))
    });
    let (records, error) = match parsed {
        Ok((filter, before)) => {
            let records = state
                .db
                .single_decision(crate::db::Scope::Tenant(tenant), move |conn, _| {
                    let filter = filter.clone();
                    Box::pin(async move { crate::admin_log::list_filtered(conn, Some(tenant), &filter, before, LOG_PAGE).await })
                })
                .await?;
            (records, None)
        }
        Err(e) => (Vec::new(), Some(FormError::of(e)?)),
    };
    let next =
        (records.len() as i64 == LOG_PAGE).then(|| records.last().map(|r| r.id.to_string())).flatten().map(|id| older(&q, &id));
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
    let status = if error.is_some() { StatusCode::UNPROCESSABLE_ENTITY } else { StatusCode::OK };
    super::render(
        status,
        &AdminLogPage { layout: c.layout("Admin log", "admin-log"), slug: c.slug().to_owned(), rows, q, error, next },
    )
}

pub fn router() -> Router<AppState> {
    Router::new().route("/console/t/{tenant}/activity", get(activity)).route("/console/t/{tenant}/admin-log", get(admin_log))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_utc_and_bad_ones_are_refused() {
        let at = instant("2026-11-29T23:40", "since").unwrap().unwrap();
        assert_eq!(at.to_rfc3339(), "2026-11-29T23:40:00+00:00");
        assert_eq!(instant(" ", "since").unwrap(), None);
        assert!(instant("2026-11-29T23:40:00+02:00", "since").unwrap().unwrap().to_rfc3339().starts_with("2026-11-29T21:40"));
        assert_eq!(instant("yesterday", "since").unwrap_err().code(), "invalid_time");
    }

    #[test]
    fn filters_map_emails_to_actors_and_paging_keeps_them() {
        let names = std::collections::HashMap::from([("member:42".to_owned(), "carol@example.test".to_owned())]);
        let q = LogQuery {
            actor: "Carol@Example.test".into(),
            action: "token.".into(),
            since: "2026-11-29T00:00".into(),
            until: "2026-11-28T00:00".into(),
            ..LogQuery::default()
        };
        assert_eq!(log_filter(&q, &names).unwrap_err().code(), "invalid_time", "until before since");
        let q = LogQuery { until: String::new(), ..q };
        let f = log_filter(&q, &names).unwrap();
        assert_eq!((f.actor.as_deref(), f.action_prefix.as_deref(), f.target), (Some("member:42"), Some("token."), None));
        let next = older(&q, "0190");
        assert_eq!(next, "actor=Carol%40Example.test&action=token.&target=&since=2026-11-29T00%3A00&until=&before=0190");
        let raw = LogQuery { actor: "cli".into(), ..LogQuery::default() };
        assert_eq!(log_filter(&raw, &names).unwrap().actor.as_deref(), Some("cli"));
    }
}
