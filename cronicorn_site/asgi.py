"""ASGI entry point: Django (admin, REST API, health) plus the MCP server at /mcp.

The MCP SDK's streamable HTTP transport is an ASGI (Starlette) app, which gunicorn's
WSGI workers cannot serve. Served with ``manage.py mcp --http`` (uvicorn), or with
gunicorn's uvicorn worker class; the WSGI entry point (wsgi.py) stays the default
for everything else.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections import Counter
from typing import Any

from asgiref.sync import sync_to_async
from django.conf import settings
from django.core.asgi import get_asgi_application
from django.db import close_old_connections

from cronicorn_site.startup import load_settings_or_exit

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "cronicorn_site.settings")
load_settings_or_exit()
django_app = get_asgi_application()

from api.auth import Principal, bearer_key, principal_for_key  # noqa: E402 - needs Django set up
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
        key_id = await _authorized(scope)
        if key_id is None:
            await _unauthorized(send)
        elif scope.get("method") == "GET":
            await _event_stream(key_id, scope, receive, send)
        else:
            await mcp_app(scope, receive, send)
    else:
        await django_app(scope, receive, send)


# Open ``GET /mcp`` event streams, per API key, in this process. The server is stateless
# and sends nothing on them, yet each holds a connection and a task: they are capped per
# key and per process and end after CRONICORN_MCP_STREAM_SECONDS (a client reconnects
# if it wants). The event loop is one thread, so a plain Counter is safe.
_open_streams: Counter[int] = Counter()


async def _event_stream(key_id: int, scope: dict[str, Any], receive: Any, send: Any) -> None:
    if _open_streams[key_id] >= settings.CRONICORN_MCP_MAX_STREAMS_PER_KEY:
        await _problem(
            send,
            429,
            "This API key holds the most open MCP event streams allowed "
            "(CRONICORN_MCP_MAX_STREAMS_PER_KEY); close one. Tool calls (POST /mcp) need none.",
        )
        return
    if _open_streams.total() >= settings.CRONICORN_MCP_MAX_STREAMS:
        await _problem(
            send,
            503,
            "This server holds the most open MCP event streams allowed "
            "(CRONICORN_MCP_MAX_STREAMS); retry later. Tool calls (POST /mcp) need none.",
        )
        return
    _open_streams[key_id] += 1
    try:
        async with asyncio.timeout(settings.CRONICORN_MCP_STREAM_SECONDS):
            await mcp_app(scope, receive, send)
    except TimeoutError:
        pass  # the stream's time is up; the server closes it
    finally:
        _open_streams[key_id] -= 1
        if _open_streams[key_id] <= 0:
            del _open_streams[key_id]


async def _authorized(scope: dict[str, Any]) -> int | None:
    """The usable key's id, or None: no MCP request without one (the tools check it
    again, per call)."""
    headers = dict(scope.get("headers") or [])
    raw = bearer_key(headers.get(b"authorization", b"").decode("latin-1"))
    if raw is None:
        return None
    principal = await sync_to_async(_principal_for_key)(raw)
    return principal.api_key_id if principal is not None else None


def _principal_for_key(raw: str) -> Principal | None:
    """The key's lookup framed as Django frames a request (its request_started and
    request_finished signals, which this path does not send): a connection the database
    dropped is found by the health check and opened anew, not reused broken for every
    request after."""
    close_old_connections()
    try:
        return principal_for_key(raw)
    finally:
        close_old_connections()


async def _unauthorized(send: Any) -> None:
    await _problem(send, 401, str(UNAUTHORIZED["detail"]))


async def _problem(send: Any, status: int, detail: str) -> None:
    titles = {401: "Unauthorized", 429: "Too Many Requests", 503: "Service Unavailable"}
    problem = {**UNAUTHORIZED, "status": status, "title": titles[status], "detail": detail}
    headers = [(b"content-type", b"application/problem+json")]
    if status == 401:
        headers.append((b"www-authenticate", b'Bearer realm="cronicorn"'))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": json.dumps(problem).encode()})
