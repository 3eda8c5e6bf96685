//! Requests from a downstream to the agent on 2026-07-28 (SEP-2322, multi round-trip
//! requests): a downstream answers `tools/call`, `prompts/get` or `resources/read` with an
//! `InputRequiredResult`, the agent fulfils its `inputRequests` and retries with
//! `inputResponses` and the `requestState` it was given.
//!
//! The retry may land on any replica, so nothing is kept here between the rounds: the gateway
//! hands the agent a `requestState` of its own, sealed with the vault's active key (the same
//! AES-256-GCM envelopes as credentials), that carries the downstream's own `requestState`, the
//! call it belongs to (connector and tool, prompt or resource), the caller (token) and an
//! expiry. The envelope's associated data binds tenant, workspace and connector, so a state
//! copied into another tenant's call does not open. A state that does not open, names another
//! caller or call, or has expired is refused with a JSON-RPC error (`-32602`, a stable `code`
//! in `data`) before anything is sent downstream.

use std::sync::Arc;

use rmcp::{ErrorData, RoleServer, model::ProtocolVersion, service::RequestContext};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::GatewayCtx;
use crate::vault::{Aad, KeyRing, Owner};

/// What a sealed state is bound to (the vault's associated-data purpose).
pub const PURPOSE: &str = "input_request_state";
/// How long an agent has to answer a downstream's input requests.
pub const STATE_TTL_SECS: i64 = 600;
/// The client-capabilities key of a 2026-07-28 request's `_meta`.
pub const CAPABILITIES_KEY: &str = "io.modelcontextprotocol/clientCapabilities";

/// What a 2026-07-28 agent's request carries for the downstream: the capabilities it declared
/// (so the downstream asks only for what the agent can answer), and on a retry its answers
/// and the gateway's sealed state.
#[derive(Clone, Debug, Default)]
pub struct Agent {
    /// The agent's `clientCapabilities`, as it sent them (`{}` when it declared none).
    pub capabilities: Value,
    /// `inputResponses`, as sent (validated by the downstream, which asked).
    pub responses: Option<Value>,
    /// The `requestState` the gateway gave the agent, still sealed.
    pub state: Option<String>,
    /// A program's host call (`execute_code`): no agent can answer, so an input request
    /// becomes `input_required_unsupported`.
    pub program: bool,
}

impl Agent {
    /// The agent's context when its request is on 2026-07-28 or later; `None` for the
    /// handshake era (whose downstream requests travel on the response stream instead).
    pub fn of(cx: &RequestContext<RoleServer>, responses: Option<Value>, state: Option<String>) -> Option<Arc<Agent>> {
        let revision = cx.protocol_version()?;
        if revision.as_str() < ProtocolVersion::V_2026_07_28.as_str() {
            return None;
        }
        let capabilities = cx.meta.0.0.get(CAPABILITIES_KEY).cloned().unwrap_or_else(|| json!({}));
        Some(Arc::new(Agent { capabilities, responses, state, program: false }))
    }

    /// A program's host calls: no capabilities declared, nothing to answer with.
    pub fn program() -> Arc<Agent> {
        Arc::new(Agent { capabilities: json!({}), responses: None, state: None, program: true })
    }
}

/// What the sealed state says inside.
#[derive(Serialize, Deserialize)]
struct Claims {
    /// The call it belongs to: `tools/call` plus the tool, `prompts/get` plus the prompt,
    /// `resources/read` plus the URI (the downstream's own names).
    method: String,
    target: String,
    /// The caller's token (or OAuth grant) id.
    caller: String,
    /// Unix seconds after which the state is refused.
    exp: i64,
    /// The downstream's own `requestState`, if it gave one.
    inner: Option<String>,
    /// A handshake-era downstream's call replayed for a 2026-07-28 agent: the agent's answers
    /// so far, in the order the downstream asks ([`super::replay`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    replay: Vec<Value>,
}

/// What an echoed state carries for the call it belongs to.
pub struct Opened {
    /// The downstream's own `requestState`.
    pub inner: Option<String>,
    /// The answers of a replayed call (see [`super::replay`]).
    pub replay: Vec<Value>,
}

/// Why a retry was refused: a stable code and a message for the agent.
#[derive(Debug)]
pub struct Refused {
    pub code: &'static str,
    pub message: String,
    /// The downstream's own JSON-RPC error, passed on to the agent as it is.
    passthrough: Option<ErrorData>,
}

impl Refused {
    fn new(code: &'static str, message: &str) -> Refused {
        Refused { code, message: message.to_owned(), passthrough: None }
    }

    /// A refusal answered as exactly `error` (a quota's `-32029`, say).
    pub fn error(code: &'static str, error: ErrorData) -> Refused {
        Refused { code, message: error.message.to_string(), passthrough: Some(error) }
    }

    /// As the JSON-RPC error the agent gets: the downstream's own, or `-32602` with the code
    /// in `data`.
    pub fn into_error(self) -> ErrorData {
        match self.passthrough {
            Some(error) => error,
            None => ErrorData::invalid_params(self.message, Some(json!({ "code": self.code }))),
        }
    }
}

fn aad<'a>(ctx: &GatewayCtx, connector: &'a str) -> Aad<'a> {
    Aad { tenant: ctx.tenant.id.0, workspace: ctx.bound.workspace.id.0, connector, owner: Owner::Shared, purpose: PURPOSE }
}

/// Seals the downstream's `requestState` (if any) for the agent to echo on its retry.
pub fn seal(ring: &KeyRing, ctx: &GatewayCtx, connector: &str, method: &str, target: &str, inner: Option<String>) -> String {
    seal_opened(ring, ctx, connector, (method, target), Opened { inner, replay: Vec::new() })
}

/// Seals what a state carries for the agent to echo on its retry of `call` (method, target).
pub fn seal_opened(ring: &KeyRing, ctx: &GatewayCtx, connector: &str, call: (&str, &str), opened: Opened) -> String {
    let claims = Claims {
        method: call.0.to_owned(),
        target: call.1.to_owned(),
        caller: ctx.actor_id.clone(),
        exp: chrono::Utc::now().timestamp() + STATE_TTL_SECS,
        inner: opened.inner,
        replay: opened.replay,
    };
    // Serializing a struct of strings and an integer cannot fail.
    ring.seal(&aad(ctx, connector), &serde_json::to_vec(&claims).unwrap_or_default())
}

/// Opens the agent's echoed state for this call: what it carries, or the refusal. Nothing of
/// a refused state reaches the downstream.
pub fn open(
    ring: Option<&KeyRing>,
    ctx: &GatewayCtx,
    connector: &str,
    method: &str,
    target: &str,
    sealed: &str,
) -> Result<Opened, Refused> {
    let invalid = || Refused::new("request_state_invalid", "the requestState was not issued by this gateway for this call");
    let ring = ring.ok_or_else(invalid)?;
    let opened = ring.open(&aad(ctx, connector), sealed).map_err(|_| invalid())?;
    let claims: Claims = serde_json::from_slice(&opened).map_err(|_| invalid())?;
    if claims.method != method || claims.target != target || claims.caller != ctx.actor_id {
        return Err(invalid());
    }
    if chrono::Utc::now().timestamp() > claims.exp {
        return Err(Refused::new("request_state_expired", "the requestState has expired; make the request again without it"));
    }
    Ok(Opened { inner: claims.inner, replay: claims.replay })
}

/// A 2026-07-28 agent's call to a downstream that speaks only the handshake era, replayed
/// round by round ([`super::replay`]): the answers of the rounds before (from the agent's
/// sealed state, already checked by [`relay`]) and of this retry. `None` for a program, or
/// without vault keys to seal the rounds (the downstream is then refused its requests).
pub fn replay_of(
    state: &crate::AppState,
    ctx: &GatewayCtx,
    agent: &Agent,
    connector: &str,
    call: (&str, &str),
) -> Option<Arc<super::replay::Replay>> {
    if agent.program {
        return None;
    }
    let ring = state.config.vault_keys.as_ref()?;
    let earlier = match &agent.state {
        Some(sealed) => open(Some(ring), ctx, connector, call.0, call.1, sealed).ok()?.replay,
        None => Vec::new(),
    };
    Some(Arc::new(super::replay::Replay::new(earlier, agent.responses.as_ref(), &agent.capabilities)))
}

/// The next round of a replayed call: the `InputRequiredResult` asking the agent the one
/// request the downstream asked, with the answers so far sealed in its `requestState`.
pub fn replay_round(
    state: &crate::AppState,
    ctx: &GatewayCtx,
    connector: &str,
    call: (&str, &str),
    replay: &super::replay::Replay,
) -> Option<Value> {
    let asked = replay.asked()?;
    let ring = state.config.vault_keys.as_ref()?;
    let sealed = seal_opened(ring, ctx, connector, call, Opened { inner: None, replay: replay.answers() });
    Some(json!({ "resultType": "input_required", "inputRequests": replay.input_requests(asked), "requestState": sealed }))
}

/// Seals a state that expired `ago_secs` ago, for tests of the refusal (the key ring is the
/// deployment's, so nothing else can make one).
pub fn seal_expired(
    ring: &KeyRing,
    ctx_parts: (uuid::Uuid, uuid::Uuid, &str),
    call: (&str, &str, &str),
    ago_secs: i64,
) -> String {
    let (tenant, workspace, connector) = ctx_parts;
    let (method, target, caller) = call;
    let claims = Claims {
        method: method.to_owned(),
        target: target.to_owned(),
        caller: caller.to_owned(),
        exp: chrono::Utc::now().timestamp() - ago_secs,
        inner: None,
        replay: Vec::new(),
    };
    let aad = Aad { tenant, workspace, connector, owner: Owner::Shared, purpose: PURPOSE };
    ring.seal(&aad, &serde_json::to_vec(&claims).unwrap_or_default())
}

/// What a downstream spoken to on 2026-07-28 answered.
pub enum Relayed {
    /// A complete result, as the downstream sent it.
    Complete(Value),
    /// An `InputRequiredResult` whose `requestState` is now the gateway's sealed one.
    InputRequired(Value),
}

/// Why a relay on 2026-07-28 produced no result.
pub enum Stopped {
    /// The agent's state was refused (nothing was sent downstream), or the gateway cannot
    /// carry the downstream's request for input.
    Refused(Refused),
    Failed(super::downstream::Failure),
}

/// The call on 2026-07-28 to a downstream that speaks it, carrying the agent's capabilities,
/// its answers and the downstream's own state. `Ok(None)`: the downstream speaks only the
/// handshake era, so the caller makes the call as usual (after the agent's state, if any,
/// was checked here all the same).
pub struct Call<'a> {
    pub connector: &'a str,
    pub key: &'a str,
    pub c: &'a crate::workspaces::Connector,
    pub credential: Option<&'a super::credentials::Credential>,
    /// `tools/call`, `prompts/get` or `resources/read`, and its tool, prompt or URI.
    pub method: &'a str,
    pub target: &'a str,
    /// A tool's input schema, whose `x-mcp-header` annotations name the `Mcp-Param-*`
    /// headers the downstream gets (SEP-2243); `None` for prompts and resources.
    pub schema: Option<&'a rmcp::model::JsonObject>,
}

/// The agent's capabilities as a downstream sees them: without the tasks extension (SEP-2663),
/// which the gateway does not relay, so a downstream never answers the agent with a task.
fn without_tasks(capabilities: &Value) -> Value {
    let mut out = capabilities.clone();
    if let Some(caps) = out.as_object_mut() {
        caps.remove("tasks");
        if let Some(extensions) = caps.get_mut("extensions").and_then(Value::as_object_mut) {
            extensions.remove(rmcp::model::TASKS_EXTENSION_ID);
        }
    }
    out
}

pub async fn relay(
    state: &crate::AppState,
    ctx: &GatewayCtx,
    agent: &Agent,
    call: Call<'_>,
    mut params: Value,
) -> Result<Option<Relayed>, Stopped> {
    let ring = state.config.vault_keys.as_ref();
    let inner = match &agent.state {
        Some(sealed) if !agent.program => {
            open(ring, ctx, call.connector, call.method, call.target, sealed).map_err(Stopped::Refused)?.inner
        }
        _ => None,
    };
    let tenant = ctx.tenant.id.0;
    if !state.downstreams.modern(tenant, call.key, call.c, call.credential).await.map_err(Stopped::Failed)? {
        return Ok(None);
    }
    params["_meta"] = super::downstream::request_meta(without_tasks(&agent.capabilities), ctx.upstream.as_ref()).await;
    if let Some(responses) = agent.responses.as_ref().filter(|_| !agent.program) {
        params["inputResponses"] = responses.clone();
    }
    if let Some(inner) = inner {
        params["requestState"] = Value::String(inner);
    }
    let param_headers = match (call.schema, params["arguments"].as_object()) {
        (Some(schema), Some(arguments)) => super::param_headers::compute(schema, arguments),
        _ => Vec::new(),
    };
    let routing = (call.method, Some(call.target), param_headers.as_slice());
    let mut message = state
        .downstreams
        .stateless(tenant, call.c, call.credential, routing, &params, ctx.upstream.as_ref())
        .await
        .map_err(Stopped::Failed)?;
    if let Some(error) = message.get("error") {
        let error = serde_json::from_value::<ErrorData>(error.clone())
            .unwrap_or_else(|_| ErrorData::internal_error("the downstream answered a malformed error", None));
        let message = error.message.to_string();
        return Err(Stopped::Refused(Refused { code: "downstream_error", message, passthrough: Some(error) }));
    }
    let mut result = message["result"].take();
    match result.get("resultType").and_then(Value::as_str) {
        None | Some("complete") => return Ok(Some(Relayed::Complete(result))),
        Some("input_required") => {}
        // A task (SEP-2663), which the gateway does not relay (nor declare it may), or a shape
        // of a later revision: never passed on as if it were a result.
        Some(other) => {
            return Err(Stopped::Failed(super::downstream::Failure::Rejected(format!(
                "the downstream answered a `{}` result, which this gateway does not relay",
                other.chars().take(32).collect::<String>()
            ))));
        }
    }
    if agent.program {
        return Err(Stopped::Refused(Refused::new(
            "input_required_unsupported",
            "the tool asks the agent for input (sampling, elicitation or roots), which a program cannot give; call it with call_tool instead",
        )));
    }
    let Some(ring) = ring else {
        return Err(Stopped::Refused(Refused::new(
            "input_required_unavailable",
            "the downstream asks the agent for input, which this gateway relays only with vault keys configured",
        )));
    };
    let inner = result.get("requestState").and_then(Value::as_str).map(str::to_owned);
    result["requestState"] = Value::String(seal(ring, ctx, call.connector, call.method, call.target, inner));
    Ok(Some(Relayed::InputRequired(result)))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    #[test]
    fn a_downstream_never_learns_the_agent_takes_tasks() {
        let declared = json!({
            "elicitation": {},
            "tasks": { "requests": {} },
            "extensions": { "io.modelcontextprotocol/tasks": {}, "com.example/other": { "x": 1 } },
        });
        assert_eq!(
            super::without_tasks(&declared),
            json!({ "elicitation": {}, "extensions": { "com.example/other": { "x": 1 } } })
        );
        assert_eq!(super::without_tasks(&json!({})), json!({}));
    }
}
