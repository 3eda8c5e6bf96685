//! `search_tools`, and `describe` (what a program asks before calling).

use rmcp::model::JsonObject;
use serde_json::{Value, json};

use super::{Outcome, catalog, class_name, classify, connector, echo, failure, key};
use crate::{AppState, gateway::GatewayCtx};

pub async fn search(state: &AppState, ctx: &GatewayCtx, args: &JsonObject) -> Outcome {
    let query = args.get("query").and_then(Value::as_str).unwrap_or("").to_lowercase();
    let only = args.get("connector").and_then(Value::as_str);
    let safety = args.get("safety").and_then(Value::as_str);
    let limit = args.get("limit").and_then(Value::as_u64).unwrap_or(8);
    let offset = args.get("offset").and_then(Value::as_u64).unwrap_or(0) as usize;
    if !(1..=100).contains(&limit) {
        return Outcome::error("invalid_args", "limit is from 1 to 100".into(), None);
    }
    if safety.is_some_and(|s| s != "read" && s != "write") {
        return Outcome::error("invalid_args", "safety is `read` or `write`".into(), None);
    }
    let words: Vec<&str> = query.split_whitespace().collect();
    let mut hits: Vec<(u32, String, Value)> = Vec::new();
    let mut unavailable = Vec::new();
    let visible = ctx.bound.document.connectors.iter().filter(|(id, _)| ctx.visible(id, None));
    for (id, c) in visible.filter(|(id, _)| only.is_none_or(|o| o == id.as_str())) {
        let tools = match catalog(state, ctx, id, &key(ctx, id, c), c).await {
            Ok(tools) => tools,
            Err(f) => {
                unavailable.push(json!({ "connector": id, "code": failure(f).error_code }));
                continue;
            }
        };
        for t in tools.tools.iter().filter(|t| ctx.visible(id, Some(&t.name))) {
            let class = class_name(classify(&ctx.bound.document, id, t));
            if safety.is_some_and(|s| s != class) {
                continue;
            }
            let name = t.name.to_lowercase();
            let title = t.title.clone().unwrap_or_default().to_lowercase();
            let description = t.description.as_deref().unwrap_or("").to_lowercase();
            let score: u32 = words
                .iter()
                .map(|w| {
                    (if name == *w { 10 } else { 0 })
                        + (if name.contains(w) { 5 } else { 0 })
                        + (if id.contains(w) { 3 } else { 0 })
                        + (if title.contains(w) { 3 } else { 0 })
                        + (if description.contains(w) { 1 } else { 0 })
                })
                .sum();
            if words.is_empty() || score > 0 {
                let address = format!("{id}.{}", t.name);
                let entry = json!({ "address": address, "title": t.title, "description": t.description, "safety": class, "inputSchema": t.input_schema });
                hits.push((score, address, entry));
            }
        }
    }
    hits.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    let total = hits.len();
    let results: Vec<Value> = hits.into_iter().skip(offset).take(limit as usize).map(|(_, _, e)| e).collect();
    Outcome::ok(json!({ "results": results, "total": total, "offset": offset, "limit": limit, "unavailable": unavailable }))
}

/// Tools a program may ask about at once.
pub const DESCRIBE_MAX: usize = 20;

/// What a program needs to call each address: description, safety and schemas. An unknown or
/// ungranted address answers `unknown_tool` in its own entry.
pub async fn describe(state: &AppState, ctx: &GatewayCtx, args: &JsonObject) -> Outcome {
    let Some(addresses) = args.get("addresses").and_then(Value::as_array) else {
        return Outcome::error("invalid_args", "`addresses` is a list of <connector>.<tool>".into(), None);
    };
    if addresses.is_empty() || addresses.len() > DESCRIBE_MAX {
        return Outcome::error("invalid_args", format!("`addresses` holds 1 to {DESCRIBE_MAX} addresses"), None);
    }
    let mut tools = Vec::with_capacity(addresses.len());
    for address in addresses {
        let address = address.as_str().unwrap_or("");
        let unknown = json!({ "address": echo(address), "error": { "code": "unknown_tool" } });
        let Some((id, name)) = address.split_once('.') else {
            tools.push(unknown);
            continue;
        };
        let Some(c) = connector(ctx, id).filter(|_| ctx.visible(id, Some(name))) else {
            tools.push(unknown);
            continue;
        };
        let found = match catalog(state, ctx, id, &key(ctx, id, c), c).await {
            Ok(catalog) => catalog.tools.iter().find(|t| t.name == name).cloned(),
            Err(f) => {
                tools.push(json!({ "address": address, "error": { "code": failure(f).error_code } }));
                continue;
            }
        };
        tools.push(match found {
            Some(t) => json!({
                "address": address,
                "title": t.title,
                "description": t.description,
                "safety": class_name(classify(&ctx.bound.document, id, &t)),
                "inputSchema": t.input_schema,
                "outputSchema": t.output_schema,
            }),
            None => unknown,
        });
    }
    Outcome::ok(json!({ "tools": tools }))
}
