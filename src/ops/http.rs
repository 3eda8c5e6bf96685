//! `/api/v1/platform/issues`: platform admins (signed-in people whose email is listed in
//! `GATEHOUSE_PLATFORM_ADMINS`) list issues and set verdicts, each verdict admin-logged.

use axum::{
    Json,
    extract::{FromRequestParts, Path, Query, State},
    http::request::Parts,
};
use serde::Deserialize;
use utoipa_axum::{router::OpenApiRouter, routes};

use super::{Verdict, store::Issue};
use crate::{
    AppState,
    admin_log::Audit,
    auth::SignedIn,
    error::{Error, Result},
};

/// A signed-in person the deployment names as a platform admin.
pub struct PlatformAdmin {
    pub audit: Audit,
    /// The person's session (impersonation grants name its principal and email).
    pub session: crate::sessions::Session,
}

impl FromRequestParts<AppState> for PlatformAdmin {
    type Rejection = Error;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self> {
        let SignedIn(session) = SignedIn::from_request_parts(parts, state).await?;
        if !crate::auth::platform_admin(state, &session) {
            return Err(Error::Forbidden { code: "platform_admin_required", message: "this needs a platform admin".into() });
        }
        let actor = format!("platform:{}#{}", session.principal.issuer, session.principal.subject);
        Ok(PlatformAdmin { audit: Audit { actor, request_id: crate::extract::request_id(&parts.headers) }, session })
    }
}

#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
struct IssueQuery {
    status: Option<String>,
    limit: Option<i64>,
}

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
struct SetVerdict {
    /// resolve, ignore or reopen.
    verdict: String,
    /// The version that fixes it (resolve only).
    version: Option<String>,
}

/// Ops issues across tenants (platform admins).
#[utoipa::path(get, path = "/api/v1/platform/issues", tag = "platform", security(("session" = [])), params(IssueQuery), responses((status = 200, body = Vec<Issue>)))]
async fn list_issues(_: PlatformAdmin, State(state): State<AppState>, Query(q): Query<IssueQuery>) -> Result<Json<Vec<Issue>>> {
    Ok(Json(super::issues(&state.db, q.status.as_deref(), q.limit.unwrap_or(100).clamp(1, 1000)).await?))
}

/// Resolves, ignores or reopens an issue (platform admins).
#[utoipa::path(post, path = "/api/v1/platform/issues/{fingerprint}/verdict", tag = "platform", security(("session" = [])), request_body = SetVerdict, responses((status = 200, body = Issue)))]
async fn set_verdict(
    admin: PlatformAdmin,
    State(state): State<AppState>,
    Path(fingerprint): Path<String>,
    crate::extract::ApiJson(body): crate::extract::ApiJson<SetVerdict>,
) -> Result<Json<Issue>> {
    let verdict = match body.verdict.as_str() {
        "resolve" => Verdict::Resolve,
        "ignore" => Verdict::Ignore,
        "reopen" => Verdict::Reopen,
        _ => return Err(Error::invalid("invalid_verdict", Some("verdict"), "verdict is resolve, ignore or reopen")),
    };
    if let Some(v) = &body.version
        && (v.trim().is_empty() || v.chars().count() > 100)
    {
        return Err(Error::invalid("invalid_version", Some("version"), "version is 1 to 100 characters"));
    }
    Ok(Json(super::set_verdict(&state.db, &admin.audit, &fingerprint, verdict, body.version.as_deref()).await?))
}

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(list_issues)).routes(routes!(set_verdict))
}
