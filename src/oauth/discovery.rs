//! Where a connector's authorization server is: its configured endpoints, else its issuer's
//! metadata (RFC 8414, falling back to OpenID discovery), with the issuer of a `remote_mcp`
//! connector found through the server's protected resource metadata (RFC 9728): the URL a 401's
//! `WWW-Authenticate: Bearer resource_metadata="…"` names, else the well-known paths. The
//! metadata's `resource` must name the connector's URL (same origin, the same path or a parent
//! of it at a segment boundary); it is the RFC 8707 resource indicator every request carries.
//! A server that publishes no protected resource metadata at all is taken for an MCP 2025-03-26
//! server, whose authorization server is its own origin (see `legacy`).

use serde::Deserialize;
use url::Url;

use crate::{
    error::{Error, Result},
    workspaces::{Connector, config::OauthAuth},
};

/// Responses larger than this are refused (metadata documents are small).
const MAX_METADATA_BYTES: usize = 256 * 1024;

/// The endpoints a flow uses.
#[derive(Clone, Debug)]
pub struct Endpoints {
    pub authorization: String,
    pub token: String,
    pub revocation: Option<String>,
    pub userinfo: Option<String>,
    /// The issuer whose metadata gave these, exactly as the metadata names it; for a 2025-03-26
    /// server without metadata, its authorization base URL (its origin), which the default
    /// endpoints are relative to (None: all configured).
    pub issuer: Option<String>,
    /// The metadata's `authorization_response_iss_parameter_supported` (RFC 9207): every
    /// authorization response must then carry `iss`.
    pub iss_supported: bool,
    /// RFC 7591 dynamic client registration.
    pub registration: Option<String>,
    /// The server accepts a Client ID Metadata Document URL as a client id.
    pub cimd: bool,
    /// `token_endpoint_auth_methods_supported` (None: not advertised, RFC 8414's default
    /// `client_secret_basic` applies).
    pub token_auth_methods: Option<Vec<String>>,
    pub revocation_auth_methods: Option<Vec<String>>,
    /// The RFC 8707 resource indicator to send (the checked `resource` of the protected
    /// resource metadata, or the connector's configured one).
    pub resource: Option<String>,
    /// The scopes to ask for when the connector names none (MCP's scope selection strategy):
    /// the `scope` of the server's 401 challenge, else its protected resource metadata's
    /// `scopes_supported`; None: omit `scope`.
    pub scopes: Option<Vec<String>>,
    /// The server offers DPoP with ES256 (`dpop_signing_alg_values_supported`, RFC 9449 §5.1):
    /// a new grant gets its own proof key and DPoP-bound tokens.
    pub dpop: bool,
}

impl Endpoints {
    /// What a flow started against these endpoints must find in its callback's `iss`.
    pub fn iss_check(&self) -> super::issuer::IssCheck {
        super::issuer::IssCheck { issuer: self.issuer.clone(), required: self.iss_supported }
    }
}

#[derive(Deserialize)]
struct ResourceMetadata {
    resource: Option<String>,
    #[serde(default)]
    authorization_servers: Vec<String>,
    scopes_supported: Option<Vec<String>>,
}

#[derive(Deserialize)]
pub(super) struct ServerMetadata {
    issuer: String,
    authorization_endpoint: Option<String>,
    token_endpoint: Option<String>,
    revocation_endpoint: Option<String>,
    userinfo_endpoint: Option<String>,
    registration_endpoint: Option<String>,
    #[serde(default)]
    client_id_metadata_document_supported: bool,
    #[serde(default)]
    authorization_response_iss_parameter_supported: bool,
    token_endpoint_auth_methods_supported: Option<Vec<String>>,
    revocation_endpoint_auth_methods_supported: Option<Vec<String>>,
    dpop_signing_alg_values_supported: Option<Vec<String>>,
}

pub(super) fn unavailable(what: &str) -> Error {
    Error::Unavailable {
        code: "oauth_discovery_failed",
        message: format!("the connector's authorization server could not be discovered: {what}"),
        retry_after_ms: Some(5000),
    }
}

/// `origin/.well-known/<name><path>` (path without a trailing slash), as RFC 8414 and 9728 say.
fn well_known(base: &str, name: &str) -> Result<String> {
    let url = Url::parse(base).map_err(|_| unavailable("a URL does not parse"))?;
    let path = url.path().trim_end_matches('/');
    Ok(format!("{}/.well-known/{name}{path}", url.origin().ascii_serialization()))
}

/// What a metadata URL answered.
enum Fetched<T> {
    Found(T),
    /// The server says it serves nothing there: a redirect (never followed) or a client error
    /// other than 429.
    Absent,
    /// Nothing can be concluded: no answer, a server error or 429, or a body that is too large or
    /// not the document.
    Failed,
}

/// Whether a status says the document is not served at that URL (as opposed to a failure that
/// says nothing about it). Only such answers let discovery conclude a server publishes nothing.
fn says_absent(status: reqwest::StatusCode) -> bool {
    (status.is_redirection() || status.is_client_error()) && status != reqwest::StatusCode::TOO_MANY_REQUESTS
}

/// A metadata document (RFC 9728, RFC 8414), asked as an MCP client asks during discovery: with
/// the `MCP-Protocol-Version` it speaks (MCP authorization, "server metadata discovery").
async fn fetch<T: for<'de> Deserialize<'de>>(http: &reqwest::Client, url: &str) -> Fetched<T> {
    let request = http.get(url).header("accept", "application/json").header("mcp-protocol-version", "2025-11-25");
    let Ok(response) = request.send().await else { return Fetched::Failed };
    let status = response.status();
    if !status.is_success() {
        return if says_absent(status) { Fetched::Absent } else { Fetched::Failed };
    }
    match response.bytes().await {
        Ok(body) if body.len() <= MAX_METADATA_BYTES => serde_json::from_slice(&body).map_or(Fetched::Failed, Fetched::Found),
        _ => Fetched::Failed,
    }
}

/// The authorization server's metadata, checked to name the issuer asked for.
async fn server_metadata(http: &reqwest::Client, issuer: &str) -> Result<ServerMetadata> {
    server_metadata_if_any(http, issuer).await?.ok_or_else(|| unavailable("no authorization server metadata"))
}

/// The authorization server's metadata, checked to name the issuer asked for; None only when
/// every well-known location (RFC 8414, then OpenID discovery) says it serves none. A location
/// that fails says nothing, so it is an error when no other serves the metadata.
pub(super) async fn server_metadata_if_any(http: &reqwest::Client, issuer: &str) -> Result<Option<ServerMetadata>> {
    let issuer = issuer.trim_end_matches('/');
    let rfc8414 = well_known(issuer, "oauth-authorization-server")?;
    let openid = format!("{issuer}/.well-known/openid-configuration");
    let mut failed = false;
    for url in [rfc8414, openid] {
        match fetch::<ServerMetadata>(http, &url).await {
            Fetched::Found(m) if m.issuer.trim_end_matches('/') != issuer => {
                return Err(unavailable("the metadata names another issuer"));
            }
            Fetched::Found(m) => return Ok(Some(m)),
            Fetched::Absent => {}
            Fetched::Failed => failed = true,
        }
    }
    if failed { Err(unavailable("the authorization server metadata could not be fetched")) } else { Ok(None) }
}

/// The token endpoint of the identity provider `issuer` (its RFC 8414 metadata, else its OpenID
/// discovery document, which must name it as issuer).
pub(super) async fn token_endpoint_of(http: &reqwest::Client, issuer: &str) -> Result<String> {
    let unusable = || Error::Unavailable {
        code: "identity_provider_unavailable",
        message: format!("the identity provider `{issuer}` publishes no usable metadata naming its token endpoint"),
        retry_after_ms: Some(5000),
    };
    let metadata = server_metadata_if_any(http, issuer).await.map_err(|_| unusable())?.ok_or_else(unusable)?;
    metadata.token_endpoint.filter(|u| Url::parse(u).is_ok_and(|u| matches!(u.scheme(), "http" | "https"))).ok_or_else(unusable)
}

/// Whether a protected resource metadata document's `resource` names the connector's `url`
/// (RFC 9728 §3.3 asks for the resource the metadata was fetched for; a server's metadata may
/// name the origin or a parent path of its MCP endpoint): same scheme, host and port, and the
/// resource's path equal to the URL's or a parent of it at a segment boundary, with no query
/// or fragment.
pub fn resource_matches(resource: &str, url: &str) -> bool {
    let (Ok(r), Ok(u)) = (Url::parse(resource), Url::parse(url)) else { return false };
    if r.origin() != u.origin() || r.query().is_some() || r.fragment().is_some() || !r.origin().is_tuple() {
        return false;
    }
    let (rp, up) = (r.path().trim_end_matches('/'), u.path().trim_end_matches('/'));
    rp.is_empty() || up == rp || up.strip_prefix(rp).is_some_and(|rest| rest.starts_with('/'))
}

fn mismatch(resource: Option<&str>, url: &str) -> Error {
    Error::Conflict {
        code: "oauth_resource_mismatch",
        message: match resource {
            Some(r) => format!("the server's protected resource metadata names the resource `{r}`, not `{url}`"),
            None => format!("the server's protected resource metadata for `{url}` names no resource"),
        },
    }
}

/// What a 401 from the connector names: its metadata URL and the scopes it asks for.
#[derive(Default)]
struct Challenged {
    metadata: Option<String>,
    scopes: Option<Vec<String>>,
}

/// The challenge of a 401 response (None: another status).
fn challenge_in(response: &reqwest::Response) -> Option<Challenged> {
    if response.status() != reqwest::StatusCode::UNAUTHORIZED {
        return None;
    }
    let values: Vec<&str> = response.headers().get_all("www-authenticate").iter().filter_map(|v| v.to_str().ok()).collect();
    let metadata = super::challenge::resource_metadata(values.iter().copied())
        .and_then(|found| Url::parse(&found).ok())
        .filter(|u| matches!(u.scheme(), "http" | "https"))
        .map(|u| u.to_string());
    Some(Challenged { metadata, scopes: super::challenge::scopes(values.iter().copied()) })
}

/// What a 401 from the connector names (None: it answered none, or could not be asked):
/// unauthenticated requests, as an MCP client's first ones are (an `initialize` POST, then,
/// when a server lets `initialize` through without a token and guards only the operations,
/// `notifications/initialized` and a `tools/list` in that session; a GET of a legacy SSE
/// stream).
async fn challenge_of(http: &reqwest::Client, connector: &Connector) -> Option<Challenged> {
    let Connector::RemoteMcp { url, transport, .. } = connector else { return None };
    let timeout = std::time::Duration::from_secs(10);
    if matches!(transport, crate::workspaces::config::RemoteTransport::Sse) {
        let response = http.get(url).header("accept", "text/event-stream").timeout(timeout).send().await.ok()?;
        return challenge_in(&response);
    }
    // `headers`: the session's (its id and revision), or a stateless request's.
    let post = |body: serde_json::Value, headers: &[(&str, &str)]| {
        let mut request = http.post(url).header("accept", "application/json, text/event-stream").json(&body).timeout(timeout);
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        request.send()
    };
    let initialize = serde_json::json!({ "jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": { "name": "gatehouse", "version": env!("CARGO_PKG_VERSION") } } });
    let response = post(initialize, &[]).await.ok()?;
    if response.status() == reqwest::StatusCode::UNAUTHORIZED {
        return challenge_in(&response);
    }
    if !response.status().is_success() {
        // A server that refuses the handshake may speak only 2026-07-28, where a stateless
        // `server/discover` is the first request a client sends.
        drop(response);
        let discover = serde_json::json!({ "jsonrpc": "2.0", "id": 0, "method": "server/discover", "params": { "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {},
            "io.modelcontextprotocol/clientInfo": { "name": "gatehouse", "version": env!("CARGO_PKG_VERSION") } } } });
        let headers = [("mcp-protocol-version", "2026-07-28"), ("mcp-method", "server/discover")];
        return challenge_in(&post(discover, &headers).await.ok()?);
    }
    // `initialize` went through without a token: the server guards its operations instead,
    // so the first operation in this session says what it asks for.
    let session = response.headers().get("mcp-session-id").and_then(|v| v.to_str().ok()).map(str::to_owned);
    drop(response);
    let headers: Vec<(&str, &str)> = match &session {
        Some(session) => vec![("mcp-session-id", session), ("mcp-protocol-version", "2025-11-25")],
        None => Vec::new(),
    };
    let initialized = serde_json::json!({ "jsonrpc": "2.0", "method": "notifications/initialized" });
    let _ = post(initialized, &headers).await;
    let list = serde_json::json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {} });
    let found = challenge_in(&post(list, &headers).await.ok()?);
    if let Some(session) = &session {
        // The probe's session is of no further use.
        let _ = http.delete(url).header("mcp-session-id", session).timeout(timeout).send().await;
    }
    found
}

/// What a protected resource's metadata names.
struct Named {
    issuer: String,
    resource: String,
    scopes: Option<Vec<String>>,
}

/// What discovery learned of a protected resource's metadata (RFC 9728).
enum Protected {
    Named(Named),
    /// The server publishes none: it asks for authorization with a 401 that names no metadata
    /// URL, and every well-known location says it serves nothing there. An MCP 2025-03-26
    /// server; `scopes` are its 401's.
    Unpublished {
        scopes: Option<Vec<String>>,
    },
    /// Nothing can be concluded: the server answered no 401, or it may publish metadata that
    /// could not be read (a location failed, a document names no authorization server, or the
    /// 401 names a URL that serves nothing).
    Unknown,
}

/// The issuer and resource a protected resource names (RFC 9728): from the metadata URL its
/// 401 names, else the path-specific well-known document, else the origin's.
async fn resource_issuer(http: &reqwest::Client, connector: &Connector, resource: &str) -> Result<Protected> {
    let specific = well_known(resource, "oauth-protected-resource")?;
    let url = Url::parse(resource).map_err(|_| unavailable("the connector's URL does not parse"))?;
    let root = format!("{}/.well-known/oauth-protected-resource", url.origin().ascii_serialization());
    let challenge = challenge_of(http, connector).await;
    // A 401 naming a metadata URL says the server publishes metadata, whatever the URLs answer;
    // a server that asks for no authorization says nothing of how to get it.
    let mut unpublished = challenge.as_ref().is_some_and(|c| c.metadata.is_none());
    let challenged = challenge.unwrap_or_default();
    for candidate in challenged.metadata.into_iter().chain([specific, root]) {
        let m = match fetch::<ResourceMetadata>(http, &candidate).await {
            Fetched::Found(m) => m,
            Fetched::Absent => continue,
            Fetched::Failed => {
                unpublished = false;
                continue;
            }
        };
        let Some(issuer) = m.authorization_servers.first().cloned() else {
            unpublished = false;
            continue;
        };
        let scopes = challenged.scopes.or(m.scopes_supported.filter(|s| !s.is_empty()));
        return match m.resource {
            Some(r) if resource_matches(&r, resource) => Ok(Protected::Named(Named { issuer, resource: r, scopes })),
            other => Err(mismatch(other.as_deref(), resource)),
        };
    }
    Ok(if unpublished { Protected::Unpublished { scopes: challenged.scopes } } else { Protected::Unknown })
}

/// The endpoints for `connector`: configured ones win; the rest come from metadata.
pub async fn endpoints(http: &reqwest::Client, connector: &Connector, o: &OauthAuth) -> Result<Endpoints> {
    if o.issuer.is_none()
        && o.client_id.is_some()
        && let (Some(authorization), Some(token)) = (&o.authorization_endpoint, &o.token_endpoint)
        && !matches!(connector, Connector::RemoteMcp { .. })
    {
        return Ok(Endpoints {
            authorization: authorization.clone(),
            token: token.clone(),
            revocation: o.revocation_endpoint.clone(),
            userinfo: None,
            issuer: None,
            iss_supported: false,
            registration: None,
            cimd: false,
            token_auth_methods: None,
            revocation_auth_methods: None,
            resource: o.resource.clone(),
            scopes: None,
            dpop: false,
        });
    }
    let (issuer, resource, scopes) = match (&o.issuer, connector) {
        // A remote MCP server's resource is always discovered: its tokens are bound to it.
        (issuer, Connector::RemoteMcp { url, .. }) => match (issuer, resource_issuer(http, connector, url).await?) {
            (Some(issuer), Protected::Named(n)) => (issuer.clone(), Some(n.resource), n.scopes),
            (Some(issuer), Protected::Unpublished { .. } | Protected::Unknown) => (issuer.clone(), None, None),
            (None, Protected::Named(n)) => (n.issuer, Some(n.resource), n.scopes),
            // Only where the newer discovery finds that nothing is published: a failure to read
            // published metadata must not send a flow to endpoints guessed from the URL.
            (None, Protected::Unpublished { scopes }) => return super::legacy::endpoints(http, o, url, scopes).await,
            (None, Protected::Unknown) => {
                return Err(unavailable(
                    "the server publishes no protected resource metadata naming an authorization server, or it cannot be read",
                ));
            }
        },
        (Some(issuer), Connector::HttpApi(_)) => (issuer.clone(), o.resource.clone(), None),
        (None, Connector::HttpApi(_)) => return Err(unavailable("the connector names no authorization server")),
        // A peer takes no credentials (it calls another workspace as the same caller).
        (_, Connector::Peer { .. }) => return Err(unavailable("a peer connector has no authorization server")),
    };
    from_metadata(o, server_metadata(http, &issuer).await?, resource, scopes)
}

/// The endpoints an authorization server's metadata names, where the connector configures none.
pub(super) fn from_metadata(
    o: &OauthAuth,
    m: ServerMetadata,
    resource: Option<String>,
    scopes: Option<Vec<String>>,
) -> Result<Endpoints> {
    let authorization =
        o.authorization_endpoint.clone().or(m.authorization_endpoint).ok_or_else(|| unavailable("no authorization endpoint"))?;
    let token = o.token_endpoint.clone().or(m.token_endpoint).ok_or_else(|| unavailable("no token endpoint"))?;
    Ok(Endpoints {
        authorization,
        token,
        revocation: o.revocation_endpoint.clone().or(m.revocation_endpoint),
        userinfo: m.userinfo_endpoint,
        issuer: Some(m.issuer),
        iss_supported: m.authorization_response_iss_parameter_supported,
        registration: m.registration_endpoint,
        cimd: m.client_id_metadata_document_supported,
        token_auth_methods: m.token_endpoint_auth_methods_supported,
        revocation_auth_methods: m.revocation_endpoint_auth_methods_supported,
        resource,
        scopes,
        dpop: o.dpop != Some(false) && super::dpop::offered(m.dpop_signing_alg_values_supported.as_deref()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dpop_is_used_where_the_server_offers_es256_unless_the_connector_opts_out() {
        let metadata = |algs: serde_json::Value| -> ServerMetadata {
            serde_json::from_value(
                serde_json::json!({ "issuer": "https://as.example", "authorization_endpoint": "https://as.example/a",
                "token_endpoint": "https://as.example/t", "dpop_signing_alg_values_supported": algs }),
            )
            .unwrap()
        };
        let oauth = |dpop: Option<bool>| -> OauthAuth {
            let mut o: OauthAuth = serde_json::from_value(serde_json::json!({ "grant": "shared" })).unwrap();
            o.dpop = dpop;
            o
        };
        let used = |o: &OauthAuth, algs| from_metadata(o, metadata(algs), None, None).unwrap().dpop;
        assert!(used(&oauth(None), serde_json::json!(["ES256", "EdDSA"])));
        assert!(used(&oauth(Some(true)), serde_json::json!(["ES256"])));
        assert!(!used(&oauth(Some(false)), serde_json::json!(["ES256"])), "opted out");
        assert!(!used(&oauth(None), serde_json::json!(["RS256"])), "no algorithm Gatehouse signs");
        assert!(!used(&oauth(None), serde_json::Value::Null), "not offered");
    }

    #[test]
    fn well_known_urls_insert_the_suffix_before_the_path() {
        assert_eq!(
            well_known("https://as.example/tenant1", "oauth-authorization-server").unwrap(),
            "https://as.example/.well-known/oauth-authorization-server/tenant1"
        );
        assert_eq!(
            well_known("https://mcp.example/mcp/", "oauth-protected-resource").unwrap(),
            "https://mcp.example/.well-known/oauth-protected-resource/mcp"
        );
        assert_eq!(well_known("http://127.0.0.1:9", "x").unwrap(), "http://127.0.0.1:9/.well-known/x");
    }

    #[test]
    fn only_a_redirect_or_a_client_error_says_a_document_is_absent() {
        use reqwest::StatusCode as S;
        for absent in
            [S::NOT_FOUND, S::GONE, S::UNAUTHORIZED, S::FORBIDDEN, S::METHOD_NOT_ALLOWED, S::FOUND, S::MOVED_PERMANENTLY]
        {
            assert!(says_absent(absent), "{absent}");
        }
        for failed in [S::TOO_MANY_REQUESTS, S::INTERNAL_SERVER_ERROR, S::BAD_GATEWAY, S::SERVICE_UNAVAILABLE, S::CONTINUE] {
            assert!(!says_absent(failed), "{failed}");
        }
    }

    #[test]
    fn a_resource_names_the_connector_url_or_a_parent_of_it() {
        let url = "https://mcp.example/tenant/mcp";
        for ok in [
            "https://mcp.example/tenant/mcp",
            "https://mcp.example/tenant/mcp/",
            "https://mcp.example/tenant",
            "https://MCP.example",
            "https://mcp.example:443/",
        ] {
            assert!(resource_matches(ok, url), "{ok}");
        }
        for bad in [
            "https://mcp.example/tenant/mc",
            "https://mcp.example/other",
            "https://mcp.example/tenant/mcp/deeper",
            "http://mcp.example/tenant/mcp",
            "https://mcp.example:8443/tenant/mcp",
            "https://evil.example/tenant/mcp",
            "https://mcp.example/tenant/mcp?x=1",
            "https://mcp.example/tenant/mcp#f",
            "not a url",
        ] {
            assert!(!resource_matches(bad, url), "{bad}");
        }
    }
}
