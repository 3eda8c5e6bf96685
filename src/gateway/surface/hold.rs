//! The workspace's approval policy on the call path: a write it names is held back until a
//! person approves exactly that call (see [`crate::approvals`]).

use rmcp::model::JsonObject;
use serde_json::{Value, json};
use uuid::Uuid;

use super::{Outcome, echo};
use crate::{
    AppState,
    admin_log::Audit,
    approvals::{self, Approval, Claim},
    gateway::GatewayCtx,
    workspaces::config::approvals::required,
};

/// `URLElicitationRequiredError` (MCP 2025-11-25): the request needs the user to visit a URL
/// first, then to be made again.
pub const URL_ELICITATION_REQUIRED: rmcp::model::ErrorCode = rmcp::model::ErrorCode(-32042);

/// The `approval_id` a `call_destructive_tool` call names: `Ok(None)` when absent, an
/// `invalid_args` refusal when it is not an id.
pub(super) fn named(args: &JsonObject) -> Result<Option<Uuid>, Box<Outcome>> {
    match args.get("approval_id") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => s.parse().map(Some).map_err(|_| bad_id()),
        Some(_) => Err(bad_id()),
    }
}

fn bad_id() -> Box<Outcome> {
    Box::new(Outcome::error("invalid_args", "`approval_id` is the id an `approval_required` answer gave".into(), None))
}

/// Whether the agent declared URL-mode elicitation: in its 2026-07-28 request's client
/// capabilities, or (handshake era, direct path) at `initialize`.
fn declared_url(ctx: &GatewayCtx) -> bool {
    match ctx.input.as_deref() {
        Some(agent) => agent.capabilities.pointer("/elicitation/url").is_some_and(Value::is_object),
        None => ctx.upstream.as_ref().is_some_and(|u| u.declared_url_elicitation()),
    }
}

/// Whether the write `connector.tool` with `args` may run now: `Ok(None)` when the policy
/// does not hold it back, `Ok(Some(id))` when approval `id` was used for it just now (it runs
/// once), else the answer to give instead: `approval_required` or the named approval's refusal.
pub(super) async fn hold(
    state: &AppState,
    ctx: &GatewayCtx,
    (connector, tool): (&str, &str),
    args: &JsonObject,
    named: Option<Uuid>,
) -> Result<Option<Uuid>, Box<Outcome>> {
    let Some(expires_in_s) = required(&ctx.bound.document.approvals, &ctx.caller, connector, tool) else { return Ok(None) };
    let digest = approvals::canonical::digest(&Value::Object(args.clone()));
    let call = approvals::Call {
        workspace: ctx.bound.workspace.id.0,
        actor_kind: ctx.actor_kind,
        actor_id: &ctx.actor_id,
        member_id: ctx.caller.member_id,
        connector,
        tool,
        digest: &digest,
        policy_version: ctx.bound.workspace.bound_version,
        request_id: ctx.request_id.as_deref(),
    };
    let audit = Audit { actor: format!("{}:{}", ctx.actor_kind, ctx.actor_id), request_id: ctx.request_id.clone() };
    let claim = approvals::claim(&state.db, ctx.tenant.id, &audit, named, call, expires_in_s).await;
    let address = format!("{connector}.{tool}");
    let mut out = match claim {
        Ok(Claim::Run(id)) => return Ok(Some(id)),
        Ok(Claim::Required(a)) => {
            let mut out = required_answer(state, ctx, &address, args, &a);
            out.approval_id = Some(a.id);
            out
        }
        Ok(Claim::Refused { code, message }) => {
            let mut out = Outcome::error(code, message, named.map(|id| json!({ "approval": { "id": id } })));
            // Another caller's approval (or none) is not named in this caller's activity.
            out.approval_id = named.filter(|_| code != "approval_not_found");
            out
        }
        Err(e) => {
            tracing::error!(error = %e, "approval not claimed");
            Outcome::error(
                "unavailable",
                "the approval could not be checked; retry shortly".into(),
                Some(json!({ "retryable": true })),
            )
        }
    };
    out.classification = Some("write");
    Err(Box::new(out))
}

/// `approval_required`, naming the approval, where a person decides it and how to retry. Where
/// the agent declared URL-mode elicitation, the URL goes in band too: the call is answered
/// `URLElicitationRequired`, whose retry (the same call, unchanged) runs once it is approved.
fn required_answer(state: &AppState, ctx: &GatewayCtx, address: &str, args: &JsonObject, a: &Approval) -> Outcome {
    let url = approvals::url(&state.config.public_url, &ctx.tenant.slug, a.id);
    let mut retry = json!({ "address": address, "args": args, "approval_id": a.id });
    if retry.to_string().len() > super::ECHO_CAP {
        retry = json!({ "address": address, "approval_id": a.id });
    }
    let mut out = Outcome::error(
        "approval_required",
        format!(
            "`{}` needs a person's approval first: ask them to approve it at {url}, then make the same call again \
             (with call_destructive_tool and this approval_id, or by retrying it unchanged)",
            echo(address)
        ),
        Some(json!({
            "approval": {
                "id": a.id, "url": url, "state": a.state, "tool": address, "args_digest": a.args_digest,
                "policy_version": a.policy_version, "expires_at": a.expires_at,
            },
            "nextAction": { "tool": "call_destructive_tool", "arguments": retry },
        })),
    );
    if declared_url(ctx) {
        let message = format!("A person must approve this call of {} first; retry it once they have.", echo(address));
        let data = json!({ "elicitations": [{ "mode": "url", "elicitationId": a.id, "url": url, "message": message }] });
        out.jsonrpc = Some(rmcp::ErrorData::new(URL_ELICITATION_REQUIRED, message, Some(data)));
    }
    out
}
