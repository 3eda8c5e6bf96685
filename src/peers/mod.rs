//! Peer bindings (issue 7 §7): a workspace's `peer` connector calls another workspace of the
//! same tenant, in-process, as the same caller. Its target is decided at call time:
//!
//! 1. an explicit binding of the connector (`peer_bindings`) wins; if it was invalidated (its
//!    target archived, reaped or deleted — a trigger on `workspaces` does that in the same
//!    transaction as the change) the call answers `bound_unavailable`, with no fallback;
//! 2. otherwise the one `active`, primary (`fork_of IS NULL`) workspace of the tenant bound to
//!    the connector's blueprint; none answers `not_installed`, several `ambiguous` (refused,
//!    never guessed).
//!
//! The gateway side (catalog and call through the target) is `crate::gateway::peer`.

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
    ids::TenantId,
    workspaces::{self, Connector},
};

/// Peer hops one call may take (a peer calling a peer …); the next is refused.
pub const MAX_DEPTH: usize = 2;

/// A workspace a peer connector may lead to.
#[derive(Clone, Debug, Serialize)]
pub struct Target {
    pub id: Uuid,
    pub slug: String,
    pub status: String,
}

/// An explicit binding of a peer connector.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
#[schema(as = PeerBinding)]
pub struct Binding {
    pub connector: String,
    pub target_id: Uuid,
    /// The target's slug; absent once the target is gone.
    pub target: Option<String>,
    pub created_by: String,
    pub created_at: DateTime<Utc>,
    pub invalidated_at: Option<DateTime<Utc>>,
    /// `target_archived`, `target_reaped` or `target_deleted`.
    pub invalidated_reason: Option<String>,
}

/// Where a peer connector leads right now.
#[derive(Clone, Debug)]
pub enum Resolution {
    /// An explicit, valid binding.
    Bound(Target),
    /// No binding: the one candidate of the blueprint.
    Resolved(Target),
    /// An invalidated binding: no fallback.
    BoundUnavailable {
        reason: String,
    },
    NotInstalled,
    /// Several candidates (the first two, by slug).
    Ambiguous(Vec<String>),
}

impl Resolution {
    /// The stable word for it (`bound`, `resolved`, or the error code a call answers).
    pub fn code(&self) -> &'static str {
        match self {
            Resolution::Bound(_) => "bound",
            Resolution::Resolved(_) => "resolved",
            Resolution::BoundUnavailable { .. } => "bound_unavailable",
            Resolution::NotInstalled => "not_installed",
            Resolution::Ambiguous(_) => "ambiguous",
        }
    }

    pub fn target(&self) -> Option<&Target> {
        match self {
            Resolution::Bound(t) | Resolution::Resolved(t) => Some(t),
            _ => None,
        }
    }

    /// What a call through the connector is told when there is no target.
    pub fn message(&self, blueprint: &str) -> String {
        match self {
            Resolution::BoundUnavailable { reason } => format!(
                "this peer connector is bound to a workspace that is no longer available ({reason}); an operator must bind it again or unbind it"
            ),
            Resolution::NotInstalled => format!("no active workspace of this tenant runs the blueprint `{blueprint}`"),
            Resolution::Ambiguous(slugs) => format!(
                "several active workspaces run the blueprint `{blueprint}` (e.g. {}); bind this peer connector to one explicitly",
                slugs.join(", ")
            ),
            Resolution::Bound(t) | Resolution::Resolved(t) => format!("resolved to `{}`", t.slug),
        }
    }
}

async fn resolve_in(
    conn: &mut sqlx::PgConnection,
    tenant: TenantId,
    workspace: Uuid,
    connector: &str,
    blueprint: &str,
) -> Result<Resolution> {
    if let Some((b, status)) = store::get(&mut *conn, tenant, workspace, connector).await? {
        return Ok(match (b.invalidated_reason, b.target, status) {
            (None, Some(slug), Some(status)) if b.invalidated_at.is_none() => {
                Resolution::Bound(Target { id: b.target_id, slug, status })
            }
            (reason, _, _) => Resolution::BoundUnavailable { reason: reason.unwrap_or_else(|| "target_deleted".into()) },
        });
    }
    let mut found = store::candidates(conn, tenant, blueprint, 2).await?;
    Ok(match found.len() {
        0 => Resolution::NotInstalled,
        1 => Resolution::Resolved(found.remove(0)),
        _ => Resolution::Ambiguous(found.into_iter().map(|t| t.slug).collect()),
    })
}

/// Where peer connector `connector` (naming `blueprint`) of `workspace` leads now.
pub async fn resolve(db: &Db, tenant: TenantId, workspace: Uuid, connector: &str, blueprint: &str) -> Result<Resolution> {
    db.serializable(Scope::Tenant(tenant), |conn, _| Box::pin(resolve_in(conn, tenant, workspace, connector, blueprint))).await
}

/// What a replica caches a [`Resolution`] under: tenant, calling workspace, connector, blueprint.
pub type ResolutionKey = (TenantId, Uuid, String, String);

/// [`resolve`], with the tenant's epoch read in the same snapshot: the label a replica may
/// cache the answer under (every binding, workspace and blueprint change moves the epoch).
pub async fn resolve_labelled(
    db: &Db,
    tenant: TenantId,
    workspace: Uuid,
    connector: &str,
    blueprint: &str,
) -> Result<(Resolution, i64)> {
    db.serializable(Scope::Tenant(tenant), |conn, _| {
        Box::pin(async move {
            let epoch = sqlx::query_scalar!("SELECT epoch FROM tenants WHERE id = $1", tenant.0).fetch_one(&mut *conn).await?;
            Ok((resolve_in(conn, tenant, workspace, connector, blueprint).await?, epoch))
        })
    })
    .await
}

/// The workspace `slug` and the blueprint its peer connector `connector` names.
async fn peer_connector(
    conn: &mut sqlx::PgConnection,
    tenant: TenantId,
    slug: &str,
    connector: &str,
) -> Result<(workspaces::Bound, String)> {
    let bound = workspaces::tx::bound(&mut *conn, tenant, slug).await?.ok_or(Error::NotFound { what: "workspace" })?;
    match bound.document.connectors.get(connector) {
        Some(Connector::Peer { blueprint }) => {
            let blueprint = blueprint.clone();
            Ok((bound, blueprint))
        }
        Some(other) => Err(Error::Conflict {
            code: "not_a_peer",
            message: format!("connector `{connector}` is a {} connector, not a peer", other.kind()),
        }),
        None => Err(Error::NotFound { what: "connector" }),
    }
}

/// Binds peer connector `connector` of workspace `slug` to workspace `target` (same tenant;
/// another tenant's slug is not found). Replaces an earlier or invalidated binding. The target
/// must be active, and not the workspace itself.
pub async fn bind(db: &Db, tenant: TenantId, audit: &Audit, slug: &str, connector: &str, target: &str) -> Result<Binding> {
    db.serializable(Scope::Tenant(tenant), |conn, _| {
        Box::pin(async move {
            let (bound, _) = peer_connector(&mut *conn, tenant, slug, connector).await?;
            let to = workspaces::tx::bound(&mut *conn, tenant, target).await?.ok_or(Error::NotFound { what: "workspace" })?;
            let (from, to_id) = (bound.workspace.id.0, to.workspace.id.0);
            if from == to_id {
                return Err(Error::Conflict { code: "peer_cycle", message: "a workspace cannot be its own peer".into() });
            }
            let before = store::get(&mut *conn, tenant, from, connector).await?.map(|(b, _)| b);
            // The conditional insert decides: the target is active when the row is written.
            let made = store::upsert(&mut *conn, tenant, from, connector, to_id, &audit.actor).await?.ok_or_else(|| {
                Error::Conflict {
                    code: "target_not_active",
                    message: format!("workspace `{target}` is {}; only an active workspace can be bound", to.workspace.status),
                }
            })?;
            let entry = Entry {
                tenant: Some(tenant),
                audit,
                action: "peer.bind",
                target: format!("workspace:{slug}/connector:{connector}"),
                before: before.map(|b| json!({ "target_id": b.target_id, "invalidated_reason": b.invalidated_reason })),
                after: Some(json!({ "target": target, "target_id": to_id })),
            };
            admin_log::record(conn, entry).await?;
            Ok(made)
        })
    })
    .await
}

/// Removes the binding (resolution by blueprint applies again); none is not found.
pub async fn unbind(db: &Db, tenant: TenantId, audit: &Audit, slug: &str, connector: &str) -> Result<()> {
    db.serializable(Scope::Tenant(tenant), |conn, _| {
        Box::pin(async move {
            let bound = workspaces::tx::bound(&mut *conn, tenant, slug).await?.ok_or(Error::NotFound { what: "workspace" })?;
            let was = store::delete(&mut *conn, tenant, bound.workspace.id.0, connector)
                .await?
                .ok_or(Error::NotFound { what: "peer binding" })?;
            let entry = Entry {
                tenant: Some(tenant),
                audit,
                action: "peer.unbind",
                target: format!("workspace:{slug}/connector:{connector}"),
                before: Some(json!({ "target_id": was })),
                after: None,
            };
            admin_log::record(conn, entry).await
        })
    })
    .await
}

/// One peer connector of a workspace: its blueprint, its binding and where it leads now.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct PeerView {
    pub connector: String,
    pub blueprint: String,
    pub binding: Option<Binding>,
    /// `bound`, `resolved`, `bound_unavailable`, `not_installed` or `ambiguous`.
    pub resolution: &'static str,
    /// The target's slug, when there is one.
    pub target: Option<String>,
}

/// Every peer connector of workspace `slug`, as a call would resolve it now.
pub async fn list(db: &Db, tenant: TenantId, slug: &str) -> Result<Vec<PeerView>> {
    db.serializable(Scope::Tenant(tenant), |conn, _| {
        Box::pin(async move {
            let bound = workspaces::tx::bound(&mut *conn, tenant, slug).await?.ok_or(Error::NotFound { what: "workspace" })?;
            let ws = bound.workspace.id.0;
            let mut out = Vec::new();
            for (id, c) in &bound.document.connectors {
                let Connector::Peer { blueprint } = c else { continue };
                let binding = store::get(&mut *conn, tenant, ws, id).await?.map(|(b, _)| b);
                let resolution = resolve_in(&mut *conn, tenant, ws, id, blueprint).await?;
                out.push(PeerView {
                    connector: id.clone(),
                    blueprint: blueprint.clone(),
                    binding,
                    resolution: resolution.code(),
                    target: resolution.target().map(|t| t.slug.clone()),
                });
            }
            Ok(out)
        })
    })
    .await
}
