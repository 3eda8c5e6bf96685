"""A downstream written with the official Python MCP SDK (`mcp`) whose tool answers with the
JSON-RPC error it is asked for, used by tests/protocol.rs to check that a native pool relays a
downstream's error as that error (code, message, data), not as a tool result.

    python3 refusing_server.py PORT
"""
import sys

from mcp.server.mcpserver import MCPServer
from mcp.shared.exceptions import MCPError

server = MCPServer(name="refusing", version="1.0.0")


@server.tool()
def refuse(code: int) -> str:
    """Fails with the JSON-RPC error `code`."""
    raise MCPError(code=code, message=f"refused with {code}", data={"asked": code})


@server.resource("test://present", mime_type="text/plain")
def present() -> str:
    """The one resource there is."""
    return "here"


if __name__ == "__main__":
    server.run("streamable-http", port=int(sys.argv[1]))
