//! Workspaces (list, status, bound version) and one workspace's connectors (status, tools with
//! read/write labels from the shared catalog, credential slots set/replace/remove — values
//! never shown). Client setup is in `setup.rs`.
//!
//! OAuth connectors: the grant's state, connect (through the signed connect URL) and
//! disconnect.
//!
//! Lifecycle actions (with their confirmation pages) are in `lifecycle.rs`. A connector's last call, classified problem and credential test are in `connector.rs`.

use std::collections::BTreeMap;

use askama::Template;
use axum::{
    Form, Router,
    extract::{Path, Query, State},
    http::StatusCode,
    response::{IntoResponse, Redirect, Response},
    routing::{get, post},
};

use super::{Console, FormError, Layout, PageError, render, when, when_opt};
use crate::{
    AppState,
    error::Error,
    gateway::{catalogs, downstream, surface},
    members::Permission,
    vault::{
        Owner,
        slots::{self, Slot},
    },
    workspaces::{
        self,
        config::{Class, Connector, SlotKind},
    },
};

pub struct WorkspaceRow {
    pub slug: String,
    pub name: String,
    pub status: String,
    pub version: i32,
    pub updated: String,
    pub endpoint: String,
}

#[derive(Template)]
#[template(path = "console/workspaces.html")]
struct ListPage {
    layout: Layout,
    slug: String,
    rows: Vec<WorkspaceRow>,
    /// The slug of the workspace just reaped.
    reaped: Option<String>,
    /// Whether this person may create workspaces (the create form shows).
    can_create: bool,
    error: Option<FormError>,
    form: super::editor::NewWorkspace,
    /// The getting-started steps, until they are all done.
    checklist: Option<Vec<super::onboarding::Step>>,
    /// The service credentials link of step 2.
    credentials_href: String,
}

#[derive(serde::Deserialize)]
struct Listed {
    reaped: Option<String>,
}

pub struct ToolRow {
    pub name: String,
    pub write: bool,
    /// The workspace's read/write override of this tool (`read` or `write`), if any.
    pub overridden: &'static str,
}

pub struct SlotView {
    pub kind: String,
    /// `set`, `missing`, or why it cannot be managed here.
    pub state: String,
    pub fields: Vec<(String, Option<String>)>,
    pub updated: String,
    /// Field names to fill when setting or replacing it; empty when this person may not.
    pub needed: Vec<String>,
    pub manageable: bool,
}

/// An OAuth grant as the connector view shows it (never a token).
pub struct GrantView {
    pub kind: String,
    pub status: String,
    pub account: String,
    pub connected: String,
    /// Whether this person manages it (connect and disconnect).
    pub manageable: bool,
    /// Client credentials: Gatehouse gets its tokens itself, so no person connects it.
    pub client_credentials: bool,
}

pub struct ConnectorView {
    pub id: String,
    pub kind: String,
    pub url: String,
    pub auth: String,
    pub catalog: String,
    pub tools: Vec<ToolRow>,
    pub slot: Option<SlotView>,
    pub grant: Option<GrantView>,
    pub last_call: Option<super::connector::LastCall>,
    pub problem: Option<super::connector::ProblemView>,
    /// The outcome of the credential test just run on this connector.
    pub test: Option<super::connector::TestView>,
}

#[derive(Template)]
#[template(path = "console/workspace.html")]
struct WorkspacePage {
    layout: Layout,
    slug: String,
    workspace: WorkspaceRow,
    actions: Vec<super::lifecycle::Action>,
    connectors: Vec<ConnectorView>,
    error: Option<FormError>,
    notice: Option<String>,
    /// Whether this person edits the configuration (the add and remove forms show).
    can_edit: bool,
    /// The add-connector form's values (shown again after a refusal).
    draft: super::editor::NewConnector,
    tool_rows: usize,
}

pub(super) fn endpoint(state: &AppState, tenant: &str, workspace: &str) -> String {
    format!("{}/t/{tenant}/w/{workspace}/mcp", state.config.public_url.trim_end_matches('/'))
}

fn row(state: &AppState, tenant: &str, w: &workspaces::Workspace) -> WorkspaceRow {
    WorkspaceRow {
        slug: w.slug.clone(),
        name: w.name.clone(),
        status: w.status.clone(),
        version: w.bound_version,
        updated: when(&w.updated_at),
        endpoint: endpoint(state, tenant, &w.slug),
    }
}

async fn list_workspaces(c: Console, State(state): State<AppState>, Query(q): Query<Listed>) -> Result<Response, PageError> {
    let reaped = q.reaped.filter(|s| crate::tenants::validate_slug(s).is_ok());
    let form = super::editor::NewWorkspace { slug: String::new(), name: String::new() };
    list_with(&c, &state, StatusCode::OK, None, form, reaped).await
}

/// The list with the create form showing `form` again and its error.
pub(super) async fn list_page(
    c: &Console,
    state: &AppState,
    status: StatusCode,
    error: Option<FormError>,
    form: super::editor::NewWorkspace,
) -> Result<Response, PageError> {
    list_with(c, state, status, error, form, None).await
}

async fn list_with(
    c: &Console,
    state: &AppState,
    status: StatusCode,
    error: Option<FormError>,
    form: super::editor::NewWorkspace,
    reaped: Option<String>,
) -> Result<Response, PageError> {
    let all = workspaces::list(&state.db, c.ctx.tenant.id).await?;
    let rows = all.iter().map(|w| row(state, c.slug(), w)).collect();
    let checklist = super::onboarding::checklist(c, state, &all).await?;
    let page = ListPage {
        checklist,
        credentials_href: format!("/console/t/{}/service-credentials", c.slug()),
        layout: c.layout("Workspaces", "workspaces"),
        slug: c.slug().to_owned(),
        rows,
        reaped,
        can_create: c.ctx.permissions.has(Permission::CredentialAdministration),
        error,
        form,
    };
    render(status, &page)
}

/// The slot this person would manage for `connector`: the shared one with
/// `credential_administration`, else their own personal one.
fn slot_owner(c: &Console, kind: SlotKind) -> Option<Owner> {
    match kind {
        SlotKind::Shared => c.ctx.permissions.has(Permission::CredentialAdministration).then_some(Owner::Shared),
        SlotKind::Personal => c.ctx.permissions.has(Permission::ConnectorAccess).then_some(Owner::Member(c.member.id)),
    }
}

async fn connector_view(
    c: &Console,
    state: &AppState,
    bound: &workspaces::Bound,
    id: &str,
    connector: &Connector,
    open: &[crate::findings::Finding],
) -> Result<ConnectorView, PageError> {
    let auth = connector.auth();
    let auth_text = match (auth.slot(), auth.oauth()) {
        (Some(kind), _) => format!("credential slot ({})", kind.as_str()),
        (None, Some(o)) => format!("OAuth ({})", o.grant.as_str()),
        _ => "none".into(),
    };
    let (tools, catalog) = match connector {
        Connector::HttpApi(api) => (crate::gateway::http_api_connector::catalog(api), "from the configuration".to_owned()),
        Connector::Peer { blueprint } => {
            (Vec::new(), format!("another workspace's tools (blueprint {blueprint}), resolved at each call"))
        }
        Connector::RemoteMcp { .. } => {
            let key = downstream::key(c.ctx.tenant.id.0, bound.workspace.id.0, id, connector);
            let target = catalogs::Target {
                tenant: c.ctx.tenant.id,
                workspace: bound.workspace.id.0,
                connector_id: id,
                config_key: downstream::config_key(&key),
                pinning: bound.document.pinning,
            };
            match catalogs::load(&state.db, target).await? {
                Some(stored) => {
                    let at = when_opt(&stored.fetched_at);
                    let revision = stored.listing.revision.as_deref().unwrap_or("an unrecorded revision");
                    (stored.tools, format!("fetched {at}, listed in {revision}"))
                }
                None => (Vec::new(), "not fetched yet (the first call through the gateway fetches it)".to_owned()),
            }
        }
    };
    let mut tools: Vec<ToolRow> = tools
        .iter()
        .map(|t| ToolRow {
            name: t.name.to_string(),
            write: surface::classify(&bound.document, id, t) == Class::Write,
            overridden: match bound.document.classification.get(&format!("{id}.{}", t.name)) {
                Some(Class::Read) => "read",
                Some(Class::Write) => "write",
                None => "",
            },
        })
        .collect();
    tools.sort_by(|a, b| a.name.cmp(&b.name));
    let slot = match auth.slot() {
        None => None,
        Some(kind) => Some(match (slot_owner(c, kind), state.config.vault_keys.is_some()) {
            (_, false) => SlotView {
                kind: kind.as_str().into(),
                state: "the vault is off (GATEHOUSE_VAULT_KEYS is not set)".into(),
                fields: Vec::new(),
                updated: String::new(),
                needed: Vec::new(),
                manageable: false,
            },
            (None, true) => SlotView {
                kind: kind.as_str().into(),
                state: "managed by people with credential_administration".into(),
                fields: Vec::new(),
                updated: String::new(),
                needed: Vec::new(),
                manageable: false,
            },
            (Some(owner), true) => {
                let meta = slots::show(
                    &state.db,
                    Slot { tenant: c.ctx.tenant.id, workspace: bound.workspace.id.0, connector: id, owner },
                    kind,
                )
                .await?;
                SlotView {
                    kind: kind.as_str().into(),
                    state: meta.state.into(),
                    fields: meta.fields.into_iter().map(|f| (f.name, f.last4)).collect(),
                    updated: when_opt(&meta.updated_at),
                    needed: auth.fields_needed().into_iter().collect(),
                    manageable: true,
                }
            }
        }),
    };
    let grant = match auth.oauth() {
        None => None,
        Some(o) => Some(match (slot_owner(c, o.grant), state.config.vault_keys.is_some()) {
            (Some(owner), true) => {
                let info = crate::oauth::show(state, c.ctx.tenant.id, bound.workspace.id.0, id, o.grant, owner).await?;
                GrantView {
                    kind: o.grant.as_str().into(),
                    status: info.status,
                    account: info.account_label.unwrap_or_default(),
                    connected: when_opt(&info.connected_at),
                    manageable: true,
                    client_credentials: o.flow == crate::workspaces::config::Flow::ClientCredentials,
                }
            }
            (None, true) => GrantView {
                kind: o.grant.as_str().into(),
                status: "managed by people with credential_administration".into(),
                account: String::new(),
                connected: String::new(),
                manageable: false,
                client_credentials: false,
            },
            (_, false) => GrantView {
                kind: o.grant.as_str().into(),
                status: "the vault is off (GATEHOUSE_VAULT_KEYS is not set)".into(),
                account: String::new(),
                connected: String::new(),
                manageable: false,
                client_credentials: false,
            },
        }),
    };
    let (last_call, problem) = super::connector::health(c, state, &bound.workspace.slug, id, connector, open).await?;
    Ok(ConnectorView {
        last_call,
        problem,
        test: None,
        grant,
        id: id.to_owned(),
        kind: connector.kind().into(),
        url: connector.url().to_owned(),
        auth: auth_text,
        catalog,
        tools,
        slot,
    })
}

pub(super) async fn workspace_page(
    c: &Console,
    state: &AppState,
    ws: &str,
    status: StatusCode,
    error: Option<FormError>,
    notice: Option<String>,
    tested: Option<(String, super::connector::TestView)>,
) -> Result<Response, PageError> {
    let draft = super::editor::NewConnector { kind: "remote_mcp".into(), ..Default::default() };
    page_with(c, state, ws, status, error, notice, tested, draft).await
}

/// The workspace page with the add-connector form showing `draft` again, and why it was refused.
pub(super) async fn editor_page(
    c: &Console,
    state: &AppState,
    ws: &str,
    status: StatusCode,
    error: FormError,
    draft: super::editor::NewConnector,
) -> Result<Response, PageError> {
    page_with(c, state, ws, status, Some(error), None, None, draft).await
}

#[allow(clippy::too_many_arguments)]
async fn page_with(
    c: &Console,
    state: &AppState,
    ws: &str,
    status: StatusCode,
    error: Option<FormError>,
    notice: Option<String>,
    mut tested: Option<(String, super::connector::TestView)>,
    mut draft: super::editor::NewConnector,
) -> Result<Response, PageError> {
    let bound = workspaces::bound(&state.db, c.ctx.tenant.id, ws).await?;
    // The form always carries the version shown now: a refused edit is submitted again
    // against what the page shows, never blindly.
    draft.expected_version = bound.workspace.bound_version.to_string();
    let mut connectors = Vec::new();
    let open = super::connector::open_findings(c, state).await?;
    for (id, connector) in &bound.document.connectors {
        let mut view = connector_view(c, state, &bound, id, connector, &open).await?;
        if tested.as_ref().is_some_and(|(t, _)| t == id) {
            view.test = tested.take().map(|(_, v)| v);
        }
        connectors.push(view);
    }
    let page = WorkspacePage {
        layout: c.layout(&format!("Workspace {}", bound.workspace.name), "workspaces"),
        slug: c.slug().to_owned(),
        actions: super::lifecycle::actions(c, &bound.workspace.status),
        workspace: row(state, c.slug(), &bound.workspace),
        connectors,
        error,
        notice,
        can_edit: c.ctx.permissions.has(Permission::CredentialAdministration),
        draft,
        tool_rows: super::editor::TOOL_ROWS,
    };
    render(status, &page)
}

#[derive(serde::Deserialize)]
struct Shown {
    /// The connector whose credential was just set (after the redirect that follows the form).
    saved: Option<String>,
    /// The lifecycle action just taken.
    done: Option<String>,
    /// The connector just added, and the configuration version that made it.
    added: Option<String>,
    /// The connector just edited in place.
    edited: Option<String>,
    /// The connector whose read/write overrides were just saved.
    classes: Option<String>,
    version: Option<i32>,
}

async fn show_workspace(
    c: Console,
    State(state): State<AppState>,
    Path((_, ws)): Path<(String, String)>,
    Query(q): Query<Shown>,
) -> Result<Response, PageError> {
    let notice =
        q.saved.filter(|id| workspaces::config::valid_connector_id(id)).map(|id| format!("The credential of {id} is set."));
    let done = q.done.clone().filter(|d| ["activate", "suspend", "resume", "archive", "unarchive"].contains(&d.as_str()));
    let notice = notice.or(done.map(|d| format!("Done: {d}.")));
    let notice = notice.or(match q.done.as_deref() {
        Some("created") => Some("Workspace created. Add a connector below.".to_owned()),
        Some("connector_removed") => Some("Connector removed.".to_owned()),
        Some("restored") => Some("Snapshot restored into this new workspace.".to_owned()),
        Some("bound") => Some("Workspace bound to the blueprint version: it runs that configuration now.".to_owned()),
        _ => None,
    });
    let version = q.version.unwrap_or_default();
    let connector = |id: Option<String>, say: &dyn Fn(&str) -> String| {
        id.filter(|id| workspaces::config::valid_connector_id(id)).map(|id| say(&id))
    };
    let notice = notice
        .or(connector(q.added, &|id| {
            format!("Connector {id} added (configuration version {version}). Test its connection to see its tools.")
        }))
        .or(connector(q.edited, &|id| format!("Connector {id} saved (configuration version {version}).")))
        .or(connector(q.classes, &|id| format!("Read/write overrides of {id} saved (configuration version {version}).")));
    workspace_page(&c, &state, &ws, StatusCode::OK, None, notice, None).await
}

/// The managed slot of a connector for this person, checked like the API does: the kind the
/// connector takes, who may manage it, the vault on.
pub(super) async fn managed_slot(
    c: &Console,
    state: &AppState,
    ws: &str,
    id: &str,
) -> Result<(SlotKind, Owner, uuid::Uuid, Connector), Error> {
    let bound = workspaces::bound(&state.db, c.ctx.tenant.id, ws).await?;
    let connector = bound.document.connectors.get(id).ok_or(Error::NotFound { what: "connector" })?;
    let kind = connector.auth().slot().ok_or(Error::NotFound { what: "credential slot" })?;
    let owner = match kind {
        SlotKind::Shared => {
            c.ctx.require_person(Permission::CredentialAdministration)?;
            Owner::Shared
        }
        SlotKind::Personal => Owner::Member(c.ctx.own_member()?),
    };
    slots::require(state.config.vault_keys.as_ref())?;
    let (workspace, connector) = slots::resolve(&state.db, c.ctx.tenant.id, ws, id, kind).await?;
    Ok((kind, owner, workspace, connector))
}

/// Sets or replaces the slot from the form's `field.NAME` inputs; the values go straight to
/// the vault and are never rendered back.
async fn set_slot(
    c: Console,
    State(state): State<AppState>,
    Path((_, ws, id)): Path<(String, String, String)>,
    Form(form): Form<Vec<(String, String)>>,
) -> Result<Response, PageError> {
    let result = async {
        let (kind, owner, workspace, connector) = managed_slot(&c, &state, &ws, &id).await?;
        let ring = slots::require(state.config.vault_keys.as_ref())?;
        let fields: BTreeMap<String, String> =
            form.into_iter().filter_map(|(k, v)| k.strip_prefix("field.").map(|name| (name.to_owned(), v))).collect();
        slots::check_fields(&connector, &fields)?;
        let slot = Slot { tenant: c.ctx.tenant.id, workspace, connector: &id, owner };
        slots::set(&state.db, ring, &c.ctx.audit, slot, kind, slots::Fields(fields)).await
    }
    .await;
    match result {
        // Post/redirect/get: a reload must not send the values again.
        Ok(_) => Ok(Redirect::to(&format!("/console/t/{}/workspaces/{ws}?saved={id}", c.slug())).into_response()),
        Err(e @ Error::Forbidden { .. }) => Err(e.into()),
        Err(e) => workspace_page(&c, &state, &ws, StatusCode::UNPROCESSABLE_ENTITY, Some(FormError::of(e)?), None, None).await,
    }
}

async fn remove_slot(
    c: Console,
    State(state): State<AppState>,
    Path((_, ws, id)): Path<(String, String, String)>,
) -> Result<Response, PageError> {
    let (_, owner, workspace, _) = managed_slot(&c, &state, &ws, &id).await?;
    slots::remove(&state.db, &c.ctx.audit, Slot { tenant: c.ctx.tenant.id, workspace, connector: &id, owner }).await?;
    Ok(Redirect::to(&format!("/console/t/{}/workspaces/{ws}", c.slug())).into_response())
}

/// The grant of an OAuth connector this person manages: the shared one needs
/// `credential_administration`, a personal one is their own.
async fn managed_grant(
    c: &Console,
    state: &AppState,
    ws: &str,
    id: &str,
) -> Result<(uuid::Uuid, Connector, crate::workspaces::config::OauthAuth, Owner), Error> {
    let bound = workspaces::bound(&state.db, c.ctx.tenant.id, ws).await?;
    let connector = bound.document.connectors.get(id).ok_or(Error::NotFound { what: "connector" })?.clone();
    let o = connector.auth().oauth().cloned().ok_or(Error::NotFound { what: "grant" })?;
    let owner = match o.grant {
        SlotKind::Shared => {
            c.ctx.require_person(Permission::CredentialAdministration)?;
            Owner::Shared
        }
        SlotKind::Personal => Owner::Member(c.ctx.own_member()?),
    };
    Ok((bound.workspace.id.0, connector, o, owner))
}

/// A link, not a form: minting the signed connect URL writes nothing, and a form's
/// `form-action` policy would stop the redirect on to the authorization server. Another
/// site may not start the flow for a signed-in person: a browser that says where the
/// navigation came from (`Sec-Fetch-Site`) must say this origin, or a typed URL.
async fn oauth_connect(
    c: Console,
    State(state): State<AppState>,
    headers: axum::http::HeaderMap,
    Path((_, ws, id)): Path<(String, String, String)>,
) -> Result<Response, PageError> {
    let site = headers.get("sec-fetch-site").and_then(|v| v.to_str().ok());
    if site.is_some_and(|s| s != "same-origin" && s != "none") {
        return Err(
            Error::Forbidden { code: "cross_site_request", message: "start connecting from the console itself".into() }.into()
        );
    }
    managed_grant(&c, &state, &ws, &id).await?;
    c.ctx.refuse_impersonation("mint OAuth connect URLs")?;
    let url = crate::oauth::connect_url(&state, c.slug(), &ws, &id, c.member.id).await?;
    Ok(Redirect::to(&url).into_response())
}

async fn oauth_disconnect(
    c: Console,
    State(state): State<AppState>,
    Path((_, ws, id)): Path<(String, String, String)>,
) -> Result<Response, PageError> {
    let (workspace, connector, o, owner) = managed_grant(&c, &state, &ws, &id).await?;
    let slot = Slot { tenant: c.ctx.tenant.id, workspace, connector: &id, owner };
    crate::oauth::disconnect(&state, &c.ctx.audit, &slot, &connector, &o).await?;
    Ok(Redirect::to(&format!("/console/t/{}/workspaces/{ws}", c.slug())).into_response())
}

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/console/t/{tenant}/workspaces", get(list_workspaces))
        .route("/console/t/{tenant}/workspaces/{workspace}", get(show_workspace))
        .route("/console/t/{tenant}/workspaces/{workspace}/connectors/{id}/credential", post(set_slot))
        .route("/console/t/{tenant}/workspaces/{workspace}/connectors/{id}/credential/remove", post(remove_slot))
        .route("/console/t/{tenant}/workspaces/{workspace}/connectors/{id}/oauth/connect", get(oauth_connect))
        .route("/console/t/{tenant}/workspaces/{workspace}/connectors/{id}/oauth/disconnect", post(oauth_disconnect))
}
