//! Staff impersonation (issue 22 item 3): a platform admin acts inside a tenant only through
//! a grant of that tenant, with a reason and at most [`MAX_MINUTES`] minutes. When the tenant
//! asks for it (its setting, off by default), a grant gives nothing until one of its owners or
//! admins approves it; the first decision wins. The tenant's owners and admins revoke a grant
//! at once: [`crate::auth::TenantCtx`] reads the live grant on every request, in PostgreSQL,
//! like a session, so a revocation holds from the next request on every replica.
//!
//! Under a grant the staff person acts as an admin of the tenant, marked in every admin-log
//! row by the actor `staff:<email>#<grant id>` ([`actor`]); they cannot mint tokens,
//! credentials or links, export sealed secrets, manage members, or decide grants and the
//! setting (`impersonation_forbidden`, see [`crate::auth::TenantCtx::refuse_impersonation`]).

pub mod cli;
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
    sessions::Principal,
};

pub use store::Live;

/// The longest grant, in minutes.
pub const MAX_MINUTES: i64 = 60;
/// A grant's length when the request names none.
pub const DEFAULT_MINUTES: i64 = 30;
/// The longest reason, in characters.
pub const MAX_REASON_CHARS: usize = 500;
/// Grants a list shows at most (newest first).
const LIST_LIMIT: i64 = 200;

/// A grant as the API shows it. `status` is `pending`, `active`, `expired` or `revoked`.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
#[schema(as = ImpersonationGrant)]
pub struct Grant {
    pub id: Uuid,
    pub staff_issuer: String,
    pub staff_subject: String,
    pub staff_email: String,
    pub reason: String,
    pub minutes: i32,
    pub approval_required: bool,
    pub requested_at: DateTime<Utc>,
    pub approved_at: Option<DateTime<Utc>>,
    pub approved_by: Option<String>,
    /// When the grant's clock started (its request, or its approval); `None` while pending.
    pub starts_at: Option<DateTime<Utc>>,
    pub expires_at: Option<DateTime<Utc>>,
    pub revoked_at: Option<DateTime<Utc>>,
    pub revoked_by: Option<String>,
    pub status: String,
}

/// The tenant's impersonation setting.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
#[schema(as = ImpersonationSettings)]
pub struct Settings {
    /// Whether a grant needs a tenant owner's or admin's approval before it gives access.
    pub approval_required: bool,
}

/// The staff person asking for a grant: a signed-in platform admin.
pub struct Staff<'a> {
    pub principal: &'a Principal,
    pub email: &'a str,
}

/// The admin-log actor of everything done under grant `grant` by `email`.
pub fn actor(email: &str, grant: Uuid) -> String {
    format!("staff:{email}#{grant}")
}

/// The staff email and grant id of an [`actor`] string; `None` for any other actor.
pub fn parse_actor(actor: &str) -> Option<(&str, Uuid)> {
    let rest = actor.strip_prefix("staff:")?;
    let (email, grant) = rest.rsplit_once('#')?;
    if email.is_empty() {
        return None;
    }
    Some((email, grant.parse().ok()?))
}

/// A reason: trimmed, 1 to [`MAX_REASON_CHARS`] characters, no control characters.
pub fn normalize_reason(reason: &str) -> Result<String> {
    let reason = reason.trim();
    if reason.is_empty() || reason.chars().count() > MAX_REASON_CHARS || reason.chars().any(char::is_control) {
        return Err(Error::invalid(
            "invalid_reason",
            Some("reason"),
            format!("a reason is 1 to {MAX_REASON_CHARS} characters, without control characters"),
        ));
    }
    Ok(reason.to_owned())
}

/// A grant's length: [`DEFAULT_MINUTES`] when absent, else 1 to [`MAX_MINUTES`].
pub fn check_minutes(minutes: Option<i64>) -> Result<i32> {
    match minutes.unwrap_or(DEFAULT_MINUTES) {
        m @ 1..=MAX_MINUTES => Ok(m as i32),
        _ => Err(Error::invalid("invalid_minutes", Some("minutes"), format!("a grant lasts 1 to {MAX_MINUTES} minutes"))),
    }
}

fn target(id: Uuid) -> String {
    format!("impersonation:{id}")
}

fn logged(grant: &Grant) -> serde_json::Value {
    json!({
        "staff_email": grant.staff_email, "reason": grant.reason, "minutes": grant.minutes,
        "status": grant.status, "expires_at": grant.expires_at,
    })
}

/// Asks for a grant in `tenant` for `staff`: active at once, or pending when the tenant
/// requires approval. Logged in the tenant's admin log (`impersonation.request`, and
/// `impersonation.activate` when its clock starts).
pub async fn request(
    db: &Db,
    tenant: TenantId,
    audit: &Audit,
    staff: &Staff<'_>,
    reason: &str,
    minutes: Option<i64>,
) -> Result<Grant> {
    let reason = normalize_reason(reason)?;
    let minutes = check_minutes(minutes)?;
    let id = Uuid::now_v7();
    db.serializable(Scope::Tenant(tenant), |conn, _| {
        let reason = reason.clone();
        Box::pin(async move {
            let approval_required = store::approval_required(&mut *conn, tenant).await?;
            let new = store::NewGrant {
                id,
                staff: staff.principal,
                staff_email: staff.email,
                reason: &reason,
                minutes,
                approval_required,
            };
            let grant = store::insert(&mut *conn, tenant, &new).await?;
            let entry = |action| Entry {
                tenant: Some(tenant),
                audit,
                action,
                target: target(id),
                before: None,
                after: Some(logged(&grant)),
            };
            admin_log::record(&mut *conn, entry("impersonation.request")).await?;
            if grant.status == "active" {
                admin_log::record(&mut *conn, entry("impersonation.activate")).await?;
            }
            Ok(grant)
        })
    })
    .await
}

/// The tenant's grants, newest first.
pub async fn list(db: &Db, tenant: TenantId) -> Result<Vec<Grant>> {
    db.serializable(Scope::Tenant(tenant), |conn, _| Box::pin(store::list(conn, tenant, false, LIST_LIMIT))).await
}

/// The tenant's active grants (what the console's banner shows its members).
pub async fn active(db: &Db, tenant: TenantId) -> Result<Vec<Grant>> {
    db.serializable(Scope::Tenant(tenant), |conn, _| Box::pin(store::list(conn, tenant, true, LIST_LIMIT))).await
}

/// The conflict of a second decision on a grant (the first one won), or its absence.
async fn decided(conn: &mut sqlx::PgConnection, tenant: TenantId, id: Uuid) -> Error {
    match store::get(conn, tenant, id).await {
        Ok(Some(g)) => Error::Conflict { code: "already_decided", message: format!("this grant is {} already", g.status) },
        Ok(None) => Error::NotFound { what: "impersonation grant" },
        Err(e) => e,
    }
}

/// Approves a pending grant (its clock starts now). A grant that is not pending (approved,
/// revoked, or not needing approval) answers 409 `already_decided`: the first decision wins.
pub async fn approve(db: &Db, tenant: TenantId, audit: &Audit, id: Uuid) -> Result<Grant> {
    db.serializable(Scope::Tenant(tenant), |conn, _| {
        Box::pin(async move {
            let Some(grant) = store::approve(&mut *conn, tenant, id, &audit.actor).await? else {
                return Err(decided(conn, tenant, id).await);
            };
            let entry = |action| Entry {
                tenant: Some(tenant),
                audit,
                action,
                target: target(id),
                before: None,
                after: Some(logged(&grant)),
            };
            admin_log::record(&mut *conn, entry("impersonation.approve")).await?;
            admin_log::record(&mut *conn, entry("impersonation.activate")).await?;
            Ok(grant)
        })
    })
    .await
}

/// Revokes a grant (pending, active or expired): from the staff person's next request it
/// gives nothing. A revoked grant answers 409 `already_decided`.
pub async fn revoke(db: &Db, tenant: TenantId, audit: &Audit, id: Uuid) -> Result<Grant> {
    db.serializable(Scope::Tenant(tenant), |conn, _| {
        Box::pin(async move {
            let Some(grant) = store::revoke(&mut *conn, tenant, id, &audit.actor).await? else {
                return Err(decided(conn, tenant, id).await);
            };
            let entry = Entry {
                tenant: Some(tenant),
                audit,
                action: "impersonation.revoke",
                target: target(id),
                before: None,
                after: Some(logged(&grant)),
            };
            admin_log::record(conn, entry).await?;
            Ok(grant)
        })
    })
    .await
}

/// One grant of the tenant.
pub async fn get(db: &Db, tenant: TenantId, id: Uuid) -> Result<Grant> {
    db.serializable(Scope::Tenant(tenant), |conn, _| Box::pin(store::get(conn, tenant, id)))
        .await?
        .ok_or(Error::NotFound { what: "impersonation grant" })
}

pub async fn settings(db: &Db, tenant: TenantId) -> Result<Settings> {
    let approval_required =
        db.serializable(Scope::Tenant(tenant), |conn, _| Box::pin(store::approval_required(conn, tenant))).await?;
    Ok(Settings { approval_required })
}

/// Sets the tenant's setting, admin-logged with before and after (nothing when unchanged).
pub async fn set_settings(db: &Db, tenant: TenantId, audit: &Audit, next: Settings) -> Result<Settings> {
    db.serializable(Scope::Tenant(tenant), |conn, _| {
        let required = next.approval_required;
        Box::pin(async move {
            let before = store::approval_required(&mut *conn, tenant).await?;
            if before != required {
                store::set_approval_required(&mut *conn, tenant, required).await?;
                let entry = Entry {
                    tenant: Some(tenant),
                    audit,
                    action: "impersonation.settings",
                    target: format!("tenant:{tenant}"),
                    before: Some(json!({ "approval_required": before })),
                    after: Some(json!({ "approval_required": required })),
                };
                admin_log::record(conn, entry).await?;
            }
            Ok(Settings { approval_required: required })
        })
    })
    .await
}

/// What [`crate::auth`] runs inside its own tenant transaction.
pub mod tx {
    pub use super::store::live_for;
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn minutes_default_and_bounds() {
        assert_eq!(check_minutes(None).unwrap(), 30);
        assert_eq!(check_minutes(Some(1)).unwrap(), 1);
        assert_eq!(check_minutes(Some(60)).unwrap(), 60);
        for bad in [0, -1, 61, i64::MAX, i64::MIN] {
            assert_eq!(check_minutes(Some(bad)).unwrap_err().code(), "invalid_minutes", "{bad}");
        }
    }

    #[test]
    fn reasons() {
        assert_eq!(normalize_reason("  ticket 42 ").unwrap(), "ticket 42");
        for bad in ["", "   ", "a\nb", "tab\there", &"x".repeat(501)] {
            assert_eq!(normalize_reason(bad).unwrap_err().code(), "invalid_reason", "{bad:?}");
        }
        assert!(normalize_reason(&"é".repeat(500)).is_ok());
    }

    #[test]
    fn other_actors_are_not_staff() {
        for other in ["member:1", "staff:", "staff:#", "staff:a@b", "staff:#0190b2b2-0000-7000-8000-000000000000", "platform:x#y"]
        {
            assert_eq!(parse_actor(other), None, "{other}");
        }
    }

    proptest! {
        #[test]
        fn minutes_accept_exactly_one_to_sixty(m in any::<i64>()) {
            prop_assert_eq!(check_minutes(Some(m)).is_ok(), (1..=60).contains(&m));
        }

        #[test]
        fn an_accepted_reason_is_trimmed_and_bounded(s in "\\PC{0,600}") {
            match normalize_reason(&s) {
                Ok(r) => {
                    prop_assert_eq!(r.as_str(), s.trim());
                    prop_assert!(!r.is_empty() && r.chars().count() <= MAX_REASON_CHARS);
                }
                Err(e) => {
                    prop_assert_eq!(e.code(), "invalid_reason");
                    prop_assert!(s.trim().is_empty() || s.trim().chars().count() > MAX_REASON_CHARS);
                }
            }
        }

        #[test]
        fn actor_round_trips(email in "[a-z0-9.#+_-]{1,20}@[a-z0-9.-]{1,20}", id in any::<u128>()) {
            let grant = Uuid::from_u128(id);
            let a = actor(&email, grant);
            prop_assert_eq!(parse_actor(&a), Some((email.as_str(), grant)));
        }
    }
}
