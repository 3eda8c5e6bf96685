//! The checklist on a tenant's first page until its three steps are done: add a connector,
//! create credentials (an access token and a service credential, each secret shown once), and
//! connect a client with the configuration from "Client setup". Each step links to its page
//! and is marked done from the tenant's own state, so the list is the same on every replica
//! and for every owner or admin. Only those who can take the steps (owners and admins) see it.

use super::{Console, PageError};
use crate::{AppState, members::Permission, workspaces};

pub struct Step {
    pub n: u8,
    pub title: &'static str,
    pub detail: String,
    pub href: String,
    pub link: &'static str,
    pub done: bool,
}

/// The steps, or `None` once all are done (or for someone who cannot take them).
pub async fn checklist(c: &Console, state: &AppState, all: &[workspaces::Workspace]) -> Result<Option<Vec<Step>>, PageError> {
    if !c.ctx.permissions.has(Permission::CredentialAdministration) {
        return Ok(None);
    }
    let tenant = c.ctx.tenant.id;
    let base = format!("/console/t/{}", c.slug());
    let with_connector = workspaces::first_with_connector(&state.db, tenant).await?;
    let tokens: Vec<_> = crate::tokens::list(&state.db, tenant).await?.into_iter().filter(|t| t.revoked_at.is_none()).collect();
    let credentials: Vec<_> =
        crate::service_credentials::list(&state.db, tenant).await?.into_iter().filter(|s| s.revoked_at.is_none()).collect();
    let used = tokens.iter().any(|t| t.last_used_at.is_some()) && credentials.iter().any(|s| s.last_used_at.is_some());
    let (connector_href, connector_detail) = match (all.first(), &with_connector) {
        (_, Some(ws)) => (format!("{base}/workspaces/{ws}"), format!("The workspace {ws} has one.")),
        (Some(w), None) => (
            format!("{base}/workspaces/{}#h-add", w.slug),
            "A remote MCP server or an HTTP API, on the workspace's page; \"Test connection\" shows its tools.".to_owned(),
        ),
        (None, None) => {
            ("#h-create".to_owned(), "Create a workspace first (below), then add a connector on its page.".to_owned())
        }
    };
    let steps = vec![
        Step { n: 1, title: "Add a connector", detail: connector_detail, href: connector_href, link: "Add a connector", done: with_connector.is_some() },
        Step {
            n: 2,
            title: "Create credentials",
            detail: "A client presents an access token and a service credential; each secret is shown once, when it is created.".into(),
            href: format!("{base}/tokens"),
            link: "Create an access token",
            done: !tokens.is_empty() && !credentials.is_empty(),
        },
        Step {
            n: 3,
            title: "Copy the client configuration",
            detail: "A configuration for MCP clients and a Python SDK snippet per workspace; done once a client has used both credentials.".into(),
            href: format!("{base}/setup"),
            link: "Client setup",
            done: used,
        },
    ];
    Ok((!steps.iter().all(|s| s.done)).then_some(steps))
}
