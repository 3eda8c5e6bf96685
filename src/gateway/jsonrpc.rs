//! The answer to a POST body that says it is JSON but is no JSON-RPC message the endpoint
//! takes: HTTP 400 with a JSON-RPC error, as the transport asks, instead of rmcp's 415
//! `unsupported_media_type` (the media type was right; the body was not).
//!
//! - not JSON at all (malformed, invalid UTF-8, nesting deeper than the parser follows):
//!   `-32700` parse error, `id: null`;
//! - JSON, but no JSON-RPC 2.0 message (no `jsonrpc: "2.0"`, no method, a batch, a wrong id):
//!   `-32600` invalid request;
//! - a well-formed request of a method rmcp knows whose params do not fit it: `-32602`.
//!
//! The id is echoed where the body carries a usable one. The check parses the body as rmcp
//! will, so a body it lets through is one rmcp takes; it runs only off the direct path.

use axum::{
    http::{HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
};
use rmcp::model::{ClientJsonRpcMessage, ErrorCode};
use serde_json::{Value, json};

/// Why a body is refused, as its JSON-RPC error.
#[derive(Debug, Clone, PartialEq)]
pub struct Refusal {
    pub code: ErrorCode,
    pub message: &'static str,
    pub id: Value,
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        let body = json!({ "jsonrpc": "2.0", "id": self.id, "error": { "code": self.code.0, "message": self.message } });
        let mut response = (StatusCode::BAD_REQUEST, body.to_string()).into_response();
        response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
        response
    }
}

/// `None` when the body is a JSON-RPC message rmcp takes, else why not.
pub fn refusal(body: &[u8]) -> Option<Refusal> {
    if serde_json::from_slice::<ClientJsonRpcMessage>(body).is_ok() {
        return None;
    }
    let Ok(value) = serde_json::from_slice::<Value>(body) else {
        return Some(Refusal { code: ErrorCode::PARSE_ERROR, message: "Parse error: the body is not JSON", id: Value::Null });
    };
    let id = value.get("id").filter(|id| id.is_string() || id.is_i64() || id.is_u64()).cloned();
    let envelope = value.get("jsonrpc").is_some_and(|v| v == "2.0") && value.get("method").is_some_and(Value::is_string);
    let id_ok = value.get("id").is_none_or(|_| id.is_some());
    if envelope && id_ok {
        return Some(Refusal {
            code: ErrorCode::INVALID_PARAMS,
            message: "Invalid params: they do not fit the method",
            id: id.unwrap_or(Value::Null),
        });
    }
    Some(Refusal {
        code: ErrorCode::INVALID_REQUEST,
        message: "Invalid Request: the body is not a JSON-RPC 2.0 message",
        id: id.unwrap_or(Value::Null),
    })
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn each_kind_of_body_gets_its_code() {
        let code = |body: &[u8]| refusal(body).map(|r| r.code.0);
        assert_eq!(code(br#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#), None);
        assert_eq!(code(br#"{"jsonrpc":"2.0","id":1,"method":"some/custom","params":{}}"#), None);
        assert_eq!(code(br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#), None);
        assert_eq!(code(b"{\"jsonrpc\":"), Some(-32700));
        assert_eq!(code(b""), Some(-32700));
        assert_eq!(code(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"\xff\xfe\"}"), Some(-32700));
        let deep = format!("{}{}", "[".repeat(20_000), "]".repeat(20_000));
        assert_eq!(code(deep.as_bytes()), Some(-32700));
        assert_eq!(code(b"[]"), Some(-32600));
        assert_eq!(code(br#"{"jsonrpc":"1.0","id":1,"method":"tools/list"}"#), Some(-32600));
        assert_eq!(code(br#"{"jsonrpc":"2.0","id":{"x":1},"method":"tools/list"}"#), Some(-32600));
        assert_eq!(code(b"42"), Some(-32600));
    }

    fn json_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            ".{0,8}".prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 32, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::btree_map("[a-z]{1,6}", inner, 0..4).prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        /// Whatever the bytes, the check answers without panicking, and lets through exactly
        /// what rmcp's own parse takes.
        #[test]
        fn any_bytes_are_judged_as_rmcp_parses_them(body in prop::collection::vec(any::<u8>(), 0..256)) {
            let taken = serde_json::from_slice::<ClientJsonRpcMessage>(&body).is_ok();
            let judged = refusal(&body);
            prop_assert_eq!(judged.is_none(), taken);
            if serde_json::from_slice::<Value>(&body).is_err() {
                prop_assert_eq!(judged.map(|r| r.code.0), Some(-32700));
            }
        }

        /// Any JSON that is no message is an invalid request or invalid params, never a parse
        /// error, and an id echoed back is the body's own.
        #[test]
        fn json_that_is_no_message_is_invalid(value in json_value(), method in "[a-z/]{0,12}", id in any::<i64>()) {
            for body in [value.clone(), json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": value })] {
                let bytes = serde_json::to_vec(&body).unwrap();
                if let Some(r) = refusal(&bytes) {
                    prop_assert!(r.code.0 == -32600 || r.code.0 == -32602, "{:?}", r);
                    prop_assert!(r.id.is_null() || Some(&r.id) == body.get("id"), "{:?}", r);
                }
            }
        }
    }
}
