"""The MCP server as the tests reach it: ``manage.py mcp --http`` (uvicorn) started as a
process on a free port and waited for, and the SDK's own client of its streamable HTTP
endpoint."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.engine_processes import (
    child_database_url,
    manage,
    process_env,
    running,
    wait_answering,
)
from tests.http_targets import free_port


@contextmanager
def mcp_over_http(log: Path, **settings: str) -> Iterator[str]:
    """A ``manage.py mcp --http`` on the test database (``settings``: more environment),
    answering; its /mcp URL. Stopped, and waited for, on the way out."""
    port = free_port()
    env = process_env(DATABASE_URL=child_database_url(), **settings)
    with running(manage("mcp", "--http", "--port", str(port)), env=env, log=log):
        wait_answering(f"http://127.0.0.1:{port}/healthz", log)
        yield f"http://127.0.0.1:{port}/mcp"


def http_client(url: str, key: str | None) -> Client:
    """The SDK's client of ``url`` with ``key`` (none: no Authorization header)."""
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    transport = streamable_http_client(url, http_client=httpx2.AsyncClient(headers=headers))
    return Client(transport, read_timeout_seconds=60)
