//! A grant's state for the API, and disconnect with RFC 7009 revocation.

use super::*;

/// Whether a URL names this machine (where plain http is tolerated: development and tests).
pub(super) fn is_loopback(u: &url::Url) -> bool {
    match u.host() {
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        Some(url::Host::Domain(d)) => d == "localhost",
        None => false,
    }
}

/// Sends one RFC 7009 revocation, authenticated as `creds` say. The `oauth2` crate sends it
/// (and insists on https, as the RFC does); a plain-http endpoint on loopback (local development
/// and tests) gets the same form POST directly; anything else is refused.
pub(super) async fn revoke(
    state: &AppState,
    creds: &Creds,
    url: &str,
    token: StandardRevocableToken,
) -> std::result::Result<(), String> {
    use oauth2::RevocableToken;
    let parsed = url::Url::parse(url).map_err(|_| "the revocation endpoint does not parse".to_owned())?;
    if parsed.scheme() == "https" {
        let client =
            client(state, creds, url, url).map_err(|e| e.to_string())?.set_revocation_url(RevocationUrl::from_url(parsed));
        let mut request = client.revoke_token(token).map_err(|e| e.to_string())?;
        for (name, value) in creds.assertion_params(url).map_err(|e| e.to_string())? {
            request = request.add_extra_param(name, value);
        }
        return request.request_async(&state.oauth.http).await.map_err(|e| e.to_string());
    }
    if !is_loopback(&parsed) {
        return Err("the revocation endpoint is not https".into());
    }
    let mut form = vec![("token", token.secret().to_owned())];
    if let Some(hint) = token.type_hint() {
        form.push(("token_type_hint", hint.to_owned()));
    }
    let secret = || creds.secret.as_ref().map(|s| s.to_string()).ok_or_else(|| "no client secret".to_owned());
    let mut request = state.oauth.http.0.post(parsed).timeout(REVOKE_DEADLINE);
    match creds.method {
        Method::None => form.push(("client_id", creds.id.clone())),
        Method::ClientSecretPost => {
            form.push(("client_id", creds.id.clone()));
            form.push(("client_secret", secret()?));
        }
        Method::ClientSecretBasic => {
            // RFC 6749 §2.3.1: both parts form-urlencoded before Basic encoding.
            let enc = |v: &str| url::form_urlencoded::byte_serialize(v.as_bytes()).collect::<String>();
            request = request.basic_auth(enc(&creds.id), Some(enc(&secret()?)));
        }
        Method::PrivateKeyJwt => {
            form.push(("client_id", creds.id.clone()));
            form.extend(creds.assertion_params(url).map_err(|e| e.to_string())?);
        }
    }
    let response = request.form(&form).send().await.map_err(|e| e.without_url().to_string())?;
    // RFC 7009 §2.2: 200 whether or not the token was valid.
    if response.status().is_success() { Ok(()) } else { Err(format!("the revocation endpoint answered {}", response.status())) }
}

/// One revocation request may take this long.
pub(super) const REVOKE_DEADLINE: Duration = Duration::from_secs(20);

/// Revokes a grant's tokens (refresh token first: RFC 7009 §2 says it usually ends the whole
/// grant); `revoked` or `failed`.
pub(super) async fn revoke_tokens(state: &AppState, creds: &Creds, url: &str, tokens: &Tokens, connector: &str) -> &'static str {
    let mut revocable = vec![StandardRevocableToken::AccessToken(oauth2::AccessToken::new(tokens.access_token.clone()))];
    if let Some(r) = &tokens.refresh_token {
        revocable.insert(0, StandardRevocableToken::RefreshToken(RefreshToken::new(r.clone())));
    }
    let mut outcome = "revoked";
    for token in revocable {
        if let Err(e) = revoke(state, creds, url, token).await {
            tracing::warn!(error = %e, connector = %connector, "OAuth revocation failed");
            outcome = "failed";
        }
    }
    outcome
}

/// What a grant looks like to the API (no token, ever).
#[derive(Debug, Serialize, utoipa::ToSchema)]
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

/// Disconnects: deletes the grant and its tokens for every replica at once, in the same
/// transaction writing the revocation intent (holding the sealed tokens) when the provider
/// advertises revocation; then revokes at the provider (RFC 7009) and settles the intent. An
/// intent a crash leaves unsettled is settled by [`super::sweep`]. `not_found` when there was
/// no grant. `connector` is the slot's connector, `o` its OAuth settings.
pub async fn disconnect(
    state: &AppState,
    audit: &Audit,
    slot: &Slot<'_>,
    connector: &Connector,
    o: &OauthAuth,
) -> Result<serde_json::Value> {
    let Slot { tenant, workspace, connector: id, owner } = *slot;
    let ring = ring(state)?;
    let (row, _) = state
        .db
        .single_decision(Scope::Tenant(tenant), move |conn, _| Box::pin(store::grant(conn, tenant, workspace, id, owner)))
        .await?;
    let envelope = row.as_ref().and_then(|g| g.envelope.clone());
    let tokens = envelope.as_deref().and_then(|e| {
        let plaintext = ring.open(&aad(tenant, workspace, id, owner, PURPOSE_OAUTH_GRANT), e).ok()?;
        serde_json::from_slice::<Tokens>(&plaintext).ok()
    });
    let endpoints = discovery::endpoints(&state.oauth.http.0, connector, o).await.ok();
    let revocation = endpoints.as_ref().and_then(|e| e.revocation.clone()).filter(|_| tokens.is_some());
    // A confidential client authenticates at the revocation endpoint as that endpoint advertises.
    let method = match row.as_ref().and_then(|g| Method::parse(&g.client_auth)) {
        None | Some(Method::None) => Method::None,
        Some(Method::PrivateKeyJwt) => Method::PrivateKeyJwt,
        Some(_) => client_auth::confidential_method(
            endpoints.as_ref().and_then(|e| e.revocation_auth_methods.as_deref()),
            client_auth::KeyKind::Secret,
        )
        .unwrap_or(Method::ClientSecretBasic),
    };
    let client_id = row.as_ref().map(|g| g.client_id.clone()).unwrap_or_default();
    let intent = Uuid::new_v4();
    let target = format!("connector:{id}/grant:{}", owner.as_text());
    let (target, revocation_ref, client_ref, envelope_ref) = (&target, &revocation, &client_id, &envelope);
    let existed = state
        .db
        .serializable(Scope::Tenant(tenant), move |conn, _| {
            Box::pin(async move {
                let existed = store::delete(&mut *conn, tenant, workspace, id, owner).await?;
                if existed {
                    if let (Some(url), Some(envelope)) = (revocation_ref, envelope_ref) {
                        let row = store::Intent {
                            id: intent,
                            workspace,
                            connector: id,
                            owner,
                            endpoint: url,
                            client_id: client_ref,
                            client_auth: method.as_str(),
                            envelope,
                        };
                        store::insert_intent(&mut *conn, tenant, row).await?;
                    }
                    let entry = Entry {
                        tenant: Some(tenant),
                        audit,
                        action: "oauth.disconnect",
                        target: target.clone(),
                        before: Some(json!({ "workspace_id": workspace })),
                        after: Some(json!({ "revocation": if revocation_ref.is_some() { "intent" } else { "not_advertised" } })),
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
    if let (Some(url), Some(tokens)) = (revocation, tokens.as_ref()) {
        outcome = match Creds::load(state, tenant, workspace, id, &client_id, method).await {
            Ok(creds) => revoke_tokens(state, &creds, &url, tokens, id).await,
            Err(e) => {
                tracing::warn!(error = %e, connector = %id, "OAuth revocation impossible: no client secret");
                "failed"
            }
        };
        let settled = outcome;
        state
            .db
            .serializable(Scope::Tenant(tenant), move |conn, _| {
                Box::pin(async move {
                    if store::settle_intent(&mut *conn, tenant, intent, settled, "disconnect").await? {
                        let entry = Entry {
                            tenant: Some(tenant),
                            audit,
                            action: "oauth.revocation",
                            target: target.clone(),
                            before: None,
                            after: Some(json!({ "outcome": settled, "intent": intent })),
                        };
                        admin_log::record(conn, entry).await?;
                    }
                    Ok(())
                })
            })
            .await?;
    }
    Ok(json!({ "connector": id, "owner": owner.as_text(), "status": "missing", "revocation": outcome }))
}
