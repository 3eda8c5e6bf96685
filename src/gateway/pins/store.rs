//! Tool pins SQL, tenant first in every function.

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::{PgConnection, Row, postgres::PgRow};
use uuid::Uuid;

use super::super::catalogs::Target;
use crate::{error::Result, ids::TenantId};

/// One `tool_pins` row.
pub struct PinRow {
    pub connector: String,
    pub tool: String,
    pub digest: Option<String>,
    pub definition: Option<Value>,
    pub pending_digest: Option<String>,
    pub pending: Option<Value>,
    pub pinned_at: DateTime<Utc>,
    pub changed_at: Option<DateTime<Utc>>,
    pub approved_at: Option<DateTime<Utc>>,
    pub approved_by: Option<String>,
}

const COLUMNS: &str = "connector_id, tool_name, digest, definition, pending_digest, pending, pinned_at, changed_at, \
                       approved_at, approved_by";

fn row(r: &PgRow) -> Result<PinRow> {
    Ok(PinRow {
        connector: r.try_get("connector_id")?,
        tool: r.try_get("tool_name")?,
        digest: r.try_get("digest")?,
        definition: r.try_get("definition")?,
        pending_digest: r.try_get("pending_digest")?,
        pending: r.try_get("pending")?,
        pinned_at: r.try_get("pinned_at")?,
        changed_at: r.try_get("changed_at")?,
        approved_at: r.try_get("approved_at")?,
        approved_by: r.try_get("approved_by")?,
    })
}

/// The connector's pins, locked for the catalog store's decision.
pub async fn for_connector(conn: &mut PgConnection, tenant: TenantId, workspace: Uuid, connector: &str) -> Result<Vec<PinRow>> {
    let sql = format!(
        "SELECT {COLUMNS} FROM tool_pins WHERE tenant_id = $1 AND workspace_id = $2 AND connector_id = $3 \
         ORDER BY tool_name FOR UPDATE"
    );
    sqlx::query(sqlx::AssertSqlSafe(sql))
        .bind(tenant)
        .bind(workspace)
        .bind(connector)
        .fetch_all(conn)
        .await?
        .iter()
        .map(row)
        .collect()
}

/// A first sight: pinned (`approved`) or quarantined (`pending`). A concurrent first sight of
/// the same tool is a serialization failure of one of the two (retried, then seen).
pub async fn insert(
    conn: &mut PgConnection,
    t: Target<'_>,
    tool: &str,
    approved: Option<(&str, &Value)>,
    pending: Option<(&str, &Value)>,
) -> Result<()> {
    sqlx::query(
        "INSERT INTO tool_pins (tenant_id, workspace_id, connector_id, tool_name, digest, definition, pending_digest,
                                pending, changed_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, CASE WHEN $7::text IS NULL THEN NULL ELSE clock_timestamp() END)
         ON CONFLICT DO NOTHING",
    )
    .bind(t.tenant)
    .bind(t.workspace)
    .bind(t.connector_id)
    .bind(tool)
    .bind(approved.map(|(d, _)| d))
    .bind(approved.map(|(_, v)| v))
    .bind(pending.map(|(d, _)| d))
    .bind(pending.map(|(_, v)| v))
    .execute(conn)
    .await?;
    Ok(())
}

/// Sets (or clears) the definition waiting for approval.
pub async fn set_pending(conn: &mut PgConnection, t: Target<'_>, tool: &str, pending: Option<(&str, &Value)>) -> Result<()> {
    sqlx::query(
        "UPDATE tool_pins SET pending_digest = $5, pending = $6,
                changed_at = CASE WHEN $5::text IS NULL THEN changed_at ELSE clock_timestamp() END
          WHERE tenant_id = $1 AND workspace_id = $2 AND connector_id = $3 AND tool_name = $4",
    )
    .bind(t.tenant)
    .bind(t.workspace)
    .bind(t.connector_id)
    .bind(tool)
    .bind(pending.map(|(d, _)| d))
    .bind(pending.map(|(_, v)| v))
    .execute(conn)
    .await?;
    Ok(())
}

pub async fn list(conn: &mut PgConnection, tenant: TenantId, workspace: Uuid, quarantined_only: bool) -> Result<Vec<PinRow>> {
    let sql = format!(
        "SELECT {COLUMNS} FROM tool_pins WHERE tenant_id = $1 AND workspace_id = $2 \
           AND (NOT $3 OR pending_digest IS NOT NULL) ORDER BY connector_id, tool_name"
    );
    sqlx::query(sqlx::AssertSqlSafe(sql))
        .bind(tenant)
        .bind(workspace)
        .bind(quarantined_only)
        .fetch_all(conn)
        .await?
        .iter()
        .map(row)
        .collect()
}

pub async fn get(
    conn: &mut PgConnection,
    tenant: TenantId,
    workspace: Uuid,
    connector: &str,
    tool: &str,
) -> Result<Option<PinRow>> {
    let sql = format!(
        "SELECT {COLUMNS} FROM tool_pins WHERE tenant_id = $1 AND workspace_id = $2 AND connector_id = $3 AND tool_name = $4"
    );
    sqlx::query(sqlx::AssertSqlSafe(sql))
        .bind(tenant)
        .bind(workspace)
        .bind(connector)
        .bind(tool)
        .fetch_optional(conn)
        .await?
        .as_ref()
        .map(row)
        .transpose()
}

/// The compare-and-set approval: the pending definition becomes the pinned one only if it is
/// still the one reviewed.
pub async fn approve(
    conn: &mut PgConnection,
    tenant: TenantId,
    workspace: Uuid,
    connector: &str,
    tool: &str,
    reviewed: &str,
    by: &str,
) -> Result<Option<PinRow>> {
    let sql = format!(
        "UPDATE tool_pins SET digest = pending_digest, definition = pending, pending_digest = NULL, pending = NULL,
                approved_at = clock_timestamp(), approved_by = $6
          WHERE tenant_id = $1 AND workspace_id = $2 AND connector_id = $3 AND tool_name = $4 AND pending_digest = $5
          RETURNING {COLUMNS}"
    );
    sqlx::query(sqlx::AssertSqlSafe(sql))
        .bind(tenant)
        .bind(workspace)
        .bind(connector)
        .bind(tool)
        .bind(reviewed)
        .bind(by)
        .fetch_optional(conn)
        .await?
        .as_ref()
        .map(row)
        .transpose()
}
