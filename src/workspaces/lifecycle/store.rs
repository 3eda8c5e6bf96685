//! Lifecycle SQL: the conditional updates that decide transitions and binds.

use chrono::{DateTime, Utc};
use sqlx::PgConnection;
use uuid::Uuid;

use crate::{
    error::Result,
    ids::TenantId,
    ids::WorkspaceId,
    workspaces::{Workspace, store::workspace},
};

/// What a bind decides on, as its transaction read it.
#[derive(Clone, Debug)]
pub struct Current {
    pub id: WorkspaceId,
    pub status: String,
    pub bound_version: i32,
    pub revision: i64,
    pub erasure_epoch: i64,
    pub reap_claimed_at: Option<DateTime<Utc>>,
    pub blueprint_id: Option<Uuid>,
    pub blueprint_version: Option<i32>,
}

pub async fn current(conn: &mut PgConnection, tenant: TenantId, slug: &str) -> Result<Option<Current>> {
    Ok(sqlx::query_as!(
        Current,
        r#"SELECT id AS "id: WorkspaceId", status, bound_version, revision, erasure_epoch, reap_claimed_at, blueprint_id,
                  blueprint_version
             FROM workspaces WHERE tenant_id = $1 AND slug = $2"#,
        tenant.0,
        slug,
    )
    .fetch_optional(conn)
    .await?)
}

/// The transition's compare-and-set: `to` only from one of `from`, never while a reap is
/// claimed, with the revision bumped in the same statement.
pub async fn transition(
    conn: &mut PgConnection,
    tenant: TenantId,
    slug: &str,
    from: &[&str],
    to: &str,
) -> Result<Option<Workspace>> {
    let from: Vec<String> = from.iter().map(|s| (*s).to_owned()).collect();
    Ok(workspace!(
        ["UPDATE workspaces AS w SET status = $4, revision = revision + 1, updated_at = now()
          WHERE tenant_id = $1 AND slug = $2 AND status = ANY($3) AND reap_claimed_at IS NULL
         RETURNING "] "",
        tenant.0,
        slug,
        &from,
        to,
    )
    .fetch_optional(conn)
    .await?)
}

/// What a bind expects to still hold, and what it sets.
pub struct BindCas {
    pub id: WorkspaceId,
    pub from_version: i32,
    pub erasure_epoch: i64,
    pub to_version: i32,
    pub blueprint_id: Uuid,
    pub blueprint_version: i32,
}

/// The bind's compare-and-set: only if the workspace still runs the version read, its erasure
/// epoch is the one read, no reap is claimed and it is active or suspended.
pub async fn bind(conn: &mut PgConnection, tenant: TenantId, cas: &BindCas) -> Result<Option<Workspace>> {
    Ok(workspace!(
        ["UPDATE workspaces AS w
            SET bound_version = $5, blueprint_id = $6, blueprint_version = $7, revision = revision + 1, updated_at = now()
          WHERE tenant_id = $1 AND id = $2 AND bound_version = $3 AND erasure_epoch = $4
            AND reap_claimed_at IS NULL AND status IN ('active', 'suspended')
         RETURNING "] "",
        tenant.0,
        cas.id.0,
        cas.from_version,
        cas.erasure_epoch,
        cas.to_version,
        cas.blueprint_id,
        cas.blueprint_version,
    )
    .fetch_optional(conn)
    .await?)
}
