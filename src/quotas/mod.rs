//! Durable quotas and rate limits (issue 23 item 2).
//!
//! A tenant's limits say whose calls count (the tenant, each token, each member), which calls
//! (a connector, one of its tools, reads, writes or both), and up to three budgets: requests
//! per fixed window, calls in flight, and calls per UTC day. They are enforced on every
//! replica with no database round trip per call: a replica leases slices of each budget from
//! the ledger in PostgreSQL ([`ledger`]), spends them locally, and returns what it does not
//! use. The ledger never grants more than the budget, so the calls admitted across all
//! replicas in a window never exceed it, and a replica that dies loses at most its slice.

pub mod cli;
pub mod http;
mod input;
mod ledger;
mod store;

pub use input::{Calls, LimitInput, MAX_BUDGET, MAX_LIMITS, Per};
pub use ledger::{Admission, Budgets, Call, Permit, Refusal};

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::json;
use uuid::Uuid;

use crate::{
    admin_log::{self, Audit, Entry},
    db::{Db, Scope},
    error::{Error, Result},
    ids::TenantId,
};

/// A limit as the API shows it.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct Limit {
    pub id: Uuid,
    pub name: String,
    pub per: Per,
    pub connector: Option<String>,
    pub tool: Option<String>,
    pub class: Calls,
    pub requests: Option<i32>,
    pub window_seconds: Option<i32>,
    pub concurrency: Option<i32>,
    pub daily: Option<i32>,
    pub fail_open: bool,
    /// The compare-and-set token: send it back with an update.
    pub version: i64,
    pub created_by: String,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl Limit {
    /// Whether this limit counts a call of `connector.tool` of class `write`.
    pub fn covers(&self, connector: &str, tool: &str, write: bool) -> bool {
        let class = match self.class {
            Calls::Any => true,
            Calls::Read => !write,
            Calls::Write => write,
        };
        class && self.connector.as_deref().is_none_or(|c| c == connector) && self.tool.as_deref().is_none_or(|t| t == tool)
    }
}

fn audit_view(l: &Limit) -> serde_json::Value {
    json!({
        "name": l.name, "per": l.per, "connector": l.connector, "tool": l.tool, "class": l.class,
        "requests": l.requests, "window_seconds": l.window_seconds, "concurrency": l.concurrency,
        "daily": l.daily, "fail_open": l.fail_open, "version": l.version,
    })
}

fn exists(e: Error) -> Error {
    e.on_constraint("quota_limits_name_key", || Error::Conflict {
        code: "quota_exists",
        message: "this tenant already has a limit of that name".into(),
    })
}

fn changed() -> Error {
    Error::Precondition {
        code: "quota_changed",
        message: "the limit changed since you read it; read it again and redo your edit".into(),
    }
}

async fn stored(conn: &mut sqlx::PgConnection, tenant: TenantId, id: Uuid) -> Result<Limit> {
    store::get(conn, tenant, id).await?.ok_or(Error::NotFound { what: "quota" })
}

/// Adds a limit and its admin-log row in one transaction. Every replica applies it on its
/// next call (the change moves the tenant's epoch).
pub async fn create(db: &Db, tenant: TenantId, audit: &Audit, input: &LimitInput) -> Result<Limit> {
    let checked = input::check(input)?;
    let id = Uuid::now_v7();
    db.serializable(Scope::Tenant(tenant), |conn, _| {
        let checked = &checked;
        Box::pin(async move {
            if store::count(&mut *conn, tenant).await? >= MAX_LIMITS {
                return Err(Error::Conflict {
                    code: "quota_cap",
                    message: format!("a tenant holds at most {MAX_LIMITS} limits"),
                });
            }
            store::insert(&mut *conn, tenant, id, checked, &audit.actor).await.map_err(exists)?;
            let l = stored(&mut *conn, tenant, id).await?;
            let entry = Entry {
                tenant: Some(tenant),
                audit,
                action: "quota.create",
                target: format!("quota:{id}"),
                before: None,
                after: Some(audit_view(&l)),
            };
            admin_log::record(conn, entry).await?;
            Ok(l)
        })
    })
    .await
}

/// Replaces a limit by compare-and-set on `version` (412 `quota_changed`). A budget that
/// changes applies from the next window; the current window keeps the budget it began with.
pub async fn update(db: &Db, tenant: TenantId, audit: &Audit, id: Uuid, input: &LimitInput) -> Result<Limit> {
    let checked = input::check(input)?;
    let version = input.version.ok_or(Error::invalid(
        "invalid_version",
        Some("version"),
        "an update names the version it was made from",
    ))?;
    db.serializable(Scope::Tenant(tenant), |conn, _| {
        let checked = &checked;
        Box::pin(async move {
            let before = stored(&mut *conn, tenant, id).await?;
            if before.version != version || !store::update(&mut *conn, tenant, id, checked, version).await.map_err(exists)? {
                return Err(changed());
            }
            let after = stored(&mut *conn, tenant, id).await?;
            let entry = Entry {
                tenant: Some(tenant),
                audit,
                action: "quota.update",
                target: format!("quota:{id}"),
                before: Some(audit_view(&before)),
                after: Some(audit_view(&after)),
            };
            admin_log::record(conn, entry).await?;
            Ok(after)
        })
    })
    .await
}

/// Removes a limit and its ledger: calls stop counting against it on every replica's next call.
pub async fn delete(db: &Db, tenant: TenantId, audit: &Audit, id: Uuid) -> Result<()> {
    db.serializable(Scope::Tenant(tenant), |conn, _| {
        Box::pin(async move {
            let before = stored(&mut *conn, tenant, id).await?;
            store::delete(&mut *conn, tenant, id).await?;
            let entry = Entry {
                tenant: Some(tenant),
                audit,
                action: "quota.delete",
                target: format!("quota:{id}"),
                before: Some(audit_view(&before)),
                after: None,
            };
            admin_log::record(conn, entry).await
        })
    })
    .await
}

pub async fn list(db: &Db, tenant: TenantId) -> Result<Vec<Limit>> {
    db.serializable(Scope::Tenant(tenant), |conn, _| Box::pin(store::list(conn, tenant))).await
}

pub async fn get(db: &Db, tenant: TenantId, id: Uuid) -> Result<Limit> {
    db.serializable(Scope::Tenant(tenant), |conn, _| Box::pin(store::get(conn, tenant, id)))
        .await?
        .ok_or(Error::NotFound { what: "quota" })
}

/// One row of the usage ledger, for the API and the report.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct Usage {
    pub limit: String,
    pub subject: String,
    /// `rate` (the limit's window) or `daily`.
    pub kind: String,
    pub window_start: DateTime<Utc>,
    pub budget: i32,
    /// Leased by replicas and not returned (spent or held).
    pub granted: i32,
    /// Admitted calls the replicas have reported.
    pub used: i32,
    /// Calls refused for lack of budget.
    pub refused: i32,
}

/// The newest windows of the tenant's ledger (at most `limit` rows).
pub async fn usage(db: &Db, tenant: TenantId, limit: i64) -> Result<Vec<Usage>> {
    db.serializable(Scope::Tenant(tenant), |conn, _| Box::pin(store::usage(conn, tenant, limit))).await
}
