//! `/api/v1/tenants/{t}/workspaces` and their connectors. Reading needs membership (or a
//! token); changing needs a person with `credential_administration`.

use axum::{
    Json, Router,
    extract::{Path, State},
    http::StatusCode,
    routing::{delete, get},
};
use serde::Deserialize;
use serde_json::{Value, json};

use super::{Bound, Connector, Workspace};

use crate::{
    AppState,
    auth::TenantCtx,
    error::{Error, FieldIssue, Result},
    extract::ApiJson,
    members::Permission,
    workspaces::{self, config::valid_connector_id},
};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateWorkspace {
    slug: String,
    name: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AddConnector {
    id: String,
    /// The version the editor read; the edit is refused with 412 if it moved on.
    expected_version: Option<i32>,
    #[serde(flatten)]
    connector: Value,
}

async fn list_workspaces(ctx: TenantCtx, State(state): State<AppState>) -> Result<Json<Vec<Workspace>>> {
    Ok(Json(workspaces::list(&state.db, ctx.tenant.id).await?))
}

async fn create_workspace(
    ctx: TenantCtx,
    State(state): State<AppState>,
    ApiJson(body): ApiJson<CreateWorkspace>,
) -> Result<(StatusCode, Json<Workspace>)> {
    ctx.require_person(Permission::CredentialAdministration)?;
    let ws = workspaces::create(&state.db, ctx.tenant.id, &ctx.audit, &body.slug, body.name.as_deref()).await?;
    Ok((StatusCode::CREATED, Json(ws)))
}

async fn get_workspace(
    ctx: TenantCtx,
    State(state): State<AppState>,
    Path((_, slug)): Path<(String, String)>,
) -> Result<Json<Bound>> {
    Ok(Json(workspaces::bound(&state.db, ctx.tenant.id, &slug).await?))
}

/// Parses a connector from its JSON form, naming the field that is wrong.
pub fn parse_connector(id: &str, value: Value) -> Result<Connector> {
    if !valid_connector_id(id) {
        return Err(Error::InvalidConfig {
            issues: vec![FieldIssue {
                field: "id".into(),
                message: "a connector id is 1 to 64 characters of a-z, 0-9, '_' and '-'".into(),
            }],
        });
    }
    serde_json::from_value(value)
        .map_err(|e| Error::InvalidConfig { issues: vec![FieldIssue { field: "connector".into(), message: e.to_string() }] })
}

async fn add_connector(
    ctx: TenantCtx,
    State(state): State<AppState>,
    Path((_, slug)): Path<(String, String)>,
    ApiJson(body): ApiJson<AddConnector>,
) -> Result<(StatusCode, Json<Bound>)> {
    ctx.require_person(Permission::CredentialAdministration)?;
    let connector = parse_connector(&body.id, body.connector)?;
    crate::vault::slots::check_connector(state.config.vault_keys.as_ref(), &connector)?;
    let bound =
        workspaces::add_connector(&state.db, ctx.tenant.id, &ctx.audit, &slug, body.expected_version, &body.id, connector)
            .await?;
    Ok((StatusCode::CREATED, Json(bound)))
}

async fn remove_connector(
    ctx: TenantCtx,
    State(state): State<AppState>,
    Path((_, slug, id)): Path<(String, String, String)>,
) -> Result<Json<Bound>> {
    ctx.require_person(Permission::CredentialAdministration)?;
    Ok(Json(workspaces::remove_connector(&state.db, ctx.tenant.id, &ctx.audit, &slug, None, &id).await?))
}

#[derive(Deserialize)]
struct ConfigurePatch {
    expected_version: Option<i32>,
    #[serde(flatten)]
    patch: serde_json::Map<String, Value>,
}

/// `PATCH …/workspaces/{w}/config` with `classification` and/or `grants` (`null` removes them).
async fn configure(
    ctx: TenantCtx,
    State(state): State<AppState>,
    Path((_, slug)): Path<(String, String)>,
    ApiJson(body): ApiJson<ConfigurePatch>,
) -> Result<Json<Bound>> {
    ctx.require_person(Permission::CredentialAdministration)?;
    if let Some(unknown) =
        body.patch.keys().find(|k| !["classification", "grants", "pools", "pinning", "redaction"].contains(&k.as_str()))
    {
        return Err(Error::InvalidConfig {
            issues: vec![FieldIssue { field: unknown.clone(), message: "unknown field".into() }],
        });
    }
    let patch = Value::Object(body.patch);
    Ok(Json(workspaces::configure(&state.db, ctx.tenant.id, &ctx.audit, &slug, body.expected_version, &patch).await?))
}

async fn list_connectors(
    ctx: TenantCtx,
    State(state): State<AppState>,
    Path((_, slug)): Path<(String, String)>,
) -> Result<Json<Value>> {
    let bound = workspaces::bound(&state.db, ctx.tenant.id, &slug).await?;
    Ok(Json(json!({ "version": bound.workspace.bound_version, "connectors": bound.document.connectors })))
}

/// `POST …/connectors/{id}/refresh`: fetch the connector's catalog now and store it for every
/// replica (otherwise catalogs are fetched again after their TTL).
async fn refresh_connector(
    ctx: TenantCtx,
    State(state): State<AppState>,
    Path((_, slug, id)): Path<(String, String, String)>,
) -> Result<Json<Value>> {
    ctx.require(Permission::ConnectorAccess)?;
    let bound = workspaces::bound(&state.db, ctx.tenant.id, &slug).await?;
    let connector = bound.document.connectors.get(&id).ok_or(Error::NotFound { what: "connector" })?;
    let key = crate::gateway::downstream::key(ctx.tenant.id.0, bound.workspace.id.0, &id, connector);
    let target = crate::gateway::catalogs::Target {
        tenant: ctx.tenant.id,
        workspace: bound.workspace.id.0,
        connector_id: &id,
        config_key: crate::gateway::downstream::config_key(&key),
        pinning: bound.document.pinning,
    };
    let caller = crate::gateway::credentials::Caller {
        tenant: ctx.tenant.id,
        tenant_slug: &ctx.tenant.slug,
        workspace: bound.workspace.id.0,
        workspace_slug: &slug,
        member_id: ctx.member_id(),
        epoch: None,
    };
    let credential = match connector {
        Connector::HttpApi(_) => None,
        _ => crate::gateway::credentials::resolve(&state, &caller, &id, connector).await.map_err(|p| p.into_error())?,
    };
    let (tools, fetched_at) = state
        .downstreams
        .fetch(&state.db, target, &key, connector, credential.as_ref(), Some(&ctx.audit))
        .await
        .map_err(|f| f.into_error())?;
    Ok(Json(json!({ "connector": id, "tools": tools.len(), "fetched_at": fetched_at })))
}

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/v1/tenants/{tenant}/workspaces", get(list_workspaces).post(create_workspace))
        .route("/api/v1/tenants/{tenant}/workspaces/{workspace}", get(get_workspace))
        .route("/api/v1/tenants/{tenant}/workspaces/{workspace}/config", axum::routing::patch(configure))
        .route("/api/v1/tenants/{tenant}/workspaces/{workspace}/connectors", get(list_connectors).post(add_connector))
        .route("/api/v1/tenants/{tenant}/workspaces/{workspace}/connectors/{id}", delete(remove_connector))
        .route("/api/v1/tenants/{tenant}/workspaces/{workspace}/connectors/{id}/refresh", axum::routing::post(refresh_connector))
}
