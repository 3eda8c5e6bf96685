//! A native pool: the downstream tools themselves instead of the six, and the downstreams'
//! prompts, resources, completion and logging relayed.

use rmcp::{
    ErrorData,
    model::{CacheScope, JsonObject, ListToolsResult, Tool, ToolAnnotations},
};
use serde_json::Value;

use super::native_server::declaring;
use super::{Outcome, catalog, classify, credential, echo, key};
use crate::{
    AppState,
    gateway::{
        GatewayCtx,
        downstream::Failure,
        input::{self, Relayed, Stopped},
    },
    workspaces::{
        Connector,
        config::{Class, Part},
    },
};

/// Pages of a relayed list followed per connector.
const MAX_PAGES: usize = 64;

/// Whether names here carry their connector id (`id.name`): the pool names more than one
/// connector. Decided by the pool's configuration alone, so a name does not change with the
/// caller's grants or with a downstream that is briefly unreachable. Connector ids are
/// `[a-z0-9_-]`, never `.`, so the first `.` of a prefixed name ends the id.
pub(super) fn several(ctx: &GatewayCtx) -> bool {
    let Some((_, pool)) = ctx.pool.as_ref() else { return false };
    let mut ids: Vec<&str> = pool
        .tools
        .iter()
        .map(|t| t.split_once('.').map_or(t.as_str(), |(id, _)| id))
        .filter(|id| ctx.bound.document.connectors.contains_key(*id))
        .collect();
    ids.sort_unstable();
    ids.dedup();
    ids.len() > 1
}

/// A name as this pool shows it: with several connectors, `id.name`.
fn shown(several: bool, id: &str, name: &str) -> String {
    if several { format!("{id}.{name}") } else { name.to_owned() }
}

/// The connector a shown name belongs to and its name there (the prefix taken off): with one
/// connector, that connector and the name as it is. `None`: the prefix names no connector
/// here (answered as a name that does not exist).
fn owner<'c>(
    several: bool,
    connectors: &[(&'c String, &'c Connector)],
    name: &str,
) -> Option<(&'c String, &'c Connector, String)> {
    if !several {
        let (id, c) = connectors.first()?;
        return Some((id, c, name.to_owned()));
    }
    let (id, rest) = name.split_once('.')?;
    connectors.iter().find(|(i, _)| i.as_str() == id).map(|(i, c)| (*i, *c, rest.to_owned()))
}

/// A native pool's tools: the downstream tools themselves, under their original names in a
/// pool of one connector and as `connector.tool` in a pool of several, with the gateway's
/// fail-closed classification as their annotations.
///
/// The list is sorted by name, so every replica, before and after a restart, lists the same
/// tools in the same order whatever order the downstreams list theirs in (a client that caches
/// the list, or a prompt cache keyed on it, sees no change where nothing changed).
///
/// A connector whose tools cannot be listed is left out, except that a pool of one connector
/// whose credential needs a person (the server refused it, or it is missing or unreadable)
/// answers that problem as the list's error: an empty list would hide the only thing the
/// agent's person can act on (`data.code` is `auth_required`, …; see [`credential_needed`]).
///
/// With the list, its caching hints (2026-07-28): fresh as long as every catalog it draws on
/// ([`crate::gateway::catalogs::Catalog::fresh_for`]; a connector that cannot be listed now
/// makes it stale at once), and private when what the caller sees depends on who it is.
#[tracing::instrument(name = "gateway::list_tools", skip_all, fields(tenant = %ctx.tenant.id, workspace = %ctx.bound.workspace.slug))]
pub async fn native_tools(state: &AppState, ctx: &GatewayCtx) -> Result<(Vec<Tool>, Hints), ErrorData> {
    let mut hints = Hints::new(per_caller(ctx));
    let (index, failed) = native_index(state, ctx, None, Some(&mut hints)).await;
    if !several(ctx)
        && let Some((id, Failure::Auth(problem))) = failed.into_iter().find(|(_, f)| credential_needed(f))
    {
        let data = serde_json::json!({ "code": problem.code, "connector": id, "state": problem.state });
        return Err(ErrorData::internal_error(problem.message, Some(data)));
    }
    let mut tools: Vec<Tool> = index.into_iter().map(|(_, _, t)| t).collect();
    tools.sort_by(|a, b| a.name.cmp(&b.name));
    Ok((tools, hints))
}

/// Whether a failure is a credential that only a person can repair (connect again, set it,
/// fix the vault), not a passing outage.
fn credential_needed(f: &Failure) -> bool {
    matches!(f, Failure::Auth(problem) if problem.code != "unavailable")
}

/// `(connector id, the downstream's tool, the tool as shown here)` of every tool the caller
/// may see here, and the failure of each connector whose tools could not be listed; `only`:
/// of that connector alone. `hints`: narrowed by each catalog drawn on.
async fn native_index(
    state: &AppState,
    ctx: &GatewayCtx,
    only: Option<&str>,
    mut hints: Option<&mut Hints>,
) -> (Vec<(String, Tool, Tool)>, Vec<(String, Failure)>) {
    let several = several(ctx);
    let now = chrono::Utc::now();
    let mut out: Vec<(String, Tool, Tool)> = Vec::new();
    let mut failed = Vec::new();
    let connectors = ctx.bound.document.connectors.iter().filter(|(id, _)| only.is_none_or(|o| o == id.as_str()));
    for (id, c) in connectors.filter(|(id, _)| ctx.visible(id, None)) {
        let listed = catalog(state, ctx, id, &key(ctx, id, c), c).await;
        if let Some(hints) = hints.as_deref_mut() {
            hints.fresh_for(listed.as_ref().map_or(0, |catalog| catalog.fresh_for(now)));
            hints.private |= listed.as_ref().is_ok_and(|catalog| catalog.listing.private);
        }
        let tools = match listed {
            Ok(tools) => tools,
            Err(f) => {
                failed.push((id.clone(), f));
                continue;
            }
        };
        for t in tools.tools.iter().filter(|t| ctx.visible(id, Some(&t.name))) {
            let name = shown(several, id, &t.name);
            // Only a downstream that lists one name twice can clash (prefixes are distinct).
            if out.iter().any(|(_, _, seen)| seen.name == name) {
                tracing::warn!(tool = %t.name, connector = %id, "native pool: a tool of this name is already served");
                continue;
            }
            let mut tool = t.clone();
            tool.name = name.into();
            let read = classify(&ctx.bound.document, id, t) == Class::Read;
            tool.annotations = Some(ToolAnnotations::new().read_only(read).destructive(!read));
            out.push((id.clone(), t.clone(), tool));
        }
    }
    (out, failed)
}

/// Calls a native pool's tool by the name it is shown under; the same checks as
/// `call_destructive_tool` (the annotations already told the client which tools change
/// things). The downstream is called by its own name, so the `Mcp-Name` and `Mcp-Param-*`
/// headers that go down are computed for that name and the downstream's schema.
pub async fn native_call(state: &AppState, ctx: &GatewayCtx, name: &str, args: JsonObject) -> Outcome {
    let unknown = || Outcome::error("unknown_tool", format!("this pool has no tool `{}`", echo(name)), None);
    // With several connectors only the named one's catalog is needed; an unknown prefix is
    // an unknown tool.
    let only = match several(ctx) {
        false => None,
        true => match name.split_once('.') {
            Some((id, _)) => Some(id),
            None => return unknown(),
        },
    };
    let (index, failed) = native_index(state, ctx, only, None).await;
    let Some((id, tool, _)) = index.iter().find(|(_, _, t)| t.name == name) else {
        // The connector the tool would be of could not list its tools: that is the answer
        // (`auth_required` with its repair path, `unavailable`, …), not an unknown tool.
        let local = name.split_once('.').filter(|_| only.is_some()).map_or(name, |(_, tool)| tool);
        return match failed.into_iter().next() {
            Some((id, f)) => super::failure(f).about(&id, local),
            None => unknown(),
        };
    };
    // A 2026-07-28 request's `Mcp-Param-*` headers must say what its arguments say.
    if let Some(sent) = ctx.param_headers.as_deref()
        && let Err(reason) = crate::gateway::param_headers::check(sent, &tool.input_schema, &args)
    {
        let mut out = Outcome::error("header_mismatch", reason.clone(), None);
        out.jsonrpc = Some(ErrorData::header_mismatch(reason, None));
        return out;
    }
    let mut wrapped = JsonObject::new();
    wrapped.insert("address".into(), Value::String(format!("{id}.{}", tool.name)));
    wrapped.insert("args".into(), Value::Object(args));
    super::call::call(state, ctx, &wrapped, true).await
}

/// The MCP connectors whose prompts and resources a native pool relays: those the caller may
/// see here (grants narrowed by the pool). A connector of the pool whose tools are all
/// ungranted is not listed, so its prompts and resources look missing too.
pub(super) fn relayed(ctx: &GatewayCtx) -> Vec<(&String, &Connector)> {
    ctx.bound
        .document
        .connectors
        .iter()
        .filter(|(id, c)| matches!(c, Connector::RemoteMcp { .. }) && ctx.visible(id, None))
        .collect()
}

/// One relayed request to one connector, with the caller's credential for it; what the
/// downstream sends on the request's stream reaches the agent's when the request has one
/// (the direct path's, handshake era).
async fn relay(
    state: &AppState,
    ctx: &GatewayCtx,
    id: &str,
    c: &Connector,
    method: &str,
    params: &Value,
) -> Result<Value, Failure> {
    relay_on(state, ctx, (id, c), (method, params), ctx.upstream.as_ref()).await
}

/// [`relay`] with what the downstream sends on the request's stream going to `upstream`.
#[tracing::instrument(name = "gateway::relay", skip_all, fields(connector = connector.0, method = request.0))]
async fn relay_on(
    state: &AppState,
    ctx: &GatewayCtx,
    connector: (&str, &Connector),
    request: (&str, &Value),
    upstream: Option<&crate::gateway::upstream::Upstream>,
) -> Result<Value, Failure> {
    let (id, c) = connector;
    let credential = credential(state, ctx, id, c).await?;
    match state.downstreams.relay(ctx.tenant.id.0, &key(ctx, id, c), c, request, credential.as_ref(), upstream).await {
        Err(f) => Err(super::repair(state, ctx, id, c, credential.as_ref(), f).await),
        ok => ok,
    }
}

/// Whether what the caller sees here depends on who the caller is: the workspace has grants,
/// or a relayed connector runs on each member's own credential. Such a list or read may only
/// be cached by the caller's own client (`cacheScope: "private"`).
pub fn per_caller(ctx: &GatewayCtx) -> bool {
    ctx.bound.document.grants.is_some() || relayed(ctx).iter().any(|(_, c)| c.auth().personal())
}

/// The caching hints (2026-07-28) of a list drawn from several downstreams' pages: it is fresh
/// no longer than the shortest-lived page (a page without `ttlMs` is stale at once), and
/// shareable only if every page is and the list is the same for every caller.
#[derive(Debug, PartialEq, Eq)]
pub struct Hints {
    pub ttl_ms: u64,
    pub private: bool,
}

impl Hints {
    pub fn new(per_caller: bool) -> Hints {
        Hints { ttl_ms: u64::MAX, private: per_caller }
    }

    /// Narrows the hints to a list fresh for `ms` more milliseconds.
    pub fn fresh_for(&mut self, ms: u64) {
        self.ttl_ms = self.ttl_ms.min(ms);
    }

    /// Narrows the hints by one page's own.
    pub fn page(&mut self, page: &Value) {
        self.ttl_ms = self.ttl_ms.min(page["ttlMs"].as_u64().unwrap_or(0));
        self.private |= page["cacheScope"] == "private";
    }

    /// How long the list is fresh (nothing drawn on: stale at once).
    fn ttl(&self) -> u64 {
        if self.ttl_ms == u64::MAX { 0 } else { self.ttl_ms }
    }

    /// The hints as the result's fields.
    pub fn write(&self, result: &mut Value) {
        result["ttlMs"] = Value::from(self.ttl());
        result["cacheScope"] = Value::String(if self.private { "private" } else { "public" }.into());
    }

    /// The hints on a tool list.
    pub fn apply(&self, listed: ListToolsResult) -> ListToolsResult {
        let scope = if self.private { CacheScope::Private } else { CacheScope::Public };
        listed.with_ttl_ms(self.ttl()).with_cache_scope(scope)
    }
}

/// `prompts/list`, `resources/list` or `resources/templates/list` over the pooled connectors
/// that declare the capability, every page of each; `field` is the list's member. With
/// several connectors each item's name carries its connector id (`id.name`); URIs stay the
/// downstreams' own. `hinted`: the caller is on 2026-07-28, so the list carries its caching
/// hints ([`Hints`]).
#[tracing::instrument(name = "gateway::list", skip_all, fields(tenant = %ctx.tenant.id, workspace = %ctx.bound.workspace.slug, method = method))]
pub async fn native_list(state: &AppState, ctx: &GatewayCtx, method: &str, field: &str, hinted: bool) -> Value {
    let mut hints = Hints::new(per_caller(ctx));
    let capability = if field == "prompts" { "prompts" } else { "resources" };
    let connectors = declaring(state, ctx, capability).await;
    let several = several(ctx);
    let mut items = Vec::new();
    for (id, c) in connectors {
        let mut params = serde_json::json!({});
        for _ in 0..MAX_PAGES {
            let mut page = match relay(state, ctx, id, c, method, &params).await {
                Ok(page) => {
                    hints.page(&page);
                    page
                }
                Err(f) => {
                    tracing::info!(connector = %id, method, failure = ?f, "native pool: a connector's list is left out");
                    break;
                }
            };
            for mut item in page[field].take().as_array().cloned().unwrap_or_default() {
                if !granted_item(ctx, id, field, &item) {
                    continue;
                }
                if let Some(name) = item["name"].as_str() {
                    item["name"] = Value::String(shown(several, id, name));
                }
                items.push(item);
            }
            match page["nextCursor"].as_str() {
                Some(next) if !next.is_empty() => params = serde_json::json!({ "cursor": next }),
                _ => break,
            }
        }
    }
    let mut result = serde_json::json!({ field: items });
    if hinted {
        hints.write(&mut result);
    }
    result
}

/// Whether the caller's grants let it see one item of a connector's list: a prompt by its
/// name, a resource by its URI, a resource template only with the connector's resources whole.
fn granted_item(ctx: &GatewayCtx, id: &str, field: &str, item: &Value) -> bool {
    match field {
        "prompts" => ctx.visible_part(Part::Prompt, id, Some(item["name"].as_str().unwrap_or_default())),
        "resources" => ctx.visible_part(Part::Resource, id, Some(item["uri"].as_str().unwrap_or_default())),
        _ => ctx.visible_part(Part::Resource, id, None),
    }
}

/// The connectors whose resource `uri` the caller may see (`None`: a resource template).
fn granted_resource<'c>(
    ctx: &GatewayCtx,
    connectors: Vec<(&'c String, &'c Connector)>,
    uri: Option<&str>,
) -> Vec<(&'c String, &'c Connector)> {
    connectors.into_iter().filter(|(id, _)| ctx.visible_part(Part::Resource, id, uri)).collect()
}

/// `prompts/get`, `resources/read`, `completion/complete` or `logging/setLevel`, routed to the
/// connector it concerns with the prefix taken off: a prompt by its name; a resource by
/// asking each connector that declares resources in turn (URIs are the downstreams' own);
/// a completion by its reference; a level to every connector that declares logging.
#[tracing::instrument(name = "gateway::request", skip_all, fields(tenant = %ctx.tenant.id, workspace = %ctx.bound.workspace.slug, method = method))]
pub async fn native_request(state: &AppState, ctx: &GatewayCtx, method: &str, mut params: Value) -> Result<Value, ErrorData> {
    let refused = |f: Failure| match f {
        Failure::Rejected(message) => ErrorData::invalid_params(message, None),
        Failure::JsonRpc(error) => error,
        other => ErrorData::internal_error(other.into_error().to_string(), None),
    };
    match method {
        "prompts/get" => {
            let connectors = declaring(state, ctx, "prompts").await;
            let name = params["name"].as_str().unwrap_or_default().to_owned();
            let Some((id, c, local)) =
                owner(several(ctx), &connectors, &name).filter(|(id, _, local)| ctx.visible_part(Part::Prompt, id, Some(local)))
            else {
                return Err(ErrorData::invalid_params(format!("no prompt `{}` here", echo(&name)), None));
            };
            params["name"] = Value::String(local.clone());
            let mut replay = None;
            if let Some(agent) = ctx.input.as_deref() {
                // The agent's answers travel in `agent`, and only to a downstream that asked.
                for field in ["inputResponses", "requestState", "_meta"] {
                    params.as_object_mut().map(|p| p.remove(field));
                }
                let credential = credential(state, ctx, id, c).await.map_err(refused)?;
                let call = input::Call {
                    connector: id,
                    key: &key(ctx, id, c),
                    c,
                    credential: credential.as_ref(),
                    method,
                    target: &local,
                    schema: None,
                };
                match input::relay(state, ctx, agent, call, params.clone()).await {
                    Ok(Some(Relayed::Complete(value) | Relayed::InputRequired(value))) => return Ok(value),
                    // A downstream of the handshake era: its requests for input become rounds.
                    Ok(None) => replay = input::replay_of(state, ctx, agent, id, (method, &local)),
                    Err(Stopped::Refused(r)) => return Err(r.into_error()),
                    Err(Stopped::Failed(f)) => {
                        return Err(refused(super::repair(state, ctx, id, c, credential.as_ref(), f).await));
                    }
                }
            }
            replayed(state, ctx, (id, c), (method, &local), &params, replay).await.map_err(refused)
        }
        "completion/complete" => {
            let connectors = declaring(state, ctx, "completions").await;
            if params["ref"]["type"] == "ref/prompt" {
                let name = params["ref"]["name"].as_str().unwrap_or_default().to_owned();
                let Some((id, c, local)) = owner(several(ctx), &connectors, &name)
                    .filter(|(id, _, local)| ctx.visible_part(Part::Prompt, id, Some(local)))
                else {
                    return Err(ErrorData::invalid_params(format!("no prompt `{}` here", echo(&name)), None));
                };
                params["ref"]["name"] = Value::String(local);
                return relay(state, ctx, id, c, method, &params).await.map_err(refused);
            }
            // A resource template's completion: only where the connector's resources are granted whole.
            first_answer(state, ctx, &granted_resource(ctx, connectors, None), method, &params).await
        }
        "resources/read" => {
            let uri = params["uri"].as_str().map(str::to_owned);
            let connectors = granted_resource(ctx, declaring(state, ctx, "resources").await, uri.as_deref().or(Some("")));
            match ctx.input.as_deref() {
                Some(agent) if !agent.program => read_modern(state, ctx, agent, &connectors, params).await,
                _ => first_answer(state, ctx, &connectors, method, &params).await,
            }
        }
        "logging/setLevel" => {
            for (id, c) in declaring(state, ctx, "logging").await {
                relay(state, ctx, id, c, method, &params).await.map_err(refused)?;
            }
            Ok(serde_json::json!({}))
        }
        _ => Err(ErrorData::new(rmcp::model::ErrorCode::METHOD_NOT_FOUND, method.to_owned(), None)),
    }
}

/// The first connector's answer that is not a refusal; a resource no connector has is
/// [`relay`] for a 2026-07-28 agent whose request a handshake-era downstream answers
/// (`replay`: see [`crate::gateway::replay`]): the downstream's requests for input are answered
/// from the agent's answers so far, and one that no round answered becomes the next round's
/// `InputRequiredResult` (with the answers sealed in its `requestState`), whatever the
/// downstream then made of its refusal. `call`: the method and its target (a prompt's name as
/// the downstream knows it, a resource's URI).
async fn replayed(
    state: &AppState,
    ctx: &GatewayCtx,
    connector: (&str, &Connector),
    call: (&str, &str),
    params: &Value,
    replay: Option<std::sync::Arc<crate::gateway::replay::Replay>>,
) -> Result<Value, Failure> {
    let Some(replay) = replay else { return relay(state, ctx, connector.0, connector.1, call.0, params).await };
    let upstream = ctx.upstream.as_ref().map(|u| u.replaying(replay.clone()));
    let answer = relay_on(state, ctx, connector, (call.0, params), upstream.as_ref()).await;
    match input::replay_round(state, ctx, connector.0, call, &replay) {
        Some(round) => Ok(round),
        None => answer,
    }
}

/// `-32602` with its URI in `data`, as the specification asks.
async fn first_answer(
    state: &AppState,
    ctx: &GatewayCtx,
    connectors: &[(&String, &Connector)],
    method: &str,
    params: &Value,
) -> Result<Value, ErrorData> {
    let mut last = None;
    for (id, c) in connectors {
        match relay(state, ctx, id, c, method, params).await {
            Ok(result) => return Ok(result),
            Err(f) => last = Some(f),
        }
    }
    Err(not_found(last, params))
}

/// The refusal of a request no connector answered: the last connector's own.
fn not_found(last: Option<Failure>, params: &Value) -> ErrorData {
    match last {
        // The downstream's own error (`-32002` before 2026-07-28, which rmcp answers a 2026
        // peer as `-32602`), with the URI in `data` where it gave none.
        Some(Failure::JsonRpc(mut error)) => {
            error.data.get_or_insert_with(|| serde_json::json!({ "uri": params["uri"] }));
            error
        }
        Some(Failure::Rejected(message)) | Some(Failure::BadArguments(message)) => {
            ErrorData::invalid_params(message, Some(serde_json::json!({ "uri": params["uri"] })))
        }
        Some(other) => ErrorData::internal_error(other.into_error().to_string(), None),
        None => ErrorData::invalid_params("Resource not found", Some(serde_json::json!({ "uri": params["uri"] }))),
    }
}

/// `resources/read` of a 2026-07-28 agent: to each connector declaring resources in turn, on
/// 2026-07-28 where the downstream speaks it, so it may answer an `InputRequiredResult`
/// (sealed on its way up, [`input`]). A retry goes to the connector its state was sealed for
/// (the envelope's associated data names it); a state that opens for none is refused there,
/// before anything is sent.
async fn read_modern(
    state: &AppState,
    ctx: &GatewayCtx,
    agent: &input::Agent,
    connectors: &[(&String, &Connector)],
    mut params: Value,
) -> Result<Value, ErrorData> {
    const METHOD: &str = "resources/read";
    let uri = params["uri"].as_str().unwrap_or_default().to_owned();
    // The agent's answers travel in `agent`, and only to a downstream that asked.
    for field in ["inputResponses", "requestState", "_meta"] {
        params.as_object_mut().map(|p| p.remove(field));
    }
    let ring = state.config.vault_keys.as_ref();
    let candidates: Vec<(&String, &Connector)> = match &agent.state {
        None => connectors.to_vec(),
        Some(sealed) => {
            let sealed_for = |id: &str| match input::open(ring, ctx, id, METHOD, &uri, sealed) {
                Ok(_) => true,
                Err(r) => r.code == "request_state_expired",
            };
            let owners: Vec<_> = connectors.iter().filter(|(id, _)| sealed_for(id)).copied().collect();
            // None: the first one refuses the state (and nothing is sent).
            if owners.is_empty() { connectors.iter().take(1).copied().collect() } else { owners }
        }
    };
    let mut last = None;
    for (id, c) in candidates {
        let credential = match credential(state, ctx, id, c).await {
            Ok(credential) => credential,
            Err(f) => {
                last = Some(f);
                continue;
            }
        };
        let key = key(ctx, id, c);
        let call = input::Call {
            connector: id,
            key: &key,
            c,
            credential: credential.as_ref(),
            method: METHOD,
            target: &uri,
            schema: None,
        };
        match input::relay(state, ctx, agent, call, params.clone()).await {
            Ok(Some(Relayed::Complete(value) | Relayed::InputRequired(value))) => return Ok(value),
            // A handshake-era downstream: read through its session, its requests for input
            // becoming rounds.
            Ok(None) => {
                let replay = input::replay_of(state, ctx, agent, id, (METHOD, &uri));
                match replayed(state, ctx, (id, c), (METHOD, &uri), &params, replay).await {
                    Ok(value) => return Ok(value),
                    Err(f) => last = Some(f),
                }
            }
            // This downstream has no such resource: the next one may.
            Err(Stopped::Refused(r)) if r.code == "downstream_error" => last = Some(Failure::JsonRpc(r.into_error())),
            Err(Stopped::Refused(r)) => return Err(r.into_error()),
            Err(Stopped::Failed(f)) => last = Some(super::repair(state, ctx, id, c, credential.as_ref(), f).await),
        }
    }
    Err(not_found(last, &params))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::Hints;

    #[test]
    fn a_list_is_as_fresh_as_its_stalest_page_and_private_if_any_part_is() {
        let mut hints = Hints::new(false);
        hints.page(&json!({ "ttlMs": 60_000, "cacheScope": "public" }));
        hints.page(&json!({ "ttlMs": 5_000 }));
        assert_eq!(hints, Hints { ttl_ms: 5_000, private: false });
        hints.page(&json!({ "prompts": [] }));
        assert_eq!(hints.ttl_ms, 0, "a page without hints is stale at once");
        hints.page(&json!({ "ttlMs": 1, "cacheScope": "private" }));
        assert!(hints.private);

        let mut result = json!({});
        Hints::new(true).write(&mut result);
        assert_eq!(result, json!({ "ttlMs": 0, "cacheScope": "private" }));
    }
}
