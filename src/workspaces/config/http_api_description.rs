//! `http_api` connectors: an HTTP API whose tools are described as data. Each tool names its
//! method, a path template, which arguments go to the path, the query and the JSON body, and
//! whether it only reads. Every argument the input schema declares must be sent somewhere,
//! so nothing a caller passes is silently dropped.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{Auth, check_auth, check_headers, check_timeout, check_url};

pub const MAX_TOOLS: usize = 256;
const MAX_DESCRIPTION: usize = 4096;
const MAX_PATH: usize = 1024;

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct HttpApi {
    /// `https://api.example/v1`; tool paths are appended to it.
    pub base_url: String,
    /// Static, non-secret headers sent with every request.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    #[serde(default)]
    pub auth: Auth,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    pub tools: Vec<HttpTool>,
}

#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "UPPERCASE")]
pub enum Method {
    Get,
    Post,
    Put,
    Patch,
    Delete,
}

impl Method {
    pub fn as_reqwest(self) -> reqwest::Method {
        match self {
            Method::Get => reqwest::Method::GET,
            Method::Post => reqwest::Method::POST,
            Method::Put => reqwest::Method::PUT,
            Method::Patch => reqwest::Method::PATCH,
            Method::Delete => reqwest::Method::DELETE,
        }
    }
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct HttpTool {
    /// The tool's name: 1 to 64 characters of `A-Za-z0-9_-`.
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    pub description: String,
    /// A JSON Schema of type `object`; arguments are validated against it before any request.
    #[serde(default = "empty_object_schema")]
    pub input_schema: serde_json::Map<String, Value>,
    pub method: Method,
    /// `/items/{id}`: each `{name}` is a required argument, percent-encoded into the path.
    pub path: String,
    /// Arguments sent as query parameters (an array argument repeats its parameter).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub query: Vec<String>,
    /// Arguments sent as the members of a JSON object body (POST, PUT and PATCH only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub body: Vec<String>,
    /// Only an explicit `true` makes the tool a read; everything else is a write.
    #[serde(default)]
    pub read_only: bool,
}

fn empty_object_schema() -> serde_json::Map<String, Value> {
    let mut schema = serde_json::Map::new();
    schema.insert("type".into(), Value::String("object".into()));
    schema
}

/// The `{name}` placeholders of a path template, or why it is malformed.
pub fn placeholders(path: &str) -> Result<Vec<&str>, &'static str> {
    let mut names = Vec::new();
    let mut rest = path;
    while let Some(open) = rest.find(['{', '}']) {
        if rest.as_bytes()[open] == b'}' {
            return Err("has a '}' without its '{'");
        }
        let after = &rest[open + 1..];
        let close = after.find('}').ok_or("has a '{' without its '}'")?;
        let name = &after[..close];
        if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
            return Err("placeholders are {name}, with name of A-Z, a-z, 0-9 and '_'");
        }
        names.push(name);
        rest = &after[close + 1..];
    }
    Ok(names)
}

fn valid_tool_name(name: &str) -> bool {
    (1..=64).contains(&name.len()) && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

impl HttpApi {
    /// Every problem, each under `connectors.{id}.…`.
    pub fn issues(&self, id: &str, bad: &mut dyn FnMut(String, &str)) {
        let at = |f: &str| format!("connectors.{id}.{f}");
        check_url(&self.base_url, &at("base_url"), bad);
        if let Ok(u) = url::Url::parse(&self.base_url)
            && (u.query().is_some() || u.fragment().is_some())
        {
            bad(at("base_url"), "must not have a query or a fragment");
        }
        check_headers(id, &self.headers, bad);
        check_auth(&self.auth, &self.headers, &at("auth"), false, bad);
        check_timeout(self.timeout_ms, &at("timeout_ms"), bad);
        if self.tools.is_empty() || self.tools.len() > MAX_TOOLS {
            bad(at("tools"), "from 1 to 256 tools");
        }
        let mut seen = BTreeSet::new();
        for tool in &self.tools {
            let at = |f: &str| format!("connectors.{id}.tools.{}.{f}", tool.name);
            if !valid_tool_name(&tool.name) {
                bad(
                    format!("connectors.{id}.tools.{}", tool.name),
                    "a tool name is 1 to 64 characters of A-Z, a-z, 0-9, '_' and '-'",
                );
            } else if !seen.insert(tool.name.as_str()) {
                bad(format!("connectors.{id}.tools.{}", tool.name), "two tools have this name");
            }
            if tool.description.is_empty() || tool.description.len() > MAX_DESCRIPTION {
                bad(at("description"), "from 1 to 4096 bytes");
            }
            tool.check_schema_and_mapping(&at, bad);
        }
    }
}

impl HttpTool {
    fn check_schema_and_mapping(&self, at: &dyn Fn(&str) -> String, bad: &mut dyn FnMut(String, &str)) {
        if self.input_schema.get("type") != Some(&Value::String("object".into())) {
            bad(at("input_schema"), "must be a JSON Schema with \"type\": \"object\"");
        } else if let Err(e) = jsonschema::validator_for(&Value::Object(self.input_schema.clone())) {
            bad(
                at("input_schema"),
                &format!("is not a valid JSON Schema: {}", e.to_string().chars().take(200).collect::<String>()),
            );
        }
        let properties: BTreeSet<&str> = match self.input_schema.get("properties") {
            Some(Value::Object(p)) => p.keys().map(String::as_str).collect(),
            _ => BTreeSet::new(),
        };
        let required: BTreeSet<&str> = match self.input_schema.get("required") {
            Some(Value::Array(r)) => r.iter().filter_map(Value::as_str).collect(),
            _ => BTreeSet::new(),
        };
        if !self.path.starts_with('/') || self.path.len() > MAX_PATH || self.path.contains(['?', '#']) {
            bad(at("path"), "starts with '/', at most 1024 bytes, with no query or fragment");
        }
        let in_path = match placeholders(&self.path) {
            Ok(names) => names,
            Err(message) => {
                bad(at("path"), message);
                Vec::new()
            }
        };
        for name in &in_path {
            if !properties.contains(name) || !required.contains(name) {
                bad(at("path"), &format!("{{{name}}} must be a required property of input_schema"));
            }
        }
        let mut mapped: BTreeSet<&str> = in_path.iter().copied().collect();
        for (field, names) in [("query", &self.query), ("body", &self.body)] {
            for name in names {
                if !properties.contains(name.as_str()) {
                    bad(at(&format!("{field}.{name}")), "is not a property of input_schema");
                } else if !mapped.insert(name.as_str()) {
                    bad(at(&format!("{field}.{name}")), "is already sent elsewhere (path, query or body)");
                }
            }
        }
        if !self.body.is_empty() && matches!(self.method, Method::Get | Method::Delete) {
            bad(at("body"), "GET and DELETE requests carry no body");
        }
        for name in properties.difference(&mapped) {
            bad(at(&format!("input_schema.properties.{name}")), "is sent nowhere: map it to the path, the query or the body");
        }
        if self.input_schema.get("additionalProperties") != Some(&Value::Bool(false)) && !properties.is_empty() {
            // Undeclared arguments would be dropped; the schema must refuse them.
            bad(at("input_schema.additionalProperties"), "must be false, so an argument the API does not take is refused");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn api(tools: Value) -> HttpApi {
        serde_json::from_value(json!({ "base_url": "http://127.0.0.1:9/v1", "tools": tools })).unwrap()
    }

    fn fields(api: &HttpApi) -> Vec<String> {
        let mut out = Vec::new();
        api.issues("inv", &mut |field, _| out.push(field));
        out
    }

    #[test]
    fn a_well_mapped_api_passes() {
        let good = api(json!([{
            "name": "get_item", "description": "One item", "method": "GET", "path": "/items/{id}", "query": ["fields"],
            "input_schema": { "type": "object", "additionalProperties": false, "required": ["id"],
                "properties": { "id": { "type": "string" }, "fields": { "type": "array", "items": { "type": "string" } } } },
            "read_only": true
        }, {
            "name": "ping", "description": "Health", "method": "GET", "path": "/ping"
        }]));
        assert_eq!(fields(&good), Vec::<String>::new());
    }

    #[test]
    fn every_mistake_is_named() {
        let bad = api(json!([{
            "name": "make", "description": "", "method": "GET", "path": "items/{id}/{missing}", "body": ["qty"], "query": ["nope", "id"],
            "input_schema": { "type": "object", "required": ["id"],
                "properties": { "id": { "type": "string" }, "qty": { "type": "integer" }, "loose": {} } }
        }, {
            "name": "make", "description": "again", "method": "POST", "path": "/x", "input_schema": { "type": "array" }
        }]));
        assert_eq!(
            fields(&bad),
            [
                "connectors.inv.tools.make.description",
                "connectors.inv.tools.make.path",
                "connectors.inv.tools.make.path",
                "connectors.inv.tools.make.query.nope",
                "connectors.inv.tools.make.query.id",
                "connectors.inv.tools.make.body",
                "connectors.inv.tools.make.input_schema.properties.loose",
                "connectors.inv.tools.make.input_schema.additionalProperties",
                "connectors.inv.tools.make",
                "connectors.inv.tools.make.input_schema",
            ]
        );
    }

    #[test]
    fn unknown_fields_and_methods_are_refused() {
        let tool = json!({ "name": "a", "description": "d", "method": "GET", "path": "/", "verb": "GET" });
        assert!(serde_json::from_value::<HttpApi>(json!({ "base_url": "http://x", "tools": [tool] })).is_err());
        let tool = json!({ "name": "a", "description": "d", "method": "TRACE", "path": "/" });
        assert!(serde_json::from_value::<HttpApi>(json!({ "base_url": "http://x", "tools": [tool] })).is_err());
    }

    proptest! {
        #[test]
        fn placeholder_parsing_never_panics_and_finds_well_formed_names(path in "[/a-z{}_]{0,40}") {
            if let Ok(names) = placeholders(&path) {
                for name in names {
                    let placeholder = format!("{{{name}}}");
                    prop_assert!(path.contains(&placeholder));
                }
            }
        }

        #[test]
        fn validation_never_panics(path in "\\PC{0,30}", name in "\\PC{0,10}", schema in "\\PC{0,30}") {
            let schema = serde_json::from_str::<serde_json::Map<String, Value>>(&schema).unwrap_or_default();
            let tool = HttpTool { name, title: None, description: "d".into(), input_schema: schema, method: Method::Post, path, query: vec![], body: vec!["x".into()], read_only: false };
            let api = HttpApi { base_url: "http://x".into(), headers: BTreeMap::new(), auth: Auth::None, timeout_ms: None, tools: vec![tool] };
            api.issues("c", &mut |_, _| {});
        }
    }
}
