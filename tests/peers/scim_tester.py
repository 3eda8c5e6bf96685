"""Runs the PyPI package scim2-tester (an independent SCIM 2.0 conformance checker) against a
tenant's SCIM endpoint: `scim_tester.py BASE_URL` with the SCIM token in SCIM_TOKEN. Prints one
JSON line per check ({"status", "title", "resource_type", "reason"}); exits 0 when it ran."""

import json
import os
import sys

from httpx2 import Client
from scim2_client.engines.httpx2 import SyncSCIMClient
from scim2_tester import check_server

base = sys.argv[1].rstrip("/") + "/"
token = os.environ["SCIM_TOKEN"]
http = Client(base_url=base, headers={"Authorization": f"Bearer {token}"}, timeout=30)
client = SyncSCIMClient(http)
for result in check_server(client, raise_exceptions=False):
    print(
        json.dumps(
            {
                "status": result.status.name,
                "title": result.title,
                "resource_type": getattr(result, "resource_type", None),
                "reason": (result.reason or "")[:600],
            }
        ),
        flush=True,
    )
