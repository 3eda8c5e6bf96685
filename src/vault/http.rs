//! `…/workspaces/{w}/connectors/{id}/credentials/{shared|personal}`: set, replace, show, test
//! and remove a connector's credential slot. Values go in and never come out. The shared slot
//! is managed by people with `credential_administration`; a personal slot by its member.

use std::collections::BTreeMap;

use axum::{
    Json, Router,
    extract::{Path, State},
    routing::{get, post},
};
use serde::Deserialize;
use serde_json::{Value, json};

use super::{
    Owner,
    slots::{self, Slot},
};
use crate::{
    AppState,
    auth::TenantCtx,
    error::{Error, Result},
    extract::ApiJson,
    gateway::credentials,
    members::Permission,
    workspaces::{Connector, config::SlotKind},
};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SetCredential {
    fields: BTreeMap<String, String>,
}

impl Drop for SetCredential {
    fn drop(&mut self) {
        use zeroize::Zeroize;
        for value in self.fields.values_mut() {
            value.zeroize();
        }
    }
}

type SlotPath = Path<(String, String, String, String)>;

fn kind(slot: &str) -> Result<SlotKind> {
    match slot {
        "shared" => Ok(SlotKind::Shared),
        "personal" => Ok(SlotKind::Personal),
        _ => Err(Error::NotFound { what: "credential slot" }),
    }
}

/// Who may manage the slot and whose it is: the shared one needs `credential_administration`;
/// a personal one is the signed-in member's own. Tokens never manage credentials.
fn owner(ctx: &TenantCtx, kind: SlotKind) -> Result<Owner> {
    match kind {
        SlotKind::Shared => {
            ctx.require_person(Permission::CredentialAdministration)?;
            Ok(Owner::Shared)
        }
        SlotKind::Personal => Ok(Owner::Member(ctx.require_person(Permission::ConnectorAccess)?.id)),
    }
}

/// A slot a request manages, checked in order: the slot kind, who may manage it, the vault
/// on, and the workspace's connector taking that kind of slot.
struct Managed<'a> {
    kind: SlotKind,
    owner: Owner,
    ring: &'a super::KeyRing,
    workspace: uuid::Uuid,
    connector: Connector,
}

async fn managed<'a>(ctx: &TenantCtx, state: &'a AppState, ws: &str, id: &str, slot: &str) -> Result<Managed<'a>> {
    let kind = kind(slot)?;
    let owner = owner(ctx, kind)?;
    let ring = slots::require(state.config.vault_keys.as_ref())?;
    let (workspace, connector) = slots::resolve(&state.db, ctx.tenant.id, ws, id, kind).await?;
    Ok(Managed { kind, owner, ring, workspace, connector })
}

async fn show_credential(
    ctx: TenantCtx,
    State(state): State<AppState>,
    Path((_, ws, id, slot)): SlotPath,
) -> Result<Json<Value>> {
    let kind = kind(&slot)?;
    let owner = match kind {
        // Metadata of the shared slot is no secret: anyone who may use the connector sees it.
        SlotKind::Shared => {
            ctx.require(Permission::ConnectorAccess)?;
            Owner::Shared
        }
        SlotKind::Personal => owner(&ctx, kind)?,
    };
    let (workspace, _) = slots::resolve(&state.db, ctx.tenant.id, &ws, &id, kind).await?;
    if state.config.vault_keys.is_none() {
        return Ok(Json(json!({
            "connector": id, "slot": kind.as_str(), "manageable": false, "code": "vault_disabled",
            "message": "credential slots need the vault: set GATEHOUSE_VAULT_KEYS on every replica",
        })));
    }
    let meta = slots::show(&state.db, Slot { tenant: ctx.tenant.id, workspace, connector: &id, owner }, kind).await?;
    let mut body = serde_json::to_value(meta).map_err(anyhow::Error::from)?;
    body["manageable"] = Value::Bool(true);
    Ok(Json(body))
}

async fn set_credential(
    ctx: TenantCtx,
    State(state): State<AppState>,
    Path((_, ws, id, slot)): SlotPath,
    ApiJson(mut body): ApiJson<SetCredential>,
) -> Result<Json<slots::Metadata>> {
    let Managed { kind, owner, ring, workspace, connector } = managed(&ctx, &state, &ws, &id, &slot).await?;
    slots::check_fields(&connector, &body.fields)?;
    let fields = slots::Fields(std::mem::take(&mut body.fields));
    let slot = Slot { tenant: ctx.tenant.id, workspace, connector: &id, owner };
    Ok(Json(slots::set(&state.db, ring, &ctx.audit, slot, kind, fields).await?))
}

async fn remove_credential(
    ctx: TenantCtx,
    State(state): State<AppState>,
    Path((_, ws, id, slot)): SlotPath,
) -> Result<Json<Value>> {
    let Managed { kind, owner, workspace, .. } = managed(&ctx, &state, &ws, &id, &slot).await?;
    slots::remove(&state.db, &ctx.audit, Slot { tenant: ctx.tenant.id, workspace, connector: &id, owner }).await?;
    Ok(Json(json!({ "connector": id, "slot": kind.as_str(), "state": "missing" })))
}

/// Tries the connector with the credential: an MCP server lists its tools over a fresh
/// session; an HTTP API has no call known to be safe, so only opening and rendering are checked.
async fn test_credential(
    ctx: TenantCtx,
    State(state): State<AppState>,
    Path((_, ws, id, slot)): SlotPath,
) -> Result<Json<Value>> {
    let Managed { kind, owner, workspace, connector, .. } = managed(&ctx, &state, &ws, &id, &slot).await?;
    let caller = credentials::Caller {
        tenant: ctx.tenant.id,
        tenant_slug: &ctx.tenant.slug,
        workspace,
        workspace_slug: &ws,
        member_id: owner.member_id(),
        epoch: None,
    };
    let credential = credentials::resolve(&state, &caller, &id, &connector).await.map_err(|p| p.into_error())?;
    match &connector {
        Connector::HttpApi(_) => Ok(Json(json!({
            "connector": id, "slot": kind.as_str(), "testable": false, "opens": true,
            "message": "the credential opens and fills the connector's headers; an HTTP API has no call known to be safe, so it was not called",
        }))),
        _ => {
            let tools = state.downstreams.probe(&connector, credential.as_ref()).await.map_err(|f| f.into_error())?;
            Ok(Json(json!({ "connector": id, "slot": kind.as_str(), "testable": true, "ok": true, "tools": tools })))
        }
    }
}

pub fn router() -> Router<AppState> {
    const SLOT: &str = "/api/v1/tenants/{tenant}/workspaces/{workspace}/connectors/{id}/credentials/{slot}";
    Router::new()
        .route(SLOT, get(show_credential).put(set_credential).delete(remove_credential))
        .route(&format!("{SLOT}/test"), post(test_credential))
}
