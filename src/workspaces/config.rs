//! The configuration document a workspace version holds, and its validation.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::error::{Error, FieldIssue, Result};

pub const MAX_CONNECTORS: usize = 64;
pub const MAX_HEADERS: usize = 16;
pub const DEFAULT_TIMEOUT_MS: u64 = 30_000;

#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Document {
    #[serde(default)]
    pub connectors: BTreeMap<String, Connector>,
    /// Explicit classification of `connector.tool` addresses; everything else is classified
    /// from the downstream's annotations, fail-closed.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub classification: BTreeMap<String, Class>,
    /// Who may use which connectors and tools. Absent: every caller with `connector_access`
    /// may use every tool. Present: only what a grant names, and an ungranted tool is
    /// indistinguishable from a missing one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grants: Option<Vec<Grant>>,
    /// Named subsets of the workspace's tools, each served at `…/mcp/{pool}`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub pools: BTreeMap<String, Pool>,
}

/// A pool only ever narrows: its tools, intersected with the caller's grants.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Pool {
    /// Connector ids or exact `connector.tool` addresses.
    pub tools: Vec<String>,
    /// Serve the downstream tools themselves, under their original names, instead of the
    /// gateway's surface (so an unmodified MCP client can use a downstream through the gateway).
    #[serde(default)]
    pub native: bool,
    /// Programs (`execute_code`) served here may make writes (at most 10 a run). Left out of
    /// stored documents when false, so older documents keep their digests.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub trusted: bool,
}

impl Pool {
    pub fn includes(&self, connector: &str, tool: Option<&str>) -> bool {
        self.tools.iter().any(|t| match t.split_once('.') {
            None => t == connector,
            Some((c, name)) => c == connector && tool.is_none_or(|tool| tool == name),
        })
    }
}

/// One grant: `to` is `role:<owner|admin|operator|member>`, `member:<member id>`, or
/// `machines` (tokens that carry no person); `tools` are connector ids or exact
/// `connector.tool` addresses.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Grant {
    pub to: String,
    pub tools: Vec<String>,
}

/// Who is calling, for grants.
#[derive(Clone, Debug, Default)]
pub struct Caller {
    pub role: Option<crate::members::Role>,
    pub member_id: Option<uuid::Uuid>,
}

impl Document {
    /// Whether `caller` may see and use `connector.tool` (`tool` `None`: any tool of it).
    pub fn granted(&self, caller: &Caller, connector: &str, tool: Option<&str>) -> bool {
        let Some(grants) = &self.grants else { return true };
        grants.iter().filter(|g| grant_applies(&g.to, caller)).any(|g| {
            g.tools.iter().any(|t| match t.split_once('.') {
                None => t == connector,
                Some((c, name)) => c == connector && tool.is_none_or(|tool| tool == name),
            })
        })
    }
}

fn grant_applies(to: &str, caller: &Caller) -> bool {
    match to.split_once(':') {
        Some(("role", role)) => caller.role.is_some_and(|r| r.as_str() == role),
        Some(("member", id)) => caller.member_id.is_some_and(|m| m.to_string() == id),
        None if to == "machines" => caller.role.is_none() && caller.member_id.is_none(),
        _ => false,
    }
}

#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Class {
    Read,
    Write,
}

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
    /// The authorization server's issuer. A `remote_mcp` connector without one discovers it
    /// through its protected resource metadata (RFC 9728); its metadata (RFC 8414, else OpenID
    /// discovery) gives every endpoint not configured here.
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
                out.extend(super::http_api::placeholders(template).unwrap_or_default().into_iter().map(str::to_owned));
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

/// How the gateway speaks MCP to a remote server.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum RemoteTransport {
    /// Streamable HTTP (MCP 2025-03-26 and later).
    #[default]
    StreamableHttp,
    /// The legacy HTTP+SSE transport (MCP 2024-11-05): `url` is the event stream's URL.
    Sse,
}

impl RemoteTransport {
    /// Left out of stored documents, so documents written before the field existed keep
    /// their digests (and their downstream sessions).
    fn is_default(&self) -> bool {
        *self == RemoteTransport::default()
    }
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Connector {
    /// A remote MCP server over streamable HTTP or, with `transport: sse`, legacy HTTP+SSE.
    RemoteMcp {
        url: String,
        #[serde(default, skip_serializing_if = "RemoteTransport::is_default")]
        transport: RemoteTransport,
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        headers: BTreeMap<String, String>,
        #[serde(default)]
        auth: Auth,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        timeout_ms: Option<u64>,
    },
    /// An HTTP API whose tools are described as data.
    HttpApi(super::http_api::HttpApi),
    /// Another workspace of the same tenant, found at call time: the one explicitly bound to
    /// this connector, else the one active primary workspace bound to `blueprint` (see
    /// `crate::peers`). Its tools are the target's, addressed `<this id>.<target connector>.<tool>`.
    Peer {
        /// The slug of the blueprint the target workspace runs.
        blueprint: String,
    },
}

/// The credentials of a connector that takes none (a peer calls in-process, as the same caller).
static NO_AUTH: Auth = Auth::None;

impl Connector {
    pub fn timeout_ms(&self) -> u64 {
        match self {
            Connector::RemoteMcp { timeout_ms, .. } => timeout_ms.unwrap_or(DEFAULT_TIMEOUT_MS),
            Connector::HttpApi(api) => api.timeout_ms.unwrap_or(DEFAULT_TIMEOUT_MS),
            Connector::Peer { .. } => DEFAULT_TIMEOUT_MS,
        }
    }

    pub fn kind(&self) -> &'static str {
        match self {
            Connector::RemoteMcp { .. } => "remote_mcp",
            Connector::HttpApi(_) => "http_api",
            Connector::Peer { .. } => "peer",
        }
    }

    /// Where it points: the MCP server's URL, the API's base URL, or a peer's blueprint slug.
    pub fn url(&self) -> &str {
        match self {
            Connector::RemoteMcp { url, .. } => url,
            Connector::HttpApi(api) => &api.base_url,
            Connector::Peer { blueprint } => blueprint,
        }
    }

    pub fn auth(&self) -> &Auth {
        match self {
            Connector::RemoteMcp { auth, .. } => auth,
            Connector::HttpApi(api) => &api.auth,
            Connector::Peer { .. } => &NO_AUTH,
        }
    }
}

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
                    match super::http_api::placeholders(template) {
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
        for (i, grant) in self.grants.iter().flatten().enumerate() {
            let ok_to = grant.to == "machines"
                || grant.to.strip_prefix("role:").is_some_and(|r| crate::members::Role::parse(r).is_ok())
                || grant.to.strip_prefix("member:").is_some_and(|m| m.parse::<uuid::Uuid>().is_ok());
            if !ok_to {
                bad(format!("grants.{i}.to"), "is role:<role>, member:<member id> or machines");
            }
            for t in &grant.tools {
                let connector = t.split_once('.').map_or(t.as_str(), |(c, _)| c);
                if !self.connectors.contains_key(connector) {
                    bad(format!("grants.{i}.tools.{t}"), "names no connector of this workspace");
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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn remote(url: &str) -> Connector {
        Connector::RemoteMcp {
            url: url.into(),
            transport: RemoteTransport::default(),
            headers: BTreeMap::new(),
            auth: Auth::None,
            timeout_ms: None,
        }
    }

    #[test]
    fn field_level_issues() {
        let mut d = Document::default();
        d.connectors.insert("Bad Id".into(), remote("ftp://x"));
        d.connectors.insert(
            "ok".into(),
            Connector::RemoteMcp {
                url: "https://user:pw@mcp.example/mcp".into(),
                transport: RemoteTransport::Sse,
                headers: BTreeMap::from([("Authorization".into(), "Bearer x".into()), ("X-Team".into(), "blue".into())]),
                auth: Auth::Oauth(OauthAuth {
                    grant: SlotKind::Shared,
                    issuer: None,
                    authorization_endpoint: None,
                    token_endpoint: None,
                    revocation_endpoint: None,
                    client_id: Some(String::new()),
                    confidential: false,
                    resource: None,
                    scopes: Vec::new(),
                }),
                timeout_ms: Some(5),
            },
        );
        d.classification.insert("nope.tool".into(), Class::Read);
        let fields: Vec<_> = d.issues().into_iter().map(|i| i.field).collect();
        assert_eq!(
            fields,
            [
                "connectors.Bad Id",
                "connectors.Bad Id.url",
                "connectors.ok.url",
                "connectors.ok.headers.Authorization",
                "connectors.ok.auth.client_id",
                "connectors.ok.auth",
                "connectors.ok.timeout_ms",
                "classification.nope.tool",
            ]
        );
        let mut good = Document::default();
        good.connectors.insert("everything".into(), remote("http://127.0.0.1:3001/mcp"));
        good.classification.insert("everything.echo".into(), Class::Write);
        assert!(good.validate().is_ok());
    }

    #[test]
    fn documents_round_trip_and_refuse_unknown_fields() {
        let json = r#"{"connectors":{"gh":{"kind":"remote_mcp","url":"https://mcp.example/mcp","headers":{"X-Org":"acme"}}}}"#;
        let d: Document = serde_json::from_str(json).unwrap();
        assert_eq!(serde_json::from_value::<Document>(serde_json::to_value(&d).unwrap()).unwrap(), d);
        assert!(serde_json::from_str::<Document>(r#"{"connectors":{},"extra":1}"#).is_err());
        assert!(serde_json::from_str::<Document>(r#"{"connectors":{"a":{"kind":"carrier_pigeon"}}}"#).is_err());
    }

    #[test]
    fn the_transport_is_streamable_by_default_and_left_out_of_documents_then() {
        let json = r#"{"kind":"remote_mcp","url":"https://mcp.example/mcp","auth":{"type":"none"}}"#;
        let streamable: Connector = serde_json::from_str(json).unwrap();
        assert!(matches!(streamable, Connector::RemoteMcp { transport: RemoteTransport::StreamableHttp, .. }));
        assert_eq!(serde_json::to_string(&streamable).unwrap(), json, "the digest of an older document is unchanged");
        let explicit = r#"{"kind":"remote_mcp","url":"https://mcp.example/mcp","transport":"streamable_http"}"#;
        assert_eq!(serde_json::from_str::<Connector>(explicit).unwrap(), streamable);
        let sse: Connector =
            serde_json::from_str(r#"{"kind":"remote_mcp","url":"https://mcp.example/sse","transport":"sse"}"#).unwrap();
        assert!(matches!(sse, Connector::RemoteMcp { transport: RemoteTransport::Sse, .. }));
        assert_eq!(serde_json::from_value::<Connector>(serde_json::to_value(&sse).unwrap()).unwrap(), sse);
        assert!(
            serde_json::from_str::<Connector>(r#"{"kind":"remote_mcp","url":"https://x.example","transport":"ws"}"#).is_err()
        );
    }

    #[test]
    fn peer_connectors_name_a_blueprint() {
        let peer: Connector = serde_json::from_str(r#"{"kind":"peer","blueprint":"billing"}"#).unwrap();
        assert_eq!(peer, Connector::Peer { blueprint: "billing".into() });
        assert_eq!((peer.kind(), peer.url(), peer.auth()), ("peer", "billing", &Auth::None));
        assert!(serde_json::from_str::<Connector>(r#"{"kind":"peer"}"#).is_err(), "the blueprint is required");
        assert!(serde_json::from_str::<Connector>(r#"{"kind":"peer","blueprint":"b1c","url":"x"}"#).is_err());
        let mut d = Document::default();
        d.connectors.insert("crm".into(), peer);
        d.connectors.insert("bad".into(), Connector::Peer { blueprint: "-No".into() });
        let fields: Vec<_> = d.issues().into_iter().map(|i| i.field).collect();
        assert_eq!(fields, ["connectors.bad.blueprint"]);
    }

    #[test]
    fn grants_narrow_and_absent_grants_allow() {
        let mut d = Document::default();
        d.connectors.insert("gh".into(), remote("https://x.example/mcp"));
        d.connectors.insert("db".into(), remote("https://y.example/mcp"));
        let member = Caller { role: Some(crate::members::Role::Member), member_id: None };
        let machine = Caller::default();
        assert!(d.granted(&machine, "gh", Some("anything")), "no grants: everything");
        d.grants = Some(vec![
            Grant { to: "role:member".into(), tools: vec!["gh.read_issue".into()] },
            Grant { to: "machines".into(), tools: vec!["db".into()] },
        ]);
        assert!(d.validate().is_ok());
        assert!(d.granted(&member, "gh", Some("read_issue")));
        assert!(d.granted(&member, "gh", None), "a connector with one granted tool is visible");
        assert!(!d.granted(&member, "gh", Some("close_issue")));
        assert!(!d.granted(&member, "db", Some("query")));
        assert!(d.granted(&machine, "db", Some("query")));
        assert!(!d.granted(&machine, "gh", Some("read_issue")));
        d.grants = Some(vec![Grant { to: "everyone".into(), tools: vec!["nope".into()] }]);
        let fields: Vec<_> = d.issues().into_iter().map(|i| i.field).collect();
        assert_eq!(fields, ["grants.0.to", "grants.0.tools.nope"]);
    }

    #[test]
    fn slot_templates_are_checked_and_rendered() {
        let auth: Auth = serde_json::from_value(serde_json::json!({
            "type": "slot", "slot": "shared", "headers": { "Authorization": "Bearer {token}", "X-Org": "{org}-x" }
        }))
        .unwrap();
        let mut d = Document::default();
        d.connectors.insert(
            "c".into(),
            Connector::RemoteMcp {
                url: "https://x.example/mcp".into(),
                transport: RemoteTransport::default(),
                headers: BTreeMap::new(),
                auth: auth.clone(),
                timeout_ms: None,
            },
        );
        assert!(d.validate().is_ok());
        assert_eq!(auth.fields_needed().into_iter().collect::<Vec<_>>(), ["org", "token"]);
        let fields = BTreeMap::from([("token".to_owned(), "t0k".to_owned()), ("org".to_owned(), "acme".to_owned())]);
        assert_eq!(
            auth.render(&fields).unwrap(),
            [("Authorization".to_owned(), "Bearer t0k".to_owned()), ("X-Org".to_owned(), "acme-x".to_owned())]
        );
        assert_eq!(auth.render(&BTreeMap::new()), Err("token".to_owned()));
        let basic: Auth = serde_json::from_value(serde_json::json!({
            "type": "slot", "slot": "personal", "basic": { "username": "user", "password": "pass" }
        }))
        .unwrap();
        let fields = BTreeMap::from([("user".to_owned(), "Aladdin".to_owned()), ("pass".to_owned(), "open sesame".to_owned())]);
        assert_eq!(
            basic.render(&fields).unwrap(),
            [("Authorization".to_owned(), "Basic QWxhZGRpbjpvcGVuIHNlc2FtZQ==".to_owned())]
        );

        let bad: Auth = serde_json::from_value(serde_json::json!({
            "type": "slot", "slot": "shared",
            "headers": { "Authorization": "Bearer s3cret", "X-A": "{to-ken}", "Host": "{h}", "X-Team": "{t}", "X-B": "{open" },
            "basic": { "username": "u", "password": "bad name" }
        }))
        .unwrap();
        let mut fields = Vec::new();
        let statics = BTreeMap::from([("x-team".to_owned(), "blue".to_owned())]);
        check_auth(&bad, &statics, "auth", false, &mut |f, _| fields.push(f));
        assert_eq!(
            fields,
            [
                "auth.headers.Authorization",
                "auth.headers.Host",
                "auth.headers.X-A",
                "auth.headers.X-B",
                "auth.headers.X-Team",
                "auth.basic.password"
            ]
        );
        let empty: Auth = serde_json::from_value(serde_json::json!({ "type": "slot", "slot": "shared" })).unwrap();
        let mut n = 0;
        check_auth(&empty, &BTreeMap::new(), "auth", false, &mut |_, _| n += 1);
        assert_eq!(n, 1, "a slot that sends nothing is refused");
        assert!(serde_json::from_value::<Auth>(serde_json::json!({ "type": "slot", "slot": "team" })).is_err());
    }

    proptest! {
        #[test]
        fn connector_ids(id in "\\PC{0,70}") {
            let ok = valid_connector_id(&id);
            prop_assert_eq!(ok, !id.is_empty() && id.len() <= 64 && id.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-'));
        }

        #[test]
        fn validation_never_panics(url in "\\PC{0,40}", header in "\\PC{0,20}", value in "\\PC{0,20}") {
            let mut d = Document::default();
            d.connectors.insert("c".into(), Connector::RemoteMcp { url, transport: RemoteTransport::Sse, headers: BTreeMap::from([(header, value)]), auth: Auth::None, timeout_ms: None });
            let _ = d.issues();
        }
    }
}
