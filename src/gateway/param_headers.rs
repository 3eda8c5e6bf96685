//! SEP-2243's `Mcp-Param-*` headers (2026-07-28): a `tools/call` repeats as headers the
//! arguments its tool's input schema annotates with `x-mcp-header`, so that intermediaries may
//! route on them without reading the body.
//!
//! rmcp checks `Mcp-Method` and `Mcp-Name` against the body, and `Mcp-Param-*` only for the
//! tools its handler can name synchronously, which a native pool's (the downstreams' own,
//! from the catalog) are not. So the gateway checks them itself where it has the tool
//! ([`check`], answered -32020 like rmcp's own mismatch), and computes them afresh for the
//! downstream from the downstream tool's schema ([`compute`]): through the six-tool surface the
//! agent called `call_tool`, whose headers say nothing of the tool it names.

use axum::http::{HeaderMap, HeaderName, HeaderValue};
use base64::{Engine, prelude::BASE64_STANDARD};
use rmcp::model::JsonObject;
use serde_json::Value;

/// Lower-case, as header names are read.
const PREFIX: &str = "mcp-param-";
const B64_PREFIX: &str = "=?base64?";
const B64_SUFFIX: &str = "?=";

/// The `Mcp-Param-*` headers of a request, as (lower-case name, value) pairs; `Err` when a
/// value is not visible ASCII (refused, as rmcp refuses it).
pub fn of_request(headers: &HeaderMap) -> Result<Vec<(String, String)>, String> {
    let mut out = Vec::new();
    for (name, value) in headers {
        if let Some(param) = name.as_str().strip_prefix(PREFIX) {
            let value = value.to_str().map_err(|_| format!("Mcp-Param-{param} header contains invalid characters"))?;
            out.push((name.as_str().to_owned(), value.to_owned()));
        }
    }
    Ok(out)
}

/// `(path, header)` of every well-formed `x-mcp-header` annotation, along `properties` chains
/// from the schema's root (nested ones included), as rmcp reads them.
fn annotations(schema: &JsonObject) -> Vec<(Vec<&str>, &str)> {
    fn walk<'a>(properties: Option<&'a Value>, path: &mut Vec<&'a str>, out: &mut Vec<(Vec<&'a str>, &'a str)>) {
        let Some(Value::Object(properties)) = properties else { return };
        for (name, schema) in properties {
            path.push(name);
            if let Some(Value::String(header)) = schema.get("x-mcp-header")
                && !header.is_empty()
            {
                out.push((path.clone(), header.as_str()));
            }
            walk(schema.get("properties"), path, out);
            path.pop();
        }
    }
    let mut out = Vec::new();
    walk(schema.get("properties"), &mut Vec::new(), &mut out);
    out
}

fn primitive(value: &Value) -> Option<String> {
    match value {
        Value::String(s) => Some(s.clone()),
        Value::Bool(b) => Some(b.to_string()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

fn value_at<'a>(arguments: &'a JsonObject, path: &[&str]) -> Option<&'a Value> {
    let (first, rest) = path.split_first()?;
    rest.iter().try_fold(arguments.get(*first)?, |value, key| value.get(key))
}

/// A header's value as the body would carry it (`=?base64?…?=` decoded); `None` when the
/// Base64 or its UTF-8 is broken.
pub fn decode(raw: &str) -> Option<String> {
    match raw.strip_prefix(B64_PREFIX).and_then(|inner| inner.strip_suffix(B64_SUFFIX)) {
        Some(inner) => String::from_utf8(BASE64_STANDARD.decode(inner).ok()?).ok(),
        None => Some(raw.to_owned()),
    }
}

/// A value as a header carries it: as it is, or `=?base64?…?=` when it could not travel bare
/// (leading or trailing blanks, control or non-ASCII characters, or the sentinel's own shape).
pub fn encode(value: &str) -> String {
    let bytes = value.as_bytes();
    let edges = matches!(bytes.first(), Some(b' ' | b'\t')) || matches!(bytes.last(), Some(b' ' | b'\t'));
    let unsafe_chars = value.chars().any(|c| (c as u32) < 0x20 || (c as u32) > 0x7e);
    let sentinel = value.starts_with(B64_PREFIX) && value.ends_with(B64_SUFFIX);
    if !value.is_empty() && (edges || unsafe_chars || sentinel) {
        format!("{B64_PREFIX}{}{B64_SUFFIX}", BASE64_STANDARD.encode(value))
    } else {
        value.to_owned()
    }
}

/// Checks a `tools/call`'s `Mcp-Param-*` headers (`sent`, from [`of_request`]) against its
/// `arguments` for the tool's input `schema`: an annotated argument that is present (and not
/// null) needs its header with the same value, and an absent one none. Headers no annotation
/// names are not judged. `Err`: the reason, for a -32020 error.
pub fn check(sent: &[(String, String)], schema: &JsonObject, arguments: &JsonObject) -> Result<(), String> {
    for (path, header) in annotations(schema) {
        let name = format!("{PREFIX}{}", header.to_ascii_lowercase());
        let mut values = sent.iter().filter(|(n, _)| *n == name).map(|(_, v)| v.as_str());
        let (value, duplicate) = (values.next(), values.next().is_some());
        let full = format!("Mcp-Param-{header}");
        if duplicate {
            return Err(format!("duplicate {full} header"));
        }
        let prop = path.join(".");
        let body = value_at(arguments, &path).filter(|v| !v.is_null()).and_then(primitive);
        match (value, body) {
            (None, None) => {}
            (Some(_), None) => return Err(format!("unexpected {full} header for absent or null `{prop}`")),
            (None, Some(_)) => return Err(format!("missing {full} header for `{prop}`")),
            (Some(raw), Some(expected)) => {
                let decoded = decode(raw).ok_or_else(|| format!("{full} header is not valid Base64"))?;
                if decoded != expected {
                    return Err(format!("{full} header `{decoded}` does not match body value `{expected}`"));
                }
            }
        }
    }
    Ok(())
}

/// The `Mcp-Param-*` headers a `tools/call` of a tool with input `schema` carries for
/// `arguments` (primitive values only, as the SEP says).
pub fn compute(schema: &JsonObject, arguments: &JsonObject) -> Vec<(HeaderName, HeaderValue)> {
    let mut out = Vec::new();
    for (path, header) in annotations(schema) {
        let Some(value) = value_at(arguments, &path).and_then(primitive) else { continue };
        if let (Ok(name), Ok(value)) =
            (HeaderName::from_bytes(format!("{PREFIX}{header}").as_bytes()), HeaderValue::from_str(&encode(&value)))
        {
            out.push((name, value));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn schema() -> JsonObject {
        json!({ "type": "object", "properties": {
            "region": { "type": "string", "x-mcp-header": "Region" },
            "location": { "type": "object", "properties": { "zone": { "type": "integer", "x-mcp-header": "Zone" } } },
            "note": { "type": "string" },
        } })
        .as_object()
        .cloned()
        .unwrap()
    }

    fn obj(value: Value) -> JsonObject {
        value.as_object().cloned().unwrap()
    }

    fn sent(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs.iter().map(|(n, v)| (n.to_ascii_lowercase(), v.to_string())).collect()
    }

    #[test]
    fn headers_must_say_what_the_body_says() {
        let args = obj(json!({ "region": "eu-west1", "location": { "zone": 3 }, "note": "x" }));
        assert_eq!(check(&sent(&[("Mcp-Param-Region", "eu-west1"), ("mcp-param-zone", "3")]), &schema(), &args), Ok(()));
        let wrong = check(&sent(&[("Mcp-Param-Region", "us-east1"), ("mcp-param-zone", "3")]), &schema(), &args);
        assert!(wrong.unwrap_err().contains("does not match"));
        assert!(check(&sent(&[("Mcp-Param-Region", "eu-west1")]), &schema(), &args).unwrap_err().contains("missing"));
        let absent = obj(json!({ "region": "eu-west1" }));
        let extra = check(&sent(&[("Mcp-Param-Region", "eu-west1"), ("mcp-param-zone", "3")]), &schema(), &absent);
        assert!(extra.unwrap_err().contains("unexpected"));
        let twice = sent(&[("Mcp-Param-Region", "eu-west1"), ("Mcp-Param-Region", "eu-west1"), ("mcp-param-zone", "3")]);
        assert!(check(&twice, &schema(), &args).unwrap_err().contains("duplicate"));
        // Headers no annotation names are not judged.
        assert_eq!(check(&sent(&[("Mcp-Param-Other", "1")]), &schema(), &obj(json!({}))), Ok(()));
    }

    #[test]
    fn computed_headers_round_trip_through_the_check() {
        for region in ["eu-west1", " padded ", "zürich", "=?base64?x?="] {
            let args = obj(json!({ "region": region, "location": { "zone": 7 } }));
            let computed = compute(&schema(), &args);
            assert_eq!(computed.len(), 2, "{region}");
            let pairs: Vec<(String, String)> =
                computed.iter().map(|(n, v)| (n.as_str().to_owned(), v.to_str().unwrap().to_owned())).collect();
            assert_eq!(check(&pairs, &schema(), &args), Ok(()), "{region}");
        }
        assert!(compute(&schema(), &obj(json!({ "note": "x" }))).is_empty());
    }
}
