//! The registry of workspace-owned tables: every table whose rows belong to one workspace,
//! and what each operation on a workspace's state does with them. Forks and reaps delete
//! through it, and it records what forks and snapshots carry and what an erasure rewrites.
//! `tests/reap.rs` checks it against the database catalog, so a new table that names a
//! workspace cannot be left out of it. Why each table has its fate: `docs/decisions.md`,
//! "Workspace-owned tables".

use sqlx::PgConnection;
use uuid::Uuid;

use Carry::{All, Nothing, Shared};
use Erasure::{DeleteMember, Redact, Untouched};
use Fate::{Delete, DeleteWithRow, Keep};
use Rows::{Column, McpGrant};

use crate::{error::Result, ids::TenantId};

/// How a table's rows name their workspace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rows {
    /// A `workspace_id` column.
    Column,
    /// A `grant_id` of an `mcp_grants` row, which has the `workspace_id`.
    McpGrant,
}

/// What deleting a workspace's state does with the table's rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fate {
    /// State a copy holds: a reap deletes it in the reaped workspace and in every unsettled
    /// copy of it; deleting a disposable workspace deletes it too.
    Delete,
    /// The workspace's own identity and configuration: deleted only with the workspace row
    /// itself (migration 16's reap guard refuses anything else).
    DeleteWithRow,
    /// Outlives the workspace: the evidence of what happened to it (move ledger, erasure
    /// receipts, tombstone).
    Keep,
}

/// What a fork or a snapshot carries of the table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Carry {
    /// Every row, sealed anew where it is sealed.
    All,
    /// Only the workspace-wide rows (`shared` credential slots and static OAuth client secrets).
    Shared,
    /// Nothing: the copy starts without these rows.
    Nothing,
}

/// What a subject erasure does with the table's rows in every copy it reaches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Erasure {
    /// The subject is rewritten out of the rows.
    Redact,
    /// The member's own rows are deleted.
    DeleteMember,
    /// Holds nothing of a subject.
    Untouched,
}

/// One workspace-owned table.
#[derive(Clone, Copy, Debug)]
pub struct Table {
    pub name: &'static str,
    pub rows: Rows,
    pub fate: Fate,
    pub fork: Carry,
    pub snapshot: Carry,
    pub erasure: Erasure,
}

const fn table(name: &'static str, rows: Rows, fate: Fate, fork: Carry, snapshot: Carry, erasure: Erasure) -> Table {
    Table { name, rows, fate, fork, snapshot, erasure }
}

/// Every workspace-owned table (the `workspaces` row itself aside), children before their
/// parents: deletions run in this order.
pub const TABLES: &[Table] = &[
    table("mcp_tokens", McpGrant, Delete, Nothing, Nothing, DeleteMember),
    table("mcp_codes", McpGrant, Delete, Nothing, Nothing, DeleteMember),
    table("mcp_grants", Column, Delete, Nothing, Nothing, DeleteMember),
    table("oauth_flows", Column, Delete, Nothing, Nothing, Untouched),
    table("oauth_revocations", Column, Delete, Nothing, Nothing, Untouched),
    table("oauth_grants", Column, Delete, Nothing, Nothing, DeleteMember),
    table("credentials", Column, Delete, Shared, All, DeleteMember),
    table("connector_catalogs", Column, Delete, All, All, Untouched),
    table("tool_pins", Column, Delete, All, Nothing, Untouched),
    table("agent_subscriptions", Column, Delete, Nothing, Nothing, Untouched),
    table("agent_log_levels", Column, Delete, Nothing, Nothing, Untouched),
    table("result_stash", Column, Delete, Nothing, Nothing, Untouched),
    table("approvals", Column, Delete, Nothing, Nothing, Redact),
    table("activity", Column, Delete, Nothing, All, Redact),
    table("ops_failures", Column, Delete, Nothing, Nothing, Redact),
    table("peer_bindings", Column, Delete, Nothing, Nothing, Untouched),
    table("connect_links", Column, DeleteWithRow, Nothing, Nothing, Untouched),
    table("oauth_clients", Column, DeleteWithRow, Nothing, Nothing, Untouched),
    table("workspace_versions", Column, DeleteWithRow, Nothing, Nothing, Untouched),
    table("copies", Column, Keep, Nothing, Nothing, Untouched),
    table("erasure_receipts", Column, Keep, Nothing, Nothing, Untouched),
    table("workspace_tombstones", Column, Keep, Nothing, Nothing, Untouched),
];

/// Deletes the state of `workspaces` from every registered table; `with_row` also deletes
/// their own rows (the caller deletes the workspace rows themselves, last). Returns the rows
/// deleted per table.
pub async fn delete_state(
    conn: &mut PgConnection,
    tenant: TenantId,
    workspaces: &[Uuid],
    with_row: bool,
) -> Result<serde_json::Map<String, serde_json::Value>> {
    let mut counts = serde_json::Map::new();
    let deleted = TABLES.iter().filter(|t| t.fate == Delete || (with_row && t.fate == DeleteWithRow));
    for t in deleted {
        let condition = match t.rows {
            Column => "workspace_id = ANY($2)",
            McpGrant => "grant_id IN (SELECT id FROM mcp_grants WHERE tenant_id = $1 AND workspace_id = ANY($2))",
        };
        let n = sqlx::query(sqlx::AssertSqlSafe(format!("DELETE FROM {} WHERE tenant_id = $1 AND {condition}", t.name)))
            .bind(tenant)
            .bind(workspaces)
            .execute(&mut *conn)
            .await?
            .rows_affected();
        counts.insert(t.name.to_owned(), serde_json::Value::from(n));
    }
    Ok(counts)
}
