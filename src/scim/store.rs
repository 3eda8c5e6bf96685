//! SCIM SQL: tokens, the directory's Users and Groups, and group membership.

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::PgConnection;
use uuid::Uuid;

use super::ScimToken;
use crate::{error::Result, ids::TenantId};

/// A user or group row as every statement here returns it.
#[derive(Clone, Debug)]
pub struct Resource {
    pub id: Uuid,
    pub attrs: Value,
    pub version: i64,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// What a user row also keeps for queries, derived from its attributes on every write.
pub struct UserKeys<'a> {
    pub user_name_key: &'a str,
    pub external_id: Option<&'a str>,
    pub active: bool,
    pub email: Option<&'a str>,
}

pub async fn insert_token(
    conn: &mut PgConnection,
    tenant: TenantId,
    hash: &[u8],
    prefix: &str,
    name: &str,
    created_by: &str,
) -> Result<ScimToken> {
    Ok(sqlx::query_as!(
        ScimToken,
        "INSERT INTO scim_tokens (tenant_id, id, token_hash, prefix, name, created_by) VALUES ($1, $2, $3, $4, $5, $6)
         RETURNING id, prefix, name, created_by, created_at, last_used_at, revoked_at",
        tenant.0,
        Uuid::now_v7(),
        hash,
        prefix,
        name,
        created_by,
    )
    .fetch_one(conn)
    .await?)
}

pub async fn list_tokens(conn: &mut PgConnection, tenant: TenantId) -> Result<Vec<ScimToken>> {
    Ok(sqlx::query_as!(
        ScimToken,
        "SELECT id, prefix, name, created_by, created_at, last_used_at, revoked_at FROM scim_tokens
          WHERE tenant_id = $1 ORDER BY created_at DESC, id DESC",
        tenant.0,
    )
    .fetch_all(conn)
    .await?)
}

/// Revokes a live token; `None` when it is missing or already revoked.
pub async fn revoke_token(conn: &mut PgConnection, tenant: TenantId, id: Uuid) -> Result<Option<ScimToken>> {
    Ok(sqlx::query_as!(
        ScimToken,
        "UPDATE scim_tokens SET revoked_at = now() WHERE tenant_id = $1 AND id = $2 AND revoked_at IS NULL
         RETURNING id, prefix, name, created_by, created_at, last_used_at, revoked_at",
        tenant.0,
        id,
    )
    .fetch_optional(conn)
    .await?)
}

pub async fn get_token(conn: &mut PgConnection, tenant: TenantId, id: Uuid) -> Result<Option<ScimToken>> {
    Ok(sqlx::query_as!(
        ScimToken,
        "SELECT id, prefix, name, created_by, created_at, last_used_at, revoked_at FROM scim_tokens
          WHERE tenant_id = $1 AND id = $2",
        tenant.0,
        id,
    )
    .fetch_optional(conn)
    .await?)
}

/// The live token with this digest: its tenant and id (platform context: the path's tenant
/// is compared by the caller, so a token of another tenant is told apart from none). Its
/// `last_used_at` moves at most once a minute.
pub async fn authenticate(conn: &mut PgConnection, hash: &[u8]) -> Result<Option<(TenantId, Uuid)>> {
    let row = sqlx::query!("SELECT tenant_id, id FROM scim_tokens WHERE token_hash = $1 AND revoked_at IS NULL", hash)
        .fetch_optional(&mut *conn)
        .await?;
    let Some(row) = row else { return Ok(None) };
    sqlx::query!(
        "UPDATE scim_tokens SET last_used_at = now() WHERE tenant_id = $1 AND id = $2
           AND (last_used_at IS NULL OR last_used_at < now() - interval '1 minute')",
        row.tenant_id,
        row.id,
    )
    .execute(conn)
    .await?;
    Ok(Some((TenantId(row.tenant_id), row.id)))
}

pub async fn insert_user(conn: &mut PgConnection, tenant: TenantId, keys: &UserKeys<'_>, attrs: &Value) -> Result<Resource> {
    Ok(sqlx::query_as!(
        Resource,
        "INSERT INTO scim_users (tenant_id, id, user_name_key, external_id, active, email, attrs)
         VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING id, attrs, version, created_at, updated_at",
        tenant.0,
        Uuid::now_v7(),
        keys.user_name_key,
        keys.external_id,
        keys.active,
        keys.email,
        attrs,
    )
    .fetch_one(conn)
    .await?)
}

pub async fn update_user(
    conn: &mut PgConnection,
    tenant: TenantId,
    id: Uuid,
    keys: &UserKeys<'_>,
    attrs: &Value,
) -> Result<Option<Resource>> {
    Ok(sqlx::query_as!(
        Resource,
        "UPDATE scim_users SET user_name_key = $3, external_id = $4, active = $5, email = $6, attrs = $7,
                version = version + 1, updated_at = now()
          WHERE tenant_id = $1 AND id = $2 RETURNING id, attrs, version, created_at, updated_at",
        tenant.0,
        id,
        keys.user_name_key,
        keys.external_id,
        keys.active,
        keys.email,
        attrs,
    )
    .fetch_optional(conn)
    .await?)
}

/// One user, locked for the rest of the transaction (a patch reads, then writes it).
pub async fn get_user(conn: &mut PgConnection, tenant: TenantId, id: Uuid) -> Result<Option<Resource>> {
    Ok(sqlx::query_as!(
        Resource,
        "SELECT id, attrs, version, created_at, updated_at FROM scim_users WHERE tenant_id = $1 AND id = $2 FOR UPDATE",
        tenant.0,
        id,
    )
    .fetch_optional(conn)
    .await?)
}

/// Every user, or the one whose userName is `user_name_key`, oldest first.
pub async fn list_users(conn: &mut PgConnection, tenant: TenantId, user_name_key: Option<&str>) -> Result<Vec<Resource>> {
    Ok(sqlx::query_as!(
        Resource,
        "SELECT id, attrs, version, created_at, updated_at FROM scim_users
          WHERE tenant_id = $1 AND ($2::text IS NULL OR user_name_key = $2) ORDER BY created_at, id",
        tenant.0,
        user_name_key,
    )
    .fetch_all(conn)
    .await?)
}

pub async fn delete_user(conn: &mut PgConnection, tenant: TenantId, id: Uuid) -> Result<bool> {
    let done = sqlx::query!("DELETE FROM scim_users WHERE tenant_id = $1 AND id = $2", tenant.0, id).execute(conn).await?;
    Ok(done.rows_affected() == 1)
}

/// Which of `ids` are users of the tenant.
pub async fn existing_users(conn: &mut PgConnection, tenant: TenantId, ids: &[Uuid]) -> Result<Vec<Uuid>> {
    Ok(sqlx::query_scalar!("SELECT id FROM scim_users WHERE tenant_id = $1 AND id = ANY($2)", tenant.0, ids)
        .fetch_all(conn)
        .await?)
}

/// A user's email key and active flag.
pub async fn user_keys(conn: &mut PgConnection, tenant: TenantId, id: Uuid) -> Result<Option<(Option<String>, bool)>> {
    let row = sqlx::query!("SELECT email, active FROM scim_users WHERE tenant_id = $1 AND id = $2", tenant.0, id)
        .fetch_optional(conn)
        .await?;
    Ok(row.map(|r| (r.email, r.active)))
}

pub async fn insert_group(
    conn: &mut PgConnection,
    tenant: TenantId,
    display_name_key: &str,
    external_id: Option<&str>,
    attrs: &Value,
) -> Result<Resource> {
    Ok(sqlx::query_as!(
        Resource,
        "INSERT INTO scim_groups (tenant_id, id, display_name_key, external_id, attrs) VALUES ($1, $2, $3, $4, $5)
         RETURNING id, attrs, version, created_at, updated_at",
        tenant.0,
        Uuid::now_v7(),
        display_name_key,
        external_id,
        attrs,
    )
    .fetch_one(conn)
    .await?)
}

pub async fn update_group(
    conn: &mut PgConnection,
    tenant: TenantId,
    id: Uuid,
    display_name_key: &str,
    external_id: Option<&str>,
    attrs: &Value,
) -> Result<Option<Resource>> {
    Ok(sqlx::query_as!(
        Resource,
        "UPDATE scim_groups SET display_name_key = $3, external_id = $4, attrs = $5, version = version + 1, updated_at = now()
          WHERE tenant_id = $1 AND id = $2 RETURNING id, attrs, version, created_at, updated_at",
        tenant.0,
        id,
        display_name_key,
        external_id,
        attrs,
    )
    .fetch_optional(conn)
    .await?)
}

/// One group, locked for the rest of the transaction.
pub async fn get_group(conn: &mut PgConnection, tenant: TenantId, id: Uuid) -> Result<Option<Resource>> {
    Ok(sqlx::query_as!(
        Resource,
        "SELECT id, attrs, version, created_at, updated_at FROM scim_groups WHERE tenant_id = $1 AND id = $2 FOR UPDATE",
        tenant.0,
        id,
    )
    .fetch_optional(conn)
    .await?)
}

/// Every group, or the one whose displayName is `display_name_key`, oldest first.
pub async fn list_groups(conn: &mut PgConnection, tenant: TenantId, display_name_key: Option<&str>) -> Result<Vec<Resource>> {
    Ok(sqlx::query_as!(
        Resource,
        "SELECT id, attrs, version, created_at, updated_at FROM scim_groups
          WHERE tenant_id = $1 AND ($2::text IS NULL OR display_name_key = $2) ORDER BY created_at, id",
        tenant.0,
        display_name_key,
    )
    .fetch_all(conn)
    .await?)
}

pub async fn delete_group(conn: &mut PgConnection, tenant: TenantId, id: Uuid) -> Result<bool> {
    let done = sqlx::query!("DELETE FROM scim_groups WHERE tenant_id = $1 AND id = $2", tenant.0, id).execute(conn).await?;
    Ok(done.rows_affected() == 1)
}

/// A group's member entries (`value`, and `display`/`type` as the directory sent them).
pub async fn group_members(conn: &mut PgConnection, tenant: TenantId, group: Uuid) -> Result<Vec<(Uuid, Value)>> {
    let rows = sqlx::query!(
        "SELECT user_id, entry FROM scim_group_members WHERE tenant_id = $1 AND group_id = $2 ORDER BY user_id",
        tenant.0,
        group,
    )
    .fetch_all(conn)
    .await?;
    Ok(rows.into_iter().map(|r| (r.user_id, r.entry)).collect())
}

/// Replaces a group's members.
pub async fn set_group_members(conn: &mut PgConnection, tenant: TenantId, group: Uuid, members: &[(Uuid, Value)]) -> Result<()> {
    sqlx::query!("DELETE FROM scim_group_members WHERE tenant_id = $1 AND group_id = $2", tenant.0, group)
        .execute(&mut *conn)
        .await?;
    let (users, entries): (Vec<Uuid>, Vec<Value>) = members.iter().cloned().unzip();
    sqlx::query!(
        "INSERT INTO scim_group_members (tenant_id, group_id, user_id, entry)
         SELECT $1, $2, u, e FROM unnest($3::uuid[], $4::jsonb[]) AS m(u, e)",
        tenant.0,
        group,
        &users,
        &entries,
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// The groups of one user: (group id, displayName as stored).
pub async fn groups_of(conn: &mut PgConnection, tenant: TenantId, user: Uuid) -> Result<Vec<(Uuid, String)>> {
    let rows = sqlx::query!(
        "SELECT g.id, g.attrs->>'displayName' AS display FROM scim_group_members m
           JOIN scim_groups g ON g.tenant_id = m.tenant_id AND g.id = m.group_id
          WHERE m.tenant_id = $1 AND m.user_id = $2 ORDER BY g.id",
        tenant.0,
        user,
    )
    .fetch_all(conn)
    .await?;
    Ok(rows.into_iter().map(|r| (r.id, r.display.unwrap_or_default())).collect())
}

/// Every (user, group id, group displayName) of the tenant, for rendering a list of users.
pub async fn all_memberships(conn: &mut PgConnection, tenant: TenantId) -> Result<Vec<(Uuid, Uuid, String)>> {
    let rows = sqlx::query!(
        "SELECT m.user_id, g.id, g.attrs->>'displayName' AS display FROM scim_group_members m
           JOIN scim_groups g ON g.tenant_id = m.tenant_id AND g.id = m.group_id
          WHERE m.tenant_id = $1 ORDER BY g.id",
        tenant.0,
    )
    .fetch_all(conn)
    .await?;
    Ok(rows.into_iter().map(|r| (r.user_id, r.id, r.display.unwrap_or_default())).collect())
}

/// Every (group, member entry) of the tenant, for rendering a list of groups.
pub async fn all_group_members(conn: &mut PgConnection, tenant: TenantId) -> Result<Vec<(Uuid, Value)>> {
    let rows = sqlx::query!("SELECT group_id, entry FROM scim_group_members WHERE tenant_id = $1 ORDER BY user_id", tenant.0,)
        .fetch_all(conn)
        .await?;
    Ok(rows.into_iter().map(|r| (r.group_id, r.entry)).collect())
}

/// The role-group names (`admin`, `operator`, `member`) a user is in, and whether the tenant
/// has any role group at all.
pub async fn role_groups(conn: &mut PgConnection, tenant: TenantId, user: Uuid) -> Result<(Vec<String>, bool)> {
    let mine = sqlx::query_scalar!(
        "SELECT g.display_name_key FROM scim_group_members m
           JOIN scim_groups g ON g.tenant_id = m.tenant_id AND g.id = m.group_id
          WHERE m.tenant_id = $1 AND m.user_id = $2 AND g.display_name_key IN ('admin', 'operator', 'member')",
        tenant.0,
        user,
    )
    .fetch_all(&mut *conn)
    .await?;
    let any = sqlx::query_scalar!(
        r#"SELECT EXISTS (SELECT 1 FROM scim_groups
            WHERE tenant_id = $1 AND display_name_key IN ('admin', 'operator', 'member')) AS "any!""#,
        tenant.0,
    )
    .fetch_one(conn)
    .await?;
    Ok((mine, any))
}
