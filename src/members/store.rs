//! Member and invitation SQL.

use chrono::{DateTime, Utc};
use sqlx::PgConnection;
use uuid::Uuid;

use super::{Invitation, Member, Permission, Principal, Role};
use crate::{error::Result, ids::TenantId};

/// A `members` row before its role is parsed.
struct MemberRow {
    id: Uuid,
    issuer: String,
    subject: String,
    email: Option<String>,
    display_name: Option<String>,
    role: String,
    created_at: DateTime<Utc>,
}

impl TryFrom<MemberRow> for Member {
    type Error = crate::error::Error;

    fn try_from(row: MemberRow) -> Result<Member> {
        Ok(Member {
            id: row.id,
            issuer: row.issuer,
            subject: row.subject,
            email: row.email,
            display_name: row.display_name,
            role: Role::parse(&row.role)?,
            created_at: row.created_at,
        })
    }
}

/// An `invitations` row before its role is parsed.
struct InvitationRow {
    id: Uuid,
    email: String,
    role: String,
    invited_by: String,
    created_at: DateTime<Utc>,
    expires_at: DateTime<Utc>,
    consumed_at: Option<DateTime<Utc>>,
    revoked_at: Option<DateTime<Utc>>,
}

impl TryFrom<InvitationRow> for Invitation {
    type Error = crate::error::Error;

    fn try_from(row: InvitationRow) -> Result<Invitation> {
        Ok(Invitation {
            id: row.id,
            email: row.email,
            role: Role::parse(&row.role)?,
            invited_by: row.invited_by,
            created_at: row.created_at,
            expires_at: row.expires_at,
            consumed_at: row.consumed_at,
            revoked_at: row.revoked_at,
        })
    }
}

pub async fn overrides(conn: &mut PgConnection, tenant: TenantId, role: Role) -> Result<Vec<(Permission, bool)>> {
    let rows = sqlx::query!(
        "SELECT permission, allowed FROM permission_overrides WHERE tenant_id = $1 AND role = $2",
        tenant.0,
        role.as_str(),
    )
    .fetch_all(conn)
    .await?;
    Ok(rows
        .into_iter()
        .filter_map(|row| Permission::ALL.into_iter().find(|p| p.as_str() == row.permission).map(|p| (p, row.allowed)))
        .collect())
}

pub async fn set_override(
    conn: &mut PgConnection,
    tenant: TenantId,
    role: Role,
    p: Permission,
    allowed: Option<bool>,
) -> Result<()> {
    match allowed {
        Some(allowed) => {
            sqlx::query!(
                "INSERT INTO permission_overrides (tenant_id, role, permission, allowed) VALUES ($1, $2, $3, $4)
                 ON CONFLICT (tenant_id, role, permission) DO UPDATE SET allowed = EXCLUDED.allowed",
                tenant.0,
                role.as_str(),
                p.as_str(),
                allowed,
            )
            .execute(conn)
            .await?
        }
        None => {
            sqlx::query!(
                "DELETE FROM permission_overrides WHERE tenant_id = $1 AND role = $2 AND permission = $3",
                tenant.0,
                role.as_str(),
                p.as_str(),
            )
            .execute(conn)
            .await?
        }
    };
    Ok(())
}

pub async fn get(conn: &mut PgConnection, tenant: TenantId, id: Uuid) -> Result<Option<Member>> {
    sqlx::query_as!(
        MemberRow,
        "SELECT id, issuer, subject, email, display_name, role, created_at FROM members WHERE tenant_id = $1 AND id = $2",
        tenant.0,
        id,
    )
    .fetch_optional(conn)
    .await?
    .map(Member::try_from)
    .transpose()
}

pub async fn by_principal(conn: &mut PgConnection, tenant: TenantId, p: &Principal) -> Result<Option<Member>> {
    sqlx::query_as!(
        MemberRow,
        "SELECT id, issuer, subject, email, display_name, role, created_at FROM members
         WHERE tenant_id = $1 AND issuer = $2 AND subject = $3",
        tenant.0,
        p.issuer,
        p.subject,
    )
    .fetch_optional(conn)
    .await?
    .map(Member::try_from)
    .transpose()
}

/// The tenant's members whose email address is `email` (lowercased), oldest first.
pub async fn by_email(conn: &mut PgConnection, tenant: TenantId, email: &str) -> Result<Vec<Member>> {
    sqlx::query_as!(
        MemberRow,
        "SELECT id, issuer, subject, email, display_name, role, created_at FROM members
         WHERE tenant_id = $1 AND lower(email) = $2 ORDER BY created_at, id",
        tenant.0,
        email,
    )
    .fetch_all(conn)
    .await?
    .into_iter()
    .map(Member::try_from)
    .collect()
}

pub async fn set_role(conn: &mut PgConnection, tenant: TenantId, id: Uuid, role: Role) -> Result<bool> {
    Ok(sqlx::query!(
        "UPDATE members SET role = $3, updated_at = now() WHERE tenant_id = $1 AND id = $2",
        tenant.0,
        id,
        role.as_str(),
    )
    .execute(conn)
    .await?
    .rows_affected()
        == 1)
}

pub async fn list(conn: &mut PgConnection, tenant: TenantId) -> Result<Vec<Member>> {
    sqlx::query_as!(
        MemberRow,
        "SELECT id, issuer, subject, email, display_name, role, created_at FROM members
         WHERE tenant_id = $1 ORDER BY created_at, id",
        tenant.0,
    )
    .fetch_all(conn)
    .await?
    .into_iter()
    .map(Member::try_from)
    .collect()
}

pub async fn count_role(conn: &mut PgConnection, tenant: TenantId, role: Role) -> Result<i64> {
    Ok(sqlx::query_scalar!(
        r#"SELECT count(*) AS "count!" FROM members WHERE tenant_id = $1 AND role = $2"#,
        tenant.0,
        role.as_str(),
    )
    .fetch_one(conn)
    .await?)
}

pub async fn delete(conn: &mut PgConnection, tenant: TenantId, id: Uuid) -> Result<bool> {
    Ok(sqlx::query!("DELETE FROM members WHERE tenant_id = $1 AND id = $2", tenant.0, id).execute(conn).await?.rows_affected()
        == 1)
}

/// Adds a member, or refreshes the display fields of an existing one (role unchanged).
pub async fn upsert(
    conn: &mut PgConnection,
    tenant: TenantId,
    p: &Principal,
    email: Option<&str>,
    name: Option<&str>,
    role: Role,
) -> Result<(Member, bool)> {
    let row = sqlx::query!(
        r#"INSERT INTO members (tenant_id, id, issuer, subject, email, display_name, role) VALUES ($1, $2, $3, $4, $5, $6, $7)
           ON CONFLICT (tenant_id, issuer, subject) DO UPDATE
               SET email = EXCLUDED.email, display_name = EXCLUDED.display_name, updated_at = now()
           RETURNING id, issuer, subject, email, display_name, role, created_at, (xmax = 0) AS "inserted!""#,
        tenant.0,
        Uuid::now_v7(),
        p.issuer,
        p.subject,
        email,
        name,
        role.as_str(),
    )
    .fetch_one(conn)
    .await?;
    let member = MemberRow {
        id: row.id,
        issuer: row.issuer,
        subject: row.subject,
        email: row.email,
        display_name: row.display_name,
        role: row.role,
        created_at: row.created_at,
    };
    Ok((member.try_into()?, row.inserted))
}

/// Every tenant (id, slug) the principal is a member of, with the role. Platform context.
pub async fn memberships_of(conn: &mut PgConnection, p: &Principal) -> Result<Vec<(TenantId, String, String, Role)>> {
    let rows = sqlx::query!(
        r#"SELECT t.id AS "id: TenantId", t.slug, t.name, m.role FROM members m JOIN tenants t ON t.id = m.tenant_id
           WHERE m.issuer = $1 AND m.subject = $2 AND t.status IN ('active', 'suspended') ORDER BY t.slug"#,
        p.issuer,
        p.subject,
    )
    .fetch_all(conn)
    .await?;
    rows.into_iter().map(|r| Ok((r.id, r.slug, r.name, Role::parse(&r.role)?))).collect()
}

pub async fn insert_invitation(
    conn: &mut PgConnection,
    tenant: TenantId,
    email: &str,
    role: Role,
    invited_by: &str,
    ttl_days: i64,
) -> Result<Invitation> {
    sqlx::query_as!(
        InvitationRow,
        "INSERT INTO invitations (tenant_id, id, email, role, invited_by, expires_at)
         VALUES ($1, $2, $3, $4, $5, now() + make_interval(days => $6::int))
         RETURNING id, email, role, invited_by, created_at, expires_at, consumed_at, revoked_at",
        tenant.0,
        Uuid::now_v7(),
        email,
        role.as_str(),
        invited_by,
        ttl_days as i32,
    )
    .fetch_one(conn)
    .await?
    .try_into()
}

pub async fn list_invitations(conn: &mut PgConnection, tenant: TenantId) -> Result<Vec<Invitation>> {
    sqlx::query_as!(
        InvitationRow,
        "SELECT id, email, role, invited_by, created_at, expires_at, consumed_at, revoked_at FROM invitations
         WHERE tenant_id = $1 ORDER BY created_at DESC, id",
        tenant.0,
    )
    .fetch_all(conn)
    .await?
    .into_iter()
    .map(Invitation::try_from)
    .collect()
}

pub enum Revoked {
    Now,
    Already,
    Consumed,
    Missing,
}

pub async fn revoke_invitation(conn: &mut PgConnection, tenant: TenantId, id: Uuid) -> Result<Revoked> {
    let done = sqlx::query!(
        "UPDATE invitations SET revoked_at = now()
         WHERE tenant_id = $1 AND id = $2 AND revoked_at IS NULL AND consumed_at IS NULL",
        tenant.0,
        id,
    )
    .execute(&mut *conn)
    .await?;
    if done.rows_affected() == 1 {
        return Ok(Revoked::Now);
    }
    let consumed = sqlx::query_scalar!(
        r#"SELECT consumed_at IS NOT NULL AS "consumed!" FROM invitations WHERE tenant_id = $1 AND id = $2"#,
        tenant.0,
        id,
    )
    .fetch_optional(conn)
    .await?;
    Ok(match consumed {
        None => Revoked::Missing,
        Some(true) => Revoked::Consumed,
        Some(false) => Revoked::Already,
    })
}

/// Claims every outstanding, unexpired invitation for `email` (platform context): each is
/// consumed by one conditional update, so an invitation is used once even when two
/// sign-ins race. Returns (tenant, invitation id, role).
pub async fn claim_invitations(
    conn: &mut PgConnection,
    email: &str,
    only: Option<TenantId>,
) -> Result<Vec<(TenantId, Uuid, Role)>> {
    let rows = sqlx::query!(
        r#"UPDATE invitations SET consumed_at = now()
           WHERE email = $1 AND consumed_at IS NULL AND revoked_at IS NULL AND expires_at > now()
             AND ($2::uuid IS NULL OR tenant_id = $2)
           RETURNING tenant_id AS "tenant_id: TenantId", id, role"#,
        email,
        only.map(|t| t.0),
    )
    .fetch_all(conn)
    .await?;
    rows.into_iter().map(|r| Ok((r.tenant_id, r.id, Role::parse(&r.role)?))).collect()
}

pub async fn mark_invitation_consumer(conn: &mut PgConnection, tenant: TenantId, id: Uuid, member: Uuid) -> Result<()> {
    sqlx::query!("UPDATE invitations SET consumed_by = $3 WHERE tenant_id = $1 AND id = $2", tenant.0, id, member)
        .execute(conn)
        .await?;
    Ok(())
}

/// Raises the membership fence of `p` to the database clock at this statement (never lowers
/// it: `greatest`, and the table's trigger refuses a lower value). `clock_timestamp()`, not
/// `now()`: the fence must not predate the removal's own last steps, or an accept that began
/// while this transaction ran would pass it.
pub async fn raise_fence(conn: &mut PgConnection, tenant: TenantId, p: &Principal) -> Result<DateTime<Utc>> {
    Ok(sqlx::query_scalar!(
        "INSERT INTO member_fences AS f (tenant_id, issuer, subject, raised_at) VALUES ($1, $2, $3, clock_timestamp())
         ON CONFLICT (tenant_id, issuer, subject) DO UPDATE SET raised_at = greatest(f.raised_at, EXCLUDED.raised_at)
         RETURNING raised_at",
        tenant.0,
        p.issuer,
        p.subject,
    )
    .fetch_one(conn)
    .await?)
}

/// The latest removal of `p` from the tenant, if any.
pub async fn fence(conn: &mut PgConnection, tenant: TenantId, p: &Principal) -> Result<Option<DateTime<Utc>>> {
    Ok(sqlx::query_scalar!(
        "SELECT raised_at FROM member_fences WHERE tenant_id = $1 AND issuer = $2 AND subject = $3",
        tenant.0,
        p.issuer,
        p.subject,
    )
    .fetch_optional(conn)
    .await?)
}
