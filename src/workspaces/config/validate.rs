//! Validation of a configuration document: every problem, each naming its field.

use std::collections::BTreeMap;

use super::{Auth, Connector, Document, Flow, MAX_CONNECTORS, MAX_HEADERS, SlotKind};
use crate::error::{Error, FieldIssue, Result};

/// An http(s) URL naming a host and carrying no credentials.
pub(super) fn check_url(url: &str, field: &str, bad: &mut dyn FnMut(String, &str)) {
    match url::Url::parse(url) {
        Ok(u) if !matches!(u.scheme(), "http" | "https") => bad(field.into(), "must be an http:// or https:// URL"),
        Ok(u) if !u.username().is_empty() || u.password().is_some() => {
            bad(field.into(), "must not carry credentials; use a credential slot")
        }
        Ok(u) if u.host_str().is_none() => bad(field.into(), "must name a host"),
        Ok(_) => {}
        Err(_) => bad(field.into(), "is not a URL"),
    }
}

/// Static headers: well-formed, non-secret, and none the gateway sets itself.
pub(super) fn check_headers(id: &str, headers: &BTreeMap<String, String>, bad: &mut dyn FnMut(String, &str)) {
    if headers.len() > MAX_HEADERS {
        bad(format!("connectors.{id}.headers"), "at most 16 headers");
    }
    for (name, value) in headers {
        let field = format!("connectors.{id}.headers.{name}");
        if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_') {
            bad(field, "is not a header name");
        } else if secret_looking(name) {
            bad(field, "looks like a secret: secrets go in a credential slot (the vault), never in configuration");
        } else if value.len() > 1024 || !value.bytes().all(|b| (0x20..0x7f).contains(&b)) {
            bad(field, "a header value is at most 1024 visible ASCII characters");
        } else if ["host", "content-length", "content-type", "accept", "mcp-session-id", "mcp-protocol-version"]
            .contains(&name.to_ascii_lowercase().as_str())
        {
            bad(field, "is set by the gateway itself");
        }
    }
}

/// A slot field name: 1 to 64 characters of `A-Za-z0-9_`.
pub fn valid_field_name(name: &str) -> bool {
    (1..=64).contains(&name.len()) && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

pub(super) fn check_auth(
    auth: &Auth,
    static_headers: &BTreeMap<String, String>,
    field: &str,
    remote_mcp: bool,
    bad: &mut dyn FnMut(String, &str),
) {
    match auth {
        Auth::None => {}
        Auth::Oauth(o) => {
            for (name, url) in [
                ("issuer", &o.issuer),
                ("authorization_endpoint", &o.authorization_endpoint),
                ("token_endpoint", &o.token_endpoint),
                ("revocation_endpoint", &o.revocation_endpoint),
            ] {
                if let Some(url) = url {
                    check_url(url, &format!("{field}.{name}"), bad);
                }
            }
            if o.issuer.is_none() && (o.authorization_endpoint.is_none() || o.token_endpoint.is_none()) && !remote_mcp {
                bad(
                    field.into(),
                    "an HTTP API names its authorization server: `issuer`, or both `authorization_endpoint` and `token_endpoint`",
                );
            }
            match &o.client_id {
                Some(id) if id.is_empty() || id.len() > 256 || id.chars().any(char::is_control) => {
                    bad(format!("{field}.client_id"), "a client id is 1 to 256 characters")
                }
                None if o.issuer.is_none() && !remote_mcp => bad(
                    format!("{field}.client_id"),
                    "without a client id Gatehouse registers itself (RFC 7591), which needs the server's metadata: name its `issuer`",
                ),
                _ => {}
            }
            if o.confidential && o.client_id.is_none() {
                bad(format!("{field}.confidential"), "a confidential client names its `client_id`");
            }
            if o.flow == Flow::ClientCredentials && !(o.confidential && o.grant == SlotKind::Shared) {
                bad(
                    format!("{field}.flow"),
                    "client credentials are a shared grant of a confidential client: `\"grant\": \"shared\"`, `\"confidential\": true` and its `client_id`",
                );
            }
            match (&o.identity_provider, o.flow == Flow::IdentityAssertion) {
                (None, true) => {
                    bad(format!("{field}.identity_provider"), "an identity assertion flow names its identity provider")
                }
                (Some(_), false) => {
                    bad(format!("{field}.identity_provider"), "only an `identity_assertion` flow has an identity provider")
                }
                (Some(idp), true) => {
                    check_url(&idp.issuer, &format!("{field}.identity_provider.issuer"), bad);
                    if let Some(url) = &idp.token_endpoint {
                        check_url(url, &format!("{field}.identity_provider.token_endpoint"), bad);
                    }
                    if idp.client_id.is_empty() || idp.client_id.len() > 256 || idp.client_id.chars().any(char::is_control) {
                        bad(format!("{field}.identity_provider.client_id"), "a client id is 1 to 256 characters");
                    }
                    if !(o.confidential && o.grant == SlotKind::Personal) {
                        bad(
                            format!("{field}.flow"),
                            "an identity assertion is each member's own grant of a confidential client: `\"grant\": \"personal\"`, `\"confidential\": true` and its `client_id`",
                        );
                    }
                }
                (None, false) => {}
            }
            if let Some(resource) = &o.resource {
                check_url(resource, &format!("{field}.resource"), bad);
                if remote_mcp {
                    bad(format!("{field}.resource"), "a remote MCP server's resource comes from its protected resource metadata");
                }
            }
            if o.scopes.len() > 32 || o.scopes.iter().any(|s| s.is_empty() || s.len() > 128 || s.contains(char::is_whitespace)) {
                bad(format!("{field}.scopes"), "at most 32 scopes, each 1 to 128 characters without spaces");
            }
            if static_headers.keys().any(|h| h.eq_ignore_ascii_case("authorization")) {
                bad(field.into(), "OAuth sends Authorization itself");
            }
        }
        Auth::Slot { headers, basic, .. } => {
            if headers.is_empty() && basic.is_none() {
                bad(field.into(), "a slot sends its fields in `headers` templates and/or `basic`");
            }
            if headers.len() > MAX_HEADERS {
                bad(format!("{field}.headers"), "at most 16 headers");
            }
            for (name, template) in headers {
                let at = format!("{field}.headers.{name}");
                let lower = name.to_ascii_lowercase();
                if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_') {
                    bad(at, "is not a header name");
                } else if ["host", "content-length", "content-type", "accept", "mcp-session-id", "mcp-protocol-version"]
                    .contains(&lower.as_str())
                {
                    bad(at, "is set by the gateway itself");
                } else if static_headers.keys().any(|s| s.eq_ignore_ascii_case(name)) {
                    bad(at, "is also a static header");
                } else if basic.is_some() && lower == "authorization" {
                    bad(at, "`basic` already sends Authorization");
                } else if template.len() > 1024 || !template.bytes().all(|b| (0x20..0x7f).contains(&b)) {
                    bad(at, "a header template is at most 1024 visible ASCII characters");
                } else {
                    match super::http_api_description::placeholders(template) {
                        Err(message) => bad(at, message),
                        Ok(names) if names.is_empty() => {
                            bad(at, "takes no {field} from the slot: a secret never goes in configuration")
                        }
                        Ok(names) if names.iter().any(|n| !valid_field_name(n)) => {
                            bad(at, "a slot field name is 1 to 64 characters of A-Z, a-z, 0-9 and '_'")
                        }
                        Ok(_) => {}
                    }
                }
            }
            if let Some(b) = basic {
                for (f, name) in [("username", &b.username), ("password", &b.password)] {
                    if !valid_field_name(name) {
                        bad(format!("{field}.basic.{f}"), "names a slot field: 1 to 64 characters of A-Z, a-z, 0-9 and '_'");
                    }
                }
            }
        }
    }
}

pub(super) fn check_timeout(timeout_ms: Option<u64>, field: &str, bad: &mut dyn FnMut(String, &str)) {
    if timeout_ms.is_some_and(|t| !(100..=300_000).contains(&t)) {
        bad(field.into(), "from 100 to 300000");
    }
}

/// Header names that carry secrets: those belong in a credential slot, sealed by the vault,
/// never in a configuration document.
fn secret_looking(name: &str) -> bool {
    let n = name.to_ascii_lowercase();
    ["authorization", "cookie", "proxy-authorization"].contains(&n.as_str())
        || ["token", "secret", "key", "password", "auth"].iter().any(|w| n.contains(w))
}

/// Checks a connector id: `[a-z0-9_-]{1,64}`.
pub fn valid_connector_id(id: &str) -> bool {
    (1..=64).contains(&id.len()) && id.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
}

impl Document {
    /// Every problem, each naming its field.
    pub fn issues(&self) -> Vec<FieldIssue> {
        let mut issues = Vec::new();
        let mut bad = |field: String, message: &str| issues.push(FieldIssue { field, message: message.to_owned() });
        if self.connectors.len() > MAX_CONNECTORS {
            bad("connectors".into(), "at most 64 connectors");
        }
        for (id, connector) in &self.connectors {
            let at = |f: &str| format!("connectors.{id}.{f}");
            if !valid_connector_id(id) {
                bad(format!("connectors.{id}"), "a connector id is 1 to 64 characters of a-z, 0-9, '_' and '-'");
            }
            match connector {
                Connector::RemoteMcp { url, headers, auth, timeout_ms, transport: _ } => {
                    check_url(url, &at("url"), &mut bad);
                    check_headers(id, headers, &mut bad);
                    check_auth(auth, headers, &at("auth"), true, &mut bad);
                    check_timeout(*timeout_ms, &at("timeout_ms"), &mut bad);
                }
                Connector::HttpApi(api) => api.issues(id, &mut bad),
                Connector::Peer { blueprint } => {
                    if crate::tenants::validate_slug(blueprint).is_err() {
                        bad(
                            at("blueprint"),
                            "a blueprint slug is 3 to 63 characters of a-z, 0-9 and '-', not starting or ending with '-'",
                        );
                    }
                }
            }
        }
        if self.redaction.detectors.len() > super::redaction::MAX_DETECTORS {
            bad("redaction.detectors".into(), "at most 32 detectors");
        }
        for (i, d) in self.redaction.detectors.iter().enumerate() {
            if let Some(problem) = super::redaction::problem(d) {
                bad(format!("redaction.detectors.{i}"), &problem);
            }
        }
        for (i, grant) in self.grants.iter().flatten().enumerate() {
            let ok_to = grant.to == "machines"
                || grant.to.strip_prefix("role:").is_some_and(|r| crate::members::Role::parse(r).is_ok())
                || grant.to.strip_prefix("member:").is_some_and(|m| m.parse::<uuid::Uuid>().is_ok());
            if !ok_to {
                bad(format!("grants.{i}.to"), "is role:<role>, member:<member id> or machines");
            }
            for (field, entries) in [("tools", &grant.tools), ("prompts", &grant.prompts), ("resources", &grant.resources)] {
                for t in entries {
                    let connector = t.split_once('.').map_or(t.as_str(), |(c, _)| c);
                    if !self.connectors.contains_key(connector) {
                        bad(format!("grants.{i}.{field}.{t}"), "names no connector of this workspace");
                    }
                }
            }
        }
        for (name, pool) in &self.pools {
            if !valid_connector_id(name) {
                bad(format!("pools.{name}"), "a pool name is 1 to 64 characters of a-z, 0-9, '_' and '-'");
            }
            if pool.tools.is_empty() {
                bad(format!("pools.{name}.tools"), "a pool names at least one connector or tool");
            }
            for t in &pool.tools {
                let connector = t.split_once('.').map_or(t.as_str(), |(c, _)| c);
                if !self.connectors.contains_key(connector) {
                    bad(format!("pools.{name}.tools.{t}"), "names no connector of this workspace");
                }
            }
        }
        super::approvals::issues(&self.approvals, &|c| self.connectors.contains_key(c), &mut bad);
        for address in self.classification.keys() {
            let known = address.split_once('.').is_some_and(|(c, tool)| self.connectors.contains_key(c) && !tool.is_empty());
            if !known {
                bad(format!("classification.{address}"), "names no connector of this workspace (use connector.tool)");
            }
        }
        issues
    }

    pub fn validate(&self) -> Result<()> {
        let issues = self.issues();
        if issues.is_empty() { Ok(()) } else { Err(Error::InvalidConfig { issues }) }
    }
}
