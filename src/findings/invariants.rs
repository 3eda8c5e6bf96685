//! Scheduled invariant checks: each replica runs them every [`EVERY`] (one at a time across
//! replicas, through a transaction-level advisory lock) and records what fails as an
//! `invariant` finding of the tenant concerned, subject `<check>:<workspace id>`. The same
//! pass resolves stale findings, so a deployment that records no failure still ages them out.
//!
//! The checks look for control-plane state that should never last:
//! - `copy_lease_overdue`: a pending copy whose lease ran out more than [`GRACE`] ago and that
//!   no recovery sweep has claimed (the sweep is not running, or keeps failing);
//! - `reap_stuck`: a workspace whose reap was claimed more than [`GRACE`] ago and is not
//!   finished (a reap that cannot complete, e.g. a table it does not know references it).

use std::time::Duration;

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::Observation;
use crate::{
    db::{Db, Scope},
    error::Result,
};

/// How often a replica runs the checks.
pub const EVERY: Duration = Duration::from_secs(60);
/// How long past its deadline a state must be before it counts as broken.
pub const GRACE: &str = "10 minutes";
/// Advisory lock key of the pass (one replica at a time; the others skip that round).
const LOCK: i64 = 0x6761_7465_696e_7631;

type Broken = (Uuid, Uuid, i64, DateTime<Utc>);

/// Runs the checks once: returns the findings observed, or `None` when another replica held
/// the pass.
pub async fn check_once(db: &Db) -> Result<Option<usize>> {
    db.serializable(Scope::Platform { reason: "invariant checks" }, |conn, _| {
        Box::pin(async move {
            let locked =
                sqlx::query_scalar!(r#"SELECT pg_try_advisory_xact_lock($1) AS "locked!""#, LOCK).fetch_one(&mut *conn).await?;
            if !locked {
                return Ok(None);
            }
            let overdue: Vec<Broken> = sqlx::query!(
                r#"SELECT tenant_id, workspace_id, count(*) AS "n!", min(lease_until) AS "since!" FROM copies
                 WHERE state = 'pending' AND lease_owner IS NULL AND lease_until < now() - $1::text::interval
                 GROUP BY tenant_id, workspace_id"#,
                GRACE,
            )
            .fetch_all(&mut *conn)
            .await?
            .into_iter()
            .map(|r| (r.tenant_id, r.workspace_id, r.n, r.since))
            .collect();
            let stuck: Vec<Broken> = sqlx::query!(
                r#"SELECT tenant_id, id, 1::bigint AS "n!", reap_claimed_at AS "since!" FROM workspaces
                 WHERE reap_claimed_at IS NOT NULL AND reap_claimed_at < now() - $1::text::interval"#,
                GRACE,
            )
            .fetch_all(&mut *conn)
            .await?
            .into_iter()
            .map(|r| (r.tenant_id, r.id, r.n, r.since))
            .collect();
            let now: DateTime<Utc> = sqlx::query_scalar!(r#"SELECT now() AS "now!""#).fetch_one(&mut *conn).await?;
            let observe = |check: &str, operation: &str, (tenant, workspace, n, since): &Broken, message: String| Observation {
                tenant: *tenant,
                kind: "invariant",
                subject: format!("{check}:{workspace}"),
                operation: operation.into(),
                code: check.into(),
                count: 1,
                first: now.min(*since + chrono::Duration::minutes(10)),
                last: now,
                message: format!("{message} ({n})"),
            };
            let mut found: Vec<Observation> = overdue
                .iter()
                .map(|b| observe("copy_lease_overdue", "copies.sweep", b, "pending copies past their lease, unclaimed".into()))
                .collect();
            found.extend(
                stuck.iter().map(|b| observe("reap_stuck", "workspace.reap", b, "a claimed reap is not finishing".into())),
            );
            super::observe(&mut *conn, &found).await?;
            super::sweep_stale(&mut *conn).await?;
            Ok(Some(found.len()))
        })
    })
    .await
}

/// The checks' loop, in every replica.
pub async fn run(db: Db) {
    let mut tick = tokio::time::interval(EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        match check_once(&db).await {
            Ok(Some(n)) if n > 0 => tracing::warn!(findings = n, "invariant checks failed"),
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "invariant checks could not run"),
        }
    }
}
