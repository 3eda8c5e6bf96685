//! Authorized MCP clients (OAuth, `src/mcp_auth/`): owners and admins see the tenant's clients
//! and every member's grants, revoke a client, and revoke a grant, each through a confirmation
//! page. The checks are the API's; revocation takes effect on the next request everywhere.

use askama::Template;
use axum::{
    Router,
    extract::{Path, Query, State},
    http::StatusCode,
    response::{IntoResponse, Redirect, Response},
    routing::get,
};
use serde::Deserialize;

use super::{ConfirmPage, Console, Layout, PageError, render, when, who};
use crate::{AppState, error::Error, extract::parse_id, mcp_auth::grants};

pub struct ClientRow {
    pub id: String,
    pub client_id: String,
    pub kind: String,
    pub name: String,
    pub redirect_uris: String,
    pub created: String,
    pub revoked: Option<String>,
}

pub struct GrantRow {
    pub id: String,
    pub client: String,
    pub member: String,
    pub resource: String,
    pub scope: String,
    pub created: String,
    /// When and why it stopped (`None`: live).
    pub revoked: Option<String>,
}

#[derive(Template)]
#[template(path = "console/mcp_clients.html")]
struct ClientsPage {
    layout: Layout,
    slug: String,
    clients: Vec<ClientRow>,
    grants: Vec<GrantRow>,
    notice: Option<String>,
}

#[derive(Deserialize)]
struct Done {
    done: Option<String>,
}

async fn list(c: Console, State(state): State<AppState>, Query(q): Query<Done>) -> Result<Response, PageError> {
    c.require_admin()?;
    let tenant = c.ctx.tenant.id;
    let members: std::collections::HashMap<uuid::Uuid, String> = crate::members::list(&state.db, tenant)
        .await?
        .into_iter()
        .map(|m| (m.id, who(m.email.as_deref(), m.display_name.as_deref(), &m.subject)))
        .collect();
    let clients = grants::clients(&state.db, tenant)
        .await?
        .into_iter()
        .map(|cl| ClientRow {
            id: cl.id.to_string(),
            client_id: cl.client_id,
            kind: cl.kind,
            name: cl.name,
            redirect_uris: cl.redirect_uris.join(" "),
            created: when(&cl.created_at),
            revoked: cl.revoked_at.as_ref().map(when),
        })
        .collect();
    let grants = grants::grants(&state.db, tenant, None)
        .await?
        .into_iter()
        .map(|g| GrantRow {
            id: g.id.to_string(),
            client: g.client.name,
            member: members.get(&g.member_id).cloned().unwrap_or_else(|| format!("removed member {}", g.member_id)),
            resource: g.resource,
            scope: g.scope,
            created: when(&g.created_at),
            revoked: g
                .revoked_at
                .as_ref()
                .map(|at| format!("{} ({})", when(at), g.revoked_reason.as_deref().unwrap_or("revoked"))),
        })
        .collect();
    let notice = match q.done.as_deref() {
        Some("client") => Some("The client is revoked: its tokens are refused from their next request.".to_owned()),
        Some("grant") => Some("The grant is revoked: its tokens are refused from their next request.".to_owned()),
        _ => None,
    };
    let page = ClientsPage { layout: c.layout("MCP clients", "mcp-clients"), slug: c.slug().to_owned(), clients, grants, notice };
    render(StatusCode::OK, &page)
}

fn confirm(c: &Console, title: &str, question: String, consequence: &str, action: String, button: &str) -> ConfirmPage {
    ConfirmPage {
        layout: c.layout(title, "mcp-clients"),
        question,
        consequence: consequence.into(),
        action,
        button: button.into(),
        cancel: format!("/console/t/{}/mcp-clients", c.slug()),
    }
}

async fn confirm_revoke_client(
    c: Console,
    State(state): State<AppState>,
    Path((_, id)): Path<(String, String)>,
) -> Result<Response, PageError> {
    c.require_admin()?;
    let id = parse_id(&id, "client")?;
    let client = grants::clients(&state.db, c.ctx.tenant.id)
        .await?
        .into_iter()
        .find(|cl| cl.id == id && cl.revoked_at.is_none())
        .ok_or(Error::NotFound { what: "client" })?;
    let page = confirm(
        &c,
        "Revoke MCP client",
        format!("Revoke the client “{}” ({})?", client.name, client.client_id),
        "Every grant of this client stops working on its next request, and it cannot be authorized again.",
        format!("/console/t/{}/mcp-clients/{id}/revoke", c.slug()),
        "Revoke client",
    );
    render(StatusCode::OK, &page)
}

async fn revoke_client(
    c: Console,
    State(state): State<AppState>,
    Path((_, id)): Path<(String, String)>,
) -> Result<Response, PageError> {
    c.require_admin()?;
    grants::revoke_client(&state.db, c.ctx.tenant.id, &c.ctx.audit, parse_id(&id, "client")?).await?;
    Ok(Redirect::to(&format!("/console/t/{}/mcp-clients?done=client", c.slug())).into_response())
}

async fn confirm_revoke_grant(
    c: Console,
    State(state): State<AppState>,
    Path((_, id)): Path<(String, String)>,
) -> Result<Response, PageError> {
    c.require_admin()?;
    let id = parse_id(&id, "grant")?;
    let grant = grants::grants(&state.db, c.ctx.tenant.id, None)
        .await?
        .into_iter()
        .find(|g| g.id == id && g.revoked_at.is_none())
        .ok_or(Error::NotFound { what: "grant" })?;
    let page = confirm(
        &c,
        "Revoke MCP grant",
        format!("Revoke the grant of “{}” to {}?", grant.client.name, grant.resource),
        "Its access and refresh tokens are refused from their next request; the member can authorize the client again.",
        format!("/console/t/{}/mcp-grants/{id}/revoke", c.slug()),
        "Revoke grant",
    );
    render(StatusCode::OK, &page)
}

async fn revoke_grant(
    c: Console,
    State(state): State<AppState>,
    Path((_, id)): Path<(String, String)>,
) -> Result<Response, PageError> {
    c.require_admin()?;
    grants::revoke_grant(&state.db, c.ctx.tenant.id, &c.ctx.audit, parse_id(&id, "grant")?, None).await?;
    Ok(Redirect::to(&format!("/console/t/{}/mcp-clients?done=grant", c.slug())).into_response())
}

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/console/t/{tenant}/mcp-clients", get(list))
        .route("/console/t/{tenant}/mcp-clients/{id}/revoke", get(confirm_revoke_client).post(revoke_client))
        .route("/console/t/{tenant}/mcp-grants/{id}/revoke", get(confirm_revoke_grant).post(revoke_grant))
}
