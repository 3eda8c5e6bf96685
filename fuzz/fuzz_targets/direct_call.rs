//! The direct `tools/call` path (`gateway::direct`): an agent's JSON-RPC body is taken by the
//! fast path or handed to rmcp. What it takes survives a re-serialization unchanged, and its
//! answers name the request's id and frame as one event-stream event.
#![no_main]
use gatehouse::gateway::direct::fuzzing;
use libfuzzer_sys::fuzz_target;
use rmcp::model::{CallToolResult, ContentBlock, ServerResult};
use serde_json::{Value, json};

fuzz_target!(|data: &[u8]| {
    if let Some((id, name, arguments, progress)) = fuzzing::call(data) {
        assert!(id.is_i64() || id.is_string(), "only integer and string ids are taken: {id}");
        let mut params = json!({ "name": name });
        if let Some(arguments) = &arguments {
            params["arguments"] = Value::Object(arguments.clone());
        }
        if let Some(progress) = &progress {
            params["_meta"] = json!({ "progressToken": progress });
        }
        let again = json!({ "jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params });
        let again = serde_json::to_vec(&again).expect("serializes");
        let back = fuzzing::call(&again).expect("a re-serialized call is taken again");
        assert_eq!(back, (id.clone(), name.clone(), arguments, progress));
        let ok = ServerResult::CallToolResult(CallToolResult::success(vec![ContentBlock::text(name.clone())]));
        answered(&id, Ok(ok));
        answered(&id, Err(rmcp::ErrorData::invalid_params(name, None)));
    }
    if let Some((id, _progress, method, params)) = fuzzing::relay(data) {
        assert!(id.is_i64() || id.is_string(), "only integer and string ids are relayed: {id}");
        assert!(matches!(method, "prompts/get" | "resources/read"));
        assert!(params.is_object(), "params go down as an object: {params}");
    }
});

/// The JSON answer is a JSON-RPC response to `id`; the event-stream answer is one event whose
/// data is that same response on one line.
fn answered(id: &Value, answer: Result<ServerResult, rmcp::ErrorData>) {
    let (body, event) = fuzzing::answers(id, answer);
    let response: Value = serde_json::from_slice(&body).expect("the answer is JSON");
    assert_eq!(response["jsonrpc"], "2.0");
    assert_eq!(&response["id"], id);
    assert!(response.get("result").is_some() != response.get("error").is_some());
    let data = event.strip_prefix(b"event: message\ndata: ").and_then(|e| e.strip_suffix(b"\n\n")).expect("one event");
    assert!(!data.contains(&b'\n') && !data.contains(&b'\r'), "an event's data is one line");
    assert_eq!(data, &body[..]);
}
