//! A grant's state for the API, and disconnect with RFC 7009 revocation.

use super::*;

/// Sends one RFC 7009 revocation. The `oauth2` crate sends it (and insists on https, as the RFC
/// does); a plain-http endpoint on loopback (local development and tests) gets the same form
/// POST directly; anything else is refused.
async fn revoke(
    state: &AppState,
    client_id: &str,
    endpoints: &discovery::Endpoints,
    url: &str,
    token: StandardRevocableToken,
) -> std::result::Result<(), String> {
    use oauth2::RevocableToken;
    let parsed = url::Url::parse(url).map_err(|_| "the revocation endpoint does not parse".to_owned())?;
    if parsed.scheme() == "https" {
        let client = client(state, client_id, &endpoints.authorization, &endpoints.token)
            .map_err(|e| e.to_string())?
            .set_revocation_url(RevocationUrl::from_url(parsed));
        let request = client.revoke_token(token).map_err(|e| e.to_string())?;
        return request.request_async(&state.oauth.http).await.map_err(|e| e.to_string());
    }
    let loopback = match parsed.host() {
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        Some(url::Host::Domain(d)) => d == "localhost",
        None => false,
    };
    if !loopback {
        return Err("the revocation endpoint is not https".into());
    }
    let mut form = vec![("token", token.secret().to_owned()), ("client_id", client_id.to_owned())];
    if let Some(hint) = token.type_hint() {
        form.push(("token_type_hint", hint.to_owned()));
    }
    let response = state.oauth.http.0.post(parsed).form(&form).send().await.map_err(|e| e.without_url().to_string())?;
    // RFC 7009 §2.2: 200 whether or not the token was valid.
    if response.status().is_success() { Ok(()) } else { Err(format!("the revocation endpoint answered {}", response.status())) }
}

/// What a grant looks like to the API (no token, ever).
#[derive(Debug, Serialize)]
pub struct GrantInfo {
    pub connector: String,
    pub grant: &'static str,
    pub owner: String,
    pub status: String,
    pub account_label: Option<String>,
    pub connected_at: Option<chrono::DateTime<chrono::Utc>>,
    pub refreshed_at: Option<chrono::DateTime<chrono::Utc>>,
    pub access_expires_at: Option<chrono::DateTime<chrono::Utc>>,
}

pub async fn show(
    state: &AppState,
    tenant: TenantId,
    workspace: Uuid,
    id: &str,
    kind: SlotKind,
    owner: Owner,
) -> Result<GrantInfo> {
    let (row, _) = state
        .db
        .single_decision(Scope::Tenant(tenant), move |conn, _| Box::pin(store::grant(conn, tenant, workspace, id, owner)))
        .await?;
    Ok(GrantInfo {
        connector: id.to_owned(),
        grant: kind.as_str(),
        owner: owner.as_text(),
        status: row.as_ref().map_or_else(|| "missing".to_owned(), |g| g.status.clone()),
        account_label: row.as_ref().and_then(|g| g.account_label.clone()),
        connected_at: row.as_ref().map(|g| g.connected_at),
        refreshed_at: row.as_ref().and_then(|g| g.refreshed_at),
        access_expires_at: row.as_ref().and_then(|g| g.access_expires_at),
    })
}

/// Disconnects: deletes the grant and its tokens for every replica at once (with an intent
/// row for the revocation), then revokes the tokens at the provider (RFC 7009) when it
/// advertises revocation, and records the outcome. `not_found` when there was no grant.
#[allow(clippy::too_many_arguments)]
pub async fn disconnect(
    state: &AppState,
    audit: &Audit,
    tenant: TenantId,
    workspace: Uuid,
    id: &str,
    connector: &Connector,
    o: &OauthAuth,
    owner: Owner,
) -> Result<serde_json::Value> {
    let ring = ring(state)?;
    let (row, _) = state
        .db
        .single_decision(Scope::Tenant(tenant), move |conn, _| Box::pin(store::grant(conn, tenant, workspace, id, owner)))
        .await?;
    let client_id = row.as_ref().map(|g| g.client_id.clone()).unwrap_or_default();
    let tokens = row.as_ref().and_then(|g| g.envelope.as_deref()).and_then(|e| {
        let plaintext = ring.open(&aad(tenant, workspace, id, owner, PURPOSE_OAUTH_GRANT), e).ok()?;
        serde_json::from_slice::<Tokens>(&plaintext).ok()
    });
    let endpoints = discovery::endpoints(&state.oauth.http.0, connector, o).await.ok();
    let revocation = endpoints.as_ref().and_then(|e| e.revocation.clone());
    let will_revoke = revocation.is_some() && tokens.is_some();
    let target = format!("connector:{id}/grant:{}", owner.as_text());
    let target = &target;
    let existed = state
        .db
        .serializable(Scope::Tenant(tenant), move |conn, _| {
            Box::pin(async move {
                let existed = store::delete(&mut *conn, tenant, workspace, id, owner).await?;
                if existed {
                    let entry = Entry {
                        tenant: Some(tenant),
                        audit,
                        action: "oauth.disconnect",
                        target: target.clone(),
                        before: Some(json!({ "workspace_id": workspace })),
                        after: Some(json!({ "revocation": if will_revoke { "intent" } else { "not_advertised" } })),
                    };
                    admin_log::record(conn, entry).await?;
                }
                Ok(existed)
            })
        })
        .await?;
    if !existed {
        return Err(Error::NotFound { what: "OAuth grant" });
    }
    let mut outcome = "not_advertised";
    if let (Some(url), Some(tokens), Some(endpoints)) = (revocation, tokens.as_ref(), endpoints.as_ref()) {
        outcome = "revoked";
        let mut revocable = vec![StandardRevocableToken::AccessToken(oauth2::AccessToken::new(tokens.access_token.clone()))];
        if let Some(r) = &tokens.refresh_token {
            // RFC 7009 §2: revoke the refresh token first (it usually ends the whole grant).
            revocable.insert(0, StandardRevocableToken::RefreshToken(RefreshToken::new(r.clone())));
        }
        for token in revocable {
            if let Err(e) = revoke(state, &client_id, endpoints, &url, token).await {
                tracing::warn!(error = %e, connector = %id, "OAuth revocation failed");
                outcome = "failed";
            }
        }
        let entry_outcome = outcome;
        state
            .db
            .single_decision(Scope::Tenant(tenant), move |conn, _| {
                Box::pin(admin_log::record(
                    conn,
                    Entry {
                        tenant: Some(tenant),
                        audit,
                        action: "oauth.revocation",
                        target: target.clone(),
                        before: None,
                        after: Some(json!({ "outcome": entry_outcome })),
                    },
                ))
            })
            .await?;
    }
    Ok(json!({ "connector": id, "owner": owner.as_text(), "status": "missing", "revocation": outcome }))
}
