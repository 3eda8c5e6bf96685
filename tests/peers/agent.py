"""An agent built on the official Python MCP SDK (`mcp`), used by the test suite.

    python3 agent.py URL CALLS_JSON [MODE]  # credentials from GATEHOUSE_CLIENT_ID/_SECRET, GATEHOUSE_TOKEN

Connects through the SDK's streamable HTTP client with the machine credentials, initializes,
lists tools, makes each call of CALLS_JSON ([[name, arguments], ...]) and prints one JSON
object: server name, negotiated protocol, tool names, and per call isError plus text blocks.
A call named "@prompt" gets the prompt its arguments name ({"name", "arguments"}) and reports
its messages' texts (`prompt`); "@resource" reads the resource {"uri"} and reports its text
contents (`resource`). "@level" (handshake mode) sends `logging/setLevel` with {"level"} and
then waits {"settle"} seconds (default 0), reporting {"level"}.
A call answered with a JSON-RPC error reports it as {"error": {"code", "message", "data"}}.
Each call also reports the log messages (`logs`: their data) that arrived while it ran; a call
given as [name, arguments, {"progress": true}] asks for progress and reports it (`progress`:
[progress, total, message] per notification). In a 2026 mode the client opts in to log
messages at `info` (that revision's per-request level).

MODE is the SDK client's connect mode: absent, the handshake (`ClientSession.initialize`);
`auto` (`server/discover`, falling back to the handshake) or a 2026 revision such as
`2026-07-28` (adopted without asking) go through the SDK's `Client`, which validates every
result against that revision's schema.

GATEHOUSE_ANSWER=1 makes the agent declare sampling, elicitation and roots and answer them
(sampling with "Paris, says the agent", a form elicitation by accepting {"name": "Ann"}, a URL
elicitation by accepting, roots with file:///work/agent); the modern
modes then follow a downstream's input-required results (retrying with the answers).
GATEHOUSE_ALT_URL sends every second HTTP request to that replica instead of URL's (strict
alternation), and the output's "replicas" lists [JSON-RPC method, 0 or 1] per request.
GATEHOUSE_CHANGES (handshake mode), a comma-separated list of `tools` and `prompts`: after the
calls the agent waits (at most 20 s) until the server said each of those lists changed, then
lists them again; the output's "changes" names the list changes heard in order, and
"after" the tool and prompt names then listed.
GATEHOUSE_WATCH, comma-separated resource URIs: in a 2026 mode the agent opens a
`subscriptions/listen` stream subscribed to them before the calls; in handshake mode it sends
`resources/subscribe` for each (every one on its own request) and gives the GET stream 5 s to
take them up. After the calls it waits (at most 20 s) for an update of each; the output's
"honored" lists the URIs the server acknowledged (handshake mode: whose subscription it
answered without an error; "refused" the others' error messages), "updated" the updates heard
in order (extra ones included, for 2 s after).
"""
import asyncio
import json
import os
import sys

import anyio
import httpx2
from mcp import Client, ClientSession, types
from mcp.shared.exceptions import MCPError
from mcp.client.subscriptions import ResourceUpdated
from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client
from mcp.shared.exceptions import MCPError

SEEN: list = []


async def sample(context, params):
    return types.CreateMessageResult(
        role="assistant", content=types.TextContent(type="text", text="Paris, says the agent"), model="agent-model"
    )


async def elicit(context, params):
    if getattr(params, "mode", None) == "url":
        # URL mode: the user was sent to the URL; nothing comes back but the action.
        return types.ElicitResult(action="accept")
    return types.ElicitResult(action="accept", content={"name": "Ann"})


async def roots(context):
    return types.ListRootsResult(roots=[types.Root(uri="file:///work/agent", name="agent")])


def answers() -> dict:
    if os.environ.get("GATEHOUSE_ANSWER"):
        return {"sampling_callback": sample, "elicitation_callback": elicit, "list_roots_callback": roots}
    return {}


class Alternating(httpx2.AsyncBaseTransport):
    """Every second request goes to the other replica (same path, another host:port)."""

    def __init__(self, other: str) -> None:
        self.inner = httpx2.AsyncHTTPTransport()
        self.other = httpx2.URL(other)
        self.n = 0

    async def handle_async_request(self, request):
        replica = self.n % 2
        self.n += 1
        if replica == 1:
            request.url = request.url.copy_with(host=self.other.host, port=self.other.port)
        try:
            method = json.loads(request.content or b"{}").get("method")
        except (ValueError, AttributeError):
            method = None
        SEEN.append([method, replica])
        return await self.inner.handle_async_request(request)


class Streams:
    """What arrives on the response streams of one call: log messages and progress."""

    def __init__(self) -> None:
        self.logs: list = []
        self.progress: list = []

    async def log(self, params) -> None:
        self.logs.append(params.data)

    async def on_progress(self, progress: float, total: float | None, message: str | None) -> None:
        self.progress.append([progress, total, message])

    def call(self, spec: list):
        """The call's name and arguments and its progress callback; starts its record afresh."""
        self.logs, self.progress = [], []
        options = spec[2] if len(spec) > 2 else {}
        return spec[0], spec[1], (self.on_progress if options.get("progress") else None)

    def report(self, result, spec: list) -> dict:
        texts = [c.text for c in result.content if getattr(c, "text", None) is not None]
        out = {"isError": bool(result.is_error), "text": texts}
        if self.logs:
            out["logs"] = self.logs
        if len(spec) > 2 and spec[2].get("progress"):
            out["progress"] = self.progress
        return out


async def drive(session, streams: Streams, describe, calls: list) -> dict:
    """Lists the tools, then makes `calls`; `describe()` names (server, protocol) once listed."""
    tools = await session.list_tools()
    server, protocol = describe()
    out = {"server": server, "protocol": protocol, "tools": [t.name for t in tools.tools], "calls": []}
    for spec in calls:
        name, arguments, progress = streams.call(spec)
        if name == "@prompt":
            prompt = await session.get_prompt(arguments["name"], arguments.get("arguments"))
            texts = [m.content.text for m in prompt.messages if getattr(m.content, "text", None) is not None]
            out["calls"].append({"prompt": texts})
            continue
        if name == "@level":
            await session.set_logging_level(arguments["level"])
            await asyncio.sleep(arguments.get("settle", 0))
            out["calls"].append({"level": arguments["level"]})
            continue
        if name == "@resource":
            read = await session.read_resource(arguments["uri"])
            out["calls"].append({"resource": [c.text for c in read.contents if getattr(c, "text", None) is not None]})
            continue
        try:
            result = await session.call_tool(name, arguments, progress_callback=progress)
        except MCPError as e:
            # A JSON-RPC error answer (e.g. URLElicitationRequired): reported, not fatal.
            out["calls"].append({"error": {"code": e.code, "message": e.message, "data": e.data}})
            continue
        out["calls"].append(streams.report(result, spec))
    out["replicas"] = SEEN
    return out


async def modern(url: str, http, calls: list, mode: str) -> dict:
    streams = Streams()
    transport = streamable_http_client(url, http_client=http)
    async with Client(transport, mode=mode, **answers(), logging_callback=streams.log, log_level="info") as client:

        def describe():
            info = client.server_info
            return (info.name if info is not None else None, client.protocol_version)

        watch = [u for u in os.environ.get("GATEHOUSE_WATCH", "").split(",") if u]
        if not watch:
            return await drive(client, streams, describe, calls)
        async with client.listen(resource_subscriptions=watch) as sub:
            out = await drive(client, streams, describe, calls)
            updated: list = []

            async def hear() -> None:
                async for event in sub:
                    if isinstance(event, ResourceUpdated):
                        updated.append(event.uri)

            async with anyio.create_task_group() as tg:
                tg.start_soon(hear)
                with anyio.move_on_after(20):
                    while not set(watch) <= set(updated):
                        await anyio.sleep(0.1)
                # Anything said after the awaited updates (a duplicate, another URI) is caught too.
                await anyio.sleep(2)
                tg.cancel_scope.cancel()
            out["honored"] = sorted(sub.honored.resource_subscriptions or [])
            out["updated"] = updated
            return out


async def main(url: str, calls: list, mode: str | None) -> None:
    headers = {
        "Gatehouse-Client-Id": os.environ["GATEHOUSE_CLIENT_ID"],
        "Gatehouse-Client-Secret": os.environ["GATEHOUSE_CLIENT_SECRET"],
        "Authorization": f"Bearer {os.environ['GATEHOUSE_TOKEN']}",
    }
    alt = os.environ.get("GATEHOUSE_ALT_URL")
    client = (
        httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=300), transport=Alternating(alt))
        if alt
        else create_mcp_http_client(headers=headers)
    )
    async with client as http:
        if mode is not None:
            print(json.dumps(await modern(url, http, calls, mode)))
            return
        record = Streams()
        changes: list = []
        changed = asyncio.Event()
        wanted = {w for w in os.environ.get("GATEHOUSE_CHANGES", "").split(",") if w}

        watch = [u for u in os.environ.get("GATEHOUSE_WATCH", "").split(",") if u]
        updated: list = []

        async def on_message(message) -> None:
            method = getattr(message, "method", None) or getattr(getattr(message, "root", None), "method", None)
            if method == "notifications/resources/updated":
                root = getattr(message, "root", message)
                updated.append(str(root.params.uri))
            kind = {"notifications/tools/list_changed": "tools", "notifications/prompts/list_changed": "prompts"}.get(method)
            if kind is not None:
                changes.append(kind)
                if wanted <= set(changes):
                    changed.set()

        async with streamable_http_client(url, http_client=http) as streams:
            async with ClientSession(
                streams[0], streams[1], **answers(), logging_callback=record.log, message_handler=on_message
            ) as session:
                init = await session.initialize()
                honored, refused = [], []
                for uri in watch:
                    try:
                        await session.subscribe_resource(uri)
                        honored.append(uri)
                    except Exception as e:  # the server's JSON-RPC error, reported
                        refused.append(str(e))
                if watch:
                    await asyncio.sleep(5)
                if wanted:
                    # The GET stream opens in the background after the handshake: give it a
                    # moment, so the changes the calls make are said on it.
                    await asyncio.sleep(1.5)
                out = await drive(session, record, lambda: (init.server_info.name, init.protocol_version), calls)
                if wanted:
                    try:
                        await asyncio.wait_for(changed.wait(), 20)
                    except asyncio.TimeoutError:
                        pass
                    out["changes"] = changes
                    tools = [t.name for t in (await session.list_tools()).tools]
                    prompts = [p.name for p in (await session.list_prompts()).prompts]
                    out["after"] = {"tools": tools, "prompts": prompts}
                if watch:
                    for _ in range(200):
                        if set(honored) <= set(updated):
                            break
                        await asyncio.sleep(0.1)
                    await asyncio.sleep(2)
                    out["honored"], out["refused"], out["updated"] = sorted(honored), refused, updated
                print(json.dumps(out))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], json.loads(sys.argv[2]), sys.argv[3] if len(sys.argv) > 3 else None))
