//! `GET /api/v1/tenants/{tenant}`: the tenant and who is asking. Cheap, authenticated, and
//! side-effect free: the no-op call of the authentication benchmark.

use axum::Json;
use serde_json::{Value, json};
use utoipa_axum::{router::OpenApiRouter, routes};

use crate::{
    AppState,
    auth::{Actor, TenantCtx},
};

/// The answer of `GET /api/v1/tenants/{tenant}` (built as JSON in [`whoami`]).
#[derive(utoipa::ToSchema)]
#[allow(dead_code)]
struct Whoami {
    tenant: crate::auth::TenantRef,
    actor: WhoamiActor,
    permissions: Vec<crate::members::Permission>,
}

#[derive(utoipa::ToSchema)]
#[serde(tag = "kind", rename_all = "lowercase")]
#[allow(dead_code)]
enum WhoamiActor {
    Person { member_id: uuid::Uuid, role: crate::members::Role },
    Machine { token_id: uuid::Uuid, credential_id: uuid::Uuid, principal: Option<crate::members::Principal> },
}

/// The tenant and who is asking (person or machine), with the actor's permissions.
#[utoipa::path(get, path = "/api/v1/tenants/{tenant}", tag = "tenants", responses((status = 200, body = Whoami)))]
async fn whoami(ctx: TenantCtx) -> Json<Value> {
    let actor = match &ctx.actor {
        Actor::Person { member, .. } => json!({ "kind": "person", "member_id": member.id, "role": member.role }),
        Actor::Machine { token_id, credential_id, principal, .. } => {
            json!({ "kind": "machine", "token_id": token_id, "credential_id": credential_id, "principal": principal })
        }
    };
    Json(json!({ "tenant": ctx.tenant, "actor": actor, "permissions": ctx.permissions.list() }))
}

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(whoami))
}
