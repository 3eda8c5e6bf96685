//! Using a grant: the cached sealed tokens, opened per call, refreshed single-flight across
//! replicas (a lease and the spent refresh token recorded by one compare-and-set). A client
//! credentials connector's grant is obtained here too, with no person: on the first call that
//! needs it and whenever it is dead, and renewed under the same lease before it expires.

use super::*;
use crate::workspaces::config::Flow;

fn problem(code: &'static str, state: &'static str, message: String) -> Problem {
    Problem { code, state, message }
}

/// The repair path of a grant a person must authorize (again), for every agent: native pools
/// have no `authorize_connector`, so the operator's ways come first.
fn reconnect(at: &Caller<'_>, id: &str) -> String {
    format!(
        "connector `{id}` needs an OAuth authorization: an admin connects it in the console (or mails a connect link); through Gatehouse's own tools, call authorize_connector with {{\"connector\": \"{id}\"}} for a connect link (workspace {})",
        at.workspace_slug
    )
}

/// The `auth_required` problem of a grant a person must make (again): `state` and `why` for
/// an authorization page's grant; for one a member gets with their identity token, whether
/// missing or dead, the path where they present it (no connect link leads there).
fn needs_person(o: &OauthAuth, at: &Caller<'_>, id: &str, state: &'static str, why: String) -> Problem {
    if o.flow != Flow::IdentityAssertion {
        return problem("auth_required", state, why);
    }
    let path = format!(
        "POST /api/v1/tenants/{}/workspaces/{}/connectors/{id}/oauth/personal/identity-assertion",
        at.tenant_slug, at.workspace_slug
    );
    problem(
        "auth_required",
        "identity_assertion",
        format!(
            "connector `{id}` uses each member's identity token (enterprise-managed authorization): the member presents a current one from the connector's identity provider, signed in to Gatehouse ({path} with {{\"identity_token\": \"…\"}})"
        ),
    )
}

/// The grant's row for this replica: cached while the request's epoch matches.
async fn load(
    state: &AppState,
    at: &Caller<'_>,
    id: &str,
    owner: Owner,
    fresh: bool,
) -> Result<Arc<Option<store::Grant>>, Problem> {
    let key: SlotKey = (at.tenant, at.workspace, id.to_owned(), owner);
    if fresh {
        state.oauth.grants.count(false);
    } else if let Some(row) = state.oauth.grants.current(&key, at.epoch) {
        return Ok(row);
    }
    let (tenant, workspace) = (at.tenant, at.workspace);
    let (row, epoch) = state
        .db
        .single_decision(Scope::Tenant(tenant), move |conn, _| Box::pin(store::grant(conn, tenant, workspace, id, owner)))
        .await
        .map_err(|e| {
            tracing::warn!(error = %e, "could not read an OAuth grant");
            problem("unavailable", "unavailable", "the connector's authorization could not be read; retry shortly".into())
        })?;
    let row = Arc::new(row);
    state.oauth.grants.put(key, row.clone(), epoch);
    Ok(row)
}

/// The connector's OAuth credential for this caller, refreshing it first when it is about to
/// expire. Called by the gateway for every call of an OAuth connector.
pub async fn resolve(
    state: &AppState,
    at: &Caller<'_>,
    id: &str,
    connector: &Connector,
    o: &OauthAuth,
) -> Result<Option<Credential>, Problem> {
    let Some(ring) = state.config.vault_keys.as_ref() else {
        return Err(problem(
            "vault_disabled",
            "vault_disabled",
            format!("connector `{id}` uses OAuth, whose tokens need the vault (GATEHOUSE_VAULT_KEYS)"),
        ));
    };
    let Some(owner) = owner(o, at.member_id) else {
        return Err(problem(
            "auth_required",
            "no_member",
            format!("connector `{id}` uses each member's own authorization; this caller is no member"),
        ));
    };
    let mut row = load(state, at, id, owner, false).await?;
    let deadline = tokio::time::Instant::now() + FOLLOWER_WAIT;
    let client_credentials = o.flow == Flow::ClientCredentials;
    let mut obtained = false;
    // A client credentials renewal's request, read once per call (not per wait for another
    // replica's renewal).
    let mut asked: Option<super::client_credentials::Asked> = None;
    loop {
        let usable = row.as_ref().as_ref().filter(|g| g.status == "active" && g.envelope.is_some());
        if usable.is_none() && client_credentials && !obtained {
            // No person is needed: get a token now (once per call), then read the grant again.
            obtained = true;
            Box::pin(super::client_credentials::obtain(state, ring, at, id, connector, o)).await?;
            row = load(state, at, id, owner, true).await?;
            continue;
        }
        let Some(grant) = row.as_ref() else { return Err(needs_person(o, at, id, "missing", reconnect(at, id))) };
        let Some(envelope) = grant.envelope.as_deref().filter(|_| grant.status == "active") else {
            let why = format!("the authorization expired or was refused; {}", reconnect(at, id));
            return Err(needs_person(o, at, id, "auth_required", why));
        };
        let tokens = open(ring, at, id, owner, envelope)?;
        let expiring = grant
            .access_expires_at
            .is_some_and(|e| e <= chrono::Utc::now() + chrono::Duration::seconds(store::EXPIRY_MARGIN_SECS));
        if !expiring {
            return credential(owner, grant, &tokens);
        }
        let renewal = match (tokens.refresh_token.as_deref(), client_credentials) {
            (_, true) => {
                // Asked as its first request was (the metadata gives the assertion's audience
                // and the scopes), read before the lease.
                let asked = match &mut asked {
                    Some(asked) => asked,
                    slot @ None => slot.insert(
                        Box::pin(super::client_credentials::Asked::of(state, connector, o)).await.map_err(|e| {
                            tracing::warn!(error = %e, connector = %id, "the authorization server's metadata could not be read for a renewal");
                            problem("unavailable", "unavailable", "the connector's authorization could not be renewed; retry shortly".into())
                        })?,
                    ),
                };
                Renewal::ClientCredentials { access: &tokens.access_token, asked, dpop_key: tokens.dpop_key.as_deref() }
            }
            (Some(refresh), false) => Renewal::RefreshToken { refresh, dpop_key: tokens.dpop_key.as_deref() },
            // Nothing to refresh with: the access token is used until the server refuses it.
            (None, false) => return credential(owner, grant, &tokens),
        };
        match Box::pin(refresh_once(state, ring, at, id, owner, grant, renewal)).await? {
            Refreshed::Done => {}
            Refreshed::Other if tokio::time::Instant::now() < deadline => {
                // Another replica (or task) holds the lease: wait for its new token.
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Refreshed::Other => {
                return Err(problem(
                    "unavailable",
                    "refreshing",
                    "the connector's authorization is being refreshed; retry shortly".into(),
                ));
            }
        }
        row = load(state, at, id, owner, true).await?;
    }
}

fn open(ring: &KeyRing, at: &Caller<'_>, id: &str, owner: Owner, envelope: &str) -> Result<Tokens, Problem> {
    let unreadable = || {
        problem(
            "credential_unreadable",
            "unreadable",
            format!("the authorization of connector `{id}` cannot be opened with this deployment's vault keys; connect it again"),
        )
    };
    let plaintext =
        ring.open(&aad(at.tenant, at.workspace, id, owner, PURPOSE_OAUTH_GRANT), envelope).map_err(|_| unreadable())?;
    serde_json::from_slice(&plaintext).map_err(|_| unreadable())
}

fn credential(owner: Owner, grant: &store::Grant, tokens: &Tokens) -> Result<Option<Credential>, Problem> {
    let incomplete = || problem("auth_required", "incomplete", "the access token cannot be sent in an HTTP header".into());
    // A DPoP-bound token travels with the DPoP scheme and a fresh proof per request (RFC 9449 §7.1).
    let dpop = match tokens.dpop_key.as_deref() {
        Some(stored) => {
            let key = super::dpop::Key::from_stored(stored).ok_or_else(incomplete)?;
            Some(std::sync::Arc::new(super::dpop::Binding::new(key, &tokens.access_token)))
        }
        None => None,
    };
    let scheme = if dpop.is_some() { "DPoP" } else { "Bearer" };
    let mut value = HeaderValue::from_str(&format!("{scheme} {}", tokens.access_token)).map_err(|_| incomplete())?;
    value.set_sensitive(true);
    Ok(Some(Credential { headers: vec![(HeaderName::from_static("authorization"), value)], tag: stamp(owner, grant), dpop }))
}

/// The tag of a grant's credential: its owner and a digest of its tokens' version.
fn stamp(owner: Owner, grant: &store::Grant) -> String {
    let stamp = format!("{:?}|{:?}", grant.version, grant.updated_at.map(|u| u.timestamp_micros()));
    let digest = Sha256::digest(stamp.as_bytes());
    format!("{}@{}", owner.as_text(), hex::encode(&digest[..8]))
}

enum Refreshed {
    /// This task refreshed (or found the grant dead): read it again.
    Done,
    /// Another holds the lease or already refreshed: wait and read again.
    Other,
}

/// How an expiring grant gets a new access token.
enum Renewal<'a> {
    /// With its refresh token (spent once sent), and the grant's DPoP key if its tokens are bound.
    RefreshToken { refresh: &'a str, dpop_key: Option<&'a str> },
    /// A client credentials connector asks again (its expiring access token marks the round,
    /// so one replica asks per token).
    ClientCredentials { access: &'a str, asked: &'a super::client_credentials::Asked, dpop_key: Option<&'a str> },
}

/// One refresh attempt: the lease and the spent mark by one compare-and-set, then (only for
/// the winner) the request, then the outcome.
#[tracing::instrument(name = "oauth::refresh", skip_all, fields(tenant = %at.tenant, workspace = at.workspace_slug, connector = id))]
async fn refresh_once(
    state: &AppState,
    ring: &KeyRing,
    at: &Caller<'_>,
    id: &str,
    owner: Owner,
    grant: &store::Grant,
    renewal: Renewal<'_>,
) -> Result<Refreshed, Problem> {
    let unavailable = |e: Error| {
        tracing::warn!(error = %e, "OAuth refresh bookkeeping failed");
        problem("unavailable", "unavailable", "the connector's authorization could not be refreshed; retry shortly".into())
    };
    let (tenant, workspace) = (at.tenant, at.workspace);
    // The client (and its secret, for a confidential one) before the lease: a secret that
    // cannot be read spends nothing.
    let method = Method::parse(&grant.client_auth).unwrap_or(Method::None);
    let creds = Creds::load(state, tenant, workspace, id, &grant.client_id, method).await.map_err(|e| {
        tracing::warn!(error = %e, connector = %id, "the OAuth client's secret could not be read for a refresh");
        problem("oauth_client_secret_missing", "unavailable", e.to_string())
    })?;
    let client = client(state, &creds, &grant.token_endpoint, &grant.token_endpoint).map_err(unavailable)?;
    let holder = Uuid::new_v4();
    let spent = secrets::digest(match &renewal {
        Renewal::RefreshToken { refresh, .. } => refresh,
        Renewal::ClientCredentials { access, .. } => access,
    });
    let spent = &spent;
    let won = state
        .db
        .single_decision(Scope::Tenant(tenant), move |conn, _| {
            Box::pin(store::take_lease(conn, tenant, workspace, id, owner, holder, spent))
        })
        .await
        .map_err(unavailable)?;
    if !won {
        return Ok(Refreshed::Other);
    }
    // A client credentials renewal's key, when its new token came back bound.
    let mut renewed_key = None;
    let response = match &renewal {
        Renewal::RefreshToken { refresh, dpop_key } => {
            // The token is recorded as spent: from here on it is never sent again, whatever happens.
            let refresh_token = RefreshToken::new((*refresh).to_owned());
            let mut exchange = client.exchange_refresh_token(&refresh_token);
            if let Some(resource) = &grant.resource {
                exchange = exchange.add_extra_param("resource", resource.clone());
            }
            // The grant keeps no issuer: a refresh's assertion names the token endpoint (RFC 7523 §3).
            for (name, value) in creds.assertion_params(&grant.token_endpoint).map_err(unavailable)? {
                exchange = exchange.add_extra_param(name, value);
            }
            // A DPoP-bound grant's refresh carries a proof of its key (RFC 9449 §5).
            let signer = super::dpop::signer(*dpop_key, false).map_err(|e| unavailable(e.into()))?;
            exchange.request_async(&super::dpop::Http { inner: &state.oauth.http, signer: signer.as_ref() }).await
        }
        Renewal::ClientCredentials { asked, dpop_key, .. } => {
            let (response, bound) = asked.request(state, &client, &creds, *dpop_key).await.map_err(unavailable)?;
            renewed_key = bound;
            response
        }
    };
    let audit = Audit { actor: "system:oauth_refresh".into(), request_id: None };
    let audit = &audit;
    match response {
        Ok(response) => {
            let (refresh_token, dpop_key) = match &renewal {
                Renewal::RefreshToken { refresh, dpop_key } => (
                    Some(response.refresh_token().map_or_else(|| (*refresh).to_owned(), |r| r.secret().clone())),
                    dpop_key.filter(|_| super::dpop_bound(&response)).map(str::to_owned),
                ),
                Renewal::ClientCredentials { .. } => (response.refresh_token().map(|r| r.secret().clone()), renewed_key.take()),
            };
            let tokens = Tokens { access_token: response.access_token().secret().clone(), refresh_token, dpop_key };
            let rotated = response.refresh_token().is_some();
            let expires_in = response.expires_in().map(|d| d.as_secs() as i64);
            let plaintext = Zeroizing::new(serde_json::to_vec(&tokens).map_err(|e| unavailable(anyhow::Error::from(e).into()))?);
            let envelope = ring.seal(&aad(tenant, workspace, id, owner, PURPOSE_OAUTH_GRANT), &plaintext);
            let envelope = &envelope;
            let fields = json!([{ "name": "access_token", "last4": null }, { "name": "refresh_token", "last4": null }]);
            let fields = &fields;
            state
                .db
                .serializable(Scope::Tenant(tenant), move |conn, _| {
                    Box::pin(async move {
                        let slot = Slot { tenant, workspace, connector: id, owner };
                        if !store::refreshed(&mut *conn, &slot, holder, expires_in, rotated).await? {
                            // Disconnected (or killed) meanwhile: keep nothing.
                            return Ok(());
                        }
                        crate::vault::slots::tx::upsert(&mut *conn, &slot, ring.active(), envelope, fields, &audit.actor).await?;
                        let entry = Entry {
                            tenant: Some(tenant),
                            audit,
                            action: "oauth.refresh",
                            target: format!("connector:{id}/grant:{}", owner.as_text()),
                            before: None,
                            after: Some(json!({ "workspace_id": workspace, "rotated": rotated })),
                        };
                        admin_log::record(conn, entry).await
                    })
                })
                .await
                .map_err(unavailable)?;
        }
        Err(e) => {
            tracing::warn!(error = %e, connector = %id, "OAuth refresh failed; the grant needs a new authorization");
            let code = token_error_code(&e);
            crate::ops::record(
                &state.ops,
                crate::ops::Failure {
                    operation: "oauth.refresh",
                    stage: "token_endpoint".into(),
                    tenant: Some(tenant.0),
                    workspace: Some(workspace),
                    status: crate::ops::Status::Failed,
                    message: format!("connector {id} ({} grant): refresh refused or failed: {code}", owner.as_text()),
                    code,
                    reference: None,
                },
            );
            state
                .db
                .serializable(Scope::Tenant(tenant), move |conn, _| {
                    Box::pin(async move {
                        if store::kill(&mut *conn, tenant, workspace, id, owner).await? {
                            let entry = Entry {
                                tenant: Some(tenant),
                                audit,
                                action: "oauth.grant_dead",
                                target: format!("connector:{id}/grant:{}", owner.as_text()),
                                before: Some(json!({ "status": "active" })),
                                after: Some(json!({ "status": "auth_required" })),
                            };
                            admin_log::record(conn, entry).await?;
                        }
                        Ok(())
                    })
                })
                .await
                .map_err(unavailable)?;
        }
    }
    Ok(Refreshed::Done)
}

/// The ops code of a failed token request: a standard OAuth error or our own word for the
/// transport's failure, so the fingerprints stay few (the message names the connector, never
/// the answer's text: a provider may echo what it was sent).
pub(super) fn token_error_code<E>(e: &oauth2::RequestTokenError<E, oauth2::basic::BasicErrorResponse>) -> String
where
    E: std::error::Error + 'static,
{
    match e {
        oauth2::RequestTokenError::ServerResponse(r) => match r.error() {
            oauth2::basic::BasicErrorResponseType::Extension(_) => "provider_error".to_owned(),
            standard => standard.to_string(),
        },
        oauth2::RequestTokenError::Request(_) => "unreachable".to_owned(),
        oauth2::RequestTokenError::Parse(..) => "invalid_response".to_owned(),
        oauth2::RequestTokenError::Other(_) => "other".to_owned(),
    }
}

/// A downstream refused this caller's OAuth credential during use (HTTP `status`, its
/// `WWW-Authenticate` in `challenge`): the grant the credential came from (`tag`, see
/// [`credential`]) is marked as needing repair (`auth_required`, its tokens dropped, an admin-log
/// row), and the refusal is an ops failure. A grant replaced since the credential was read is
/// left alone. Answers the `auth_required` problem with the repair path `authorize_connector`
/// gives.
pub async fn refused(
    state: &AppState,
    at: &Caller<'_>,
    id: &str,
    o: &OauthAuth,
    tag: Option<&str>,
    status: u16,
    challenge: Option<&str>,
) -> Problem {
    let answer = problem(
        "auth_required",
        "auth_required",
        format!("the connector's server refused its authorization (HTTP {status}), so it needs a new one; {}", reconnect(at, id)),
    );
    let Some(owner) = owner(o, at.member_id) else { return answer };
    let (tenant, workspace) = (at.tenant, at.workspace);
    let audit = Audit { actor: "system:oauth_refused".into(), request_id: None };
    let audit = &audit;
    // A challenge naming scopes (a 403 `insufficient_scope`, or a 401 asking for more) names
    // what the call needs: the next authorization asks for them beside the grant's own (a
    // step-up, SEP-2350; the person authorizes it through the usual connect link, since no
    // person is here to be redirected).
    let wanted = challenge.and_then(|c| challenge::scopes([c])).unwrap_or_default();
    let wanted = &wanted;
    let marked = state
        .db
        .serializable(Scope::Tenant(tenant), move |conn, _| {
            Box::pin(async move {
                let (row, _) = store::grant(&mut *conn, tenant, workspace, id, owner).await?;
                // Only the grant whose token was refused: not one connected again meanwhile.
                let current =
                    row.as_ref().filter(|g| g.status == "active").is_some_and(|g| Some(stamp(owner, g).as_str()) == tag);
                if !current || !store::kill(&mut *conn, tenant, workspace, id, owner).await? {
                    return Ok(false);
                }
                let granted = row.as_ref().and_then(|g| g.scopes.clone()).unwrap_or_default();
                let all = super::union(&granted, wanted);
                if all.len() > granted.len() {
                    store::step_up(&mut *conn, tenant, workspace, id, owner, &all).await?;
                }
                let entry = Entry {
                    tenant: Some(tenant),
                    audit,
                    action: "oauth.grant_refused",
                    target: format!("connector:{id}/grant:{}", owner.as_text()),
                    before: Some(json!({ "status": "active" })),
                    after: Some(json!({ "status": "auth_required", "http_status": status, "step_up_scopes": wanted })),
                };
                admin_log::record(conn, entry).await?;
                Ok(true)
            })
        })
        .await;
    let marked = match marked {
        Ok(marked) => marked,
        Err(e) => {
            tracing::warn!(error = %e, connector = %id, "could not mark a refused OAuth grant");
            false
        }
    };
    crate::ops::record(
        &state.ops,
        crate::ops::Failure {
            operation: "oauth.use",
            stage: "downstream".into(),
            tenant: Some(tenant.0),
            workspace: Some(workspace),
            status: crate::ops::Status::Failed,
            code: "credential_refused".into(),
            message: format!(
                "connector {id} ({} grant): the server answered HTTP {status} to its token{}",
                owner.as_text(),
                if marked { "; the grant needs a new authorization" } else { "" }
            ),
            reference: None,
        },
    );
    answer
}
