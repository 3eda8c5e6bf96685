//! The `http_api` connector kind: an HTTP API described as data. A call turns the tool's
//! description into one HTTP request, and the response into a tool result. Arguments have
//! already passed the tool's input schema.

use std::sync::Arc;

use rmcp::model::{CallToolResult, ContentBlock, JsonObject, Tool, ToolAnnotations};
use serde_json::Value;

use super::downstream::Failure;
use crate::workspaces::config::http_api_description::{HttpApi, HttpTool, Method};

/// A response body larger than this is refused rather than read into memory.
pub const MAX_RESPONSE_BYTES: usize = 8 << 20;
/// Characters of a non-2xx response body returned to the caller.
const ERROR_BODY_CHARS: usize = 512;

/// The connector's tools, as MCP tools: the configuration is the catalog, so there is
/// nothing to fetch. Only an explicit `read_only: true` reads.
pub fn catalog(api: &HttpApi) -> Vec<Tool> {
    api.tools
        .iter()
        .map(|t| {
            let mut tool = Tool::new(t.name.clone(), t.description.clone(), Arc::new(t.input_schema.clone()));
            tool.title = t.title.clone();
            tool.annotations = Some(ToolAnnotations::new().read_only(t.read_only).destructive(!t.read_only));
            tool
        })
        .collect()
}

/// An argument as it appears in a path segment or a query value.
fn scalar(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// The request's URL: base URL, then the path template with each placeholder
/// percent-encoded as one segment, then the query arguments that are present.
pub fn request_url(api: &HttpApi, tool: &HttpTool, args: &JsonObject) -> Result<url::Url, String> {
    let mut path = String::with_capacity(tool.path.len());
    let mut rest = tool.path.as_str();
    while let Some(open) = rest.find('{') {
        path.push_str(&rest[..open]);
        let close = rest[open..].find('}').map(|c| open + c).ok_or("malformed path template")?;
        let name = &rest[open + 1..close];
        let value = args.get(name).ok_or_else(|| format!("`{name}` is required (it is part of the path)"))?;
        let segment = scalar(value);
        // A dot segment would move the request up the API's tree ('%' itself is encoded, so
        // only the literal forms can be one).
        if segment == "." || segment == ".." {
            return Err(format!("`{name}` cannot be `.` or `..`"));
        }
        path.extend(url::form_urlencoded::byte_serialize(segment.as_bytes()).map(|s| s.replace('+', "%20")));
        rest = &rest[close + 1..];
    }
    path.push_str(rest);
    // Arguments next to each other or to literal dots can make a dot segment together (`{a}{b}`
    // with `.` and `.`, `{v}.` with an empty `v`), which the URL would resolve away. Encoded
    // arguments hold no '/', so the rendered segments are the template's, one for one.
    for (segment, template) in path.split('/').zip(tool.path.split('/')) {
        if template.contains('{') && dot_segment(segment) {
            return Err(format!("the path arguments cannot make the segment `{template}` `.` or `..`"));
        }
    }
    let base = api.base_url.trim_end_matches('/');
    let mut url = url::Url::parse(&format!("{base}{path}")).map_err(|e| format!("the request URL is not valid: {e}"))?;
    {
        let mut query = url.query_pairs_mut();
        for name in &tool.query {
            match args.get(name) {
                None | Some(Value::Null) => {}
                Some(Value::Array(items)) => {
                    for item in items {
                        query.append_pair(name, &scalar(item));
                    }
                }
                Some(value) => {
                    query.append_pair(name, &scalar(value));
                }
            }
        }
    }
    if url.query() == Some("") {
        url.set_query(None);
    }
    // Whatever the template's literal text makes of itself (a `.%2E` of its own, say), the
    // request stays under the API's base URL, or is not sent.
    if !under(&url, base) {
        return Err("the request URL cannot leave the API's base URL".into());
    }
    Ok(url)
}

/// Whether `url` is at or below `base` (same origin, and the base's path segments first).
fn under(url: &url::Url, base: &str) -> bool {
    let Ok(base) = url::Url::parse(base) else { return false };
    let prefix = base.path().trim_end_matches('/');
    url.origin() == base.origin() && url.path().strip_prefix(prefix).is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
}

/// Whether a URL resolves `segment` as `.` or `..` (`%2e` is a dot there too, in either case).
fn dot_segment(segment: &str) -> bool {
    let dots = segment.to_ascii_lowercase().replace("%2e", ".");
    dots == "." || dots == ".."
}

/// Sends the request under no deadline of its own (the caller holds the connector's).
#[tracing::instrument(name = "http_api::call", skip_all, fields(tool = name))]
pub async fn call(
    http: &reqwest::Client,
    api: &HttpApi,
    name: &str,
    args: &JsonObject,
    credential: Option<&super::credentials::Credential>,
) -> Result<CallToolResult, Failure> {
    let tool = api.tools.iter().find(|t| t.name == name).ok_or_else(|| Failure::Rejected(format!("no tool `{name}`")))?;
    let url = request_url(api, tool, args).map_err(Failure::BadArguments)?;
    let mut request = http.request(tool.method.as_reqwest(), url.clone()).header(reqwest::header::ACCEPT, "application/json");
    if let Some(dpop) = credential.and_then(|c| c.dpop.as_deref()) {
        // A DPoP-bound grant's proof for this request (no nonce retry here: an API that asks for
        // one refuses the call, which reaches the agent as the grant's refusal).
        let mut proof = axum::http::HeaderMap::new();
        dpop.stamp(&mut proof, tool.method.as_reqwest().as_str(), &url);
        request = request.headers(proof);
    }
    for (header, value) in &api.headers {
        request = request.header(header, value);
    }
    for (header, value) in credential.map(|c| c.headers.as_slice()).unwrap_or_default() {
        request = request.header(header.clone(), value.clone());
    }
    if matches!(tool.method, Method::Post | Method::Put | Method::Patch) {
        let body: serde_json::Map<String, Value> =
            tool.body.iter().filter_map(|n| args.get(n).map(|v| (n.clone(), v.clone()))).collect();
        request = request.json(&body);
    }
    let mut response = request.send().await.map_err(|e| Failure::Unavailable(without_url(e)))?;
    let status = response.status();
    // A credential the API refuses: a 401, or a 403 with a Bearer challenge (a plain 403 is
    // the API's own answer about the resource, passed on as a tool error).
    let challenged = response.headers().contains_key(axum::http::header::WWW_AUTHENTICATE);
    if credential.is_some() && (status.as_u16() == 401 || (status.as_u16() == 403 && challenged)) {
        return Err(Failure::refused(status.as_u16(), response.headers())
            .unwrap_or(Failure::Refused { status: status.as_u16(), challenge: None }));
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|e| Failure::Unavailable(without_url(e)))? {
        if body.len() + chunk.len() > MAX_RESPONSE_BYTES {
            return Err(Failure::Rejected(format!("the API's response is larger than {} MiB", MAX_RESPONSE_BYTES >> 20)));
        }
        body.extend_from_slice(&chunk);
    }
    let text = String::from_utf8_lossy(&body).into_owned();
    if status.is_success() {
        let structured = match serde_json::from_str::<Value>(&text) {
            Ok(value @ Value::Object(_)) => Some(value),
            _ => None,
        };
        let mut result = CallToolResult::success(vec![ContentBlock::text(text)]);
        result.structured_content = structured;
        return Ok(result);
    }
    // Overloaded or down: the caller may retry. Anything else is the API's answer.
    if matches!(status.as_u16(), 429 | 502 | 503 | 504) {
        return Err(Failure::Unavailable(format!("HTTP {status}")));
    }
    let excerpt: String = text.chars().take(ERROR_BODY_CHARS).collect();
    Ok(CallToolResult::error(vec![ContentBlock::text(format!("HTTP {}: {excerpt}", status.as_u16()))]))
}

/// A transport error's text without its URL, which may carry arguments.
fn without_url(e: reqwest::Error) -> String {
    e.without_url().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn api() -> HttpApi {
        serde_json::from_value(json!({ "base_url": "http://127.0.0.1:9/v1/", "tools": [{
            "name": "get", "description": "d", "method": "GET", "path": "/items/{id}/notes", "query": ["tag", "limit"]
        }] }))
        .unwrap()
    }

    fn args(value: Value) -> JsonObject {
        value.as_object().unwrap().clone()
    }

    #[test]
    fn path_segments_are_encoded_and_query_arguments_repeat() {
        let api = api();
        let url = request_url(&api, &api.tools[0], &args(json!({ "id": "a/b c?", "tag": ["x", "y z"], "limit": 5 }))).unwrap();
        assert_eq!(url.as_str(), "http://127.0.0.1:9/v1/items/a%2Fb%20c%3F/notes?tag=x&tag=y+z&limit=5");
        let url = request_url(&api, &api.tools[0], &args(json!({ "id": 7 }))).unwrap();
        assert_eq!(url.as_str(), "http://127.0.0.1:9/v1/items/7/notes");
        assert!(request_url(&api, &api.tools[0], &args(json!({}))).is_err());
        for dots in [".", ".."] {
            assert!(request_url(&api, &api.tools[0], &args(json!({ "id": dots }))).is_err(), "{dots}");
        }
    }

    #[test]
    fn the_catalog_is_fail_closed() {
        let mut api = api();
        api.tools[0].read_only = true;
        let mut write = api.tools[0].clone();
        write.name = "put".into();
        write.read_only = false;
        api.tools.push(write);
        let tools = catalog(&api);
        let hints: Vec<_> =
            tools.iter().map(|t| t.annotations.as_ref().map(|a| (a.read_only_hint, a.destructive_hint))).collect();
        assert_eq!(hints, [Some((Some(true), Some(false))), Some((Some(false), Some(true)))]);
    }

    /// Found by the fuzz target `http_api_template` (fuzz/regressions/http_api_template/).
    #[test]
    fn arguments_cannot_make_a_dot_segment_together() {
        let mut api = api();
        for (path, values) in [
            ("/v{version}/{a}.", json!({ "version": "1", "a": "" })),
            ("/items/{a}{b}/notes", json!({ "a": ".", "b": "." })),
            ("/items/%2e{a}/notes", json!({ "a": "." })),
            ("/items/{a}%2E/notes", json!({ "a": "" })),
        ] {
            api.tools[0].path = path.into();
            let refused = request_url(&api, &api.tools[0], &args(values.clone()));
            assert!(refused.is_err_and(|e| e.contains("cannot")), "{path} {values}");
        }
        api.tools[0].path = "/items/{a}.{b}/notes".into();
        let url = request_url(&api, &api.tools[0], &args(json!({ "a": "x", "b": "" }))).unwrap();
        assert_eq!(url.path(), "/v1/items/x./notes");
    }

    /// Found by the fuzz target `http_api_template`: a template whose own literal text is a dot
    /// segment the URL resolves away (`.%2E`) is refused rather than sent above the base.
    #[test]
    fn a_template_cannot_leave_the_base_url_by_its_own_text() {
        let mut api = api();
        for path in ["/.%2E", "/%2e%2E/admin", "/a/../../b"] {
            api.tools[0].path = path.into();
            let refused = request_url(&api, &api.tools[0], &args(json!({})));
            assert!(refused.is_err_and(|e| e.contains("cannot leave")), "{path}");
        }
        api.tools[0].path = "/a/../b".into();
        assert_eq!(request_url(&api, &api.tools[0], &args(json!({}))).unwrap().path(), "/v1/b");
    }

    proptest! {
        #[test]
        fn a_path_argument_never_escapes_its_segment(id in "\\PC{0,30}") {
            let api = api();
            let url = request_url(&api, &api.tools[0], &args(json!({ "id": id })));
            // A dot segment is refused outright; anything else stays inside its segment.
            if id == "." || id == ".." {
                prop_assert!(url.is_err());
                return Ok(());
            }
            let url = url.unwrap();
            let segments: Vec<_> = url.path_segments().unwrap().collect();
            prop_assert_eq!(segments.len(), 4);
            prop_assert_eq!(segments[0], "v1");
            prop_assert_eq!(segments[3], "notes");
            prop_assert!(url.query().is_none());
        }
    }
}
