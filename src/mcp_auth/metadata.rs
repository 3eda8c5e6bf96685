//! Discovery documents: protected resource metadata (RFC 9728) for every MCP endpoint and
//! pool, and authorization server metadata (RFC 8414) for every tenant's issuer.

use axum::{
    Json,
    extract::{Path, State},
    response::{IntoResponse, Response},
};
use serde_json::json;

use super::{SCOPE, issuer, resource_url};
use crate::{AppState, error::Result, tenants};

fn resource_metadata(state: &AppState, tenant: &str, workspace: &str, pool: Option<&str>) -> Response {
    let body = json!({
        "resource": resource_url(&state.config, tenant, workspace, pool),
        "authorization_servers": [issuer(&state.config, tenant)],
        "scopes_supported": [SCOPE],
        "bearer_methods_supported": ["header"],
        "resource_name": format!("Gatehouse workspace {workspace}"),
    });
    Json(body).into_response()
}

/// The tenant must exist (tenants are public by slug anyway); the workspace is not looked up,
/// so unauthenticated callers learn nothing about which workspaces exist.
pub async fn endpoint(State(state): State<AppState>, Path((tenant, workspace)): Path<(String, String)>) -> Result<Response> {
    tenants::by_slug(&state.db, &tenant).await?;
    Ok(resource_metadata(&state, &tenant, &workspace, None))
}

pub async fn pool(
    State(state): State<AppState>,
    Path((tenant, workspace, pool)): Path<(String, String, String)>,
) -> Result<Response> {
    tenants::by_slug(&state.db, &tenant).await?;
    Ok(resource_metadata(&state, &tenant, &workspace, Some(&pool)))
}

pub async fn authorization_server(State(state): State<AppState>, Path(tenant): Path<String>) -> Result<Response> {
    let t = tenants::by_slug(&state.db, &tenant).await?;
    let issuer = issuer(&state.config, &t.slug);
    let body = json!({
        "issuer": issuer,
        "authorization_endpoint": format!("{issuer}/oauth/authorize"),
        "token_endpoint": format!("{issuer}/oauth/token"),
        "registration_endpoint": format!("{issuer}/oauth/register"),
        "revocation_endpoint": format!("{issuer}/oauth/revoke"),
        "revocation_endpoint_auth_methods_supported": ["none"],
        "scopes_supported": [SCOPE],
        "response_types_supported": ["code"],
        "response_modes_supported": ["query"],
        "grant_types_supported": ["authorization_code", "refresh_token"],
        "token_endpoint_auth_methods_supported": ["none"],
        "code_challenge_methods_supported": ["S256"],
        "client_id_metadata_document_supported": true,
        "authorization_response_iss_parameter_supported": true,
    });
    Ok(Json(body).into_response())
}
