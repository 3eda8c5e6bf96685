"""A handshake-era downstream written with the official Python MCP SDK (`mcp`) whose tool and
prompt lists grow while it runs, and which tells every session connected to it, for the tests
of list changes relayed through a native pool and of a 2026-07-28 agent's calls to a
handshake-era downstream that asks for input (tests/protocol.rs):

    python3 listing_server.py PORT

It speaks only the handshake era (its `server/discover` answers -32601), declares `listChanged`
for tools and prompts, and the tool `grow` adds a tool and a prompt named `grown_N` and sends
`notifications/tools/list_changed` and `notifications/prompts/list_changed` to every session
it has seen, on that session's GET stream, as a server whose lists change for everyone does.
The tool `ask_twice` asks the client to sample and then to fill a form while the call is open
(on the call's response stream) and reports both answers and how many calls got both.
It has one resource, `listing://watched`, that sessions may subscribe to (`resources/subscribe`);
the tool `touch` sends `notifications/resources/updated` for it to every session subscribed.
The prompt `asking` asks the client to sample and the resource `listing://asking/{topic}` asks
it to fill a form while the request is open, each reporting the answer in what it returns.
"""
import sys

from mcp import types
from mcp.server.lowlevel.server import NotificationOptions
from mcp.server.mcpserver import Context, MCPServer
from mcp.shared.exceptions import MCPError
from mcp.types import SamplingMessage, TextContent

server = MCPServer("listing-downstream", instructions="Lists that grow.")
lowlevel = server._lowlevel_server  # the SDK's documented seam for handshake-era behaviour
sessions: list = []
grown = {"n": 0}
# Calls of ask_twice that got both answers.
asked = {"n": 0}


async def remember_session(ctx, params) -> None:
    sessions.append(ctx.session)


lowlevel.add_notification_handler("notifications/initialized", types.NotificationParams, remember_session)

plain_options = lowlevel.create_initialization_options
lowlevel.create_initialization_options = lambda *args, **kwargs: plain_options(
    NotificationOptions(prompts_changed=True, tools_changed=True)
)


async def no_discover(ctx, params):
    raise MCPError(code=-32601, message="Method not found: this server speaks the handshake era only")


lowlevel.add_request_handler("server/discover", types.RequestParams, no_discover)


@server.tool(description="Echoes its text")
def echo(text: str) -> str:
    return text


@server.tool(description="Asks the client to sample, then to fill a form, while the call is open")
async def ask_twice(ctx: Context) -> str:
    sampled = await ctx.session.create_message(
        [SamplingMessage(role="user", content=TextContent(type="text", text="Capital of France?"))],
        max_tokens=50,
        related_request_id=ctx.request_id,
    )
    schema = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}
    elicited = await ctx.session.elicit_form("Who are you?", schema, related_request_id=ctx.request_id)
    text = sampled.content.text if isinstance(sampled.content, TextContent) else str(sampled.content)
    asked["n"] += 1
    return f"sampled={text}; elicited={elicited.action}:{(elicited.content or {}).get('name')}; runs={asked['n']}"


@server.prompt(name="asking", description="Asks the client to sample while the prompt is got")
async def asking(ctx: Context) -> str:
    sampled = await ctx.session.create_message(
        [SamplingMessage(role="user", content=TextContent(type="text", text="Capital of France?"))],
        max_tokens=50,
        related_request_id=ctx.request_id,
    )
    text = sampled.content.text if isinstance(sampled.content, TextContent) else str(sampled.content)
    return f"prompt sampled={text}"


@server.resource("listing://asking/{topic}", name="asking", description="Asks the client to fill a form while read")
async def asking_resource(topic: str, ctx: Context) -> str:
    schema = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}
    elicited = await ctx.session.elicit_form(f"Who reads {topic}?", schema, related_request_id=ctx.request_id)
    return f"{topic} read by {elicited.action}:{(elicited.content or {}).get('name')}"


@server.prompt(name="base", description="Always here")
def base() -> str:
    return "base"


@server.tool(description="Adds a tool and a prompt named grown_N, and tells every session")
async def grow() -> str:
    grown["n"] += 1
    n = grown["n"]
    server.add_tool(lambda: f"grown {n}", name=f"grown_{n}", description="Grown while running")
    server.prompt(name=f"grown_{n}", description="Grown while running")(lambda: "grown")
    for session in list(sessions):
        try:
            await session.send_tool_list_changed()
            await session.send_prompt_list_changed()
        except Exception:
            # A session that is gone is told nothing more.
            sessions.remove(session)
    return f"grew {n}"


# The sessions subscribed to listing://watched (held until they are gone: a send then fails).
watchers: list = []


@server.resource("listing://watched", name="watched", description="A resource to subscribe to", mime_type="text/plain")
def watched() -> str:
    return "watched"


async def subscribe(ctx, params: types.SubscribeRequestParams) -> types.EmptyResult:
    if str(params.uri) == "listing://watched" and ctx.session not in watchers:
        watchers.append(ctx.session)
    return types.EmptyResult()


async def unsubscribe(ctx, params: types.UnsubscribeRequestParams) -> types.EmptyResult:
    if ctx.session in watchers:
        watchers.remove(ctx.session)
    return types.EmptyResult()


lowlevel.add_request_handler("resources/subscribe", types.SubscribeRequestParams, subscribe)
lowlevel.add_request_handler("resources/unsubscribe", types.UnsubscribeRequestParams, unsubscribe)


@server.tool(description="Says listing://watched was updated, to every session subscribed to it")
async def touch() -> str:
    told = 0
    for session in list(watchers):
        try:
            await session.send_resource_updated("listing://watched")
            told += 1
        except Exception:
            watchers.remove(session)
    return f"told {told}"


if __name__ == "__main__":
    server.run("streamable-http", port=int(sys.argv[1]))
