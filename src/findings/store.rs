//! Findings SQL: the observe upsert (with suppress-rule matching), the stale sweep, a
//! member's verdicts, and suppress rules.

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::PgConnection;
use uuid::Uuid;

use crate::{error::Result, ids::TenantId};

/// One occurrence (or several, counted) of a finding, as the writer or a check reports it.
#[derive(Debug, Clone)]
pub struct Observation {
    pub tenant: Uuid,
    pub kind: &'static str,
    pub subject: String,
    pub operation: String,
    pub code: String,
    pub count: i64,
    pub first: DateTime<Utc>,
    pub last: DateTime<Utc>,
    pub message: String,
}

/// A finding as read back.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct Finding {
    pub id: Uuid,
    pub kind: String,
    pub subject: String,
    pub operation: String,
    pub code: String,
    pub status: String,
    pub regressed: bool,
    pub occurrences: i64,
    pub first_seen: DateTime<Utc>,
    pub last_seen: DateTime<Utc>,
    pub last_message: String,
    pub suppressed_by: Option<Uuid>,
    pub resolved_at: Option<DateTime<Utc>>,
    pub resolution: Option<String>,
}

/// A suppress rule as read back.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct Rule {
    pub id: Uuid,
    pub kind: Option<String>,
    pub operation: Option<String>,
    pub code: Option<String>,
    pub subject: Option<String>,
    pub reason: String,
    pub expires_at: DateTime<Utc>,
    pub created_by: String,
    pub created_at: DateTime<Utc>,
    pub revoked_at: Option<DateTime<Utc>>,
    pub revoked_by: Option<String>,
    /// Not revoked and not expired (database clock).
    pub live: bool,
}

/// Runs `sqlx::query!` on `$before <covers> $after`, where `<covers>` is the one condition
/// naming the live rules of the finding's tenant that cover it, as SQL over `o` (the
/// observation) and `r` (a rule): every matcher a rule names must equal the finding's. (The
/// query macros accept literals joined by `+`, never a `const` or `concat!`.)
macro_rules! covering {
    ($before:literal, $after:literal, $($arg:expr),+ $(,)?) => {
        sqlx::query!(
            $before
                + "r.tenant_id = o.tenant_id AND r.revoked_at IS NULL AND r.expires_at > now()
         AND (r.kind IS NULL OR r.kind = o.kind) AND (r.operation IS NULL OR r.operation = o.operation)
         AND (r.code IS NULL OR r.code = o.code) AND (r.subject IS NULL OR r.subject = o.subject)"
                + $after,
            $($arg),+
        )
    };
}

/// Upserts one row per (tenant, kind, subject). A covered occurrence leaves (or makes) the
/// finding `suppressed`; an uncovered one reopens a resolved or suppressed finding (a resolved
/// one is flagged `regressed`) and leaves an open or acked one as it is. Rows go in key order so
/// concurrent writers lock findings in the same order. Callers pass unique keys. An unknown
/// tenant is skipped rather than refused: the failures around it must still be written.
pub async fn observe(conn: &mut PgConnection, obs: &[Observation]) -> Result<()> {
    if obs.is_empty() {
        return Ok(());
    }
    let texts = |f: &dyn Fn(&Observation) -> String| obs.iter().map(f).collect::<Vec<_>>();
    let tenants: Vec<Uuid> = obs.iter().map(|o| o.tenant).collect();
    let counts: Vec<i64> = obs.iter().map(|o| o.count).collect();
    let firsts: Vec<DateTime<Utc>> = obs.iter().map(|o| o.first).collect();
    let lasts: Vec<DateTime<Utc>> = obs.iter().map(|o| o.last).collect();
    covering!(
        "WITH o AS (
         SELECT * FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[], $5::text[], $6::bigint[],
                              $7::timestamptz[], $8::timestamptz[], $9::text[])
             AS o(tenant_id, kind, subject, operation, code, n, first_seen, last_seen, message))
     INSERT INTO ops_findings AS f (tenant_id, id, kind, subject, operation, code, status, occurrences, first_seen,
                                    last_seen, last_message, suppressed_by)
     SELECT o.tenant_id, gen_random_uuid(), o.kind, o.subject, o.operation, o.code,
            CASE WHEN r.id IS NULL THEN 'open' ELSE 'suppressed' END, o.n, o.first_seen, o.last_seen, o.message, r.id
     FROM o JOIN tenants t ON t.id = o.tenant_id
     LEFT JOIN LATERAL (SELECT r.id FROM ops_suppress_rules r WHERE ",
        " ORDER BY r.expires_at DESC LIMIT 1) r ON true
     ORDER BY o.tenant_id, o.kind, o.subject
     ON CONFLICT (tenant_id, kind, subject) DO UPDATE SET
         occurrences = f.occurrences + EXCLUDED.occurrences,
         last_seen = greatest(f.last_seen, EXCLUDED.last_seen),
         last_message = CASE WHEN EXCLUDED.last_seen >= f.last_seen THEN EXCLUDED.last_message ELSE f.last_message END,
         status = CASE WHEN EXCLUDED.status = 'suppressed' THEN 'suppressed'
                       WHEN f.status IN ('resolved', 'suppressed') THEN 'open' ELSE f.status END,
         regressed = f.regressed OR (EXCLUDED.status <> 'suppressed' AND f.status = 'resolved'),
         suppressed_by = EXCLUDED.suppressed_by,
         resolved_at = CASE WHEN EXCLUDED.status <> 'suppressed' AND f.status = 'resolved' THEN NULL ELSE f.resolved_at END,
         resolution = CASE WHEN EXCLUDED.status <> 'suppressed' AND f.status = 'resolved' THEN NULL ELSE f.resolution END,
         updated_at = now()",
        &tenants,
        &texts(&|o| o.kind.to_owned()),
        &texts(&|o| o.subject.clone()),
        &texts(&|o| o.operation.clone()),
        &texts(&|o| o.code.clone()),
        &counts,
        &firsts,
        &lasts,
        &texts(&|o| o.message.clone()),
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// Resolves as `stale` at most `$2` unresolved findings quiet for more than `$1` days, oldest
/// first, through `ops_findings_quiet`; returns (tenant, id, kind, subject, status before) of
/// each, for their admin-log rows. SKIP LOCKED: two replicas sweeping at once split the rows.
pub const STALE: &str = "WITH doomed AS MATERIALIZED (
         SELECT tenant_id, id, status FROM ops_findings
         WHERE status <> 'resolved' AND last_seen < now() - make_interval(days => $1)
         ORDER BY last_seen LIMIT $2 FOR UPDATE SKIP LOCKED)
     UPDATE ops_findings f SET status = 'resolved', resolution = 'stale', resolved_at = now(), updated_at = now()
     FROM doomed d WHERE f.tenant_id = d.tenant_id AND f.id = d.id
     RETURNING f.tenant_id, f.id, f.kind, f.subject, d.status";

pub type Staled = (Uuid, Uuid, String, String, String);

pub async fn stale(conn: &mut PgConnection, days: i32, limit: i64) -> Result<Vec<Staled>> {
    Ok(sqlx::query_as::<_, Staled>(STALE).bind(days).bind(limit).fetch_all(conn).await?)
}

/// Runs `query_as!` into a [`Finding`] with the one column list of a finding pasted between
/// the literals `[$before…]` and `$after` (the query macros accept literals joined by `+`).
macro_rules! finding {
    ([$($before:literal),+] $after:literal, $($arg:expr),+ $(,)?) => {
        sqlx::query_as!(
            Finding,
            $($before +)+ "id, kind, subject, operation, code, status, regressed, occurrences, first_seen, last_seen, last_message, \
         suppressed_by, resolved_at, resolution" + $after,
            $($arg),+
        )
    };
}

pub async fn get(conn: &mut PgConnection, tenant: TenantId, id: Uuid) -> Result<Option<Finding>> {
    Ok(finding!(["SELECT "] " FROM ops_findings WHERE tenant_id = $1 AND id = $2", tenant.0, id).fetch_optional(conn).await?)
}

/// A tenant's findings, most recently seen first, optionally of one status, and only those
/// after `cursor` (the last row of the previous page) in that order.
pub async fn list(
    conn: &mut PgConnection,
    tenant: TenantId,
    status: Option<&str>,
    cursor: Option<(DateTime<Utc>, Uuid)>,
    limit: i64,
) -> Result<Vec<Finding>> {
    Ok(finding!(
        ["SELECT "] " FROM ops_findings WHERE tenant_id = $1 AND ($2::text IS NULL OR status = $2)
            AND ($4::timestamptz IS NULL OR last_seen < $4 OR (last_seen = $4 AND id > $5))
          ORDER BY last_seen DESC, id LIMIT $3",
        tenant.0,
        status,
        limit,
        cursor.map(|c| c.0),
        cursor.map(|c| c.1),
    )
    .fetch_all(conn)
    .await?)
}

/// Compare-and-set a member's verdict: `to` only from one of `from`. `resolved` records the
/// time and clears the regressed flag; `acked` keeps it. None: the finding was not in `from`.
pub async fn transition(conn: &mut PgConnection, tenant: TenantId, id: Uuid, from: &[&str], to: &str) -> Result<Option<Finding>> {
    let from: Vec<String> = from.iter().map(|s| s.to_string()).collect();
    Ok(finding!(
        ["UPDATE ops_findings SET status = $4,
             resolved_at = CASE WHEN $4 = 'resolved' THEN now() END,
             resolution = CASE WHEN $4 = 'resolved' THEN 'manual' END,
             regressed = CASE WHEN $4 = 'resolved' THEN false ELSE regressed END,
             suppressed_by = NULL, updated_at = now()
         WHERE tenant_id = $1 AND id = $2 AND status = ANY($3) RETURNING "] "",
        tenant.0,
        id,
        &from,
        to,
    )
    .fetch_optional(conn)
    .await?)
}

/// Runs `query_as!` into a [`Rule`] with the one column list of a rule pasted between the
/// literals `[$before…]` and `$after`.
macro_rules! rule {
    ([$($before:literal),+] $after:literal, $($arg:expr),+ $(,)?) => {
        sqlx::query_as!(
            Rule,
            $($before +)+ r#"id, kind, operation, code, subject, reason, expires_at, created_by, created_at, revoked_at, revoked_by, (revoked_at IS NULL AND expires_at > now()) AS "live!""# + $after,
            $($arg),+
        )
    };
}

/// A new rule, created only when `expires_at` is in the future and at most 90 days away on
/// the database clock (None otherwise).
pub async fn insert_rule(
    conn: &mut PgConnection,
    tenant: TenantId,
    matchers: [Option<&str>; 4],
    reason: &str,
    expires_at: DateTime<Utc>,
    created_by: &str,
) -> Result<Option<Rule>> {
    let [kind, operation, code, subject] = matchers;
    Ok(rule!(
        ["INSERT INTO ops_suppress_rules (tenant_id, id, kind, operation, code, subject, reason, expires_at, created_by)
         SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9
         WHERE $8 > now() AND $8 <= now() + interval '90 days' RETURNING "] "",
        tenant.0,
        Uuid::now_v7(),
        kind,
        operation,
        code,
        subject,
        reason,
        expires_at,
        created_by,
    )
    .fetch_optional(conn)
    .await?)
}

/// Suppresses at once the open and acked findings a new rule covers; returns how many.
pub async fn suppress_covered(conn: &mut PgConnection, tenant: TenantId, rule: Uuid) -> Result<u64> {
    Ok(covering!(
        "UPDATE ops_findings o SET status = 'suppressed', suppressed_by = r.id, updated_at = now()
         FROM ops_suppress_rules r
         WHERE o.tenant_id = $1 AND r.id = $2 AND o.status IN ('open', 'acked') AND ",
        "",
        tenant.0,
        rule,
    )
    .execute(conn)
    .await?
    .rows_affected())
}

pub async fn rules(conn: &mut PgConnection, tenant: TenantId, include_dead: bool) -> Result<Vec<Rule>> {
    Ok(rule!(
        ["SELECT "] " FROM ops_suppress_rules WHERE tenant_id = $1 AND ($2 OR (revoked_at IS NULL AND expires_at > now()))
          ORDER BY created_at DESC, id LIMIT 1000",
        tenant.0,
        include_dead,
    )
    .fetch_all(conn)
    .await?)
}

/// Revokes a rule (idempotent: a revoked rule keeps its first revocation). None: no such rule.
pub async fn revoke_rule(conn: &mut PgConnection, tenant: TenantId, id: Uuid, by: &str) -> Result<Option<(Rule, bool)>> {
    let changed = rule!(
        ["UPDATE ops_suppress_rules SET revoked_at = now(), revoked_by = $3
         WHERE tenant_id = $1 AND id = $2 AND revoked_at IS NULL RETURNING "] "",
        tenant.0,
        id,
        by,
    )
    .fetch_optional(&mut *conn)
    .await?;
    if let Some(rule) = changed {
        return Ok(Some((rule, true)));
    }
    let existing =
        rule!(["SELECT "] " FROM ops_suppress_rules WHERE tenant_id = $1 AND id = $2", tenant.0, id).fetch_optional(conn).await?;
    Ok(existing.map(|r| (r, false)))
}
