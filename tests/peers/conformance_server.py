"""A downstream written with the official Python MCP SDK (`mcp`) that implements what the
official conformance suite's server scenarios exercise (`@modelcontextprotocol/conformance`,
pinned in package.json): the `test_*` tools, resources and templates, prompts, completion,
logging, progress, sampling, elicitation and the 2026-07-28 input-required results.

The names and payloads are the ones the suite's scenario descriptions ask for; where a
scenario only checks a shape, the values are ours. It serves both protocol revisions on one
streamable-HTTP endpoint (stateful sessions for the handshake era, so sampling and
elicitation can be sent back to the client while a call is open).

    python3 conformance_server.py PORT [CALL_LOG]

With CALL_LOG, every POST's `Mcp-Method` and `Mcp-Name` headers are appended to that file
first (tests prove with it what reached the downstream). With CONFORMANCE_REFUSE_HANDSHAKE=1
in the environment it is a server that speaks only 2026-07-28: `initialize` is refused.
"""
import asyncio
import base64
import datetime
import json
import os
import sys
import weakref
from typing import Annotated, Any

from pydantic import Field

from mcp.server.caching import CacheHint
from mcp.server.context import CallNext
from mcp.server.extension import Extension
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.prompts.base import UserMessage
from mcp.shared.exceptions import MCPError
from mcp.types import (
    MISSING_REQUIRED_CLIENT_CAPABILITY,
    AudioContent,
    CallToolRequestParams,
    CallToolResult,
    ClientCapabilities,
    Completion,
    EmbeddedResource,
    EmptyResult,
    ImageContent,
    InputRequiredResult,
    MissingRequiredClientCapabilityErrorData,
    SamplingCapability,
    SamplingMessage,
    SetLevelRequestParams,
    SubscribeRequestParams,
    TextContent,
    TextResourceContents,
    UnsubscribeRequestParams,
)

# A 1x1 red PNG and a 1-sample silent WAV: the smallest valid payloads of each kind.
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg=="
)
PNG_B64 = base64.b64encode(PNG).decode()
WAV_B64 = base64.b64encode(
    b"RIFF" + (38).to_bytes(4, "little") + b"WAVEfmt " + (16).to_bytes(4, "little")
    + (1).to_bytes(2, "little") + (1).to_bytes(2, "little") + (8000).to_bytes(4, "little")
    + (16000).to_bytes(4, "little") + (2).to_bytes(2, "little") + (16).to_bytes(2, "little")
    + b"data" + (2).to_bytes(4, "little") + b"\x00\x00"
).decode()

TASKS = "io.modelcontextprotocol/tasks"


class Tasks(Extension):
    """SEP-2663 as a downstream may offer it, so tests prove no task reaches an agent through
    the gateway (which does not relay tasks): `test_task_tool` answers a client that declared the
    extension in the request's capabilities with a task, and `test_task_regardless` answers
    every 2026-07-28 client with one, declared or not (a downstream that breaks the rule)."""

    identifier = TASKS

    async def intercept_tool_call(self, params: CallToolRequestParams, ctx: Any, call_next: CallNext) -> Any:
        meta = (ctx.params or {}).get("_meta") or {}
        declared = TASKS in ((meta.get("io.modelcontextprotocol/clientCapabilities") or {}).get("extensions") or {})
        modern = (ctx.protocol_version or "") >= "2026-07-28"
        if modern and (params.name == "test_task_regardless" or (params.name == "test_task_tool" and declared)):
            now = datetime.datetime.now(datetime.timezone.utc).isoformat()
            return {"resultType": "task", "taskId": "task-1", "status": "working", "createdAt": now,
                    "lastUpdatedAt": now, "ttlMs": 60000}
        return await call_next(ctx)


server = MCPServer(
    name="conformance-downstream",
    version="1.0.0",
    instructions="The conformance suite's downstream.",
    extensions=[Tasks()],
    # A 2026-07-28 tool list says how long it stays fresh (the gateway's own list may not
    # outlive it).
    cache_hints={"tools/list": CacheHint(ttl_ms=120_000, scope="public")},
)

# What the client subscribed to (handshake era), and the sessions that subscribed to each URI
# (told when `test_touch_resource` updates it).
subscribed: set[str] = set()
subscribers: dict[str, list[Any]] = {}
# The level each session set with logging/setLevel; log notifications below it are not sent.
LEVELS = ["debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"]
min_levels: "weakref.WeakKeyDictionary[Any, str]" = weakref.WeakKeyDictionary()


def input_required(requests: dict[str, Any], state: str | None = None) -> InputRequiredResult:
    body: dict[str, Any] = {"resultType": "input_required", "inputRequests": requests}
    if state is not None:
        body["requestState"] = state
    return InputRequiredResult.model_validate(body)


def elicit_request(message: str, prop: str, kind: str = "string") -> dict[str, Any]:
    return {
        "method": "elicitation/create",
        "params": {
            "message": message,
            "requestedSchema": {"type": "object", "properties": {prop: {"type": kind}}, "required": [prop]},
        },
    }


def sampling_request(text: str, max_tokens: int) -> dict[str, Any]:
    return {
        "method": "sampling/createMessage",
        "params": {"messages": [{"role": "user", "content": {"type": "text", "text": text}}], "maxTokens": max_tokens},
    }


ROOTS_REQUEST = {"method": "roots/list", "params": {}}


def responses(ctx: Context) -> dict[str, Any]:
    """The client's input responses as plain JSON, keyed as we asked."""
    raw = ctx.input_responses or {}
    out: dict[str, Any] = {}
    for key, value in raw.items():
        out[key] = value.model_dump(mode="json", by_alias=True, exclude_none=True) if hasattr(value, "model_dump") else value
    return out


def accepted(response: Any, field: str) -> Any:
    if isinstance(response, dict) and response.get("action") == "accept":
        return (response.get("content") or {}).get(field)
    return None


# ---- tools: content shapes ----


@server.tool(description="Returns simple text content")
def test_simple_text() -> str:
    return "This is a simple text response for testing."


@server.tool(description="Returns image content")
def test_image_content() -> CallToolResult:
    return CallToolResult(content=[ImageContent(type="image", data=PNG_B64, mime_type="image/png")])


@server.tool(description="Returns audio content")
def test_audio_content() -> CallToolResult:
    return CallToolResult(content=[AudioContent(type="audio", data=WAV_B64, mime_type="audio/wav")])


@server.tool(description="Returns an embedded resource")
def test_embedded_resource() -> CallToolResult:
    resource = TextResourceContents(
        uri="test://embedded-resource", mime_type="text/plain", text="This is an embedded resource content."
    )
    return CallToolResult(content=[EmbeddedResource(type="resource", resource=resource)])


@server.tool(description="Returns text, image and resource content together")
def test_multiple_content_types() -> CallToolResult:
    resource = TextResourceContents(
        uri="test://mixed-content-resource",
        mime_type="application/json",
        text=json.dumps({"test": "data", "value": 123}, separators=(",", ":")),
    )
    return CallToolResult(
        content=[
            TextContent(type="text", text="Multiple content types test:"),
            ImageContent(type="image", data=PNG_B64, mime_type="image/png"),
            EmbeddedResource(type="resource", resource=resource),
        ]
    )


@server.tool(description="Always fails with a tool error")
def test_error_handling() -> CallToolResult:
    return CallToolResult(
        content=[TextContent(type="text", text="This tool intentionally returns an error for testing")], is_error=True
    )


# ---- tools: streams during a call ----


async def log(ctx: Context, level: str, message: str) -> None:
    if LEVELS.index(level) >= LEVELS.index(min_levels.get(ctx.session, "debug")):
        await ctx.session.send_log_message(level=level, data=message, logger="conformance", related_request_id=ctx.request_id)


@server.tool(description="Sends three info log notifications while it runs")
async def test_tool_with_logging(ctx: Context) -> str:
    await log(ctx, "info", "Tool execution started")
    await asyncio.sleep(0.05)
    await log(ctx, "info", "Tool processing data")
    await asyncio.sleep(0.05)
    await log(ctx, "info", "Tool execution completed")
    return "Tool with logging executed successfully"


@server.tool(description="Reports progress 0, 50 and 100 of 100")
async def test_tool_with_progress(ctx: Context) -> str:
    for step in (0, 50, 100):
        await ctx.report_progress(step, 100, f"step {step}")
        if step < 100:
            await asyncio.sleep(0.05)
    return "Tool with progress executed successfully"


# ---- tools: requests back to the client (handshake era) ----


@server.tool(description="Asks the client's LLM for a completion of the prompt")
async def test_sampling(prompt: str, ctx: Context) -> str:
    result = await ctx.session.create_message(
        [SamplingMessage(role="user", content=TextContent(type="text", text=prompt))],
        max_tokens=100,
        related_request_id=ctx.request_id,
    )
    content = result.content
    text = content.text if isinstance(content, TextContent) else str(content)
    return f"LLM response: {text}"


async def elicit_raw(ctx: Context, message: str, schema: dict[str, Any]) -> str:
    result = await ctx.session.elicit_form(message, schema, related_request_id=ctx.request_id)
    return f"action={result.action}, content={json.dumps(result.content)}"


@server.tool(description="Asks the user for a username and an email")
async def test_elicitation(message: str, ctx: Context) -> str:
    schema = {
        "type": "object",
        "properties": {
            "username": {"type": "string", "description": "User's response"},
            "email": {"type": "string", "description": "User's email address"},
        },
        "required": ["username", "email"],
    }
    return f"User response: {await elicit_raw(ctx, message, schema)}"


@server.tool(description="Elicits a form whose fields all carry defaults (SEP-1034)")
async def test_elicitation_sep1034_defaults(ctx: Context) -> str:
    schema = {
        "type": "object",
        "properties": {
            "name": {"type": "string", "default": "John Doe"},
            "age": {"type": "integer", "default": 30},
            "score": {"type": "number", "default": 95.5},
            "status": {"type": "string", "enum": ["active", "inactive", "pending"], "default": "active"},
            "verified": {"type": "boolean", "default": True},
        },
    }
    return f"Elicitation completed: {await elicit_raw(ctx, 'Please review your details', schema)}"


@server.tool(description="Elicits a form with the five enum shapes (SEP-1330)")
async def test_elicitation_sep1330_enums(ctx: Context) -> str:
    choices = [("value1", "First"), ("value2", "Second"), ("value3", "Third")]
    schema = {
        "type": "object",
        "properties": {
            "untitledSingle": {"type": "string", "enum": ["option1", "option2", "option3"]},
            "titledSingle": {"type": "string", "oneOf": [{"const": c, "title": f"{t} Option"} for c, t in choices]},
            "legacyEnum": {
                "type": "string",
                "enum": ["opt1", "opt2", "opt3"],
                "enumNames": ["Option One", "Option Two", "Option Three"],
            },
            "untitledMulti": {"type": "array", "items": {"type": "string", "enum": ["option1", "option2", "option3"]}},
            "titledMulti": {
                "type": "array",
                "items": {"anyOf": [{"const": c, "title": f"{t} Choice"} for c, t in choices]},
            },
        },
    }
    return f"Elicitation completed: {await elicit_raw(ctx, 'Pick your options', schema)}"


# ---- tools: input-required results (2026-07-28) ----


@server.tool(description="Asks for the user's name through an input-required result")
def test_input_required_result_elicitation(ctx: Context) -> CallToolResult | InputRequiredResult:
    got = responses(ctx)
    name = accepted(got.get("user_name"), "name")
    if not isinstance(name, str):
        return input_required({"user_name": elicit_request("What is your name?", "name")})
    return CallToolResult(content=[TextContent(type="text", text=f"Hello, {name}!")])


@server.tool(description="Asks the client's LLM a question through an input-required result")
def test_input_required_result_sampling(ctx: Context) -> CallToolResult | InputRequiredResult:
    answer = responses(ctx).get("capital_question")
    if not isinstance(answer, dict) or "content" not in answer:
        return input_required({"capital_question": sampling_request("What is the capital of France?", 100)})
    content = answer["content"]
    text = content.get("text", "") if isinstance(content, dict) else json.dumps(content)
    return CallToolResult(content=[TextContent(type="text", text=f"Sampling answer: {text}")])


@server.tool(description="Asks for the client's roots through an input-required result")
def test_input_required_result_list_roots(ctx: Context) -> CallToolResult | InputRequiredResult:
    answer = responses(ctx).get("client_roots")
    if not isinstance(answer, dict) or not isinstance(answer.get("roots"), list):
        return input_required({"client_roots": ROOTS_REQUEST})
    uris = ", ".join(str(root.get("uri")) for root in answer["roots"])
    return CallToolResult(content=[TextContent(type="text", text=f"Roots: {uris}")])


@server.tool(description="Round-trips request state through an input-required result")
def test_input_required_result_request_state(ctx: Context) -> CallToolResult | InputRequiredResult:
    got = responses(ctx)
    if "confirm" not in got or ctx.request_state != "confirm-round-1":
        return input_required({"confirm": elicit_request("Please confirm", "ok", "boolean")}, "confirm-round-1")
    return CallToolResult(content=[TextContent(type="text", text="state-ok: confirmed")])


@server.tool(description="Asks for elicitation, sampling and roots at once")
def test_input_required_result_multiple_inputs(ctx: Context) -> CallToolResult | InputRequiredResult:
    got = responses(ctx)
    wanted = {
        "user_name": elicit_request("What is your name?", "name"),
        "greeting": sampling_request("Generate a greeting", 50),
        "client_roots": ROOTS_REQUEST,
    }
    if ctx.request_state != "multi-round-1" or not all(key in got for key in wanted):
        return input_required(wanted, "multi-round-1")
    return CallToolResult(content=[TextContent(type="text", text="All inputs received: " + ", ".join(sorted(wanted)))])


@server.tool(description="Two rounds of input-required results with evolving state")
def test_input_required_result_multi_round(ctx: Context) -> CallToolResult | InputRequiredResult:
    got = responses(ctx)
    if ctx.request_state == "round-1" and "step1" in got:
        name = accepted(got["step1"], "name") or "unknown"
        return input_required(
            {"step2": elicit_request("Step 2: What is your favorite color?", "color")}, f"round-2:{name}"
        )
    if (ctx.request_state or "").startswith("round-2:") and "step2" in got:
        name = ctx.request_state.split(":", 1)[1]
        color = accepted(got["step2"], "color") or "unknown"
        return CallToolResult(content=[TextContent(type="text", text=f"{name} likes {color}")])
    return input_required({"step1": elicit_request("Step 1: What is your name?", "name")}, "round-1")


@server.tool(description="Input-required result whose sealed state must come back unchanged")
def test_input_required_result_tampered_state(ctx: Context) -> CallToolResult | InputRequiredResult:
    # The SDK seals every requestState it sends and refuses one that does not verify, so a
    # tampered state never reaches this function.
    if ctx.request_state == "tamper-check" and "confirm" in responses(ctx):
        return CallToolResult(content=[TextContent(type="text", text="state verified")])
    return input_required({"confirm": elicit_request("Please confirm", "ok", "boolean")}, "tamper-check")


@server.tool(description="Asks only for the inputs the client declared it can answer")
def test_input_required_result_capabilities(ctx: Context) -> CallToolResult | InputRequiredResult:
    caps = ctx.client_capabilities
    got = responses(ctx)
    wanted: dict[str, Any] = {}
    if caps is not None and caps.sampling is not None:
        wanted["greeting"] = sampling_request("Generate a greeting", 50)
    if caps is not None and caps.elicitation is not None:
        wanted["user_name"] = elicit_request("What is your name?", "name")
    if caps is not None and caps.roots is not None:
        wanted["client_roots"] = ROOTS_REQUEST
    missing = {key: request for key, request in wanted.items() if key not in got}
    if missing:
        return input_required(missing)
    return CallToolResult(content=[TextContent(type="text", text="Capabilities respected: " + ", ".join(sorted(wanted)))])


# ---- handshake-era requests to the client beyond the suite's: URL-mode elicitation, roots ----


@server.tool(description="Asks the client to open a URL (URL-mode elicitation) while the call is open")
async def test_url_elicitation(ctx: Context) -> str:
    result = await ctx.session.elicit_url(
        "Connect your account", "https://example.com/connect", "connect-1", related_request_id=ctx.request_id
    )
    return f"URL elicitation: action={result.action}"


@server.tool(description="Asks for the client's roots while the call is open")
async def test_list_roots(ctx: Context) -> str:
    from mcp import types as mcp_types
    from mcp.shared.message import ServerMessageMetadata

    result = await ctx.session.send_request(
        mcp_types.ListRootsRequest(),
        mcp_types.ListRootsResult,
        metadata=ServerMessageMetadata(related_request_id=ctx.request_id),
    )
    return "Roots: " + ", ".join(str(root.uri) for root in result.roots)


# ---- tools the 2026-07-28 stateless scenario probes ----


@server.tool(description="Needs the client's sampling capability; refuses with -32021 without it")
def test_missing_capability(ctx: Context) -> str:
    caps = ctx.client_capabilities
    if caps is None or caps.sampling is None:
        data = MissingRequiredClientCapabilityErrorData(required_capabilities=ClientCapabilities(sampling=SamplingCapability()))
        raise MCPError(
            code=MISSING_REQUIRED_CLIENT_CAPABILITY,
            message="This tool needs the client's sampling capability",
            data=data.model_dump(by_alias=True, mode="json", exclude_none=True),
        )
    return "The client declared sampling"


@server.tool(description="Changes the tool list (adds or removes a tool), so list_changed is sent")
async def test_trigger_tool_change(ctx: Context) -> str:
    if any(tool.name == "test_dynamic_tool" for tool in await server.list_tools()):
        server.remove_tool("test_dynamic_tool")
    else:
        server.add_tool(lambda: "dynamic", name="test_dynamic_tool", description="Appears and disappears")
    await ctx.notify_tools_changed()
    return "Tool list changed"


@server.tool(description="Changes the prompt list (adds or removes a prompt), so list_changed is sent")
async def test_trigger_prompt_change(ctx: Context) -> str:
    if any(prompt.name == "test_dynamic_prompt" for prompt in await server.list_prompts()):
        server.remove_prompt("test_dynamic_prompt")
    else:
        server.prompt(name="test_dynamic_prompt", description="Appears and disappears")(lambda: "dynamic")
    await ctx.notify_prompts_changed()
    return "Prompt list changed"


# ---- SEP-2243: an argument mirrored in an `Mcp-Param-*` header (2026-07-28) ----


@server.tool(description="Echoes a region that travels in the Mcp-Param-Region header too")
def test_header_param(region: Annotated[str, Field(json_schema_extra={"x-mcp-header": "Region"})]) -> str:
    return f"region={region}"


@server.tool(description="Runs as a task for a client that declared the tasks extension (SEP-2663)")
def test_task_tool() -> str:
    return "ran without a task"


@server.tool(description="Answers with a task even to a client that did not declare the tasks extension")
def test_task_regardless() -> str:
    return "ran without a task"


# ---- prompts and resources that ask the client while they are made ----


def sampled_text(result: Any) -> str:
    content = result.content
    return content.text if isinstance(content, TextContent) else str(content)


@server.prompt(description="Asks the client's LLM for a word while the prompt is made (handshake era)")
async def test_prompt_with_sampling(ctx: Context) -> list[UserMessage]:
    result = await ctx.session.create_message(
        [SamplingMessage(role="user", content=TextContent(type="text", text="Pick a word"))],
        max_tokens=10,
        related_request_id=ctx.request_id,
    )
    return [UserMessage(f"The agent's word: {sampled_text(result)}")]


@server.resource("test://asked/{topic}", name="asked", description="Asks the user before it is read", mime_type="text/plain")
async def asked_resource(topic: str, ctx: Context) -> str | InputRequiredResult:
    if (ctx.protocol_version or "") >= "2026-07-28":
        name = accepted(responses(ctx).get("reader"), "name")
        if not isinstance(name, str):
            return input_required({"reader": elicit_request(f"Who reads {topic}?", "name")})
    else:
        schema = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}
        result = await ctx.session.elicit_form(f"Who reads {topic}?", schema, related_request_id=ctx.request_id)
        name = (result.content or {}).get("name") if result.action == "accept" else None
    return f"{topic} read by {name}"


# ---- resources ----


@server.resource("test://static-text", name="static-text", description="A static text resource", mime_type="text/plain")
def static_text() -> str:
    return "This is the content of the static text resource."


@server.resource("test://static-binary", name="static-binary", description="A static PNG", mime_type="image/png")
def static_binary() -> bytes:
    return PNG


@server.resource(
    "test://watched-resource", name="watched-resource", description="A resource to subscribe to", mime_type="text/plain"
)
def watched_resource() -> str:
    return "This resource is watched for changes."


@server.resource(
    "test://template/{id}/data", name="template-data", description="Data for an id", mime_type="application/json"
)
def template_data(id: str) -> str:
    return json.dumps({"id": id, "templateTest": True, "data": f"Data for ID: {id}"}, separators=(",", ":"))


# ---- prompts ----


@server.prompt(description="A prompt without arguments")
def test_simple_prompt() -> list[UserMessage]:
    return [UserMessage("This is a simple prompt for testing.")]


@server.prompt(description="A prompt with two required arguments")
def test_prompt_with_arguments(arg1: str, arg2: str) -> list[UserMessage]:
    return [UserMessage(f"Prompt with arguments: arg1='{arg1}', arg2='{arg2}'")]


@server.prompt(description="A prompt that embeds a resource")
def test_prompt_with_embedded_resource(resourceUri: str) -> list[UserMessage]:
    resource = TextResourceContents(uri=resourceUri, mime_type="text/plain", text="Embedded resource content for testing.")
    return [
        UserMessage(EmbeddedResource(type="resource", resource=resource)),
        UserMessage("Please process the embedded resource above."),
    ]


@server.prompt(description="A prompt with an image")
def test_prompt_with_image() -> list[UserMessage]:
    return [
        UserMessage(ImageContent(type="image", data=PNG_B64, mime_type="image/png")),
        UserMessage("Please analyze the image above."),
    ]


@server.prompt(description="A prompt that needs the user's context first (2026-07-28)")
def test_input_required_result_prompt(ctx: Context) -> list[UserMessage] | InputRequiredResult:
    context = accepted(responses(ctx).get("user_context"), "context")
    if not isinstance(context, str):
        return input_required({"user_context": elicit_request("What context should the prompt use?", "context")})
    return [UserMessage(f"Use this context: {context}")]


# ---- completion, logging, subscriptions ----

COMPLETIONS = ["paris", "park", "party", "test", "testing"]


@server.completion()
async def complete(ref: Any, argument: Any, context: Any) -> Completion:
    values = [v for v in COMPLETIONS if v.startswith(argument.value or "")]
    return Completion(values=values, total=len(values), has_more=False)


async def set_level(ctx: Any, params: SetLevelRequestParams) -> EmptyResult:
    min_levels[ctx.session] = params.level
    return EmptyResult()


async def subscribe(ctx: Any, params: SubscribeRequestParams) -> EmptyResult:
    subscribed.add(str(params.uri))
    held = subscribers.setdefault(str(params.uri), [])
    if ctx.session not in held:
        held.append(ctx.session)
    return EmptyResult()


async def unsubscribe(ctx: Any, params: UnsubscribeRequestParams) -> EmptyResult:
    subscribed.discard(str(params.uri))
    held = subscribers.get(str(params.uri), [])
    if ctx.session in held:
        held.remove(ctx.session)
    return EmptyResult()


@server.tool(description="Says the resource at uri was updated, to its subscribers of either revision")
async def test_touch_resource(uri: str, ctx: Context) -> str:
    await ctx.notify_resource_updated(uri)
    told = 0
    for session in list(subscribers.get(uri, ())):
        try:
            await session.send_resource_updated(uri)
            told += 1
        except Exception:
            subscribers[uri].remove(session)
    return f"touched {uri} ({told} handshake-era subscribers)"


lowlevel = server._lowlevel_server  # the SDK's documented seam for handshake-era methods
lowlevel.add_request_handler("logging/setLevel", SetLevelRequestParams, set_level)
lowlevel.add_request_handler("resources/subscribe", SubscribeRequestParams, subscribe)
lowlevel.add_request_handler("resources/unsubscribe", UnsubscribeRequestParams, unsubscribe)


def recorded(app: Any, path: str) -> Any:
    """The app, appending each POST's `Mcp-Method` and `Mcp-Name` (and its `Mcp-Param-*`
    headers under `params`, lower-case) to `path` (one JSON line each) before it is served:
    the downstream's own record of what reached it. Each line also names the HTTP method
    (`http`), the `Mcp-Session-Id` (`session`, empty without one) and the JSON-RPC method of
    the body (`rpc`, empty for a response); DELETEs are recorded too."""

    async def record(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["method"] in ("POST", "DELETE"):
            headers = dict(scope["headers"])
            # The body is read here and handed to the app as it came.
            messages, body = await buffered(receive)
            try:
                rpc = json.loads(body).get("method", "") if body else ""
            except (ValueError, AttributeError):
                rpc = ""
            line: dict[str, Any] = {k: headers.get(f"mcp-{k}".encode(), b"").decode() for k in ("method", "name")}
            params = {k.decode(): v.decode() for k, v in scope["headers"] if k.startswith(b"mcp-param-")}
            if params:
                line["params"] = params
            try:
                level = json.loads(body).get("params", {}).get("_meta", {}).get("io.modelcontextprotocol/logLevel")
            except (ValueError, AttributeError):
                level = None
            if level is not None:
                line["logLevel"] = level
            line["http"] = scope["method"]
            line["session"] = headers.get(b"mcp-session-id", b"").decode()
            line["rpc"] = rpc
            with open(path, "a") as log:
                log.write(json.dumps(line) + "\n")
            await app(scope, replaying(messages, receive), send)
            return
        await app(scope, receive, send)

    return record


async def buffered(receive: Any) -> tuple[list, bytes]:
    """A request's body messages, read whole, and the body they carry."""
    messages = []
    while True:
        message = await receive()
        messages.append(message)
        if message["type"] != "http.request" or not message.get("more_body", False):
            break
    return messages, b"".join(m.get("body", b"") for m in messages)


def replaying(messages: list, receive: Any) -> Any:
    """`receive` for the app, giving it the already-read `messages` first."""

    async def replay() -> Any:
        return messages.pop(0) if messages else await receive()

    return replay


def refusing_handshake(app: Any) -> Any:
    """The app as a server built only for 2026-07-28: an `initialize` request is refused with
    HTTP 400 and a JSON-RPC error naming the one revision it speaks; everything else is served."""

    async def serve(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            messages, body = await buffered(receive)
            try:
                request = json.loads(body)
            except ValueError:
                request = None
            if isinstance(request, dict) and request.get("method") == "initialize":
                error = {"code": -32602, "message": "Unsupported protocol version: this server speaks 2026-07-28 only",
                         "data": {"supported": ["2026-07-28"]}}
                payload = json.dumps({"jsonrpc": "2.0", "id": request.get("id"), "error": error}).encode()
                await send({"type": "http.response.start", "status": 400, "headers": [(b"content-type", b"application/json")]})
                await send({"type": "http.response.body", "body": payload})
                return
            await app(scope, replaying(messages, receive), send)
            return
        await app(scope, receive, send)

    return serve


if __name__ == "__main__":
    # python3 conformance_server.py PORT [CALL_LOG]
    refuse = os.environ.get("CONFORMANCE_REFUSE_HANDSHAKE") == "1"
    if len(sys.argv) > 2 or refuse:
        import uvicorn

        app = server.streamable_http_app(host="127.0.0.1")
        if len(sys.argv) > 2:
            app = recorded(app, sys.argv[2])
        if refuse:
            app = refusing_handshake(app)
        uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
    else:
        server.run("streamable-http", port=int(sys.argv[1]))
