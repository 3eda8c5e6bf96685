//! What a connection is made of, and the checks an input passes before anything is stored:
//! every refusal names its field with a stable code.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use zeroize::Zeroizing;

use crate::{
    error::{Error, Result},
    members::Role,
};

/// Domains one connection may claim.
const MAX_DOMAINS: usize = 50;
/// Group values one connection may map.
const MAX_MAPPINGS: usize = 100;

/// How a first sign-in of someone who is not yet a member is treated.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Jit {
    /// Create the member, with the role the groups claim maps to (else the default role).
    Create,
    /// Only someone with an outstanding invitation of the tenant (for a verified email) joins.
    Invitation,
}

impl Jit {
    pub fn as_str(self) -> &'static str {
        match self {
            Jit::Create => "create",
            Jit::Invitation => "invitation",
        }
    }

    pub(super) fn parse(s: &str) -> Result<Jit> {
        match s {
            "create" => Ok(Jit::Create),
            "invitation" => Ok(Jit::Invitation),
            _ => Err(Error::invalid("invalid_jit", Some("jit"), "jit is `create` or `invitation`")),
        }
    }
}

/// How Gatehouse authenticates at the connection's token endpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum AuthMethod {
    ClientSecretBasic,
    ClientSecretPost,
    PrivateKeyJwt,
}

impl AuthMethod {
    pub fn as_str(self) -> &'static str {
        match self {
            AuthMethod::ClientSecretBasic => "client_secret_basic",
            AuthMethod::ClientSecretPost => "client_secret_post",
            AuthMethod::PrivateKeyJwt => "private_key_jwt",
        }
    }

    pub(super) fn parse(s: &str) -> Result<AuthMethod> {
        match s {
            "client_secret_basic" => Ok(AuthMethod::ClientSecretBasic),
            "client_secret_post" => Ok(AuthMethod::ClientSecretPost),
            "private_key_jwt" => Ok(AuthMethod::PrivateKeyJwt),
            _ => Err(Error::invalid(
                "invalid_auth_method",
                Some("auth_method"),
                "auth_method is client_secret_basic, client_secret_post or private_key_jwt",
            )),
        }
    }
}

/// A connection to create, or the new state of one (`version` required then; a missing
/// secret and key keep the sealed one).
#[derive(Clone, Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ConnectionInput {
    pub name: String,
    pub issuer: String,
    pub client_id: String,
    /// Default: `client_secret_basic` with a secret, `private_key_jwt` with a key.
    #[serde(default)]
    pub auth_method: Option<String>,
    /// Write-only.
    #[serde(default)]
    pub client_secret: Option<String>,
    /// Write-only: a PKCS#8 PEM (P-256, RSA or Ed25519) for `private_key_jwt`.
    #[serde(default)]
    pub private_key: Option<String>,
    pub email_domains: Vec<String>,
    #[serde(default)]
    pub groups_claim: Option<String>,
    #[serde(default)]
    pub role_mapping: BTreeMap<String, String>,
    #[serde(default)]
    pub default_role: Option<String>,
    #[serde(default)]
    pub jit: Option<String>,
    /// Update only: the version this edit was made from.
    #[serde(default)]
    pub version: Option<i64>,
}

/// A validated connection, ready to store.
pub(super) struct Checked {
    pub(super) name: String,
    pub(super) issuer: String,
    pub(super) client_id: String,
    pub(super) auth_method: AuthMethod,
    /// The secret or PEM to seal; `None`: keep the sealed one (updates only).
    pub(super) sealed_material: Option<Zeroizing<String>>,
    pub(super) email_domains: Vec<String>,
    pub(super) groups_claim: String,
    pub(super) role_mapping: BTreeMap<String, Role>,
    pub(super) default_role: Role,
    pub(super) jit: Jit,
}

/// Lowercases and checks an email domain: dot-separated labels of letters, digits and
/// hyphens, at least two labels.
pub fn normalize_domain(raw: &str) -> Result<String> {
    let d = raw.trim().trim_end_matches('.').to_ascii_lowercase();
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && !l.starts_with('-')
            && !l.ends_with('-')
            && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
    };
    if d.len() < 3 || d.len() > 253 || !d.contains('.') || !d.split('.').all(label_ok) {
        return Err(Error::invalid(
            "invalid_email_domain",
            Some("email_domains"),
            format!("`{}` is not an email domain such as example.com", raw.chars().take(80).collect::<String>()),
        ));
    }
    Ok(d)
}

/// The domain of an email address, normalized (`None` when it has none).
pub fn domain_of(email: &str) -> Option<String> {
    let (_, domain) = email.trim().rsplit_once('@')?;
    normalize_domain(domain).ok()
}

/// An issuer: an `https` URL without query or fragment, or `http` on a loopback host (a
/// provider on this machine).
fn check_issuer(raw: &str) -> Result<String> {
    let bad = || Error::invalid("invalid_issuer", Some("issuer"), "issuer is an https URL (http only on loopback)");
    let url = url::Url::parse(raw.trim()).map_err(|_| bad())?;
    let loopback = matches!(url.host_str(), Some("localhost" | "127.0.0.1" | "[::1]"));
    let scheme_ok = url.scheme() == "https" || (url.scheme() == "http" && loopback);
    if !scheme_ok || url.query().is_some() || url.fragment().is_some() || !url.username().is_empty() || raw.len() > 2048 {
        return Err(bad());
    }
    Ok(raw.trim().to_owned())
}

fn check_text(value: &str, field: &'static str, code: &'static str, max: usize) -> Result<String> {
    let v = value.trim();
    if v.is_empty() || v.len() > max || v.chars().any(char::is_control) {
        return Err(Error::invalid(code, Some(field), format!("{field} is 1 to {max} characters without control characters")));
    }
    Ok(v.to_owned())
}

fn parse_role(value: &str, field: &'static str) -> Result<Role> {
    match Role::parse(value) {
        Ok(Role::Owner) | Err(_) => Err(Error::invalid(
            "invalid_role",
            Some(field),
            "a mapped role is `admin`, `operator` or `member` (owners are the tenant's own)",
        )),
        Ok(role) => Ok(role),
    }
}

/// Validates an input. `creating`: a secret or a key is required.
impl Checked {
    /// The stored row of these settings (`key_id` and `envelope` empty: keep the sealed ones).
    pub(super) fn row<'a>(&'a self, id: uuid::Uuid, key_id: &'a str, envelope: &'a str) -> super::store::NewRow<'a> {
        super::store::NewRow {
            id,
            name: &self.name,
            issuer: &self.issuer,
            client_id: &self.client_id,
            auth_method: self.auth_method,
            key_id,
            envelope,
            groups_claim: &self.groups_claim,
            role_mapping: &self.role_mapping,
            default_role: self.default_role,
            jit: self.jit,
        }
    }
}

pub(super) fn check(input: &ConnectionInput, creating: bool) -> Result<Checked> {
    let name = check_text(&input.name, "name", "invalid_name", 80)?;
    let issuer = check_issuer(&input.issuer)?;
    let client_id = check_text(&input.client_id, "client_id", "invalid_client_id", 255)?;
    let material = match (&input.client_secret, &input.private_key) {
        (Some(_), Some(_)) => {
            return Err(Error::invalid(
                "invalid_client_auth",
                Some("client_secret"),
                "give a client_secret or a private_key, not both",
            ));
        }
        (Some(secret), None) => {
            crate::secrets::check_client_secret(secret)?;
            Some((false, Zeroizing::new(secret.clone())))
        }
        (None, Some(pem)) => {
            // A key that cannot sign is refused now, not at the first sign-in.
            crate::oauth::assertion::assertion(pem, &client_id, &issuer).map_err(|_| {
                Error::invalid(
                    "invalid_private_key",
                    Some("private_key"),
                    "private_key is a PKCS#8 PEM of a P-256, RSA or Ed25519 key",
                )
            })?;
            Some((true, Zeroizing::new(pem.clone())))
        }
        (None, None) if creating => {
            return Err(Error::invalid(
                "invalid_client_auth",
                Some("client_secret"),
                "a connection needs a client_secret or a private_key",
            ));
        }
        (None, None) => None,
    };
    let auth_method = match (input.auth_method.as_deref(), &material) {
        (Some(m), _) => AuthMethod::parse(m)?,
        (None, Some((true, _))) => AuthMethod::PrivateKeyJwt,
        (None, _) => AuthMethod::ClientSecretBasic,
    };
    if let Some((is_key, _)) = &material
        && *is_key != (auth_method == AuthMethod::PrivateKeyJwt)
    {
        return Err(Error::invalid(
            "invalid_client_auth",
            Some("auth_method"),
            "private_key_jwt takes a private_key; the client_secret methods take a client_secret",
        ));
    }
    if input.email_domains.is_empty() || input.email_domains.len() > MAX_DOMAINS {
        return Err(Error::invalid(
            "invalid_email_domain",
            Some("email_domains"),
            format!("a connection signs in 1 to {MAX_DOMAINS} email domains"),
        ));
    }
    let mut email_domains: Vec<String> = input.email_domains.iter().map(|d| normalize_domain(d)).collect::<Result<_>>()?;
    email_domains.sort();
    email_domains.dedup();
    let groups_claim = match &input.groups_claim {
        None => "groups".to_owned(),
        Some(c) => {
            let c = check_text(c, "groups_claim", "invalid_groups_claim", 100)?;
            if !c.chars().all(|ch| ch.is_ascii_alphanumeric() || "_-.:/".contains(ch)) {
                return Err(Error::invalid("invalid_groups_claim", Some("groups_claim"), "groups_claim is a claim name"));
            }
            c
        }
    };
    if input.role_mapping.len() > MAX_MAPPINGS {
        return Err(Error::invalid(
            "invalid_role_mapping",
            Some("role_mapping"),
            format!("at most {MAX_MAPPINGS} mapped values"),
        ));
    }
    let mut role_mapping = BTreeMap::new();
    for (value, role) in &input.role_mapping {
        let value = check_text(value, "role_mapping", "invalid_role_mapping", 256)?;
        role_mapping.insert(value, parse_role(role, "role_mapping")?);
    }
    let default_role = match &input.default_role {
        None => Role::Member,
        Some(r) => parse_role(r, "default_role")?,
    };
    let jit = match &input.jit {
        None => Jit::Invitation,
        Some(j) => Jit::parse(j)?,
    };
    Ok(Checked {
        name,
        issuer,
        client_id,
        auth_method,
        sealed_material: material.map(|(_, m)| m),
        email_domains,
        groups_claim,
        role_mapping,
        default_role,
        jit,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn input() -> ConnectionInput {
        ConnectionInput {
            name: "Okta".into(),
            issuer: "https://acme.okta.example".into(),
            client_id: "gatehouse".into(),
            client_secret: Some("s3cret".into()),
            email_domains: vec!["Acme.Example".into()],
            ..Default::default()
        }
    }

    #[test]
    fn a_valid_input_is_normalized() {
        let c = check(&input(), true).unwrap();
        assert_eq!(c.email_domains, ["acme.example"]);
        assert_eq!(c.auth_method, AuthMethod::ClientSecretBasic);
        assert_eq!((c.jit, c.default_role, c.groups_claim.as_str()), (Jit::Invitation, Role::Member, "groups"));
    }

    #[test]
    fn bad_inputs_name_their_field() {
        let cases: Vec<(ConnectionInput, &str)> = vec![
            (ConnectionInput { issuer: "http://idp.example".into(), ..input() }, "invalid_issuer"),
            (ConnectionInput { issuer: "https://idp.example?x=1".into(), ..input() }, "invalid_issuer"),
            (ConnectionInput { email_domains: vec![], ..input() }, "invalid_email_domain"),
            (ConnectionInput { email_domains: vec!["localhost".into()], ..input() }, "invalid_email_domain"),
            (ConnectionInput { client_secret: None, ..input() }, "invalid_client_auth"),
            (ConnectionInput { private_key: Some("x".into()), ..input() }, "invalid_client_auth"),
            (ConnectionInput { client_secret: None, private_key: Some("not a pem".into()), ..input() }, "invalid_private_key"),
            (ConnectionInput { auth_method: Some("private_key_jwt".into()), ..input() }, "invalid_client_auth"),
            (ConnectionInput { jit: Some("always".into()), ..input() }, "invalid_jit"),
            (ConnectionInput { default_role: Some("owner".into()), ..input() }, "invalid_role"),
            (ConnectionInput { role_mapping: [("g".into(), "root".into())].into(), ..input() }, "invalid_role"),
            (ConnectionInput { name: " ".into(), ..input() }, "invalid_name"),
            (ConnectionInput { groups_claim: Some("a b".into()), ..input() }, "invalid_groups_claim"),
        ];
        for (bad, code) in cases {
            assert_eq!(check(&bad, true).err().map(|e| e.code()), Some(code), "{bad:?}");
        }
        assert!(check(&ConnectionInput { client_secret: None, ..input() }, false).is_ok(), "an update may keep the secret");
        assert!(check(&ConnectionInput { issuer: "http://127.0.0.1:4000".into(), ..input() }, true).is_ok(), "loopback");
    }

    proptest! {
        #[test]
        fn an_accepted_domain_is_lowercase_labels(s in "\\PC{0,40}") {
            if let Ok(d) = normalize_domain(&s) {
                prop_assert!(d.contains('.') && d == d.to_ascii_lowercase());
                prop_assert!(d.split('.').all(|l| !l.is_empty() && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')));
            }
        }

        #[test]
        fn domain_of_takes_the_last_at(local in "[a-z0-9.+]{1,10}", domain in "[a-z]{1,8}\\.[a-z]{2,5}") {
            prop_assert_eq!(domain_of(&format!("{local}@{domain}")), Some(domain.clone()));
            prop_assert_eq!(domain_of(&format!("{local}@x@{}", domain.to_uppercase())), Some(domain));
        }
    }
}
