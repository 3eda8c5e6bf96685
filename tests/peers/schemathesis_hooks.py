"""Schemathesis hooks for tests/schemathesis.rs: every problem+json answer carries a stable
`code` (a string of lowercase letters and underscores)."""

import re

import schemathesis

CODE = re.compile(r"^[a-z][a-z0-9_]*$")


@schemathesis.check
def problem_has_code(ctx, response, case):
    content_type = response.headers.get("content-type", [""])
    if isinstance(content_type, list):
        content_type = content_type[0] if content_type else ""
    if not content_type.startswith("application/problem+json"):
        return None
    body = response.json()
    code = body.get("code") if isinstance(body, dict) else None
    if not isinstance(code, str) or not CODE.match(code):
        raise AssertionError(f"a problem body without a stable code: {body!r}")
    return None
