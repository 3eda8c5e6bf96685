//! `…/workspaces/{w}/connectors/{id}/credentials/{shared|personal}`: set, replace, show, test
//! and remove a connector's credential slot. Values go in and never come out. The shared slot
//! is managed by people with `credential_administration`; a personal slot by its member.

use std::collections::BTreeMap;
use utoipa_axum::{router::OpenApiRouter, routes};

use axum::{
    Json,
    extract::{Path, State},
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

#[derive(Deserialize, utoipa::ToSchema)]
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

/// The answer of `GET …/credentials/{slot}`: the slot's metadata with `manageable: true`, or
/// `manageable: false` with `code: vault_disabled` when the vault is off.
#[derive(utoipa::ToSchema)]
#[allow(dead_code)]
struct ShownSlot {
    connector: String,
    slot: String,
    manageable: bool,
    owner: Option<String>,
    state: Option<String>,
    fields: Option<Vec<slots::FieldMeta>>,
    version: Option<i64>,
    key_id: Option<String>,
    updated_at: Option<chrono::DateTime<chrono::Utc>>,
    updated_by: Option<String>,
    code: Option<String>,
    message: Option<String>,
}

/// The answer of `DELETE …/credentials/{slot}`.
#[derive(utoipa::ToSchema)]
#[allow(dead_code)]
struct RemovedSlot {
    connector: String,
    slot: String,
    /// Always `missing`.
    state: String,
}

/// The answer of `POST …/credentials/{slot}/test`: an MCP server is probed (`testable`, `ok`,
/// `tools`); an HTTP API is only opened and rendered (`testable: false`, `opens`, `message`).
#[derive(utoipa::ToSchema)]
#[allow(dead_code)]
struct TestedSlot {
    connector: String,
    slot: String,
    testable: bool,
    opens: Option<bool>,
    ok: Option<bool>,
    tools: Option<Value>,
    message: Option<String>,
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
        SlotKind::Personal => Ok(Owner::Member(ctx.own_member()?)),
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

/// A credential slot's metadata (`shared` or `personal`); values never come out.
#[utoipa::path(get, path = "/api/v1/tenants/{tenant}/workspaces/{workspace}/connectors/{id}/credentials/{slot}", tag = "credentials", responses((status = 200, body = ShownSlot)))]
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

/// Sets or replaces the slot's credential fields.
#[utoipa::path(put, path = "/api/v1/tenants/{tenant}/workspaces/{workspace}/connectors/{id}/credentials/{slot}", tag = "credentials", security(("session" = [])), request_body = SetCredential, responses((status = 200, body = slots::Metadata)))]
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

/// Removes the slot's credential.
#[utoipa::path(delete, path = "/api/v1/tenants/{tenant}/workspaces/{workspace}/connectors/{id}/credentials/{slot}", tag = "credentials", security(("session" = [])), responses((status = 200, body = RemovedSlot)))]
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
#[utoipa::path(post, path = "/api/v1/tenants/{tenant}/workspaces/{workspace}/connectors/{id}/credentials/{slot}/test", tag = "credentials", security(("session" = [])), responses((status = 200, body = TestedSlot)))]
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

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(show_credential, set_credential, remove_credential)).routes(routes!(test_credential))
}
