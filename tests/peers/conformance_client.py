"""The client the conformance suite's client scenarios run (`conformance client --command`).

    python3 conformance_client.py SERVER_URL      # the suite appends the scenario's server URL

The suite sets MCP_CONFORMANCE_SCENARIO, MCP_CONFORMANCE_PROTOCOL_VERSION and, for some
scenarios, MCP_CONFORMANCE_CONTEXT (JSON: e.g. a pre-registered client). CONFORMANCE_CLIENT
picks who the client under test is:

- `gatehouse` (the default): Gatehouse is the client. Like an operator, this script puts a
  `remote_mcp` connector for SERVER_URL into a fresh tenant and workspace of a running
  `gatehouse serve` (with the CLI: GATEHOUSE_BIN, DATABASE_URL and GATEHOUSE_VAULT_KEYS from the
  environment), with a shared OAuth grant for the `auth/*` scenarios (a static confidential
  client when the scenario hands one over), serves it in a native pool, connects it through a
  mailed connect link whose redirects it follows (the suite's authorization server approves at
  once), then lists and calls every tool through Gatehouse's MCP endpoint (GATEHOUSE_BASE) with
  the official Python SDK as the agent, at the scenario's protocol revision. For the client
  credentials scenarios the connector's grant is `client_credentials` with the scenario's
  client id and its secret or private key: nobody connects it, Gatehouse gets its own token.
  For enterprise-managed authorization the grant is each member's own (`identity_assertion`
  with the scenario's identity provider): the person the identity token names signs in to
  Gatehouse (the development sign-in), makes the agent's token, and presents the identity token;
  Gatehouse exchanges it for an ID-JAG and that for the downstream's token.
- `reference`: the official Python SDK client itself against SERVER_URL (its OAuth client
  provider for `auth/*`, redirects followed the same way; its client credentials providers for
  those scenarios; its identity assertion provider, fed by a token exchange at the scenario's
  identity provider, for enterprise-managed authorization), for the reference column.

Every tool is called with arguments made from its input schema (defaults where given, else a
value of the declared type), as a generic agent would. A listing or a call Gatehouse answers
`auth_required` is repaired once, as an operator would: connected again through a fresh
connect link, then asked again. Exits non-zero when a step fails.
"""
import asyncio
import base64
import html
import json
import os
import re
import secrets
import subprocess
import sys
import tempfile
from urllib.parse import parse_qs, urlparse

import httpx2
from mcp import Client, ClientSession, types
from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client
from mcp.shared.exceptions import MCPError

SCENARIO = os.environ.get("MCP_CONFORMANCE_SCENARIO", "")
VERSION = os.environ.get("MCP_CONFORMANCE_PROTOCOL_VERSION", "2025-11-25")
CONTEXT = json.loads(os.environ.get("MCP_CONFORMANCE_CONTEXT") or "{}")
NEEDS_AUTH = SCENARIO.startswith("auth/")
CLIENT_CREDENTIALS = SCENARIO.startswith("auth/client-credentials")
# Enterprise-managed authorization: the scenario hands over a member's identity token from its
# identity provider (`idp_id_token`), which the member exchanges for their own grant.
IDENTITY_ASSERTION = bool(CONTEXT.get("idp_id_token"))


def log(*parts) -> None:
    print(*parts, file=sys.stderr, flush=True)


def value_for(schema: dict):
    """A value an agent would send for `schema`: its default, else one of its type."""
    if not isinstance(schema, dict):
        return "x"
    if "default" in schema:
        return schema["default"]
    if schema.get("enum"):
        return schema["enum"][0]
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "string")
    if kind in ("number", "integer"):
        return 1
    if kind == "boolean":
        return True
    if kind == "array":
        return []
    if kind == "object":
        return arguments_for(schema)
    return "x"


def arguments_for(schema: dict) -> dict:
    props = (schema or {}).get("properties") or {}
    required = set((schema or {}).get("required") or [])
    return {name: value_for(s) for name, s in props.items() if name in required or "default" in (s or {})}


async def elicit(context, params):
    """Accepts a form elicitation with every field's default (SEP-1034)."""
    schema = getattr(params, "requested_schema", None) or {}
    props = schema.get("properties", {}) if isinstance(schema, dict) else {}
    content = {k: v["default"] for k, v in props.items() if isinstance(v, dict) and "default" in v}
    return types.ElicitResult(action="accept", content=content)


async def sample(context, params):
    return types.CreateMessageResult(
        role="assistant", content=types.TextContent(type="text", text="a sampled answer"), model="conformance-agent"
    )


CALLBACKS = {"elicitation_callback": elicit, "sampling_callback": sample}


def needs_repair(result) -> bool:
    """Whether Gatehouse answered a call `auth_required` (the downstream refused the grant)."""
    if not result.is_error:
        return False
    text = " ".join(getattr(c, "text", "") for c in result.content)
    return '"auth_required"' in text


def listing_needs_repair(error: MCPError) -> bool:
    """Whether Gatehouse answered a listing `auth_required` (the pool's connector needs a person)."""
    return isinstance(error.data, dict) and error.data.get("code") == "auth_required"


async def list_all(session, repair):
    """The tools listed; a listing answered `auth_required` is repaired (as a refused call is)
    and asked once more, as an agent's operator would."""
    try:
        return (await session.list_tools()).tools
    except MCPError as error:
        if repair is None or not listing_needs_repair(error):
            raise
        log("auth_required from tools/list - connecting again:", error.message)
        await repair()
        return (await session.list_tools()).tools


async def call_all(session, tools, repair) -> None:
    """Calls each tool; a call answered `auth_required` is repaired (`repair`: a person connects
    again through a fresh connect link) and made once more, as an agent's operator would."""
    for tool in tools:
        result = await session.call_tool(tool.name, arguments_for(tool.input_schema))
        if repair is not None and needs_repair(result):
            log("auth_required from", tool.name, "- connecting again")
            await repair()
            result = await session.call_tool(tool.name, arguments_for(tool.input_schema))
        log("called", tool.name, "isError" if result.is_error else "ok")


async def use(url: str, http, repair=None) -> None:
    """Lists the tools at `url` and calls each one, at the scenario's revision."""
    if VERSION.startswith("2026"):
        async with Client(streamable_http_client(url, http_client=http), mode=VERSION, **CALLBACKS) as client:
            await call_all(client, await list_all(client, repair), repair)
        return
    async with streamable_http_client(url, http_client=http) as (read, write, *_):
        async with ClientSession(read, write, **CALLBACKS) as session:
            await session.initialize()
            await call_all(session, await list_all(session, repair), repair)


# ---- Gatehouse as the client ------------------------------------------------------------------


def gatehouse(*args: str, env: dict | None = None) -> list[str]:
    full = {**os.environ, "RUST_LOG": "warn", **(env or {})}
    out = subprocess.run([os.environ["GATEHOUSE_BIN"], *args], capture_output=True, text=True, env=full, timeout=60)
    if out.returncode != 0:
        raise SystemExit(f"gatehouse {' '.join(args)} failed: {out.stderr.strip()}")
    return out.stdout.splitlines()


def json_file(value: dict) -> str:
    f = tempfile.NamedTemporaryFile("w", suffix=".json", delete=False)
    json.dump(value, f)
    f.close()
    return f.name


async def follow(http, url: str) -> httpx2.Response:
    """Follows redirects by hand (the authorization server approves without a person)."""
    for _ in range(20):
        r = await http.get(url)
        if r.status_code not in (301, 302, 303, 307, 308):
            return r
        url = str(r.next_request.url) if r.next_request is not None else r.headers["location"]
        log("redirect", url.split("?")[0])
    raise SystemExit("too many redirects")


def identity_email(token: str) -> str:
    """The email an identity token names (read only to sign in as its person)."""
    payload = token.split(".")[1]
    return json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))["email"]


async def sign_in(http, base: str, email: str) -> str:
    """Signs `http` in through Gatehouse's development sign-in as `email`; answers the CSRF token."""
    url = f"{base}/login?next=/"
    for _ in range(20):
        r = await http.get(url)
        if r.status_code in (301, 302, 303, 307, 308):
            url = str(r.url.join(r.headers["location"]))
            continue
        forms = re.finditer(r'<form method="post" action="([^"]+)">(.*?)</form>', r.text, re.S)
        form = next((f for f in forms if 'name="email"' in f.group(2)), None)
        if form is None:
            break
        fields = dict(re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)">', form.group(2)))
        fields = {k: html.unescape(v) for k, v in fields.items()}
        fields.update(email=email, name=email)
        r = await http.post(str(r.url.join(html.unescape(form.group(1)))), data=fields)
        if r.status_code not in (301, 302, 303, 307, 308):
            raise SystemExit(f"the development sign-in answered {r.status_code}")
        url = str(r.url.join(r.headers["location"]))
    me = (await http.get(f"{base}/api/v1/me")).json()
    return me["csrf_token"]


async def as_member(base: str, tenant: str, identity_token: str) -> str:
    """The person the identity token names signs in, makes the agent's token (which carries
    them) and presents the identity token for their grant of connector `c`; answers the token."""
    async with httpx2.AsyncClient(timeout=30, follow_redirects=False) as http:
        csrf = await sign_in(http, base, identity_email(identity_token))
        headers = {"origin": base, "x-csrf-token": csrf}
        r = await http.post(f"{base}/api/v1/tenants/{tenant}/tokens", json={"name": "conformance"}, headers=headers)
        if r.status_code != 201:
            raise SystemExit(f"the member's token was refused: {r.status_code} {r.text}")
        token = r.json()["secret"]
        path = f"/api/v1/tenants/{tenant}/workspaces/main/connectors/c/oauth/personal/identity-assertion"
        r = await http.post(base + path, json={"identity_token": identity_token}, headers=headers)
        log("identity assertion answered", r.status_code, r.text[:300])
        return token


async def through_gatehouse(server_url: str) -> None:
    base = os.environ["GATEHOUSE_BASE"].rstrip("/")
    tenant = "cc" + secrets.token_hex(6)
    owner = identity_email(CONTEXT["idp_id_token"]) if IDENTITY_ASSERTION else "ops@example.test"
    gatehouse("tenant", "create", tenant, "--name", tenant, "--owner-email", owner)
    gatehouse("workspace", "create", "--tenant", tenant, "main")
    add = ["connector", "add", "--tenant", tenant, "--workspace", "main", "--id", "c", "--kind", "remote_mcp"]
    add += ["--url", server_url]
    if NEEDS_AUTH:
        auth = {"type": "oauth", "grant": "shared"}
        if CONTEXT.get("client_id"):
            auth["client_id"] = CONTEXT["client_id"]
            auth["confidential"] = bool(CONTEXT.get("client_secret") or CONTEXT.get("private_key_pem"))
        if CLIENT_CREDENTIALS:
            auth["flow"] = "client_credentials"
        if IDENTITY_ASSERTION:
            auth.update(grant="personal", flow="identity_assertion", identity_provider={
                "issuer": CONTEXT["idp_issuer"], "token_endpoint": CONTEXT["idp_token_endpoint"],
                "client_id": CONTEXT["idp_client_id"],
            })
        add += ["--config", json_file({"auth": auth})]
    gatehouse(*add)
    where = ["--tenant", tenant, "--workspace", "main", "--connector", "c"]
    if NEEDS_AUTH and CONTEXT.get("client_id") and CONTEXT.get("client_secret"):
        gatehouse(
            "credential", "set", *where, "--oauth-client", "--field", "client_secret",
            env={"GATEHOUSE_FIELD_CLIENT_SECRET": CONTEXT["client_secret"]},
        )
    if NEEDS_AUTH and CONTEXT.get("client_id") and CONTEXT.get("private_key_pem"):
        gatehouse(
            "credential", "set", *where, "--oauth-client", "--field", "private_key",
            env={"GATEHOUSE_FIELD_PRIVATE_KEY": CONTEXT["private_key_pem"]},
        )
    pools = {"pools": {"native": {"tools": ["c"], "native": True}}}
    gatehouse("workspace", "configure", "--tenant", tenant, "--workspace", "main", "--file", json_file(pools))
    sc = gatehouse("service-credential", "create", "--tenant", tenant, "--name", "conformance")
    if IDENTITY_ASSERTION:
        token = [None, await as_member(base, tenant, CONTEXT["idp_id_token"])]
    else:
        token = gatehouse("token", "create", "--tenant", tenant, "--name", "conformance")
    async def connect() -> None:
        async with httpx2.AsyncClient(timeout=30, follow_redirects=False) as http:
            args = ["connect-link", "create", "--tenant", tenant, "--workspace", "main", "--connector", "c"]
            mail_id = gatehouse(*args, "--email", "ops@example.test")[1]
            mails = [json.loads(m) for m in gatehouse("outbox", "list", "--tenant", tenant)]
            body = next(m["body"] for m in mails if m["id"] == mail_id)
            path = body[body.index("/connect/"):].splitlines()[0]
            landed = await follow(http, base + path)
            log("connect flow ended with", landed.status_code, landed.text[:300].replace("\n", " "))

    repair = connect if NEEDS_AUTH and not (CLIENT_CREDENTIALS or IDENTITY_ASSERTION) else None
    if repair is not None:
        await repair()
    headers = {
        "Gatehouse-Client-Id": sc[1],
        "Gatehouse-Client-Secret": sc[2],
        "Authorization": f"Bearer {token[1]}",
    }
    async with create_mcp_http_client(headers=headers) as http:
        await use(f"{base}/t/{tenant}/w/main/mcp/native", http, repair)


# ---- the reference: the SDK client itself --------------------------------------------------------


async def reference(server_url: str) -> None:
    if not NEEDS_AUTH:
        async with create_mcp_http_client() as http:
            await use(server_url, http)
        return
    from mcp.client.auth import OAuthClientProvider, TokenStorage
    from mcp.client.auth.extensions.client_credentials import (
        ClientCredentialsOAuthProvider,
        PrivateKeyJWTOAuthProvider,
        SignedJWTParameters,
    )
    from mcp.shared.auth import AuthorizationCodeResult, OAuthClientInformationFull, OAuthClientMetadata, OAuthToken

    class Memory(TokenStorage):
        def __init__(self) -> None:
            self.tokens: OAuthToken | None = None
            self.client: OAuthClientInformationFull | None = None
            if CONTEXT.get("client_id"):
                self.client = OAuthClientInformationFull(
                    client_id=CONTEXT["client_id"],
                    client_secret=CONTEXT.get("client_secret"),
                    redirect_uris=["http://localhost:3999/callback"],
                    token_endpoint_auth_method="client_secret_basic" if CONTEXT.get("client_secret") else "none",
                )

        async def get_tokens(self):
            return self.tokens

        async def set_tokens(self, tokens) -> None:
            self.tokens = tokens

        async def get_client_info(self):
            return self.client

        async def set_client_info(self, info) -> None:
            self.client = info

    if IDENTITY_ASSERTION:
        from mcp.client.auth.extensions.identity_assertion import IdentityAssertionOAuthProvider

        async with httpx2.AsyncClient(timeout=30) as http:
            # The authorization server is configuration for this provider: the one the
            # server's protected resource metadata names.
            origin = server_url.split("/mcp")[0]
            prm = (await http.get(f"{origin}/.well-known/oauth-protected-resource/mcp")).json()
            issuer = prm["authorization_servers"][0]

        async def id_jag(audience: str, resource: str) -> str:
            """Leg 1 (RFC 8693), which the SDK leaves to the deployment."""
            async with httpx2.AsyncClient(timeout=30) as http:
                r = await http.post(CONTEXT["idp_token_endpoint"], data={
                    "grant_type": "urn:ietf:params:oauth:grant-type:token-exchange",
                    "subject_token": CONTEXT["idp_id_token"],
                    "subject_token_type": "urn:ietf:params:oauth:token-type:id_token",
                    "requested_token_type": "urn:ietf:params:oauth:token-type:id-jag",
                    "audience": audience, "resource": resource, "client_id": CONTEXT["idp_client_id"],
                })
                return r.json()["access_token"]

        auth = IdentityAssertionOAuthProvider(
            server_url=server_url, storage=Memory(), client_id=CONTEXT["client_id"],
            client_secret=CONTEXT["client_secret"], issuer=issuer, assertion_provider=id_jag,
            token_endpoint_auth_method="client_secret_basic",
        )
        async with httpx2.AsyncClient(auth=auth, timeout=httpx2.Timeout(30, read=300)) as http:
            await use(server_url, http)
        return

    if CLIENT_CREDENTIALS:
        storage = Memory()
        storage.client = None
        if CONTEXT.get("private_key_pem"):
            signed = SignedJWTParameters(
                issuer=CONTEXT["client_id"], subject=CONTEXT["client_id"], signing_key=CONTEXT["private_key_pem"],
                signing_algorithm=CONTEXT.get("signing_algorithm", "ES256"),
            )
            auth = PrivateKeyJWTOAuthProvider(
                server_url=server_url, storage=storage, client_id=CONTEXT["client_id"],
                assertion_provider=signed.create_assertion_provider(),
            )
        else:
            auth = ClientCredentialsOAuthProvider(
                server_url=server_url, storage=storage, client_id=CONTEXT["client_id"],
                client_secret=CONTEXT["client_secret"],
            )
        async with httpx2.AsyncClient(auth=auth, timeout=httpx2.Timeout(30, read=300)) as http:
            await use(server_url, http)
        return

    landed: dict = {}

    async def redirect(url: str) -> None:
        async with httpx2.AsyncClient(timeout=30, follow_redirects=False) as http:
            r = await http.get(url)
            while r.status_code in (301, 302, 303, 307, 308):
                location = r.headers["location"]
                if location.startswith("http://localhost:3999/callback"):
                    landed.update({k: v[0] for k, v in parse_qs(urlparse(location).query).items()})
                    return
                r = await http.get(location)
        raise SystemExit(f"the authorization server did not redirect back ({r.status_code})")

    async def callback():
        return AuthorizationCodeResult(code=landed.get("code", ""), state=landed.get("state"), iss=landed.get("iss"))

    metadata = OAuthClientMetadata(
        client_name="conformance reference", redirect_uris=["http://localhost:3999/callback"],
        grant_types=["authorization_code", "refresh_token"], response_types=["code"],
    )
    auth = OAuthClientProvider(
        server_url=server_url, client_metadata=metadata, storage=Memory(),
        redirect_handler=redirect, callback_handler=callback,
    )
    async with httpx2.AsyncClient(auth=auth, timeout=httpx2.Timeout(30, read=300)) as http:
        await use(server_url, http)


def main() -> None:
    server_url = sys.argv[-1]
    who = os.environ.get("CONFORMANCE_CLIENT", "gatehouse")
    log("scenario", SCENARIO, "at", VERSION, "as", who)
    asyncio.run(reference(server_url) if who == "reference" else through_gatehouse(server_url))


if __name__ == "__main__":
    main()
