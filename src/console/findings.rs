//! Findings (the tenant's inbox: list, acknowledge, resolve) and suppress rules (list, create
//! with a reason and an expiry, revoke through a confirmation page). The permissions are the
//! API's: `activity_access` reads and sets verdicts; owners and admins with it write rules.

use askama::Template;
use axum::{
    Form, Router,
    extract::{Path, Query, State},
    http::StatusCode,
    response::{IntoResponse, Redirect, Response},
    routing::{get, post},
};
use serde::Deserialize;

use super::{ConfirmPage, Console, FormError, Layout, PageError, creators, render, when, when_opt};
use crate::{
    AppState,
    error::Error,
    extract::parse_id,
    findings::{self, NewRule, Verdict},
    members::Permission,
};

/// Findings one page shows (most recently seen first), keyset-paged by (last seen, id).
const FINDINGS_SHOWN: i64 = 50;

pub struct FindingRow {
    pub id: String,
    pub kind: String,
    pub operation: String,
    pub code: String,
    pub subject: String,
    pub status: String,
    pub regressed: bool,
    pub occurrences: i64,
    pub first_seen: String,
    pub last_seen: String,
    pub message: String,
    pub can_ack: bool,
    pub can_resolve: bool,
    /// The query string that pre-fills a suppress rule matching this finding.
    pub suppress: String,
}

#[derive(Template)]
#[template(path = "console/findings.html")]
struct FindingsPage {
    layout: Layout,
    slug: String,
    rows: Vec<FindingRow>,
    status: String,
    error: Option<FormError>,
    notice: Option<String>,
    rule_writer: bool,
    /// The query string of the next (older) page, when this one is full.
    next: Option<String>,
}

#[derive(Deserialize, Default)]
struct FindingsQuery {
    #[serde(default)]
    status: String,
    /// After a verdict (post/redirect/get): what was done.
    done: Option<String>,
    /// Keyset cursor: `<last seen, RFC 3339>_<id>` of the previous page's last finding.
    after: Option<String>,
}

fn finding_row(f: findings::Finding) -> FindingRow {
    let suppress = url::form_urlencoded::Serializer::new(String::new())
        .append_pair("kind", &f.kind)
        .append_pair("operation", &f.operation)
        .append_pair("code", &f.code)
        .finish();
    FindingRow {
        id: f.id.to_string(),
        can_ack: f.status == "open",
        can_resolve: matches!(f.status.as_str(), "open" | "acked" | "suppressed"),
        kind: f.kind,
        operation: f.operation,
        code: f.code,
        subject: f.subject,
        status: f.status,
        regressed: f.regressed,
        occurrences: f.occurrences,
        first_seen: when(&f.first_seen),
        last_seen: when(&f.last_seen),
        message: f.last_message,
        suppress,
    }
}

impl FindingsPage {
    fn is_status(&self, s: &str) -> bool {
        self.status == s
    }
}

impl RulesPage {
    fn is_kind(&self, k: &str) -> bool {
        self.form.kind == k
    }
}

async fn findings_page(
    c: &Console,
    state: &AppState,
    q: FindingsQuery,
    status: StatusCode,
    error: Option<FormError>,
) -> Result<Response, PageError> {
    let filter = super::activity::nonempty(&q.status);
    let after = super::parse_after(q.after.as_deref()).and_then(|a| match a {
        Some((at, id)) => Ok(Some((at, id.parse().map_err(|_| super::bad_cursor())?))),
        None => Ok(None),
    });
    let listed = match after {
        Ok(after) => findings::page(&state.db, c.ctx.tenant.id, filter.as_deref(), after, FINDINGS_SHOWN).await,
        Err(e) => Err(e),
    };
    let (rows, next, error) = match listed {
        Ok(list) => {
            let next = (list.len() as i64 == FINDINGS_SHOWN).then(|| list.last()).flatten().map(|last| {
                url::form_urlencoded::Serializer::new(String::new())
                    .append_pair("status", &q.status)
                    .append_pair("after", &super::after_cursor(&last.last_seen, &last.id.to_string()))
                    .finish()
            });
            (list.into_iter().map(finding_row).collect(), next, error)
        }
        Err(e) => (Vec::new(), None, Some(FormError::of(e)?)),
    };
    let status = if error.is_some() && status == StatusCode::OK { StatusCode::UNPROCESSABLE_ENTITY } else { status };
    let notice = match q.done.as_deref() {
        Some("ack") => Some("The finding is acknowledged.".to_owned()),
        Some("resolve") => Some("The finding is resolved.".to_owned()),
        _ => None,
    };
    let page = FindingsPage {
        layout: c.layout("Findings", "findings"),
        slug: c.slug().to_owned(),
        rows,
        status: q.status,
        error,
        notice,
        rule_writer: c.require_admin_with_activity("write suppress rules").is_ok(),
        next,
    };
    render(status, &page)
}

async fn list_findings(c: Console, State(state): State<AppState>, Query(q): Query<FindingsQuery>) -> Result<Response, PageError> {
    c.require(Permission::ActivityAccess)?;
    findings_page(&c, &state, q, StatusCode::OK, None).await
}

async fn verdict(c: &Console, state: &AppState, id: &str, verdict: Verdict, done: &str) -> Result<Response, PageError> {
    c.require(Permission::ActivityAccess)?;
    match findings::set_verdict(&state.db, c.ctx.tenant.id, &c.ctx.audit, parse_id(id, "finding")?, verdict).await {
        Ok(_) => Ok(Redirect::to(&format!("/console/t/{}/findings?done={done}", c.slug())).into_response()),
        // A finding another person moved on meanwhile: shown in place, nothing written.
        Err(e @ Error::Conflict { .. }) => {
            findings_page(c, state, FindingsQuery::default(), StatusCode::CONFLICT, Some(FormError::of(e)?)).await
        }
        Err(e) => Err(e.into()),
    }
}

async fn ack(c: Console, State(state): State<AppState>, Path((_, id)): Path<(String, String)>) -> Result<Response, PageError> {
    verdict(&c, &state, &id, Verdict::Ack, "ack").await
}

async fn resolve(
    c: Console,
    State(state): State<AppState>,
    Path((_, id)): Path<(String, String)>,
) -> Result<Response, PageError> {
    verdict(&c, &state, &id, Verdict::Resolve, "resolve").await
}

pub struct RuleRow {
    pub id: String,
    pub matches: String,
    pub reason: String,
    pub expires: String,
    pub created_by: String,
    pub created: String,
    pub live: bool,
    pub revoked: String,
}

/// The rule form's fields, kept when the form comes back with an error.
#[derive(Deserialize, Default)]
struct RuleForm {
    #[serde(default)]
    kind: String,
    #[serde(default)]
    operation: String,
    #[serde(default)]
    code: String,
    #[serde(default)]
    subject: String,
    #[serde(default)]
    reason: String,
    /// `YYYY-MM-DDTHH:MM`, UTC.
    #[serde(default)]
    expires: String,
}

#[derive(Template)]
#[template(path = "console/suppress_rules.html")]
struct RulesPage {
    layout: Layout,
    slug: String,
    rows: Vec<RuleRow>,
    writer: bool,
    all: bool,
    form: RuleForm,
    error: Option<FormError>,
    notice: Option<String>,
}

#[derive(Deserialize, Default)]
struct RulesQuery {
    /// Revoked and expired rules too.
    #[serde(default)]
    all: String,
    #[serde(default)]
    kind: String,
    #[serde(default)]
    operation: String,
    #[serde(default)]
    code: String,
    #[serde(default)]
    subject: String,
    done: Option<String>,
}

async fn rules_page(
    c: &Console,
    state: &AppState,
    all: bool,
    mut form: RuleForm,
    status: StatusCode,
    error: Option<FormError>,
    notice: Option<String>,
) -> Result<Response, PageError> {
    let names = creators(state, c).await?;
    let rows = findings::rules(&state.db, c.ctx.tenant.id, all)
        .await?
        .into_iter()
        .map(|r| {
            let matches = [("kind", &r.kind), ("operation", &r.operation), ("code", &r.code), ("subject", &r.subject)]
                .iter()
                .filter_map(|(k, v)| v.as_ref().map(|v| format!("{k} = {v}")))
                .collect::<Vec<_>>()
                .join(", ");
            RuleRow {
                id: r.id.to_string(),
                matches,
                reason: r.reason,
                expires: when(&r.expires_at),
                created_by: names.get(&r.created_by).cloned().unwrap_or(r.created_by),
                created: when(&r.created_at),
                live: r.live,
                revoked: if r.revoked_at.is_some() { format!("revoked {}", when_opt(&r.revoked_at)) } else { String::new() },
            }
        })
        .collect();
    if form.expires.is_empty() {
        // Only the form's suggestion; the database's clock decides whether it is in range.
        form.expires = (chrono::Utc::now() + chrono::Duration::days(30)).format("%Y-%m-%dT%H:%M").to_string();
    }
    let page = RulesPage {
        layout: c.layout("Suppress rules", "suppress-rules"),
        slug: c.slug().to_owned(),
        rows,
        writer: c.require_admin_with_activity("write suppress rules").is_ok(),
        all,
        form,
        error,
        notice,
    };
    render(status, &page)
}

async fn list_rules(c: Console, State(state): State<AppState>, Query(q): Query<RulesQuery>) -> Result<Response, PageError> {
    c.require(Permission::ActivityAccess)?;
    let notice = match q.done.as_deref() {
        Some("created") => Some("The rule is in force.".to_owned()),
        Some("revoked") => Some("The rule is revoked.".to_owned()),
        _ => None,
    };
    let form = RuleForm { kind: q.kind, operation: q.operation, code: q.code, subject: q.subject, ..RuleForm::default() };
    rules_page(&c, &state, q.all == "1", form, StatusCode::OK, None, notice).await
}

fn new_rule(form: &RuleForm) -> Result<NewRule, Error> {
    let expires_at = super::activity::instant(&form.expires, "expires")?
        .ok_or_else(|| Error::invalid("invalid_expiry", Some("expires"), "a rule needs an expiry"))?;
    let opt = |s: &str| super::activity::nonempty(s);
    Ok(NewRule {
        kind: opt(&form.kind),
        operation: opt(&form.operation),
        code: opt(&form.code),
        subject: opt(&form.subject),
        reason: form.reason.clone(),
        expires_at,
    })
}

async fn create_rule(c: Console, State(state): State<AppState>, Form(form): Form<RuleForm>) -> Result<Response, PageError> {
    c.require_admin_with_activity("write suppress rules")?;
    let result = match new_rule(&form) {
        Ok(rule) => findings::create_rule(&state.db, c.ctx.tenant.id, &c.ctx.audit, &rule).await,
        Err(e) => Err(e),
    };
    match result {
        Ok(_) => Ok(Redirect::to(&format!("/console/t/{}/suppress-rules?done=created", c.slug())).into_response()),
        Err(e) => {
            let error = FormError::of(e)?;
            rules_page(&c, &state, false, form, StatusCode::UNPROCESSABLE_ENTITY, Some(error), None).await
        }
    }
}

async fn confirm_revoke(
    c: Console,
    State(state): State<AppState>,
    Path((_, id)): Path<(String, String)>,
) -> Result<Response, PageError> {
    c.require_admin_with_activity("write suppress rules")?;
    let id = parse_id(&id, "suppress rule")?;
    let rule = findings::rules(&state.db, c.ctx.tenant.id, true)
        .await?
        .into_iter()
        .find(|r| r.id == id)
        .ok_or(Error::NotFound { what: "suppress rule" })?;
    let page = ConfirmPage {
        layout: c.layout("Revoke suppress rule", "suppress-rules"),
        question: format!("Revoke the rule “{}”?", rule.reason),
        consequence: "Findings it suppressed stay suppressed until they occur again, which reopens them.".into(),
        action: format!("/console/t/{}/suppress-rules/{id}/revoke", c.slug()),
        button: "Revoke rule".into(),
        cancel: format!("/console/t/{}/suppress-rules", c.slug()),
    };
    render(StatusCode::OK, &page)
}

async fn revoke_rule(
    c: Console,
    State(state): State<AppState>,
    Path((_, id)): Path<(String, String)>,
) -> Result<Response, PageError> {
    c.require_admin_with_activity("write suppress rules")?;
    findings::revoke_rule(&state.db, c.ctx.tenant.id, &c.ctx.audit, parse_id(&id, "suppress rule")?).await?;
    Ok(Redirect::to(&format!("/console/t/{}/suppress-rules?done=revoked", c.slug())).into_response())
}

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/console/t/{tenant}/findings", get(list_findings))
        .route("/console/t/{tenant}/findings/{id}/ack", post(ack))
        .route("/console/t/{tenant}/findings/{id}/resolve", post(resolve))
        .route("/console/t/{tenant}/suppress-rules", get(list_rules).post(create_rule))
        .route("/console/t/{tenant}/suppress-rules/{id}/revoke", get(confirm_revoke).post(revoke_rule))
}
