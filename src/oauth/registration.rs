//! Dynamic client registration (RFC 7591): one client per workspace connector and issuer,
//! public where the server allows it, else confidential with the secret it issues sealed in the
//! vault as the connector's `oauth_client` credential.

use super::*;

/// How to ask to authenticate at a token endpoint advertising `methods`: as a public client
/// (PKCE, no secret) wherever that is allowed or nothing is advertised; else with a secret,
/// Basic preferred (RFC 6749 §2.3.1), as the server then issues one.
pub fn registration_method(methods: Option<&[String]>) -> Method {
    let Some(methods) = methods else { return Method::None };
    [Method::None, Method::ClientSecretBasic, Method::ClientSecretPost]
        .into_iter()
        .find(|m| methods.iter().any(|a| a == m.as_str()))
        .unwrap_or(Method::None)
}

/// This connector's client at its authorization server, registered (RFC 7591) on first use:
/// its id and how it authenticates at the token endpoint. Replicas racing here keep the first
/// registration (and only its secret).
pub(super) async fn register(
    state: &AppState,
    tenant: TenantId,
    workspace: Uuid,
    id: &str,
    endpoints: &discovery::Endpoints,
) -> Result<(String, Method)> {
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
    if let Some((client_id, auth)) = known {
        return Ok((client_id, Method::parse(&auth).unwrap_or(Method::None)));
    }
    let asked = registration_method(endpoints.token_auth_methods.as_deref());
    let request = json!({
        "client_name": "Gatehouse",
        "redirect_uris": [redirect_uri(state)],
        "grant_types": ["authorization_code", "refresh_token"],
        "response_types": ["code"],
        "token_endpoint_auth_method": asked.as_str(),
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
    // Parsed into a type that zeroes the secret; the body is never logged.
    let registered: Registered = response.json().await.map_err(|_| failed("an unreadable registration response".into()))?;
    let client_id = registered.client_id.clone().filter(|c| !c.is_empty()).ok_or_else(|| failed("no client_id".into()))?;
    // The server's word on the method wins (RFC 7591 §3.2.1 lets it change what was asked).
    let method = match registered.token_endpoint_auth_method.as_deref() {
        Some(m) => Method::parse(m).ok_or_else(|| failed(format!("an unsupported token_endpoint_auth_method {m:?}")))?,
        None => asked,
    };
    let secret = match (method, registered.client_secret.as_deref()) {
        (Method::None, Some(_)) => {
            // A public client keeps no secret, whatever the server sent.
            tracing::warn!(connector = %id, "the authorization server issued a client secret to a public client; it is ignored");
            None
        }
        (Method::None, None) => None,
        (_, Some(secret)) if client_auth::check_secret(secret).is_ok() => Some(secret),
        (_, _) => return Err(failed("a confidential client without a usable client_secret".into())),
    };
    let ring = ring(state)?;
    let sealed = secret.map(|secret| {
        let fields = std::collections::BTreeMap::from([(client_auth::SECRET_FIELD.to_owned(), secret.to_owned())]);
        let plaintext = Zeroizing::new(serde_json::to_vec(&fields).unwrap_or_default());
        drop(crate::vault::slots::Fields(fields));
        ring.seal(&client_auth::secret_slot(tenant, workspace, id).aad(), &plaintext)
    });
    let (cid, sealed) = (&client_id, &sealed);
    let audit = Audit { actor: "system:oauth_registration".into(), request_id: None };
    let audit = &audit;
    let (kept, _) = state
        .db
        .serializable(Scope::Tenant(tenant), move |conn, _| {
            Box::pin(async move {
                let (kept, won) = store::keep_client(&mut *conn, tenant, workspace, id, issuer, cid, method.as_str()).await?;
                if won {
                    if let Some(envelope) = sealed {
                        let fields = json!([{ "name": client_auth::SECRET_FIELD, "last4": null }]);
                        crate::vault::slots::tx::upsert(
                            &mut *conn,
                            &client_auth::secret_slot(tenant, workspace, id),
                            ring.active(),
                            envelope,
                            &fields,
                            &audit.actor,
                        )
                        .await?;
                    }
                    let entry = Entry {
                        tenant: Some(tenant),
                        audit,
                        action: "oauth.register",
                        target: format!("connector:{id}/client"),
                        before: None,
                        after: Some(json!({
                            "workspace_id": workspace, "issuer": issuer, "client_id": cid, "client_auth": method.as_str(),
                            "secret_sealed": sealed.is_some(),
                        })),
                    };
                    admin_log::record(conn, entry).await?;
                }
                Ok((kept, won))
            })
        })
        .await?;
    Ok((kept.0, Method::parse(&kept.1).unwrap_or(Method::None)))
}

/// The parts of a registration response Gatehouse keeps (the secret zeroed on drop).
#[derive(Deserialize)]
struct Registered {
    client_id: Option<String>,
    client_secret: Option<String>,
    token_endpoint_auth_method: Option<String>,
}

impl Drop for Registered {
    fn drop(&mut self) {
        use zeroize::Zeroize;
        if let Some(s) = self.client_secret.as_mut() {
            s.zeroize();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_registration_asks_for_a_public_client_unless_only_secrets_are_offered() {
        let v = |m: &[&str]| m.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(registration_method(None), Method::None);
        assert_eq!(registration_method(Some(&v(&["client_secret_basic", "none"]))), Method::None);
        assert_eq!(registration_method(Some(&v(&["client_secret_post", "client_secret_basic"]))), Method::ClientSecretBasic);
        assert_eq!(registration_method(Some(&v(&["client_secret_post"]))), Method::ClientSecretPost);
        assert_eq!(registration_method(Some(&v(&["private_key_jwt"]))), Method::None);
    }
}
