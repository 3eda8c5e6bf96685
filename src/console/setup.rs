//! Client setup: per workspace, configuration to paste (never a secret; the three values
//! come from the environment): the generic `mcpServers` JSON, a program on the official Python
//! SDK that lists the tools or calls one, and a `curl` command.

use askama::Template;
use axum::{Router, extract::State, http::StatusCode, response::Response, routing::get};

use super::{Console, Layout, PageError, render, workspaces::endpoint};
use crate::{AppState, workspaces};

pub struct SetupRow {
    pub slug: String,
    pub endpoint: String,
    pub client_json: String,
    pub curl: String,
    /// A program on the official Python SDK (`mcp` 2) that connects and lists the tools, or
    /// calls the one named on its command line.
    pub python: String,
}

/// The Python SDK snippet for the endpoint `url`: the same three values from the environment.
fn python_snippet(url: &str) -> String {
    format!(
        r#"import asyncio
import json
import os
import sys

from mcp import ClientSession
from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client

URL = "{url}"
HEADERS = {{
    "Gatehouse-Client-Id": os.environ["GATEHOUSE_CLIENT_ID"],
    "Gatehouse-Client-Secret": os.environ["GATEHOUSE_CLIENT_SECRET"],
    "Authorization": "Bearer " + os.environ["GATEHOUSE_TOKEN"],
}}


async def main():
    async with create_mcp_http_client(headers=HEADERS) as http:
        async with streamable_http_client(URL, http_client=http) as streams:
            async with ClientSession(streams[0], streams[1]) as session:
                await session.initialize()
                if len(sys.argv) > 1:
                    # python3 main.py TOOL '{{"argument": "value"}}': call one tool.
                    arguments = json.loads(sys.argv[2]) if len(sys.argv) > 2 else {{}}
                    result = await session.call_tool(sys.argv[1], arguments)
                    for item in result.content:
                        print(getattr(item, "text", item))
                    return 1 if result.is_error else 0
                listed = await session.list_tools()
                for tool in listed.tools:
                    print(tool.name)
                return 0


sys.exit(asyncio.run(main()))
"#
    )
}

#[derive(Template)]
#[template(path = "console/setup.html")]
struct SetupPage {
    layout: Layout,
    slug: String,
    rows: Vec<SetupRow>,
}

/// Ready-to-paste configuration: placeholders where the secrets go, never a secret.
async fn setup(c: Console, State(state): State<AppState>) -> Result<Response, PageError> {
    let rows = workspaces::list(&state.db, c.ctx.tenant.id)
        .await?
        .iter()
        .map(|w| {
            let url = endpoint(&state, c.slug(), &w.slug);
            let client = serde_json::json!({
                "mcpServers": {
                    format!("gatehouse-{}", w.slug): {
                        "type": "http",
                        "url": url,
                        "headers": {
                            "Gatehouse-Client-Id": "${GATEHOUSE_CLIENT_ID}",
                            "Gatehouse-Client-Secret": "${GATEHOUSE_CLIENT_SECRET}",
                            "Authorization": "Bearer ${GATEHOUSE_TOKEN}"
                        }
                    }
                }
            });
            let curl = format!(
                "curl -sS {url} \\\n  -H \"Gatehouse-Client-Id: $GATEHOUSE_CLIENT_ID\" \\\n  -H \"Gatehouse-Client-Secret: $GATEHOUSE_CLIENT_SECRET\" \\\n  -H \"Authorization: Bearer $GATEHOUSE_TOKEN\" \\\n  -H 'Content-Type: application/json' \\\n  -H 'Accept: application/json, text/event-stream' \\\n  -H 'MCP-Protocol-Version: 2025-11-25' \\\n  -d '{{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/list\"}}'"
            );
            SetupRow {
                slug: w.slug.clone(),
                python: python_snippet(&url),
                endpoint: url,
                client_json: serde_json::to_string_pretty(&client).unwrap_or_default(),
                curl,
            }
        })
        .collect();
    render(StatusCode::OK, &SetupPage { layout: c.layout("Client setup", "setup"), slug: c.slug().to_owned(), rows })
}

pub fn router() -> Router<AppState> {
    Router::new().route("/console/t/{tenant}/setup", get(setup))
}
