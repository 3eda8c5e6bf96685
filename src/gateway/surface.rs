//! The tool surface every workspace endpoint serves: `search_tools`, `call_tool`,
//! `call_destructive_tool`, `execute_code`, `authorize_connector`, `skills`. Writes are classified
//! fail-closed: a tool is a read only when the workspace says so, or when the downstream
//! declares `readOnlyHint: true` without `destructiveHint: true`.

use rmcp::model::{CallToolResult, ContentBlock, JsonObject, Tool, ToolAnnotations};
use serde_json::{Value, json};

use super::{
    GatewayCtx,
    catalogs::Target,
    credentials::{self, Credential},
    downstream::{self, Failure},
    stash,
};

/// The reserved address that pages a stashed result: `call_tool` with
/// `{"address": "gatehouse.result", "args": {"id": …, "offset": …}}`.
pub const RESULT_ADDRESS: &str = "gatehouse.result";
use crate::{
    AppState,
    workspaces::{Connector, Document, config::Class},
};

pub const INSTRUCTIONS: &str = "Gatehouse serves this workspace's tools through six tools. Find a tool with \
search_tools, call one known read with call_tool, and a write with call_destructive_tool (your client should ask \
the human first). For an unknown address, dependent calls or reducing results, run a JavaScript program with \
execute_code. Read the `usage` skill for the routing rules.";

/// The stash address of a program's own (large) result: no tool address lacks a dot, so it
/// cannot name a connector's tool.
pub const PROGRAM_ADDRESS: &str = "execute_code";

/// Caller-authored text echoed back in errors is capped at this many bytes.
const ECHO_CAP: usize = 512;

const USAGE: &str = "# Using this Gatehouse workspace\n\n\
Tools are addressed as `<connector>.<tool>`.\n\n\
- Unsure which tool? `search_tools` with a few words (filters: `connector`, `safety` = read|write; `limit` 1-100, default 8; `offset`).\n\
- One known read: `call_tool` with `address` and `args`.\n\
- A write (anything not declared read-only): `call_destructive_tool` with the same arguments; clients ask the human first. \
`call_tool` refuses writes with `destructive_tool_requires_approval` and names the exact call to make instead.\n\
- An unknown address, calls that depend on each other, or results to filter and reduce: `execute_code` with \
one async arrow function, e.g. `async () => { const r = await gatehouse.call(\"github.list_issues\", {}); return r.content.length; }`. \
Only the program's return value comes back to you.\n\
- A connector that needs credentials: `authorize_connector` says how to repair it.\n\n\
Routing rule: one known read -> `call_tool`; unknown address, dependent calls or reduction -> `execute_code`; \
writes -> `call_destructive_tool`.\n\n\
## execute_code\n\n\
The program is plain JavaScript (no TypeScript, no `import`/`require`, no timers, network, files or `eval`), \
run in a fresh sandbox each time. The only host object is `gatehouse` (do not declare a variable or parameter \
of that name):\n\
- `await gatehouse.search({query, connector, safety, limit, offset})` -> the same answer as `search_tools`.\n\
- `await gatehouse.describe({addresses: [\"c.t\", ...]})` -> each tool's description, safety and input schema.\n\
- `await gatehouse.call(address, args, {timeoutMs})` -> the tool's MCP result `{content, structuredContent, isError}`; \
a result over 24,000 bytes resolves to `{stashed: {id, total_bytes}}`: read it with `gatehouse.result(id, {offset, maxBytes})`, \
which answers `{chunk, next_offset, total_bytes}`.\n\
- `await gatehouse.skill(\"usage\")`; `gatehouse.emit({type: \"text\", text})` (or image/audio with `data` and `mimeType`) \
adds a content block to the answer; `console.log/warn/error` are returned as `logs`.\n\
Gateway refusals reject with an error whose `code` is stable. Run calls in parallel with `Promise.all`. \
Writes are refused inside programs (`destructive_tool_requires_approval` names the call_destructive_tool call to make) \
except on a pool marked trusted, which allows 10 writes per run, never retried.\n\
Limits per run: 20 host calls (the 21st ends the run with `budget_exceeded`), 250 ms of CPU (waiting for calls does \
not count), 30 s in all, 15 s per call, 64 MiB of memory, a 24,000-character result (larger ones are paged), \
4,000 characters of logs, 32 emitted blocks / 4 MB.\n\n\
Errors carry a stable `code`; `unavailable`, `timeout`, `rate_limited` and `executor_overloaded` are worth retrying.\n";

fn schema(value: Value) -> JsonObject {
    match value {
        Value::Object(map) => map,
        _ => JsonObject::new(),
    }
}

fn tool(name: &'static str, description: &'static str, input: Value, read_only: bool) -> Tool {
    let annotations = ToolAnnotations::new().read_only(read_only).destructive(!read_only);
    Tool::new(name, description, schema(input)).with_annotations(annotations)
}

/// The surface, as `tools/list` shows it on an endpoint whose programs may not write.
pub fn tools() -> Vec<Tool> {
    tools_for(false)
}

/// The surface; `trusted` (a trusted pool) marks `execute_code` as able to write.
pub fn tools_for(trusted: bool) -> Vec<Tool> {
    let call_args = json!({
        "type": "object",
        "properties": {
            "address": { "type": "string", "description": "<connector>.<tool>" },
            "args": { "type": "object", "description": "the tool's arguments" }
        },
        "required": ["address"],
        "additionalProperties": false
    });
    vec![
        tool(
            "search_tools",
            "Find tools of this workspace by words in their connector, name, title and description.",
            json!({
                "type": "object",
                "properties": {
                    "query": { "type": "string" },
                    "connector": { "type": "string" },
                    "safety": { "type": "string", "enum": ["read", "write"] },
                    "limit": { "type": "integer", "minimum": 1, "maximum": 100, "default": 8 },
                    "offset": { "type": "integer", "minimum": 0, "default": 0 }
                },
                "additionalProperties": false
            }),
            true,
        ),
        tool(
            "call_tool",
            "Call a read-only tool by address. Writes are refused: use call_destructive_tool.",
            call_args.clone(),
            true,
        ),
        tool("call_destructive_tool", "Call a tool that may change something. Ask the human before using it.", call_args, false),
        tool(
            "execute_code",
            "Run one async arrow JavaScript function in a sandbox whose only host object is `gatehouse` \
             (search, describe, call, result, skill, emit): discover tools, make dependent or parallel calls and reduce \
             their results server-side, so only the answer comes back. Read the `usage` skill first.",
            json!({
                "type": "object",
                "properties": {
                    "code": {
                        "type": "string",
                        "maxLength": crate::code::MAX_CODE_BYTES,
                        "description": "e.g. async () => { const r = await gatehouse.search({ query: \"issues\" }); return r.total; }"
                    }
                },
                "required": ["code"],
                "additionalProperties": false
            }),
            !trusted,
        ),
        tool(
            "authorize_connector",
            "Say how to repair a connector's authorization.",
            json!({ "type": "object", "properties": { "connector": { "type": "string" } }, "required": ["connector"], "additionalProperties": false }),
            true,
        ),
        tool(
            "skills",
            "The built-in usage guide of this gateway.",
            json!({ "type": "object", "properties": { "name": { "type": "string", "default": "usage" } }, "additionalProperties": false }),
            true,
        ),
    ]
}

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
        }
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
        Failure::BadArguments(message) => Outcome::error("invalid_args", message, None),
        Failure::Auth(p) => Outcome::error(p.code, p.message, None),
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
    if let Some(class) = document.classification.get(&format!("{connector}.{}", tool.name)) {
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
        "search_tools" => Box::pin(search(state, ctx, &args)).await,
        "call_tool" => Box::pin(call(state, ctx, &args, false)).await,
        "call_destructive_tool" => Box::pin(call(state, ctx, &args, true)).await,
        "execute_code" => Box::pin(crate::code::execute(state, ctx, &args)).await,
        "authorize_connector" => Box::pin(authorize(state, ctx, &args)).await,
        "skills" => skill(args.get("name").and_then(Value::as_str).unwrap_or("usage")),
        other => Outcome::error("unknown_tool", format!("this endpoint has no tool `{}`", echo(other)), None),
    }
}

/// A built-in skill by name.
pub fn skill(name: &str) -> Outcome {
    match name {
        "usage" => Outcome::ok(json!({ "name": "usage", "text": USAGE })),
        other => Outcome::error("unknown_skill", format!("no skill named `{}`; try `usage`", echo(other)), None),
    }
}

/// A connector the caller may see (has at least one granted tool of).
fn connector<'d>(ctx: &'d GatewayCtx, id: &str) -> Option<&'d Connector> {
    ctx.bound.document.connectors.get(id).filter(|_| ctx.visible(id, None))
}

/// The key of the connector's session and catalog. It hashes the connector's configuration,
/// so the keys of the bound document's own connectors are computed once per bound copy.
pub(crate) fn key(ctx: &GatewayCtx, id: &str, c: &Connector) -> String {
    let compute = |id: &str, c: &Connector| downstream::key(ctx.tenant.id.0, ctx.bound.workspace.id.0, id, c);
    let bound = &ctx.bound;
    match bound.document.connectors.get(id) {
        Some(own) if std::ptr::eq(own, c) => {
            let keys =
                bound.keys.get_or_init(|| bound.document.connectors.iter().map(|(i, c)| (i.clone(), compute(i, c))).collect());
            keys.get(id).cloned().unwrap_or_else(|| compute(id, c))
        }
        _ => compute(id, c),
    }
}

pub(crate) async fn catalog(
    state: &AppState,
    ctx: &GatewayCtx,
    id: &str,
    key: &str,
    c: &Connector,
) -> Result<std::sync::Arc<Vec<Tool>>, Failure> {
    let target = Target {
        tenant: ctx.tenant.id,
        workspace: ctx.bound.workspace.id.0,
        connector_id: id,
        config_key: downstream::config_key(key),
    };
    if let Connector::Peer { blueprint } = c {
        return super::peer::catalog(state, ctx, id, blueprint).await;
    }
    // An HTTP API's catalog is its configuration; an MCP server is asked with the credential.
    let credential = if matches!(c, Connector::HttpApi(_)) { None } else { credential(state, ctx, id, c).await? };
    let result = state.downstreams.catalog(&state.db, target, key, ctx.bound.catalogs.get(id), c, credential.as_ref()).await;
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

/// The connector's credential for this caller, if it takes one.
async fn credential(state: &AppState, ctx: &GatewayCtx, id: &str, c: &Connector) -> Result<Option<Credential>, Failure> {
    let caller = credentials::Caller {
        tenant: ctx.tenant.id,
        tenant_slug: &ctx.tenant.slug,
        workspace: ctx.bound.workspace.id.0,
        workspace_slug: &ctx.bound.workspace.slug,
        member_id: ctx.caller.member_id,
        epoch: Some(ctx.bound.epoch),
    };
    credentials::resolve(state, &caller, id, c).await.map_err(Failure::Auth)
}

pub async fn search(state: &AppState, ctx: &GatewayCtx, args: &JsonObject) -> Outcome {
    let query = args.get("query").and_then(Value::as_str).unwrap_or("").to_lowercase();
    let only = args.get("connector").and_then(Value::as_str);
    let safety = args.get("safety").and_then(Value::as_str);
    let limit = args.get("limit").and_then(Value::as_u64).unwrap_or(8);
    let offset = args.get("offset").and_then(Value::as_u64).unwrap_or(0) as usize;
    if !(1..=100).contains(&limit) {
        return Outcome::error("invalid_args", "limit is from 1 to 100".into(), None);
    }
    if safety.is_some_and(|s| s != "read" && s != "write") {
        return Outcome::error("invalid_args", "safety is `read` or `write`".into(), None);
    }
    let words: Vec<&str> = query.split_whitespace().collect();
    let mut hits: Vec<(u32, String, Value)> = Vec::new();
    let mut unavailable = Vec::new();
    let visible = ctx.bound.document.connectors.iter().filter(|(id, _)| ctx.visible(id, None));
    for (id, c) in visible.filter(|(id, _)| only.is_none_or(|o| o == id.as_str())) {
        let tools = match catalog(state, ctx, id, &key(ctx, id, c), c).await {
            Ok(tools) => tools,
            Err(f) => {
                unavailable.push(json!({ "connector": id, "code": failure(f).error_code }));
                continue;
            }
        };
        for t in tools.iter().filter(|t| ctx.visible(id, Some(&t.name))) {
            let class = class_name(classify(&ctx.bound.document, id, t));
            if safety.is_some_and(|s| s != class) {
                continue;
            }
            let name = t.name.to_lowercase();
            let title = t.title.clone().unwrap_or_default().to_lowercase();
            let description = t.description.as_deref().unwrap_or("").to_lowercase();
            let score: u32 = words
                .iter()
                .map(|w| {
                    (if name == *w { 10 } else { 0 })
                        + (if name.contains(w) { 5 } else { 0 })
                        + (if id.contains(w) { 3 } else { 0 })
                        + (if title.contains(w) { 3 } else { 0 })
                        + (if description.contains(w) { 1 } else { 0 })
                })
                .sum();
            if words.is_empty() || score > 0 {
                let address = format!("{id}.{}", t.name);
                let entry = json!({ "address": address, "title": t.title, "description": t.description, "safety": class, "inputSchema": t.input_schema });
                hits.push((score, address, entry));
            }
        }
    }
    hits.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    let total = hits.len();
    let results: Vec<Value> = hits.into_iter().skip(offset).take(limit as usize).map(|(_, _, e)| e).collect();
    Outcome::ok(json!({ "results": results, "total": total, "offset": offset, "limit": limit, "unavailable": unavailable }))
}

/// What `call` does with a tool classified as a write.
pub enum Writes<'a> {
    /// Refuse it with `destructive_tool_requires_approval` and the call to make instead.
    Refuse,
    /// Make it (`call_destructive_tool`, native pools: the client asks the human).
    Allow,
    /// Make it unless the gate refuses (programs on a trusted pool): then the gate's refusal.
    Gated(&'a (dyn Fn(&str) -> Option<Outcome> + Sync)),
}

async fn call(state: &AppState, ctx: &GatewayCtx, args: &JsonObject, destructive: bool) -> Outcome {
    call_with(state, ctx, args, if destructive { Writes::Allow } else { Writes::Refuse }).await
}

/// `call_tool`'s path, with `writes` deciding what happens to a write: grants, fail-closed
/// classification, schema check, the downstream call under its deadline, stashing.
pub async fn call_with(state: &AppState, ctx: &GatewayCtx, args: &JsonObject, writes: Writes<'_>) -> Outcome {
    let Some(address) = args.get("address").and_then(Value::as_str) else {
        return Outcome::error("invalid_args", "`address` (<connector>.<tool>) is required".into(), None);
    };
    // Borrowed, not copied: the schema check reads the object as a JSON value.
    let none = Value::Object(JsonObject::new());
    let instance = match args.get("args") {
        None | Some(Value::Null) => &none,
        Some(v) => v,
    };
    let Value::Object(tool_args) = instance else {
        return Outcome::error("invalid_args", "`args` must be an object".into(), None);
    };
    if address == RESULT_ADDRESS {
        return result_page(state, ctx, tool_args).await;
    }
    let unknown = || Outcome::error("unknown_tool", format!("no tool `{}` here; use search_tools", echo(address)), None);
    let Some((id, name)) = address.split_once('.') else { return unknown() };
    let Some(c) = connector(ctx, id) else { return unknown() };
    // Ungranted is indistinguishable from missing, and asks nothing of the downstream.
    if !ctx.visible(id, Some(name)) {
        return unknown();
    }
    let key = key(ctx, id, c);
    let tools = match catalog(state, ctx, id, &key, c).await {
        Ok(tools) => tools,
        Err(f) => return failure(f).about(id, name),
    };
    let Some(tool) = tools.iter().find(|t| t.name == name) else { return unknown().about(id, name) };
    let class = classify(&ctx.bound.document, id, tool);
    if class == Class::Write && matches!(writes, Writes::Refuse) {
        return approval_required(address, tool_args).about(id, name);
    }
    // A peer's tools are checked by the target, against its own current schema.
    let issues = if matches!(c, Connector::Peer { .. }) { Vec::new() } else { state.downstreams.validate(&key, tool, instance) };
    if !issues.is_empty() {
        let issues: Vec<Value> = issues.into_iter().map(|(path, message)| json!({ "path": path, "message": message })).collect();
        let mut out = Outcome::error(
            "invalid_args",
            format!("the arguments do not match {}'s input schema", echo(address)),
            Some(json!({ "issues": issues })),
        )
        .about(id, name);
        out.classification = Some(class_name(class));
        return out;
    }
    let credential = match credential(state, ctx, id, c).await {
        Ok(credential) => credential,
        Err(f) => {
            let mut out = failure(f).about(id, name);
            out.classification = Some(class_name(class));
            return out;
        }
    };
    // Counted only once the call is sure to be made.
    if class == Class::Write
        && let Writes::Gated(gate) = writes
        && let Some(refused) = gate(address)
    {
        let mut out = refused.about(id, name);
        out.classification = Some("write");
        return out;
    }
    if let Connector::Peer { blueprint } = c {
        // The target may write only if this call could: a write allowed here (approved, or
        // counted by the gate) is allowed there; anything else is refused there if it writes.
        let write_allowed = class == Class::Write || matches!(writes, Writes::Allow);
        let mut out = super::peer::call(state, ctx, id, blueprint, name, tool_args.clone(), write_allowed).await;
        if out.error_code.as_deref() == Some("destructive_tool_requires_approval") {
            // The target's refusal names its own address; the caller needs this one.
            out = approval_required(address, tool_args);
        }
        if out.error_code.is_none() || out.error_code.as_deref() == Some("tool_error") {
            let body = serde_json::to_string(&out.result).unwrap_or_default();
            if ctx.peer_path.is_empty() && body.len() > stash::INLINE_CAP_BYTES {
                out.result = stashed(state, ctx, address, &body).await;
                out.stashed = !out.result.is_error.unwrap_or(false);
            }
        }
        let mut out = out.about(id, name);
        out.classification = Some(class_name(class));
        return out;
    }
    let mut out = match state.downstreams.call(ctx.tenant.id.0, &key, c, name, tool_args, credential.as_ref()).await {
        Ok(result) => {
            let body = serde_json::to_string(&result).unwrap_or_default();
            let error_code = result.is_error.unwrap_or(false).then(|| "tool_error".to_owned());
            // Through a peer, the outermost workspace stashes (its caller pages it there).
            let large = body.len() > stash::INLINE_CAP_BYTES && ctx.peer_path.is_empty();
            let result = if large { stashed(state, ctx, address, &body).await } else { result };
            Outcome {
                error_code,
                stashed: large && !result.is_error.unwrap_or(false),
                result,
                connector: None,
                tool: None,
                classification: None,
                result_bytes: body.len().min(i32::MAX as usize) as i32,
            }
        }
        Err(f) => {
            note(state, ctx, "downstream.call", id, c, &f);
            failure(f)
        }
    }
    .about(id, name);
    out.classification = Some(class_name(class));
    out
}

/// The refusal of a write made through `call_tool` (or a program), naming the call to make.
fn approval_required(address: &str, tool_args: &JsonObject) -> Outcome {
    let call = json!({ "address": address, "args": tool_args });
    let mut next = json!({ "tool": "call_destructive_tool" });
    if call.to_string().len() <= ECHO_CAP {
        next["arguments"] = call;
    }
    let mut out = Outcome::error(
        "destructive_tool_requires_approval",
        format!("`{}` may change something; call it with call_destructive_tool after the human approves", echo(address)),
        Some(json!({ "nextAction": next })),
    );
    out.classification = Some("write");
    out
}

/// Tools a program may ask about at once.
pub const DESCRIBE_MAX: usize = 20;

/// What a program needs to call each address: description, safety and schemas. An unknown or
/// ungranted address answers `unknown_tool` in its own entry.
pub async fn describe(state: &AppState, ctx: &GatewayCtx, args: &JsonObject) -> Outcome {
    let Some(addresses) = args.get("addresses").and_then(Value::as_array) else {
        return Outcome::error("invalid_args", "`addresses` is a list of <connector>.<tool>".into(), None);
    };
    if addresses.is_empty() || addresses.len() > DESCRIBE_MAX {
        return Outcome::error("invalid_args", format!("`addresses` holds 1 to {DESCRIBE_MAX} addresses"), None);
    }
    let mut tools = Vec::with_capacity(addresses.len());
    for address in addresses {
        let address = address.as_str().unwrap_or("");
        let unknown = json!({ "address": echo(address), "error": { "code": "unknown_tool" } });
        let Some((id, name)) = address.split_once('.') else {
            tools.push(unknown);
            continue;
        };
        let Some(c) = connector(ctx, id).filter(|_| ctx.visible(id, Some(name))) else {
            tools.push(unknown);
            continue;
        };
        let found = match catalog(state, ctx, id, &key(ctx, id, c), c).await {
            Ok(catalog) => catalog.iter().find(|t| t.name == name).cloned(),
            Err(f) => {
                tools.push(json!({ "address": address, "error": { "code": failure(f).error_code } }));
                continue;
            }
        };
        tools.push(match found {
            Some(t) => json!({
                "address": address,
                "title": t.title,
                "description": t.description,
                "safety": class_name(classify(&ctx.bound.document, id, &t)),
                "inputSchema": t.input_schema,
                "outputSchema": t.output_schema,
            }),
            None => unknown,
        });
    }
    Outcome::ok(json!({ "tools": tools }))
}

/// Says honestly where the connector's credential stands: not needed, set, missing,
/// unreadable, or the vault off, and how to repair it.
async fn authorize(state: &AppState, ctx: &GatewayCtx, args: &JsonObject) -> Outcome {
    let id = args.get("connector").and_then(Value::as_str).unwrap_or("");
    match connector(ctx, id) {
        None => Outcome::error("unknown_connector", format!("this workspace has no connector `{}`", echo(id)), None),
        Some(c) if c.auth().oauth().is_some() => authorize_oauth(state, ctx, id, c).await,
        Some(c) if c.auth().slot().is_some() => {
            let slot = c.auth().slot().map(|k| k.as_str());
            match credential(state, ctx, id, c).await {
                Ok(_) => Outcome::ok(json!({
                    "connector": id,
                    "slot": slot,
                    "status": "set",
                    "message": "The connector's credential is set and opens. If its server still refuses calls, the credential itself is wrong: set it again.",
                })),
                Err(Failure::Auth(p)) => {
                    Outcome::ok(json!({ "connector": id, "slot": slot, "status": p.state, "code": p.code, "message": p.message }))
                }
                Err(f) => failure(f),
            }
        }
        Some(_) => Outcome::ok(json!({
            "connector": id,
            "status": "no_credentials",
            "message": "This connector is configured without credentials, so there is nothing to authorize. If its server refuses calls, an operator must change the connector's configuration.",
        })),
    }
}

/// An OAuth connector: connected, or a signed connect link (15 minutes) for the caller's person.
async fn authorize_oauth(state: &AppState, ctx: &GatewayCtx, id: &str, c: &Connector) -> Outcome {
    let grant = c.auth().oauth().map(|o| o.grant.as_str());
    let problem = match credential(state, ctx, id, c).await {
        Ok(_) => {
            return Outcome::ok(json!({
                "connector": id, "grant": grant, "status": "connected",
                "message": "The connector is authorized. If its server still refuses calls, disconnect it and connect again.",
            }));
        }
        Err(Failure::Auth(p)) if p.code == "auth_required" => p,
        Err(f) => return failure(f),
    };
    let Some(member) = ctx.caller.member_id else {
        return Outcome::ok(json!({
            "connector": id, "grant": grant, "status": problem.state,
            "message": format!(
                "This token carries no person, so it cannot be given a connect link. A person with credential_administration connects the workspace's grant \
                 (POST /api/v1/tenants/{t}/workspaces/{w}/connectors/{id}/oauth/shared/connect), or mails a connect link \
                 (POST /api/v1/tenants/{t}/workspaces/{w}/connectors/{id}/connect-links).",
                t = ctx.tenant.slug, w = ctx.bound.workspace.slug
            ),
        }));
    };
    match crate::oauth::connect_url(state, &ctx.tenant.slug, &ctx.bound.workspace.slug, id, member).await {
        Ok(url) => Outcome::ok(json!({
            "connector": id, "grant": grant, "status": problem.state, "connect_url": url,
            "expires_in_s": crate::oauth::CONNECT_TTL_SECS,
            "message": "Ask the person to open connect_url in a browser where they are signed in to Gatehouse (it is valid for 15 minutes and only for them). A shared grant also needs credential_administration.",
        })),
        Err(e) => Outcome::error(e.code(), e.to_string(), None),
    }
}

/// A native pool's tools: the downstream tools themselves under their original names, with
/// the gateway's fail-closed classification as their annotations. A name two connectors share
/// is served from the first connector (by id) only.
pub async fn native_tools(state: &AppState, ctx: &GatewayCtx) -> Vec<Tool> {
    native_index(state, ctx).await.into_iter().map(|(_, _, t)| t).collect()
}

async fn native_index(state: &AppState, ctx: &GatewayCtx) -> Vec<(String, Tool, Tool)> {
    let mut out: Vec<(String, Tool, Tool)> = Vec::new();
    for (id, c) in ctx.bound.document.connectors.iter().filter(|(id, _)| ctx.visible(id, None)) {
        let Ok(tools) = catalog(state, ctx, id, &key(ctx, id, c), c).await else { continue };
        for t in tools.iter().filter(|t| ctx.visible(id, Some(&t.name))) {
            if out.iter().any(|(_, _, seen)| seen.name == t.name) {
                tracing::warn!(tool = %t.name, connector = %id, "native pool: a tool of this name is already served");
                continue;
            }
            let mut shown = t.clone();
            let read = classify(&ctx.bound.document, id, t) == Class::Read;
            shown.annotations = Some(ToolAnnotations::new().read_only(read).destructive(!read));
            out.push((id.clone(), t.clone(), shown));
        }
    }
    out
}

/// Calls a native pool's tool by its original name; the same checks as `call_destructive_tool`
/// (the annotations already told the client which tools change things).
pub async fn native_call(state: &AppState, ctx: &GatewayCtx, name: &str, args: JsonObject) -> Outcome {
    let index = native_index(state, ctx).await;
    let Some((id, _, _)) = index.iter().find(|(_, _, t)| t.name == name) else {
        return Outcome::error("unknown_tool", format!("this pool has no tool `{}`", echo(name)), None);
    };
    let mut wrapped = JsonObject::new();
    wrapped.insert("address".into(), Value::String(format!("{id}.{name}")));
    wrapped.insert("args".into(), Value::Object(args));
    call(state, ctx, &wrapped, true).await
}

/// Stashes a result over the inline cap and answers with how to page it. If it cannot be
/// stashed, the call still happened: say so rather than drop the answer silently.
pub(crate) async fn stashed(state: &AppState, ctx: &GatewayCtx, address: &str, body: &str) -> CallToolResult {
    match stash::put(&state.db, ctx.tenant.id, ctx.bound.workspace.id.0, &ctx.actor_id, address, body).await {
        Ok(id) => {
            let (_, _, next) = stash::page(body, 0);
            CallToolResult::success(vec![ContentBlock::text(
                json!({
                    "stashed": { "id": id, "total_bytes": body.len(), "expires_in_s": stash::TTL_SECS as u64 },
                    "message": "The result is larger than 24,000 bytes; read it in pages.",
                    "nextAction": { "tool": "call_tool", "arguments": { "address": RESULT_ADDRESS, "args": { "id": id, "offset": 0 } } },
                    "pages": next.map_or(1, |_| body.len().div_ceil(stash::PAGE_BYTES)),
                })
                .to_string(),
            )])
        }
        Err(e) => {
            tracing::error!(error = %e, "could not stash a large result");
            let error = json!({ "error": { "code": "result_too_large", "message": "the call completed, but its result was too large to return and could not be stashed" } });
            CallToolResult::error(vec![ContentBlock::text(error.to_string())])
        }
    }
}

async fn result_page(state: &AppState, ctx: &GatewayCtx, args: &JsonObject) -> Outcome {
    result_page_within(state, ctx, args, stash::PAGE_BYTES).await
}

/// A page of at most `max_bytes` (and of `args.maxBytes` when smaller) of a stashed result.
pub async fn result_page_within(state: &AppState, ctx: &GatewayCtx, args: &JsonObject, max_bytes: usize) -> Outcome {
    let Some(id) = args.get("id").and_then(Value::as_str).and_then(|s| s.parse::<uuid::Uuid>().ok()) else {
        return Outcome::error("invalid_args", "`args.id` is the stashed result's id".into(), None);
    };
    let offset = args.get("offset").and_then(Value::as_u64).unwrap_or(0) as usize;
    let missing = || Outcome::error("unknown_result", "no such stashed result (they last 15 minutes)".into(), None);
    let Ok(Some((address, body))) = stash::get(&state.db, ctx.tenant.id, ctx.bound.workspace.id.0, &ctx.actor_id, id).await
    else {
        return missing();
    };
    // The caller's grants are checked again on every page. A program's own result was made
    // from what the same caller could see when it ran.
    if address != PROGRAM_ADDRESS {
        let Some((connector, tool)) = address.split_once('.') else { return missing() };
        if !ctx.visible(connector, Some(tool)) {
            return missing();
        }
    }
    let max = args.get("maxBytes").and_then(Value::as_u64).map_or(max_bytes, |m| (m as usize).clamp(1, max_bytes));
    let (chunk, start, next) = stash::page_within(&body, offset, max);
    Outcome::ok(
        json!({ "id": id, "address": address, "offset": start, "next_offset": next, "total_bytes": body.len(), "chunk": chunk }),
    )
}
