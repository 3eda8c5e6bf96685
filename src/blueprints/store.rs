//! Blueprint SQL, tenant first in every function.

use sqlx::{PgConnection, Row, postgres::PgRow};
use uuid::Uuid;

use super::{Blueprint, Version};
use crate::ids::BlueprintId;
use crate::{
    error::{Error, Result},
    ids::TenantId,
    workspaces::Document,
};

fn blueprint(row: &PgRow) -> Result<Blueprint> {
    Ok(Blueprint {
        id: BlueprintId(row.try_get("id")?),
        slug: row.try_get("slug")?,
        name: row.try_get("name")?,
        created_by: row.try_get("created_by")?,
        created_at: row.try_get("created_at")?,
        latest_version: row.try_get("latest_version")?,
    })
}

fn version(row: &PgRow) -> Result<Version> {
    let document: serde_json::Value = row.try_get("document")?;
    let document: Document =
        serde_json::from_value(document).map_err(|e| anyhow::anyhow!("stored blueprint document unreadable: {e}"))?;
    Ok(Version {
        blueprint: row.try_get("slug")?,
        version: row.try_get("version")?,
        digest: row.try_get("digest")?,
        admission: row.try_get("admission")?,
        reason: row.try_get("reason")?,
        created_by: row.try_get("created_by")?,
        created_at: row.try_get("created_at")?,
        decided_by: row.try_get("decided_by")?,
        decided_at: row.try_get("decided_at")?,
        document,
    })
}

macro_rules! version_columns {
    () => {
        "b.slug, v.version, v.digest, v.admission, v.reason, v.created_by, v.created_at, v.decided_by, v.decided_at, v.document"
    };
}

pub async fn insert(
    conn: &mut PgConnection,
    tenant: TenantId,
    id: BlueprintId,
    slug: &str,
    name: &str,
    created_by: &str,
) -> Result<Blueprint> {
    let row = sqlx::query(
        "INSERT INTO blueprints (tenant_id, id, slug, name, created_by) VALUES ($1, $2, $3, $4, $5)
         RETURNING id, slug, name, created_by, created_at, NULL::integer AS latest_version",
    )
    .bind(tenant)
    .bind(id.0)
    .bind(slug)
    .bind(name)
    .bind(created_by)
    .fetch_one(conn)
    .await?;
    blueprint(&row)
}

pub async fn list(conn: &mut PgConnection, tenant: TenantId) -> Result<Vec<Blueprint>> {
    sqlx::query(
        "SELECT b.id, b.slug, b.name, b.created_by, b.created_at,
                (SELECT max(v.version) FROM blueprint_versions v WHERE v.tenant_id = b.tenant_id AND v.blueprint_id = b.id)
                    AS latest_version
           FROM blueprints b WHERE b.tenant_id = $1 ORDER BY b.slug",
    )
    .bind(tenant)
    .fetch_all(conn)
    .await?
    .iter()
    .map(blueprint)
    .collect()
}

/// The blueprint `slug` with its latest version number (the one a new version follows).
pub async fn by_slug(conn: &mut PgConnection, tenant: TenantId, slug: &str) -> Result<Option<Blueprint>> {
    sqlx::query(
        "SELECT b.id, b.slug, b.name, b.created_by, b.created_at,
                (SELECT max(v.version) FROM blueprint_versions v WHERE v.tenant_id = b.tenant_id AND v.blueprint_id = b.id)
                    AS latest_version
           FROM blueprints b WHERE b.tenant_id = $1 AND b.slug = $2",
    )
    .bind(tenant)
    .bind(slug)
    .fetch_optional(conn)
    .await?
    .as_ref()
    .map(blueprint)
    .transpose()
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
    let row = sqlx::query(concat!(
        "WITH v AS (
             INSERT INTO blueprint_versions (tenant_id, blueprint_id, version, document, digest, created_by)
             VALUES ($1, $2, $3, $4, $5, $6) RETURNING *)
         SELECT ",
        version_columns!(),
        " FROM v JOIN blueprints b ON b.tenant_id = v.tenant_id AND b.id = v.blueprint_id"
    ))
    .bind(tenant)
    .bind(blueprint.0)
    .bind(version)
    .bind(doc)
    .bind(digest)
    .bind(created_by)
    .fetch_one(conn)
    .await
    .map_err(|e| Error::from(e).on_constraint("blueprint_versions_pkey", super::version_taken))?;
    self::version(&row)
}

pub async fn versions(conn: &mut PgConnection, tenant: TenantId, blueprint: BlueprintId) -> Result<Vec<Version>> {
    sqlx::query(concat!(
        "SELECT ",
        version_columns!(),
        " FROM blueprint_versions v JOIN blueprints b ON b.tenant_id = v.tenant_id AND b.id = v.blueprint_id
          WHERE v.tenant_id = $1 AND v.blueprint_id = $2 ORDER BY v.version"
    ))
    .bind(tenant)
    .bind(blueprint.0)
    .fetch_all(conn)
    .await?
    .iter()
    .map(version)
    .collect()
}

/// One version of the blueprint `slug`, with the blueprint's id.
pub async fn version_of(
    conn: &mut PgConnection,
    tenant: TenantId,
    slug: &str,
    number: i32,
) -> Result<Option<(BlueprintId, Version)>> {
    let row = sqlx::query(concat!(
        "SELECT b.id AS blueprint_id, ",
        version_columns!(),
        "
           FROM blueprint_versions v JOIN blueprints b ON b.tenant_id = v.tenant_id AND b.id = v.blueprint_id
          WHERE v.tenant_id = $1 AND b.slug = $2 AND v.version = $3"
    ))
    .bind(tenant)
    .bind(slug)
    .bind(number)
    .fetch_optional(conn)
    .await?;
    match row {
        Some(row) => Ok(Some((BlueprintId(row.try_get::<Uuid, _>("blueprint_id")?), version(&row)?))),
        None => Ok(None),
    }
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
    sqlx::query(concat!(
        "WITH v AS (
             UPDATE blueprint_versions SET admission = $4, reason = $5, decided_by = $6, decided_at = now()
              WHERE tenant_id = $1 AND blueprint_id = $2 AND version = $3 AND admission = 'pending' RETURNING *)
         SELECT ",
        version_columns!(),
        " FROM v JOIN blueprints b ON b.tenant_id = v.tenant_id AND b.id = v.blueprint_id"
    ))
    .bind(tenant)
    .bind(blueprint.0)
    .bind(number)
    .bind(to)
    .bind(reason)
    .bind(decided_by)
    .fetch_optional(conn)
    .await?
    .as_ref()
    .map(version)
    .transpose()
}
