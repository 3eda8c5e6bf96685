//! The six tools as `tools/list` shows them.

use rmcp::model::{JsonObject, Tool, ToolAnnotations};
use serde_json::{Value, json};

fn schema(value: Value) -> JsonObject {
    match value {
        Value::Object(map) => map,
        _ => JsonObject::new(),
    }
}

fn tool(name: &'static str, description: &'static str, input: Value, read_only: bool) -> Tool {
    let annotations = ToolAnnotations::new().read_only(read_only).destructive(!read_only);
    Tool::new(name, description, schema(input)).with_annotations(annotations)
}

/// The surface, as `tools/list` shows it on an endpoint whose programs may not write.
pub fn tools() -> Vec<Tool> {
    tools_for(false)
}

/// The surface; `trusted` (a trusted pool) marks `execute_code` as able to write.
pub fn tools_for(trusted: bool) -> Vec<Tool> {
    let call_args = json!({
        "type": "object",
        "properties": {
            "address": { "type": "string", "description": "<connector>.<tool>" },
            "args": { "type": "object", "description": "the tool's arguments" }
        },
        "required": ["address"],
        "additionalProperties": false
    });
    let mut destructive_args = call_args.clone();
    destructive_args["properties"]["approval_id"] = json!({
        "type": "string",
        "format": "uuid",
        "description": "the approval an `approval_required` answer gave, once a person approved it (the same arguments again)"
    });
    vec![
        tool(
            "search_tools",
            "Find tools of this workspace by words in their connector, name, title and description.",
            json!({
                "type": "object",
                "properties": {
                    "query": { "type": "string" },
                    "connector": { "type": "string" },
                    "safety": { "type": "string", "enum": ["read", "write"] },
                    "limit": { "type": "integer", "minimum": 1, "maximum": 100, "default": 8 },
                    "offset": { "type": "integer", "minimum": 0, "default": 0 }
                },
                "additionalProperties": false
            }),
            true,
        ),
        tool(
            "call_tool",
            "Call a read-only tool by address. Writes are refused: use call_destructive_tool.",
            call_args.clone(),
            true,
        ),
        tool(
            "call_destructive_tool",
            "Call a tool that may change something. Ask the human before using it.",
            destructive_args,
            false,
        ),
        tool(
            "execute_code",
            "Run one async arrow JavaScript function in a sandbox whose only host object is `gatehouse` \
             (search, describe, call, result, skill, emit): discover tools, make dependent or parallel calls and reduce \
             their results server-side, so only the answer comes back. Read the `usage` skill first.",
            json!({
                "type": "object",
                "properties": {
                    "code": {
                        "type": "string",
                        "maxLength": crate::code::MAX_CODE_BYTES,
                        "description": "e.g. async () => { const r = await gatehouse.search({ query: \"issues\" }); return r.total; }"
                    }
                },
                "required": ["code"],
                "additionalProperties": false
            }),
            !trusted,
        ),
        tool(
            "authorize_connector",
            "Say how to repair a connector's authorization.",
            json!({ "type": "object", "properties": { "connector": { "type": "string" } }, "required": ["connector"], "additionalProperties": false }),
            true,
        ),
        tool(
            "skills",
            "The built-in usage guide of this gateway.",
            json!({ "type": "object", "properties": { "name": { "type": "string", "default": "usage" } }, "additionalProperties": false }),
            true,
        ),
    ]
}
