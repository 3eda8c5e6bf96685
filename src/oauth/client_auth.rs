//! How Gatehouse is a connector's OAuth client: which registration it uses (static, a Client ID
//! Metadata Document, or RFC 7591 dynamic registration) and how it authenticates at the token
//! and revocation endpoints (a public client sends only its id; a static confidential client
//! sends its secret, or a JWT signed with its private key, either sealed in the vault as the
//! connector's `oauth_client` credential).

use super::*;
use crate::vault::slots::{self, Slot};

/// Client authentication at an endpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    /// A public client: `client_id` in the body, no secret (PKCE protects the code).
    None,
    ClientSecretBasic,
    ClientSecretPost,
    /// A JWT signed with the client's private key (RFC 7523 §2.2), the client id in the body.
    PrivateKeyJwt,
}

impl Method {
    pub fn as_str(self) -> &'static str {
        match self {
            Method::None => "none",
            Method::ClientSecretBasic => "client_secret_basic",
            Method::ClientSecretPost => "client_secret_post",
            Method::PrivateKeyJwt => "private_key_jwt",
        }
    }

    pub fn parse(text: &str) -> Option<Method> {
        [Method::None, Method::ClientSecretBasic, Method::ClientSecretPost, Method::PrivateKeyJwt]
            .into_iter()
            .find(|m| m.as_str() == text)
    }
}

/// The method for a confidential client holding `key` at an endpoint that advertises
/// `methods` (None: not advertised). A secret goes as `client_secret_basic` (RFC 8414's default,
/// and preferred, as RFC 6749 §2.3.1 asks), else `client_secret_post`; a private key signs a
/// `private_key_jwt` assertion.
pub fn confidential_method(methods: Option<&[String]>, key: KeyKind) -> Result<Method> {
    let offered: &[Method] = match key {
        KeyKind::Secret => &[Method::ClientSecretBasic, Method::ClientSecretPost],
        KeyKind::PrivateKey => &[Method::PrivateKeyJwt],
    };
    let Some(methods) = methods else { return Ok(offered[0]) };
    offered.iter().copied().find(|m| methods.iter().any(|a| a == m.as_str())).ok_or_else(|| Error::Conflict {
        code: "oauth_client_auth_unsupported",
        message: match key {
            KeyKind::Secret => {
                "the authorization server advertises neither client_secret_basic nor client_secret_post for a confidential client"
            }
            KeyKind::PrivateKey => {
                "the authorization server does not advertise private_key_jwt for a client that holds a private key"
            }
        }
        .into(),
    })
}

/// What a static confidential client authenticates with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyKind {
    /// Its `client_secret`.
    Secret,
    /// Its `private_key` (PKCS#8 PEM), which signs `private_key_jwt` assertions.
    PrivateKey,
}

/// How Gatehouse gets a client id at this authorization server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Registration {
    /// The connector names its client id.
    Static,
    /// Gatehouse's Client ID Metadata Document URL is the client id.
    MetadataDocument,
    /// RFC 7591 dynamic registration.
    Dynamic,
}

/// Static (if configured) → Client ID Metadata Document (if advertised and Gatehouse's public
/// URL is https) → dynamic registration
/// (if advertised) → `oauth_registration_unsupported`.
pub fn choose_registration(static_client: bool, endpoints: &discovery::Endpoints, document_usable: bool) -> Result<Registration> {
    if static_client {
        Ok(Registration::Static)
    } else if endpoints.cimd && document_usable {
        Ok(Registration::MetadataDocument)
    } else if endpoints.registration.is_some() && endpoints.issuer.is_some() {
        Ok(Registration::Dynamic)
    } else if endpoints.cimd {
        Err(Error::Conflict {
            code: "oauth_registration_unsupported",
            message: "the connector names no client_id and its authorization server accepts only Client ID Metadata Documents, which need an https GATEHOUSE_PUBLIC_URL".into(),
        })
    } else {
        Err(Error::Conflict {
            code: "oauth_registration_unsupported",
            message: "the connector names no client_id and its authorization server supports neither Client ID Metadata Documents nor dynamic client registration".into(),
        })
    }
}

/// The slot holding a connector's static client secret.
pub fn secret_slot(tenant: TenantId, workspace: Uuid, connector: &str) -> Slot<'_> {
    Slot { tenant, workspace, connector, owner: Owner::OauthClient }
}

/// The connector's client secret or private key, opened from the vault, and which it is;
/// `oauth_client_secret_missing` when neither is set.
pub async fn secret(
    state: &AppState,
    tenant: TenantId,
    workspace: Uuid,
    connector: &str,
) -> Result<(KeyKind, Zeroizing<String>)> {
    let ring = ring(state)?;
    let slot = secret_slot(tenant, workspace, connector);
    let (row, _) = slots::load(&state.db, slot).await?;
    let row = row.ok_or_else(|| Error::Conflict {
        code: "oauth_client_secret_missing",
        message: format!(
            "connector `{connector}` uses a confidential OAuth client whose secret (or private key) is not set: PUT …/connectors/{connector}/oauth/client-secret"
        ),
    })?;
    let fields = slots::open(ring, slot, &row).map_err(|_| Error::Conflict {
        code: "credential_unreadable",
        message: format!(
            "the client secret of connector `{connector}` cannot be opened with this deployment's vault keys; set it again"
        ),
    })?;
    Ok(match fields.0.get(super::assertion::KEY_FIELD) {
        Some(key) => (KeyKind::PrivateKey, Zeroizing::new(key.clone())),
        None => (KeyKind::Secret, Zeroizing::new(fields.0.get(SECRET_FIELD).cloned().unwrap_or_default())),
    })
}

/// Checks what an OAuth client's slot is set to: exactly one field, `client_secret` (see
/// [`check_secret`]) or `private_key` (see [`super::assertion::check`]).
pub fn check_client_fields(fields: &std::collections::BTreeMap<String, String>) -> Result<()> {
    let key = super::assertion::KEY_FIELD;
    match (fields.len(), fields.get(SECRET_FIELD), fields.get(key)) {
        (1, Some(secret), None) => check_secret(secret),
        (1, None, Some(pem)) => super::assertion::check(pem),
        _ => Err(Error::invalid(
            "invalid_client_secret",
            Some("field"),
            format!("an OAuth client's slot has exactly one field: `{SECRET_FIELD}` or `{key}`"),
        )),
    }
}

/// The one field of a client secret slot.
pub const SECRET_FIELD: &str = "client_secret";

/// Who Gatehouse is at an endpoint: its client id, how it authenticates, and the secret (or,
/// for `private_key_jwt`, the private key's PEM) when that needs one (zeroed on drop).
pub struct Creds {
    pub id: String,
    pub method: Method,
    pub secret: Option<Zeroizing<String>>,
}

impl Creds {
    /// Loads the secret or key when `method` needs one; one of the other kind than `method`
    /// asks for is `oauth_client_secret_missing` (the slot was set anew since).
    pub async fn load(
        state: &AppState,
        tenant: TenantId,
        workspace: Uuid,
        connector: &str,
        id: &str,
        method: Method,
    ) -> Result<Creds> {
        let secret = match method {
            Method::None => None,
            _ => {
                let (kind, value) = secret(state, tenant, workspace, connector).await?;
                if (kind == KeyKind::PrivateKey) != (method == Method::PrivateKeyJwt) {
                    return Err(Error::Conflict {
                        code: "oauth_client_secret_missing",
                        message: format!(
                            "connector `{connector}`'s grant authenticates with {}, but its OAuth client now holds a {}; connect it again",
                            method.as_str(),
                            if kind == KeyKind::PrivateKey { "private key" } else { "secret" }
                        ),
                    });
                }
                Some(value)
            }
        };
        Ok(Creds { id: id.to_owned(), method, secret })
    }

    /// The form parameters that authenticate a token request with `private_key_jwt` (for
    /// `audience`: the authorization server's issuer, else the endpoint); none for the other
    /// methods, which the `oauth2` client's auth type carries.
    pub fn assertion_params(&self, audience: &str) -> Result<Vec<(&'static str, String)>> {
        match (self.method, &self.secret) {
            (Method::PrivateKeyJwt, Some(pem)) => Ok(vec![
                ("client_assertion_type", super::assertion::ASSERTION_TYPE.to_owned()),
                ("client_assertion", super::assertion::assertion(pem, &self.id, audience)?),
            ]),
            _ => Ok(Vec::new()),
        }
    }
}

/// The workspace of a connector whose OAuth client is confidential (`not_confidential`
/// otherwise): the only connectors with a client secret slot.
pub async fn confidential_connector(db: &crate::db::Db, tenant: TenantId, workspace: &str, id: &str) -> Result<Uuid> {
    let bound = crate::workspaces::bound(db, tenant, workspace).await?;
    let c = bound.document.connectors.get(id).ok_or(Error::NotFound { what: "connector" })?;
    match c.auth().oauth() {
        Some(o) if o.confidential => Ok(bound.workspace.id.0),
        _ => Err(Error::Conflict {
            code: "not_confidential",
            message: format!("connector `{id}` has no confidential OAuth client (`\"confidential\": true` with a `client_id`)"),
        }),
    }
}

/// Checks a client secret as a slot value: the one field, 1 to 4096 bytes, no control characters.
pub use crate::secrets::check_client_secret as check_secret;

/// The URL of Gatehouse's Client ID Metadata Document: also its client id there.
pub fn document_url(state: &AppState) -> String {
    format!("{}/oauth/client-metadata.json", state.config.public_url.trim_end_matches('/'))
}

/// Whether the document's URL can be a client id: the draft requires https (a server could not
/// fetch a plain-http or loopback URL anyway, and dynamic registration still works there).
pub fn document_usable(state: &AppState) -> bool {
    url::Url::parse(&state.config.public_url).is_ok_and(|u| u.scheme() == "https")
}

/// The Client ID Metadata Document: one public client (PKCE, no secret) whose id is the
/// document's own URL, redirecting to Gatehouse's callback.
pub fn document(state: &AppState) -> serde_json::Value {
    json!({
        "client_id": document_url(state),
        "client_name": "Gatehouse",
        "client_uri": state.config.public_url.trim_end_matches('/'),
        "redirect_uris": [redirect_uri(state)],
        "grant_types": ["authorization_code", "refresh_token"],
        "response_types": ["code"],
        "token_endpoint_auth_method": "none",
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn endpoints(cimd: bool, registration: bool) -> discovery::Endpoints {
        discovery::Endpoints {
            authorization: "https://as/auth".into(),
            token: "https://as/token".into(),
            revocation: None,
            userinfo: None,
            issuer: Some("https://as".into()),
            iss_supported: false,
            registration: registration.then(|| "https://as/reg".into()),
            cimd,
            token_auth_methods: None,
            revocation_auth_methods: None,
            resource: None,
            scopes: None,
            dpop: false,
        }
    }

    #[test]
    fn registration_prefers_static_then_the_document_then_dynamic() {
        use Registration::*;
        for (configured, cimd, dynamic, usable, expected) in [
            (true, true, true, true, Some(Static)),
            (true, false, false, false, Some(Static)),
            (false, true, true, true, Some(MetadataDocument)),
            (false, true, false, true, Some(MetadataDocument)),
            (false, true, true, false, Some(Dynamic)),
            (false, false, true, true, Some(Dynamic)),
            (false, false, false, true, None),
            (false, true, false, false, None),
        ] {
            let got = choose_registration(configured, &endpoints(cimd, dynamic), usable);
            match expected {
                Some(e) => assert_eq!(got.unwrap(), e),
                None => assert_eq!(got.unwrap_err().code(), "oauth_registration_unsupported"),
            }
        }
    }

    #[test]
    fn a_confidential_client_uses_basic_unless_only_post_is_advertised() {
        let v = |m: &[&str]| m.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let secret = KeyKind::Secret;
        assert_eq!(confidential_method(None, secret).unwrap(), Method::ClientSecretBasic);
        assert_eq!(
            confidential_method(Some(&v(&["none", "client_secret_post", "client_secret_basic"])), secret).unwrap(),
            Method::ClientSecretBasic
        );
        assert_eq!(
            confidential_method(Some(&v(&["client_secret_post", "private_key_jwt"])), secret).unwrap(),
            Method::ClientSecretPost
        );
        assert_eq!(
            confidential_method(Some(&v(&["none", "private_key_jwt"])), secret).unwrap_err().code(),
            "oauth_client_auth_unsupported"
        );
        let key = KeyKind::PrivateKey;
        assert_eq!(confidential_method(None, key).unwrap(), Method::PrivateKeyJwt);
        assert_eq!(confidential_method(Some(&v(&["none", "private_key_jwt"])), key).unwrap(), Method::PrivateKeyJwt);
        assert_eq!(
            confidential_method(Some(&v(&["client_secret_basic"])), key).unwrap_err().code(),
            "oauth_client_auth_unsupported"
        );
        for m in [Method::None, Method::ClientSecretBasic, Method::ClientSecretPost, Method::PrivateKeyJwt] {
            assert_eq!(Method::parse(m.as_str()), Some(m));
        }
    }
}
