//! `skills`: the built-in guide, and the endpoint's instructions that point to it.

use serde_json::json;

use super::{Outcome, echo};

pub const INSTRUCTIONS: &str = "Gatehouse serves this workspace's tools through six tools. Find a tool with \
search_tools, call one known read with call_tool, and a write with call_destructive_tool (your client should ask \
the human first). For an unknown address, dependent calls or reducing results, run a JavaScript program with \
execute_code. Read the `usage` skill for the routing rules.";

const USAGE: &str = "# Using this Gatehouse workspace\n\n\
Tools are addressed as `<connector>.<tool>`.\n\n\
- Unsure which tool? `search_tools` with a few words (filters: `connector`, `safety` = read|write; `limit` 1-100, default 8; `offset`).\n\
- One known read: `call_tool` with `address` and `args`.\n\
- A write (anything not declared read-only): `call_destructive_tool` with the same arguments; clients ask the human first. \
`call_tool` refuses writes with `destructive_tool_requires_approval` and names the exact call to make instead.\n\
- An unknown address, calls that depend on each other, or results to filter and reduce: `execute_code` with \
one async arrow function, e.g. `async () => { const r = await gatehouse.call(\"github.list_issues\", {}); return r.content.length; }`. \
Only the program's return value comes back to you.\n\
- A connector that needs credentials: `authorize_connector` says how to repair it.\n\n\
Routing rule: one known read -> `call_tool`; unknown address, dependent calls or reduction -> `execute_code`; \
writes -> `call_destructive_tool`.\n\n\
## execute_code\n\n\
The program is plain JavaScript (no TypeScript, no `import`/`require`, no timers, network, files or `eval`), \
run in a fresh sandbox each time. The only host object is `gatehouse` (do not declare a variable or parameter \
of that name):\n\
- `await gatehouse.search({query, connector, safety, limit, offset})` -> the same answer as `search_tools`.\n\
- `await gatehouse.describe({addresses: [\"c.t\", ...]})` -> each tool's description, safety and input schema.\n\
- `await gatehouse.call(address, args, {timeoutMs})` -> the tool's MCP result `{content, structuredContent, isError}`; \
a result over 24,000 bytes resolves to `{stashed: {id, total_bytes}}`: read it with `gatehouse.result(id, {offset, maxBytes})`, \
which answers `{chunk, next_offset, total_bytes}`.\n\
- `await gatehouse.skill(\"usage\")`; `gatehouse.emit({type: \"text\", text})` (or image/audio with `data` and `mimeType`) \
adds a content block to the answer; `console.log/warn/error` are returned as `logs`.\n\
Gateway refusals reject with an error whose `code` is stable. Run calls in parallel with `Promise.all`. \
Writes are refused inside programs (`destructive_tool_requires_approval` names the call_destructive_tool call to make) \
except on a pool marked trusted, which allows 10 writes per run, never retried.\n\
Limits per run: 20 host calls (the 21st ends the run with `budget_exceeded`), 250 ms of CPU (waiting for calls does \
not count), 30 s in all, 15 s per call, 64 MiB of memory, a 24,000-character result (larger ones are paged), \
4,000 characters of logs, 32 emitted blocks / 4 MB.\n\n\
Errors carry a stable `code`; `unavailable`, `timeout`, `rate_limited`, `quota_unavailable` and `executor_overloaded` are worth retrying (after `retryAfterMs` when given).\n";

/// A built-in skill by name.
pub fn skill(name: &str) -> Outcome {
    match name {
        "usage" => Outcome::ok(json!({ "name": "usage", "text": USAGE })),
        other => Outcome::error("unknown_skill", format!("no skill named `{}`; try `usage`", echo(other)), None),
    }
}
