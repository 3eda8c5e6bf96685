//! MCP authorization for interactive agents (the MCP authorization specification): Gatehouse
//! is the OAuth 2.1 resource server of every MCP endpoint and, per tenant, the authorization
//! server that signs people in through the tenant's OpenID provider.
//!
//! - Issuer `{public}/t/{tenant}`; metadata (RFC 8414) at
//!   `/.well-known/oauth-authorization-server/t/{tenant}`, protected resource metadata
//!   (RFC 9728) at `/.well-known/oauth-protected-resource` + the endpoint's path.
//! - Clients: Client ID Metadata Documents (an https `client_id`) or dynamic registration
//!   (RFC 7591); public clients only, authorization code with PKCE S256.
//! - Every grant names one exact endpoint URL (RFC 8707); its tokens work there only.
//! - Tokens: `gha_…` access (short-lived), `ghr_…` refresh (rotating; a spent one presented
//!   again revokes the whole grant). Only SHA-256 digests are stored.

pub mod authorize;
pub mod cli;
pub mod clients;
pub mod grants;
pub mod http;
pub mod metadata;
mod store;
pub mod token;

use axum::{
    http::{HeaderMap, HeaderValue, header, request::Parts},
    response::{IntoResponse, Response},
};
use uuid::Uuid;

use crate::{
    AppState,
    admin_log::Audit,
    auth::{Actor, CLIENT_ID_HEADER, TenantCtx, TenantRef},
    config::Config,
    db::Scope,
    error::{Error, Result},
    members::{self, Permission, Permissions, Principal},
    secrets, tenants,
};

pub const ACCESS_PREFIX: &str = "gha_";
pub const REFRESH_PREFIX: &str = "ghr_";
pub const CODE_PREFIX: &str = "ghz_";
/// Dynamically registered client ids: `gmc_` + 22 base64url characters (128 random bits).
pub const CLIENT_PREFIX: &str = "gmc_";
/// base64url characters of 32 random bytes.
pub const SECRET_CHARS: usize = 43;
/// The one scope: use the workspace's tools with the member's own grants.
pub const SCOPE: &str = "mcp";
pub const CODE_TTL_SECS: i64 = 120;
pub const REFRESH_TTL_SECS: i64 = 30 * 24 * 3600;

/// The authorization server of `tenant`.
pub fn issuer(config: &Config, tenant: &str) -> String {
    format!("{}/t/{tenant}", config.public_url)
}

/// The exact URL of an MCP endpoint: what a token is bound to (RFC 8707).
pub fn resource_url(config: &Config, tenant: &str, workspace: &str, pool: Option<&str>) -> String {
    match pool {
        Some(pool) => format!("{}/t/{tenant}/w/{workspace}/mcp/{pool}", config.public_url),
        None => format!("{}/t/{tenant}/w/{workspace}/mcp", config.public_url),
    }
}

/// Where the protected resource metadata of the endpoint at `path` lives.
pub fn resource_metadata_url(config: &Config, path: &str) -> String {
    format!("{}/.well-known/oauth-protected-resource{}", config.public_url, path.trim_end_matches('/'))
}

fn segment_ok(s: &str) -> bool {
    !s.is_empty() && s.len() <= 100 && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
}

/// The workspace and pool a resource indicator names in `tenant`, if it is one of its MCP
/// endpoint URLs (exactly: no query, fragment, trailing slash or other tenant).
pub fn parse_resource(config: &Config, tenant: &str, resource: &str) -> Option<(String, Option<String>)> {
    let rest = resource.strip_prefix(&format!("{}/t/{tenant}/w/", config.public_url))?;
    let mut parts = rest.split('/');
    let (workspace, mcp, pool) = (parts.next()?, parts.next()?, parts.next());
    if parts.next().is_some() || mcp != "mcp" || !segment_ok(workspace) || pool.is_some_and(|p| !segment_ok(p)) {
        return None;
    }
    Some((workspace.to_owned(), pool.map(str::to_owned)))
}

/// Loopback redirect URIs (any port, RFC 8252 §7.3) and the deployment's allow-list.
pub fn redirect_allowed(config: &Config, uri: &str) -> bool {
    if config.mcp_redirect_uris.iter().any(|allowed| allowed == uri) {
        return true;
    }
    is_loopback_http(uri)
}

/// `http://` on a loopback host, without credentials or a fragment.
pub fn is_loopback_http(uri: &str) -> bool {
    let Ok(url) = url::Url::parse(uri) else { return false };
    url.scheme() == "http"
        && url.username().is_empty()
        && url.password().is_none()
        && url.fragment().is_none()
        && match url.host() {
            Some(url::Host::Domain(d)) => d == "localhost",
            Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
            Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
            None => false,
        }
}

/// Whether `presented` is one of the client's `registered` redirect URIs: exact, except that
/// a loopback URI may use any port (native clients bind an ephemeral one).
pub fn redirect_registered(registered: &[String], presented: &str) -> bool {
    registered.iter().any(|r| {
        r == presented
            || (is_loopback_http(r) && is_loopback_http(presented) && {
                let (mut a, mut b) = (url::Url::parse(r).ok(), url::Url::parse(presented).ok());
                if let (Some(a), Some(b)) = (a.as_mut(), b.as_mut()) {
                    let _ = a.set_port(None);
                    let _ = b.set_port(None);
                }
                a == b
            })
    })
}

/// The OAuth access token of a request, when it carries one and no machine credential.
pub fn bearer(headers: &HeaderMap) -> Option<&str> {
    if headers.contains_key(CLIENT_ID_HEADER) {
        return None;
    }
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && token.starts_with(ACCESS_PREFIX)).then_some(token)
}

/// The 401 of an MCP endpoint: `WWW-Authenticate` names the endpoint's protected resource
/// metadata and the scope (RFC 9728 §5.1), so an MCP client can start authorization.
pub fn challenge(config: &Config, path: &str, error: Error, token_presented: bool) -> Response {
    if !matches!(error, Error::Unauthorized) {
        return error.into_response();
    }
    let mut response = error.into_response();
    let invalid = if token_presented { ", error=\"invalid_token\"" } else { "" };
    let value = format!("Bearer resource_metadata=\"{}\", scope=\"{SCOPE}\"{invalid}", resource_metadata_url(config, path));
    if let Ok(v) = HeaderValue::from_str(&value) {
        response.headers_mut().insert(header::WWW_AUTHENTICATE, v);
    }
    response
}

/// What a replica keeps of an access token it checked, keyed by the tenant slug and the
/// token's digest (never the token), labelled with the tenant's epoch read before the check.
#[derive(Clone, Debug)]
pub struct Checked {
    tenant: TenantRef,
    status: tenants::Status,
    hit: store::AccessHit,
    connector_access: bool,
}

/// Authenticates an MCP request carrying an OAuth access token (`gha_…`): the token must be
/// live (unexpired by the database clock, its grant and client unrevoked, its member present)
/// and bound to this exact endpoint (RFC 8707). The answer is the member's own context.
///
/// A replica reuses its last check of the same token while the tenant's epoch is unchanged
/// and the token unexpired: one primary-key read instead of the lookups, with no staleness,
/// because every change that could end the token bumps the epoch in its own transaction.
#[tracing::instrument(name = "mcp_auth::authenticate", skip_all, fields(tenant), err(level = "debug"))]
pub async fn authenticate(state: &AppState, parts: &mut Parts, token: &str) -> Result<TenantCtx> {
    let [slug, workspace, pool] =
        crate::extract::path_params(parts, ["tenant", "workspace", "pool"]).await.ok_or(Error::NotFound { what: "tenant" })?;
    let (slug, workspace) = (slug.unwrap_or_default(), workspace.unwrap_or_default());
    tracing::Span::current().record("tenant", slug.as_str());
    if !secrets::well_formed(token, ACCESS_PREFIX, SECRET_CHARS) {
        return Err(Error::Unauthorized);
    }
    let key = (slug, secrets::digest(token));
    let (checked, epoch) = match cached(state, &key).await? {
        Some(hit) => hit,
        None => check(state, key).await?,
    };
    if checked.hit.resource != resource_url(&state.config, &checked.tenant.slug, &workspace, pool.as_deref()) {
        return Err(Error::Unauthorized);
    }
    match checked.status {
        tenants::Status::Active => {}
        tenants::Status::Suspended => {
            return Err(Error::Forbidden { code: "tenant_suspended", message: "this tenant is suspended".into() });
        }
        tenants::Status::Moved => return Err(crate::auth::moved(state, checked.tenant.id, parts).await),
        _ => return Err(Error::Unauthorized),
    }
    let request_id = crate::extract::request_id(&parts.headers);
    let hit = checked.hit;
    Ok(TenantCtx {
        audit: Audit { actor: format!("mcp_grant:{}", hit.grant_id), request_id },
        tenant: checked.tenant,
        actor: Actor::Machine {
            token_id: hit.grant_id,
            credential_id: hit.client_ref,
            principal: Some(Principal { issuer: hit.issuer, subject: hit.subject }),
            member_id: Some(hit.member_id),
            role: Some(hit.role),
        },
        // Like a person's token: the member's connector access and nothing else.
        permissions: Permissions::none().with(Permission::ConnectorAccess, checked.connector_access),
        epoch: Some(epoch),
        impersonation: None,
    })
}

/// This replica's earlier check of the token, if the tenant's epoch still matches its label
/// and the token has not expired since (both read from the database in one statement, or
/// both known without one while the replica is trusted, see [`crate::db::replica`]).
async fn cached(state: &AppState, key: &(String, Vec<u8>)) -> Result<Option<(Checked, i64)>> {
    let Some((checked, label)) = state.mcp_tokens.get(key) else {
        state.mcp_tokens.count(false);
        return Ok(None);
    };
    // While this replica is trusted, the epoch it applied and its estimate of the database's
    // clock (never behind it) answer with no round trip; otherwise one shared read.
    let replica = state.db.replica();
    let current = match (replica.applied(checked.tenant.id), replica.database_now()) {
        (Some(epoch), Some(now)) => Some((epoch, now)),
        _ => crate::epochs::read_at(&state.db, checked.tenant.id).await?,
    };
    match current {
        Some((epoch, now)) if epoch == label && checked.hit.expires_at > now => {
            state.mcp_tokens.count(true);
            Ok(Some((checked, epoch)))
        }
        _ => {
            state.mcp_tokens.remove(key);
            state.mcp_tokens.count(false);
            Ok(None)
        }
    }
}

/// Checks the token against the database and keeps the answer, labelled with the epoch read
/// before the lookups (a change committed in between can only make the label older).
async fn check(state: &AppState, key: (String, Vec<u8>)) -> Result<(Checked, i64)> {
    let (id, epoch) = crate::epochs::read_by_slug(&state.db, &key.0).await?.ok_or(Error::Unauthorized)?;
    let tenant = match tenants::by_slug(&state.db, &key.0).await {
        Ok(t) if t.id == id => t,
        Ok(_) | Err(Error::NotFound { .. }) => return Err(Error::Unauthorized),
        Err(e) => return Err(e),
    };
    let digest = key.1.clone();
    let found = state
        .db
        .single_decision(Scope::Tenant(tenant.id), move |conn, _| {
            let digest = digest.clone();
            Box::pin(async move {
                let Some(hit) = store::access(&mut *conn, tenant.id, &digest).await? else { return Ok(None) };
                let permissions = members::permissions(conn, tenant.id, hit.role).await?;
                Ok(Some((hit, permissions)))
            })
        })
        .await?;
    let Some((hit, permissions)) = found else { return Err(Error::Unauthorized) };
    let checked = Checked {
        tenant: TenantRef { id: tenant.id, slug: tenant.slug },
        status: tenant.status,
        hit,
        connector_access: permissions.has(Permission::ConnectorAccess),
    };
    state.mcp_tokens.put(key, checked.clone(), epoch);
    Ok((checked, epoch))
}

/// A grant as members and admins see it.
#[derive(Clone, Debug, serde::Serialize)]
pub struct GrantView {
    pub id: Uuid,
    pub client: ClientView,
    pub member_id: Uuid,
    pub resource: String,
    pub pool: Option<String>,
    pub scope: String,
    pub created_at: chrono::DateTime<chrono::Utc>,
    pub revoked_at: Option<chrono::DateTime<chrono::Utc>>,
    pub revoked_reason: Option<String>,
}

/// A client as admins see it.
#[derive(Clone, Debug, serde::Serialize)]
pub struct ClientView {
    pub id: Uuid,
    pub client_id: String,
    pub kind: String,
    pub name: String,
    pub redirect_uris: Vec<String>,
    pub created_at: chrono::DateTime<chrono::Utc>,
    pub revoked_at: Option<chrono::DateTime<chrono::Utc>>,
}

/// An OAuth error body (RFC 6749 §5.2): `error` is the stable code.
pub fn oauth_error(status: axum::http::StatusCode, code: &str, description: &str) -> Response {
    let body = serde_json::json!({ "error": code, "error_description": description });
    crate::extract::no_store((status, axum::Json(body)).into_response())
}

/// What other nouns may run inside their own transaction; the store itself is private.
pub mod tx {
    pub use super::store::{prune, prune_registrations};
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> Config {
        let mut c = Config::from_lookup(|_| None).unwrap();
        c.public_url = "https://gh.example".into();
        c.mcp_redirect_uris = vec!["https://agent.example/cb".into()];
        c
    }

    #[test]
    fn resources_are_exact_endpoint_urls() {
        let c = config();
        assert_eq!(parse_resource(&c, "acme", "https://gh.example/t/acme/w/main/mcp"), Some(("main".into(), None)));
        assert_eq!(
            parse_resource(&c, "acme", "https://gh.example/t/acme/w/main/mcp/reads"),
            Some(("main".into(), Some("reads".into())))
        );
        for bad in [
            "https://gh.example/t/other/w/main/mcp",
            "https://gh.example/t/acme/w/main/mcp/",
            "https://gh.example/t/acme/w/main/mcp?x=1",
            "https://gh.example/t/acme/w/main/api",
            "https://gh.example/t/acme/w/main/mcp/a/b",
            "https://evil.example/t/acme/w/main/mcp",
        ] {
            assert_eq!(parse_resource(&c, "acme", bad), None, "{bad}");
        }
    }

    #[test]
    fn redirects_are_loopback_or_allow_listed() {
        let c = config();
        for ok in ["http://127.0.0.1:33333/callback", "http://localhost/cb", "http://[::1]:9/x", "https://agent.example/cb"] {
            assert!(redirect_allowed(&c, ok), "{ok}");
        }
        for bad in [
            "https://agent.example/cb/other",
            "https://evil.example/cb",
            "http://127.0.0.1.evil.example/cb",
            "http://user@127.0.0.1/cb",
            "javascript:alert(1)",
            "http://10.0.0.1/cb",
        ] {
            assert!(!redirect_allowed(&c, bad), "{bad}");
        }
        let registered = vec!["http://127.0.0.1:1000/callback".to_owned()];
        assert!(redirect_registered(&registered, "http://127.0.0.1:2000/callback"));
        assert!(!redirect_registered(&registered, "http://127.0.0.1:2000/other"));
    }
}
