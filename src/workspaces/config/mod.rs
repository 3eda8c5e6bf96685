//! The configuration document a workspace version holds: its connectors (how each is
//! reached and authenticated, in `auth`; `http_api` connectors in `http_api_description`), grants,
//! pools and classification. Its validation is in `validate`.

pub mod approvals;
mod auth;
pub mod http_api_description;
pub mod redaction;
#[cfg(test)]
mod tests;
mod validate;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

pub use auth::{Auth, Basic, Flow, IdentityProvider, OauthAuth, SlotKind};
use validate::{check_auth, check_headers, check_timeout, check_url};
pub use validate::{valid_connector_id, valid_field_name};

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
    /// What a changed or new downstream tool definition does before an admin approves it.
    /// Left out of stored documents while it is the default, so older documents keep their
    /// digests.
    #[serde(default, skip_serializing_if = "Pinning::is_default")]
    pub pinning: Pinning,
    /// Detectors applied to tool results before agents (and the stash) see them, and to
    /// arguments before anything of them is recorded. Empty: nothing is scanned.
    #[serde(default, skip_serializing_if = "redaction::Redaction::is_empty")]
    pub redaction: redaction::Redaction,
    /// The writes a person must approve before they are made (see `approvals`). Left out of
    /// stored documents while empty, so older documents keep their digests.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub approvals: Vec<approvals::Rule>,
}

/// Pinned tool definitions: the first definition of each tool a workspace sees is pinned (its
/// name, title, description, schemas and annotations); a different one is quarantined until
/// an admin approves it (see `gateway::pins`).
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Pinning {
    /// What agents see of a tool whose definition changed, until the change is approved.
    #[serde(default)]
    pub on_change: OnChange,
    /// A tool a connector lists for the first time after its first catalog is quarantined
    /// too (hidden until approved). Off by default: new tools are pinned as they come.
    #[serde(default)]
    pub quarantine_new_tools: bool,
}

impl Pinning {
    fn is_default(&self) -> bool {
        *self == Pinning::default()
    }
}

/// What agents see of a tool whose definition changed, until the change is approved.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum OnChange {
    /// The pinned definition (with the stricter of the two safety hints, so the change can
    /// never widen what `call_tool` accepts).
    #[default]
    ServePinned,
    /// Nothing: the tool is hidden.
    Hide,
}

/// A pool only ever narrows: its tools, intersected with the caller's grants.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Pool {
    /// Connector ids or exact `connector.tool` addresses.
    pub tools: Vec<String>,
    /// Serve the downstream tools themselves instead of the gateway's surface (so an
    /// unmodified MCP client can use a downstream through the gateway): under their original
    /// names in a pool of one connector, as `connector.tool` in a pool of several.
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
/// `connector.tool` addresses. A connector id in `tools` grants the whole connector: its
/// tools, prompts and resources. `prompts` (connector ids or `connector.prompt`) and
/// `resources` (connector ids or `connector.<exact URI>`) grant those alone.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Grant {
    pub to: String,
    pub tools: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub prompts: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resources: Vec<String>,
}

/// What of a connector besides its tools a grant can name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Part {
    Prompt,
    Resource,
}

/// Whether one grant entry (`connector` or `connector.name`) covers `connector`'s `name`
/// (`None`: any of it).
fn covers(entry: &str, connector: &str, name: Option<&str>) -> bool {
    match entry.split_once('.') {
        None => entry == connector,
        Some((c, n)) => c == connector && name.is_none_or(|name| name == n),
    }
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
        grants.iter().filter(|g| grant_applies(&g.to, caller)).any(|g| g.tools.iter().any(|t| covers(t, connector, tool)))
    }

    /// Whether `caller` may see and use `connector`'s prompt or resource `name` (a prompt's
    /// name, a resource's exact URI; `None`: one not named singly, e.g. a resource template):
    /// granted with the whole connector in `tools`, or in `prompts`/`resources`.
    pub fn granted_part(&self, caller: &Caller, part: Part, connector: &str, name: Option<&str>) -> bool {
        let Some(grants) = &self.grants else { return true };
        grants.iter().filter(|g| grant_applies(&g.to, caller)).any(|g| {
            let named = match part {
                Part::Prompt => &g.prompts,
                Part::Resource => &g.resources,
            };
            let singly = |e: &String| match e.split_once('.') {
                None => e == connector,
                Some((c, n)) => c == connector && name == Some(n),
            };
            g.tools.iter().any(|t| t == connector) || named.iter().any(singly)
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
    HttpApi(http_api_description::HttpApi),
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
