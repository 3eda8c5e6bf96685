//! `/api/v1/tenants/{t}/workspaces` and their connectors. Reading needs membership (or a
//! token); changing needs a person with `credential_administration`.

use axum::{
    Json,
    extract::{Path, State},
    http::StatusCode,
};
use serde::Deserialize;
use serde_json::{Value, json};
use utoipa_axum::{router::OpenApiRouter, routes};

use super::{Bound, Connector, Workspace};

use crate::{
    AppState,
    auth::TenantCtx,
    error::{Error, FieldIssue, Result},
    extract::ApiJson,
    members::Permission,
    workspaces::{self, config::valid_connector_id},
};

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
struct CreateWorkspace {
    slug: String,
    name: Option<String>,
}

/// No `deny_unknown_fields` here: serde does not support it beside `flatten` (it refuses every
/// flattened field). Unknown fields are refused all the same, by the connector's own parse.
#[derive(Deserialize)]
struct AddConnector {
    id: String,
    /// The version the editor read; the edit is refused with 412 if it moved on.
    expected_version: Option<i32>,
    #[serde(flatten)]
    connector: Value,
}

/// The body of `POST …/connectors`: the connector's own fields (`kind`, `url`, …) beside these.
#[derive(utoipa::ToSchema)]
#[allow(dead_code)]
struct AddConnectorDoc {
    /// 1 to 64 characters of a-z, 0-9, '_' and '-'.
    id: String,
    /// The version the editor read; the edit is refused with 412 if it moved on.
    expected_version: Option<i32>,
}

/// The body of `PATCH …/config`: each section given replaces the workspace's, `null` removes it.
#[derive(utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
struct ConfigurePatchDoc {
    expected_version: Option<i32>,
    classification: Option<Value>,
    grants: Option<Value>,
    pools: Option<Value>,
    pinning: Option<Value>,
    redaction: Option<Value>,
    /// The approval policy: `[{"tools": ["crm.delete" | "crm"], "to": ["role:member" | "machines" | …], "expires_in_s": 900}]`.
    approvals: Option<Value>,
}

/// The answer of `GET …/connectors`.
#[derive(utoipa::ToSchema)]
#[allow(dead_code)]
struct ConnectorList {
    /// The configuration version these connectors belong to.
    version: i32,
    /// Connector id → connector configuration.
    connectors: std::collections::BTreeMap<String, Value>,
}

/// The answer of `POST …/connectors/{id}/refresh`.
#[derive(utoipa::ToSchema)]
#[allow(dead_code)]
struct Refreshed {
    connector: String,
    /// How many tools the catalog holds.
    tools: u64,
    fetched_at: Option<chrono::DateTime<chrono::Utc>>,
    /// The MCP revision the server was listed in (none for an HTTP API).
    revision: Option<String>,
    /// How long the server said its list stays fresh, in milliseconds (its 2026-07-28
    /// `ttlMs`); none when it said nothing.
    ttl_ms: Option<u64>,
}

/// The tenant's workspaces.
#[utoipa::path(get, path = "/api/v1/tenants/{tenant}/workspaces", tag = "workspaces", responses((status = 200, body = Vec<Workspace>)))]
async fn list_workspaces(ctx: TenantCtx, State(state): State<AppState>) -> Result<Json<Vec<Workspace>>> {
    Ok(Json(workspaces::list(&state.db, ctx.tenant.id).await?))
}

/// Creates a workspace.
#[utoipa::path(post, path = "/api/v1/tenants/{tenant}/workspaces", tag = "workspaces", security(("session" = [])), request_body = CreateWorkspace, responses((status = 201, body = Workspace)))]
async fn create_workspace(
    ctx: TenantCtx,
    State(state): State<AppState>,
    ApiJson(body): ApiJson<CreateWorkspace>,
) -> Result<(StatusCode, Json<Workspace>)> {
    ctx.require_person(Permission::CredentialAdministration)?;
    let ws = workspaces::create(&state.db, ctx.tenant.id, &ctx.audit, &body.slug, body.name.as_deref()).await?;
    Ok((StatusCode::CREATED, Json(ws)))
}

/// A workspace with the configuration it runs.
#[utoipa::path(get, path = "/api/v1/tenants/{tenant}/workspaces/{workspace}", tag = "workspaces", responses((status = 200, body = Bound)))]
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

/// Adds a connector (`id`, and the connector's own fields) to the workspace's configuration.
#[utoipa::path(post, path = "/api/v1/tenants/{tenant}/workspaces/{workspace}/connectors", tag = "workspaces", security(("session" = [])), request_body = AddConnectorDoc, responses((status = 201, body = Bound), (status = 412, response = crate::error::Problem)))]
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

/// The body of `PUT …/connectors/{id}`: the connector's own fields (`kind`, `url`, …) beside
/// this.
#[derive(utoipa::ToSchema)]
#[allow(dead_code)]
struct ReplaceConnectorDoc {
    /// The version the editor read; the edit is refused with 412 if it moved on.
    expected_version: Option<i32>,
}

/// As [`AddConnector`]: unknown fields are refused by the connector's parse.
#[derive(Deserialize)]
struct ReplaceConnector {
    expected_version: Option<i32>,
    #[serde(flatten)]
    connector: Value,
}

/// Replaces a connector's configuration in place (its id, and what names it, stay).
#[utoipa::path(put, path = "/api/v1/tenants/{tenant}/workspaces/{workspace}/connectors/{id}", tag = "workspaces", security(("session" = [])), request_body = ReplaceConnectorDoc, responses((status = 200, body = Bound), (status = 412, response = crate::error::Problem)))]
async fn replace_connector(
    ctx: TenantCtx,
    State(state): State<AppState>,
    Path((_, slug, id)): Path<(String, String, String)>,
    ApiJson(body): ApiJson<ReplaceConnector>,
) -> Result<Json<Bound>> {
    ctx.require_person(Permission::CredentialAdministration)?;
    let connector = parse_connector(&id, body.connector)?;
    crate::vault::slots::check_connector(state.config.vault_keys.as_ref(), &connector)?;
    let bound =
        workspaces::replace_connector(&state.db, ctx.tenant.id, &ctx.audit, &slug, body.expected_version, &id, connector).await?;
    Ok(Json(bound))
}

/// Removes a connector from the workspace's configuration.
#[utoipa::path(delete, path = "/api/v1/tenants/{tenant}/workspaces/{workspace}/connectors/{id}", tag = "workspaces", security(("session" = [])), responses((status = 200, body = Bound), (status = 412, response = crate::error::Problem)))]
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
#[utoipa::path(patch, path = "/api/v1/tenants/{tenant}/workspaces/{workspace}/config", tag = "workspaces", security(("session" = [])), request_body = ConfigurePatchDoc, responses((status = 200, body = Bound), (status = 412, response = crate::error::Problem)))]
async fn configure(
    ctx: TenantCtx,
    State(state): State<AppState>,
    Path((_, slug)): Path<(String, String)>,
    ApiJson(body): ApiJson<ConfigurePatch>,
) -> Result<Json<Bound>> {
    ctx.require_person(Permission::CredentialAdministration)?;
    if let Some(unknown) = body
        .patch
        .keys()
        .find(|k| !["classification", "grants", "pools", "pinning", "redaction", "approvals"].contains(&k.as_str()))
    {
        return Err(Error::InvalidConfig {
            issues: vec![FieldIssue { field: unknown.clone(), message: "unknown field".into() }],
        });
    }
    let patch = Value::Object(body.patch);
    Ok(Json(workspaces::configure(&state.db, ctx.tenant.id, &ctx.audit, &slug, body.expected_version, &patch).await?))
}

/// The workspace's connectors with the configuration version they belong to.
#[utoipa::path(get, path = "/api/v1/tenants/{tenant}/workspaces/{workspace}/connectors", tag = "workspaces", responses((status = 200, body = ConnectorList)))]
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
#[utoipa::path(post, path = "/api/v1/tenants/{tenant}/workspaces/{workspace}/connectors/{id}/refresh", tag = "workspaces", responses((status = 200, body = Refreshed)))]
async fn refresh_connector(
    ctx: TenantCtx,
    State(state): State<AppState>,
    Path((_, slug, id)): Path<(String, String, String)>,
) -> Result<Json<Value>> {
    Ok(Json(refresh(&state, &ctx, &slug, &id).await?))
}

/// Fetches connector `id`'s catalog now and stores it for every replica (the API's refresh
/// and the console's "Test connection"); answers what [`Refreshed`] documents.
pub async fn refresh(state: &AppState, ctx: &TenantCtx, slug: &str, id: &str) -> Result<Value> {
    ctx.require(Permission::ConnectorAccess)?;
    let bound = workspaces::bound(&state.db, ctx.tenant.id, slug).await?;
    let connector = bound.document.connectors.get(id).ok_or(Error::NotFound { what: "connector" })?;
    let key = crate::gateway::downstream::key(ctx.tenant.id.0, bound.workspace.id.0, id, connector);
    let target = crate::gateway::catalogs::Target {
        tenant: ctx.tenant.id,
        workspace: bound.workspace.id.0,
        connector_id: id,
        config_key: crate::gateway::downstream::config_key(&key),
        pinning: bound.document.pinning,
    };
    let caller = crate::gateway::credentials::Caller {
        tenant: ctx.tenant.id,
        tenant_slug: &ctx.tenant.slug,
        workspace: bound.workspace.id.0,
        workspace_slug: slug,
        member_id: ctx.member_id(),
        epoch: None,
    };
    let credential = match connector {
        Connector::HttpApi(_) => None,
        _ => crate::gateway::credentials::resolve(state, &caller, id, connector).await.map_err(|p| p.into_error())?,
    };
    let catalog = state
        .downstreams
        .fetch(&state.db, target, &key, connector, credential.as_ref(), Some(&ctx.audit))
        .await
        .map_err(|f| f.into_error())?;
    let listing = &catalog.listing;
    Ok(json!({
        "connector": id,
        "tools": catalog.tools.len(),
        "fetched_at": catalog.fetched_at,
        "revision": listing.revision,
        "ttl_ms": listing.ttl_ms,
    }))
}

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_workspaces, create_workspace))
        .routes(routes!(get_workspace))
        .routes(routes!(configure))
        .routes(routes!(list_connectors, add_connector))
        .routes(routes!(replace_connector, remove_connector))
        .routes(routes!(refresh_connector))
}
