//! Editing a workspace's configuration beyond adding and removing connectors: a connector's
//! configuration in place (its URL, transport, headers, credential slot or OAuth, deadline,
//! or an HTTP API's tools), and the policy sections (grants, pools, classification overrides,
//! approvals, redaction, pinning), each in the API's JSON form.
//!
//! Each save is one new configuration version, made through the API's functions with the
//! version the page showed: an edit someone else made meanwhile is refused (`binding_changed`)
//! and nothing is written. The refused page keeps what the person typed and shows the saved
//! value beside it, with the current version, so they can merge and submit again.

use askama::Template;
use axum::{
    Form, Router,
    extract::{Path, State},
    http::StatusCode,
    response::{IntoResponse, Redirect, Response},
    routing::get,
};
use serde::Deserialize;
use serde_json::{Value, json};

use super::{
    Console, FormError, Layout, PageError,
    editor::{expected, field_issue, shown_as},
    render,
};
use crate::{
    AppState,
    error::Error,
    members::Permission,
    workspaces::{self, Bound},
};

/// Who edits a workspace's configuration: the API's rule.
const EDITOR: Permission = Permission::CredentialAdministration;

/// One policy section: its key in the document, title, what it does, and an example.
pub struct Section {
    pub key: &'static str,
    pub title: &'static str,
    pub help: &'static str,
    pub example: &'static str,
}

pub const SECTIONS: [Section; 6] = [
    Section {
        key: "grants",
        title: "Grants",
        help: "Who may use which connectors and tools. Empty: everyone with connector access uses every tool. Otherwise only what a grant names: to is role:owner|admin|operator|member, member:<id> or machines; tools are connector ids or connector.tool addresses.",
        example: r#"[{"to": "role:member", "tools": ["crm.search"]}, {"to": "machines", "tools": ["crm"]}]"#,
    },
    Section {
        key: "pools",
        title: "Pools",
        help: "Named subsets of the tools, each served at this workspace's endpoint followed by /<pool>. A pool only narrows what grants allow; native serves the downstream tools under their own names.",
        example: r#"{"support": {"tools": ["crm.search", "tickets"], "native": false}}"#,
    },
    Section {
        key: "classification",
        title: "Read and write overrides",
        help: "A tool's class, read or write, by connector.tool address, overriding what its server says. Unlisted tools are classified from their annotations, and a tool that says nothing is a write.",
        example: r#"{"crm.search": "read", "crm.export": "write"}"#,
    },
    Section {
        key: "approvals",
        title: "Approvals",
        help: "Writes a person must approve before they are made: tools are connector ids or connector.tool addresses, to whose calls need approval (absent: everyone's), expires_in_s 60 to 86400.",
        example: r#"[{"tools": ["crm.delete"], "to": ["machines"], "expires_in_s": 900}]"#,
    },
    Section {
        key: "redaction",
        title: "Redaction",
        help: "Detectors applied to tool results and recorded arguments: built-ins by name (pem_private_key, aws_access_key, jwt, gatehouse_token, gatehouse_client_secret, gatehouse_client_id) or a named regex; action mask or block.",
        example: r#"{"detectors": [{"name": "jwt", "action": "mask"}, {"name": "ticket", "regex": "TCK-[0-9]{6}", "action": "block"}]}"#,
    },
    Section {
        key: "pinning",
        title: "Pinned tool definitions",
        help: "What agents see of a tool whose definition changed until an admin approves it (on_change: serve_pinned or hide), and whether tools new after the first catalog wait for approval.",
        example: r#"{"on_change": "hide", "quarantine_new_tools": true}"#,
    },
];

fn section(key: &str) -> Option<&'static Section> {
    SECTIONS.iter().find(|s| s.key == key)
}

/// A value as the page shows it: pretty JSON, empty for an absent section.
fn pretty(value: Option<&Value>) -> String {
    match value {
        None | Some(Value::Null) => String::new(),
        Some(v) => serde_json::to_string_pretty(v).unwrap_or_default(),
    }
}

/// The document's sections as JSON (an absent one is left out, as the API stores it).
fn sections_of(bound: &Bound) -> Result<serde_json::Map<String, Value>, Error> {
    match serde_json::to_value(&bound.document).map_err(|e| Error::Internal(e.into()))? {
        Value::Object(map) => Ok(map),
        _ => Ok(serde_json::Map::new()),
    }
}

/// A refused save: its error as the page shows it (an edit made meanwhile in the page's
/// words), and the page's status.
fn refused(e: Error) -> Result<(FormError, StatusCode), PageError> {
    let error = shown_as(
        e,
        "This workspace's configuration changed since you opened this page; nothing was saved. Your text is kept below, beside the value saved now: merge them and save again.",
    )?;
    let status = if error.code == "binding_changed" { StatusCode::PRECONDITION_FAILED } else { StatusCode::UNPROCESSABLE_ENTITY };
    Ok((error, status))
}

/// Back to the workspace page at connector `id`, which says what was saved (`what`: `edited`
/// or `classes`) and in which version.
fn to_connector(c: &Console, ws: &str, what: &str, id: &str, version: i32) -> Response {
    Redirect::to(&format!("/console/t/{}/workspaces/{ws}?{what}={id}&version={version}#connector-{id}", c.slug())).into_response()
}

/// One section as the page shows it.
pub struct SectionView {
    pub section: &'static Section,
    /// The textarea's text: the saved value, or what was posted when a save was refused.
    pub text: String,
    /// The saved value, shown beside a refused draft.
    pub saved: Option<String>,
}

#[derive(Template)]
#[template(path = "console/policy.html")]
struct PolicyPage {
    layout: Layout,
    slug: String,
    workspace: String,
    version: i32,
    sections: Vec<SectionView>,
    notice: Option<String>,
    error: Option<FormError>,
}

#[derive(Deserialize, Default)]
struct Draft {
    #[serde(default)]
    section: String,
    #[serde(default)]
    value: String,
    #[serde(default)]
    expected_version: String,
}

#[derive(Deserialize)]
struct Saved {
    saved: Option<String>,
}

async fn policy_page(
    c: &Console,
    state: &AppState,
    ws: &str,
    status: StatusCode,
    notice: Option<String>,
    refused: Option<(FormError, Draft)>,
) -> Result<Response, PageError> {
    let bound = workspaces::bound(&state.db, c.ctx.tenant.id, ws).await?;
    let saved = sections_of(&bound)?;
    let (error, draft) = match refused {
        Some((e, d)) => (Some(e), Some(d)),
        None => (None, None),
    };
    let sections = SECTIONS
        .iter()
        .map(|s| {
            let current = pretty(saved.get(s.key));
            match &draft {
                Some(d) if d.section == s.key => {
                    SectionView { section: s, text: d.value.clone(), saved: Some(current).filter(|c| *c != d.value) }
                }
                _ => SectionView { section: s, text: current, saved: None },
            }
        })
        .collect();
    let page = PolicyPage {
        layout: c.layout(&format!("Policy of {ws}"), "workspaces"),
        slug: c.slug().to_owned(),
        workspace: ws.to_owned(),
        version: bound.workspace.bound_version,
        sections,
        notice,
        error,
    };
    render(status, &page)
}

async fn show_policy(
    c: Console,
    State(state): State<AppState>,
    Path((_, ws)): Path<(String, String)>,
    axum::extract::Query(q): axum::extract::Query<Saved>,
) -> Result<Response, PageError> {
    c.require(EDITOR)?;
    let notice = q.saved.as_deref().and_then(section).map(|s| format!("{} saved as a new configuration version.", s.title));
    policy_page(&c, &state, &ws, StatusCode::OK, notice, None).await
}

async fn save_policy(
    c: Console,
    State(state): State<AppState>,
    Path((_, ws)): Path<(String, String)>,
    Form(draft): Form<Draft>,
) -> Result<Response, PageError> {
    c.require(EDITOR)?;
    let saved = async {
        let s = section(&draft.section).ok_or_else(|| field_issue("section", "not a section of the configuration"))?;
        let value = match draft.value.trim() {
            "" => Value::Null,
            text => serde_json::from_str(text).map_err(|e| field_issue(s.key, format!("not JSON: {e}")))?,
        };
        let expected = expected(&draft.expected_version)?;
        workspaces::configure(&state.db, c.ctx.tenant.id, &c.ctx.audit, &ws, expected, &json!({ s.key: value })).await?;
        Ok::<_, Error>(s.key)
    }
    .await;
    match saved {
        Ok(key) => {
            Ok(Redirect::to(&format!("/console/t/{}/workspaces/{ws}/policy?saved={key}#section-{key}", c.slug())).into_response())
        }
        Err(e) => {
            let (error, status) = refused(e)?;
            policy_page(&c, &state, &ws, status, None, Some((error, draft))).await
        }
    }
}

#[derive(Template)]
#[template(path = "console/connector_edit.html")]
struct EditPage {
    layout: Layout,
    slug: String,
    workspace: String,
    id: String,
    version: i32,
    text: String,
    saved: Option<String>,
    error: Option<FormError>,
}

#[derive(Deserialize, Default)]
struct EditDraft {
    #[serde(default)]
    config: String,
    #[serde(default)]
    expected_version: String,
}

async fn edit_page(
    c: &Console,
    state: &AppState,
    ws: &str,
    id: &str,
    status: StatusCode,
    refused: Option<(FormError, String)>,
) -> Result<Response, PageError> {
    let bound = workspaces::bound(&state.db, c.ctx.tenant.id, ws).await?;
    let connector = bound.document.connectors.get(id).ok_or(Error::NotFound { what: "connector" })?;
    let current = serde_json::to_string_pretty(connector).map_err(|e| Error::Internal(e.into()))?;
    let (error, text, saved) = match refused {
        Some((e, text)) => {
            let saved = Some(current).filter(|c| *c != text);
            (Some(e), text, saved)
        }
        None => (None, current, None),
    };
    let page = EditPage {
        layout: c.layout(&format!("Edit connector {id}"), "workspaces"),
        slug: c.slug().to_owned(),
        workspace: ws.to_owned(),
        id: id.to_owned(),
        version: bound.workspace.bound_version,
        text,
        saved,
        error,
    };
    render(status, &page)
}

async fn show_edit(
    c: Console,
    State(state): State<AppState>,
    Path((_, ws, id)): Path<(String, String, String)>,
) -> Result<Response, PageError> {
    c.require(EDITOR)?;
    edit_page(&c, &state, &ws, &id, StatusCode::OK, None).await
}

async fn save_edit(
    c: Console,
    State(state): State<AppState>,
    Path((_, ws, id)): Path<(String, String, String)>,
    Form(draft): Form<EditDraft>,
) -> Result<Response, PageError> {
    c.require(EDITOR)?;
    let saved = async {
        let value: Value = serde_json::from_str(&draft.config).map_err(|e| field_issue("config", format!("not JSON: {e}")))?;
        let connector = crate::workspaces::http::parse_connector(&id, value)?;
        crate::vault::slots::check_connector(state.config.vault_keys.as_ref(), &connector)?;
        let expected = expected(&draft.expected_version)?;
        workspaces::replace_connector(&state.db, c.ctx.tenant.id, &c.ctx.audit, &ws, expected, &id, connector).await
    }
    .await;
    match saved {
        Ok(bound) => Ok(to_connector(&c, &ws, "edited", &id, bound.workspace.bound_version)),
        Err(e @ Error::NotFound { .. }) => Err(e.into()),
        Err(e) => {
            let (error, status) = refused(e)?;
            edit_page(&c, &state, &ws, &id, status, Some((error, draft.config))).await
        }
    }
}

/// The read/write overrides of one connector's tools, as the workspace page's table posts
/// them: `class.<tool>` = `read`, `write` or empty (as the server says).
#[derive(Deserialize)]
struct Classes {
    #[serde(default)]
    expected_version: String,
    #[serde(flatten)]
    fields: std::collections::BTreeMap<String, String>,
}

/// Saves one connector's overrides: the workspace's classification with this connector's
/// entries replaced by the ones chosen, as one new configuration version.
async fn save_classes(
    c: Console,
    State(state): State<AppState>,
    Path((_, ws, id)): Path<(String, String, String)>,
    Form(form): Form<Classes>,
) -> Result<Response, PageError> {
    c.require(EDITOR)?;
    let saved = async {
        let expected = expected(&form.expected_version)?;
        let bound = workspaces::bound(&state.db, c.ctx.tenant.id, &ws).await?;
        if !bound.document.connectors.contains_key(&id) {
            return Err(Error::NotFound { what: "connector" });
        }
        let prefix = format!("{id}.");
        let mut classes = serde_json::Map::new();
        for (address, class) in &bound.document.classification {
            if !address.starts_with(&prefix) {
                classes.insert(address.clone(), json!(class));
            }
        }
        for (field, class) in &form.fields {
            let Some(tool) = field.strip_prefix("class.") else { continue };
            match class.as_str() {
                "" => {}
                "read" | "write" => {
                    classes.insert(format!("{prefix}{tool}"), json!(class));
                }
                _ => return Err(field_issue(field, "an override is read, write or none")),
            }
        }
        let patch = json!({ "classification": if classes.is_empty() { Value::Null } else { Value::Object(classes) } });
        workspaces::configure(&state.db, c.ctx.tenant.id, &c.ctx.audit, &ws, expected, &patch).await
    }
    .await;
    match saved {
        Ok(bound) => Ok(to_connector(&c, &ws, "classes", &id, bound.workspace.bound_version)),
        Err(e @ Error::NotFound { .. }) => Err(e.into()),
        Err(e) => {
            let (error, status) = refused(e)?;
            super::workspaces::workspace_page(&c, &state, &ws, status, Some(error), None, None).await
        }
    }
}

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/console/t/{tenant}/workspaces/{workspace}/policy", get(show_policy).post(save_policy))
        .route("/console/t/{tenant}/workspaces/{workspace}/connectors/{id}/edit", get(show_edit).post(save_edit))
        .route("/console/t/{tenant}/workspaces/{workspace}/connectors/{id}/classes", axum::routing::post(save_classes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_section_is_one_the_api_configures_and_its_example_is_valid() {
        for s in &SECTIONS {
            let example: Value = serde_json::from_str(s.example).unwrap();
            let mut doc = serde_json::Map::new();
            doc.insert(s.key.into(), example);
            doc.insert(
                "connectors".into(),
                json!({
                    "crm": {"kind": "remote_mcp", "url": "https://crm.example/mcp"},
                    "tickets": {"kind": "remote_mcp", "url": "https://t.example/mcp"},
                }),
            );
            let document: crate::workspaces::config::Document =
                serde_json::from_value(Value::Object(doc)).unwrap_or_else(|e| panic!("{}: {e}", s.key));
            document.validate().unwrap_or_else(|e| panic!("{}: {e}", s.key));
        }
    }

    #[test]
    fn an_absent_section_shows_empty_and_a_present_one_pretty() {
        assert_eq!(pretty(None), "");
        assert_eq!(pretty(Some(&Value::Null)), "");
        assert_eq!(pretty(Some(&json!({"a": 1}))), "{\n  \"a\": 1\n}");
    }
}
