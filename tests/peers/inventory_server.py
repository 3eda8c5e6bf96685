"""A small downstream MCP server written with the official Python MCP SDK (`mcp`), used by the
gateway tests: one read tool and one write tool, over streamable HTTP (stateful sessions).

    python3 inventory_server.py PORT
"""
import sys

from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

server = MCPServer(name="inventory", version="1.0.0")
stock: dict[str, int] = {"apples": 3}


@server.tool(annotations=ToolAnnotations(readOnlyHint=True, destructiveHint=False))
def count(item: str) -> str:
    """How many of an item are in stock."""
    return f"{item}: {stock.get(item, 0)}"


@server.tool(annotations=ToolAnnotations(readOnlyHint=False, destructiveHint=True))
def restock(item: str, quantity: int) -> str:
    """Add stock of an item."""
    stock[item] = stock.get(item, 0) + quantity
    return f"{item}: {stock[item]}"


if __name__ == "__main__":
    server.run("streamable-http", port=int(sys.argv[1]))
