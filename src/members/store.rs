//! Member and invitation SQL.

use sqlx::{PgConnection, Row, postgres::PgRow};
use uuid::Uuid;

use super::{Invitation, Member, Permission, Principal, Role};
use crate::{error::Result, ids::TenantId};

macro_rules! member_columns {
    () => {
        "id, issuer, subject, email, display_name, role, created_at"
    };
}
macro_rules! invitation_columns {
    () => {
        "id, email, role, invited_by, created_at, expires_at, consumed_at, revoked_at"
    };
}

fn member(row: &PgRow) -> Result<Member> {
    Ok(Member {
        id: row.try_get("id")?,
        issuer: row.try_get("issuer")?,
        subject: row.try_get("subject")?,
        email: row.try_get("email")?,
        display_name: row.try_get("display_name")?,
        role: Role::parse(row.try_get("role")?)?,
        created_at: row.try_get("created_at")?,
    })
}

fn invitation(row: &PgRow) -> Result<Invitation> {
    Ok(Invitation {
        id: row.try_get("id")?,
        email: row.try_get("email")?,
        role: Role::parse(row.try_get("role")?)?,
        invited_by: row.try_get("invited_by")?,
        created_at: row.try_get("created_at")?,
        expires_at: row.try_get("expires_at")?,
        consumed_at: row.try_get("consumed_at")?,
        revoked_at: row.try_get("revoked_at")?,
    })
}

pub async fn overrides(conn: &mut PgConnection, tenant: TenantId, role: Role) -> Result<Vec<(Permission, bool)>> {
    let rows = sqlx::query("SELECT permission, allowed FROM permission_overrides WHERE tenant_id = $1 AND role = $2")
        .bind(tenant)
        .bind(role.as_str())
        .fetch_all(conn)
        .await?;
    let mut out = Vec::new();
    for row in rows {
        let name: String = row.try_get("permission")?;
        if let Some(p) = Permission::ALL.into_iter().find(|p| p.as_str() == name) {
            out.push((p, row.try_get("allowed")?));
        }
    }
    Ok(out)
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
            sqlx::query(
                "INSERT INTO permission_overrides (tenant_id, role, permission, allowed) VALUES ($1, $2, $3, $4)
             ON CONFLICT (tenant_id, role, permission) DO UPDATE SET allowed = EXCLUDED.allowed",
            )
            .bind(tenant)
            .bind(role.as_str())
            .bind(p.as_str())
            .bind(allowed)
            .execute(conn)
            .await?
        }
        None => {
            sqlx::query("DELETE FROM permission_overrides WHERE tenant_id = $1 AND role = $2 AND permission = $3")
                .bind(tenant)
                .bind(role.as_str())
                .bind(p.as_str())
                .execute(conn)
                .await?
        }
    };
    Ok(())
}

pub async fn get(conn: &mut PgConnection, tenant: TenantId, id: Uuid) -> Result<Option<Member>> {
    sqlx::query(concat!("SELECT ", member_columns!(), " FROM members WHERE tenant_id = $1 AND id = $2"))
        .bind(tenant)
        .bind(id)
        .fetch_optional(conn)
        .await?
        .as_ref()
        .map(member)
        .transpose()
}

pub async fn by_principal(conn: &mut PgConnection, tenant: TenantId, p: &Principal) -> Result<Option<Member>> {
    sqlx::query(concat!("SELECT ", member_columns!(), " FROM members WHERE tenant_id = $1 AND issuer = $2 AND subject = $3"))
        .bind(tenant)
        .bind(&p.issuer)
        .bind(&p.subject)
        .fetch_optional(conn)
        .await?
        .as_ref()
        .map(member)
        .transpose()
}

pub async fn list(conn: &mut PgConnection, tenant: TenantId) -> Result<Vec<Member>> {
    sqlx::query(concat!("SELECT ", member_columns!(), " FROM members WHERE tenant_id = $1 ORDER BY created_at, id"))
        .bind(tenant)
        .fetch_all(conn)
        .await?
        .iter()
        .map(member)
        .collect()
}

pub async fn count_role(conn: &mut PgConnection, tenant: TenantId, role: Role) -> Result<i64> {
    Ok(sqlx::query_scalar("SELECT count(*) FROM members WHERE tenant_id = $1 AND role = $2")
        .bind(tenant)
        .bind(role.as_str())
        .fetch_one(conn)
        .await?)
}

pub async fn delete(conn: &mut PgConnection, tenant: TenantId, id: Uuid) -> Result<bool> {
    Ok(sqlx::query("DELETE FROM members WHERE tenant_id = $1 AND id = $2")
        .bind(tenant)
        .bind(id)
        .execute(conn)
        .await?
        .rows_affected()
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
    let row = sqlx::query(concat!(
        "INSERT INTO members (tenant_id, id, issuer, subject, email, display_name, role) VALUES ($1, $2, $3, $4, $5, $6, $7)
         ON CONFLICT (tenant_id, issuer, subject) DO UPDATE SET email = EXCLUDED.email, display_name = EXCLUDED.display_name, updated_at = now()
         RETURNING ",
        member_columns!(),
        ", (xmax = 0) AS inserted"
    ))
    .bind(tenant)
    .bind(Uuid::now_v7())
    .bind(&p.issuer)
    .bind(&p.subject)
    .bind(email)
    .bind(name)
    .bind(role.as_str())
    .fetch_one(conn)
    .await?;
    Ok((member(&row)?, row.try_get("inserted")?))
}

/// Every tenant (id, slug) the principal is a member of, with the role. Platform context.
pub async fn memberships_of(conn: &mut PgConnection, p: &Principal) -> Result<Vec<(TenantId, String, String, Role)>> {
    let rows = sqlx::query(
        "SELECT t.id, t.slug, t.name, m.role FROM members m JOIN tenants t ON t.id = m.tenant_id
         WHERE m.issuer = $1 AND m.subject = $2 AND t.status IN ('active', 'suspended') ORDER BY t.slug",
    )
    .bind(&p.issuer)
    .bind(&p.subject)
    .fetch_all(conn)
    .await?;
    rows.iter()
        .map(|r| Ok((TenantId(r.try_get("id")?), r.try_get("slug")?, r.try_get("name")?, Role::parse(r.try_get("role")?)?)))
        .collect()
}

pub async fn insert_invitation(
    conn: &mut PgConnection,
    tenant: TenantId,
    email: &str,
    role: Role,
    invited_by: &str,
    ttl_days: i64,
) -> Result<Invitation> {
    let row = sqlx::query(concat!(
        "INSERT INTO invitations (tenant_id, id, email, role, invited_by, expires_at)
         VALUES ($1, $2, $3, $4, $5, now() + make_interval(days => $6::int)) RETURNING ",
        invitation_columns!()
    ))
    .bind(tenant)
    .bind(Uuid::now_v7())
    .bind(email)
    .bind(role.as_str())
    .bind(invited_by)
    .bind(ttl_days as i32)
    .fetch_one(conn)
    .await?;
    invitation(&row)
}

pub async fn list_invitations(conn: &mut PgConnection, tenant: TenantId) -> Result<Vec<Invitation>> {
    sqlx::query(concat!("SELECT ", invitation_columns!(), " FROM invitations WHERE tenant_id = $1 ORDER BY created_at DESC, id"))
        .bind(tenant)
        .fetch_all(conn)
        .await?
        .iter()
        .map(invitation)
        .collect()
}

pub enum Revoked {
    Now,
    Already,
    Consumed,
    Missing,
}

pub async fn revoke_invitation(conn: &mut PgConnection, tenant: TenantId, id: Uuid) -> Result<Revoked> {
    let done = sqlx::query(
        "UPDATE invitations SET revoked_at = now() WHERE tenant_id = $1 AND id = $2 AND revoked_at IS NULL AND consumed_at IS NULL",
    )
    .bind(tenant)
    .bind(id)
    .execute(&mut *conn)
    .await?;
    if done.rows_affected() == 1 {
        return Ok(Revoked::Now);
    }
    let row = sqlx::query("SELECT consumed_at IS NOT NULL AS consumed FROM invitations WHERE tenant_id = $1 AND id = $2")
        .bind(tenant)
        .bind(id)
        .fetch_optional(conn)
        .await?;
    Ok(match row {
        None => Revoked::Missing,
        Some(r) if r.try_get::<bool, _>("consumed")? => Revoked::Consumed,
        Some(_) => Revoked::Already,
    })
}

/// Claims every outstanding, unexpired invitation for `email` (platform context): each is
/// consumed by one conditional update, so an invitation is used once even when two
/// sign-ins race. Returns (tenant, invitation id, role).
pub async fn claim_invitations(conn: &mut PgConnection, email: &str) -> Result<Vec<(TenantId, Uuid, Role)>> {
    let rows = sqlx::query(
        "UPDATE invitations SET consumed_at = now()
         WHERE email = $1 AND consumed_at IS NULL AND revoked_at IS NULL AND expires_at > now()
         RETURNING tenant_id, id, role",
    )
    .bind(email)
    .fetch_all(conn)
    .await?;
    rows.iter().map(|r| Ok((TenantId(r.try_get("tenant_id")?), r.try_get("id")?, Role::parse(r.try_get("role")?)?))).collect()
}

pub async fn mark_invitation_consumer(conn: &mut PgConnection, tenant: TenantId, id: Uuid, member: Uuid) -> Result<()> {
    sqlx::query("UPDATE invitations SET consumed_by = $3 WHERE tenant_id = $1 AND id = $2")
        .bind(tenant)
        .bind(id)
        .bind(member)
        .execute(conn)
        .await?;
    Ok(())
}

/// Raises the membership fence of `p` to the database clock at this statement (never lowers
/// it: `greatest`, and the table's trigger refuses a lower value). `clock_timestamp()`, not
/// `now()`: the fence must not predate the removal's own last steps, or an accept that began
/// while this transaction ran would pass it.
pub async fn raise_fence(conn: &mut PgConnection, tenant: TenantId, p: &Principal) -> Result<chrono::DateTime<chrono::Utc>> {
    Ok(sqlx::query_scalar(
        "INSERT INTO member_fences AS f (tenant_id, issuer, subject, raised_at) VALUES ($1, $2, $3, clock_timestamp())
         ON CONFLICT (tenant_id, issuer, subject) DO UPDATE SET raised_at = greatest(f.raised_at, EXCLUDED.raised_at)
         RETURNING raised_at",
    )
    .bind(tenant)
    .bind(&p.issuer)
    .bind(&p.subject)
    .fetch_one(conn)
    .await?)
}

/// The latest removal of `p` from the tenant, if any.
pub async fn fence(conn: &mut PgConnection, tenant: TenantId, p: &Principal) -> Result<Option<chrono::DateTime<chrono::Utc>>> {
    Ok(sqlx::query_scalar("SELECT raised_at FROM member_fences WHERE tenant_id = $1 AND issuer = $2 AND subject = $3")
        .bind(tenant)
        .bind(&p.issuer)
        .bind(&p.subject)
        .fetch_optional(conn)
        .await?)
}
