//! The activity dashboard of a tenant or one of its workspaces: calls per time slot by
//! outcome, error codes over time, duration percentiles per connector, the busiest tools, and
//! the calls refused by quotas or policy. Drawn as inline SVG ([`super::charts`]), each chart
//! with a table of the same figures. Needs `activity_access`, like the activity rows.

use askama::Template;
use axum::{
    Router,
    extract::{Query, State},
    http::StatusCode,
    response::Response,
    routing::get,
};
use chrono::{DateTime, Utc};
use serde::Deserialize;

use super::{
    Console, Layout, PageError,
    charts::{Series, bar_rows, lines, stacked_bars},
};
use crate::{
    AppState,
    error::Error,
    gateway::activity::dashboard::{self, Dashboard, Range},
    members::Permission,
};

/// Classes of the error-code lines, in order (`console.css` gives each a colour and a dash).
const LINE_CLASSES: [&str; 6] = ["l0", "l1", "l2", "l3", "l4", "l5"];

pub struct Choice {
    pub value: String,
    pub label: String,
    pub selected: bool,
}

/// A slot's row in the calls table (only slots with calls are listed).
pub struct SlotRow {
    pub at: String,
    pub ok: i64,
    pub error: i64,
    pub limited: i64,
    pub denied: i64,
}

pub struct CodeRow {
    pub code: String,
    pub calls: i64,
}

pub struct LatencyRow {
    pub connector: String,
    pub calls: i64,
    pub p50: String,
    pub p95: String,
}

pub struct ToolRow {
    pub tool: String,
    pub calls: i64,
    pub errors: i64,
}

#[derive(Template)]
#[template(path = "console/dashboard.html")]
struct DashboardPage {
    layout: Layout,
    slug: String,
    ranges: Vec<Choice>,
    workspaces: Vec<Choice>,
    range_label: String,
    scope: String,
    since: String,
    until: String,
    calls: i64,
    errors: i64,
    limited: i64,
    denied: i64,
    truncated: bool,
    max_rows: i64,
    calls_svg: String,
    codes_svg: String,
    limits_svg: String,
    latency_svg: String,
    tools_svg: String,
    slot_rows: Vec<SlotRow>,
    code_rows: Vec<CodeRow>,
    latency_rows: Vec<LatencyRow>,
    tool_rows: Vec<ToolRow>,
}

#[derive(Deserialize)]
struct DashboardQuery {
    #[serde(default)]
    range: String,
    #[serde(default)]
    workspace: String,
}

/// A slot's start as shown: the time of day, with the date when the range spans days.
fn at(range: Range, t: DateTime<Utc>) -> String {
    match range {
        Range::Hour | Range::Day => t.format("%H:%M").to_string(),
        Range::Week => t.format("%b %d %H:%M").to_string(),
    }
}

fn ms(v: f64) -> String {
    if v.fract() == 0.0 { format!("{v:.0} ms") } else { format!("{v:.1} ms") }
}

async fn page(c: Console, State(state): State<AppState>, Query(q): Query<DashboardQuery>) -> Result<Response, PageError> {
    c.require(Permission::ActivityAccess)?;
    let range = if q.range.is_empty() { Range::Day } else { Range::parse(&q.range)? };
    let all = crate::workspaces::list(&state.db, c.ctx.tenant.id).await?;
    let workspace = match q.workspace.as_str() {
        "" => None,
        slug => Some(all.iter().find(|w| w.slug == slug).ok_or(Error::NotFound { what: "workspace" })?),
    };
    let d = dashboard::dashboard(&state.db, c.ctx.tenant.id, workspace.map(|w| w.id.0), range, Utc::now()).await?;
    let scope = workspace.map_or_else(|| format!("tenant {}", c.slug()), |w| format!("workspace {}", w.slug));
    let page = DashboardPage {
        layout: c.layout("Dashboard", "dashboard"),
        slug: c.slug().to_owned(),
        ranges: Range::ALL
            .into_iter()
            .map(|r| Choice { value: r.name().into(), label: r.label().into(), selected: r == range })
            .collect(),
        workspaces: all
            .iter()
            .map(|w| Choice { value: w.slug.clone(), label: w.slug.clone(), selected: workspace.is_some_and(|x| x.id == w.id) })
            .collect(),
        range_label: range.label().to_lowercase(),
        since: d.since.format("%Y-%m-%d %H:%M UTC").to_string(),
        until: d.until.format("%Y-%m-%d %H:%M UTC").to_string(),
        calls: d.calls(),
        errors: d.slots.iter().map(|s| s.error).sum(),
        limited: d.slots.iter().map(|s| s.limited).sum(),
        denied: d.slots.iter().map(|s| s.denied).sum(),
        truncated: d.truncated(),
        max_rows: dashboard::MAX_ROWS,
        calls_svg: String::new(),
        codes_svg: String::new(),
        limits_svg: String::new(),
        latency_svg: String::new(),
        tools_svg: String::new(),
        slot_rows: Vec::new(),
        code_rows: Vec::new(),
        latency_rows: Vec::new(),
        tool_rows: Vec::new(),
        scope,
    };
    super::render(StatusCode::OK, &draw(page, &d))
}

/// The page's charts and tables, from the dashboard's figures.
fn draw(mut page: DashboardPage, d: &Dashboard) -> DashboardPage {
    let starts: Vec<DateTime<Utc>> = (0..d.slots.len()).map(|i| d.since + d.range.slot() * i as i32).collect();
    let labels: Vec<String> = starts.iter().map(|t| at(d.range, *t)).collect();
    let last = labels.len().saturating_sub(1);
    let ticks: Vec<(usize, String)> = [0, labels.len() / 2, last].into_iter().map(|i| (i, labels[i].clone())).collect();
    let column = |f: fn(&dashboard::Slot) -> i64| d.slots.iter().map(f).collect::<Vec<i64>>();
    let (ok, error, limited, denied) = (column(|s| s.ok), column(|s| s.error), column(|s| s.limited), column(|s| s.denied));
    let slot = d.range.slot().num_minutes();
    page.calls_svg = stacked_bars(
        "chart-calls",
        "Calls by outcome",
        &format!("Calls per {slot}-minute slot, {}: {} ok, {} errors.", page.range_label, page.calls - page.errors, page.errors),
        &labels,
        &ticks,
        &[Series { name: "ok", class: "s-ok", values: &ok }, Series { name: "error", class: "s-error", values: &error }],
    );
    let codes: Vec<Series> =
        d.codes.iter().zip(LINE_CLASSES).map(|((code, values), class)| Series { name: code, class, values }).collect();
    page.codes_svg = lines(
        "chart-codes",
        "Error codes over time",
        &format!("Errors per slot by code, {}: {} codes.", page.range_label, codes.len()),
        &labels,
        &ticks,
        &codes,
    );
    page.limits_svg = stacked_bars(
        "chart-refused",
        "Rate-limited and denied calls",
        &format!("Calls refused per slot, {}: {} by quotas, {} by policy.", page.range_label, page.limited, page.denied),
        &labels,
        &ticks,
        &[
            Series { name: "rate-limited", class: "s-limited", values: &limited },
            Series { name: "denied", class: "s-denied", values: &denied },
        ],
    );
    let connectors: Vec<String> = d.latency.iter().map(|l| l.connector.clone()).collect();
    page.latency_svg = bar_rows(
        "chart-latency",
        "Duration per connector",
        &format!("Median and 95th percentile call duration per connector, {}.", page.range_label),
        &connectors,
        &[
            ("p50", "s-p50", d.latency.iter().map(|l| l.p50_ms).collect()),
            ("p95", "s-p95", d.latency.iter().map(|l| l.p95_ms).collect()),
        ],
        " ms",
    );
    let tools: Vec<String> = d.tools.iter().map(|t| t.tool.clone()).collect();
    page.tools_svg = bar_rows(
        "chart-tools",
        "Top tools",
        &format!("The most called tools, {}, with their errors.", page.range_label),
        &tools,
        &[
            ("calls", "s-ok", d.tools.iter().map(|t| t.calls as f64).collect()),
            ("errors", "s-error", d.tools.iter().map(|t| t.errors as f64).collect()),
        ],
        "",
    );
    page.slot_rows = d
        .slots
        .iter()
        .zip(&starts)
        .filter(|(s, _)| s.ok + s.error > 0)
        .map(|(s, t)| SlotRow {
            at: t.format("%Y-%m-%d %H:%M").to_string(),
            ok: s.ok,
            error: s.error,
            limited: s.limited,
            denied: s.denied,
        })
        .collect();
    page.code_rows = d.codes.iter().map(|(code, v)| CodeRow { code: code.clone(), calls: v.iter().sum() }).collect();
    page.latency_rows = d
        .latency
        .iter()
        .map(|l| LatencyRow { connector: l.connector.clone(), calls: l.calls, p50: ms(l.p50_ms), p95: ms(l.p95_ms) })
        .collect();
    page.tool_rows = d.tools.iter().map(|t| ToolRow { tool: t.tool.clone(), calls: t.calls, errors: t.errors }).collect();
    page
}

pub fn router() -> Router<AppState> {
    Router::new().route("/console/t/{tenant}/dashboard", get(page))
}
