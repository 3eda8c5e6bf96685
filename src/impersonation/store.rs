//! Impersonation SQL: grants and the tenant's setting. A grant's `status` is derived here,
//! in one place, from its columns and the database's clock.

use chrono::{DateTime, Utc};
use sqlx::PgConnection;
use uuid::Uuid;

use super::Grant;
use crate::{error::Result, ids::TenantId, sessions::Principal};

/// What a request for a grant inserts.
pub struct NewGrant<'a> {
    pub id: Uuid,
    pub staff: &'a Principal,
    pub staff_email: &'a str,
    pub reason: &'a str,
    pub minutes: i32,
    pub approval_required: bool,
}

/// The live grant a request of the staff person acts under.
#[derive(Clone, Debug)]
pub struct Live {
    pub id: Uuid,
    pub staff_email: String,
    pub starts_at: DateTime<Utc>,
    pub expires_at: DateTime<Utc>,
}

pub async fn approval_required(conn: &mut PgConnection, tenant: TenantId) -> Result<bool> {
    Ok(sqlx::query_scalar!("SELECT approval_required FROM impersonation_settings WHERE tenant_id = $1", tenant.0)
        .fetch_optional(conn)
        .await?
        .unwrap_or(false))
}

pub async fn set_approval_required(conn: &mut PgConnection, tenant: TenantId, required: bool) -> Result<()> {
    sqlx::query!(
        "INSERT INTO impersonation_settings (tenant_id, approval_required) VALUES ($1, $2)
         ON CONFLICT (tenant_id) DO UPDATE SET approval_required = EXCLUDED.approval_required, updated_at = now()",
        tenant.0,
        required,
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// Inserts a grant: active at once when no approval is needed, else pending.
pub async fn insert(conn: &mut PgConnection, tenant: TenantId, new: &NewGrant<'_>) -> Result<Grant> {
    Ok(sqlx::query_as!(
        Grant,
        r#"INSERT INTO impersonations (tenant_id, id, staff_issuer, staff_subject, staff_email, reason, minutes, approval_required,
                                       starts_at, expires_at)
           VALUES ($1, $2, $3, $4, $5, $6, $7, $8,
                   CASE WHEN $8 THEN NULL ELSE now() END,
                   CASE WHEN $8 THEN NULL ELSE now() + make_interval(mins => $7) END)
           RETURNING id, staff_issuer, staff_subject, staff_email, reason, minutes, approval_required, requested_at,
                     approved_at, approved_by, starts_at, expires_at, revoked_at, revoked_by,
                     CASE WHEN revoked_at IS NOT NULL THEN 'revoked' WHEN expires_at IS NULL THEN 'pending'
                          WHEN expires_at <= now() THEN 'expired' ELSE 'active' END AS "status!""#,
        tenant.0,
        new.id,
        new.staff.issuer,
        new.staff.subject,
        new.staff_email,
        new.reason,
        new.minutes,
        new.approval_required,
    )
    .fetch_one(conn)
    .await?)
}

/// The tenant's grants, newest first (at most `limit`); with `live_only`, only active ones.
pub async fn list(conn: &mut PgConnection, tenant: TenantId, live_only: bool, limit: i64) -> Result<Vec<Grant>> {
    Ok(sqlx::query_as!(
        Grant,
        r#"SELECT id, staff_issuer, staff_subject, staff_email, reason, minutes, approval_required, requested_at,
                  approved_at, approved_by, starts_at, expires_at, revoked_at, revoked_by,
                  CASE WHEN revoked_at IS NOT NULL THEN 'revoked' WHEN expires_at IS NULL THEN 'pending'
                       WHEN expires_at <= now() THEN 'expired' ELSE 'active' END AS "status!"
             FROM impersonations
            WHERE tenant_id = $1 AND (NOT $2 OR (revoked_at IS NULL AND expires_at > now()))
            ORDER BY requested_at DESC, id DESC LIMIT $3"#,
        tenant.0,
        live_only,
        limit,
    )
    .fetch_all(conn)
    .await?)
}

pub async fn get(conn: &mut PgConnection, tenant: TenantId, id: Uuid) -> Result<Option<Grant>> {
    Ok(sqlx::query_as!(
        Grant,
        r#"SELECT id, staff_issuer, staff_subject, staff_email, reason, minutes, approval_required, requested_at,
                  approved_at, approved_by, starts_at, expires_at, revoked_at, revoked_by,
                  CASE WHEN revoked_at IS NOT NULL THEN 'revoked' WHEN expires_at IS NULL THEN 'pending'
                       WHEN expires_at <= now() THEN 'expired' ELSE 'active' END AS "status!"
             FROM impersonations WHERE tenant_id = $1 AND id = $2"#,
        tenant.0,
        id,
    )
    .fetch_optional(conn)
    .await?)
}

/// Approves a pending grant and starts its clock; `None` when it is not pending (missing,
/// already approved, or revoked): the first decision wins.
pub async fn approve(conn: &mut PgConnection, tenant: TenantId, id: Uuid, by: &str) -> Result<Option<Grant>> {
    Ok(sqlx::query_as!(
        Grant,
        r#"UPDATE impersonations
              SET approved_at = now(), approved_by = $3, starts_at = now(), expires_at = now() + make_interval(mins => minutes)
            WHERE tenant_id = $1 AND id = $2 AND approval_required AND approved_at IS NULL AND revoked_at IS NULL
           RETURNING id, staff_issuer, staff_subject, staff_email, reason, minutes, approval_required, requested_at,
                     approved_at, approved_by, starts_at, expires_at, revoked_at, revoked_by,
                     CASE WHEN revoked_at IS NOT NULL THEN 'revoked' WHEN expires_at IS NULL THEN 'pending'
                          WHEN expires_at <= now() THEN 'expired' ELSE 'active' END AS "status!""#,
        tenant.0,
        id,
        by,
    )
    .fetch_optional(conn)
    .await?)
}

/// Revokes a grant that is not revoked yet (pending, active or expired); `None` otherwise.
pub async fn revoke(conn: &mut PgConnection, tenant: TenantId, id: Uuid, by: &str) -> Result<Option<Grant>> {
    Ok(sqlx::query_as!(
        Grant,
        r#"UPDATE impersonations SET revoked_at = now(), revoked_by = $3
            WHERE tenant_id = $1 AND id = $2 AND revoked_at IS NULL
           RETURNING id, staff_issuer, staff_subject, staff_email, reason, minutes, approval_required, requested_at,
                     approved_at, approved_by, starts_at, expires_at, revoked_at, revoked_by,
                     'revoked' AS "status!""#,
        tenant.0,
        id,
        by,
    )
    .fetch_optional(conn)
    .await?)
}

/// The staff person's live grant in the tenant, if any (the one that lasts longest).
pub async fn live_for(conn: &mut PgConnection, tenant: TenantId, staff: &Principal) -> Result<Option<Live>> {
    Ok(sqlx::query_as!(
        Live,
        r#"SELECT id, staff_email, starts_at AS "starts_at!", expires_at AS "expires_at!" FROM impersonations
            WHERE tenant_id = $1 AND staff_issuer = $2 AND staff_subject = $3
              AND revoked_at IS NULL AND expires_at > now()
            ORDER BY expires_at DESC LIMIT 1"#,
        tenant.0,
        staff.issuer,
        staff.subject,
    )
    .fetch_optional(conn)
    .await?)
}
