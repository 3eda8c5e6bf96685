//! Approvals: a write that a workspace's approval policy holds back is not made; it is
//! answered `approval_required` with one of these, which names the caller, the tool, the
//! digest of the call's canonical arguments ([`canonical`]), the policy (configuration)
//! version and an expiry. A person with `approval_decision` approves or denies it (the first
//! decision wins); the approved call runs once, when the same caller makes the same call
//! again under the same policy version before the expiry ([`claim`]).
//!
//! Every transition is one compare-and-set in a serializable transaction with its admin-log
//! row: `approval.request`, `approval.approve`, `approval.deny`, `approval.use`.

pub mod canonical;
pub mod http;
mod store;

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

/// Approvals listed at most.
pub const LIST_LIMIT: i64 = 200;
/// The longest reason a decision may carry.
pub const MAX_REASON: usize = 500;

/// One approval as the API and the console show it.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct Approval {
    pub id: Uuid,
    /// The workspace's slug.
    pub workspace: String,
    #[serde(skip)]
    pub workspace_id: Uuid,
    /// `token` or `oauth`.
    pub actor_kind: String,
    /// The caller: the access token's (or OAuth grant's) id.
    pub actor_id: String,
    /// The caller's person, if the token carries one.
    pub member_id: Option<Uuid>,
    pub connector: String,
    pub tool: String,
    /// `sha256:` and the hex digest of the call's canonical arguments.
    pub args_digest: String,
    /// The workspace's configuration version (which holds the policy) the call was made under.
    pub policy_version: i32,
    /// `pending`, `approved`, `denied`, `used` or `expired`.
    pub state: String,
    pub requested_at: DateTime<Utc>,
    pub expires_at: DateTime<Utc>,
    pub decided_at: Option<DateTime<Utc>>,
    /// `member:<id>` of the approver.
    pub decided_by: Option<String>,
    pub reason: Option<String>,
    pub used_at: Option<DateTime<Utc>>,
}

/// The exact call an approval binds.
#[derive(Clone, Copy, Debug)]
pub struct Call<'a> {
    pub workspace: Uuid,
    pub actor_kind: &'a str,
    pub actor_id: &'a str,
    pub member_id: Option<Uuid>,
    pub connector: &'a str,
    pub tool: &'a str,
    /// [`canonical::digest`] of the arguments.
    pub digest: &'a str,
    pub policy_version: i32,
    pub request_id: Option<&'a str>,
}

/// What the gateway may do with a call the policy holds back.
#[derive(Debug)]
pub enum Claim {
    /// An approval of exactly this call was used now: make the call (once).
    Run(Uuid),
    /// Not approved (yet): the approval waiting for a decision, made now or earlier.
    Required(Box<Approval>),
    /// The named approval cannot run this call: a stable code and why.
    Refused { code: &'static str, message: String },
}

fn target(id: Uuid) -> String {
    format!("approval:{id}")
}

fn logged(a: &Approval) -> serde_json::Value {
    json!({
        "workspace": a.workspace, "actor": { "kind": a.actor_kind, "id": a.actor_id }, "connector": a.connector,
        "tool": a.tool, "args_digest": a.args_digest, "policy_version": a.policy_version, "state": a.state,
        "expires_at": a.expires_at, "reason": a.reason,
    })
}

/// The gateway's claim on a held-back call. With `id` (the agent names the approval it was
/// given): that approval is used if it is approved, unexpired, and binds exactly this call;
/// else a refusal saying why. Without: an approved approval of exactly this call is used if
/// there is one (the agent retried the same call), else the pending one is answered again, or
/// a new one is requested (expiring after `expires_in_s`).
pub async fn claim(
    db: &Db,
    tenant: TenantId,
    audit: &Audit,
    id: Option<Uuid>,
    call: Call<'_>,
    expires_in_s: u32,
) -> Result<Claim> {
    db.serializable(Scope::Tenant(tenant), move |conn, _| {
        Box::pin(async move {
            if let Some(used) = store::consume(&mut *conn, tenant, id, &call).await? {
                let approval = store::get(&mut *conn, tenant, used).await?.ok_or(Error::NotFound { what: "approval" })?;
                let entry = Entry {
                    tenant: Some(tenant),
                    audit,
                    action: "approval.use",
                    target: target(used),
                    before: Some(json!({ "state": "approved" })),
                    after: Some(logged(&approval)),
                };
                admin_log::record(&mut *conn, entry).await?;
                return Ok(Claim::Run(used));
            }
            if let Some(id) = id {
                return Ok(refusal(store::get(&mut *conn, tenant, id).await?, &call));
            }
            if let Some(waiting) = store::pending_for(&mut *conn, tenant, &call).await? {
                let approval = store::get(&mut *conn, tenant, waiting).await?.ok_or(Error::NotFound { what: "approval" })?;
                return Ok(Claim::Required(Box::new(approval)));
            }
            let new = Uuid::now_v7();
            store::insert(&mut *conn, tenant, new, &call, expires_in_s.min(i32::MAX as u32) as i32).await?;
            let approval = store::get(&mut *conn, tenant, new).await?.ok_or(Error::NotFound { what: "approval" })?;
            let entry = Entry {
                tenant: Some(tenant),
                audit,
                action: "approval.request",
                target: target(new),
                before: None,
                after: Some(logged(&approval)),
            };
            admin_log::record(&mut *conn, entry).await?;
            Ok(Claim::Required(Box::new(approval)))
        })
    })
    .await
}

/// Why the named approval cannot run `call` (it was not used by [`store::consume`]).
fn refusal(approval: Option<Approval>, call: &Call<'_>) -> Claim {
    let refuse = |code, message: &str| Claim::Refused { code, message: message.to_owned() };
    // Another caller's (or workspace's) approval is indistinguishable from a missing one.
    let Some(a) = approval.filter(|a| a.workspace_id == call.workspace && a.actor_id == call.actor_id) else {
        return refuse("approval_not_found", "no such approval for this caller here");
    };
    if a.connector != call.connector || a.tool != call.tool {
        return refuse("approval_mismatch", "this approval is for another tool; a new call needs a new approval");
    }
    if a.args_digest != call.digest {
        return refuse(
            "approval_mismatch",
            "the arguments differ from the approved ones; call without approval_id to request a new approval",
        );
    }
    if a.policy_version != call.policy_version {
        return refuse(
            "approval_stale",
            "the workspace's policy changed since this approval was requested; call without approval_id to request a new approval",
        );
    }
    match a.state.as_str() {
        "pending" => refuse("approval_pending", "this approval is still waiting for a decision; retry after it is approved"),
        "denied" => Claim::Refused {
            code: "approval_denied",
            message: format!("this call was denied: {}", a.reason.as_deref().unwrap_or("no reason given")),
        },
        "used" => refuse("approval_used", "this approval was used already; an approved call runs once"),
        _ => refuse("approval_expired", "this approval expired; call without approval_id to request a new approval"),
    }
}

/// Approves (`approve`) or denies a pending approval. A decided one answers 409
/// `already_decided` (the first decision wins), an expired one 409 `approval_expired`.
pub async fn decide(db: &Db, tenant: TenantId, audit: &Audit, id: Uuid, approve: bool, reason: Option<&str>) -> Result<Approval> {
    let reason = reason.map(str::trim).filter(|r| !r.is_empty());
    if reason.is_some_and(|r| r.chars().count() > MAX_REASON || r.chars().any(char::is_control)) {
        return Err(Error::invalid("invalid_reason", Some("reason"), "a reason is at most 500 characters, on one line"));
    }
    if !approve && reason.is_none() {
        return Err(Error::invalid("invalid_reason", Some("reason"), "a denial gives its reason"));
    }
    let (state, action) = if approve { ("approved", "approval.approve") } else { ("denied", "approval.deny") };
    db.serializable(Scope::Tenant(tenant), move |conn, _| {
        Box::pin(async move {
            let Some(decided) = store::decide(&mut *conn, tenant, id, state, &audit.actor, reason).await? else {
                return Err(match store::get(&mut *conn, tenant, id).await? {
                    None => Error::NotFound { what: "approval" },
                    Some(a) if a.state == "expired" => {
                        Error::Conflict { code: "approval_expired", message: "this approval expired before a decision".into() }
                    }
                    Some(a) => {
                        Error::Conflict { code: "already_decided", message: format!("this approval is {} already", a.state) }
                    }
                });
            };
            let approval = store::get(&mut *conn, tenant, decided).await?.ok_or(Error::NotFound { what: "approval" })?;
            let entry = Entry {
                tenant: Some(tenant),
                audit,
                action,
                target: target(id),
                before: Some(json!({ "state": "pending" })),
                after: Some(logged(&approval)),
            };
            admin_log::record(&mut *conn, entry).await?;
            Ok(approval)
        })
    })
    .await
}

/// One approval of the tenant; another tenant's answers `not_found`.
pub async fn get(db: &Db, tenant: TenantId, id: Uuid) -> Result<Approval> {
    db.single_decision(Scope::Tenant(tenant), |conn, _| Box::pin(store::get(conn, tenant, id)))
        .await?
        .ok_or(Error::NotFound { what: "approval" })
}

/// The tenant's approvals, newest first (`pending`: only those waiting for a decision).
pub async fn list(db: &Db, tenant: TenantId, pending: bool) -> Result<Vec<Approval>> {
    db.single_decision(Scope::Tenant(tenant), |conn, _| Box::pin(store::list(conn, tenant, pending, LIST_LIMIT))).await
}

/// Where a person decides the approval in the console.
pub fn url(public_url: &str, tenant_slug: &str, id: Uuid) -> String {
    format!("{}/console/t/{tenant_slug}/approvals/{id}", public_url.trim_end_matches('/'))
}
