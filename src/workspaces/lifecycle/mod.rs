//! The workspace lifecycle and blueprint binds.
//!
//! `provisioning → active ⇄ suspended`, `active | suspended → archived`, `archived → active`
//! (unarchive, a restore); `archived → reaped` is the reap's. Each transition is one
//! compare-and-set on the source states that bumps the revision in the same statement, with its
//! admin-log row in the same transaction; a workspace row update bumps the tenant's epoch, so
//! every replica serves the new state on its next request.

pub mod cli;
pub mod http;
mod store;

use serde::Serialize;
use serde_json::json;

use crate::{
    admin_log::{self, Audit, Entry},
    blueprints,
    db::{Db, Scope},
    error::{Error, Result},
    ids::TenantId,
    workspaces::{self, Workspace},
};

/// A lifecycle transition (reap excepted).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transition {
    /// `provisioning → active`
    Activate,
    /// `active → suspended`
    Suspend,
    /// `suspended → active`
    Resume,
    /// `active | suspended → archived`
    Archive,
    /// `archived → active`
    Unarchive,
}

impl Transition {
    pub fn verb(self) -> &'static str {
        match self {
            Transition::Activate => "activate",
            Transition::Suspend => "suspend",
            Transition::Resume => "resume",
            Transition::Archive => "archive",
            Transition::Unarchive => "unarchive",
        }
    }

    /// The states this transition may start from.
    pub fn from(self) -> &'static [&'static str] {
        match self {
            Transition::Activate => &["provisioning"],
            Transition::Suspend => &["active"],
            Transition::Resume => &["suspended"],
            Transition::Archive => &["active", "suspended"],
            Transition::Unarchive => &["archived"],
        }
    }

    pub fn to(self) -> &'static str {
        match self {
            Transition::Suspend => "suspended",
            Transition::Archive => "archived",
            Transition::Activate | Transition::Resume | Transition::Unarchive => "active",
        }
    }
}

fn binding_changed() -> Error {
    Error::Precondition { code: "binding_changed", message: "binding changed; reload and retry".into() }
}

fn reaping() -> Error {
    Error::Conflict { code: "reaping", message: "a reap is claimed for this workspace".into() }
}

/// Applies `transition` to the workspace `slug`: 404 when missing (or another tenant's), 409
/// `invalid_transition` naming the allowed source states when it is in any other state.
pub async fn transition(db: &Db, tenant: TenantId, audit: &Audit, slug: &str, transition: Transition) -> Result<Workspace> {
    db.serializable(Scope::Tenant(tenant), move |conn, _| {
        Box::pin(async move {
            // Read first for the refusal's message and the log's `before`; the conditional
            // update below decides (serializable: nothing changes between the two unseen).
            let current = store::current(&mut *conn, tenant, slug).await?.ok_or(Error::NotFound { what: "workspace" })?;
            let Some(ws) = store::transition(&mut *conn, tenant, slug, transition.from(), transition.to()).await? else {
                if current.reap_claimed_at.is_some() {
                    return Err(reaping());
                }
                return Err(Error::Conflict {
                    code: "invalid_transition",
                    message: format!(
                        "cannot {} a workspace that is {}: allowed only from {}",
                        transition.verb(),
                        current.status,
                        transition.from().join(" or ")
                    ),
                });
            };
            let entry = Entry {
                tenant: Some(tenant),
                audit,
                action: match transition {
                    Transition::Activate => "workspace.activate",
                    Transition::Suspend => "workspace.suspend",
                    Transition::Resume => "workspace.resume",
                    Transition::Archive => "workspace.archive",
                    Transition::Unarchive => "workspace.unarchive",
                },
                target: format!("workspace:{slug}"),
                before: Some(json!({ "status": current.status, "revision": current.revision })),
                after: Some(json!({ "status": ws.status, "revision": ws.revision })),
            };
            admin_log::record(conn, entry).await?;
            Ok(ws)
        })
    })
    .await
}

/// A workspace bound to a blueprint version.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
#[schema(as = WorkspaceBinding)]
pub struct Binding {
    pub workspace: Workspace,
    pub blueprint: String,
    pub blueprint_version: i32,
    pub digest: String,
}

/// Binds the workspace `slug` to version `version` of blueprint `blueprint`: the version's
/// document becomes the next version of the workspace's own lineage, bound by compare-and-set
/// on `expected` (the bound version the caller read) and on the erasure epoch this transaction
/// read, only while no reap is claimed and the workspace is active or suspended. A lost race
/// answers 412 `binding_changed` and writes nothing; a version not admitted answers 409.
pub async fn bind(
    db: &Db,
    tenant: TenantId,
    audit: &Audit,
    slug: &str,
    blueprint: &str,
    version: i32,
    expected: i32,
) -> Result<Binding> {
    db.serializable(Scope::Tenant(tenant), move |conn, _| {
        Box::pin(async move {
            let current = store::current(&mut *conn, tenant, slug).await?.ok_or(Error::NotFound { what: "workspace" })?;
            if current.bound_version != expected {
                return Err(binding_changed());
            }
            if current.reap_claimed_at.is_some() {
                return Err(reaping());
            }
            if !["active", "suspended"].contains(&current.status.as_str()) {
                return Err(Error::Conflict {
                    code: "workspace_not_bindable",
                    message: format!("the workspace is {}: only an active or suspended workspace is bound", current.status),
                });
            }
            let (blueprint_id, admitted) = blueprints::admitted(&mut *conn, tenant, blueprint, version).await?;
            let digest = workspaces::digest(&admitted.document)?;
            let next = current.bound_version + 1;
            workspaces::tx::insert_version(&mut *conn, tenant, current.id, next, &admitted.document, &digest, &audit.actor)
                .await
                .map_err(|e| if e.code() == "binding_changed" { binding_changed() } else { e })?;
            let cas = store::BindCas {
                id: current.id,
                from_version: current.bound_version,
                erasure_epoch: current.erasure_epoch,
                to_version: next,
                blueprint_id: blueprint_id.0,
                blueprint_version: version,
            };
            let workspace = store::bind(&mut *conn, tenant, &cas).await?.ok_or_else(binding_changed)?;
            let entry = Entry {
                tenant: Some(tenant),
                audit,
                action: "workspace.bind",
                target: format!("workspace:{slug}"),
                before: Some(json!({
                    "version": current.bound_version,
                    "revision": current.revision,
                    "blueprint_id": current.blueprint_id,
                    "blueprint_version": current.blueprint_version,
                })),
                after: Some(json!({
                    "version": next,
                    "revision": workspace.revision,
                    "blueprint": blueprint,
                    "blueprint_version": version,
                    "digest": digest,
                })),
            };
            admin_log::record(conn, entry).await?;
            Ok(Binding { workspace, blueprint: blueprint.to_owned(), blueprint_version: version, digest })
        })
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::Transition;

    const ALL: [Transition; 5] =
        [Transition::Activate, Transition::Suspend, Transition::Resume, Transition::Archive, Transition::Unarchive];

    /// The issue's graph, edge by edge: nothing else is reachable through these transitions,
    /// and nothing leaves `reaped` (the reap's own transition is not one of them).
    #[test]
    fn transitions_are_exactly_the_issues_edges() {
        let mut edges: Vec<(&str, &str)> = ALL.iter().flat_map(|t| t.from().iter().map(move |f| (*f, t.to()))).collect();
        edges.sort();
        let mut expected = vec![
            ("provisioning", "active"),
            ("active", "suspended"),
            ("suspended", "active"),
            ("active", "archived"),
            ("suspended", "archived"),
            ("archived", "active"),
        ];
        expected.sort();
        assert_eq!(edges, expected);
        assert!(ALL.iter().all(|t| !t.from().contains(&"reaped") && t.to() != "reaped" && !t.from().contains(&t.to())));
    }
}
