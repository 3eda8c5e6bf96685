//! Tenants: the customer organisations everything else belongs to.

pub mod cli;
pub mod http;
mod store;

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::json;
use uuid::Uuid;

use crate::{
    admin_log::{self, Audit, Entry},
    db::{Db, Scope},
    error::{Error, Result},
};

/// Re-exported from [`crate::ids`], where every id lives, so older callers keep their path.
pub use crate::ids::TenantId;

/// Lifecycle of a tenant.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Active,
    Suspended,
    Deleting,
    Reaped,
    /// Sealed after a move to another deployment: every request answers `tenant_moved`.
    Moved,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Active => "active",
            Status::Suspended => "suspended",
            Status::Deleting => "deleting",
            Status::Reaped => "reaped",
            Status::Moved => "moved",
        }
    }
    fn parse(s: &str) -> Result<Self> {
        Ok(match s {
            "active" => Status::Active,
            "suspended" => Status::Suspended,
            "deleting" => Status::Deleting,
            "reaped" => Status::Reaped,
            "moved" => Status::Moved,
            other => return Err(anyhow::anyhow!("unknown tenant status {other:?} in the database").into()),
        })
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct Tenant {
    pub id: TenantId,
    pub slug: String,
    pub name: String,
    pub status: Status,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// Checks a slug: 3–63 characters of `[a-z0-9-]`, no leading or trailing dash.
pub fn validate_slug(slug: &str) -> Result<()> {
    let ok_chars = slug.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    if !(3..=63).contains(&slug.len()) || !ok_chars || slug.starts_with('-') || slug.ends_with('-') {
        return Err(Error::invalid(
            "invalid_slug",
            Some("slug"),
            "a slug is 3 to 63 characters of a-z, 0-9 and '-', and does not start or end with '-'",
        ));
    }
    Ok(())
}

fn validate_name(name: &str) -> Result<String> {
    let name = name.split_whitespace().collect::<Vec<_>>().join(" ");
    if name.is_empty() || name.chars().count() > 200 {
        return Err(Error::invalid("invalid_name", Some("name"), "a name is 1 to 200 characters"));
    }
    Ok(name)
}

/// Creates a tenant (platform action). A taken slug is a `slug_taken` conflict.
pub async fn create(db: &Db, audit: &Audit, slug: &str, name: &str) -> Result<Tenant> {
    validate_slug(slug)?;
    let name = validate_name(name)?;
    db.serializable(Scope::Platform { reason: "create tenant" }, |conn, _| {
        let name = name.clone();
        Box::pin(async move { create_in(conn, audit, slug, &name).await })
    })
    .await
}

/// [`create`] inside the caller's platform-context transaction.
pub async fn create_in(conn: &mut sqlx::PgConnection, audit: &Audit, slug: &str, name: &str) -> Result<Tenant> {
    validate_slug(slug)?;
    let name = validate_name(name)?;
    let tenant = store::insert(&mut *conn, TenantId(Uuid::now_v7()), slug, &name).await.map_err(|e| {
        e.on_constraint("tenants_slug_key", || Error::Conflict {
            code: "slug_taken",
            message: format!("a tenant with slug `{slug}` already exists"),
        })
    })?;
    admin_log::record(
        conn,
        Entry {
            tenant: None,
            audit,
            action: "tenant.create",
            target: format!("tenant:{}", tenant.slug),
            before: None,
            after: Some(json!({ "id": tenant.id.0, "slug": tenant.slug, "name": tenant.name })),
        },
    )
    .await?;
    Ok(tenant)
}

/// All tenants, by slug.
pub async fn list(db: &Db) -> Result<Vec<Tenant>> {
    db.serializable(Scope::Platform { reason: "list tenants" }, |conn, _| Box::pin(store::list(conn))).await
}

/// Looks a tenant up by slug; a missing one is `not_found`.
pub async fn by_slug(db: &Db, slug: &str) -> Result<Tenant> {
    db.read(|conn, _| Box::pin(store::by_slug(conn, slug))).await?.ok_or(Error::NotFound { what: "tenant" })
}

/// Moves a tenant to `status` (suspend, activate). Idempotent: setting the current status
/// changes nothing and logs nothing.
pub async fn set_status(db: &Db, audit: &Audit, slug: &str, status: Status) -> Result<Tenant> {
    db.serializable(Scope::Platform { reason: "set tenant status" }, |conn, _| {
        Box::pin(async move {
            let before = store::by_slug(&mut *conn, slug).await?.ok_or(Error::NotFound { what: "tenant" })?;
            if before.status == status {
                return Ok(before);
            }
            if matches!(before.status, Status::Deleting | Status::Reaped | Status::Moved) || status == Status::Moved {
                return Err(Error::Conflict {
                    code: "illegal_transition",
                    message: format!("a {} tenant cannot become {}", before.status.as_str(), status.as_str()),
                });
            }
            let after = store::update_status(&mut *conn, before.id, before.status, status).await?.ok_or(Error::Precondition {
                code: "status_changed",
                message: "the tenant's status changed; reload and retry".into(),
            })?;
            admin_log::record(
                conn,
                Entry {
                    tenant: Some(after.id),
                    audit,
                    action: "tenant.set_status",
                    target: format!("tenant:{slug}"),
                    before: Some(json!({ "status": before.status })),
                    after: Some(json!({ "status": after.status })),
                },
            )
            .await?;
            Ok(after)
        })
    })
    .await
}

/// Where a sealed tenant went: the base URL its seal recorded (`None` when it is not sealed).
pub async fn moved_to(db: &Db, tenant: TenantId) -> Result<Option<String>> {
    // Read committed: one read, asked only of tenants whose status already says `moved`.
    db.single_decision(Scope::Tenant(tenant), |conn, _| Box::pin(store::moved_to(conn, tenant))).await
}

/// The refusal every request to a sealed tenant gets: `tenant_moved`, naming where the same
/// path lives now (the new base URL followed by the request's path and query); `redirect`
/// for a browser, which follows a 308 there.
pub fn moved_error(base_url: &str, path_and_query: &str, redirect: bool) -> Error {
    let base_url = base_url.trim_end_matches('/').to_owned();
    Error::Moved { location: format!("{base_url}{path_and_query}"), base_url, redirect }
}

/// What other nouns may run inside their own transaction; the store itself is private.
pub mod tx {
    pub use super::store::{MoveRecord, by_id, count, imported, moved_to, record_move, unseal_record, update_status};
}
