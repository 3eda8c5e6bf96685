//! Ops issues (platform-wide failure groups): platform admins, named in
//! `GATEHOUSE_PLATFORM_ADMINS`, list them and set a verdict (resolve in a version, ignore,
//! reopen), each verdict admin-logged as a platform action, exactly as the platform API.

use askama::Template;
use axum::{
    Form, Router,
    extract::{Path, Query, State},
    http::StatusCode,
    response::{IntoResponse, Redirect, Response},
    routing::{get, post},
};
use serde::Deserialize;

use super::{Console, FormError, Layout, PageError, render, when, when_opt};
use crate::{
    AppState,
    admin_log::Audit,
    error::Error,
    ops::{self, Verdict},
};

/// Issues one page shows, most recently seen first, keyset-paged by (last seen, fingerprint).
const ISSUES_SHOWN: i64 = 50;

pub struct IssueRow {
    pub fingerprint: String,
    pub operation: String,
    pub stage: String,
    pub code: String,
    pub status: String,
    pub seen: i64,
    pub first_seen: String,
    pub last_seen: String,
    pub message: String,
    pub resolved: String,
}

#[derive(Template)]
#[template(path = "console/ops_issues.html")]
struct IssuesPage {
    layout: Layout,
    slug: String,
    rows: Vec<IssueRow>,
    status: String,
    error: Option<FormError>,
    notice: Option<String>,
    /// The query string of the next (older) page, when this one is full.
    next: Option<String>,
}

#[derive(Deserialize, Default)]
struct IssuesQuery {
    #[serde(default)]
    status: String,
    done: Option<String>,
    /// Keyset cursor written by this page.
    after: Option<String>,
}

impl IssuesPage {
    fn is_status(&self, s: &str) -> bool {
        self.status == s
    }
}

async fn page(
    c: &Console,
    state: &AppState,
    q: IssuesQuery,
    status: StatusCode,
    error: Option<FormError>,
) -> Result<Response, PageError> {
    let filter = super::activity::nonempty(&q.status);
    let listed = match super::parse_after(q.after.as_deref()) {
        Ok(after) => ops::issues_page(&state.db, filter.as_deref(), after, ISSUES_SHOWN).await,
        Err(e) => Err(e),
    };
    let next = listed.as_ref().ok().filter(|l| l.len() as i64 == ISSUES_SHOWN).and_then(|l| l.last()).map(|last| {
        url::form_urlencoded::Serializer::new(String::new())
            .append_pair("status", &q.status)
            .append_pair("after", &super::after_cursor(&last.last_seen, &last.fingerprint))
            .finish()
    });
    let (rows, error) = match listed {
        Ok(list) => (
            list.into_iter()
                .map(|i| IssueRow {
                    resolved: match (&i.resolved_version, &i.resolved_at) {
                        (Some(v), at) => format!("in {v}, {}", when_opt(at)),
                        (None, Some(at)) => when(at),
                        (None, None) => String::new(),
                    },
                    fingerprint: i.fingerprint,
                    operation: i.operation,
                    stage: i.stage,
                    code: i.code,
                    status: i.status,
                    seen: i.seen,
                    first_seen: when(&i.first_seen),
                    last_seen: when(&i.last_seen),
                    message: i.last_message,
                })
                .collect(),
            error,
        ),
        Err(e) => (Vec::new(), Some(FormError::of(e)?)),
    };
    let status = if error.is_some() && status == StatusCode::OK { StatusCode::UNPROCESSABLE_ENTITY } else { status };
    let notice =
        q.done.filter(|d| ["resolve", "ignore", "reopen"].contains(&d.as_str())).map(|d| format!("Verdict recorded: {d}."));
    let page = IssuesPage {
        layout: c.layout("Ops issues", "ops-issues"),
        slug: c.slug().to_owned(),
        rows,
        status: q.status,
        error,
        notice,
        next,
    };
    render(status, &page)
}

async fn list_issues(c: Console, State(state): State<AppState>, Query(q): Query<IssuesQuery>) -> Result<Response, PageError> {
    c.require_platform_admin()?;
    page(&c, &state, q, StatusCode::OK, None).await
}

#[derive(Deserialize)]
struct VerdictForm {
    #[serde(default)]
    verdict: String,
    /// The version that fixes it (resolve only; empty: none).
    #[serde(default)]
    version: String,
}

async fn set_verdict(
    c: Console,
    State(state): State<AppState>,
    Path((_, fingerprint)): Path<(String, String)>,
    Form(form): Form<VerdictForm>,
) -> Result<Response, PageError> {
    c.require_platform_admin()?;
    let result = async {
        let verdict = match form.verdict.as_str() {
            "resolve" => Verdict::Resolve,
            "ignore" => Verdict::Ignore,
            "reopen" => Verdict::Reopen,
            _ => return Err(Error::invalid("invalid_verdict", Some("verdict"), "verdict is resolve, ignore or reopen")),
        };
        let version = super::activity::nonempty(&form.version).filter(|_| verdict == Verdict::Resolve);
        if version.as_ref().is_some_and(|v| v.chars().count() > 100) {
            return Err(Error::invalid("invalid_version", Some("version"), "version is 1 to 100 characters"));
        }
        let audit = Audit { actor: c.platform_actor.clone(), request_id: c.ctx.audit.request_id.clone() };
        ops::set_verdict(&state.db, &audit, &fingerprint, verdict, version.as_deref()).await
    }
    .await;
    match result {
        Ok(_) => Ok(Redirect::to(&format!("/console/t/{}/ops-issues?done={}", c.slug(), form.verdict)).into_response()),
        Err(e) => page(&c, &state, IssuesQuery::default(), StatusCode::UNPROCESSABLE_ENTITY, Some(FormError::of(e)?)).await,
    }
}

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/console/t/{tenant}/ops-issues", get(list_issues))
        .route("/console/t/{tenant}/ops-issues/{fingerprint}/verdict", post(set_verdict))
}
