//! The client credentials grant (RFC 6749 §4.4; MCP's OAuth client credentials extension) for
//! a connector configured with `"flow": "client_credentials"`: Gatehouse is a static
//! confidential client that authenticates with its secret (`client_secret_basic` or
//! `client_secret_post`, as the server advertises) or with a JWT signed by its private key
//! (`private_key_jwt`), and gets its access token with no person involved. The token is kept
//! as the connector's shared grant (sealed, shown like any grant), obtained by the first call
//! that needs it and again whenever the grant is dead, and renewed before it expires under the
//! grants' lease, so one replica asks per expiring token ([`super::grants`]).

use super::*;

/// What a token request returns.
pub type TokenResult = std::result::Result<
    oauth2::basic::BasicTokenResponse,
    oauth2::RequestTokenError<reqwest::Error, oauth2::basic::BasicErrorResponse>,
>;

/// How a client credentials request asks, from the connector's configuration and its
/// authorization server's metadata.
pub struct Asked {
    token: String,
    /// The assertion's audience: the issuer, else the token endpoint.
    audience: String,
    resource: Option<String>,
    scopes: Option<Vec<String>>,
    token_auth_methods: Option<Vec<String>>,
    /// The server offers DPoP (ES256): tokens are asked for bound to the grant's key.
    dpop: bool,
}

impl Asked {
    /// The server's metadata (RFC 9728 and RFC 8414, as for the authorization code flow) and
    /// the scopes: the connector's, else those the server names.
    pub async fn of(state: &AppState, connector: &Connector, o: &OauthAuth) -> Result<Asked> {
        let endpoints = discovery::endpoints(&state.oauth.http.0, connector, o).await?;
        let scopes = if o.scopes.is_empty() { endpoints.scopes.clone() } else { Some(o.scopes.clone()) };
        Ok(Asked {
            audience: endpoints.issuer.clone().unwrap_or_else(|| endpoints.token.clone()),
            token: endpoints.token,
            resource: endpoints.resource,
            scopes: scopes.filter(|s| !s.is_empty()),
            token_auth_methods: endpoints.token_auth_methods,
            dpop: endpoints.dpop,
        })
    }

    /// One `grant_type=client_credentials` request, authenticated as `creds` say; where the
    /// server offers DPoP, with a proof of the grant's key (`key`, as stored; a new one for a
    /// first token). Also answers the key to store with the tokens when they came back bound.
    pub async fn request(
        &self,
        state: &AppState,
        client: &Client,
        creds: &Creds,
        key: Option<&str>,
    ) -> Result<(TokenResult, Option<String>)> {
        let mut request = client.exchange_client_credentials();
        for scope in self.scopes.iter().flatten() {
            request = request.add_scope(OauthScope::new(scope.clone()));
        }
        if let Some(resource) = &self.resource {
            request = request.add_extra_param("resource", resource.clone());
        }
        for (name, value) in creds.assertion_params(&self.audience)? {
            request = request.add_extra_param(name, value);
        }
        let signer = dpop::signer(key, self.dpop)?;
        let result = request.request_async(&dpop::Http { inner: &state.oauth.http, signer: signer.as_ref() }).await;
        let bound = result.as_ref().ok().and_then(|response| bound_key(response, signer.as_ref()));
        Ok((result, bound))
    }
}

fn problem(code: &'static str, state: &'static str, message: String) -> Problem {
    Problem { code, state, message }
}

/// Gets the connector's first (or next, once its grant died) access token and stores it as the
/// shared grant, with its admin-log row. A refusal records an ops failure and answers
/// `auth_required`: what the client authenticates with must be set again by an admin.
#[tracing::instrument(name = "oauth::client_credentials", skip_all, fields(tenant = %at.tenant, workspace = at.workspace_slug, connector = id))]
pub async fn obtain(
    state: &AppState,
    ring: &KeyRing,
    at: &Caller<'_>,
    id: &str,
    connector: &Connector,
    o: &OauthAuth,
) -> Result<(), Problem> {
    let (tenant, workspace) = (at.tenant, at.workspace);
    let fix = format!(
        "an admin sets connector `{id}`'s client secret or private key (PUT …/connectors/{id}/oauth/client-secret, workspace {})",
        at.workspace_slug
    );
    let unavailable = |e: Error| {
        tracing::warn!(error = %e, "a client credentials token could not be requested");
        problem("unavailable", "unavailable", format!("the connector's authorization server could not be asked for a token: {e}"))
    };
    let asked = Asked::of(state, connector, o).await.map_err(unavailable)?;
    let client_id = o.client_id.as_deref().unwrap_or_default();
    let refused = |e: Error| problem("auth_required", "client_credentials", format!("{e}; {fix}"));
    let (kind, _) = client_auth::secret(state, tenant, workspace, id).await.map_err(refused)?;
    let method = client_auth::confidential_method(asked.token_auth_methods.as_deref(), kind).map_err(refused)?;
    let creds = Creds::load(state, tenant, workspace, id, client_id, method).await.map_err(refused)?;
    // The authorization endpoint is never used by this grant.
    let client = client(state, &creds, &asked.token, &asked.token).map_err(unavailable)?;
    let (response, dpop_key) = asked.request(state, &client, &creds, None).await.map_err(refused)?;
    let response = match response {
        Ok(response) => response,
        Err(e) => {
            let code = super::grants::token_error_code(&e);
            tracing::warn!(error = %e, "the authorization server refused the connector's client credentials");
            crate::ops::record(
                &state.ops,
                crate::ops::Failure {
                    operation: "oauth.client_credentials",
                    stage: "token_endpoint".into(),
                    tenant: Some(tenant.0),
                    workspace: Some(workspace),
                    status: crate::ops::Status::Failed,
                    message: format!("connector {id} (shared grant): client credentials refused or failed: {code}"),
                    code,
                    reference: None,
                },
            );
            return Err(problem(
                "auth_required",
                "client_credentials",
                format!("the authorization server refused connector `{id}`'s client credentials; {fix}"),
            ));
        }
    };
    let tokens = Tokens {
        access_token: response.access_token().secret().clone(),
        refresh_token: response.refresh_token().map(|r| r.secret().clone()),
        dpop_key,
    };
    let label = format!("client {client_id}");
    let grant = GrantParts {
        expires_in: response.expires_in().map(|d| d.as_secs() as i64),
        client: store::FlowClient {
            client_id,
            token_endpoint: &asked.token,
            client_auth: method.as_str(),
            resource: asked.resource.as_deref(),
            scopes: asked.scopes.as_deref(),
        },
        label: Some(&label),
    };
    let slot = Slot { tenant, workspace, connector: id, owner: Owner::Shared };
    let audit = Audit { actor: "system:oauth_client_credentials".into(), request_id: None };
    store_grant(state, ring, &slot, &tokens, grant, &audit).await.map_err(|e| {
        tracing::warn!(error = %e, "a client credentials token could not be stored");
        problem("unavailable", "unavailable", "the connector's new token could not be stored; retry shortly".into())
    })
}
