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

/// The grant staff act under (see `crate::impersonation`).
#[derive(utoipa::ToSchema)]
#[allow(dead_code)]
struct ImpersonationRef {
    grant_id: uuid::Uuid,
    staff_email: String,
    expires_at: chrono::DateTime<chrono::Utc>,
}

#[derive(utoipa::ToSchema)]
#[serde(tag = "kind", rename_all = "lowercase")]
#[allow(dead_code)]
enum WhoamiActor {
    Person {
        member_id: uuid::Uuid,
        role: crate::members::Role,
        /// Set when staff act under an impersonation grant: the grant (whose id is `member_id`).
        impersonation: Option<ImpersonationRef>,
    },
    Machine {
        token_id: uuid::Uuid,
        credential_id: uuid::Uuid,
        principal: Option<crate::members::Principal>,
    },
}

/// The tenant and who is asking (person or machine), with the actor's permissions.
#[utoipa::path(get, path = "/api/v1/tenants/{tenant}", tag = "tenants", responses((status = 200, body = Whoami)))]
async fn whoami(ctx: TenantCtx) -> Json<Value> {
    let actor = match &ctx.actor {
        Actor::Person { member, .. } => {
            let impersonation = ctx
                .impersonation
                .as_ref()
                .map(|live| json!({ "grant_id": live.id, "staff_email": live.staff_email, "expires_at": live.expires_at }));
            json!({ "kind": "person", "member_id": member.id, "role": member.role, "impersonation": impersonation })
        }
        Actor::Machine { token_id, credential_id, principal, .. } => {
            json!({ "kind": "machine", "token_id": token_id, "credential_id": credential_id, "principal": principal })
        }
    };
    Json(json!({ "tenant": ctx.tenant, "actor": actor, "permissions": ctx.permissions.list() }))
}

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(whoami))
}
