//! Ops SQL: the batch write (evidence + issue upsert + prunes) and the issue verdicts.

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::PgConnection;
use uuid::Uuid;

use super::{FAILURE_RETENTION_DAYS, ISSUE_RETENTION_DAYS, MESSAGE_CAP, PRUNE_BATCH, Queued, fingerprint};
use crate::error::Result;

/// A failure ready to insert.
#[derive(Debug, Clone)]
pub struct Row {
    pub id: Uuid,
    pub tenant_id: Option<Uuid>,
    pub workspace_id: Option<Uuid>,
    pub operation: String,
    pub stage: String,
    pub status: &'static str,
    pub code: String,
    pub message: String,
    pub reference: Option<String>,
    pub fingerprint: String,
    pub at: DateTime<Utc>,
}

impl Row {
    pub fn of(q: Queued) -> Row {
        let f = q.failure;
        let message = match f.message.char_indices().nth(MESSAGE_CAP) {
            Some((end, _)) => f.message[..end].to_owned(),
            None => f.message,
        };
        Row {
            id: Uuid::now_v7(),
            fingerprint: fingerprint(f.operation, &f.stage, &f.code),
            tenant_id: f.tenant,
            workspace_id: f.workspace,
            operation: f.operation.to_owned(),
            stage: f.stage,
            status: f.status.as_str(),
            code: f.code,
            message,
            reference: f.reference,
            at: q.at,
        }
    }
}

/// An issue as read back.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct Issue {
    pub fingerprint: String,
    pub operation: String,
    pub stage: String,
    pub code: String,
    pub status: String,
    pub seen: i64,
    pub first_seen: DateTime<Utc>,
    pub last_seen: DateTime<Utc>,
    pub last_message: String,
    pub last_tenant_id: Option<Uuid>,
    pub resolved_version: Option<String>,
    pub resolved_at: Option<DateTime<Utc>>,
}

/// Deletes at most `$2` failures older than `$1` days, oldest first, through
/// `ops_failures_retention`. MATERIALIZED: the sub-select runs once, so the batch stays
/// bounded (see kv's prune). No `FOR UPDATE`: evidence is never updated, so the application
/// has no UPDATE privilege on it; two replicas pruning at once simply both try the same rows.
pub const PRUNE_FAILURES: &str = "WITH doomed AS MATERIALIZED (
         SELECT id FROM ops_failures WHERE at < now() - make_interval(days => $1)
         ORDER BY at LIMIT $2)
     DELETE FROM ops_failures f USING doomed WHERE f.id = doomed.id";

/// Deletes at most `$2` issues last seen more than `$1` days ago, through `ops_issues_retention`.
pub const PRUNE_ISSUES: &str = "WITH doomed AS MATERIALIZED (
         SELECT fingerprint FROM ops_issues WHERE last_seen < now() - make_interval(days => $1)
         ORDER BY last_seen LIMIT $2 FOR UPDATE SKIP LOCKED)
     DELETE FROM ops_issues i USING doomed WHERE i.fingerprint = doomed.fingerprint";

/// One batch: evidence and issues, then the bounded prunes. Platform context.
pub async fn write(conn: &mut PgConnection, rows: &[Row]) -> Result<()> {
    // Telemetry: a crash may lose the last moment of it, like a full queue would.
    sqlx::query!("SET LOCAL synchronous_commit = off").execute(&mut *conn).await?;
    let texts = |f: &dyn Fn(&Row) -> String| rows.iter().map(f).collect::<Vec<_>>();
    // The failures go in and, in the same statement, are added to their issues: one upsert
    // row per fingerprint, so concurrent writers (tasks, replicas) add under the row lock and
    // counts stay exact. Rows go in fingerprint order, so two writers lock issues in the same
    // order. An occurrence after a resolution makes the issue `regressed`; `ignored` stays.
    sqlx::query!(
        "WITH f AS (
             INSERT INTO ops_failures (id, tenant_id, workspace_id, operation, stage, status, code, message, reference, fingerprint, at)
             SELECT * FROM unnest($1::uuid[], $2::uuid[], $3::uuid[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[],
                 $9::text[], $10::text[], $11::timestamptz[])
             RETURNING fingerprint, operation, stage, code, message, tenant_id, at)
         INSERT INTO ops_issues AS i (fingerprint, operation, stage, code, seen, first_seen, last_seen, last_message, last_tenant_id)
         SELECT fingerprint, min(operation), min(stage), min(code), count(*), min(at), max(at),
                (array_agg(message ORDER BY at DESC))[1], (array_agg(tenant_id ORDER BY at DESC))[1]
         FROM f GROUP BY fingerprint ORDER BY fingerprint
         ON CONFLICT (fingerprint) DO UPDATE SET
             seen = i.seen + EXCLUDED.seen,
             first_seen = least(i.first_seen, EXCLUDED.first_seen),
             last_seen = greatest(i.last_seen, EXCLUDED.last_seen),
             last_message = CASE WHEN EXCLUDED.last_seen >= i.last_seen THEN EXCLUDED.last_message ELSE i.last_message END,
             last_tenant_id = CASE WHEN EXCLUDED.last_seen >= i.last_seen THEN EXCLUDED.last_tenant_id ELSE i.last_tenant_id END,
             status = CASE WHEN i.status = 'resolved' AND EXCLUDED.last_seen > i.resolved_at THEN 'regressed' ELSE i.status END,
             updated_at = now()",
        &rows.iter().map(|r| r.id).collect::<Vec<_>>(),
        &rows.iter().map(|r| r.tenant_id).collect::<Vec<_>>() as &[Option<Uuid>],
        &rows.iter().map(|r| r.workspace_id).collect::<Vec<_>>() as &[Option<Uuid>],
        &texts(&|r| r.operation.clone()),
        &texts(&|r| r.stage.clone()),
        &texts(&|r| r.status.to_owned()),
        &texts(&|r| r.code.clone()),
        &texts(&|r| r.message.clone()),
        &rows.iter().map(|r| r.reference.clone()).collect::<Vec<_>>() as &[Option<String>],
        &texts(&|r| r.fingerprint.clone()),
        &rows.iter().map(|r| r.at).collect::<Vec<_>>(),
    )
    .execute(&mut *conn)
    .await?;
    crate::findings::observe(&mut *conn, &recurring(rows)).await?;
    prune(&mut *conn).await?;
    crate::findings::sweep_stale(conn).await?;
    Ok(())
}

/// The tenants' `recurring` findings in a batch: one observation per (tenant, fingerprint),
/// counted, with its latest message. Platform rows (no tenant) have no inbox.
fn recurring(rows: &[Row]) -> Vec<crate::findings::Observation> {
    let mut by_key: std::collections::BTreeMap<(Uuid, &str), crate::findings::Observation> = Default::default();
    for r in rows {
        let Some(tenant) = r.tenant_id else { continue };
        let o = by_key.entry((tenant, r.fingerprint.as_str())).or_insert_with(|| crate::findings::Observation {
            tenant,
            kind: "recurring",
            subject: r.fingerprint.clone(),
            operation: r.operation.clone(),
            code: r.code.clone(),
            count: 0,
            first: r.at,
            last: r.at,
            message: r.message.clone(),
        });
        o.count += 1;
        o.first = o.first.min(r.at);
        if r.at >= o.last {
            o.last = r.at;
            o.message.clone_from(&r.message);
        }
    }
    by_key.into_values().collect()
}

/// The two bounded retention deletes: (failures, issues) deleted.
pub async fn prune(conn: &mut PgConnection) -> Result<(u64, u64)> {
    let failures =
        sqlx::query(PRUNE_FAILURES).bind(FAILURE_RETENTION_DAYS).bind(PRUNE_BATCH).execute(&mut *conn).await?.rows_affected();
    let issues =
        sqlx::query(PRUNE_ISSUES).bind(ISSUE_RETENTION_DAYS).bind(PRUNE_BATCH).execute(&mut *conn).await?.rows_affected();
    Ok((failures, issues))
}

/// Runs `query_as!` into an [`Issue`] with the one column list of an issue pasted between
/// the literals `[$before…]` and `$after` (the query macros accept literals joined by `+`).
macro_rules! issue {
    ([$($before:literal),+] $after:literal, $($arg:expr),+ $(,)?) => {
        sqlx::query_as!(
            Issue,
            $($before +)+ "fingerprint, operation, stage, code, status, seen, first_seen, last_seen, last_message, last_tenant_id, \
         resolved_version, resolved_at" + $after,
            $($arg),+
        )
    };
}

pub async fn get(conn: &mut PgConnection, fingerprint: &str) -> Result<Option<Issue>> {
    Ok(issue!(["SELECT "] " FROM ops_issues WHERE fingerprint = $1", fingerprint).fetch_optional(conn).await?)
}

/// Sets the status; resolving records the version and the time, anything else clears them.
pub async fn set_status(conn: &mut PgConnection, fingerprint: &str, status: &str, version: Option<&str>) -> Result<Issue> {
    Ok(issue!(
        ["UPDATE ops_issues SET status = $2,
             resolved_version = CASE WHEN $2 = 'resolved' THEN $3 END,
             resolved_at = CASE WHEN $2 = 'resolved' THEN now() END,
             updated_at = now()
         WHERE fingerprint = $1 RETURNING "] "",
        fingerprint,
        status,
        version,
    )
    .fetch_one(conn)
    .await?)
}

pub async fn list(
    conn: &mut PgConnection,
    status: Option<&str>,
    after: Option<(DateTime<Utc>, String)>,
    limit: i64,
) -> Result<Vec<Issue>> {
    let (at, key) = after.unzip();
    Ok(issue!(
        ["SELECT "] " FROM ops_issues WHERE ($1::text IS NULL OR status = $1)
            AND ($3::timestamptz IS NULL OR last_seen < $3 OR (last_seen = $3 AND fingerprint > $4))
          ORDER BY last_seen DESC, fingerprint LIMIT $2",
        status,
        limit,
        at,
        key,
    )
    .fetch_all(conn)
    .await?)
}
