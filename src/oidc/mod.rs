//! The OpenID Connect relying party: discovery, authorization code flow with PKCE (S256),
//! state and nonce, and ID token validation (signature against the provider's JWKS, `iss`,
//! `aud`, `exp`, `iat` not in the future, nonce). The same code signs people in through an
//! external provider and through the built-in development provider.

pub mod http;
mod store;

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use openidconnect::{
    AuthorizationCode, ClaimsVerificationError, ClientId, ClientSecret, CsrfToken, EndpointMaybeSet, EndpointNotSet, EndpointSet,
    IssuerUrl, Nonce, PkceCodeChallenge, PkceCodeVerifier, RedirectUrl, Scope, TokenResponse,
    core::{CoreAuthenticationFlow, CoreClient, CoreIdTokenClaims},
};
use tokio::sync::RwLock;

use crate::{
    error::{Error, Result},
    members::Principal,
};

/// Provider metadata is re-read after this long.
const METADATA_TTL: Duration = Duration::from_secs(300);
/// A signature failure forces a fresh JWKS at most this often (key rotation).
const FORCED_REFRESH_MIN: Duration = Duration::from_secs(10);
/// An ID token may claim to be issued at most this far in the future (clock skew).
const IAT_SKEW_SECS: i64 = 60;

type Metadata = openidconnect::ProviderMetadataWithLogout;
type Client = CoreClient<EndpointSet, EndpointNotSet, EndpointNotSet, EndpointNotSet, EndpointMaybeSet, EndpointMaybeSet>;

/// Where to sign people in.
#[derive(Clone, Debug)]
pub struct ProviderConfig {
    pub issuer: String,
    pub client_id: String,
    pub client_secret: Option<String>,
    /// `{public_url}/auth/callback`
    pub redirect_uri: String,
}

/// What a successful sign-in proves.
#[derive(Clone, Debug)]
pub struct Identity {
    pub principal: Principal,
    pub email: Option<String>,
    pub email_verified: bool,
    pub name: Option<String>,
}

/// A sign-in flow's secrets, kept server-side until the callback.
pub struct Started {
    pub authorize_url: String,
    pub state: String,
    pub nonce: String,
    pub pkce_verifier: String,
}

#[derive(Debug)]
pub struct RelyingParty {
    config: ProviderConfig,
    http: Http,
    cache: RwLock<Option<(Instant, Arc<Metadata>)>>,
    last_forced: RwLock<Option<Instant>>,
}

impl RelyingParty {
    pub fn new(config: ProviderConfig, http: reqwest::Client) -> Self {
        RelyingParty { config, http: Http(http), cache: RwLock::new(None), last_forced: RwLock::new(None) }
    }

    pub fn issuer(&self) -> &str {
        &self.config.issuer
    }

    async fn metadata(&self, force: bool) -> Result<Arc<Metadata>> {
        if !force
            && let Some((at, m)) = self.cache.read().await.as_ref()
            && at.elapsed() < METADATA_TTL
        {
            return Ok(m.clone());
        }
        let issuer = IssuerUrl::new(self.config.issuer.clone()).map_err(|e| anyhow::anyhow!("bad issuer URL: {e}"))?;
        let metadata = Metadata::discover_async(issuer, &self.http).await.map_err(|e| {
            tracing::warn!(error = %e, "OpenID provider discovery failed");
            Error::Unavailable {
                code: "provider_unavailable",
                message: "the sign-in provider cannot be reached".into(),
                retry_after_ms: Some(5000),
            }
        })?;
        let metadata = Arc::new(metadata);
        *self.cache.write().await = Some((Instant::now(), metadata.clone()));
        Ok(metadata)
    }

    fn client(&self, metadata: &Metadata) -> Result<Client> {
        let redirect =
            RedirectUrl::new(self.config.redirect_uri.clone()).map_err(|e| anyhow::anyhow!("bad redirect URI: {e}"))?;
        Ok(CoreClient::from_provider_metadata(
            metadata.clone(),
            ClientId::new(self.config.client_id.clone()),
            self.config.client_secret.clone().map(ClientSecret::new),
        )
        .set_redirect_uri(redirect))
    }

    /// The provider's RP-initiated logout endpoint, when it advertises one.
    pub async fn end_session_endpoint(&self) -> Option<String> {
        let m = self.metadata(false).await.ok()?;
        m.additional_metadata().end_session_endpoint.as_ref().map(|u| u.url().to_string())
    }

    pub fn client_id(&self) -> &str {
        &self.config.client_id
    }

    /// Starts a flow: the URL to send the browser to and the secrets to keep.
    pub async fn start(&self) -> Result<Started> {
        let metadata = self.metadata(false).await?;
        let client = self.client(&metadata)?;
        let (challenge, verifier) = PkceCodeChallenge::new_random_sha256();
        let (url, state, nonce) = client
            .authorize_url(CoreAuthenticationFlow::AuthorizationCode, CsrfToken::new_random, Nonce::new_random)
            .add_scope(Scope::new("email".into()))
            .add_scope(Scope::new("profile".into()))
            .set_pkce_challenge(challenge)
            .url();
        Ok(Started {
            authorize_url: url.to_string(),
            state: state.secret().clone(),
            nonce: nonce.secret().clone(),
            pkce_verifier: verifier.secret().clone(),
        })
    }

    /// Exchanges the code and validates the ID token. A signature failure refreshes the
    /// provider's keys once (they may have rotated) before giving up.
    pub async fn finish(&self, code: &str, pkce_verifier: &str, nonce: &str) -> Result<Identity> {
        let metadata = self.metadata(false).await?;
        let client = self.client(&metadata)?;
        let response = client
            .exchange_code(AuthorizationCode::new(code.to_owned()))
            .map_err(|e| anyhow::anyhow!("provider has no token endpoint: {e}"))?
            .set_pkce_verifier(PkceCodeVerifier::new(pkce_verifier.to_owned()))
            .request_async(&self.http)
            .await
            .map_err(|e| {
                tracing::warn!(error = %e, "code exchange failed");
                Error::Forbidden {
                    code: "token_exchange_failed",
                    message: "the sign-in provider refused the authorization code".into(),
                }
            })?;
        let id_token = response
            .id_token()
            .ok_or(Error::Forbidden { code: "invalid_id_token", message: "the provider returned no ID token".into() })?;
        let nonce = Nonce::new(nonce.to_owned());
        let verify = |client: &Client| -> std::result::Result<CoreIdTokenClaims, ClaimsVerificationError> {
            let verifier = client.id_token_verifier().set_issue_time_verifier_fn(|issued_at| {
                let now = chrono::Utc::now();
                if issued_at > now + chrono::Duration::seconds(IAT_SKEW_SECS) {
                    Err("ID token issued in the future".to_owned())
                } else {
                    Ok(())
                }
            });
            id_token.claims(&verifier, &nonce).cloned()
        };
        let claims = match verify(&client) {
            Ok(claims) => claims,
            // The provider may have rotated its keys since we cached them.
            Err(ClaimsVerificationError::SignatureVerification(_)) if self.may_force_refresh().await => {
                let fresh = self.metadata(true).await?;
                verify(&self.client(&fresh)?).map_err(|e| invalid_id_token(&e.to_string()))?
            }
            Err(e) => return Err(invalid_id_token(&e.to_string())),
        };
        Ok(Identity {
            principal: Principal { issuer: claims.issuer().to_string(), subject: claims.subject().to_string() },
            email: claims.email().map(|e| e.to_string()),
            email_verified: claims.email_verified().unwrap_or(false),
            name: claims.name().and_then(|n| n.get(None)).map(|n| n.to_string()),
        })
    }

    async fn may_force_refresh(&self) -> bool {
        let mut last = self.last_forced.write().await;
        if last.is_some_and(|at| at.elapsed() < FORCED_REFRESH_MIN) {
            return false;
        }
        *last = Some(Instant::now());
        true
    }
}

fn invalid_id_token(reason: &str) -> Error {
    tracing::warn!(reason, "ID token refused");
    Error::Forbidden { code: "invalid_id_token", message: format!("the ID token was refused: {reason}") }
}

/// The HTTP client adapter the openidconnect crate calls: our one reqwest, no redirects.
#[derive(Debug, Clone)]
pub struct Http(pub reqwest::Client);

impl<'c> openidconnect::AsyncHttpClient<'c> for Http {
    type Error = reqwest::Error;
    type Future = futures::future::BoxFuture<'c, std::result::Result<openidconnect::HttpResponse, reqwest::Error>>;

    fn call(&'c self, request: openidconnect::HttpRequest) -> Self::Future {
        Box::pin(send(&self.0, request))
    }
}

async fn send(
    client: &reqwest::Client,
    request: openidconnect::HttpRequest,
) -> std::result::Result<openidconnect::HttpResponse, reqwest::Error> {
    let request = reqwest::Request::try_from(request.map(reqwest::Body::from))?;
    let response = client.execute(request).await?;
    let mut out = openidconnect::HttpResponse::new(Vec::new());
    *out.status_mut() = response.status();
    *out.headers_mut() = response.headers().clone();
    *out.body_mut() = response.bytes().await?.to_vec();
    Ok(out)
}

/// The outbound client for downstream MCP servers: the same reqwest, but without a whole-
/// request timeout (that would cut long streamed answers; each call has its own deadline).
pub fn http_client_for_streams() -> Result<reqwest::Client> {
    crate::install_crypto();
    Ok(reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .connect_timeout(Duration::from_secs(5))
        .build()
        .map_err(anyhow::Error::from)?)
}

/// The one outbound HTTP client: rustls, no redirects followed, bounded time.
pub fn http_client() -> Result<reqwest::Client> {
    crate::install_crypto();
    Ok(reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(10))
        .connect_timeout(Duration::from_secs(5))
        .build()
        .map_err(anyhow::Error::from)?)
}
