//! Findings: a tenant's own inbox of what keeps going wrong, one row per (tenant, kind,
//! subject). `recurring` findings are materialized by the ops writer in the transaction that
//! records the tenant's failures (subject = the failure fingerprint); `drift` when a
//! connector's catalog changes under an unchanged configuration (`gateway::catalogs`);
//! `invariant` when a scheduled check fails ([`invariants`]). Members acknowledge and resolve findings and
//! write suppress rules; findings quiet for 180 days are resolved as `stale` by the ops writer,
//! with an admin-log row each, never deleted.

pub mod http;
pub mod invariants;
mod store;

use chrono::{DateTime, Utc};
use serde::Deserialize;
use sqlx::PgConnection;
use uuid::Uuid;

pub use store::{Finding, Observation, Rule, STALE};

use crate::{
    admin_log::{self, Audit, Entry},
    db::{Db, Scope},
    error::{Error, Result},
    ids::TenantId,
};

pub const KINDS: [&str; 3] = ["recurring", "invariant", "drift"];
pub const STATUSES: [&str; 4] = ["open", "acked", "resolved", "suppressed"];
/// A finding with no occurrence for this long is resolved as stale.
pub const STALE_DAYS: i32 = 180;
/// Findings one sweep resolves at most.
pub const STALE_BATCH: i64 = 1000;
/// A suppress rule lives at most this long.
pub const RULE_MAX_DAYS: i64 = 90;
pub const REASON_CAP: usize = 500;

/// Records occurrences in the caller's transaction (the ops writer's, or a catalog refresh's).
pub async fn observe(conn: &mut PgConnection, obs: &[Observation]) -> Result<()> {
    store::observe(conn, obs).await
}

/// Resolves stale findings (bounded) and writes their admin-log rows, in the caller's
/// transaction (the ops writer's, platform context). Returns how many.
pub async fn sweep_stale(conn: &mut PgConnection) -> Result<usize> {
    let staled = store::stale(&mut *conn, STALE_DAYS, STALE_BATCH).await?;
    let audit = Audit { actor: "system".into(), request_id: None };
    for (tenant, id, kind, subject, before) in &staled {
        let entry = Entry {
            tenant: Some(TenantId(*tenant)),
            audit: &audit,
            action: "ops.finding.stale",
            target: id.to_string(),
            before: Some(serde_json::json!({ "status": before, "kind": kind, "subject": subject })),
            after: Some(serde_json::json!({ "status": "resolved", "resolution": "stale" })),
        };
        admin_log::record(&mut *conn, entry).await?;
    }
    Ok(staled.len())
}

/// A tenant's findings, most recently seen first.
pub async fn list(db: &Db, tenant: TenantId, status: Option<&str>, limit: i64) -> Result<Vec<Finding>> {
    page(db, tenant, status, None, limit).await
}

/// One keyset page of [`list`]: the findings after `cursor`, the (last seen, id) of the last
/// finding of the previous page.
pub async fn page(
    db: &Db,
    tenant: TenantId,
    status: Option<&str>,
    cursor: Option<(DateTime<Utc>, Uuid)>,
    limit: i64,
) -> Result<Vec<Finding>> {
    if let Some(s) = status
        && !STATUSES.contains(&s)
    {
        return Err(Error::invalid("invalid_status", Some("status"), "status is open, acked, resolved or suppressed"));
    }
    db.single_decision(Scope::Tenant(tenant), |conn, _| Box::pin(store::list(conn, tenant, status, cursor, limit.clamp(1, 1000))))
        .await
}

/// What a member does to a finding.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Seen; stays in the inbox (open → acked).
    Ack,
    /// Fixed (open, acked or suppressed → resolved); a later occurrence reopens it as regressed.
    Resolve,
}

/// Sets a verdict with its admin-log row in the same transaction. Unknown (or another
/// tenant's) finding: `not_found`; a finding not in a state the verdict applies to:
/// `invalid_transition` (409), and nothing is written.
pub async fn set_verdict(db: &Db, tenant: TenantId, audit: &Audit, id: Uuid, verdict: Verdict) -> Result<Finding> {
    let (from, to, action): (&[&str], _, _) = match verdict {
        Verdict::Ack => (&["open"], "acked", "ops.finding.ack"),
        Verdict::Resolve => (&["open", "acked", "suppressed"], "resolved", "ops.finding.resolve"),
    };
    db.serializable(Scope::Tenant(tenant), |conn, _| {
        Box::pin(async move {
            let before = store::get(&mut *conn, tenant, id).await?.ok_or(Error::NotFound { what: "finding" })?;
            let Some(after) = store::transition(&mut *conn, tenant, id, from, to).await? else {
                return Err(Error::Conflict {
                    code: "invalid_transition",
                    message: format!("a {} finding cannot become {to}", before.status),
                });
            };
            let entry = Entry {
                tenant: Some(tenant),
                audit,
                action,
                target: id.to_string(),
                before: Some(serde_json::json!({ "status": before.status, "regressed": before.regressed })),
                after: Some(serde_json::json!({ "status": after.status, "regressed": after.regressed })),
            };
            admin_log::record(&mut *conn, entry).await?;
            Ok(after)
        })
    })
    .await
}

/// A suppress rule as submitted.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewRule {
    pub kind: Option<String>,
    pub operation: Option<String>,
    pub code: Option<String>,
    pub subject: Option<String>,
    pub reason: String,
    pub expires_at: DateTime<Utc>,
}

fn matcher<'a>(value: &'a Option<String>, field: &'static str, cap: usize) -> Result<Option<&'a str>> {
    match value.as_deref() {
        None => Ok(None),
        Some(v) if v.trim().is_empty() || v.chars().count() > cap => {
            Err(Error::invalid("invalid_matcher", Some(field), format!("{field} is 1 to {cap} characters when given")))
        }
        Some(v) => Ok(Some(v)),
    }
}

/// Creates a rule and suppresses the findings it covers at once, with one admin-log row, in
/// one transaction. Returns the rule and how many findings it suppressed.
pub async fn create_rule(db: &Db, tenant: TenantId, audit: &Audit, rule: &NewRule) -> Result<(Rule, u64)> {
    let kind = matcher(&rule.kind, "kind", 20)?;
    if let Some(k) = kind
        && !KINDS.contains(&k)
    {
        return Err(Error::invalid("invalid_kind", Some("kind"), "kind is recurring, invariant or drift"));
    }
    let matchers = [
        kind,
        matcher(&rule.operation, "operation", 100)?,
        matcher(&rule.code, "code", 100)?,
        matcher(&rule.subject, "subject", 300)?,
    ];
    if matchers.iter().all(Option::is_none) {
        return Err(Error::invalid(
            "rule_matches_everything",
            None,
            "a rule names at least one of kind, operation, code and subject",
        ));
    }
    let reason = rule.reason.trim();
    if reason.is_empty() || reason.chars().count() > REASON_CAP {
        return Err(Error::invalid("invalid_reason", Some("reason"), "reason is 1 to 500 characters"));
    }
    db.serializable(Scope::Tenant(tenant), |conn, _| {
        Box::pin(async move {
            let Some(created) = store::insert_rule(&mut *conn, tenant, matchers, reason, rule.expires_at, &audit.actor).await?
            else {
                return Err(Error::invalid(
                    "invalid_expiry",
                    Some("expires_at"),
                    "expires_at must be in the future and at most 90 days away",
                ));
            };
            let suppressed = store::suppress_covered(&mut *conn, tenant, created.id).await?;
            let entry = Entry {
                tenant: Some(tenant),
                audit,
                action: "ops.suppress_rule.create",
                target: created.id.to_string(),
                before: None,
                after: Some(serde_json::json!({ "rule": &created, "suppressed": suppressed })),
            };
            admin_log::record(&mut *conn, entry).await?;
            Ok((created, suppressed))
        })
    })
    .await
}

/// A tenant's live rules (or, with `include_dead`, revoked and expired ones too), newest first.
pub async fn rules(db: &Db, tenant: TenantId, include_dead: bool) -> Result<Vec<Rule>> {
    db.single_decision(Scope::Tenant(tenant), |conn, _| Box::pin(store::rules(conn, tenant, include_dead))).await
}

/// Revokes a rule: the findings it suppressed stay suppressed until their next occurrence,
/// which reopens them. Idempotent (a second revoke writes nothing); unknown: `not_found`.
pub async fn revoke_rule(db: &Db, tenant: TenantId, audit: &Audit, id: Uuid) -> Result<Rule> {
    db.serializable(Scope::Tenant(tenant), |conn, _| {
        Box::pin(async move {
            let (rule, changed) = store::revoke_rule(&mut *conn, tenant, id, &audit.actor)
                .await?
                .ok_or(Error::NotFound { what: "suppress rule" })?;
            if changed {
                let entry = Entry {
                    tenant: Some(tenant),
                    audit,
                    action: "ops.suppress_rule.revoke",
                    target: id.to_string(),
                    before: None,
                    after: Some(serde_json::json!({ "revoked_at": rule.revoked_at })),
                };
                admin_log::record(&mut *conn, entry).await?;
            }
            Ok(rule)
        })
    })
    .await
}
