#!/usr/bin/env python3
"""Writes the seed inputs of every fuzz target into corpus/TARGET/ (realistic inputs drawn
from the README, the docs and the tests). Run once when a target is added; the fuzzers grow
the corpora from there, and `cargo fuzz cmin` keeps them small."""
import hashlib, json, os, struct

HERE = os.path.dirname(os.path.abspath(__file__))
TENANT = "01900000-0000-7000-8000-000000000001"


def put(target, data):
    if isinstance(data, str):
        data = data.encode()
    elif not isinstance(data, bytes):
        data = json.dumps(data).encode()
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "seed-" + hashlib.sha1(data).hexdigest()[:16]), "wb") as f:
        f.write(data)


# direct tools/call
calls = [
    {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "search_tools", "arguments": {"query": "echo"}}},
    {"jsonrpc": "2.0", "id": "a-1", "method": "tools/call", "params": {"name": "call_tool", "arguments": {"tool": "everything.echo", "arguments": {"message": "hi"}}}},
    {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "echo", "_meta": {"progressToken": "p1"}}},
    {"jsonrpc": "2.0", "id": 8, "method": "tools/call", "params": {"name": "echo", "arguments": {"n": 1.5, "list": [1, None, True]}, "_meta": {"progressToken": 3}}},
    {"jsonrpc": "2.0", "id": 2, "method": "prompts/get", "params": {"name": "greeting", "arguments": {"who": "x"}}},
    {"jsonrpc": "2.0", "id": 3, "method": "resources/read", "params": {"uri": "file:///readme.md", "_meta": {"progressToken": 9}}},
    {"jsonrpc": "2.0", "id": 4, "method": "initialize", "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "c", "version": "1"}}},
    [{"jsonrpc": "2.0", "id": 5, "method": "tools/list"}],
]
for c in calls:
    put("direct_call", c)
put("direct_call", '{"jsonrpc":"2.0","id":"\\u00e9\\n","method":"tools/call","params":{"name":"e\\"x"}}')

# SSE framing: arbitrary Input { max: u16, cuts: Vec<u16>, stream: Vec<u8> }
streams = [
    b"event: endpoint\ndata: /message?sessionId=abc\n\nevent: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n\n",
    b"\xef\xbb\xbfevent: endpoint\r\ndata: /messages/?session_id=1\r\n\r\n: keep-alive\r\n\r\ndata: a\r\ndata: b\r\n\r\n",
    b"data:x\rdata\r\rid: 3\nretry: 10\nevent:\n\n",
    b"event: endpoint\ndata: https://elsewhere.example/post\n\n",
]
for s in streams:
    # max, then the cut list (arbitrary's length prefix rules vary: the fuzzer adapts), then the stream
    put("sse_framing", struct.pack("<H", 4096) + b"\x03\x00\x05\x00\x11\x00" + s)

# workspace configuration documents
remote = {"kind": "remote_mcp", "url": "http://127.0.0.1:3001/mcp"}
api = {"kind": "http_api", "base_url": "https://api.example/v1", "headers": {"X-Team": "blue"},
       "auth": {"type": "slot", "slot": "shared", "headers": {"Authorization": "Bearer {token}"}},
       "tools": [{"name": "get_item", "description": "One item", "method": "GET", "path": "/items/{id}", "query": ["fields"],
                  "input_schema": {"type": "object", "additionalProperties": False, "required": ["id"],
                                   "properties": {"id": {"type": "string"}, "fields": {"type": "array", "items": {"type": "string"}}}},
                  "read_only": True},
                 {"name": "make", "description": "Make", "method": "POST", "path": "/items", "body": ["name", "qty"],
                  "input_schema": {"type": "object", "additionalProperties": False, "required": ["name"],
                                   "properties": {"name": {"type": "string"}, "qty": {"type": "integer", "minimum": 0}}}}]}
docs = [
    {"connectors": {"everything": remote}},
    {"connectors": {"legacy": {"kind": "remote_mcp", "url": "http://127.0.0.1:3002/sse", "transport": "sse", "timeout_ms": 5000}}},
    {"connectors": {"inv": api}, "classification": {"inv.get_item": "read"}},
    {"connectors": {"gh": {"kind": "remote_mcp", "url": "https://mcp.example/mcp",
                           "auth": {"type": "oauth", "grant": "personal", "scopes": ["repo"], "client_id": "abc"}},
                    "basic": {"kind": "remote_mcp", "url": "https://b.example/mcp",
                              "auth": {"type": "slot", "slot": "personal", "basic": {"username": "user", "password": "pass"}}}}},
    {"connectors": {"crm": {"kind": "peer", "blueprint": "crm"}, "everything": remote},
     "grants": [{"to": "role:member", "tools": ["everything.echo"], "prompts": ["everything"], "resources": ["everything.file:///a"]},
                {"to": "machines", "tools": ["crm"]}],
     "pools": {"native": {"tools": ["everything"], "native": True}, "ops": {"tools": ["crm", "everything.echo"], "trusted": True}},
     "pinning": {"on_change": "hide", "quarantine_new_tools": True},
     "redaction": {"detectors": [{"name": "email"}, {"name": "ticket", "regex": "TCK-[0-9]{6}", "action": "block"}]}},
    {"connectors": {"Bad Id": {"kind": "remote_mcp", "url": "ftp://x"}}},
]
for d in docs:
    put("workspace_config", d)

# http_api templates: arbitrary Input { template: String, values: Vec<String>, query: Vec<String>, base: bool }
for t in ["/items/{id}/notes", "/items/{id}", "/v{version}/{a}.{b}", "/", "/{a}{b}"]:
    put("http_api_template", t.encode() + b"\x00" + b"a/b c?\x00..\x00" + b"\x01")

# snapshot files
document = {"connectors": {"everything": remote}}
env = "v1.k1.AAAAAAAAAAAAAAAA.AAAAAAAAAAAAAAAAAAAAAA"
snap = {"format": "gatehouse-snapshot-v1", "tenant_id": TENANT, "workspace_id": "01900000-0000-7000-8000-000000000002",
        "workspace": "main", "move_id": "01900000-0000-7000-8000-000000000003", "epoch": 3, "document": document,
        "catalogs": [{"connector": "everything", "tools": [{"name": "echo", "inputSchema": {"type": "object"}}]}],
        "credentials": [{"connector": "everything", "owner": "shared", "fields": {"token": "…abcd"}, "sealed": env}],
        "subjects": {"0" * 64: env}}
put("snapshot_file", snap)
put("snapshot_file", dict(snap, credentials=[dict(snap["credentials"][0], owner="member:01900000-0000-7000-8000-000000000009")], subjects={}))
put("snapshot_file", dict(snap, document=docs[4]))

# vault key ring: spec, newline, envelope
key = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="
for spec in [f"k1:{key}", f"new:{key}, old:{key.rstrip('=')}", f"k1:{key},k1:{key}", "k1:c2hvcnQ=", ""]:
    put("vault_keyring", spec + "\n" + env)
put("vault_keyring", f"a-b_c:{key}\nv1.a-b_c.AAAAAAAAAAAAAAAA.AAAAAAAAAAAAAAAAAAAAAAAAAA")

# Client ID Metadata Documents: url, newline, body
url = "https://client.example/oauth/metadata.json"
cimd = [
    {"client_id": url, "client_name": "Example  Agent", "redirect_uris": ["http://127.0.0.1:33418/callback"], "token_endpoint_auth_method": "none"},
    {"client_id": url, "redirect_uris": ["http://localhost/cb", "http://[::1]:9/cb"]},
    {"client_id": url, "client_name": "x\ty", "redirect_uris": ["https://evil.example/cb"], "token_endpoint_auth_method": "client_secret_basic"},
]
for c in cimd:
    put("cimd", url + "\n" + json.dumps(c))

# WWW-Authenticate
for h in [
    'Bearer resource_metadata="https://resource.example.com/.well-known/oauth-protected-resource"',
    'Basic realm="simple", Newauth realm="apps", type=1, title="Login to \\"apps\\"", Bearer error="invalid_token", resource_metadata="https://r.example/m"',
    'Negotiate abc/+==, Bearer',
    'Bearer error="insufficient_scope", scope="mcp:basic  mcp:write", resource_metadata="u"',
    'bearer RESOURCE_METADATA = "u"',
    ', ,Bearer realm="x",',
]:
    put("www_authenticate", h)

# JSON Schema argument checks: [schema, arguments]
for s, a in [
    ({"type": "object", "properties": {"id": {"type": "string", "minLength": 1}}, "required": ["id"], "additionalProperties": False}, {"id": ""}),
    ({"type": "object", "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 10}, "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 2}}}, {"n": 11, "tags": ["a", 1, "c"]}),
    ({"type": "object", "properties": {"s": {"type": "string", "pattern": "^[a-z]+$", "format": "email"}}, "$defs": {"x": {"$ref": "#"}}}, {"s": "A"}),
    ({"type": "object", "oneOf": [{"required": ["a"]}, {"required": ["b"]}], "dependentRequired": {"a": ["c"]}}, {"a": 1, "b": 2}),
    ({"type": "object", "properties": {"x": {"enum": [1, "1", None], "const": 1}}}, {"x": 1.0}),
]:
    put("json_schema_args", [s, a])

# Mcp-Param headers: a value, or [schema, arguments]
put("param_headers", " padded ")
put("param_headers", "=?base64?emT8cmljaA==?=")
put("param_headers", [{"type": "object", "properties": {"region": {"type": "string", "x-mcp-header": "Region"},
                       "location": {"type": "object", "properties": {"zone": {"type": "integer", "x-mcp-header": "Zone"}}}}},
                      {"region": "zürich", "location": {"zone": 3}}])
