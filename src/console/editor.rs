//! Editing workspaces in the browser: create a workspace, add a connector (a remote MCP server
//! from form fields, or any connector in the API's JSON form), remove one after a
//! confirmation page, and "Test connection" (fetch the connector's catalog now, so its tools
//! show with their read/write labels).
//!
//! Every edit is a new configuration version made through the same functions as the API, with
//! the version the page showed as the expected one: a concurrent edit is refused
//! (`binding_changed`) and nothing is written. Validation errors are the API's, field by field.

use std::collections::BTreeMap;

use axum::{
    Form, Router,
    extract::{Path, State},
    http::StatusCode,
    response::{IntoResponse, Redirect, Response},
    routing::{get, post},
};
use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::{ConfirmPage, Console, FormError, PageError, render};
use crate::{AppState, error::Error, members::Permission, workspaces};

/// Who edits workspaces and their connectors: the API's rule.
const EDITOR: Permission = Permission::CredentialAdministration;

#[derive(Deserialize)]
pub struct NewWorkspace {
    #[serde(default)]
    pub slug: String,
    #[serde(default)]
    pub name: String,
}

async fn create_workspace(
    c: Console,
    State(state): State<AppState>,
    Form(form): Form<NewWorkspace>,
) -> Result<Response, PageError> {
    c.ctx.require_person(EDITOR)?;
    let name = Some(form.name.trim()).filter(|n| !n.is_empty());
    match workspaces::create(&state.db, c.ctx.tenant.id, &c.ctx.audit, form.slug.trim(), name).await {
        Ok(ws) => Ok(Redirect::to(&format!("/console/t/{}/workspaces/{}?done=created", c.slug(), ws.slug)).into_response()),
        Err(e) => {
            let error = FormError::of(e)?;
            super::workspaces::list_page(&c, &state, StatusCode::UNPROCESSABLE_ENTITY, Some(error), form).await
        }
    }
}

/// The add-connector form as posted (also what the form shows again after a refusal).
#[derive(Deserialize, Default, Clone)]
pub struct NewConnector {
    #[serde(default)]
    pub id: String,
    /// `remote_mcp` (the fields below) or `json` (`config`, the API's form of any connector).
    #[serde(default)]
    pub kind: String,
    #[serde(default)]
    pub url: String,
    /// Empty (streamable HTTP) or `sse`.
    #[serde(default)]
    pub transport: String,
    /// Empty, `shared` or `personal`: a credential slot filling `auth_headers`.
    #[serde(default)]
    pub auth: String,
    /// `Name: value` lines; `{field}` names a field of the slot.
    #[serde(default)]
    pub auth_headers: String,
    /// With `auth` `oauth_shared` or `oauth_personal`: a statically registered client id
    /// (empty: dynamic registration) and the scopes to ask for (space-separated).
    #[serde(default)]
    pub oauth_client_id: String,
    #[serde(default)]
    pub oauth_scopes: String,
    /// `Name: value` lines sent as they are (not secret).
    #[serde(default)]
    pub headers: String,
    #[serde(default)]
    pub timeout_ms: String,
    #[serde(default)]
    pub config: String,
    /// An HTTP API's base URL (`kind` `http_api`).
    #[serde(default)]
    pub base_url: String,
    /// The configuration version the page showed.
    #[serde(default)]
    pub expected_version: String,
    /// The tool editor's rows (`tool_{n}_{field}`, n below [`TOOL_ROWS`]); other fields of
    /// the form land here too and are ignored.
    #[serde(flatten)]
    pub rest: BTreeMap<String, String>,
}

/// Tool rows of the HTTP API editor; an API with more tools is added as JSON.
pub const TOOL_ROWS: usize = 3;

impl NewConnector {
    /// Field `field` of tool row `n` as posted ("" when absent).
    pub fn tool(&self, n: &usize, field: &str) -> &str {
        self.rest.get(&format!("tool_{n}_{field}")).map(String::as_str).unwrap_or("")
    }
}

/// `a, b c` as `["a", "b", "c"]`.
fn names(list: &str) -> Vec<String> {
    list.split([',', ' ']).map(str::trim).filter(|s| !s.is_empty()).map(str::to_owned).collect()
}

/// The tools of the HTTP API editor's rows that have a name, in the API's form.
fn tools(form: &NewConnector) -> Result<Vec<Value>, Error> {
    let mut tools = Vec::new();
    for n in 0..TOOL_ROWS {
        let name = form.tool(&n, "name").trim();
        if name.is_empty() {
            continue;
        }
        let mut t = Map::new();
        t.insert("name".into(), json!(name));
        t.insert("description".into(), json!(form.tool(&n, "description").trim()));
        t.insert("method".into(), json!(form.tool(&n, "method").trim().to_uppercase()));
        t.insert("path".into(), json!(form.tool(&n, "path").trim()));
        let schema = form.tool(&n, "input_schema").trim();
        if !schema.is_empty() {
            let v: Value = serde_json::from_str(schema).map_err(|e| {
                field_issue(&format!("tool_{n}_input_schema"), format!("tool {name}: the input schema is not JSON: {e}"))
            })?;
            t.insert("input_schema".into(), v);
        }
        for part in ["query", "body"] {
            let list = names(form.tool(&n, part));
            if !list.is_empty() {
                t.insert(part.into(), json!(list));
            }
        }
        t.insert("read_only".into(), json!(form.tool(&n, "read_only") == "on"));
        tools.push(Value::Object(t));
    }
    Ok(tools)
}

pub(super) fn field_issue(field: &str, message: impl Into<String>) -> Error {
    Error::InvalidConfig { issues: vec![crate::error::FieldIssue { field: field.into(), message: message.into() }] }
}

/// `Name: value` lines as a header map; `field` names the form field in an error.
pub fn header_lines(text: &str, field: &str) -> Result<BTreeMap<String, String>, Error> {
    let mut headers = BTreeMap::new();
    for (n, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let Some((name, value)) = line.split_once(':') else {
            return Err(field_issue(field, format!("line {} is not `Name: value`", n + 1)));
        };
        let name = name.trim();
        if name.is_empty() {
            return Err(field_issue(field, format!("line {} has no header name", n + 1)));
        }
        if headers.insert(name.to_owned(), value.trim().to_owned()).is_some() {
            return Err(field_issue(field, format!("the header {name} is given twice")));
        }
    }
    Ok(headers)
}

/// The connector's JSON form (the API's) from the posted form.
pub fn connector_json(form: &NewConnector) -> Result<Value, Error> {
    if form.kind == "json" {
        let value: Value = serde_json::from_str(&form.config).map_err(|e| field_issue("config", format!("not JSON: {e}")))?;
        if !value.is_object() {
            return Err(field_issue("config", "a connector is a JSON object with its `kind`"));
        }
        return Ok(value);
    }
    let mut c = Map::new();
    match form.kind.as_str() {
        "remote_mcp" => {
            c.insert("kind".into(), json!("remote_mcp"));
            c.insert("url".into(), json!(form.url.trim()));
            match form.transport.as_str() {
                "" | "streamable_http" => {}
                "sse" => {
                    c.insert("transport".into(), json!("sse"));
                }
                _ => return Err(field_issue("transport", "the transport is streamable HTTP or SSE")),
            }
        }
        "http_api" => {
            c.insert("kind".into(), json!("http_api"));
            c.insert("base_url".into(), json!(form.base_url.trim()));
            c.insert("tools".into(), Value::Array(tools(form)?));
        }
        _ => return Err(field_issue("kind", "choose a remote MCP server, an HTTP API or a configuration in JSON")),
    }
    let headers = header_lines(&form.headers, "headers")?;
    if !headers.is_empty() {
        c.insert("headers".into(), json!(headers));
    }
    match form.auth.as_str() {
        "" | "none" => {}
        slot @ ("shared" | "personal") => {
            let headers = header_lines(&form.auth_headers, "auth_headers")?;
            if headers.is_empty() {
                return Err(field_issue(
                    "auth_headers",
                    "a credential slot fills at least one header, e.g. `Authorization: Bearer {token}`",
                ));
            }
            c.insert("auth".into(), json!({ "type": "slot", "slot": slot, "headers": headers }));
        }
        grant @ ("oauth_shared" | "oauth_personal") => {
            let mut oauth = Map::new();
            oauth.insert("type".into(), json!("oauth"));
            oauth.insert("grant".into(), json!(grant.trim_start_matches("oauth_")));
            let client_id = form.oauth_client_id.trim();
            if !client_id.is_empty() {
                oauth.insert("client_id".into(), json!(client_id));
            }
            let scopes = names(&form.oauth_scopes);
            if !scopes.is_empty() {
                oauth.insert("scopes".into(), json!(scopes));
            }
            c.insert("auth".into(), Value::Object(oauth));
        }
        _ => {
            return Err(field_issue(
                "auth",
                "authentication is none, a shared or personal credential slot, or an OAuth grant (shared or personal)",
            ));
        }
    }
    let timeout = form.timeout_ms.trim();
    if !timeout.is_empty() {
        let ms: u64 = timeout.parse().map_err(|_| field_issue("timeout_ms", "a deadline is a whole number of milliseconds"))?;
        c.insert("timeout_ms".into(), json!(ms));
    }
    Ok(Value::Object(c))
}

pub(super) fn expected(raw: &str) -> Result<Option<i32>, Error> {
    match raw.trim() {
        "" => Ok(None),
        v => v.parse().map(Some).map_err(|_| field_issue("expected_version", "not a configuration version")),
    }
}

/// A refused edit's error as the page shows it: a concurrent edit is said in the page's words.
fn shown(e: Error) -> Result<FormError, PageError> {
    shown_as(
        e,
        "This workspace's configuration changed since you opened this page; nothing was saved. The page now shows the current configuration: check it and submit again.",
    )
}

/// A refused edit's error, `changed` the message of an edit made meanwhile (`binding_changed`).
pub(super) fn shown_as(e: Error, changed: &str) -> Result<FormError, PageError> {
    let mut error = FormError::of(e)?;
    if error.code == "binding_changed" {
        error.message = changed.into();
    }
    Ok(error)
}

async fn add_connector(
    c: Console,
    State(state): State<AppState>,
    Path((_, ws)): Path<(String, String)>,
    Form(form): Form<NewConnector>,
) -> Result<Response, PageError> {
    c.ctx.require_person(EDITOR)?;
    let id = form.id.trim().to_owned();
    let added = async {
        let expected = expected(&form.expected_version)?;
        let connector = crate::workspaces::http::parse_connector(&id, connector_json(&form)?)?;
        crate::vault::slots::check_connector(state.config.vault_keys.as_ref(), &connector)?;
        workspaces::add_connector(&state.db, c.ctx.tenant.id, &c.ctx.audit, &ws, expected, &id, connector).await
    }
    .await;
    match added {
        Ok(bound) => Ok(Redirect::to(&format!(
            "/console/t/{}/workspaces/{ws}?added={id}&version={}#connector-{id}",
            c.slug(),
            bound.workspace.bound_version
        ))
        .into_response()),
        Err(e) => {
            let error = shown(e)?;
            super::workspaces::editor_page(&c, &state, &ws, StatusCode::UNPROCESSABLE_ENTITY, error, form).await
        }
    }
}

async fn confirm_remove(
    c: Console,
    State(state): State<AppState>,
    Path((_, ws, id)): Path<(String, String, String)>,
) -> Result<Response, PageError> {
    c.ctx.require_person(EDITOR)?;
    let bound = workspaces::bound(&state.db, c.ctx.tenant.id, &ws).await?;
    if !bound.document.connectors.contains_key(&id) {
        return Err(Error::NotFound { what: "connector" }.into());
    }
    let page = ConfirmPage {
        layout: c.layout(&format!("Remove connector {id}"), "workspaces"),
        question: format!("Remove the connector {id} from the workspace {ws}?"),
        consequence: format!(
            "Agents lose its tools from their next request, with its classification overrides and approval rules. The workspace's configuration becomes version {}; version {} stays in its history.",
            bound.workspace.bound_version + 1,
            bound.workspace.bound_version
        ),
        action: format!(
            "/console/t/{}/workspaces/{ws}/connectors/{id}/remove?expected_version={}",
            c.slug(),
            bound.workspace.bound_version
        ),
        button: "Remove connector".into(),
        cancel: format!("/console/t/{}/workspaces/{ws}#connector-{id}", c.slug()),
    };
    render(StatusCode::OK, &page)
}

#[derive(Deserialize)]
struct Expected {
    #[serde(default)]
    expected_version: String,
}

async fn remove_connector(
    c: Console,
    State(state): State<AppState>,
    Path((_, ws, id)): Path<(String, String, String)>,
    axum::extract::Query(q): axum::extract::Query<Expected>,
) -> Result<Response, PageError> {
    c.ctx.require_person(EDITOR)?;
    let removed = async {
        let expected = expected(&q.expected_version)?;
        workspaces::remove_connector(&state.db, c.ctx.tenant.id, &c.ctx.audit, &ws, expected, &id).await
    }
    .await;
    match removed {
        Ok(_) => Ok(Redirect::to(&format!("/console/t/{}/workspaces/{ws}?done=connector_removed", c.slug())).into_response()),
        Err(e) => {
            let error = shown(e)?;
            super::workspaces::workspace_page(&c, &state, &ws, StatusCode::UNPROCESSABLE_ENTITY, Some(error), None, None).await
        }
    }
}

/// "Test connection": the catalog fetched now (the API's refresh), then the page with the
/// tools it lists, or the failure's stable code.
async fn test_connection(
    c: Console,
    State(state): State<AppState>,
    Path((_, ws, id)): Path<(String, String, String)>,
) -> Result<Response, PageError> {
    match crate::workspaces::http::refresh(&state, &c.ctx, &ws, &id).await {
        Ok(refreshed) => {
            let notice =
                format!("Connection to {id} tested: its catalog lists {} tools.", refreshed["tools"].as_u64().unwrap_or(0));
            super::workspaces::workspace_page(&c, &state, &ws, StatusCode::OK, None, Some(notice), None).await
        }
        Err(e @ Error::Forbidden { .. }) => Err(e.into()),
        Err(e) if e.status().is_client_error() => {
            super::workspaces::workspace_page(
                &c,
                &state,
                &ws,
                StatusCode::UNPROCESSABLE_ENTITY,
                Some(FormError::of(e)?),
                None,
                None,
            )
            .await
        }
        // The downstream failed: its stable code, never its text.
        Err(e) => {
            let error = FormError::new(e.code(), format!("The connection test of {id} failed: {}.", e.code().replace('_', " ")));
            super::workspaces::workspace_page(&c, &state, &ws, StatusCode::BAD_GATEWAY, Some(error), None, None).await
        }
    }
}

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/console/t/{tenant}/workspaces/{workspace}/connectors", post(add_connector))
        .route("/console/t/{tenant}/workspaces/{workspace}/connectors/{id}/remove", get(confirm_remove).post(remove_connector))
        .route("/console/t/{tenant}/workspaces/{workspace}/connectors/{id}/test", post(test_connection))
        .route("/console/t/{tenant}/workspaces", post(create_workspace))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn form(kind: &str) -> NewConnector {
        NewConnector { id: "crm".into(), kind: kind.into(), url: "https://mcp.example/mcp".into(), ..NewConnector::default() }
    }

    fn field(e: Error) -> String {
        match e {
            Error::InvalidConfig { issues } => issues[0].field.clone(),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_remote_mcp_form_becomes_the_apis_json() {
        let mut f = form("remote_mcp");
        f.transport = "sse".into();
        f.auth = "shared".into();
        f.auth_headers = "Authorization: Bearer {token}\n\n".into();
        f.headers = "X-Team: tools".into();
        f.timeout_ms = " 5000 ".into();
        let v = connector_json(&f).unwrap();
        assert_eq!(
            v,
            json!({ "kind": "remote_mcp", "url": "https://mcp.example/mcp", "transport": "sse", "headers": { "X-Team": "tools" },
                    "auth": { "type": "slot", "slot": "shared", "headers": { "Authorization": "Bearer {token}" } }, "timeout_ms": 5000 })
        );
        crate::workspaces::http::parse_connector("crm", v).unwrap();
    }

    #[test]
    fn an_oauth_grant_from_the_form_is_the_apis_and_discovers_the_rest() {
        let mut f = form("remote_mcp");
        f.auth = "oauth_personal".into();
        let v = connector_json(&f).unwrap();
        assert_eq!(v["auth"], json!({ "type": "oauth", "grant": "personal" }));
        crate::workspaces::http::parse_connector("crm", v).unwrap();
        f.auth = "oauth_shared".into();
        f.oauth_client_id = " crm-client ".into();
        f.oauth_scopes = "openid, email crm.read".into();
        let v = connector_json(&f).unwrap();
        assert_eq!(
            v["auth"],
            json!({ "type": "oauth", "grant": "shared", "client_id": "crm-client", "scopes": ["openid", "email", "crm.read"] })
        );
        crate::workspaces::http::parse_connector("crm", v).unwrap();
    }

    #[test]
    fn each_bad_field_is_named() {
        type Edit = fn(&mut NewConnector);
        let cases: [(&str, Edit); 7] = [
            ("kind", |f| f.kind = "ftp".into()),
            ("transport", |f| f.transport = "websocket".into()),
            ("headers", |f| f.headers = "no colon here".into()),
            ("auth", |f| f.auth = "oauth".into()),
            ("auth_headers", |f| f.auth = "personal".into()),
            ("timeout_ms", |f| f.timeout_ms = "soon".into()),
            ("headers", |f| f.headers = "A: 1\nA: 2".into()),
        ];
        for (want, edit) in cases {
            let mut f = form("remote_mcp");
            edit(&mut f);
            assert_eq!(field(connector_json(&f).unwrap_err()), want);
        }
        let mut f = form("json");
        f.config = "[1]".into();
        assert_eq!(field(connector_json(&f).unwrap_err()), "config");
        f.config = "{".into();
        assert_eq!(field(connector_json(&f).unwrap_err()), "config");
        assert_eq!(expected("x").unwrap_err().code(), "invalid_config");
        assert_eq!(expected(" 7 ").unwrap(), Some(7));
    }

    #[test]
    fn the_tool_editor_rows_become_the_apis_tools() {
        let mut f = form("http_api");
        f.base_url = " https://api.example/v1 ".into();
        for (k, v) in [
            ("tool_0_name", "get_item"),
            ("tool_0_description", "Read an item"),
            ("tool_0_method", "get"),
            ("tool_0_path", "/items/{id}"),
            ("tool_0_query", "fields, expand"),
            ("tool_0_read_only", "on"),
            ("tool_0_input_schema", r#"{"type":"object","properties":{"id":{"type":"string"}},"required":["id"]}"#),
            ("tool_2_name", "add_item"),
            ("tool_2_method", "POST"),
            ("tool_2_path", "/items"),
            ("tool_2_body", "name"),
            ("csrf_token", "ignored"),
        ] {
            f.rest.insert(k.into(), v.into());
        }
        let v = connector_json(&f).unwrap();
        assert_eq!(v["base_url"], "https://api.example/v1");
        assert_eq!(v["tools"].as_array().unwrap().len(), 2, "the empty middle row is skipped");
        assert_eq!(v["tools"][0]["query"], json!(["fields", "expand"]));
        assert_eq!((v["tools"][0]["read_only"].clone(), v["tools"][1]["read_only"].clone()), (json!(true), json!(false)));
        assert_eq!(v["tools"][1]["body"], json!(["name"]));
        crate::workspaces::http::parse_connector("inv", v).unwrap();
        f.rest.insert("tool_2_input_schema".into(), "{not json".into());
        assert_eq!(field(connector_json(&f).unwrap_err()), "tool_2_input_schema");
    }

    proptest! {
        /// Header lines never panic; what they accept round-trips as `Name: value` lines.
        #[test]
        fn header_lines_parse_or_name_their_field(text in "[ -~\n]{0,200}") {
            match header_lines(&text, "headers") {
                Ok(map) => {
                    let again: String = map.iter().map(|(k, v)| format!("{k}: {v}\n")).collect();
                    prop_assert_eq!(header_lines(&again, "headers").unwrap(), map);
                }
                Err(e) => prop_assert_eq!(field(e), "headers"),
            }
        }
    }
}
