//! Credential slot SQL, tenant first in every function (rotation is platform work).

use chrono::{DateTime, Utc};
use sqlx::{PgConnection, Row, postgres::PgRow};
use uuid::Uuid;

use super::{Owner, slots::Slot};
use crate::{error::Result, ids::TenantId};

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

fn stored(row: &PgRow) -> Result<Stored> {
    Ok(Stored {
        key_id: row.try_get("key_id")?,
        envelope: row.try_get("envelope")?,
        fields: row.try_get("fields")?,
        version: row.try_get("version")?,
        updated_at: row.try_get("updated_at")?,
        updated_by: row.try_get("updated_by")?,
    })
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
    let row = sqlx::query(
        "SELECT (SELECT epoch FROM tenants WHERE id = $1) AS epoch, c.key_id, c.envelope, c.fields, c.version, c.updated_at, c.updated_by
           FROM (SELECT 1) one
           LEFT JOIN credentials c ON c.tenant_id = $1 AND c.workspace_id = $2 AND c.connector_id = $3 AND c.owner = $4",
    )
    .bind(tenant)
    .bind(workspace)
    .bind(connector)
    .bind(owner.as_text())
    .fetch_one(conn)
    .await?;
    let epoch: Option<i64> = row.try_get("epoch")?;
    let present: Option<String> = row.try_get("key_id")?;
    Ok((present.map(|_| stored(&row)).transpose()?, epoch.unwrap_or(0)))
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
    let row = sqlx::query(
        "INSERT INTO credentials AS c (tenant_id, workspace_id, connector_id, owner, member_id, key_id, envelope, fields, updated_by)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
         ON CONFLICT (tenant_id, workspace_id, connector_id, owner) DO UPDATE
            SET key_id = EXCLUDED.key_id, envelope = EXCLUDED.envelope, fields = EXCLUDED.fields,
                version = c.version + 1, updated_at = clock_timestamp(), updated_by = EXCLUDED.updated_by
         RETURNING c.key_id, c.envelope, c.fields, c.version, c.updated_at, c.updated_by, (c.version > 1) AS replaced",
    )
    .bind(tenant)
    .bind(workspace)
    .bind(connector)
    .bind(owner.as_text())
    .bind(owner.member_id())
    .bind(key_id)
    .bind(envelope)
    .bind(fields)
    .bind(updated_by)
    .fetch_one(conn)
    .await?;
    Ok((stored(&row)?, row.try_get("replaced")?))
}

/// Deletes the slot's row; its version if there was one.
pub async fn delete(
    conn: &mut PgConnection,
    tenant: TenantId,
    workspace: Uuid,
    connector: &str,
    owner: Owner,
) -> Result<Option<i64>> {
    Ok(sqlx::query_scalar(
        "DELETE FROM credentials WHERE tenant_id = $1 AND workspace_id = $2 AND connector_id = $3 AND owner = $4 RETURNING version",
    )
    .bind(tenant)
    .bind(workspace)
    .bind(connector)
    .bind(owner.as_text())
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
    let kids = sqlx::query_scalar("SELECT DISTINCT key_id FROM credentials WHERE key_id <> $1 ORDER BY 1")
        .bind(active)
        .fetch_all(&mut *conn)
        .await?;
    let current = sqlx::query_scalar("SELECT count(*) FROM credentials WHERE key_id = $1").bind(active).fetch_one(conn).await?;
    Ok((kids, current))
}

/// The next batch of rows sealed under `kid`, after `cursor` in key order (the rotation index).
pub async fn batch(conn: &mut PgConnection, kid: &str, cursor: Option<&Sealed>, limit: i64) -> Result<Vec<Sealed>> {
    let (t, w, c, o) = match cursor {
        Some(s) => (Some(s.tenant), Some(s.workspace), Some(s.connector.as_str()), Some(s.owner.as_str())),
        None => (None, None, None, None),
    };
    sqlx::query(
        "SELECT tenant_id, workspace_id, connector_id, owner, envelope FROM credentials
          WHERE key_id = $1 AND ($2::uuid IS NULL OR (tenant_id, workspace_id, connector_id, owner) > ($2, $3, $4, $5))
          ORDER BY key_id, tenant_id, workspace_id, connector_id, owner LIMIT $6",
    )
    .bind(kid)
    .bind(t)
    .bind(w)
    .bind(c)
    .bind(o)
    .bind(limit)
    .fetch_all(conn)
    .await?
    .iter()
    .map(|row| {
        Ok(Sealed {
            tenant: row.try_get("tenant_id")?,
            workspace: row.try_get("workspace_id")?,
            connector: row.try_get("connector_id")?,
            owner: row.try_get("owner")?,
            envelope: row.try_get("envelope")?,
        })
    })
    .collect()
}

/// Replaces one envelope by compare-and-set on the one read: a slot replaced meanwhile keeps
/// its new value (already under the active key).
pub async fn reseal(conn: &mut PgConnection, row: &Sealed, key_id: &str, envelope: &str) -> Result<bool> {
    let done = sqlx::query(
        "UPDATE credentials SET key_id = $5, envelope = $6
          WHERE tenant_id = $1 AND workspace_id = $2 AND connector_id = $3 AND owner = $4 AND envelope = $7",
    )
    .bind(row.tenant)
    .bind(row.workspace)
    .bind(&row.connector)
    .bind(&row.owner)
    .bind(key_id)
    .bind(envelope)
    .bind(&row.envelope)
    .execute(conn)
    .await?;
    Ok(done.rows_affected() == 1)
}
