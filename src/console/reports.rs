//! Reports: the report views listed, one run and shown as a table, or downloaded as CSV. The
//! tenant's rows only (the tenant's scope), for owners and admins with `activity_access`, as
//! the reports API. A run is capped at [`reports::ROW_CAP`] rows and says so.

use askama::Template;
use axum::{
    Router,
    extract::{Path, State},
    http::{HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
    routing::get,
};

use super::{Console, Layout, PageError, render};
use crate::{
    AppState,
    db::Scope,
    reports::{self, Format},
};

const WHAT: &str = "run reports";

#[derive(Template)]
#[template(path = "console/reports.html")]
struct ListPage {
    layout: Layout,
    slug: String,
    reports: Vec<reports::Report>,
}

#[derive(Template)]
#[template(path = "console/report.html")]
struct ReportPage {
    layout: Layout,
    slug: String,
    name: String,
    description: String,
    columns: Vec<String>,
    rows: Vec<Vec<String>>,
    truncated: bool,
    cap: i64,
}

async fn list(c: Console, State(state): State<AppState>) -> Result<Response, PageError> {
    c.require_admin_with_activity(WHAT)?;
    let reports = reports::list(&state.db).await?;
    render(StatusCode::OK, &ListPage { layout: c.layout("Reports", "reports"), slug: c.slug().to_owned(), reports })
}

async fn show(c: Console, State(state): State<AppState>, Path((_, name)): Path<(String, String)>) -> Result<Response, PageError> {
    c.require_admin_with_activity(WHAT)?;
    let out = reports::run(&state.db, Scope::Tenant(c.ctx.tenant.id), &name).await?;
    let description =
        reports::list(&state.db).await?.into_iter().find(|r| r.name == name).map(|r| r.description).unwrap_or_default();
    let page = ReportPage {
        layout: c.layout(&format!("Report {name}"), "reports"),
        slug: c.slug().to_owned(),
        description,
        columns: out.columns,
        rows: out.rows.iter().map(|r| r.iter().map(reports::cell).collect()).collect(),
        truncated: out.truncated,
        cap: reports::ROW_CAP,
        name: out.report,
    };
    render(StatusCode::OK, &page)
}

/// The same CSV as `gatehouse report NAME --format csv`, as a download.
async fn csv(c: Console, State(state): State<AppState>, Path((_, name)): Path<(String, String)>) -> Result<Response, PageError> {
    c.require_admin_with_activity(WHAT)?;
    let out = reports::run(&state.db, Scope::Tenant(c.ctx.tenant.id), &name).await?;
    let mut response = reports::render(&out, Format::Csv).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/csv; charset=utf-8"));
    // The name is a report's own (checked against the catalog by the run): letters, digits, `_`.
    let file = format!("attachment; filename=\"{}-{}.csv\"", c.slug(), out.report);
    if let Ok(value) = HeaderValue::from_str(&file) {
        headers.insert(header::CONTENT_DISPOSITION, value);
    }
    Ok(response)
}

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/console/t/{tenant}/reports", get(list))
        .route("/console/t/{tenant}/reports/{name}", get(show))
        .route("/console/t/{tenant}/reports/{name}/csv", get(csv))
}
