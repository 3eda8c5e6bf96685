//! Workspaces: one gateway instance inside a tenant, running exactly one immutable
//! configuration version. Every edit (a connector added or removed …) writes the next version
//! of the workspace's lineage and binds it by compare-and-set on the version the editor read,
//! so two concurrent edits never silently overwrite each other.

pub mod cli;
pub mod config;
pub mod http;
pub mod lifecycle;
mod store;
pub mod tables;

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::json;
use sha2::{Digest, Sha256};
use uuid::Uuid;

pub use config::{Connector, Document};

use crate::{
    admin_log::{self, Audit, Entry},
    db::{Db, Scope},
    error::{Error, Result},
    ids::TenantId,
    tenants::validate_slug,
};

/// Re-exported from [`crate::ids`], where every id lives, so older callers keep their path.
pub use crate::ids::WorkspaceId;

#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct Workspace {
    pub id: WorkspaceId,
    pub slug: String,
    pub name: String,
    pub status: String,
    /// The configuration version this workspace runs.
    pub bound_version: i32,
    /// Bumped by every change of the workspace row (binds, lifecycle transitions).
    pub revision: i64,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// A workspace with the configuration it runs.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct Bound {
    pub workspace: Workspace,
    /// The workspace's configuration document (connectors, classification, grants, pools…).
    #[schema(value_type = Object)]
    pub document: Document,
    /// The connectors whose catalogs are fresh in the shared cache: id → (configuration key,
    /// fetched at). Not part of the API's answer.
    #[serde(skip)]
    pub catalogs: CatalogStamps,
    /// The tenant's epoch, read in the same statement as the rest (see [`crate::epochs`]).
    #[serde(skip)]
    pub epoch: i64,
    /// The connectors' session and catalog keys, computed on first use (each hashes its
    /// connector's configuration, which this bound copy never changes).
    #[serde(skip)]
    pub keys: std::sync::OnceLock<crate::maps::FastMap<String, String>>,
    /// The document's redaction detectors, compiled on first use (`None`: none configured).
    #[serde(skip)]
    pub redactor: std::sync::OnceLock<Option<std::sync::Arc<config::redaction::Redactor>>>,
}

impl Bound {
    /// The compiled redaction detectors of this configuration, if it has any.
    pub fn redactor(&self) -> Option<&config::redaction::Redactor> {
        self.redactor.get_or_init(|| config::redaction::Redactor::of(&self.document.redaction)).as_deref()
    }
}

/// A connector's catalog is fetched again after this long. It lives with the workspace,
/// whose bound read reports which catalogs are still fresh, so the gateway reads it here.
pub const CATALOG_TTL: std::time::Duration = std::time::Duration::from_secs(300);

/// Which catalogs the shared cache holds fresh, as the request's one query saw them.
pub type CatalogStamps = std::collections::HashMap<String, (String, chrono::DateTime<chrono::Utc>)>;

/// The digest of a configuration document: SHA-256 of its canonical JSON.
pub fn digest(document: &Document) -> Result<String> {
    let canonical =
        serde_json::to_vec(&serde_json::to_value(document).map_err(anyhow::Error::from)?).map_err(anyhow::Error::from)?;
    Ok(hex::encode(Sha256::digest(&canonical)))
}

/// A display name: whitespace collapsed, the slug when absent or blank, at most 200
/// characters (shared by workspaces and blueprints).
pub fn display_name(name: Option<&str>, slug: &str) -> Result<String> {
    let name = name
        .map(|n| n.split_whitespace().collect::<Vec<_>>().join(" "))
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| slug.to_owned());
    if name.chars().count() > 200 {
        return Err(Error::invalid("invalid_name", Some("name"), "a name is 1 to 200 characters"));
    }
    Ok(name)
}

/// Creates a workspace bound to version 1, an empty configuration.
#[tracing::instrument(name = "workspaces::create", skip_all, fields(tenant = %tenant, workspace = slug))]
pub async fn create(db: &Db, tenant: TenantId, audit: &Audit, slug: &str, name: Option<&str>) -> Result<Workspace> {
    validate_slug(slug)?;
    let name = display_name(name, slug)?;
    let document = Document::default();
    let digest = digest(&document)?;
    db.serializable(Scope::Tenant(tenant), |conn, _| {
        let (name, document, digest) = (name.clone(), document.clone(), digest.clone());
        Box::pin(async move {
            let id = WorkspaceId(Uuid::now_v7());
            let ws = store::insert(&mut *conn, tenant, id, slug, &name).await.map_err(|e| {
                e.on_constraint("workspaces_slug_key", || Error::Conflict {
                    code: "slug_taken",
                    message: format!("this tenant already has a workspace `{slug}`"),
                })
            })?;
            store::insert_version(&mut *conn, tenant, id, 1, &document, &digest, &audit.actor).await?;
            let after = Some(json!({ "slug": ws.slug, "name": ws.name, "version": 1, "digest": digest }));
            admin_log::record(
                conn,
                Entry {
                    tenant: Some(tenant),
                    audit,
                    action: "workspace.create",
                    target: format!("workspace:{slug}"),
                    before: None,
                    after,
                },
            )
            .await?;
            Ok(ws)
        })
    })
    .await
}

#[tracing::instrument(name = "workspaces::list", skip_all, fields(tenant = %tenant))]
pub async fn list(db: &Db, tenant: TenantId) -> Result<Vec<Workspace>> {
    db.single_decision(Scope::Tenant(tenant), |conn, _| Box::pin(store::list(conn, tenant))).await
}

/// [`bound`], by the workspace's id.
#[tracing::instrument(name = "workspaces::bound", skip_all, fields(tenant = %tenant, workspace = %id))]
pub async fn bound_by_id(db: &Db, tenant: TenantId, id: Uuid) -> Result<Bound> {
    let slug = db.single_decision(Scope::Tenant(tenant), |conn, _| Box::pin(store::slug_of(conn, tenant, id))).await?;
    bound(db, tenant, &slug.ok_or(Error::NotFound { what: "workspace" })?).await
}

/// The slug of the first workspace whose bound configuration has a connector.
pub async fn first_with_connector(db: &Db, tenant: TenantId) -> Result<Option<String>> {
    db.single_decision(Scope::Tenant(tenant), move |conn, _| Box::pin(store::first_with_connector(conn, tenant))).await
}

/// The workspace and the configuration it runs; another tenant's answers `not_found`.
#[tracing::instrument(name = "workspaces::bound", skip_all, fields(tenant = %tenant, workspace = slug))]
pub async fn bound(db: &Db, tenant: TenantId, slug: &str) -> Result<Bound> {
    db.single_decision(Scope::Tenant(tenant), |conn, _| Box::pin(store::bound(conn, tenant, slug)))
        .await?
        .ok_or(Error::NotFound { what: "workspace" })
}

/// Edits the configuration: `change` turns the bound document into the next one, which is
/// stored as version n+1 and bound only if the workspace still runs version n (the one read,
/// or `expected` when the editor says which version it read). A lost race answers 412.
#[tracing::instrument(name = "workspaces::edit", skip_all, fields(tenant = %tenant, workspace = slug, action = action))]
pub async fn edit<F>(
    db: &Db,
    tenant: TenantId,
    audit: &Audit,
    slug: &str,
    expected: Option<i32>,
    action: &str,
    change: F,
) -> Result<Bound>
where
    F: Fn(&mut Document) -> Result<serde_json::Value> + Send + Sync,
{
    let change = &change;
    db.serializable(Scope::Tenant(tenant), move |conn, _| {
        Box::pin(async move {
            let current = store::bound(&mut *conn, tenant, slug).await?.ok_or(Error::NotFound { what: "workspace" })?;
            let read = current.workspace.bound_version;
            if expected.is_some_and(|e| e != read) {
                return Err(binding_changed());
            }
            if current.workspace.status != "active" {
                return Err(Error::Conflict {
                    code: "workspace_not_active",
                    message: format!("the workspace is {}", current.workspace.status),
                });
            }
            let mut next = current.document.clone();
            let detail = change(&mut next)?;
            next.validate()?;
            let digest = digest(&next)?;
            let id = current.workspace.id;
            store::insert_version(&mut *conn, tenant, id, read + 1, &next, &digest, &audit.actor).await?;
            let workspace = store::bind(&mut *conn, tenant, id, read, read + 1).await?.ok_or_else(binding_changed)?;
            let entry = Entry {
                tenant: Some(tenant),
                audit,
                action,
                target: format!("workspace:{slug}"),
                before: Some(json!({ "version": read })),
                after: Some(json!({ "version": read + 1, "digest": digest, "change": detail })),
            };
            admin_log::record(conn, entry).await?;
            Ok(Bound {
                workspace,
                document: next,
                catalogs: CatalogStamps::new(),
                epoch: 0,
                keys: Default::default(),
                redactor: Default::default(),
            })
        })
    })
    .await
}

fn binding_changed() -> Error {
    Error::Precondition { code: "binding_changed", message: "the workspace's configuration changed; reload and retry".into() }
}

/// Adds a connector (a new configuration version); an existing id is a conflict.
#[tracing::instrument(name = "workspaces::add_connector", skip_all, fields(tenant = %tenant, workspace = slug, connector = id))]
pub async fn add_connector(
    db: &Db,
    tenant: TenantId,
    audit: &Audit,
    slug: &str,
    expected: Option<i32>,
    id: &str,
    connector: Connector,
) -> Result<Bound> {
    edit(db, tenant, audit, slug, expected, "connector.add", |doc| {
        if doc.connectors.contains_key(id) {
            return Err(Error::Conflict {
                code: "connector_exists",
                message: format!("this workspace already has a connector `{id}`"),
            });
        }
        doc.connectors.insert(id.to_owned(), connector.clone());
        Ok(json!({ "connector": id, "config": connector }))
    })
    .await
}

/// Replaces connector `id`'s configuration in place (a new configuration version); its
/// classification overrides, grants, pools and approval rules, which name it by id, stay.
/// A missing id is a 404: an edit never creates a connector.
#[tracing::instrument(name = "workspaces::replace_connector", skip_all, fields(tenant = %tenant, workspace = slug, connector = id))]
pub async fn replace_connector(
    db: &Db,
    tenant: TenantId,
    audit: &Audit,
    slug: &str,
    expected: Option<i32>,
    id: &str,
    connector: Connector,
) -> Result<Bound> {
    edit(db, tenant, audit, slug, expected, "connector.replace", |doc| {
        let Some(slot) = doc.connectors.get_mut(id) else {
            return Err(Error::NotFound { what: "connector" });
        };
        let before = std::mem::replace(slot, connector.clone());
        Ok(json!({ "connector": id, "before": before, "config": connector }))
    })
    .await
}

/// Removes a connector (a new configuration version) and its classification overrides.
#[tracing::instrument(name = "workspaces::remove_connector", skip_all, fields(tenant = %tenant, workspace = slug, connector = id))]
pub async fn remove_connector(
    db: &Db,
    tenant: TenantId,
    audit: &Audit,
    slug: &str,
    expected: Option<i32>,
    id: &str,
) -> Result<Bound> {
    edit(db, tenant, audit, slug, expected, "connector.remove", |doc| {
        if doc.connectors.remove(id).is_none() {
            return Err(Error::NotFound { what: "connector" });
        }
        let prefix = format!("{id}.");
        doc.classification.retain(|address, _| !address.starts_with(&prefix));
        // Its approval rules go with it (a rule left naming nothing goes too).
        for rule in &mut doc.approvals {
            rule.tools.retain(|t| t != id && !t.starts_with(&prefix));
        }
        doc.approvals.retain(|rule| !rule.tools.is_empty());
        Ok(json!({ "connector": id }))
    })
    .await
}

/// Replaces the classification overrides, grants, pools, pinning, redaction and/or approval
/// policy (a new configuration version).
/// In `patch`, a present `classification` replaces the map; a present `grants` replaces the
/// list, and `null` removes it (everything granted again).
#[tracing::instrument(name = "workspaces::configure", skip_all, fields(tenant = %tenant, workspace = slug))]
pub async fn configure(
    db: &Db,
    tenant: TenantId,
    audit: &Audit,
    slug: &str,
    expected: Option<i32>,
    patch: &serde_json::Value,
) -> Result<Bound> {
    let bad = |field: &str, e: serde_json::Error| Error::InvalidConfig {
        issues: vec![crate::error::FieldIssue { field: field.into(), message: e.to_string() }],
    };
    let classification = match patch.get("classification") {
        Some(v) => Some(
            serde_json::from_value::<std::collections::BTreeMap<String, config::Class>>(v.clone())
                .map_err(|e| bad("classification", e))?,
        ),
        None => None,
    };
    let pools = match patch.get("pools") {
        Some(v) => Some(
            serde_json::from_value::<std::collections::BTreeMap<String, config::Pool>>(v.clone()).map_err(|e| bad("pools", e))?,
        ),
        None => None,
    };
    let redaction = match patch.get("redaction") {
        Some(v) => Some(serde_json::from_value::<config::redaction::Redaction>(v.clone()).map_err(|e| bad("redaction", e))?),
        None => None,
    };
    let pinning = match patch.get("pinning") {
        Some(v) => Some(serde_json::from_value::<config::Pinning>(v.clone()).map_err(|e| bad("pinning", e))?),
        None => None,
    };
    let approvals = match patch.get("approvals") {
        Some(v) => Some(serde_json::from_value::<Vec<config::approvals::Rule>>(v.clone()).map_err(|e| bad("approvals", e))?),
        None => None,
    };
    let grants = match patch.get("grants") {
        Some(v) => Some(serde_json::from_value::<Option<Vec<config::Grant>>>(v.clone()).map_err(|e| bad("grants", e))?),
        None => None,
    };
    edit(db, tenant, audit, slug, expected, "workspace.configure", |doc| {
        if let Some(c) = &classification {
            doc.classification = c.clone();
        }
        if let Some(g) = &grants {
            doc.grants = g.clone();
        }
        if let Some(p) = &pools {
            doc.pools = p.clone();
        }
        if let Some(p) = pinning {
            doc.pinning = p;
        }
        if let Some(r) = &redaction {
            doc.redaction = r.clone();
        }
        if let Some(a) = &approvals {
            doc.approvals = a.clone();
        }
        Ok(json!({
            "classification": doc.classification, "grants": doc.grants, "pools": doc.pools, "pinning": doc.pinning,
            "redaction": doc.redaction, "approvals": doc.approvals,
        }))
    })
    .await
}

/// What other nouns may run inside their own transaction; the store itself is private.
pub mod tx {
    pub use super::store::{bound, insert_version};
}
