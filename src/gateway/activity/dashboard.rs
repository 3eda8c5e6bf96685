//! The activity dashboard's figures: calls per time slot by outcome, error codes over time,
//! duration percentiles per connector and the busiest tools, for a tenant or one workspace
//! over a chosen range. One statement computes them all from one snapshot. It reads at most
//! [`MAX_ROWS`] rows (the newest of the range), found through the primary key (tenant, time)
//! or `activity_workspace_time` (tenant, workspace, time); [`SQL`] is public so a test can
//! check that plan.

use chrono::{DateTime, DurationRound, TimeDelta, Utc};
use serde_json::Value;
use uuid::Uuid;

use crate::{
    db::{Db, Scope},
    error::{Error, Result},
    ids::TenantId,
};

/// The most rows one dashboard reads; a busier range shows its newest rows and says so.
pub const MAX_ROWS: i64 = 200_000;
/// Error codes of calls refused by a quota or budget.
pub const LIMITED: &[&str] = &["rate_limited", "quota_unavailable", "write_budget_exceeded"];
/// Error codes of calls refused by policy: an approval needed, a redaction block, a tool not
/// granted (fail-closed grants hide it), a suspended tenant or workspace.
pub const DENIED: &[&str] = &[
    "approval_required",
    "destructive_tool_requires_approval",
    "redaction_blocked",
    "unknown_tool",
    "workspace_suspended",
    "tenant_suspended",
];
/// Error codes drawn one line each; the rest are summed under "other".
pub const TOP_CODES: i64 = 5;
/// Rows of the connector and tool tables.
pub const TOP_ROWS: i64 = 10;

/// The dashboard statement. Binds: `$1` tenant, `$2` since, `$3` until, `$4` workspace id or
/// NULL, `$5` row cap, `$6` slot length in seconds, `$7` limited codes, `$8` denied codes,
/// `$9` top codes, `$10` top rows. Each branch of `r` is served by its own index; the first
/// runs only without a workspace (a one-time filter), the second only with one.
pub const SQL: &str = "WITH r AS MATERIALIZED (
        (SELECT a.occurred_at, a.outcome, a.error_code, a.connector, a.tool, a.duration_ms
           FROM activity a
          WHERE $4::uuid IS NULL AND a.tenant_id = $1 AND a.occurred_at >= $2 AND a.occurred_at < $3
          ORDER BY a.occurred_at DESC LIMIT $5)
        UNION ALL
        (SELECT a.occurred_at, a.outcome, a.error_code, a.connector, a.tool, a.duration_ms
           FROM activity a
          WHERE a.tenant_id = $1 AND a.workspace_id = $4 AND a.occurred_at >= $2 AND a.occurred_at < $3
          ORDER BY a.occurred_at DESC LIMIT $5)
    ), s AS MATERIALIZED (
        SELECT r.*, floor(extract(epoch FROM r.occurred_at - $2::timestamptz) / $6::float8)::int AS slot FROM r
    ), codes AS (
        SELECT error_code FROM r WHERE error_code IS NOT NULL
         GROUP BY error_code ORDER BY count(*) DESC, error_code LIMIT $9
    )
    SELECT
      (SELECT count(*) FROM r),
      (SELECT coalesce(jsonb_agg(jsonb_build_array(slot, ok, err, limited, denied) ORDER BY slot), '[]')
         FROM (SELECT slot,
                      count(*) FILTER (WHERE outcome = 'ok') AS ok,
                      count(*) FILTER (WHERE outcome = 'error') AS err,
                      count(*) FILTER (WHERE error_code = ANY($7)) AS limited,
                      count(*) FILTER (WHERE error_code = ANY($8)) AS denied
                 FROM s GROUP BY slot) x),
      (SELECT coalesce(jsonb_agg(jsonb_build_array(code, slot, n) ORDER BY code, slot), '[]')
         FROM (SELECT CASE WHEN s.error_code IN (SELECT error_code FROM codes) THEN s.error_code ELSE 'other' END AS code,
                      s.slot, count(*) AS n
                 FROM s WHERE s.error_code IS NOT NULL GROUP BY 1, 2) x),
      (SELECT coalesce(jsonb_agg(jsonb_build_array(connector, n, p50, p95) ORDER BY n DESC, connector), '[]')
         FROM (SELECT coalesce(connector, '') AS connector, count(*) AS n,
                      percentile_cont(0.5) WITHIN GROUP (ORDER BY duration_ms) AS p50,
                      percentile_cont(0.95) WITHIN GROUP (ORDER BY duration_ms) AS p95
                 FROM r GROUP BY 1 ORDER BY n DESC, connector LIMIT $10) x),
      (SELECT coalesce(jsonb_agg(jsonb_build_array(tool, n, errors) ORDER BY n DESC, tool), '[]')
         FROM (SELECT tool, count(*) AS n, count(*) FILTER (WHERE outcome = 'error') AS errors
                 FROM r GROUP BY tool ORDER BY n DESC, tool LIMIT $10) x)";

/// How far back a dashboard looks, and the length of one time slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Range {
    Hour,
    Day,
    Week,
}

impl Range {
    pub const ALL: [Range; 3] = [Range::Hour, Range::Day, Range::Week];

    /// `1h`, `24h` or `7d`; anything else is `invalid_range`.
    pub fn parse(raw: &str) -> Result<Range> {
        Range::ALL
            .into_iter()
            .find(|r| r.name() == raw)
            .ok_or_else(|| Error::invalid("invalid_range", Some("range"), "range is 1h, 24h or 7d"))
    }

    pub fn name(self) -> &'static str {
        match self {
            Range::Hour => "1h",
            Range::Day => "24h",
            Range::Week => "7d",
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            Range::Hour => "Last hour",
            Range::Day => "Last 24 hours",
            Range::Week => "Last 7 days",
        }
    }

    /// One time slot: a minute, a quarter hour, two hours.
    pub fn slot(self) -> TimeDelta {
        match self {
            Range::Hour => TimeDelta::minutes(1),
            Range::Day => TimeDelta::minutes(15),
            Range::Week => TimeDelta::hours(2),
        }
    }

    pub fn slots(self) -> usize {
        match self {
            Range::Hour => 60,
            Range::Day => 96,
            Range::Week => 84,
        }
    }

    /// The range's bounds: it ends at the end of the slot that holds `now`.
    pub fn bounds(self, now: DateTime<Utc>) -> (DateTime<Utc>, DateTime<Utc>) {
        let until = now.duration_trunc(self.slot()).unwrap_or(now) + self.slot();
        (until - self.slot() * self.slots() as i32, until)
    }
}

/// Calls in one time slot.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Slot {
    pub ok: i64,
    pub error: i64,
    /// Refused by a quota or budget (see [`LIMITED`]).
    pub limited: i64,
    /// Refused by policy (see [`DENIED`]).
    pub denied: i64,
}

/// Duration percentiles of one connector's calls (`""`: calls that named none).
#[derive(Clone, Debug, PartialEq)]
pub struct Latency {
    pub connector: String,
    pub calls: i64,
    pub p50_ms: f64,
    pub p95_ms: f64,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolCount {
    pub tool: String,
    pub calls: i64,
    pub errors: i64,
}

#[derive(Clone, Debug)]
pub struct Dashboard {
    pub range: Range,
    pub since: DateTime<Utc>,
    pub until: DateTime<Utc>,
    /// Rows read; [`MAX_ROWS`] means the range held more and only its newest were read.
    pub rows: i64,
    /// One entry per slot, oldest first.
    pub slots: Vec<Slot>,
    /// The most frequent error codes (then `other`), each with its count per slot.
    pub codes: Vec<(String, Vec<i64>)>,
    pub latency: Vec<Latency>,
    pub tools: Vec<ToolCount>,
}

impl Dashboard {
    pub fn truncated(&self) -> bool {
        self.rows >= MAX_ROWS
    }

    pub fn calls(&self) -> i64 {
        self.slots.iter().map(|s| s.ok + s.error).sum()
    }
}

/// The dashboard of `tenant` (or of its workspace `workspace`) over `range`, ending with the
/// slot that holds `now`.
pub async fn dashboard(
    db: &Db,
    tenant: TenantId,
    workspace: Option<Uuid>,
    range: Range,
    now: DateTime<Utc>,
) -> Result<Dashboard> {
    let (since, until) = range.bounds(now);
    let row: (i64, Value, Value, Value, Value) = db
        .single_decision(Scope::Tenant(tenant), move |conn, _| {
            Box::pin(async move {
                Ok(sqlx::query_as(SQL)
                    .bind(tenant.0)
                    .bind(since)
                    .bind(until)
                    .bind(workspace)
                    .bind(MAX_ROWS)
                    .bind(range.slot().num_seconds() as f64)
                    .bind(LIMITED)
                    .bind(DENIED)
                    .bind(TOP_CODES)
                    .bind(TOP_ROWS)
                    .fetch_one(&mut *conn)
                    .await?)
            })
        })
        .await?;
    let (rows, slots, codes, latency, tools) = row;
    Ok(Dashboard {
        range,
        since,
        until,
        rows,
        slots: per_slot(range, &slots),
        codes: code_series(range, &codes),
        latency: items(&latency)
            .map(|v| Latency {
                connector: text(&v[0]),
                calls: v[1].as_i64().unwrap_or(0),
                p50_ms: v[2].as_f64().unwrap_or(0.0),
                p95_ms: v[3].as_f64().unwrap_or(0.0),
            })
            .collect(),
        tools: items(&tools)
            .map(|v| ToolCount { tool: text(&v[0]), calls: v[1].as_i64().unwrap_or(0), errors: v[2].as_i64().unwrap_or(0) })
            .collect(),
    })
}

fn items(v: &Value) -> impl Iterator<Item = &Value> {
    v.as_array().into_iter().flatten()
}

fn text(v: &Value) -> String {
    v.as_str().unwrap_or("").to_owned()
}

/// The slot index of an entry, when it falls inside the range (a row written at the range's
/// very end, by a clock a little ahead, is left out rather than drawn past the axis).
fn slot_of(range: Range, v: &Value) -> Option<usize> {
    v.as_i64().and_then(|i| usize::try_from(i).ok()).filter(|i| *i < range.slots())
}

fn per_slot(range: Range, v: &Value) -> Vec<Slot> {
    let mut slots = vec![Slot::default(); range.slots()];
    for e in items(v) {
        if let Some(i) = slot_of(range, &e[0]) {
            let n = |k: usize| e[k].as_i64().unwrap_or(0);
            slots[i] = Slot { ok: n(1), error: n(2), limited: n(3), denied: n(4) };
        }
    }
    slots
}

fn code_series(range: Range, v: &Value) -> Vec<(String, Vec<i64>)> {
    let mut series: Vec<(String, Vec<i64>)> = Vec::new();
    for e in items(v) {
        let code = text(&e[0]);
        let Some(i) = slot_of(range, &e[1]) else { continue };
        let at = match series.iter().position(|(c, _)| *c == code) {
            Some(at) => at,
            None => {
                series.push((code, vec![0; range.slots()]));
                series.len() - 1
            }
        };
        series[at].1[i] += e[2].as_i64().unwrap_or(0);
    }
    // The busiest first; "other" last.
    series.sort_by_key(|(code, counts)| (code == "other", std::cmp::Reverse(counts.iter().sum::<i64>()), code.clone()));
    series
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn ranges_parse_and_end_at_a_slot_boundary() {
        for r in Range::ALL {
            assert_eq!(Range::parse(r.name()).unwrap(), r);
            let now = DateTime::parse_from_rfc3339("2026-12-05T10:07:31Z").unwrap().with_timezone(&Utc);
            let (since, until) = r.bounds(now);
            assert!(until > now && until - now <= r.slot());
            assert_eq!(until - since, r.slot() * r.slots() as i32);
        }
        for bad in ["", "1d", "24H", "7d ", "all"] {
            assert_eq!(Range::parse(bad).unwrap_err().code(), "invalid_range");
        }
    }

    #[test]
    fn slots_and_series_come_back_in_place_and_out_of_range_entries_are_dropped() {
        let slots = per_slot(Range::Hour, &json!([[0, 3, 1, 0, 1], [59, 0, 2, 2, 0], [60, 9, 9, 9, 9], [-1, 9, 9, 9, 9]]));
        assert_eq!(slots.len(), 60);
        assert_eq!(slots[0], Slot { ok: 3, error: 1, limited: 0, denied: 1 });
        assert_eq!(slots[59], Slot { ok: 0, error: 2, limited: 2, denied: 0 });
        assert_eq!(slots.iter().map(|s| s.ok + s.error).sum::<i64>(), 6);
        let codes = code_series(Range::Hour, &json!([["other", 1, 5], ["a", 1, 1], ["b", 0, 2], ["b", 3, 2], ["a", 70, 4]]));
        let names: Vec<&str> = codes.iter().map(|(c, _)| c.as_str()).collect();
        assert_eq!(names, ["b", "a", "other"]);
        assert_eq!(codes[0].1[0], 2);
        assert_eq!(codes[1].1.iter().sum::<i64>(), 1);
    }
}
