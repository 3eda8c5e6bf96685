//! Blueprint SQL, tenant first in every function.

use chrono::{DateTime, Utc};
use sqlx::PgConnection;

use super::{Blueprint, Version};
use crate::ids::BlueprintId;
use crate::{
    error::{Error, Result},
    ids::TenantId,
    workspaces::Document,
};

/// A `blueprint_versions` row joined to its blueprint's slug, before the document is read.
/// The statements that write a version return it from a CTE, whose columns the macros cannot
/// trace to the table, so their aliases state each column's nullability.
struct VersionRow {
    blueprint: String,
    version: i32,
    digest: String,
    admission: String,
    reason: Option<String>,
    created_by: String,
    created_at: DateTime<Utc>,
    decided_by: Option<String>,
    decided_at: Option<DateTime<Utc>>,
    document: serde_json::Value,
}

impl TryFrom<VersionRow> for Version {
    type Error = Error;

    fn try_from(row: VersionRow) -> Result<Version> {
        let document: Document =
            serde_json::from_value(row.document).map_err(|e| anyhow::anyhow!("stored blueprint document unreadable: {e}"))?;
        Ok(Version {
            blueprint: row.blueprint,
            version: row.version,
            digest: row.digest,
            admission: row.admission,
            reason: row.reason,
            created_by: row.created_by,
            created_at: row.created_at,
            decided_by: row.decided_by,
            decided_at: row.decided_at,
            document,
        })
    }
}

pub async fn insert(
    conn: &mut PgConnection,
    tenant: TenantId,
    id: BlueprintId,
    slug: &str,
    name: &str,
    created_by: &str,
) -> Result<Blueprint> {
    Ok(sqlx::query_as!(
        Blueprint,
        r#"INSERT INTO blueprints (tenant_id, id, slug, name, created_by) VALUES ($1, $2, $3, $4, $5)
           RETURNING id AS "id: BlueprintId", slug, name, created_by, created_at, NULL::integer AS "latest_version?""#,
        tenant.0,
        id.0,
        slug,
        name,
        created_by,
    )
    .fetch_one(conn)
    .await?)
}

/// Runs `query_as!` into a [`Blueprint`] with its one column list pasted (the query macros
/// accept literals joined by `+`, never a `const`): `SELECT <columns> FROM blueprints b <rest>`.
macro_rules! blueprint {
    ($rest:literal, $($arg:expr),+ $(,)?) => {
        sqlx::query_as!(
            Blueprint,
            r#"SELECT b.id AS "id: BlueprintId", b.slug, b.name, b.created_by, b.created_at,
                  (SELECT max(v.version) FROM blueprint_versions v WHERE v.tenant_id = b.tenant_id AND v.blueprint_id = b.id)
                      AS "latest_version?"
             FROM blueprints b"# + $rest,
            $($arg),+
        )
    };
}

/// Runs `query_as!` into a [`VersionRow`] with its one column list pasted: `<before> SELECT
/// <columns> <after>`, where `after` names the version as `v` and its blueprint as `b`.
macro_rules! version {
    ($before:literal, $after:literal, $($arg:expr),+ $(,)?) => {
        sqlx::query_as!(
            VersionRow,
            $before + r#"SELECT b.slug AS "blueprint!", v.version AS "version!", v.digest AS "digest!", v.admission AS "admission!",
                  v.reason AS "reason?", v.created_by AS "created_by!", v.created_at AS "created_at!",
                  v.decided_by AS "decided_by?", v.decided_at AS "decided_at?", v.document AS "document!""# + $after,
            $($arg),+
        )
    };
}

pub async fn list(conn: &mut PgConnection, tenant: TenantId) -> Result<Vec<Blueprint>> {
    Ok(blueprint!(" WHERE b.tenant_id = $1 ORDER BY b.slug", tenant.0,).fetch_all(conn).await?)
}

/// The blueprint `slug` with its latest version number (the one a new version follows).
pub async fn by_slug(conn: &mut PgConnection, tenant: TenantId, slug: &str) -> Result<Option<Blueprint>> {
    Ok(blueprint!(" WHERE b.tenant_id = $1 AND b.slug = $2", tenant.0, slug,).fetch_optional(conn).await?)
}

/// Inserts version `version`; a version number taken meanwhile answers 412.
pub async fn insert_version(
    conn: &mut PgConnection,
    tenant: TenantId,
    blueprint: BlueprintId,
    version: i32,
    document: &Document,
    digest: &str,
    created_by: &str,
) -> Result<Version> {
    let doc = serde_json::to_value(document).map_err(anyhow::Error::from)?;
    version!(
        r#"WITH v AS (
               INSERT INTO blueprint_versions (tenant_id, blueprint_id, version, document, digest, created_by)
               VALUES ($1, $2, $3, $4, $5, $6) RETURNING *) "#,
        " FROM v JOIN blueprints b ON b.tenant_id = v.tenant_id AND b.id = v.blueprint_id",
        tenant.0,
        blueprint.0,
        version,
        doc,
        digest,
        created_by,
    )
    .fetch_one(conn)
    .await
    .map_err(|e| Error::from(e).on_constraint("blueprint_versions_pkey", super::version_taken))?
    .try_into()
}

pub async fn versions(conn: &mut PgConnection, tenant: TenantId, blueprint: BlueprintId) -> Result<Vec<Version>> {
    version!(
        "",
        "
           FROM blueprint_versions v JOIN blueprints b ON b.tenant_id = v.tenant_id AND b.id = v.blueprint_id
          WHERE v.tenant_id = $1 AND v.blueprint_id = $2 ORDER BY v.version",
        tenant.0,
        blueprint.0,
    )
    .fetch_all(conn)
    .await?
    .into_iter()
    .map(Version::try_from)
    .collect()
}

/// One version of the blueprint `slug`, with the blueprint's id.
pub async fn version_of(
    conn: &mut PgConnection,
    tenant: TenantId,
    slug: &str,
    number: i32,
) -> Result<Option<(BlueprintId, Version)>> {
    let row = sqlx::query!(
        r#"SELECT b.id AS "blueprint_id: BlueprintId", b.slug, v.version, v.digest, v.admission, v.reason, v.created_by,
                  v.created_at, v.decided_by, v.decided_at, v.document
             FROM blueprint_versions v JOIN blueprints b ON b.tenant_id = v.tenant_id AND b.id = v.blueprint_id
            WHERE v.tenant_id = $1 AND b.slug = $2 AND v.version = $3"#,
        tenant.0,
        slug,
        number,
    )
    .fetch_optional(conn)
    .await?;
    let Some(row) = row else { return Ok(None) };
    let version = VersionRow {
        blueprint: row.slug,
        version: row.version,
        digest: row.digest,
        admission: row.admission,
        reason: row.reason,
        created_by: row.created_by,
        created_at: row.created_at,
        decided_by: row.decided_by,
        decided_at: row.decided_at,
        document: row.document,
    };
    Ok(Some((row.blueprint_id, version.try_into()?)))
}

/// The admission decision: `pending → to`, only while still pending (the compare-and-set).
pub async fn decide(
    conn: &mut PgConnection,
    tenant: TenantId,
    blueprint: BlueprintId,
    number: i32,
    to: &str,
    reason: Option<&str>,
    decided_by: &str,
) -> Result<Option<Version>> {
    version!(
        r#"WITH v AS (
               UPDATE blueprint_versions SET admission = $4, reason = $5, decided_by = $6, decided_at = now()
                WHERE tenant_id = $1 AND blueprint_id = $2 AND version = $3 AND admission = 'pending' RETURNING *) "#,
        " FROM v JOIN blueprints b ON b.tenant_id = v.tenant_id AND b.id = v.blueprint_id",
        tenant.0,
        blueprint.0,
        number,
        to,
        reason,
        decided_by,
    )
    .fetch_optional(conn)
    .await?
    .map(Version::try_from)
    .transpose()
}
