"""ASGI entry point: Django (admin, REST API, health) plus the MCP server at /mcp.

The MCP SDK's streamable HTTP transport is an ASGI (Starlette) app, which gunicorn's
WSGI workers cannot serve. Served with ``manage.py mcp --http`` (uvicorn), or with
gunicorn's uvicorn worker class; the WSGI entry point (wsgi.py) stays the default
for everything else.
"""

from __future__ import annotations

import json
import os
from typing import Any

from asgiref.sync import sync_to_async
from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "cronicorn_site.settings")
django_app = get_asgi_application()

from api.auth import bearer_key, principal_for_key  # noqa: E402 - needs Django set up
from api.mcp_server import build_server, http_app  # noqa: E402

mcp_app = http_app(build_server())
UNAUTHORIZED = {
    "type": "about:blank",
    "title": "Unauthorized",
    "status": 401,
    "detail": "Send 'Authorization: Bearer <API key>' (manage.py create_api_key).",
    "errors": {},
}


async def application(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        await mcp_app(scope, receive, send)  # starts the MCP session manager
    elif scope["type"] == "http" and scope["path"].rstrip("/") == "/mcp":
        if await _authorized(scope):
            await mcp_app(scope, receive, send)
        else:
            await _unauthorized(send)
    else:
        await django_app(scope, receive, send)


async def _authorized(scope: dict[str, Any]) -> bool:
    """No MCP request without a usable key (the tools check it again, per call)."""
    headers = dict(scope.get("headers") or [])
    raw = bearer_key(headers.get(b"authorization", b"").decode("latin-1"))
    return raw is not None and await sync_to_async(principal_for_key)(raw) is not None


async def _unauthorized(send: Any) -> None:
    body = json.dumps(UNAUTHORIZED).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 401,
            "headers": [
                (b"content-type", b"application/problem+json"),
                (b"www-authenticate", b'Bearer realm="cronicorn"'),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
