//! Tool pins SQL, tenant first in every function.

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::PgConnection;
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

/// Runs `query_as!` into a [`PinRow`] with the one column list of a pin pasted between the
/// literals `[$before…]` and `$after` (the query macros accept literals joined by `+`, never a
/// `const`).
macro_rules! pin {
    ([$($before:literal),+] $after:literal, $($arg:expr),+ $(,)?) => {
        sqlx::query_as!(
            PinRow,
            $($before +)+ "connector_id AS connector, tool_name AS tool, digest, definition, pending_digest, pending, pinned_at, \
                           changed_at, approved_at, approved_by" + $after,
            $($arg),+
        )
    };
}

/// The connector's pins, locked for the catalog store's decision.
pub async fn for_connector(conn: &mut PgConnection, tenant: TenantId, workspace: Uuid, connector: &str) -> Result<Vec<PinRow>> {
    Ok(pin!(
        ["SELECT "] " FROM tool_pins WHERE tenant_id = $1 AND workspace_id = $2 AND connector_id = $3 \
         ORDER BY tool_name FOR UPDATE",
        tenant.0,
        workspace,
        connector,
    )
    .fetch_all(conn)
    .await?)
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
    sqlx::query!(
        "INSERT INTO tool_pins (tenant_id, workspace_id, connector_id, tool_name, digest, definition, pending_digest,
                                pending, changed_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, CASE WHEN $7::text IS NULL THEN NULL ELSE clock_timestamp() END)
         ON CONFLICT DO NOTHING",
        t.tenant.0,
        t.workspace,
        t.connector_id,
        tool,
        approved.map(|(d, _)| d),
        approved.map(|(_, v)| v),
        pending.map(|(d, _)| d),
        pending.map(|(_, v)| v),
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// Sets (or clears) the definition waiting for approval.
pub async fn set_pending(conn: &mut PgConnection, t: Target<'_>, tool: &str, pending: Option<(&str, &Value)>) -> Result<()> {
    sqlx::query!(
        "UPDATE tool_pins SET pending_digest = $5, pending = $6,
                changed_at = CASE WHEN $5::text IS NULL THEN changed_at ELSE clock_timestamp() END
          WHERE tenant_id = $1 AND workspace_id = $2 AND connector_id = $3 AND tool_name = $4",
        t.tenant.0,
        t.workspace,
        t.connector_id,
        tool,
        pending.map(|(d, _)| d),
        pending.map(|(_, v)| v),
    )
    .execute(conn)
    .await?;
    Ok(())
}

pub async fn list(conn: &mut PgConnection, tenant: TenantId, workspace: Uuid, quarantined_only: bool) -> Result<Vec<PinRow>> {
    Ok(pin!(
        ["SELECT "] " FROM tool_pins WHERE tenant_id = $1 AND workspace_id = $2 \
           AND (NOT $3 OR pending_digest IS NOT NULL) ORDER BY connector_id, tool_name",
        tenant.0,
        workspace,
        quarantined_only,
    )
    .fetch_all(conn)
    .await?)
}

pub async fn get(
    conn: &mut PgConnection,
    tenant: TenantId,
    workspace: Uuid,
    connector: &str,
    tool: &str,
) -> Result<Option<PinRow>> {
    Ok(pin!(
        ["SELECT "] " FROM tool_pins WHERE tenant_id = $1 AND workspace_id = $2 AND connector_id = $3 AND tool_name = $4",
        tenant.0,
        workspace,
        connector,
        tool,
    )
    .fetch_optional(conn)
    .await?)
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
    Ok(pin!(
        ["UPDATE tool_pins SET digest = pending_digest, definition = pending, pending_digest = NULL, pending = NULL,
                approved_at = clock_timestamp(), approved_by = $6
          WHERE tenant_id = $1 AND workspace_id = $2 AND connector_id = $3 AND tool_name = $4 AND pending_digest = $5
          RETURNING "] "",
        tenant.0,
        workspace,
        connector,
        tool,
        reviewed,
        by,
    )
    .fetch_optional(conn)
    .await?)
}
