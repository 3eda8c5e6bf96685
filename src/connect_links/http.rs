//! `/api/v1/tenants/{t}/…/connect-links`: mint, list and revoke mailed connect links (people
//! with `credential_administration`). No answer ever carries a link's secret.

use axum::{
    Json,
    extract::{Path, Query, State},
    http::StatusCode,
    routing::get,
};
use serde::Deserialize;
use utoipa_axum::{router::OpenApiRouter, routes};
use uuid::Uuid;

use super::{Link, Minted};
use crate::{
    AppState,
    auth::TenantCtx,
    error::Result,
    extract::ApiJson,
    members::Permission,
    pages::{self, escape},
};

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
struct MintLink {
    email: String,
    ttl_days: Option<i64>,
}

#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
struct ListQuery {
    #[serde(default)]
    history: bool,
}

/// Mints a connect link and mails it to a person, who authorises the connector with it.
#[utoipa::path(post, path = "/api/v1/tenants/{tenant}/workspaces/{workspace}/connectors/{id}/connect-links", tag = "connect-links", security(("session" = [])), request_body = MintLink, responses((status = 201, body = Minted)))]
async fn create_link(
    ctx: TenantCtx,
    State(state): State<AppState>,
    Path((_, ws, connector)): Path<(String, String, String)>,
    ApiJson(body): ApiJson<MintLink>,
) -> Result<(StatusCode, Json<Minted>)> {
    ctx.require_person(Permission::CredentialAdministration)?;
    ctx.refuse_impersonation("mint connect links")?;
    let params = super::MintParams {
        tenant_slug: &ctx.tenant.slug,
        public_url: state.config.public_origin(),
        workspace: &ws,
        connector: &connector,
        email: &body.email,
        ttl_days: body.ttl_days,
    };
    let ring = crate::vault::slots::require(state.config.vault_keys.as_ref())?;
    let minted = super::mint(&state.db, ctx.tenant.id, ring, &ctx.audit, params, state.mailer.as_deref()).await?;
    Ok((StatusCode::CREATED, Json(minted)))
}

/// The tenant's connect links (live ones, or all with `history`).
#[utoipa::path(get, path = "/api/v1/tenants/{tenant}/connect-links", tag = "connect-links", security(("session" = [])), params(ListQuery), responses((status = 200, body = Vec<Link>)))]
async fn list_links(ctx: TenantCtx, State(state): State<AppState>, Query(q): Query<ListQuery>) -> Result<Json<Vec<Link>>> {
    ctx.require_person(Permission::CredentialAdministration)?;
    Ok(Json(super::list(&state.db, ctx.tenant.id, q.history).await?))
}

/// Revokes a connect link.
#[utoipa::path(delete, path = "/api/v1/tenants/{tenant}/connect-links/{id}", tag = "connect-links", security(("session" = [])), responses((status = 200, body = Link)))]
async fn revoke_link(ctx: TenantCtx, State(state): State<AppState>, Path((_, id)): Path<(String, Uuid)>) -> Result<Json<Link>> {
    ctx.require_person(Permission::CredentialAdministration)?;
    Ok(Json(super::revoke(&state.db, ctx.tenant.id, &ctx.audit, id).await?))
}

/// The operator's outbox in the console: mail waiting to be forwarded by hand (connect links
/// when SMTP is not configured). Owners and admins only: a waiting mail carries its link.
async fn outbox_page(ctx: TenantCtx, State(state): State<AppState>) -> Result<axum::response::Response> {
    ctx.require_admin()?;
    let ring = crate::vault::slots::require(state.config.vault_keys.as_ref())?;
    let mail = super::outbox(&state.db, ring, ctx.tenant.id, false).await?;
    let mut body = format!(
        "<p>{} undelivered message(s) for <code>{}</code>. Forward each to its recipient, then run \
         <code>gatehouse outbox sent --tenant {} ID</code>.</p>",
        mail.len(),
        escape(&ctx.tenant.slug),
        escape(&ctx.tenant.slug)
    );
    for m in &mail {
        body.push_str(&format!(
            "<article><h2>{}</h2><p>To <code>{}</code> · {} · <code>{}</code></p><pre>{}</pre></article>",
            escape(&m.subject),
            escape(&m.to),
            m.created_at.to_rfc3339(),
            m.id,
            escape(&m.body)
        ));
    }
    Ok(pages::page(axum::http::StatusCode::OK, "Outbox", state.config.dev_sign_in(), &body))
}

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(create_link))
        .routes(routes!(list_links))
        .routes(routes!(revoke_link))
        .route("/console/t/{tenant}/outbox", get(outbox_page))
}
