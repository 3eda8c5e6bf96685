//! Blueprints: a tenant's named, versioned workspace configurations. A version is immutable (its
//! document and digest never change) and its admission is decided once, `pending → admitted |
//! rejected`; only an admitted version can be bound to a workspace
//! ([`crate::workspaces::lifecycle::bind`]).

pub mod cli;
pub mod http;
mod store;

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::json;
use sqlx::PgConnection;
use uuid::Uuid;

use crate::{
    admin_log::{self, Audit, Entry},
    db::{Db, Scope},
    error::{Error, FieldIssue, Result},
    ids::TenantId,
    tenants::validate_slug,
    vault::KeyRing,
    workspaces::{self, Document},
};

/// Re-exported from [`crate::ids`], where every id lives, so older callers keep their path.
pub use crate::ids::BlueprintId;

#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct Blueprint {
    pub id: BlueprintId,
    pub slug: String,
    pub name: String,
    pub created_by: String,
    pub created_at: DateTime<Utc>,
    /// The highest version number so far (`None` before the first version).
    pub latest_version: Option<i32>,
}

/// One immutable version of a blueprint.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct Version {
    /// The blueprint's slug.
    pub blueprint: String,
    pub version: i32,
    pub digest: String,
    /// `pending`, `admitted` or `rejected`.
    pub admission: String,
    pub reason: Option<String>,
    pub created_by: String,
    pub created_at: DateTime<Utc>,
    pub decided_by: Option<String>,
    pub decided_at: Option<DateTime<Utc>>,
    /// The configuration document (connectors, classification, grants, pools).
    #[schema(value_type = Object)]
    pub document: Document,
}

/// A blueprint with all its versions.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct Shown {
    #[serde(flatten)]
    pub blueprint: Blueprint,
    pub versions: Vec<Version>,
}

/// The admission decision on a pending version.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    Admit,
    Reject,
}

impl Decision {
    fn state(self) -> &'static str {
        match self {
            Decision::Admit => "admitted",
            Decision::Reject => "rejected",
        }
    }
}

pub(crate) fn version_taken() -> Error {
    Error::Precondition {
        code: "blueprint_changed",
        message: "another version of this blueprint was added meanwhile; reload and retry".into(),
    }
}

/// Parses a configuration document from its JSON form and validates it exactly like a
/// workspace edit (every problem named by its field); connectors that need the vault are
/// refused when it is off, as when they are added to a workspace.
pub fn parse_document(value: serde_json::Value, ring: Option<&KeyRing>) -> Result<Document> {
    let document: Document = serde_json::from_value(value)
        .map_err(|e| Error::InvalidConfig { issues: vec![FieldIssue { field: "document".into(), message: e.to_string() }] })?;
    document.validate()?;
    for connector in document.connectors.values() {
        crate::vault::slots::check_connector(ring, connector)?;
    }
    Ok(document)
}

/// Creates a blueprint with no versions yet.
pub async fn create(db: &Db, tenant: TenantId, audit: &Audit, slug: &str, name: Option<&str>) -> Result<Blueprint> {
    validate_slug(slug)?;
    let name = crate::workspaces::display_name(name, slug)?;
    db.serializable(Scope::Tenant(tenant), |conn, _| {
        let name = name.clone();
        Box::pin(async move {
            let id = BlueprintId(Uuid::now_v7());
            let blueprint = store::insert(&mut *conn, tenant, id, slug, &name, &audit.actor).await.map_err(|e| {
                e.on_constraint("blueprints_slug_key", || Error::Conflict {
                    code: "slug_taken",
                    message: format!("this tenant already has a blueprint `{slug}`"),
                })
            })?;
            let entry = Entry {
                tenant: Some(tenant),
                audit,
                action: "blueprint.create",
                target: format!("blueprint:{slug}"),
                before: None,
                after: Some(json!({ "slug": slug, "name": blueprint.name })),
            };
            admin_log::record(conn, entry).await?;
            Ok(blueprint)
        })
    })
    .await
}

pub async fn list(db: &Db, tenant: TenantId) -> Result<Vec<Blueprint>> {
    db.single_decision(Scope::Tenant(tenant), |conn, _| Box::pin(store::list(conn, tenant))).await
}

/// A blueprint and its versions; another tenant's answers `not_found`.
pub async fn show(db: &Db, tenant: TenantId, slug: &str) -> Result<Shown> {
    db.serializable(Scope::Tenant(tenant), |conn, _| {
        Box::pin(async move {
            let blueprint = store::by_slug(&mut *conn, tenant, slug).await?.ok_or(Error::NotFound { what: "blueprint" })?;
            let versions = store::versions(conn, tenant, blueprint.id).await?;
            Ok(Shown { blueprint, versions })
        })
    })
    .await
}

/// Adds the next version (n+1 of what this transaction read), pending admission. With
/// `expected_latest` (the latest version number the author read, 0 for none) a version added
/// meanwhile answers 412 `blueprint_changed`; without it a concurrent addition is retried and
/// takes the following number.
pub async fn add_version(
    db: &Db,
    tenant: TenantId,
    audit: &Audit,
    slug: &str,
    document: &Document,
    expected_latest: Option<i32>,
) -> Result<Version> {
    document.validate()?;
    let digest = workspaces::digest(document)?;
    let digest = &digest;
    db.serializable(Scope::Tenant(tenant), move |conn, _| {
        Box::pin(async move {
            let blueprint = store::by_slug(&mut *conn, tenant, slug).await?.ok_or(Error::NotFound { what: "blueprint" })?;
            let latest = blueprint.latest_version.unwrap_or(0);
            if expected_latest.is_some_and(|e| e != latest) {
                return Err(version_taken());
            }
            let version =
                store::insert_version(&mut *conn, tenant, blueprint.id, latest + 1, document, digest, &audit.actor).await?;
            let entry = Entry {
                tenant: Some(tenant),
                audit,
                action: "blueprint.version",
                target: format!("blueprint:{slug}"),
                before: Some(json!({ "latest_version": blueprint.latest_version })),
                after: Some(json!({ "version": version.version, "digest": digest })),
            };
            admin_log::record(conn, entry).await?;
            Ok(version)
        })
    })
    .await
}

/// Decides a pending version's admission by compare-and-set on `pending`; a version already
/// decided answers 409 `already_decided` naming its state.
pub async fn decide(
    db: &Db,
    tenant: TenantId,
    audit: &Audit,
    slug: &str,
    number: i32,
    decision: Decision,
    reason: Option<&str>,
) -> Result<Version> {
    if reason.is_some_and(|r| r.chars().count() > 500) {
        return Err(Error::invalid("invalid_reason", Some("reason"), "a reason is at most 500 characters"));
    }
    db.serializable(Scope::Tenant(tenant), move |conn, _| {
        Box::pin(async move {
            let (id, current) = store::version_of(&mut *conn, tenant, slug, number)
                .await?
                .ok_or(Error::NotFound { what: "blueprint version" })?;
            let Some(version) = store::decide(&mut *conn, tenant, id, number, decision.state(), reason, &audit.actor).await?
            else {
                return Err(Error::Conflict {
                    code: "already_decided",
                    message: format!(
                        "version {number} of `{slug}` is already {}; only a pending version can be admitted or rejected",
                        current.admission
                    ),
                });
            };
            let action = match decision {
                Decision::Admit => "blueprint.admit",
                Decision::Reject => "blueprint.reject",
            };
            let entry = Entry {
                tenant: Some(tenant),
                audit,
                action,
                target: format!("blueprint:{slug}@{number}"),
                before: Some(json!({ "admission": "pending" })),
                after: Some(json!({ "admission": version.admission, "reason": reason, "digest": version.digest })),
            };
            admin_log::record(conn, entry).await?;
            Ok(version)
        })
    })
    .await
}

/// An admitted version's document, read inside the caller's transaction (the bind's): 404 for
/// a missing version, 409 `version_not_admitted` naming its state for any other.
pub async fn admitted(conn: &mut PgConnection, tenant: TenantId, slug: &str, number: i32) -> Result<(BlueprintId, Version)> {
    let (id, version) =
        store::version_of(conn, tenant, slug, number).await?.ok_or(Error::NotFound { what: "blueprint version" })?;
    if version.admission != "admitted" {
        return Err(Error::Conflict {
            code: "version_not_admitted",
            message: format!("version {number} of `{slug}` is {}; only an admitted version can be bound", version.admission),
        });
    }
    Ok((id, version))
}
