//! Dynamic client registration (RFC 7591): a public client per workspace connector and issuer.

use super::*;

/// This connector's client at its authorization server, registered (RFC 7591) on first use as
/// a public client: PKCE, no secret. Replicas racing here keep the first registration.
pub(super) async fn register(
    state: &AppState,
    tenant: TenantId,
    workspace: Uuid,
    id: &str,
    endpoints: &discovery::Endpoints,
) -> Result<String> {
    let no_registration = || Error::Conflict {
        code: "oauth_registration_unsupported",
        message: format!("connector `{id}` names no client_id and its authorization server offers no dynamic registration"),
    };
    let (Some(issuer), Some(endpoint)) = (endpoints.issuer.as_deref(), endpoints.registration.as_deref()) else {
        return Err(no_registration());
    };
    let known = state
        .db
        .single_decision(Scope::Tenant(tenant), move |conn, _| {
            Box::pin(store::registered_client(conn, tenant, workspace, id, issuer))
        })
        .await?;
    if let Some(client_id) = known {
        return Ok(client_id);
    }
    let request = json!({
        "client_name": "Gatehouse",
        "redirect_uris": [redirect_uri(state)],
        "grant_types": ["authorization_code", "refresh_token"],
        "response_types": ["code"],
        "token_endpoint_auth_method": "none",
        "application_type": "web",
    });
    let failed = |why: String| {
        tracing::warn!(reason = %why, connector = %id, "dynamic client registration failed");
        Error::Unavailable {
            code: "oauth_registration_failed",
            message: "the authorization server refused to register Gatehouse as a client".into(),
            retry_after_ms: Some(5000),
        }
    };
    let response =
        state.oauth.http.0.post(endpoint).json(&request).send().await.map_err(|e| failed(e.without_url().to_string()))?;
    if !response.status().is_success() {
        return Err(failed(format!("status {}", response.status())));
    }
    let registered: serde_json::Value = response.json().await.map_err(|e| failed(e.without_url().to_string()))?;
    let client_id = registered["client_id"].as_str().filter(|c| !c.is_empty()).ok_or_else(|| failed("no client_id".into()))?;
    if registered.get("client_secret").is_some() {
        // We asked for a public client; a secret we did not ask for is not kept anywhere.
        tracing::warn!(connector = %id, "the authorization server issued a client secret to a public client; it is ignored");
    }
    let client_id = client_id.to_owned();
    let cid = &client_id;
    let kept = state
        .db
        .single_decision(Scope::Tenant(tenant), move |conn, _| {
            Box::pin(store::keep_client(conn, tenant, workspace, id, issuer, cid))
        })
        .await?;
    Ok(kept)
}
