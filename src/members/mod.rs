//! Members (people with a role in a tenant), their permissions, and invitations.

pub mod http;
mod store;

use std::fmt;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::json;
use uuid::Uuid;

use crate::{
    admin_log::{self, Audit, Entry},
    db::{Db, Scope},
    error::{Error, Result},
    ids::TenantId,
};

/// How long an invitation stays valid unless said otherwise.
pub const INVITATION_TTL_DAYS: i64 = 7;

/// A person, as the sessions below the members know them (re-exported here, where most
/// callers look for it).
pub use crate::sessions::Principal;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    Owner,
    Admin,
    Operator,
    Member,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Owner => "owner",
            Role::Admin => "admin",
            Role::Operator => "operator",
            Role::Member => "member",
        }
    }
    pub fn parse(s: &str) -> Result<Role> {
        Ok(match s {
            "owner" => Role::Owner,
            "admin" => Role::Admin,
            "operator" => Role::Operator,
            "member" => Role::Member,
            _ => return Err(Error::invalid("invalid_role", Some("role"), "role is owner, admin, operator or member")),
        })
    }
}

/// What a member may do. Every check denies by default.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Permission {
    ConnectorAccess,
    CredentialAdministration,
    ActivityAccess,
    AccessTokenManagement,
    /// Deciding (approving or denying) the calls a workspace's approval policy holds back.
    ApprovalDecision,
}

impl Permission {
    pub const ALL: [Permission; 5] = [
        Permission::ConnectorAccess,
        Permission::CredentialAdministration,
        Permission::ActivityAccess,
        Permission::AccessTokenManagement,
        Permission::ApprovalDecision,
    ];
    pub fn as_str(self) -> &'static str {
        match self {
            Permission::ConnectorAccess => "connector_access",
            Permission::CredentialAdministration => "credential_administration",
            Permission::ActivityAccess => "activity_access",
            Permission::AccessTokenManagement => "access_token_management",
            Permission::ApprovalDecision => "approval_decision",
        }
    }
    fn bit(self) -> u8 {
        1 << (self as u8)
    }
}

impl fmt::Display for Permission {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A set of permissions.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Permissions(u8);

impl Permissions {
    pub fn none() -> Self {
        Permissions(0)
    }
    /// What a role grants before the tenant's overrides: owner and admin everything;
    /// operator all but token management; member connector access (as granted per
    /// connector) and their own activity.
    pub fn of_role(role: Role) -> Self {
        let set = |ps: &[Permission]| Permissions(ps.iter().fold(0, |acc, p| acc | p.bit()));
        match role {
            Role::Owner | Role::Admin => set(&Permission::ALL),
            Role::Operator => {
                set(&[Permission::ConnectorAccess, Permission::CredentialAdministration, Permission::ActivityAccess])
            }
            Role::Member => set(&[Permission::ConnectorAccess]),
        }
    }
    pub fn with(self, p: Permission, allowed: bool) -> Self {
        if allowed { Permissions(self.0 | p.bit()) } else { Permissions(self.0 & !p.bit()) }
    }
    pub fn has(self, p: Permission) -> bool {
        self.0 & p.bit() != 0
    }
    pub fn list(self) -> Vec<Permission> {
        Permission::ALL.into_iter().filter(|p| self.has(*p)).collect()
    }
}

#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct Member {
    pub id: Uuid,
    pub issuer: String,
    pub subject: String,
    pub email: Option<String>,
    pub display_name: Option<String>,
    pub role: Role,
    pub created_at: DateTime<Utc>,
}

impl Member {
    pub fn principal(&self) -> Principal {
        Principal { issuer: self.issuer.clone(), subject: self.subject.clone() }
    }
}

#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct Invitation {
    pub id: Uuid,
    pub email: String,
    pub role: Role,
    pub invited_by: String,
    pub created_at: DateTime<Utc>,
    pub expires_at: DateTime<Utc>,
    pub consumed_at: Option<DateTime<Utc>>,
    pub revoked_at: Option<DateTime<Utc>>,
}

/// A normalized email address (trimmed, lowercased) that looks like one.
pub fn normalize_email(raw: &str) -> Result<String> {
    let email = raw.trim().to_lowercase();
    let ok = email.len() <= 320
        && email
            .split_once('@')
            .is_some_and(|(local, domain)| !local.is_empty() && domain.contains('.') && !domain.starts_with('.'))
        && !email.chars().any(|c| c.is_whitespace() || c.is_control());
    if !ok {
        return Err(Error::invalid("invalid_email", Some("email"), "not an email address"));
    }
    Ok(email)
}

/// The member's permissions in this tenant: the role's, then the tenant's overrides.
pub async fn permissions(conn: &mut sqlx::PgConnection, tenant: TenantId, role: Role) -> Result<Permissions> {
    let overrides = store::overrides(conn, tenant, role).await?;
    Ok(overrides.into_iter().fold(Permissions::of_role(role), |acc, (p, allowed)| acc.with(p, allowed)))
}

/// Invites `email` as `role`; an outstanding invitation for the same address is refused.
pub async fn invite(db: &Db, tenant: TenantId, audit: &Audit, email: &str, role: Role) -> Result<Invitation> {
    let email = normalize_email(email)?;
    db.serializable(Scope::Tenant(tenant), |conn, _| {
        let email = email.clone();
        Box::pin(async move {
            let inv = store::insert_invitation(&mut *conn, tenant, &email, role, &audit.actor, INVITATION_TTL_DAYS)
                .await
                .map_err(|e| {
                    e.on_constraint("invitations_outstanding", || Error::Conflict {
                        code: "invitation_outstanding",
                        message: "an invitation for this address is already outstanding".into(),
                    })
                })?;
            admin_log::record(
                conn,
                Entry {
                    tenant: Some(tenant),
                    audit,
                    action: "invitation.create",
                    target: format!("invitation:{}", inv.id),
                    before: None,
                    after: Some(json!({ "email": inv.email, "role": inv.role, "expires_at": inv.expires_at })),
                },
            )
            .await?;
            Ok(inv)
        })
    })
    .await
}

/// Revokes an outstanding invitation (idempotent for a revoked one; a consumed one stays).
pub async fn revoke_invitation(db: &Db, tenant: TenantId, audit: &Audit, id: Uuid) -> Result<()> {
    db.serializable(Scope::Tenant(tenant), |conn, _| {
        Box::pin(async move {
            match store::revoke_invitation(&mut *conn, tenant, id).await? {
                store::Revoked::Now => {
                    admin_log::record(
                        conn,
                        Entry {
                            tenant: Some(tenant),
                            audit,
                            action: "invitation.revoke",
                            target: format!("invitation:{id}"),
                            before: None,
                            after: None,
                        },
                    )
                    .await
                }
                store::Revoked::Already => Ok(()),
                store::Revoked::Consumed => {
                    Err(Error::Conflict { code: "invitation_consumed", message: "the invitation was already accepted".into() })
                }
                store::Revoked::Missing => Err(Error::NotFound { what: "invitation" }),
            }
        })
    })
    .await
}

/// Removes a member and ends every session of that person at once; tokens carrying their
/// principal stop authenticating on the next request (machine authentication checks
/// membership). The last owner cannot be removed.
pub async fn remove(db: &Db, tenant: TenantId, audit: &Audit, member: Uuid) -> Result<()> {
    db.serializable(Scope::Tenant(tenant), |conn, _| Box::pin(remove_in(conn, tenant, audit, member))).await
}

/// [`remove`] inside the caller's tenant transaction (SCIM deprovisioning runs it in the same
/// transaction as its own write).
pub async fn remove_in(conn: &mut sqlx::PgConnection, tenant: TenantId, audit: &Audit, member: Uuid) -> Result<()> {
    let m = store::get(&mut *conn, tenant, member).await?.ok_or(Error::NotFound { what: "member" })?;
    if m.role == Role::Owner && store::count_role(&mut *conn, tenant, Role::Owner).await? <= 1 {
        return Err(Error::Conflict { code: "last_owner", message: "a tenant keeps at least one owner".into() });
    }
    store::delete(&mut *conn, tenant, member).await?;
    crate::sessions::end_for_principal(&mut *conn, &m.principal()).await?;
    // Reading the principal's membership again puts it in this transaction's read set,
    // so an accept of the same principal that overlaps this removal (it writes that
    // row) and read the fence before this commits is a serialization conflict: it is
    // retried, then sees the fence. See `accept_invitations`.
    if store::by_principal(&mut *conn, tenant, &m.principal()).await?.is_some() {
        return Err(anyhow::anyhow!("member {member} still present after its removal").into());
    }
    let fence = store::raise_fence(&mut *conn, tenant, &m.principal()).await?;
    admin_log::record(
        conn,
        Entry {
            tenant: Some(tenant),
            audit,
            action: "member.remove",
            target: format!("member:{member}"),
            before: Some(json!({ "issuer": m.issuer, "subject": m.subject, "email": m.email, "role": m.role })),
            after: Some(json!({ "fence_raised_at": fence })),
        },
    )
    .await?;
    Ok(())
}

/// Sets a member's role inside the caller's tenant transaction, with its admin-log row; a
/// role already as asked writes nothing. Owners are not changed here (a tenant's owners are
/// its own, never a directory's).
pub async fn set_role_in(
    conn: &mut sqlx::PgConnection,
    tenant: TenantId,
    audit: &Audit,
    member: &Member,
    role: Role,
) -> Result<()> {
    if member.role == role || member.role == Role::Owner || role == Role::Owner {
        return Ok(());
    }
    if !store::set_role(&mut *conn, tenant, member.id, role).await? {
        return Err(Error::NotFound { what: "member" });
    }
    admin_log::record(
        conn,
        Entry {
            tenant: Some(tenant),
            audit,
            action: "member.role",
            target: format!("member:{}", member.id),
            before: Some(json!({ "role": member.role })),
            after: Some(json!({ "role": role })),
        },
    )
    .await
}

/// Accepts every outstanding invitation for `email` as `p`, inside the caller's sign-in
/// transaction (platform context), with one admin-log row per tenant joined.
///
/// The membership fence (issue 7 §8): `started_at` is when the accepting request started, by
/// the database clock, read in an earlier transaction of that request (the sign-in callback's
/// claim of its flow), so a retry of this transaction cannot move it later. If any tenant
/// removed `p` at or after that instant, the whole accept is refused with 409
/// `membership_fenced` and nothing is written: a removal always wins over an accept that was
/// already in flight when it committed. A new sign-in (a request started after the removal)
/// is admitted.
pub async fn accept_invitations(
    conn: &mut sqlx::PgConnection,
    audit: &Audit,
    p: &Principal,
    email: &str,
    name: Option<&str>,
    started_at: DateTime<Utc>,
) -> Result<()> {
    accept_invitations_in(conn, audit, p, email, name, started_at, None).await
}

/// [`accept_invitations`], of the tenant `only` when given (a sign-in through that tenant's
/// own connection accepts no other tenant's invitations).
pub async fn accept_invitations_in(
    conn: &mut sqlx::PgConnection,
    audit: &Audit,
    p: &Principal,
    email: &str,
    name: Option<&str>,
    started_at: DateTime<Utc>,
    only: Option<TenantId>,
) -> Result<()> {
    for (tenant, invitation, role) in store::claim_invitations(&mut *conn, email, only).await? {
        check_fence(&mut *conn, tenant, p, started_at).await?;
        let (member, _) = store::upsert(&mut *conn, tenant, p, Some(email), name, role).await?;
        store::mark_invitation_consumer(&mut *conn, tenant, invitation, member.id).await?;
        let after = Some(json!({ "member": member.id, "role": member.role, "invitation": invitation }));
        let entry = Entry {
            tenant: Some(tenant),
            audit,
            action: "member.join",
            target: format!("member:{}", member.id),
            before: None,
            after,
        };
        admin_log::record(&mut *conn, entry).await?;
    }
    Ok(())
}

async fn check_fence(conn: &mut sqlx::PgConnection, tenant: TenantId, p: &Principal, started_at: DateTime<Utc>) -> Result<()> {
    if store::fence(conn, tenant, p).await?.is_some_and(|raised| raised >= started_at) {
        return Err(Error::Conflict {
            code: "membership_fenced",
            message: "you were removed from a tenant after this sign-in began; sign in again to accept its invitation".into(),
        });
    }
    Ok(())
}

/// Makes `p` a member of `tenant` with `role` at their first sign-in through the tenant's own
/// connection (just-in-time provisioning), inside the sign-in transaction, with its admin-log
/// row; the membership fence holds as for invitations.
#[allow(clippy::too_many_arguments)]
pub async fn join_in(
    conn: &mut sqlx::PgConnection,
    tenant: TenantId,
    audit: &Audit,
    p: &Principal,
    email: &str,
    name: Option<&str>,
    role: Role,
    started_at: DateTime<Utc>,
) -> Result<()> {
    check_fence(&mut *conn, tenant, p, started_at).await?;
    let (member, _) = store::upsert(&mut *conn, tenant, p, Some(email), name, role).await?;
    let after = Some(json!({ "member": member.id, "role": member.role, "via": "sso" }));
    let target = format!("member:{}", member.id);
    admin_log::record(conn, Entry { tenant: Some(tenant), audit, action: "member.join", target, before: None, after }).await
}

pub async fn list(db: &Db, tenant: TenantId) -> Result<Vec<Member>> {
    db.serializable(Scope::Tenant(tenant), |conn, _| Box::pin(store::list(conn, tenant))).await
}

/// Every tenant (id, slug, name) `principal` is a member of, with the role (platform context:
/// a person may see their own memberships in every tenant).
pub async fn memberships(db: &Db, principal: &Principal) -> Result<Vec<(TenantId, String, String, Role)>> {
    db.serializable(Scope::Platform { reason: "list own memberships" }, move |conn, _| {
        Box::pin(store::memberships_of(conn, principal))
    })
    .await
}

pub async fn list_invitations(db: &Db, tenant: TenantId) -> Result<Vec<Invitation>> {
    db.serializable(Scope::Tenant(tenant), |conn, _| Box::pin(store::list_invitations(conn, tenant))).await
}

/// Every override of the tenant: (role, permission, allowed), roles from owner to member.
pub async fn overrides(db: &Db, tenant: TenantId) -> Result<Vec<(Role, Permission, bool)>> {
    db.single_decision(Scope::Tenant(tenant), |conn, _| {
        Box::pin(async move {
            let mut all = Vec::new();
            for role in [Role::Owner, Role::Admin, Role::Operator, Role::Member] {
                for (p, allowed) in store::overrides(&mut *conn, tenant, role).await? {
                    all.push((role, p, allowed));
                }
            }
            Ok(all)
        })
    })
    .await
}

/// Sets (or with `None` clears) a tenant's override of what `role` grants.
pub async fn set_override(
    db: &Db,
    tenant: TenantId,
    audit: &Audit,
    role: Role,
    permission: Permission,
    allowed: Option<bool>,
) -> Result<()> {
    set_overrides(db, tenant, audit, &[(role, permission, allowed)]).await
}

/// Sets several overrides in one transaction (all or none), one admin-log row per override
/// that changes; an override already as asked writes nothing.
pub async fn set_overrides(db: &Db, tenant: TenantId, audit: &Audit, changes: &[(Role, Permission, Option<bool>)]) -> Result<()> {
    db.serializable(Scope::Tenant(tenant), |conn, _| {
        Box::pin(async move {
            for &(role, permission, allowed) in changes {
                let before =
                    store::overrides(&mut *conn, tenant, role).await?.into_iter().find(|(p, _)| *p == permission).map(|(_, a)| a);
                if before == allowed {
                    continue;
                }
                store::set_override(&mut *conn, tenant, role, permission, allowed).await?;
                admin_log::record(
                    &mut *conn,
                    Entry {
                        tenant: Some(tenant),
                        audit,
                        action: "permission.override",
                        target: format!("role:{}", role.as_str()),
                        before: Some(json!({ permission.as_str(): before })),
                        after: Some(json!({ permission.as_str(): allowed })),
                    },
                )
                .await?;
            }
            Ok(())
        })
    })
    .await
}

impl Permission {
    pub fn parse(s: &str) -> Result<Permission> {
        Permission::ALL.into_iter().find(|p| p.as_str() == s).ok_or_else(|| {
            Error::invalid(
                "invalid_permission",
                Some("permission"),
                "permission is connector_access, credential_administration, activity_access, access_token_management or approval_decision",
            )
        })
    }
}

/// What other nouns may run inside their own transaction; the store itself is private.
pub mod tx {
    pub use super::store::{by_email, by_principal, get, memberships_of, upsert};
    pub use super::{remove_in, set_role_in};
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_grant_what_the_issue_says_and_overrides_apply() {
        let admin = Permissions::of_role(Role::Admin);
        assert!(Permission::ALL.iter().all(|p| admin.has(*p)));
        let op = Permissions::of_role(Role::Operator);
        assert!(!op.has(Permission::AccessTokenManagement) && op.has(Permission::CredentialAdministration));
        let member = Permissions::of_role(Role::Member);
        assert_eq!(member.list(), [Permission::ConnectorAccess]);
        assert!(member.with(Permission::ActivityAccess, true).has(Permission::ActivityAccess));
        assert!(!admin.with(Permission::AccessTokenManagement, false).has(Permission::AccessTokenManagement));
        assert_eq!(Permissions::none().list(), []);
    }

    #[test]
    fn emails() {
        assert_eq!(normalize_email(" Alice@Example.COM ").unwrap(), "alice@example.com");
        for bad in ["", "a", "a@b", "@b.c", "a b@c.d", "a@.c"] {
            assert!(normalize_email(bad).is_err(), "{bad}");
        }
    }
}
