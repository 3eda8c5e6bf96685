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

pub mod discovery;
pub mod http;
pub mod store;

use std::{sync::Arc, time::Duration};

use axum::http::{HeaderName, HeaderValue};
use oauth2::{
    AuthType, AuthUrl, AuthorizationCode, ClientId, CsrfToken, PkceCodeChallenge, PkceCodeVerifier, RedirectUrl, RefreshToken,
    RevocationUrl, Scope as OauthScope, StandardRevocableToken, TokenResponse, TokenUrl, basic::BasicClient,
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
    members::{self, Permission},
    oidc::Http,
    secrets,
    tenants::TenantId,
    vault::{Aad, KeyRing, Owner, PURPOSE_OAUTH_FLOW, PURPOSE_OAUTH_GRANT},
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
}

impl Drop for Tokens {
    fn drop(&mut self) {
        use zeroize::Zeroize;
        self.access_token.zeroize();
        if let Some(r) = self.refresh_token.as_mut() {
            r.zeroize();
        }
    }
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

fn client(state: &AppState, client_id: &str, authorization: &str, token: &str) -> Result<Client> {
    let bad = |what: &str| Error::Unavailable {
        code: "oauth_misconfigured",
        message: format!("the connector's authorization server gave an unusable {what}"),
        retry_after_ms: None,
    };
    Ok(BasicClient::new(ClientId::new(client_id.to_owned()))
        .set_auth_uri(AuthUrl::new(authorization.to_owned()).map_err(|_| bad("authorization endpoint"))?)
        .set_token_uri(TokenUrl::new(token.to_owned()).map_err(|_| bad("token endpoint"))?)
        .set_redirect_uri(RedirectUrl::new(redirect_uri(state)).map_err(|_| bad("redirect URI"))?)
        // A public client (PKCE, no secret): the client id goes in the body.
        .set_auth_type(AuthType::RequestBody))
}

/// The database clock, in Unix seconds (signed URLs expire by it, like everything else).
async fn db_now(state: &AppState) -> Result<i64> {
    state
        .db
        .single_decision(Scope::Global, |conn, _| {
            Box::pin(async move {
                Ok(sqlx::query_scalar::<_, i64>("SELECT extract(epoch FROM now())::bigint").fetch_one(conn).await?)
            })
        })
        .await
}

fn connect_message(tenant: &str, workspace: &str, connector: &str, member: Uuid, expires: i64) -> String {
    format!("gatehouse-connect|v1|{tenant}|{workspace}|{connector}|{member}|{expires}")
}

/// A signed connect URL for `member` to authorize `connector` (valid 15 minutes).
pub async fn connect_url(state: &AppState, tenant: &str, workspace: &str, connector: &str, member: Uuid) -> Result<String> {
    let ring = ring(state)?;
    let expires = db_now(state).await? + CONNECT_TTL_SECS;
    let (kid, sig) = ring.sign_link(connect_message(tenant, workspace, connector, member, expires).as_bytes());
    let mut url = url::Url::parse(&format!("{}/oauth/connect", state.config.public_url.trim_end_matches('/')))
        .map_err(|e| anyhow::anyhow!("bad public URL: {e}"))?;
    url.query_pairs_mut()
        .append_pair("t", tenant)
        .append_pair("w", workspace)
        .append_pair("c", connector)
        .append_pair("m", &member.to_string())
        .append_pair("exp", &expires.to_string())
        .append_pair("k", kid)
        .append_pair("sig", &sig);
    Ok(url.to_string())
}

/// A connect URL's parameters.
#[derive(Debug, Deserialize)]
pub struct ConnectParams {
    pub t: String,
    pub w: String,
    pub c: String,
    pub m: Uuid,
    pub exp: i64,
    pub k: String,
    pub sig: String,
}

/// Checks a connect URL's signature and expiry (database clock).
pub async fn verify_connect(state: &AppState, p: &ConnectParams) -> Result<()> {
    let ring = ring(state)?;
    let message = connect_message(&p.t, &p.w, &p.c, p.m, p.exp);
    if !ring.verify_link(&p.k, message.as_bytes(), &p.sig) {
        return Err(Error::Forbidden { code: "invalid_link", message: "this connect link is not valid".into() });
    }
    if db_now(state).await? >= p.exp {
        return Err(Error::Forbidden {
            code: "link_expired",
            message: "this connect link has expired; ask for a new one".into(),
        });
    }
    Ok(())
}

/// Whether `member` (still) may authorize a grant of this kind.
async fn check_member(state: &AppState, tenant: TenantId, member: Uuid, kind: SlotKind) -> Result<()> {
    let permitted = state
        .db
        .serializable(Scope::Tenant(tenant), move |conn, _| {
            Box::pin(async move {
                let Some(m) = members::store::get(&mut *conn, tenant, member).await? else { return Ok(false) };
                let p = members::permissions(conn, tenant, m.role).await?;
                Ok(match kind {
                    SlotKind::Shared => p.has(Permission::CredentialAdministration),
                    SlotKind::Personal => p.has(Permission::ConnectorAccess),
                })
            })
        })
        .await?;
    if permitted {
        Ok(())
    } else {
        Err(Error::Forbidden { code: "permission_denied", message: "you may not authorize this connector".into() })
    }
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
    let client_id = match &o.client_id {
        Some(c) => c.clone(),
        None => register(state, tenant, workspace, id, &endpoints).await?,
    };
    let client = client(state, &client_id, &endpoints.authorization, &endpoints.token)?;
    let (challenge, verifier) = PkceCodeChallenge::new_random_sha256();
    // The tenant leads the state, so the callback knows whose rows to look in.
    let flow_state = Zeroizing::new(format!("{}.{}", tenant.0.simple(), secrets::random_b64(32)));
    let mut request = client.authorize_url(|| CsrfToken::new(flow_state.to_string())).set_pkce_challenge(challenge);
    for scope in &o.scopes {
        request = request.add_scope(OauthScope::new(scope.clone()));
    }
    let (url, _) = request.url();
    let sealed = ring.seal(&aad(tenant, workspace, id, owner, PURPOSE_OAUTH_FLOW), verifier.secret().as_bytes());
    let hash = secrets::digest(&flow_state);
    let (started_by, link_id) = match origin {
        Origin::Member(m) => (Some(m), None),
        Origin::Link(l) => (None, Some(l)),
    };
    let (hash, sealed, token, client_id) = (&hash, &sealed, &endpoints.token, &client_id);
    state
        .db
        .single_decision(Scope::Tenant(tenant), move |conn, _| {
            Box::pin(store::insert_flow(conn, tenant, hash, workspace, id, owner, started_by, link_id, sealed, client_id, token))
        })
        .await?;
    Ok(url.to_string())
}

/// This connector's client at its authorization server, registered (RFC 7591) on first use as
/// a public client: PKCE, no secret. Replicas racing here keep the first registration.
async fn register(
    state: &AppState,
    tenant: TenantId,
    workspace: Uuid,
    id: &str,
    endpoints: &discovery::Endpoints,
) -> Result<String> {
    let no_registration = || Error::Conflict {
        code: "oauth_registration_unavailable",
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
    session_member: Option<(TenantId, Uuid)>,
) -> Result<Connected> {
    let ring = ring(state)?;
    let tenant = flow_state.split_once('.').and_then(|(t, _)| Uuid::parse_str(t).ok()).map(TenantId).ok_or_else(claimed_error)?;
    let hash = secrets::digest(flow_state);
    let hash = &hash;
    let member = session_member.filter(|(t, _)| *t == tenant).map(|(_, m)| m);
    let flow = state
        .db
        .single_decision(Scope::Tenant(tenant), move |conn, _| Box::pin(store::claim_flow(conn, tenant, hash, member)))
        .await?
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
    let client = client(state, &flow.client_id, &endpoints.authorization, &flow.token_endpoint)?;
    let response = client
        .exchange_code(AuthorizationCode::new(code.to_owned()))
        .set_pkce_verifier(PkceCodeVerifier::new(verifier))
        .request_async(&state.oauth.http)
        .await
        .map_err(|e| {
            tracing::warn!(error = %e, connector = %flow.connector, "downstream OAuth code exchange failed");
            Error::Forbidden { code: "token_exchange_failed", message: "the authorization server refused the code".into() }
        })?;
    let tokens = Tokens {
        access_token: response.access_token().secret().clone(),
        refresh_token: response.refresh_token().map(|r| r.secret().clone()),
    };
    let expires_in = response.expires_in().map(|d| d.as_secs() as i64);
    let label = account_label(state, endpoints.userinfo.as_deref(), &tokens.access_token).await;
    if let Some(link) = flow.link_id {
        crate::connect_links::consume(&state.db, tenant, &audit, link, label.as_deref().unwrap_or("connected")).await?;
    }
    let grant =
        GrantParts { expires_in, client_id: &flow.client_id, token_endpoint: &flow.token_endpoint, label: label.as_deref() };
    let stored = store_grant(state, ring, tenant, flow.workspace, &flow.connector, owner, &tokens, grant, &audit).await;
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
    client_id: &'a str,
    token_endpoint: &'a str,
    label: Option<&'a str>,
}

#[allow(clippy::too_many_arguments)]
async fn store_grant(
    state: &AppState,
    ring: &KeyRing,
    tenant: TenantId,
    workspace: Uuid,
    connector: &str,
    owner: Owner,
    tokens: &Tokens,
    grant: GrantParts<'_>,
    audit: &Audit,
) -> Result<()> {
    let GrantParts { expires_in, client_id, token_endpoint, label } = grant;
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
                crate::vault::store::upsert(&mut *conn, tenant, workspace, connector, owner, ring.active(), envelope, fields, &audit.actor)
                    .await
                    .map_err(|e| e.on_constraint("credentials_member_fkey", || Error::NotFound { what: "member" }))?;
                store::upsert_grant(&mut *conn, tenant, workspace, connector, owner, expires_in, client_id, token_endpoint, label, &audit.actor)
                    .await?;
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

fn problem(code: &'static str, state: &'static str, message: String) -> Problem {
    Problem { code, state, message }
}

fn reconnect(at: &Caller<'_>, id: &str) -> String {
    format!(
        "connector `{id}` needs an OAuth authorization: call authorize_connector with {{\"connector\": \"{id}\"}} for a connect link (workspace {})",
        at.workspace_slug
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
    if !fresh && let Some((row, _)) = state.oauth.grants.get(&key).filter(|(_, label)| Some(*label) == at.epoch) {
        state.oauth.grants.count(true);
        return Ok(row);
    }
    state.oauth.grants.count(false);
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
pub async fn resolve(state: &AppState, at: &Caller<'_>, id: &str, o: &OauthAuth) -> Result<Option<Credential>, Problem> {
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
    loop {
        let Some(grant) = row.as_ref() else { return Err(problem("auth_required", "missing", reconnect(at, id))) };
        let Some(envelope) = grant.envelope.as_deref().filter(|_| grant.status == "active") else {
            return Err(problem(
                "auth_required",
                "auth_required",
                format!("the authorization expired or was refused; {}", reconnect(at, id)),
            ));
        };
        let tokens = open(ring, at, id, owner, envelope)?;
        let expiring = grant
            .access_expires_at
            .is_some_and(|e| e <= chrono::Utc::now() + chrono::Duration::seconds(store::EXPIRY_MARGIN_SECS));
        if !expiring {
            return credential(owner, grant, &tokens.access_token);
        }
        let Some(refresh) = tokens.refresh_token.as_deref() else {
            // Nothing to refresh with: the access token is used until the server refuses it.
            return credential(owner, grant, &tokens.access_token);
        };
        match refresh_once(state, ring, at, id, owner, &grant.token_endpoint, &grant.client_id, refresh).await? {
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

fn credential(owner: Owner, grant: &store::Grant, access_token: &str) -> Result<Option<Credential>, Problem> {
    let mut value = HeaderValue::from_str(&format!("Bearer {access_token}"))
        .map_err(|_| problem("auth_required", "incomplete", "the access token cannot be sent in an HTTP header".into()))?;
    value.set_sensitive(true);
    let stamp = format!("{:?}|{:?}", grant.version, grant.updated_at.map(|u| u.timestamp_micros()));
    let digest = Sha256::digest(stamp.as_bytes());
    Ok(Some(Credential {
        headers: vec![(HeaderName::from_static("authorization"), value)],
        tag: format!("{}@{}", owner.as_text(), hex::encode(&digest[..8])),
    }))
}

enum Refreshed {
    /// This task refreshed (or found the grant dead): read it again.
    Done,
    /// Another holds the lease or already refreshed: wait and read again.
    Other,
}

/// One refresh attempt: the lease and the spent mark by one compare-and-set, then (only for
/// the winner) the request, then the outcome.
#[allow(clippy::too_many_arguments)]
async fn refresh_once(
    state: &AppState,
    ring: &KeyRing,
    at: &Caller<'_>,
    id: &str,
    owner: Owner,
    token_endpoint: &str,
    client_id: &str,
    refresh: &str,
) -> Result<Refreshed, Problem> {
    let unavailable = |e: Error| {
        tracing::warn!(error = %e, "OAuth refresh bookkeeping failed");
        problem("unavailable", "unavailable", "the connector's authorization could not be refreshed; retry shortly".into())
    };
    let (tenant, workspace) = (at.tenant, at.workspace);
    let holder = Uuid::new_v4();
    let spent = secrets::digest(refresh);
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
    // The token is recorded as spent: from here on it is never sent again, whatever happens.
    let client = client(state, client_id, token_endpoint, token_endpoint).map_err(unavailable)?;
    let response = client.exchange_refresh_token(&RefreshToken::new(refresh.to_owned())).request_async(&state.oauth.http).await;
    let audit = Audit { actor: "system:oauth_refresh".into(), request_id: None };
    let audit = &audit;
    match response {
        Ok(response) => {
            let tokens = Tokens {
                access_token: response.access_token().secret().clone(),
                refresh_token: Some(response.refresh_token().map_or_else(|| refresh.to_owned(), |r| r.secret().clone())),
            };
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
                        if !store::refreshed(&mut *conn, tenant, workspace, id, owner, holder, expires_in, rotated).await? {
                            // Disconnected (or killed) meanwhile: keep nothing.
                            return Ok(());
                        }
                        crate::vault::store::upsert(
                            &mut *conn,
                            tenant,
                            workspace,
                            id,
                            owner,
                            ring.active(),
                            envelope,
                            fields,
                            &audit.actor,
                        )
                        .await?;
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
