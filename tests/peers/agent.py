"""An agent built on the official Python MCP SDK (`mcp`), used by the test suite.

    python3 agent.py URL CALLS_JSON [MODE]  # credentials from GATEHOUSE_CLIENT_ID/_SECRET, GATEHOUSE_TOKEN

Connects through the SDK's streamable HTTP client with the machine credentials, initializes,
lists tools, makes each call of CALLS_JSON ([[name, arguments], ...]) and prints one JSON
object: server name, negotiated protocol, tool names, and per call isError plus text blocks.

MODE is the SDK client's connect mode: absent, the handshake (`ClientSession.initialize`);
`auto` (`server/discover`, falling back to the handshake) or a 2026 revision such as
`2026-07-28` (adopted without asking) go through the SDK's `Client`, which validates every
result against that revision's schema.
"""
import asyncio
import json
import os
import sys

from mcp import Client, ClientSession
from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client


async def modern(url: str, http, calls: list, mode: str) -> dict:
    async with Client(streamable_http_client(url, http_client=http), mode=mode) as client:
        tools = await client.list_tools()
        info = client.server_info
        out = {
            "server": info.name if info is not None else None,
            "protocol": client.protocol_version,
            "tools": [t.name for t in tools.tools],
            "calls": [],
        }
        for name, arguments in calls:
            result = await client.call_tool(name, arguments)
            texts = [c.text for c in result.content if getattr(c, "text", None) is not None]
            out["calls"].append({"isError": bool(result.is_error), "text": texts})
        return out


async def main(url: str, calls: list, mode: str | None) -> None:
    headers = {
        "Gatehouse-Client-Id": os.environ["GATEHOUSE_CLIENT_ID"],
        "Gatehouse-Client-Secret": os.environ["GATEHOUSE_CLIENT_SECRET"],
        "Authorization": f"Bearer {os.environ['GATEHOUSE_TOKEN']}",
    }
    async with create_mcp_http_client(headers=headers) as http:
        if mode is not None:
            print(json.dumps(await modern(url, http, calls, mode)))
            return
        async with streamable_http_client(url, http_client=http) as streams:
            async with ClientSession(streams[0], streams[1]) as session:
                init = await session.initialize()
                tools = await session.list_tools()
                out = {
                    "server": init.server_info.name,
                    "protocol": init.protocol_version,
                    "tools": [t.name for t in tools.tools],
                    "calls": [],
                }
                for name, arguments in calls:
                    result = await session.call_tool(name, arguments)
                    texts = [c.text for c in result.content if getattr(c, "text", None) is not None]
                    out["calls"].append({"isError": bool(result.is_error), "text": texts})
                print(json.dumps(out))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], json.loads(sys.argv[2]), sys.argv[3] if len(sys.argv) > 3 else None))
