//! The tool surface every workspace endpoint serves: `search_tools`, `call_tool`,
//! `call_destructive_tool`, `execute_code`, `authorize_connector`, `skills`. Writes are classified
//! fail-closed: a tool is a read only when the workspace says so, or when the downstream
//! declares `readOnlyHint: true` without `destructiveHint: true`.
//!
//! This file holds what every tool shares (the outcome of a call, the connector lookups and
//! the classification); each tool lives in its own file below.

mod authorize;
mod call;
mod hold;
mod native;
mod native_server;
mod search;
mod skills;
mod tools;

pub use call::{Writes, call_with, result_page_within};
pub use hold::URL_ELICITATION_REQUIRED;
pub use native::{Hints, native_call, native_list, native_request, native_tools, per_caller};
pub use native_server::{may_see_resource, native_refresh, native_server, native_watches, subscribable};
pub use search::{DESCRIBE_MAX, describe, search};
pub use skills::{INSTRUCTIONS, skill};
pub use tools::{tools, tools_for};

use rmcp::model::{CallToolResult, ContentBlock, JsonObject, Tool};
use serde_json::{Value, json};

use super::{
    GatewayCtx,
    catalogs::Target,
    credentials::{self, Credential},
    downstream::{self, Failure},
};
use crate::{
    AppState,
    workspaces::{Connector, Document, config::Class},
};

/// The reserved address that pages a stashed result: `call_tool` with
/// `{"address": "gatehouse.result", "args": {"id": …, "offset": …}}`.
pub const RESULT_ADDRESS: &str = "gatehouse.result";

/// The stash address of a program's own (large) result: no tool address lacks a dot, so it
/// cannot name a connector's tool.
pub const PROGRAM_ADDRESS: &str = "execute_code";

/// Caller-authored text echoed back in errors is capped at this many bytes.
const ECHO_CAP: usize = 512;

/// A call's result plus what its activity row records.
pub struct Outcome {
    pub result: CallToolResult,
    pub connector: Option<String>,
    pub tool: Option<String>,
    pub error_code: Option<String>,
    pub classification: Option<&'static str>,
    pub result_bytes: i32,
    /// The result was stashed: `result` says how to page it.
    pub stashed: bool,
    /// The downstream's own JSON-RPC error, which a native pool answers as that error (the
    /// six-tool surface answers `result`, a `downstream_error`).
    pub jsonrpc: Option<rmcp::ErrorData>,
    /// Not a result yet (2026-07-28): the downstream asks the agent for input, or the agent's
    /// retry was refused. `result` then holds nothing the agent sees.
    pub interim: Option<Interim>,
    /// What the workspace's redaction detectors found in the arguments and the result (a
    /// count; nothing of what they found is kept).
    pub redactions: u32,
    /// The quota limit that refused the call, by name.
    pub quota: Option<String>,
    /// The approval this call ran under (used by it), when the workspace's policy held it back.
    pub approval_id: Option<uuid::Uuid>,
}

/// What a call answers instead of a result on 2026-07-28.
pub enum Interim {
    /// The downstream's `InputRequiredResult`, its `requestState` sealed by the gateway.
    InputRequired(Value),
    /// The agent's `requestState` was refused; nothing ran downstream.
    Refused(crate::gateway::input::Refused),
}

impl Outcome {
    pub(crate) fn ok(value: Value) -> Outcome {
        let text = value.to_string();
        let bytes = text.len() as i32;
        Outcome {
            result: CallToolResult::success(vec![ContentBlock::text(text)]),
            connector: None,
            tool: None,
            error_code: None,
            classification: None,
            result_bytes: bytes,
            stashed: false,
            jsonrpc: None,
            interim: None,
            redactions: 0,
            quota: None,
            approval_id: None,
        }
    }

    /// A call answered with an [`Interim`] (recorded as `input_required`, or the refusal's code).
    pub(crate) fn interim(interim: Interim) -> Outcome {
        let code = match &interim {
            Interim::InputRequired(_) => "input_required",
            Interim::Refused(r) => r.code,
        };
        let mut out = Outcome::error(code, String::new(), None);
        out.interim = Some(interim);
        out
    }

    pub(crate) fn error(code: &str, message: String, extra: Option<Value>) -> Outcome {
        let mut error = json!({ "code": code, "message": message });
        if let (Some(Value::Object(extra)), Value::Object(map)) = (extra, &mut error) {
            map.extend(extra);
        }
        Outcome {
            result: CallToolResult::error(vec![ContentBlock::text(json!({ "error": error }).to_string())]),
            connector: None,
            tool: None,
            error_code: Some(code.to_owned()),
            classification: None,
            result_bytes: 0,
            stashed: false,
            jsonrpc: None,
            interim: None,
            redactions: 0,
            quota: None,
            approval_id: None,
        }
    }

    /// A gateway refusal (not a downstream tool's own error result): its `{"code", "message", …}`.
    pub(crate) fn refusal(&self) -> Option<Value> {
        let code = self.error_code.as_deref()?;
        if code == "tool_error" {
            return None;
        }
        let text = self.result.content.first().and_then(|c| c.as_text()).map(|t| t.text.as_str()).unwrap_or("");
        let parsed: Value = serde_json::from_str(text).unwrap_or(Value::Null);
        Some(match parsed.get("error") {
            Some(error) => error.clone(),
            None => json!({ "code": code, "message": text }),
        })
    }

    fn about(mut self, connector: &str, tool: &str) -> Outcome {
        self.connector = Some(connector.to_owned());
        self.tool = Some(tool.to_owned());
        self
    }
}

/// Caps caller-authored text echoed back in an error.
pub(crate) fn echo(text: &str) -> String {
    let mut end = text.len().min(ECHO_CAP);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_owned()
}

fn failure(f: Failure) -> Outcome {
    match f {
        Failure::Unavailable(detail) => {
            tracing::info!(detail, "downstream unavailable");
            Outcome::error(
                "unavailable",
                "the connector's server cannot be reached; retry shortly".into(),
                Some(json!({ "retryable": true })),
            )
        }
        Failure::Timeout(ms) => Outcome::error(
            "timeout",
            format!("the connector's server did not answer within {ms} ms"),
            Some(json!({ "retryable": true })),
        ),
        Failure::Rejected(message) => Outcome::error("downstream_error", message, None),
        Failure::JsonRpc(error) => {
            let mut out = Outcome::error("downstream_error", error.message.to_string(), None);
            out.jsonrpc = Some(error);
            out
        }
        Failure::BadArguments(message) => Outcome::error("invalid_args", message, None),
        Failure::Auth(p) => Outcome::error(p.code, p.message, None),
        // Turned into `Auth` by [`repair`] where the call knows its connector; never
        // `unavailable` either way.
        Failure::Refused { status, .. } => Outcome::error(
            "auth_required",
            format!(
                "the connector's server refused its credential (HTTP {status}); call authorize_connector for how to repair it"
            ),
            None,
        ),
        Failure::Peer { code, message } => Outcome::error(code, message, None),
        Failure::RateLimited => Outcome::error(
            "rate_limited",
            "this tenant has too many calls in flight; retry shortly".into(),
            Some(json!({ "retryable": true, "retryAfterMs": 250 })),
        ),
    }
}

/// The read/write classification of a downstream tool, fail-closed.
pub fn classify(document: &Document, connector: &str, tool: &Tool) -> Class {
    // Most workspaces classify no tool by hand: no address is formatted for them.
    if !document.classification.is_empty()
        && let Some(class) = document.classification.get(&format!("{connector}.{}", tool.name))
    {
        return *class;
    }
    let annotations = tool.annotations.as_ref();
    let read_only = annotations.and_then(|a| a.read_only_hint) == Some(true);
    let destructive = annotations.and_then(|a| a.destructive_hint) == Some(true);
    if read_only && !destructive { Class::Read } else { Class::Write }
}

fn class_name(class: Class) -> &'static str {
    match class {
        Class::Read => "read",
        Class::Write => "write",
    }
}

pub async fn dispatch(state: &AppState, ctx: &GatewayCtx, name: &str, args: JsonObject) -> Outcome {
    // Each branch's future is boxed: rmcp spawns a task per request around this one, and an
    // unboxed future would be as large as the largest branch (tens of kilobytes), copied on
    // every spawn and poll hand-off. Measured with callgrind: see docs/benchmarks.md.
    match name {
        "search_tools" => Box::pin(search::search(state, ctx, &args)).await,
        "call_tool" => Box::pin(call::call(state, ctx, &args, false)).await,
        "call_destructive_tool" => Box::pin(call::call(state, ctx, &args, true)).await,
        "execute_code" => Box::pin(crate::code::execute(state, ctx, &args)).await,
        "authorize_connector" => Box::pin(authorize::authorize(state, ctx, &args)).await,
        "skills" => skill(args.get("name").and_then(Value::as_str).unwrap_or("usage")),
        other => Outcome::error("unknown_tool", format!("this endpoint has no tool `{}`", echo(other)), None),
    }
}

/// A connector the caller may see (has at least one granted tool of).
fn connector<'d>(ctx: &'d GatewayCtx, id: &str) -> Option<&'d Connector> {
    ctx.bound.document.connectors.get(id).filter(|_| ctx.visible(id, None))
}

/// The key of the connector's session and catalog. It hashes the connector's configuration,
/// so the keys of the bound document's own connectors are computed once per bound copy.
pub(crate) fn key(ctx: &GatewayCtx, id: &str, c: &Connector) -> String {
    let bound = &ctx.bound;
    match bound.document.connectors.get(id) {
        Some(own) if std::ptr::eq(own, c) => keys(ctx.tenant.id, bound).get(id).cloned(),
        _ => None,
    }
    .unwrap_or_else(|| downstream::key(ctx.tenant.id.0, bound.workspace.id.0, id, c))
}

/// The keys of the bound document's own connectors, by connector id (computed once per copy).
pub(crate) fn keys(tenant: crate::ids::TenantId, bound: &crate::workspaces::Bound) -> &crate::maps::FastMap<String, String> {
    bound.keys.get_or_init(|| {
        bound
            .document
            .connectors
            .iter()
            .map(|(i, c)| (i.clone(), downstream::key(tenant.0, bound.workspace.id.0, i, c)))
            .collect()
    })
}

/// A configuration this replica has just read for the workspace: the session pools of its
/// connectors' earlier configurations are closed (their sessions deleted at the downstream).
pub(crate) fn configured(state: &crate::AppState, tenant: crate::ids::TenantId, bound: &crate::workspaces::Bound) {
    let current: Vec<&str> = keys(tenant, bound).values().map(String::as_str).collect();
    state.downstreams.retire(tenant.0, bound.workspace.id.0, &current);
}

/// Where a connector's catalog is kept in the shared cache.
pub(crate) fn target<'a>(ctx: &'a GatewayCtx, id: &'a str, key: &'a str) -> Target<'a> {
    Target {
        tenant: ctx.tenant.id,
        workspace: ctx.bound.workspace.id.0,
        connector_id: id,
        config_key: downstream::config_key(key),
        pinning: ctx.bound.document.pinning,
    }
}

#[tracing::instrument(name = "gateway::catalog", skip_all, fields(tenant = %ctx.tenant.id, workspace = %ctx.bound.workspace.slug, connector = id))]
pub(crate) async fn catalog(
    state: &AppState,
    ctx: &GatewayCtx,
    id: &str,
    key: &str,
    c: &Connector,
) -> Result<std::sync::Arc<super::catalogs::Catalog>, Failure> {
    let target = target(ctx, id, key);
    if let Connector::Peer { blueprint } = c {
        return Box::pin(super::peer::catalog(state, ctx, id, blueprint)).await;
    }
    // An HTTP API's catalog is its configuration; an MCP server is asked with the credential.
    let credential = if matches!(c, Connector::HttpApi(_)) { None } else { credential(state, ctx, id, c).await? };
    let result = match state.downstreams.catalog(&state.db, target, key, ctx.bound.catalogs.get(id), c, credential.as_ref()).await
    {
        // Boxed: the repair's future stays out of every call's.
        Err(f) => Err(Box::pin(repair(state, ctx, id, c, credential.as_ref(), f)).await),
        ok => ok,
    };
    if let Err(f) = &result {
        note(state, ctx, "downstream.catalog", id, c, f);
    }
    result
}

/// Records a downstream that could not be reached or did not answer as an ops failure (never
/// blocks: it only queues). The message is the gateway's own capped error text, from which
/// URLs are already stripped; never a downstream body.
fn note(state: &AppState, ctx: &GatewayCtx, operation: &'static str, id: &str, c: &Connector, f: &Failure) {
    let (status, code, message) = match f {
        Failure::Unavailable(detail) => (crate::ops::Status::Failed, "unavailable", format!("connector {}: {detail}", echo(id))),
        Failure::Timeout(ms) => {
            (crate::ops::Status::TimedOut, "timeout", format!("connector {}: no answer within {ms} ms", echo(id)))
        }
        _ => return,
    };
    crate::ops::record(
        &state.ops,
        crate::ops::Failure {
            operation,
            stage: c.kind().to_owned(),
            tenant: Some(ctx.tenant.id.0),
            workspace: Some(ctx.bound.workspace.id.0),
            status,
            code: code.to_owned(),
            message,
            reference: ctx.request_id.clone(),
        },
    );
}

/// A downstream's refusal of the call's credential (HTTP 401/403) as the `auth_required`
/// problem with its repair path, the grant marked and the refusal recorded
/// ([`credentials::refused`]); any other failure unchanged.
pub(crate) async fn repair(
    state: &AppState,
    ctx: &GatewayCtx,
    id: &str,
    c: &Connector,
    credential: Option<&Credential>,
    f: Failure,
) -> Failure {
    let Failure::Refused { status, challenge } = f else { return f };
    let caller = caller(ctx);
    Failure::Auth(credentials::refused(state, &caller, id, c, credential, status, challenge.as_deref()).await)
}

fn caller(ctx: &GatewayCtx) -> credentials::Caller<'_> {
    credentials::Caller {
        tenant: ctx.tenant.id,
        tenant_slug: &ctx.tenant.slug,
        workspace: ctx.bound.workspace.id.0,
        workspace_slug: &ctx.bound.workspace.slug,
        member_id: ctx.caller.member_id,
        epoch: Some(ctx.bound.epoch),
    }
}

/// The connector's credential for this caller, if it takes one.
async fn credential(state: &AppState, ctx: &GatewayCtx, id: &str, c: &Connector) -> Result<Option<Credential>, Failure> {
    credentials::resolve(state, &caller(ctx), id, c).await.map_err(Failure::Auth)
}
