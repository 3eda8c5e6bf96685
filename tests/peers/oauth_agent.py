"""An interactive agent built on the official Python MCP SDK (`mcp`), authorizing itself with
the SDK's own OAuth client (`OAuthClientProvider`), used by the test suite.

    python3 oauth_agent.py URL EMAIL CALLS_JSON

The SDK discovers the protected resource and authorization server metadata from the 401,
registers itself dynamically and sends the person to the authorization URL. Where a desktop
agent would open a browser, this script walks the pages with its own HTTP client (cookies
kept, redirects followed by hand): Gatehouse's sign-in, the development provider's form
(signing in as EMAIL), and the consent form; it captures the code from the redirect to the
loopback URI without anyone listening there. Then it initializes, lists tools, makes each call
of CALLS_JSON ([[name, arguments], ...]) and prints one JSON object: tool names, per call
isError plus text blocks, the client id and the tokens (for the test's further checks).
"""
import asyncio
import json
import socket
import sys
from html.parser import HTMLParser
from urllib.parse import parse_qs, urljoin, urlparse

import httpx2
from mcp import ClientSession
from mcp.client.auth import OAuthClientProvider
from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client
from mcp.shared.auth import AuthorizationCodeResult, OAuthClientMetadata


class Memory:
    """Token storage for one run."""

    def __init__(self):
        self.tokens = None
        self.client = None

    async def get_tokens(self):
        return self.tokens

    async def set_tokens(self, tokens):
        self.tokens = tokens

    async def get_client_info(self):
        return self.client

    async def set_client_info(self, client_info):
        self.client = client_info


class FirstForm(HTMLParser):
    """The first form of a page: its action and named inputs."""

    def __init__(self):
        super().__init__()
        self.action = None
        self.fields = {}
        self.done = False
        self.inside = False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "form" and self.action is None:
            self.action = a.get("action") or ""
            self.inside = True
        elif tag == "input" and self.inside and not self.done and a.get("name"):
            self.fields[a["name"]] = a.get("value") or ""

    def handle_endtag(self, tag):
        if tag == "form" and self.inside:
            self.inside = False
            self.done = True


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def walk(start, email, origin, redirect_uri):
    """Follows the authorization from `start` like a person's browser; returns the URL the
    server finally redirects to on `redirect_uri`."""
    async with httpx2.AsyncClient(follow_redirects=False, timeout=30) as browser:
        url, method, data = start, "GET", None
        for _ in range(25):
            headers = {"Origin": origin} if method == "POST" else {}
            r = await browser.request(method, url, data=data, headers=headers)
            if r.status_code in (301, 302, 303, 307, 308):
                url = urljoin(url, r.headers["location"])
                if url.startswith(redirect_uri):
                    return url
                method, data = "GET", None
                continue
            if r.status_code != 200:
                raise RuntimeError(f"{method} {url}: HTTP {r.status_code}: {r.text[:400]}")
            form = FirstForm()
            form.feed(r.text)
            if form.action is None:
                raise RuntimeError(f"no form at {url}: {r.text[:400]}")
            fields = dict(form.fields)
            if "email" in fields:
                fields["email"] = email
                fields.setdefault("name", email.split("@")[0])
            url, method, data = urljoin(url, form.action), "POST", fields
        raise RuntimeError("authorization walk did not finish")


async def main(url, email, calls):
    origin = f"{urlparse(url).scheme}://{urlparse(url).netloc}"
    redirect_uri = f"http://127.0.0.1:{free_port()}/callback"
    landed = {}

    async def redirect_handler(authorization_url):
        landed["url"] = await walk(authorization_url, email, origin, redirect_uri)

    async def callback_handler():
        q = parse_qs(urlparse(landed["url"]).query)
        if "code" not in q:
            raise RuntimeError(f"authorization refused: {landed['url']}")
        return AuthorizationCodeResult(code=q["code"][0], state=q.get("state", [None])[0], iss=q.get("iss", [None])[0])

    storage = Memory()
    auth = OAuthClientProvider(
        server_url=url,
        client_metadata=OAuthClientMetadata(client_name="Python SDK agent", redirect_uris=[redirect_uri]),
        storage=storage,
        redirect_handler=redirect_handler,
        callback_handler=callback_handler,
    )
    async with create_mcp_http_client(auth=auth) as http:
        async with streamable_http_client(url, http_client=http) as streams:
            async with ClientSession(streams[0], streams[1]) as session:
                init = await session.initialize()
                tools = await session.list_tools()
                out = {
                    "server": init.server_info.name,
                    "tools": [t.name for t in tools.tools],
                    "calls": [],
                }
                for name, arguments in calls:
                    result = await session.call_tool(name, arguments)
                    texts = [c.text for c in result.content if getattr(c, "text", None) is not None]
                    out["calls"].append({"isError": bool(result.is_error), "text": texts})
    out["client_id"] = storage.client.client_id
    out["redirect_uri"] = redirect_uri
    out["access_token"] = storage.tokens.access_token
    out["refresh_token"] = storage.tokens.refresh_token
    out["expires_in"] = storage.tokens.expires_in
    print(json.dumps(out))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], json.loads(sys.argv[3])))
