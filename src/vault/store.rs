//! Credential slot SQL, tenant first in every function (rotation is platform work).

use chrono::{DateTime, Utc};
use sqlx::PgConnection;
use uuid::Uuid;

use super::{Owner, slots::Slot};
use crate::{db::required, error::Result, ids::TenantId};

/// One slot's row, with its sealed envelope.
#[derive(Clone)]
pub struct Stored {
    pub key_id: String,
    pub envelope: String,
    pub fields: serde_json::Value,
    pub version: i64,
    pub updated_at: DateTime<Utc>,
    pub updated_by: String,
}

impl std::fmt::Debug for Stored {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stored").field("key_id", &self.key_id).field("version", &self.version).finish_non_exhaustive()
    }
}

/// The slot's row and the tenant's epoch, read in one statement (so the epoch labels exactly
/// the state read).
pub async fn get(
    conn: &mut PgConnection,
    tenant: TenantId,
    workspace: Uuid,
    connector: &str,
    owner: Owner,
) -> Result<(Option<Stored>, i64)> {
    // The slot's columns come from the outer side of a join, so each is read as nullable ("?")
    // and required once the row is there.
    let row = sqlx::query!(
        r#"SELECT (SELECT epoch FROM tenants WHERE id = $1) AS "epoch?", c.key_id AS "key_id?", c.envelope AS "envelope?",
                c.fields AS "fields?", c.version AS "version?", c.updated_at AS "updated_at?", c.updated_by AS "updated_by?"
           FROM (SELECT 1) one
           LEFT JOIN credentials c ON c.tenant_id = $1 AND c.workspace_id = $2 AND c.connector_id = $3 AND c.owner = $4"#,
        tenant.0,
        workspace,
        connector,
        owner.as_text(),
    )
    .fetch_one(conn)
    .await?;
    let stored = match row.key_id {
        None => None,
        Some(key_id) => Some(Stored {
            key_id,
            envelope: required(row.envelope, "envelope")?,
            fields: required(row.fields, "fields")?,
            version: required(row.version, "version")?,
            updated_at: required(row.updated_at, "updated_at")?,
            updated_by: required(row.updated_by, "updated_by")?,
        }),
    };
    Ok((stored, row.epoch.unwrap_or(0)))
}

/// Inserts or replaces the slot's envelope (the version counts replacements). Returns the row
/// and whether it replaced one. The slot carries the tenant.
pub async fn upsert(
    conn: &mut PgConnection,
    slot: &Slot<'_>,
    key_id: &str,
    envelope: &str,
    fields: &serde_json::Value,
    updated_by: &str,
) -> Result<(Stored, bool)> {
    let Slot { tenant, workspace, connector, owner } = *slot;
    let row = sqlx::query!(
        r#"INSERT INTO credentials AS c (tenant_id, workspace_id, connector_id, owner, member_id, key_id, envelope, fields, updated_by)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
         ON CONFLICT (tenant_id, workspace_id, connector_id, owner) DO UPDATE
            SET key_id = EXCLUDED.key_id, envelope = EXCLUDED.envelope, fields = EXCLUDED.fields,
                version = c.version + 1, updated_at = clock_timestamp(), updated_by = EXCLUDED.updated_by
         RETURNING c.key_id, c.envelope, c.fields, c.version, c.updated_at, c.updated_by, (c.version > 1) AS "replaced!""#,
        tenant.0,
        workspace,
        connector,
        owner.as_text(),
        owner.member_id(),
        key_id,
        envelope,
        fields,
        updated_by,
    )
    .fetch_one(conn)
    .await?;
    let stored = Stored {
        key_id: row.key_id,
        envelope: row.envelope,
        fields: row.fields,
        version: row.version,
        updated_at: row.updated_at,
        updated_by: row.updated_by,
    };
    Ok((stored, row.replaced))
}

/// Deletes the slot's row; its version if there was one.
pub async fn delete(
    conn: &mut PgConnection,
    tenant: TenantId,
    workspace: Uuid,
    connector: &str,
    owner: Owner,
) -> Result<Option<i64>> {
    Ok(sqlx::query_scalar!(
        "DELETE FROM credentials WHERE tenant_id = $1 AND workspace_id = $2 AND connector_id = $3 AND owner = $4 RETURNING version",
        tenant.0,
        workspace,
        connector,
        owner.as_text(),
    )
    .fetch_optional(conn)
    .await?)
}

/// A row to re-seal: its key and its current envelope.
pub struct Sealed {
    pub tenant: Uuid,
    pub workspace: Uuid,
    pub connector: String,
    pub owner: String,
    pub envelope: String,
}

/// Key ids in use other than `active`, and how many rows are already under `active`.
pub async fn key_usage(conn: &mut PgConnection, active: &str) -> Result<(Vec<String>, i64)> {
    let kids = sqlx::query_scalar!("SELECT DISTINCT key_id FROM credentials WHERE key_id <> $1 ORDER BY 1", active)
        .fetch_all(&mut *conn)
        .await?;
    let current =
        sqlx::query_scalar!(r#"SELECT count(*) AS "count!" FROM credentials WHERE key_id = $1"#, active).fetch_one(conn).await?;
    Ok((kids, current))
}

/// The next batch of rows sealed under `kid`, after `cursor` in key order (the rotation index).
pub async fn batch(conn: &mut PgConnection, kid: &str, cursor: Option<&Sealed>, limit: i64) -> Result<Vec<Sealed>> {
    let (t, w, c, o) = match cursor {
        Some(s) => (Some(s.tenant), Some(s.workspace), Some(s.connector.as_str()), Some(s.owner.as_str())),
        None => (None, None, None, None),
    };
    let rows = sqlx::query!(
        "SELECT tenant_id, workspace_id, connector_id, owner, envelope FROM credentials
          WHERE key_id = $1 AND ($2::uuid IS NULL OR (tenant_id, workspace_id, connector_id, owner) > ($2, $3, $4, $5))
          ORDER BY key_id, tenant_id, workspace_id, connector_id, owner LIMIT $6",
        kid,
        t,
        w,
        c,
        o,
        limit,
    )
    .fetch_all(conn)
    .await?;
    Ok(rows
        .into_iter()
        .map(|row| Sealed {
            tenant: row.tenant_id,
            workspace: row.workspace_id,
            connector: row.connector_id,
            owner: row.owner,
            envelope: row.envelope,
        })
        .collect())
}

/// Replaces one envelope by compare-and-set on the one read: a slot replaced meanwhile keeps
/// its new value (already under the active key).
pub async fn reseal(conn: &mut PgConnection, row: &Sealed, key_id: &str, envelope: &str) -> Result<bool> {
    let done = sqlx::query!(
        "UPDATE credentials SET key_id = $5, envelope = $6
          WHERE tenant_id = $1 AND workspace_id = $2 AND connector_id = $3 AND owner = $4 AND envelope = $7",
        row.tenant,
        row.workspace,
        row.connector.as_str(),
        row.owner.as_str(),
        key_id,
        envelope,
        row.envelope.as_str(),
    )
    .execute(conn)
    .await?;
    Ok(done.rows_affected() == 1)
}
