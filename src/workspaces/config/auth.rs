//! How a connector authenticates to its downstream: no credentials, a credential slot, or OAuth.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// How the gateway authenticates to a downstream.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "snake_case", tag = "type", deny_unknown_fields)]
pub enum Auth {
    /// No credentials (static, non-secret headers may still be sent).
    #[default]
    None,
    /// Headers filled from a credential slot sealed by the vault: the workspace's (`shared`)
    /// or the calling member's own (`personal`). `headers` are templates whose `{field}`
    /// placeholders name the slot's fields (`"Authorization": "Bearer {token}"`); `basic`
    /// sends `Authorization: Basic base64(username:password)` from the two named fields.
    Slot {
        slot: SlotKind,
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        headers: BTreeMap<String, String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        basic: Option<Basic>,
    },
    /// OAuth 2.0 (authorization code + PKCE) against the downstream's authorization server; the
    /// grant's tokens are sealed by the vault and sent as `Authorization: Bearer`.
    Oauth(OauthAuth),
}

/// Where a connector's OAuth authorization server is and how Gatehouse is registered there.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct OauthAuth {
    /// `shared`: one grant for the workspace (people with `credential_administration`, or a
    /// mailed connect link); `personal`: each member's own grant.
    pub grant: SlotKind,
    /// `authorization_code` (the default): a person authorizes through the provider.
    /// `client_credentials` (the MCP OAuth client credentials extension): Gatehouse gets its
    /// tokens itself, with no person, as the static confidential client `client_id` (its
    /// `client_secret` or `private_key` sealed as the connector's `oauth_client` credential);
    /// only for a `shared` grant. `identity_assertion` (the MCP enterprise-managed authorization
    /// extension): each member's own grant, got with no authorization page from the member's
    /// identity token at `identity_provider` (RFC 8693 token exchange for an ID-JAG, then the
    /// RFC 7523 JWT bearer grant as the static confidential client `client_id`); only for a
    /// `personal` grant.
    #[serde(default, skip_serializing_if = "Flow::is_default")]
    pub flow: Flow,
    /// The enterprise identity provider of an `identity_assertion` flow.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identity_provider: Option<IdentityProvider>,
    /// The authorization server's issuer. A `remote_mcp` connector without one discovers it
    /// through its protected resource metadata (RFC 9728), or, where the server publishes none
    /// (MCP 2025-03-26), takes the server's origin; its metadata (RFC 8414, else OpenID
    /// discovery) gives every endpoint not configured here (at an origin serving none, the
    /// default `/authorize`, `/token` and `/register`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub issuer: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub authorization_endpoint: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_endpoint: Option<String>,
    /// RFC 7009 revocation, used at disconnect when present (configured or advertised).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revocation_endpoint: Option<String>,
    /// A statically registered public client (PKCE, no secret). Absent: Gatehouse registers
    /// itself as a public client at the server's registration endpoint (RFC 7591), once per
    /// workspace connector and issuer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_id: Option<String>,
    /// The static client is confidential: its secret is set through
    /// `…/connectors/{id}/oauth/client-secret` (or `gatehouse credential set --oauth-client`),
    /// sealed in the vault, and sent to the token and revocation endpoints by the method the
    /// server's metadata advertises (`client_secret_basic`, else `client_secret_post`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub confidential: bool,
    /// RFC 8707: the resource indicator sent with the authorization and token requests. A
    /// `remote_mcp` connector takes it from its protected resource metadata (checked against
    /// its URL); an HTTP API may name one here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub scopes: Vec<String>,
    /// DPoP (RFC 9449): by default a grant is DPoP-bound when the authorization server offers
    /// ES256 proofs; `false` keeps Bearer tokens, for a downstream that accepts only Bearer
    /// although its authorization server offers DPoP.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dpop: Option<bool>,
}

impl OauthAuth {
    /// Whether a person may authorize the connector at an authorization page: not one with
    /// client credentials, whose tokens Gatehouse gets itself (`oauth_client_credentials`), nor
    /// one whose members present identity tokens (`oauth_identity_assertion`).
    pub fn person_authorizes(&self, id: &str) -> crate::error::Result<()> {
        if self.flow == Flow::IdentityAssertion {
            return Err(crate::error::Error::Conflict {
                code: "oauth_identity_assertion",
                message: format!(
                    "connector `{id}` takes each member's identity token instead of an authorization page: the member presents it (POST …/connectors/{id}/oauth/personal/identity-assertion)"
                ),
            });
        }
        if self.flow == Flow::ClientCredentials {
            return Err(crate::error::Error::Conflict {
                code: "oauth_client_credentials",
                message: format!(
                    "connector `{id}` uses client credentials: Gatehouse gets its tokens itself, so no person authorizes it"
                ),
            });
        }
        Ok(())
    }
}

/// How a connector's OAuth grant is obtained.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Flow {
    /// Authorization code with PKCE: a person authorizes.
    #[default]
    AuthorizationCode,
    /// Client credentials (RFC 6749 §4.4): the client authenticates, no person is involved.
    ClientCredentials,
    /// Enterprise-managed authorization: a member's identity token is exchanged at their
    /// identity provider for an identity assertion (ID-JAG), which the client presents as a JWT
    /// bearer grant.
    IdentityAssertion,
}

/// The enterprise identity provider that exchanges a member's identity token for an identity
/// assertion (RFC 8693, `requested_token_type=urn:ietf:params:oauth:token-type:id-jag`).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct IdentityProvider {
    /// Its issuer: an identity token must name it as `iss`; its OpenID discovery gives the
    /// token endpoint when none is configured.
    pub issuer: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_endpoint: Option<String>,
    /// Gatehouse's client id at the identity provider (a public client there).
    pub client_id: String,
}

impl Flow {
    fn is_default(&self) -> bool {
        *self == Flow::AuthorizationCode
    }
}

/// Whose credential a slot holds.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq, Hash)]
#[serde(rename_all = "snake_case")]
pub enum SlotKind {
    /// One credential for the workspace, managed by people with `credential_administration`.
    Shared,
    /// Each member's own; callers without a member principal do not see the connector.
    Personal,
}

impl SlotKind {
    pub fn as_str(self) -> &'static str {
        match self {
            SlotKind::Shared => "shared",
            SlotKind::Personal => "personal",
        }
    }
}

/// HTTP Basic authentication from two slot fields (their names, not their values).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Basic {
    pub username: String,
    pub password: String,
}

impl Auth {
    /// The slot this connector takes its credential from, if any.
    pub fn slot(&self) -> Option<SlotKind> {
        match self {
            Auth::Slot { slot, .. } => Some(*slot),
            _ => None,
        }
    }

    /// Whether each member holds their own credential (a personal slot or OAuth grant).
    pub fn personal(&self) -> bool {
        matches!(self, Auth::Slot { slot: SlotKind::Personal, .. })
            || matches!(self, Auth::Oauth(o) if o.grant == SlotKind::Personal)
    }

    /// The connector's OAuth settings, if it authenticates with OAuth.
    pub fn oauth(&self) -> Option<&OauthAuth> {
        match self {
            Auth::Oauth(o) => Some(o),
            _ => None,
        }
    }

    /// The slot fields the headers need.
    pub fn fields_needed(&self) -> std::collections::BTreeSet<String> {
        let mut out = std::collections::BTreeSet::new();
        if let Auth::Slot { headers, basic, .. } = self {
            for template in headers.values() {
                out.extend(
                    super::http_api_description::placeholders(template).unwrap_or_default().into_iter().map(str::to_owned),
                );
            }
            if let Some(b) = basic {
                out.insert(b.username.clone());
                out.insert(b.password.clone());
            }
        }
        out
    }

    /// The headers to send, filled from the slot's `fields`; `Err` names a missing field.
    pub fn render(&self, fields: &BTreeMap<String, String>) -> Result<Vec<(String, String)>, String> {
        let Auth::Slot { headers, basic, .. } = self else { return Ok(Vec::new()) };
        let get = |name: &str| fields.get(name).ok_or_else(|| name.to_owned());
        let mut out = Vec::new();
        for (name, template) in headers {
            let mut value = String::with_capacity(template.len() + 32);
            let mut rest = template.as_str();
            while let Some(open) = rest.find('{') {
                value.push_str(&rest[..open]);
                let close = rest[open..].find('}').map_or(rest.len(), |c| open + c);
                value.push_str(get(&rest[open + 1..close.min(rest.len())])?);
                rest = rest.get(close + 1..).unwrap_or("");
            }
            value.push_str(rest);
            out.push((name.clone(), value));
        }
        if let Some(b) = basic {
            use base64::Engine;
            let pair = format!("{}:{}", get(&b.username)?, get(&b.password)?);
            out.push(("Authorization".into(), format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(pair))));
        }
        Ok(out)
    }
}
