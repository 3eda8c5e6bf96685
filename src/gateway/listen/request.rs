//! A `subscriptions/listen` request (2026-07-28) as the endpoint reads it: its id, the list
//! changes and the resources it asks for.

use serde_json::Value;

use super::Lists;

/// The most resources one `subscriptions/listen` request subscribes to, and the longest URI;
/// the acknowledgement omits the rest, as the protocol says of what is not honoured.
const MAX_URIS: usize = 64;
const MAX_URI_BYTES: usize = 2048;

/// A `subscriptions/listen` request (2026-07-28) as this endpoint takes it: its id, the list
/// changes and the resources it asks for (at most [`MAX_URIS`], each at most
/// [`MAX_URI_BYTES`]). `None`: not such a request, or not one this path takes, so rmcp judges it.
pub fn subscription(headers: &axum::http::HeaderMap, body: &[u8]) -> Option<(Value, Lists, Vec<String>)> {
    #[derive(serde::Deserialize)]
    struct Request<'a> {
        #[serde(borrow)]
        jsonrpc: &'a str,
        id: Value,
        #[serde(borrow)]
        method: &'a str,
        #[serde(default)]
        params: Params,
    }
    #[derive(serde::Deserialize, Default)]
    struct Params {
        #[serde(default)]
        notifications: Filter,
    }
    #[derive(serde::Deserialize, Default)]
    #[serde(rename_all = "camelCase")]
    struct Filter {
        #[serde(default)]
        tools_list_changed: bool,
        #[serde(default)]
        prompts_list_changed: bool,
        #[serde(default)]
        resources_list_changed: bool,
        #[serde(default)]
        resource_subscriptions: Vec<String>,
    }
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    if header("mcp-protocol-version") != Some(rmcp::model::ProtocolVersion::V_2026_07_28.as_str())
        || header("mcp-method") != Some("subscriptions/listen")
    {
        return None;
    }
    let request: Request = serde_json::from_slice(body).ok()?;
    let Filter {
        tools_list_changed: tools,
        prompts_list_changed: prompts,
        resources_list_changed: resources,
        resource_subscriptions: mut uris,
    } = request.params.notifications;
    let mut seen = std::collections::HashSet::new();
    uris.retain(|u| !u.is_empty() && u.len() <= MAX_URI_BYTES && seen.insert(u.clone()));
    uris.truncate(MAX_URIS);
    (request.jsonrpc == "2.0" && request.method == "subscriptions/listen" && (request.id.is_i64() || request.id.is_string()))
        .then_some((request.id, Lists { tools, prompts, resources }, uris))
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;
    use serde_json::json;

    use super::*;

    fn listen(filter: Value) -> Option<(Value, Lists, Vec<String>)> {
        let mut headers = axum::http::HeaderMap::new();
        headers.insert("mcp-protocol-version", HeaderValue::from_static("2026-07-28"));
        headers.insert("mcp-method", HeaderValue::from_static("subscriptions/listen"));
        let body = json!({ "jsonrpc": "2.0", "id": 7, "method": "subscriptions/listen", "params": { "notifications": filter } });
        subscription(&headers, body.to_string().as_bytes())
    }

    #[test]
    fn a_listen_filters_resources_are_kept_once_each_in_order_and_bounded() {
        let long = "x".repeat(MAX_URI_BYTES + 1);
        let (id, lists, uris) =
            listen(json!({ "toolsListChanged": true, "resourceSubscriptions": ["b", "a", "b", "", long] })).unwrap();
        assert_eq!(
            (id, lists, uris),
            (json!(7), Lists { tools: true, ..Lists::default() }, vec!["b".to_owned(), "a".to_owned()])
        );
        let many: Vec<String> = (0..MAX_URIS + 5).map(|i| format!("test://{i}")).collect();
        assert_eq!(listen(json!({ "resourceSubscriptions": many })).unwrap().2.len(), MAX_URIS);
        assert_eq!(listen(json!({ "resourceSubscriptions": "test://a" })), None, "not a list: rmcp judges it");
    }
}
