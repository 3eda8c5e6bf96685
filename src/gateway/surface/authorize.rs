//! `authorize_connector`: where a connector's credential stands and how to repair it.

use rmcp::model::JsonObject;
use serde_json::{Value, json};

use super::{Outcome, connector, credential, echo, failure};
use crate::{
    AppState,
    gateway::{GatewayCtx, downstream::Failure},
    workspaces::Connector,
};

/// Says honestly where the connector's credential stands: not needed, set, missing,
/// unreadable, or the vault off, and how to repair it.
pub(super) async fn authorize(state: &AppState, ctx: &GatewayCtx, args: &JsonObject) -> Outcome {
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
    if problem.state == "client_credentials" || problem.state == "identity_assertion" {
        // No authorization page authorizes it (`OauthAuth::person_authorizes`): what the client
        // authenticates with must be set again, or the member presents an identity token.
        return Outcome::ok(json!({ "connector": id, "grant": grant, "status": problem.state, "message": problem.message }));
    }
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
