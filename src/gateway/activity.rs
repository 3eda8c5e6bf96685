//! Activity: one payload-free row per tool call, queued in memory and written in batches by a
//! background task, so recording never blocks or slows a call. When the queue is full the row
//! is dropped and counted (`Counts::dropped`, served on `/metrics`), never waited for.

use std::{
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use chrono::{DateTime, Utc};
use serde::Serialize;
use tokio::sync::mpsc;
use uuid::Uuid;

use crate::db::{Db, Scope};

pub const QUEUE: usize = 8192;
pub const BATCH: usize = 256;
pub const RETENTION_DAYS: i32 = 90;
/// Old rows one batch deletes at most.
pub const PRUNE_BATCH: i64 = 1000;

/// The retention delete (`$1` days, `$2` batch), served by `activity_retention`.
pub const PRUNE: &str = "WITH doomed AS MATERIALIZED (
         SELECT tenant_id, occurred_at, id FROM activity
         WHERE occurred_at < now() - make_interval(days => $1) ORDER BY occurred_at LIMIT $2)
     DELETE FROM activity a USING doomed d
     WHERE a.tenant_id = d.tenant_id AND a.occurred_at = d.occurred_at AND a.id = d.id";

#[derive(Clone, Debug, Serialize)]
pub struct Row {
    pub tenant_id: Uuid,
    pub occurred_at: DateTime<Utc>,
    pub id: Uuid,
    pub workspace_id: Uuid,
    pub request_id: Option<String>,
    pub actor_kind: &'static str,
    pub actor_id: String,
    pub connector: Option<String>,
    pub tool: String,
    pub source: &'static str,
    pub outcome: &'static str,
    pub duration_ms: i32,
    pub error_code: Option<String>,
    pub classification: Option<&'static str>,
    pub result_bytes: i32,
    /// The MCP client's name and version, shared with the call's context.
    pub client: Option<std::sync::Arc<(String, String)>>,
    pub pool: Option<String>,
    /// Matches of the workspace's redaction detectors in the call's arguments and result.
    pub redactions: i32,
    /// The quota limit that refused the call, by name.
    pub quota: Option<String>,
    /// The approval the call ran under, if the workspace's policy held it back.
    pub approval_id: Option<Uuid>,
}

impl Row {
    /// The row of one tool call: a top-level one (`source = "mcp"`) or a program's host call
    /// (`source = "execute_code"`). `name` is the tool called when the outcome names none.
    pub fn of_call(
        ctx: &super::GatewayCtx,
        name: &str,
        outcome: &super::surface::Outcome,
        started: std::time::Instant,
        source: &'static str,
    ) -> Row {
        Row {
            tenant_id: ctx.tenant.id.0,
            occurred_at: Utc::now(),
            id: Uuid::now_v7(),
            workspace_id: ctx.bound.workspace.id.0,
            request_id: ctx.request_id.clone(),
            actor_kind: ctx.actor_kind,
            actor_id: ctx.actor_id.clone(),
            connector: outcome.connector.clone(),
            tool: outcome.tool.clone().unwrap_or_else(|| name.to_owned()),
            source,
            outcome: if outcome.error_code.is_some() { "error" } else { "ok" },
            duration_ms: started.elapsed().as_millis().min(i32::MAX as u128) as i32,
            error_code: outcome.error_code.clone(),
            classification: outcome.classification,
            result_bytes: outcome.result_bytes,
            client: ctx.client.clone(),
            pool: ctx.pool.as_ref().map(|(name, _)| name.clone()),
            redactions: outcome.redactions.min(i32::MAX as u32) as i32,
            quota: outcome.quota.clone(),
            approval_id: outcome.approval_id,
        }
    }
}

#[derive(Clone, Debug)]
pub struct Recorder {
    tx: mpsc::Sender<Row>,
    counts: Arc<Counts>,
}

/// What happened to the rows, for `/metrics`.
#[derive(Debug, Default)]
pub struct Counts {
    /// Refused at once because the queue was full (the call itself was not delayed).
    pub dropped: AtomicU64,
    pub written: AtomicU64,
    /// Given up on after three failed writes.
    pub lost: AtomicU64,
}

impl Recorder {
    /// Starts the writer task; it stops after the last `Recorder` is dropped and the queue
    /// has been written.
    /// A batch given up on is recorded as an ops failure (`activity.write`, platform row).
    pub fn start(db: Db, ops: crate::ops::Recorder) -> (Recorder, tokio::task::JoinHandle<()>) {
        let (tx, rx) = mpsc::channel(QUEUE);
        let counts = Arc::new(Counts::default());
        let handle = tokio::spawn(writer(db, rx, counts.clone(), ops));
        (Recorder { tx, counts }, handle)
    }

    /// Queues a row without waiting.
    pub fn record(&self, row: Row) {
        if self.tx.try_send(row).is_err() {
            self.counts.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    pub fn counts(&self) -> &Counts {
        &self.counts
    }

    /// Rows waiting to be written.
    pub fn queued(&self) -> usize {
        self.tx.max_capacity() - self.tx.capacity()
    }
}

/// How long the writer lets a partial batch fill before writing it.
const LINGER: Duration = Duration::from_millis(50);

async fn writer(db: Db, mut rx: mpsc::Receiver<Row>, counts: Arc<Counts>, ops: crate::ops::Recorder) {
    let mut batch = Vec::with_capacity(BATCH);
    let mut batches: u64 = 0;
    while rx.recv_many(&mut batch, BATCH).await > 0 {
        // Under load, one commit carries many rows instead of one commit per call.
        if batch.len() < BATCH {
            let _ = tokio::time::timeout(LINGER, async {
                while batch.len() < BATCH {
                    let room = BATCH - batch.len();
                    if rx.recv_many(&mut batch, room).await == 0 {
                        break;
                    }
                }
            })
            .await;
        }
        batches += 1;
        let prune = batches % 16 == 1;
        let mut attempt = 0;
        loop {
            match write(&db, &batch, prune).await {
                Ok(()) => {
                    counts.written.fetch_add(batch.len() as u64, Ordering::Relaxed);
                    break;
                }
                Err(e) => {
                    attempt += 1;
                    tracing::warn!(error = %e, rows = batch.len(), attempt, "activity batch not written");
                    if attempt >= 3 {
                        counts.lost.fetch_add(batch.len() as u64, Ordering::Relaxed);
                        ops.record(crate::ops::Failure {
                            operation: "activity.write",
                            stage: "insert".into(),
                            tenant: None,
                            workspace: None,
                            status: crate::ops::Status::Failed,
                            code: e.code().into(),
                            message: format!("{} activity rows lost after 3 attempts: {e}", batch.len()),
                            reference: None,
                        });
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(200 * attempt)).await;
                }
            }
        }
        batch.clear();
    }
}

async fn write(db: &Db, rows: &[Row], prune: bool) -> crate::error::Result<()> {
    db.single_decision(Scope::Platform { reason: "activity writer" }, |conn, _| {
        Box::pin(async move {
            // Activity is telemetry: a crash may lose the last moment of it, like a full
            // queue would, so its commits need not wait for the WAL flush.
            sqlx::query!("SET LOCAL synchronous_commit = off").execute(&mut *conn).await?;
            // The arrays are unnested in the select list, where PostgreSQL hands each row on
            // as it is made; `SELECT * FROM unnest(…)` first copies every row into a tuplestore
            // (docs/benchmarks.md, "The activity batch without a tuplestore"). The arrays have
            // one length, so the two forms insert the same rows.
            // Borrowed columns: the rows' strings are encoded from where they are.
            let text = |f: fn(&Row) -> &str| rows.iter().map(f).collect::<Vec<_>>();
            let optional = |f: fn(&Row) -> Option<&str>| rows.iter().map(f).collect::<Vec<_>>();
            sqlx::query!(
                "INSERT INTO activity (tenant_id, occurred_at, id, workspace_id, request_id, actor_kind, actor_id, connector, tool,
                     source, outcome, duration_ms, error_code, classification, result_bytes, client_name, client_version, pool,
                     redactions, quota, approval_id)
                 SELECT unnest($1::uuid[]), unnest($2::timestamptz[]), unnest($3::uuid[]), unnest($4::uuid[]), unnest($5::text[]),
                     unnest($6::text[]), unnest($7::text[]), unnest($8::text[]), unnest($9::text[]), unnest($10::text[]),
                     unnest($11::text[]), unnest($12::int[]), unnest($13::text[]), unnest($14::text[]), unnest($15::int[]),
                     unnest($16::text[]), unnest($17::text[]), unnest($18::text[]), unnest($19::int[]), unnest($20::text[]),
                     unnest($21::uuid[])",
                &rows.iter().map(|r| r.tenant_id).collect::<Vec<_>>(),
                &rows.iter().map(|r| r.occurred_at).collect::<Vec<_>>(),
                &rows.iter().map(|r| r.id).collect::<Vec<_>>(),
                &rows.iter().map(|r| r.workspace_id).collect::<Vec<_>>(),
                &optional(|r| r.request_id.as_deref()) as &[Option<&str>],
                &text(|r| r.actor_kind) as &[&str],
                &text(|r| &r.actor_id) as &[&str],
                &optional(|r| r.connector.as_deref()) as &[Option<&str>],
                &text(|r| &r.tool) as &[&str],
                &text(|r| r.source) as &[&str],
                &text(|r| r.outcome) as &[&str],
                &rows.iter().map(|r| r.duration_ms).collect::<Vec<_>>(),
                &optional(|r| r.error_code.as_deref()) as &[Option<&str>],
                &optional(|r| r.classification) as &[Option<&str>],
                &rows.iter().map(|r| r.result_bytes).collect::<Vec<_>>(),
                &optional(|r| r.client.as_ref().map(|c| c.0.as_str())) as &[Option<&str>],
                &optional(|r| r.client.as_ref().map(|c| c.1.as_str())) as &[Option<&str>],
                &optional(|r| r.pool.as_deref()) as &[Option<&str>],
                &rows.iter().map(|r| r.redactions).collect::<Vec<_>>(),
                &optional(|r| r.quota.as_deref()) as &[Option<&str>],
                &rows.iter().map(|r| r.approval_id).collect::<Vec<_>>() as &[Option<Uuid>],
            )
            .execute(&mut *conn)
            .await?;
            // Retention, pruned on write (every 16th batch) in a bounded batch served by
            // activity_retention.
            if !prune {
                return Ok(());
            }
            sqlx::query(PRUNE)
            .bind(RETENTION_DAYS)
            .bind(PRUNE_BATCH)
            .execute(&mut *conn)
            .await?;
            Ok(())
        })
    })
    .await
}

/// `GET /api/v1/tenants/{t}/activity`: newest first, keyset-paged on `(occurred_at, id)`.
pub mod dashboard;

pub mod http {
    use axum::{
        Json,
        extract::{Query, State},
    };
    use chrono::{DateTime, Utc};
    use serde::Deserialize;
    use serde_json::{Value, json};
    use uuid::Uuid;

    use crate::{
        AppState,
        auth::TenantCtx,
        db::Scope,
        error::{Error, Result},
        members::Permission,
    };

    /// The filters of one page (the API's query string; the console's too).
    #[derive(Deserialize, Default, utoipa::IntoParams)]
    #[into_params(parameter_in = Query)]
    #[serde(deny_unknown_fields)]
    pub struct Filters {
        pub cursor: Option<String>,
        pub limit: Option<i64>,
        pub workspace: Option<String>,
        pub connector: Option<String>,
        pub outcome: Option<String>,
        pub actor: Option<String>,
        pub since: Option<DateTime<Utc>>,
        pub until: Option<DateTime<Utc>>,
    }

    /// The cursor is the last row's `occurred_at` (microseconds) and id.
    fn parse_cursor(raw: &str) -> Result<(DateTime<Utc>, Uuid)> {
        let bad = || Error::invalid("invalid_cursor", Some("cursor"), "not a cursor this API returned");
        let (micros, id) = raw.split_once('_').ok_or_else(bad)?;
        let at = DateTime::from_timestamp_micros(micros.parse().map_err(|_| bad())?).ok_or_else(bad)?;
        Ok((at, id.parse().map_err(|_| bad())?))
    }

    /// The answer of `GET …/activity`: a page of calls, newest first.
    #[derive(utoipa::ToSchema)]
    #[allow(dead_code)]
    struct ActivityPage {
        /// One object per call: `id`, `occurred_at`, `workspace`, `actor`, `connector`, `tool`,
        /// `outcome`, `duration_ms`, `error_code`, …
        items: Vec<Value>,
        /// Pass as `cursor` for the next page; `null` on the last page.
        next_cursor: Option<String>,
    }

    /// The tenant's activity (calls through the gateway), newest first.
    #[utoipa::path(get, path = "/api/v1/tenants/{tenant}/activity", tag = "activity", params(Filters), responses((status = 200, body = ActivityPage)))]
    async fn list(ctx: TenantCtx, State(state): State<AppState>, Query(f): Query<Filters>) -> Result<Json<Value>> {
        ctx.require(Permission::ActivityAccess)?;
        Ok(Json(page(&state.db, ctx.tenant.id, &f).await?))
    }

    /// One page of a tenant's activity, newest first: `{ items, next_cursor }`. The caller
    /// checks `activity_access`.
    pub async fn page(db: &crate::db::Db, tenant: crate::ids::TenantId, f: &Filters) -> Result<Value> {
        let limit = f.limit.unwrap_or(50);
        if !(1..=100).contains(&limit) {
            return Err(Error::invalid("invalid_limit", Some("limit"), "limit is from 1 to 100"));
        }
        if f.outcome.as_deref().is_some_and(|o| o != "ok" && o != "error") {
            return Err(Error::invalid("invalid_outcome", Some("outcome"), "outcome is ok or error"));
        }
        let cursor = f.cursor.as_deref().map(parse_cursor).transpose()?;
        let rows = db
            .single_decision(Scope::Tenant(tenant), move |conn, _| {
                Box::pin(async move {
                    Ok(sqlx::query!(
                        "SELECT a.occurred_at, a.id, w.slug AS workspace, a.request_id, a.actor_kind, a.actor_id, a.connector,
                                a.tool, a.source, a.outcome, a.duration_ms, a.error_code, a.classification, a.result_bytes,
                                a.client_name, a.client_version, a.pool, a.redactions, a.approval_id, a.quota
                           FROM activity a
                           JOIN workspaces w ON w.tenant_id = a.tenant_id AND w.id = a.workspace_id
                          WHERE a.tenant_id = $1
                            AND ($2::timestamptz IS NULL OR (a.occurred_at, a.id) < ($2, $3::uuid))
                            AND ($4::text IS NULL OR w.slug = $4) AND ($5::text IS NULL OR a.connector = $5)
                            AND ($6::text IS NULL OR a.outcome = $6) AND ($7::text IS NULL OR a.actor_id = $7)
                            AND ($8::timestamptz IS NULL OR a.occurred_at >= $8) AND ($9::timestamptz IS NULL OR a.occurred_at < $9)
                          ORDER BY a.occurred_at DESC, a.id DESC LIMIT $10",
                        tenant.0,
                        cursor.map(|c| c.0),
                        cursor.map(|c| c.1),
                        f.workspace.as_deref(),
                        f.connector.as_deref(),
                        f.outcome.as_deref(),
                        f.actor.as_deref(),
                        f.since,
                        f.until,
                        limit,
                    )
                    .fetch_all(&mut *conn)
                    .await?)
                })
            })
            .await?;
        let mut items = Vec::with_capacity(rows.len());
        let mut next = None;
        for row in rows.iter() {
            next = Some(format!("{}_{}", row.occurred_at.timestamp_micros(), row.id));
            items.push(json!({
                "id": row.id,
                "occurred_at": row.occurred_at,
                "workspace": row.workspace,
                "request_id": row.request_id,
                "actor": { "kind": row.actor_kind, "id": row.actor_id },
                "connector": row.connector,
                "tool": row.tool,
                "source": row.source,
                "outcome": row.outcome,
                "duration_ms": row.duration_ms,
                "error_code": row.error_code,
                "classification": row.classification,
                "result_bytes": row.result_bytes,
                "client": { "name": row.client_name, "version": row.client_version },
                "pool": row.pool,
                "redactions": row.redactions,
                "approval_id": row.approval_id,
                "quota": row.quota,
            }));
        }
        let next = if rows.len() as i64 == limit { next } else { None };
        Ok(json!({ "items": items, "next_cursor": next }))
    }

    pub fn router() -> utoipa_axum::router::OpenApiRouter<AppState> {
        utoipa_axum::router::OpenApiRouter::new().routes(utoipa_axum::routes!(list))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row() -> Row {
        Row {
            tenant_id: uuid::Uuid::nil(),
            occurred_at: chrono::Utc::now(),
            id: uuid::Uuid::now_v7(),
            workspace_id: uuid::Uuid::nil(),
            request_id: None,
            actor_kind: "token",
            actor_id: "t".into(),
            connector: None,
            tool: "skills".into(),
            source: "mcp",
            outcome: "ok",
            duration_ms: 1,
            error_code: None,
            classification: None,
            result_bytes: 0,
            client: None,
            pool: None,
            redactions: 0,
            quota: None,
            approval_id: None,
        }
    }

    #[test]
    fn a_full_queue_drops_and_counts_without_waiting() {
        let (tx, _rx) = mpsc::channel(2);
        let recorder = Recorder { tx, counts: Arc::default() };
        for _ in 0..5 {
            recorder.record(row());
        }
        assert_eq!(recorder.queued(), 2);
        assert_eq!(recorder.counts().dropped.load(Ordering::Relaxed), 3);
    }
}
