//! `GET /api/v1/tenants/{tenant}`: the tenant and who is asking. Cheap, authenticated, and
//! side-effect free: the no-op call of the authentication benchmark.

use axum::{
    Json,
    response::{IntoResponse, Response},
};
use serde::Serialize;
use utoipa_axum::{router::OpenApiRouter, routes};

use crate::{
    AppState,
    auth::{Actor, TenantCtx},
};

// Serialized as it is typed, with no JSON value built on the way: this is the authentication
// benchmark's no-op.
/// The answer of `GET /api/v1/tenants/{tenant}`: the tenant, who asks, and what they may do.
#[derive(Serialize, utoipa::ToSchema)]
struct Whoami<'a> {
    tenant: &'a crate::auth::TenantRef,
    actor: WhoamiActor<'a>,
    permissions: Vec<crate::members::Permission>,
}

/// The grant staff act under (see `crate::impersonation`).
#[derive(Serialize, utoipa::ToSchema)]
struct ImpersonationRef<'a> {
    grant_id: uuid::Uuid,
    staff_email: &'a str,
    expires_at: chrono::DateTime<chrono::Utc>,
}

#[derive(Serialize, utoipa::ToSchema)]
#[serde(tag = "kind", rename_all = "lowercase")]
enum WhoamiActor<'a> {
    Person {
        member_id: uuid::Uuid,
        role: crate::members::Role,
        /// Set when staff act under an impersonation grant: the grant (whose id is `member_id`).
        impersonation: Option<ImpersonationRef<'a>>,
    },
    Machine {
        token_id: uuid::Uuid,
        credential_id: uuid::Uuid,
        principal: Option<&'a crate::members::Principal>,
    },
}

/// The tenant and who is asking (person or machine), with the actor's permissions.
#[utoipa::path(get, path = "/api/v1/tenants/{tenant}", tag = "tenants", responses((status = 200, body = Whoami)))]
async fn whoami(ctx: TenantCtx) -> Response {
    let actor = match &ctx.actor {
        Actor::Person { member, .. } => WhoamiActor::Person {
            member_id: member.id,
            role: member.role,
            impersonation: ctx.impersonation.as_ref().map(|live| ImpersonationRef {
                grant_id: live.id,
                staff_email: &live.staff_email,
                expires_at: live.expires_at,
            }),
        },
        Actor::Machine { token_id, credential_id, principal, .. } => {
            WhoamiActor::Machine { token_id: *token_id, credential_id: *credential_id, principal: principal.as_ref() }
        }
    };
    Json(Whoami { tenant: &ctx.tenant, actor, permissions: ctx.permissions.list() }).into_response()
}

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(whoami))
}
