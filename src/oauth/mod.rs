//! Downstream OAuth: authorization code + PKCE (the `oauth2` crate) against a connector's
//! authorization server, tokens sealed by the vault as the connector's credential, refresh
//! single-flight across replicas, and disconnect with RFC 7009 revocation.
//!
//! - A person reaches the provider through a connect URL signed with an HMAC key derived from
//!   the active vault key (HKDF), valid 15 minutes, naming the member it is for; or through a
//!   mailed connect link (`crate::connect_links`). Either starts a flow: the SHA-256 of its
//!   `state` maps to the sealed PKCE verifier for 15 minutes, claimed once at the callback.
//! - The callback must come from the member who started the flow, who must still hold the
//!   permission; a link's flow consumes the link (one winner) and restores it if storing fails.
//! - Refresh: a lease taken by compare-and-set that also records the refresh token as spent
//!   before it is sent, so a refresh token is never sent twice, by any replica. A refresh that
//!   fails kills the grant (`auth_required`). Every grant change bumps the tenant's epoch.
//! - Gatehouse is the client by a static registration (public, or confidential with its secret
//!   sealed in the vault), its Client ID Metadata Document, or RFC 7591 registration
//!   (`client_auth`); a remote MCP server's resource (RFC 8707) comes from its protected
//!   resource metadata (`discovery`, also from a 401's challenge: `challenge`).
//! - Disconnect writes a revocation intent; `sweep` settles the ones a crash left.

pub mod assertion;
pub mod challenge;
pub mod client_auth;
mod client_credentials;
mod connect;
mod disconnect;
pub mod discovery;
pub mod dpop;
mod grants;
pub mod http;
pub mod identity_assertion;
mod issuer;
mod legacy;
mod registration;
mod store;
pub mod sweep;

use client_auth::{Creds, Method, Registration};
use connect::check_member;
pub use connect::{ConnectParams, connect_url, verify_connect};
pub use disconnect::{GrantInfo, disconnect, show};
pub use grants::{refused, resolve};
use registration::register;

use std::{sync::Arc, time::Duration};

use axum::http::{HeaderName, HeaderValue};
use oauth2::{
    AuthType, AuthUrl, AuthorizationCode, ClientId, ClientSecret, CsrfToken, PkceCodeChallenge, PkceCodeVerifier, RedirectUrl,
    RefreshToken, RevocationUrl, Scope as OauthScope, StandardRevocableToken, TokenResponse, TokenUrl, basic::BasicClient,
};
use serde::{Deserialize, Serialize};
use serde_json::json;
use sha2::{Digest, Sha256};
use uuid::Uuid;
use zeroize::Zeroizing;

use crate::{
    AppState,
    admin_log::{self, Audit, Entry},
    db::Scope,
    error::{Error, Result},
    gateway::credentials::{Caller, Credential, Problem, SlotKey},
    ids::TenantId,
    oidc::Http,
    secrets,
    vault::{Aad, KeyRing, Owner, PURPOSE_OAUTH_FLOW, PURPOSE_OAUTH_GRANT, slots::Slot},
    workspaces::{
        Connector,
        config::{OauthAuth, SlotKind},
    },
};

/// A signed connect URL is valid this long.
pub const CONNECT_TTL_SECS: i64 = 900;
/// How long a replica that lost the refresh lease waits for the winner's new token.
const FOLLOWER_WAIT: Duration = Duration::from_secs(10);

/// This replica's OAuth state: its HTTP client and the grants it read, labelled by epoch.
#[derive(Debug)]
pub struct Oauth {
    http: Http,
    grants: crate::epochs::Cache<SlotKey, Arc<Option<store::Grant>>>,
}

impl Oauth {
    pub fn new(http: reqwest::Client) -> Self {
        Oauth { http: Http(http), grants: Default::default() }
    }
}

/// The tokens a grant holds (sealed as JSON; zeroed on drop; never printed).
#[derive(Serialize, Deserialize)]
struct Tokens {
    access_token: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    refresh_token: Option<String>,
    /// The grant's DPoP proof key (`dpop::Key::stored`), when its tokens are DPoP-bound.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    dpop_key: Option<String>,
}

impl Drop for Tokens {
    fn drop(&mut self) {
        use zeroize::Zeroize;
        self.access_token.zeroize();
        for secret in [self.refresh_token.as_mut(), self.dpop_key.as_mut()].into_iter().flatten() {
            secret.zeroize();
        }
    }
}

/// Whether a token response's `token_type` is DPoP (RFC 9449 §5: the token is bound to the key
/// whose proof asked for it; a server may still answer Bearer, and then the key is not used).
fn dpop_bound(response: &oauth2::basic::BasicTokenResponse) -> bool {
    matches!(response.token_type(), oauth2::basic::BasicTokenType::Extension(t) if t.eq_ignore_ascii_case("dpop"))
}

/// The key to keep with a token response's tokens: the signer's, when they came back bound.
fn bound_key(response: &oauth2::basic::BasicTokenResponse, signer: Option<&dpop::Signer>) -> Option<String> {
    signer.filter(|_| dpop_bound(response)).map(|s| s.key().stored())
}

fn aad<'a>(tenant: TenantId, workspace: Uuid, connector: &'a str, owner: Owner, purpose: &'a str) -> Aad<'a> {
    Aad { tenant: tenant.0, workspace, connector, owner, purpose }
}

fn ring(state: &AppState) -> Result<&KeyRing> {
    crate::vault::slots::require(state.config.vault_keys.as_ref())
}

/// Whose grant a caller uses: the workspace's, or the member's own.
pub fn owner(o: &OauthAuth, member: Option<Uuid>) -> Option<Owner> {
    match o.grant {
        SlotKind::Shared => Some(Owner::Shared),
        SlotKind::Personal => member.map(Owner::Member),
    }
}

fn redirect_uri(state: &AppState) -> String {
    format!("{}/oauth/callback", state.config.public_url.trim_end_matches('/'))
}

type Client = oauth2::Client<
    oauth2::basic::BasicErrorResponse,
    oauth2::basic::BasicTokenResponse,
    oauth2::basic::BasicTokenIntrospectionResponse,
    StandardRevocableToken,
    oauth2::basic::BasicRevocationErrorResponse,
    oauth2::EndpointSet,
    oauth2::EndpointNotSet,
    oauth2::EndpointNotSet,
    oauth2::EndpointNotSet,
    oauth2::EndpointSet,
>;

fn client(state: &AppState, creds: &Creds, authorization: &str, token: &str) -> Result<Client> {
    let bad = |what: &str| Error::Unavailable {
        code: "oauth_misconfigured",
        message: format!("the connector's authorization server gave an unusable {what}"),
        retry_after_ms: None,
    };
    let client = BasicClient::new(ClientId::new(creds.id.clone()))
        .set_auth_uri(AuthUrl::new(authorization.to_owned()).map_err(|_| bad("authorization endpoint"))?)
        .set_token_uri(TokenUrl::new(token.to_owned()).map_err(|_| bad("token endpoint"))?)
        .set_redirect_uri(RedirectUrl::new(redirect_uri(state)).map_err(|_| bad("redirect URI"))?);
    let secret = || creds.secret.as_ref().map(|s| ClientSecret::new(s.to_string())).ok_or_else(|| bad("client secret"));
    Ok(match creds.method {
        // A public client (PKCE, no secret), or one whose assertion each request adds
        // ([`Creds::assertion_params`]): the client id goes in the body.
        Method::None | Method::PrivateKeyJwt => client.set_auth_type(AuthType::RequestBody),
        Method::ClientSecretBasic => client.set_client_secret(secret()?).set_auth_type(AuthType::BasicAuth),
        Method::ClientSecretPost => client.set_client_secret(secret()?).set_auth_type(AuthType::RequestBody),
    })
}

/// Who starts a flow: a member (who must come back), or a connect link.
#[derive(Clone, Copy, Debug)]
pub enum Origin {
    Member(Uuid),
    Link(Uuid),
}

/// Starts a flow for `connector`; answers the provider's authorization URL.
pub async fn start(
    state: &AppState,
    tenant: TenantId,
    workspace: Uuid,
    id: &str,
    connector: &Connector,
    origin: Origin,
) -> Result<String> {
    let ring = ring(state)?;
    let o = connector
        .auth()
        .oauth()
        .ok_or(Error::Conflict { code: "not_oauth", message: format!("connector `{id}` does not authenticate with OAuth") })?;
    o.person_authorizes(id)?;
    let owner = match (o.grant, origin) {
        (SlotKind::Shared, _) => Owner::Shared,
        (SlotKind::Personal, Origin::Member(m)) => Owner::Member(m),
        (SlotKind::Personal, Origin::Link(_)) => {
            return Err(Error::Conflict {
                code: "not_oauth_shared",
                message: "a connect link authorizes shared grants only".into(),
            });
        }
    };
    if let Origin::Member(m) = origin {
        check_member(state, tenant, m, o.grant).await?;
    }
    let endpoints = discovery::endpoints(&state.oauth.http.0, connector, o).await?;
    let registration = client_auth::choose_registration(o.client_id.is_some(), &endpoints, client_auth::document_usable(state))?;
    let (client_id, method) = match (registration, &o.client_id) {
        (Registration::Static, Some(c)) if o.confidential => {
            // Refuse now, not at the callback, when the secret was never set.
            let (kind, _) = client_auth::secret(state, tenant, workspace, id).await?;
            (c.clone(), client_auth::confidential_method(endpoints.token_auth_methods.as_deref(), kind)?)
        }
        (Registration::Static, Some(c)) => (c.clone(), Method::None),
        (Registration::MetadataDocument, _) => (client_auth::document_url(state), Method::None),
        _ => register(state, tenant, workspace, id, &endpoints).await?,
    };
    // The authorization request carries no secret.
    let public = Creds { id: client_id.clone(), method: Method::None, secret: None };
    let client = client(state, &public, &endpoints.authorization, &endpoints.token)?;
    let (challenge, verifier) = PkceCodeChallenge::new_random_sha256();
    // The tenant leads the state, so the callback knows whose rows to look in.
    let flow_state = Zeroizing::new(format!("{}.{}", tenant.0.simple(), secrets::random_b64(32)));
    let mut request = client.authorize_url(|| CsrfToken::new(flow_state.to_string())).set_pkce_challenge(challenge);
    let scopes = scopes_for(state, tenant, workspace, id, owner, o, &endpoints).await?;
    for scope in scopes.iter().flatten() {
        request = request.add_scope(OauthScope::new(scope.clone()));
    }
    if let Some(resource) = &endpoints.resource {
        request = request.add_extra_param("resource", resource.clone());
    }
    let (url, _) = request.url();
    let sealed = ring.seal(&aad(tenant, workspace, id, owner, PURPOSE_OAUTH_FLOW), verifier.secret().as_bytes());
    let hash = secrets::digest(&flow_state);
    let (started_by, link_id) = match origin {
        Origin::Member(m) => (Some(m), None),
        Origin::Link(l) => (None, Some(l)),
    };
    let client = store::FlowClient {
        client_id: &client_id,
        token_endpoint: &endpoints.token,
        client_auth: method.as_str(),
        resource: endpoints.resource.as_deref(),
        scopes: scopes.as_deref(),
    };
    let (hash, sealed, iss) = (&hash, &sealed, &endpoints.iss_check());
    state
        .db
        .single_decision(Scope::Tenant(tenant), move |conn, _| {
            let slot = Slot { tenant, workspace, connector: id, owner };
            let flow = store::NewFlow { state_hash: hash, started_by, link_id, verifier: sealed, client, iss };
            Box::pin(async move { store::insert_flow(conn, &slot, flow).await })
        })
        .await?;
    Ok(url.to_string())
}

/// The scopes an authorization asks for: the connector's configured ones, else those its
/// server names (its 401's challenge, else `scopes_supported`), plus any step-up recorded on the
/// grant (the union, SEP-2350). None: `scope` is omitted.
async fn scopes_for(
    state: &AppState,
    tenant: TenantId,
    workspace: Uuid,
    id: &str,
    owner: Owner,
    o: &OauthAuth,
    endpoints: &discovery::Endpoints,
) -> Result<Option<Vec<String>>> {
    let base = if o.scopes.is_empty() { endpoints.scopes.clone().unwrap_or_default() } else { o.scopes.clone() };
    let step_up = state
        .db
        .single_decision(Scope::Tenant(tenant), move |conn, _| {
            Box::pin(store::step_up_scopes(conn, tenant, workspace, id, owner))
        })
        .await?;
    let all = union(&base, step_up.as_deref().unwrap_or_default());
    Ok((!all.is_empty()).then_some(all))
}

/// `a`, then what of `b` is not in it, each once.
fn union(a: &[String], b: &[String]) -> Vec<String> {
    let mut out: Vec<String> = Vec::with_capacity(a.len() + b.len());
    for s in a.iter().chain(b) {
        if !out.contains(s) {
            out.push(s.clone());
        }
    }
    out
}

/// What a completed callback did.
#[derive(Debug, Serialize)]
pub struct Connected {
    pub connector: String,
    pub grant: &'static str,
    pub account_label: Option<String>,
}

fn claimed_error() -> Error {
    Error::Conflict {
        code: "flow_claimed",
        message:
            "this authorization was already completed, has expired, was started by another person, or was never started here"
                .into(),
    }
}

/// Completes a flow at the callback: claims it once, checks who came back, exchanges the code
/// and seals the tokens as the connector's credential.
pub async fn finish(
    state: &AppState,
    flow_state: &str,
    code: &str,
    iss: Option<&str>,
    session_member: Option<(TenantId, Uuid)>,
) -> Result<Connected> {
    let ring = ring(state)?;
    let tenant = flow_state.split_once('.').and_then(|(t, _)| Uuid::parse_str(t).ok()).map(TenantId).ok_or_else(claimed_error)?;
    let hash = secrets::digest(flow_state);
    let hash = &hash;
    let member = session_member.filter(|(t, _)| *t == tenant).map(|(_, m)| m);
    // The issuer is checked inside the claim's transaction: a refused response rolls the
    // claim back, so it writes nothing and the person may finish with the right response.
    let flow = state
        .db
        .single_decision(Scope::Tenant(tenant), move |conn, _| {
            Box::pin(async move {
                let flow = store::claim_flow(conn, tenant, hash, member).await?;
                if let Some(f) = &flow {
                    f.iss.check(iss).map_err(|why| issuer::IssRefused { connector: f.connector.clone(), why })?;
                }
                Ok(flow)
            })
        })
        .await
        .map_err(|e| issuer::refused(state, tenant, e))?
        .ok_or_else(claimed_error)?;
    let owner = crate::vault::slots::parse_owner(&flow.owner).ok_or_else(claimed_error)?;
    let bound = crate::workspaces::bound_by_id(&state.db, tenant, flow.workspace).await?;
    let connector = bound.document.connectors.get(&flow.connector).ok_or(Error::NotFound { what: "connector" })?;
    let o = connector.auth().oauth().ok_or_else(claimed_error)?;
    let audit = match flow.started_by {
        Some(started_by) => {
            // Only the member who started the flow may finish it, and only while permitted.
            if session_member != Some((tenant, started_by)) {
                return Err(Error::Forbidden {
                    code: "wrong_member",
                    message: "this authorization was started by another person; sign in as them, or start again".into(),
                });
            }
            check_member(state, tenant, started_by, o.grant).await?;
            Audit { actor: format!("member:{started_by}"), request_id: None }
        }
        None => Audit { actor: format!("connect_link:{}", flow.link_id.unwrap_or_default()), request_id: None },
    };
    let verifier = ring
        .open(&aad(tenant, flow.workspace, &flow.connector, owner, PURPOSE_OAUTH_FLOW), &flow.verifier)
        .map_err(|_| claimed_error())?;
    let verifier = String::from_utf8(verifier.to_vec()).map_err(|_| claimed_error())?;
    let endpoints = discovery::endpoints(&state.oauth.http.0, connector, o).await?;
    let method = Method::parse(&flow.client_auth).ok_or_else(claimed_error)?;
    let creds = Creds::load(state, tenant, flow.workspace, &flow.connector, &flow.client_id, method).await?;
    let client = client(state, &creds, &endpoints.authorization, &flow.token_endpoint)?;
    let mut exchange =
        client.exchange_code(AuthorizationCode::new(code.to_owned())).set_pkce_verifier(PkceCodeVerifier::new(verifier));
    if let Some(resource) = &flow.resource {
        exchange = exchange.add_extra_param("resource", resource.clone());
    }
    for (name, value) in creds.assertion_params(endpoints.issuer.as_deref().unwrap_or(&flow.token_endpoint))? {
        exchange = exchange.add_extra_param(name, value);
    }
    // A server that offers DPoP gets a proof with the exchange from this grant's own new key.
    let signer = dpop::signer(None, endpoints.dpop)?;
    let exchanged = exchange.request_async(&dpop::Http { inner: &state.oauth.http, signer: signer.as_ref() }).await;
    let response = exchanged.map_err(|e| {
        tracing::warn!(error = %e, connector = %flow.connector, "downstream OAuth code exchange failed");
        Error::Forbidden { code: "token_exchange_failed", message: "the authorization server refused the code".into() }
    })?;
    let tokens = Tokens {
        access_token: response.access_token().secret().clone(),
        refresh_token: response.refresh_token().map(|r| r.secret().clone()),
        dpop_key: bound_key(&response, signer.as_ref()),
    };
    let expires_in = response.expires_in().map(|d| d.as_secs() as i64);
    let label = account_label(state, endpoints.userinfo.as_deref(), &tokens.access_token).await;
    if let Some(link) = flow.link_id {
        crate::connect_links::consume(&state.db, tenant, &audit, link, label.as_deref().unwrap_or("connected")).await?;
    }
    let grant = GrantParts {
        expires_in,
        client: store::FlowClient {
            client_id: &flow.client_id,
            token_endpoint: &flow.token_endpoint,
            client_auth: method.as_str(),
            resource: flow.resource.as_deref(),
            scopes: flow.scopes.as_deref(),
        },
        label: label.as_deref(),
    };
    let slot = Slot { tenant, workspace: flow.workspace, connector: &flow.connector, owner };
    let stored = store_grant(state, ring, &slot, &tokens, grant, &audit).await;
    if let Err(e) = stored {
        if let Some(link) = flow.link_id {
            // The link was consumed for a credential that was never stored: give it back.
            if let Err(re) = crate::connect_links::restore(&state.db, tenant, &audit, link).await {
                tracing::error!(error = %re, "could not restore a connect link after a failed store");
            }
        }
        return Err(e);
    }
    Ok(Connected { connector: flow.connector, grant: o.grant.as_str(), account_label: label })
}

/// A label for the connected account (the provider's `email`, `preferred_username` or `sub`),
/// when it offers userinfo.
async fn account_label(state: &AppState, userinfo: Option<&str>, access_token: &str) -> Option<String> {
    let response = state.oauth.http.0.get(userinfo?).bearer_auth(access_token).send().await.ok()?;
    let claims: serde_json::Value = response.error_for_status().ok()?.json().await.ok()?;
    ["email", "preferred_username", "sub"].iter().find_map(|k| claims[*k].as_str()).map(|s| s.chars().take(200).collect())
}

/// What a new grant records beside its tokens.
#[derive(Clone, Copy)]
struct GrantParts<'a> {
    expires_in: Option<i64>,
    client: store::FlowClient<'a>,
    label: Option<&'a str>,
}

/// Seals the tokens into the slot and records the grant and its admin-log row, in one
/// transaction.
async fn store_grant(
    state: &AppState,
    ring: &KeyRing,
    slot: &Slot<'_>,
    tokens: &Tokens,
    grant: GrantParts<'_>,
    audit: &Audit,
) -> Result<()> {
    let Slot { tenant, workspace, connector, owner } = *slot;
    let GrantParts { expires_in, client, label } = grant;
    let plaintext = Zeroizing::new(serde_json::to_vec(tokens).map_err(anyhow::Error::from)?);
    let envelope = ring.seal(&aad(tenant, workspace, connector, owner, PURPOSE_OAUTH_GRANT), &plaintext);
    let refreshable = tokens.refresh_token.is_some();
    let names: &[&str] = if refreshable { &["access_token", "refresh_token"] } else { &["access_token"] };
    let fields = serde_json::Value::Array(names.iter().map(|n| json!({ "name": n, "last4": null })).collect());
    let (envelope, fields) = (&envelope, &fields);
    state
        .db
        .serializable(Scope::Tenant(tenant), move |conn, _| {
            Box::pin(async move {
                crate::vault::slots::tx::upsert(&mut *conn, slot, ring.active(), envelope, fields, &audit.actor)
                    .await
                    .map_err(|e| e.on_constraint("credentials_member_fkey", || Error::NotFound { what: "member" }))?;
                store::upsert_grant(&mut *conn, slot, expires_in, client, label, &audit.actor).await?;
                let entry = Entry {
                    tenant: Some(tenant),
                    audit,
                    action: "oauth.connect",
                    target: format!("connector:{connector}/grant:{}", owner.as_text()),
                    before: None,
                    after: Some(json!({ "workspace_id": workspace, "account_label": label, "refreshable": refreshable, "key_id": ring.active() })),
                };
                admin_log::record(conn, entry).await
            })
        })
        .await
}
