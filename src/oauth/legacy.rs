//! MCP 2025-03-26 authorization, for a server that predates protected resource metadata
//! (RFC 9728). Its authorization server is at its *authorization base URL*, the server's URL
//! with the path discarded (its origin): the RFC 8414 metadata there names the endpoints, and a
//! server without that metadata has the default endpoints `/authorize`, `/token` and `/register`
//! there. Discovery comes here only when the server publishes no protected resource metadata:
//! it asks for authorization with a 401 that names none, and the well-known locations serve
//! none. The metadata found is held to the same checks as any (it must name the base URL as
//! its issuer, whose RFC 9207 `iss` promise is then kept).

use url::Url;

use super::discovery::{self, Endpoints, unavailable};
use crate::{error::Result, workspaces::config::OauthAuth};

/// A 2025-03-26 server's authorization base URL: the origin of its URL (scheme, host, and a
/// port other than the scheme's default), without a trailing slash. None for a URL with no
/// such origin.
pub(super) fn authorization_base(server_url: &str) -> Option<String> {
    let url = Url::parse(server_url).ok()?;
    if !matches!(url.scheme(), "http" | "https") || !url.origin().is_tuple() {
        return None;
    }
    Some(url.origin().ascii_serialization())
}

/// The default endpoints of a 2025-03-26 server without authorization server metadata:
/// (authorization, token, registration), relative to its authorization base URL.
fn default_endpoints(base: &str) -> (String, String, String) {
    (format!("{base}/authorize"), format!("{base}/token"), format!("{base}/register"))
}

/// The endpoints of a 2025-03-26 server at `url`: from the metadata at its authorization base
/// URL, else the defaults there. `scopes` are the server's 401 challenge's. No RFC 8707
/// `resource` is sent: there is no metadata naming the resource to check it against, as with a
/// configured issuer whose server publishes none.
pub(super) async fn endpoints(
    http: &reqwest::Client,
    o: &OauthAuth,
    url: &str,
    scopes: Option<Vec<String>>,
) -> Result<Endpoints> {
    let base = authorization_base(url).ok_or_else(|| unavailable("the connector's URL names no origin"))?;
    // Metadata that names another issuer, or that cannot be fetched, is an error here as
    // anywhere; only metadata that is not served at all leads to the defaults.
    if let Some(m) = discovery::server_metadata_if_any(http, &base).await? {
        return discovery::from_metadata(o, m, None, scopes);
    }
    let (authorization, token, registration) = default_endpoints(&base);
    Ok(Endpoints {
        authorization: o.authorization_endpoint.clone().unwrap_or(authorization),
        token: o.token_endpoint.clone().unwrap_or(token),
        revocation: o.revocation_endpoint.clone(),
        userinfo: None,
        // The base URL is the authorization server here: registrations are kept under it, and
        // an authorization response that names an issuer must name it exactly.
        issuer: Some(base),
        iss_supported: false,
        registration: Some(registration),
        cimd: false,
        token_auth_methods: None,
        revocation_auth_methods: None,
        resource: None,
        scopes,
        dpop: false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_authorization_base_url_is_the_servers_origin() {
        for (url, base) in [
            ("https://api.example.com/v1/mcp", "https://api.example.com"),
            ("https://api.example.com/v1/sse?x=1#f", "https://api.example.com"),
            ("https://api.example.com", "https://api.example.com"),
            ("https://api.example.com/", "https://api.example.com"),
            ("http://localhost:3000/mcp", "http://localhost:3000"),
            ("https://API.Example.com:443/mcp", "https://api.example.com"),
            ("http://127.0.0.1:80/mcp", "http://127.0.0.1"),
            ("https://[::1]:8443/mcp/", "https://[::1]:8443"),
            ("https://user:pw@api.example.com/mcp", "https://api.example.com"),
        ] {
            assert_eq!(authorization_base(url).as_deref(), Some(base), "{url}");
        }
        for bad in ["not a url", "/mcp", "file:///tmp/mcp", "data:text/plain,mcp", "ftp://files.example.com/mcp"] {
            assert_eq!(authorization_base(bad), None, "{bad}");
        }
    }

    #[test]
    fn the_default_endpoints_are_at_the_base_url() {
        let base = authorization_base("https://api.example.com/v1/mcp").unwrap();
        assert_eq!(
            default_endpoints(&base),
            (
                "https://api.example.com/authorize".to_owned(),
                "https://api.example.com/token".to_owned(),
                "https://api.example.com/register".to_owned()
            )
        );
    }

    /// What the fake 2025-03-26 server answers at its well-known locations.
    #[derive(Clone, Copy)]
    enum Answer {
        NotFound,
        ServerError,
        /// Authorization server metadata naming this issuer (None: the server's base URL).
        Metadata(Option<&'static str>),
    }

    /// How the fake server answers the MCP requests of a client without a token.
    #[derive(Clone, Copy)]
    enum Mcp {
        /// 401, naming no metadata.
        Refuses,
        /// 401, naming this path as its protected resource metadata.
        RefusesNaming(&'static str),
        /// 200: it asks for no authorization.
        Answers,
    }

    /// A server at `/v1/mcp` answering MCP requests as `mcp`, its protected resource metadata
    /// answering `prm` and its RFC 8414 metadata `asm`; OpenID discovery is never served.
    /// Answers the connector's URL.
    async fn server(prm: Answer, asm: Answer, mcp: Mcp) -> String {
        use axum::{
            http::{StatusCode, header},
            response::{IntoResponse, Response},
            routing::{get, post},
        };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let answer = move |a: Answer, base: String| -> Response {
            match a {
                Answer::NotFound => StatusCode::NOT_FOUND.into_response(),
                Answer::ServerError => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
                Answer::Metadata(issuer) => axum::Json(serde_json::json!({
                    "issuer": issuer.map_or(base.clone(), str::to_owned),
                    "authorization_endpoint": format!("{base}/oauth/authorize"),
                    "token_endpoint": format!("{base}/oauth/token"),
                    "registration_endpoint": format!("{base}/oauth/register"),
                    "authorization_response_iss_parameter_supported": true,
                }))
                .into_response(),
            }
        };
        let (b1, b2, b3) = (base.clone(), base.clone(), base.clone());
        let challenge = match mcp {
            Mcp::RefusesNaming(path) => format!(r#"Bearer resource_metadata="{base}{path}""#),
            Mcp::Refuses | Mcp::Answers => r#"Bearer error="invalid_token""#.to_owned(),
        };
        let on_mcp = move || async move {
            match mcp {
                Mcp::Answers => axum::Json(serde_json::json!({ "jsonrpc": "2.0", "id": 0, "result": {} })).into_response(),
                Mcp::Refuses | Mcp::RefusesNaming(_) => {
                    (StatusCode::UNAUTHORIZED, [(header::WWW_AUTHENTICATE, challenge)]).into_response()
                }
            }
        };
        let app = axum::Router::new()
            .route("/v1/mcp", post(on_mcp))
            .route("/.well-known/oauth-protected-resource/v1/mcp", get(move || async move { answer(prm, b1) }))
            .route("/.well-known/oauth-protected-resource", get(move || async move { answer(prm, b2) }))
            .route("/.well-known/oauth-authorization-server", get(move || async move { answer(asm, b3) }));
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        format!("{base}/v1/mcp")
    }

    async fn discover(url: &str) -> Result<Endpoints> {
        crate::install_crypto();
        let o: OauthAuth = serde_json::from_value(serde_json::json!({ "grant": "shared" })).unwrap();
        let connector = crate::workspaces::Connector::RemoteMcp {
            url: url.to_owned(),
            transport: Default::default(),
            headers: Default::default(),
            auth: crate::workspaces::config::Auth::Oauth(o.clone()),
            timeout_ms: None,
        };
        discovery::endpoints(&reqwest::Client::new(), &connector, &o).await
    }

    #[tokio::test]
    async fn a_server_without_resource_metadata_has_its_authorization_server_at_its_origin() {
        let url = server(Answer::NotFound, Answer::Metadata(None), Mcp::Refuses).await;
        let base = authorization_base(&url).unwrap();
        let e = discover(&url).await.unwrap();
        assert_eq!(e.authorization, format!("{base}/oauth/authorize"));
        assert_eq!(e.token, format!("{base}/oauth/token"));
        assert_eq!(e.registration.as_deref(), Some(format!("{base}/oauth/register").as_str()));
        assert_eq!(e.issuer.as_deref(), Some(base.as_str()));
        assert!(e.iss_supported, "the metadata's iss promise is kept");
        assert_eq!(e.resource, None);
    }

    #[tokio::test]
    async fn a_server_without_any_metadata_has_the_default_endpoints_at_its_origin() {
        let url = server(Answer::NotFound, Answer::NotFound, Mcp::Refuses).await;
        let base = authorization_base(&url).unwrap();
        let e = discover(&url).await.unwrap();
        assert_eq!(e.authorization, format!("{base}/authorize"));
        assert_eq!(e.token, format!("{base}/token"));
        assert_eq!(e.registration.as_deref(), Some(format!("{base}/register").as_str()));
        assert_eq!(e.issuer.as_deref(), Some(base.as_str()));
        assert!(!e.iss_supported);
        assert_eq!(e.iss_check().check(Some(&format!("{base}/"))), Err("the authorization response names another issuer"));
        assert_eq!(e.iss_check().check(None), Ok(()));
    }

    #[tokio::test]
    async fn nothing_is_guessed_where_metadata_may_exist_or_names_another_issuer() {
        for (prm, asm, mcp) in [
            // The authorization server metadata fails: it may exist.
            (Answer::NotFound, Answer::ServerError, Mcp::Refuses),
            // It names another issuer (RFC 8414 §3.3).
            (Answer::NotFound, Answer::Metadata(Some("https://attacker.example")), Mcp::Refuses),
            // The protected resource metadata fails: it may exist.
            (Answer::ServerError, Answer::Metadata(None), Mcp::Refuses),
            // The 401 names protected resource metadata, which is not served.
            (Answer::NotFound, Answer::Metadata(None), Mcp::RefusesNaming("/elsewhere/prm")),
            // The server asks for no authorization, so nothing says where to get it.
            (Answer::NotFound, Answer::NotFound, Mcp::Answers),
        ] {
            let url = server(prm, asm, mcp).await;
            let e = discover(&url).await;
            assert!(
                matches!(&e, Err(crate::error::Error::Unavailable { code: "oauth_discovery_failed", .. })),
                "{:?}",
                e.map(|e| e.authorization)
            );
        }
    }
}
