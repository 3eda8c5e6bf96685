//! `/api/v1/tenants/{t}/…/connect-links`: mint, list and revoke mailed connect links (people
//! with `credential_administration`). No answer ever carries a link's secret.

use axum::{
    Json, Router,
    extract::{Path, Query, State},
    http::StatusCode,
    routing::{delete, get, post},
};
use serde::Deserialize;
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

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct MintLink {
    email: String,
    ttl_days: Option<i64>,
}

#[derive(Deserialize)]
struct ListQuery {
    #[serde(default)]
    history: bool,
}

async fn create_link(
    ctx: TenantCtx,
    State(state): State<AppState>,
    Path((_, ws, connector)): Path<(String, String, String)>,
    ApiJson(body): ApiJson<MintLink>,
) -> Result<(StatusCode, Json<Minted>)> {
    ctx.require_person(Permission::CredentialAdministration)?;
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

async fn list_links(ctx: TenantCtx, State(state): State<AppState>, Query(q): Query<ListQuery>) -> Result<Json<Vec<Link>>> {
    ctx.require_person(Permission::CredentialAdministration)?;
    Ok(Json(super::list(&state.db, ctx.tenant.id, q.history).await?))
}

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

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/console/t/{tenant}/outbox", get(outbox_page))
        .route("/api/v1/tenants/{tenant}/workspaces/{workspace}/connectors/{id}/connect-links", post(create_link))
        .route("/api/v1/tenants/{tenant}/connect-links", get(list_links))
        .route("/api/v1/tenants/{tenant}/connect-links/{id}", delete(revoke_link))
}
