//! Where a connector's authorization server is: its configured endpoints, else its issuer's
//! metadata (RFC 8414, falling back to OpenID discovery), with the issuer of a `remote_mcp`
//! connector found through the server's protected resource metadata (RFC 9728).

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
    /// The issuer whose metadata gave these (None: all configured).
    pub issuer: Option<String>,
    /// RFC 7591 dynamic client registration.
    pub registration: Option<String>,
}

#[derive(Deserialize)]
struct ResourceMetadata {
    #[serde(default)]
    authorization_servers: Vec<String>,
}

#[derive(Deserialize)]
struct ServerMetadata {
    issuer: String,
    authorization_endpoint: Option<String>,
    token_endpoint: Option<String>,
    revocation_endpoint: Option<String>,
    userinfo_endpoint: Option<String>,
    registration_endpoint: Option<String>,
}

fn unavailable(what: &str) -> Error {
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

async fn fetch<T: for<'de> Deserialize<'de>>(http: &reqwest::Client, url: &str) -> Option<T> {
    let response = http.get(url).header("accept", "application/json").send().await.ok()?;
    if !response.status().is_success() {
        return None;
    }
    let body = response.bytes().await.ok()?;
    if body.len() > MAX_METADATA_BYTES {
        return None;
    }
    serde_json::from_slice(&body).ok()
}

/// The authorization server's metadata, checked to name the issuer asked for.
async fn server_metadata(http: &reqwest::Client, issuer: &str) -> Result<ServerMetadata> {
    let issuer = issuer.trim_end_matches('/');
    let rfc8414 = well_known(issuer, "oauth-authorization-server")?;
    let openid = format!("{issuer}/.well-known/openid-configuration");
    for url in [rfc8414, openid] {
        if let Some(m) = fetch::<ServerMetadata>(http, &url).await {
            if m.issuer.trim_end_matches('/') != issuer {
                return Err(unavailable("the metadata names another issuer"));
            }
            return Ok(m);
        }
    }
    Err(unavailable("no authorization server metadata"))
}

/// The issuer a protected resource names (RFC 9728), trying the path-specific document first.
async fn resource_issuer(http: &reqwest::Client, resource: &str) -> Result<String> {
    let specific = well_known(resource, "oauth-protected-resource")?;
    let url = Url::parse(resource).map_err(|_| unavailable("the connector's URL does not parse"))?;
    let root = format!("{}/.well-known/oauth-protected-resource", url.origin().ascii_serialization());
    for candidate in [specific, root] {
        if let Some(m) = fetch::<ResourceMetadata>(http, &candidate).await
            && let Some(issuer) = m.authorization_servers.into_iter().next()
        {
            return Ok(issuer);
        }
    }
    Err(unavailable("the server publishes no protected resource metadata naming an authorization server"))
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
            registration: None,
        });
    }
    let issuer = match (&o.issuer, connector) {
        (Some(issuer), _) => issuer.clone(),
        (None, Connector::RemoteMcp { url, .. }) => resource_issuer(http, url).await?,
        (None, Connector::HttpApi(_)) => return Err(unavailable("the connector names no authorization server")),
    };
    let m = server_metadata(http, &issuer).await?;
    let authorization =
        o.authorization_endpoint.clone().or(m.authorization_endpoint).ok_or_else(|| unavailable("no authorization endpoint"))?;
    let token = o.token_endpoint.clone().or(m.token_endpoint).ok_or_else(|| unavailable("no token endpoint"))?;
    Ok(Endpoints {
        authorization,
        token,
        revocation: o.revocation_endpoint.clone().or(m.revocation_endpoint),
        userinfo: m.userinfo_endpoint,
        issuer: Some(m.issuer),
        registration: m.registration_endpoint,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
