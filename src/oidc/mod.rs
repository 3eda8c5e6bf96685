//! The OpenID Connect relying party: discovery, authorization code flow with PKCE (S256),
//! state and nonce, and ID token validation (signature against the provider's JWKS, `iss`,
//! `aud`, `exp`, `iat` not in the future, nonce). The same code signs people in through an
//! external provider and through the built-in development provider.

pub mod http;
mod store;
pub mod tenant;

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
    pub auth: ClientAuth,
    /// `{public_url}/auth/callback`
    pub redirect_uri: String,
}

/// How Gatehouse authenticates at the provider's token endpoint.
#[derive(Clone)]
pub enum ClientAuth {
    /// A public client: only its id.
    None,
    /// `client_secret_basic`.
    Basic(String),
    /// `client_secret_post`.
    Post(String),
    /// `private_key_jwt`: each token request carries the assertion the caller signs (the
    /// provider's `finish` takes it as extra form parameters).
    PrivateKeyJwt,
}

impl std::fmt::Debug for ClientAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ClientAuth::None => "none",
            ClientAuth::Basic(_) => "client_secret_basic",
            ClientAuth::Post(_) => "client_secret_post",
            ClientAuth::PrivateKeyJwt => "private_key_jwt",
        })
    }
}

/// What a successful sign-in proves.
#[derive(Clone, Debug)]
pub struct Identity {
    pub principal: Principal,
    pub email: Option<String>,
    pub email_verified: bool,
    pub name: Option<String>,
    /// Every claim of the (verified) ID token, for claims the core set does not name, such as
    /// a tenant connection's groups claim.
    pub claims: serde_json::Map<String, serde_json::Value>,
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

    /// How this party authenticates at the token endpoint.
    pub fn auth(&self) -> &ClientAuth {
        &self.config.auth
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
        let (secret, in_body) = match &self.config.auth {
            ClientAuth::None => (None, false),
            ClientAuth::Basic(s) => (Some(s.clone()), false),
            ClientAuth::Post(s) => (Some(s.clone()), true),
            ClientAuth::PrivateKeyJwt => (None, true),
        };
        let client = CoreClient::from_provider_metadata(
            metadata.clone(),
            ClientId::new(self.config.client_id.clone()),
            secret.map(ClientSecret::new),
        )
        .set_redirect_uri(redirect);
        Ok(if in_body { client.set_auth_type(openidconnect::AuthType::RequestBody) } else { client })
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
        self.finish_with(code, pkce_verifier, nonce, Vec::new()).await
    }

    /// [`RelyingParty::finish`], with `extra` form parameters on the token request (a
    /// `private_key_jwt` client's assertion).
    pub async fn finish_with(
        &self,
        code: &str,
        pkce_verifier: &str,
        nonce: &str,
        extra: Vec<(&'static str, String)>,
    ) -> Result<Identity> {
        let metadata = self.metadata(false).await?;
        let client = self.client(&metadata)?;
        let mut request = client
            .exchange_code(AuthorizationCode::new(code.to_owned()))
            .map_err(|e| anyhow::anyhow!("provider has no token endpoint: {e}"))?
            .set_pkce_verifier(PkceCodeVerifier::new(pkce_verifier.to_owned()));
        for (name, value) in extra {
            request = request.add_extra_param(name, value);
        }
        let response = request.request_async(&self.http).await.map_err(|e| {
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
            claims: payload(&id_token.to_string()),
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

/// The claims of a compact JWT whose signature was already verified (empty when unreadable).
fn payload(jwt: &str) -> serde_json::Map<String, serde_json::Value> {
    use base64::Engine;
    jwt.split('.')
        .nth(1)
        .and_then(|p| base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(p.trim_end_matches('=')).ok())
        .and_then(|bytes| serde_json::from_slice(&bytes).ok())
        .unwrap_or_default()
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
