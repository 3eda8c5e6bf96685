//! `GET /api/v1/tenants/{tenant}`: the tenant and who is asking. Cheap, authenticated, and
//! side-effect free: the no-op call of the authentication benchmark.

use axum::{Json, Router, routing::get};
use serde_json::{Value, json};

use crate::{
    AppState,
    auth::{Actor, TenantCtx},
};

async fn whoami(ctx: TenantCtx) -> Json<Value> {
    let actor = match &ctx.actor {
        Actor::Person { member, .. } => json!({ "kind": "person", "member_id": member.id, "role": member.role }),
        Actor::Machine { token_id, credential_id, principal, .. } => {
            json!({ "kind": "machine", "token_id": token_id, "credential_id": credential_id, "principal": principal })
        }
    };
    Json(json!({ "tenant": ctx.tenant, "actor": actor, "permissions": ctx.permissions.list() }))
}

pub fn router() -> Router<AppState> {
    Router::new().route("/api/v1/tenants/{tenant}", get(whoami))
}
