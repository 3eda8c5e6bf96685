//! Forks (issue 7 §3): a preview workspace made from another — its bound configuration (as
//! version 1 of the fork's own lineage), its connector state (stored catalogs) and its shared
//! credentials, re-sealed under the fork's associated data. A fork is one move of the copy
//! ledger: record (source `workspace:<source>`, destination `workspace:<fork>`), copy (the fork
//! is created `provisioning`, under the move's lease), then confirm together with the fork's
//! activation. A fork expires (default 72 h, extendable, or pinned); the sweep deletes expired
//! forks with their state, exactly once across replicas.
//!
//! Not copied: members' own credentials and OAuth grants (a refresh token is single-use, so two
//! workspaces holding one would race; a person connects the fork again), activity, and the
//! source's MCP OAuth clients and grants. See `docs/decisions.md`.

pub mod cli;
pub mod http;
mod store;

pub use store::ForkView;

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::json;
use uuid::Uuid;

use crate::{
    admin_log::{self, Audit, Entry},
    config::Config,
    copies::{self, Kind, Move, Role, SourceOutcome},
    db::{Db, Scope},
    error::{Error, Result},
    ids::TenantId,
    tenants::validate_slug,
    vault::{Aad, PURPOSE_CONNECTOR, slots::parse_owner},
    workspaces::{self, Workspace},
};

pub const DEFAULT_TTL_HOURS: i64 = 72;
pub const MAX_TTL_HOURS: i64 = 720;

/// What a fork made.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct Forked {
    pub workspace: Workspace,
    pub fork_of: String,
    pub move_id: Uuid,
    pub catalogs_copied: u64,
    pub credentials_copied: u64,
}

/// A fork's expiry as it stands.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct Expiry {
    pub workspace: String,
    pub expires_at: DateTime<Utc>,
    pub pinned: bool,
}

fn check_hours(field: &'static str, hours: i64) -> Result<()> {
    if (1..=MAX_TTL_HOURS).contains(&hours) {
        Ok(())
    } else {
        Err(Error::invalid("invalid_hours", Some(field), format!("hours are 1 to {MAX_TTL_HOURS}")))
    }
}

/// Forks `source` into a new workspace `slug` that expires after `ttl_hours` (default 72).
pub async fn fork(
    db: &Db,
    config: &Config,
    tenant: TenantId,
    audit: &Audit,
    source: &str,
    slug: &str,
    ttl_hours: Option<i64>,
) -> Result<Forked> {
    validate_slug(slug)?;
    let ttl = ttl_hours.unwrap_or(DEFAULT_TTL_HOURS);
    check_hours("ttl_hours", ttl)?;
    let src = workspaces::bound(db, tenant, source).await?.workspace;
    let fork_id = Uuid::now_v7();
    let mv = Move {
        id: Uuid::now_v7(),
        kind: Kind::Fork,
        workspace: src.id.0,
        rows: vec![(copies::workspace_ref(src.id.0), Role::Source), (copies::workspace_ref(fork_id), Role::Destination)],
    };
    copies::record(db, tenant, audit, config.copies.lease_ms, &mv).await?.epoch()?;
    copies::fault(config, "fork.after_record");
    let outcome = async {
        let (catalogs, credentials) =
            copy(db, config, tenant, audit, &mv, source, NewFork { id: fork_id, slug, ttl_hours: ttl }).await?;
        copies::fault(config, "fork.after_copy");
        let workspace = confirm(db, tenant, audit, &mv, source, fork_id).await?;
        Ok(Forked {
            workspace,
            fork_of: source.to_owned(),
            move_id: mv.id,
            catalogs_copied: catalogs,
            credentials_copied: credentials,
        })
    }
    .await;
    if outcome.is_err() {
        // Nothing of a failed fork is kept: its rows are settled now rather than at lease end.
        copies::sweep::abandon(db, config, tenant, mv.id).await;
    }
    outcome
}

/// The workspace a fork creates: its id, its slug and how many hours it lives.
#[derive(Clone, Copy)]
struct NewFork<'a> {
    id: Uuid,
    slug: &'a str,
    ttl_hours: i64,
}

/// The copy step: under the move's lease, the fork's row (`provisioning`), its configuration,
/// catalogs and re-sealed shared credentials, in one transaction.
async fn copy(
    db: &Db,
    config: &Config,
    tenant: TenantId,
    audit: &Audit,
    mv: &Move,
    source: &str,
    fork: NewFork<'_>,
) -> Result<(u64, u64)> {
    let NewFork { id: fork_id, slug, ttl_hours: ttl } = fork;
    let ring = config.vault_keys.as_ref();
    db.serializable(Scope::Tenant(tenant), move |conn, _| {
        Box::pin(async move {
            copies::hold(&mut *conn, tenant, mv.id).await?;
            let src = workspaces::tx::bound(&mut *conn, tenant, source).await?.ok_or(Error::NotFound { what: "workspace" })?;
            if src.workspace.id.0 != mv.workspace {
                return Err(Error::NotFound { what: "workspace" });
            }
            if !["active", "suspended"].contains(&src.workspace.status.as_str()) {
                return Err(Error::Conflict {
                    code: "workspace_not_active",
                    message: format!("a {} workspace cannot be forked", src.workspace.status),
                });
            }
            let name: String = format!("{} (fork)", src.workspace.name).chars().take(200).collect();
            store::insert_fork(&mut *conn, tenant, fork_id, slug, &name, mv.workspace, ttl).await?;
            let digest = workspaces::digest(&src.document)?;
            workspaces::tx::insert_version(
                &mut *conn,
                tenant,
                crate::ids::WorkspaceId(fork_id),
                1,
                &src.document,
                &digest,
                &audit.actor,
            )
            .await?;
            let catalogs = store::copy_catalogs(&mut *conn, tenant, mv.workspace, fork_id).await?;
            let mut copied = 0u64;
            let mut unreadable = 0u64;
            for c in store::shared_credentials(&mut *conn, tenant, mv.workspace).await? {
                let (Some(ring), Some(owner)) = (ring, parse_owner(&c.owner)) else {
                    unreadable += 1;
                    continue;
                };
                let aad =
                    |workspace| Aad { tenant: tenant.0, workspace, connector: &c.connector, owner, purpose: PURPOSE_CONNECTOR };
                // A shared OAuth grant's tokens are sealed for another purpose: they do not open
                // here and are not copied (see the module comment).
                let Ok(plaintext) = ring.open(&aad(mv.workspace), &c.envelope) else {
                    unreadable += 1;
                    continue;
                };
                let sealed = ring.seal(&aad(fork_id), &plaintext);
                store::insert_credential(&mut *conn, tenant, fork_id, &c, ring.active(), &sealed, &audit.actor).await?;
                copied += 1;
            }
            let entry = Entry {
                tenant: Some(tenant),
                audit,
                action: "fork.copy",
                target: format!("workspace:{slug}"),
                before: None,
                after: Some(json!({
                    "move_id": mv.id, "fork_of": source, "version": 1, "digest": digest,
                    "catalogs": catalogs, "credentials": copied, "credentials_skipped": unreadable,
                })),
            };
            admin_log::record(conn, entry).await?;
            Ok((catalogs, copied))
        })
    })
    .await
}

/// The final step: the ledger confirm and the fork's activation, in one transaction.
async fn confirm(db: &Db, tenant: TenantId, audit: &Audit, mv: &Move, source: &str, fork_id: Uuid) -> Result<Workspace> {
    db.serializable(Scope::Tenant(tenant), move |conn, _| {
        Box::pin(async move {
            copies::confirm(&mut *conn, tenant, audit, mv.id, SourceOutcome::Retained).await?;
            let ws = store::activate(&mut *conn, tenant, fork_id).await?.ok_or_else(|| Error::Precondition {
                code: "copy_lease_lost",
                message: "the fork was settled by the recovery sweep; fork again".into(),
            })?;
            let entry = Entry {
                tenant: Some(tenant),
                audit,
                action: "workspace.fork",
                target: format!("workspace:{}", ws.slug),
                before: Some(json!({ "status": "provisioning" })),
                after: Some(json!({ "status": ws.status, "fork_of": source, "move_id": mv.id })),
            };
            admin_log::record(conn, entry).await?;
            Ok(ws)
        })
    })
    .await
}

/// Extends a fork's life by `hours` (from the later of now and its current expiry), or pins or
/// unpins it (`hours` = 0). A workspace that is not a fork answers 409 `not_a_fork`.
async fn set_expiry(db: &Db, tenant: TenantId, audit: &Audit, slug: &str, hours: i64, pin: Option<bool>) -> Result<Expiry> {
    db.serializable(Scope::Tenant(tenant), move |conn, _| {
        Box::pin(async move {
            let row = store::lock_by_slug(&mut *conn, tenant, slug).await?.ok_or(Error::NotFound { what: "workspace" })?;
            if row.fork_of.is_none() || row.status == "reaped" {
                return Err(Error::Conflict { code: "not_a_fork", message: format!("`{slug}` is not a fork") });
            }
            let pinned = pin.unwrap_or(row.pinned);
            let (expires_at, pinned) = store::set_expiry(&mut *conn, tenant, row.id, hours, pinned).await?;
            let entry = Entry {
                tenant: Some(tenant),
                audit,
                action: if pin.is_some() { "fork.pin" } else { "fork.extend" },
                target: format!("workspace:{slug}"),
                before: Some(json!({ "expires_at": row.expires_at, "pinned": row.pinned })),
                after: Some(json!({ "expires_at": expires_at, "pinned": pinned })),
            };
            admin_log::record(conn, entry).await?;
            Ok(Expiry { workspace: slug.to_owned(), expires_at, pinned })
        })
    })
    .await
}

/// Whether workspace `slug` is a fork, and its expiry (for its page); `None` when it is not.
pub async fn view(db: &Db, tenant: TenantId, slug: &str) -> Result<Option<ForkView>> {
    db.single_decision(Scope::Tenant(tenant), move |conn, _| Box::pin(store::view(conn, tenant, slug))).await
}

pub async fn extend(db: &Db, tenant: TenantId, audit: &Audit, slug: &str, hours: i64) -> Result<Expiry> {
    check_hours("hours", hours)?;
    set_expiry(db, tenant, audit, slug, hours, None).await
}

pub async fn pin(db: &Db, tenant: TenantId, audit: &Audit, slug: &str, pinned: bool) -> Result<Expiry> {
    set_expiry(db, tenant, audit, slug, 0, Some(pinned)).await
}

/// Deletes expired, unpinned forks with their state (a bounded batch), each exactly once across
/// replicas with its admin-log row; a fork with a pending copy waits for its settlement.
pub async fn expire(db: &Db, _config: &Config) -> Result<u64> {
    const SCOPE: Scope = Scope::Platform { reason: "expired fork sweep" };
    let due = db.single_decision(SCOPE, |conn, _| Box::pin(store::expired(conn, copies::sweep::BATCH))).await?;
    let audit = Audit { actor: "system:fork_sweep".into(), request_id: None };
    let mut deleted = 0;
    for (tenant, id) in due {
        let audit = &audit;
        let done = db
            .serializable(Scope::Tenant(tenant), move |conn, _| {
                Box::pin(async move {
                    let Some(slug) = store::lock_expired(&mut *conn, tenant, id).await? else { return Ok(false) };
                    if copies::tx::pending_for(&mut *conn, tenant, id).await? {
                        return Ok(false);
                    }
                    if !store::delete_disposable(&mut *conn, tenant, id).await? {
                        return Ok(false);
                    }
                    let closed = copies::tx::close_ref(&mut *conn, tenant, &copies::workspace_ref(id)).await?;
                    let entry = Entry {
                        tenant: Some(tenant),
                        audit,
                        action: "fork.expire",
                        target: format!("workspace:{slug}"),
                        before: Some(json!({ "workspace_id": id })),
                        after: Some(json!({ "deleted": true, "copies_settled": closed })),
                    };
                    admin_log::record(conn, entry).await?;
                    Ok(true)
                })
            })
            .await?;
        deleted += u64::from(done);
    }
    Ok(deleted)
}

/// What other nouns may run inside their own transaction; the store itself is private.
pub mod tx {
    pub use super::store::delete_disposable;
}
