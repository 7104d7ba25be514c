"""The served processes outlive their database connections: after the server's connections
are dropped (as a database restart drops them), the next request answers.

- gunicorn (the REST API as deployed): a connection kept between requests (CONN_MAX_AGE)
  is health-checked before a request reuses it, so the first request after the drop
  reconnects instead of answering 500;
- ``manage.py mcp --http``: the key check before every ``POST /mcp`` runs outside Django's
  request handling, so it frames itself as a request does (``close_old_connections``
  before and after). Without that, its thread kept the dropped connection and every
  later call failed until the process restarted.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest
from django.db import connection
from mcp.types import CallToolResult

from tests.api.serving import gunicorn_serving
from tests.mcp.serving import http_client, mcp_over_http
from tests.world import ApiWorld

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def drop_server_connections() -> int:
    """Ends every connection to the test database but this test's own: the server's."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid() "
            "AND backend_type = 'client backend'"
        )
        return int(cursor.fetchone()[0])


def list_jobs(url: str, key: str) -> CallToolResult:
    async def call() -> CallToolResult:
        async with http_client(url, key) as client:
            return await client.call_tool("list_jobs", {})

    return asyncio.run(call())


def test_the_api_answers_the_first_request_after_the_database_dropped_its_connection(
    api_world: ApiWorld, tmp_path: Path
) -> None:
    with gunicorn_serving(tmp_path) as base_url:
        headers = {"Authorization": f"Bearer {api_world.write_key}"}
        before = httpx.get(f"{base_url}/api/v1/jobs", headers=headers, timeout=30)
        assert before.status_code == 200

        assert drop_server_connections() >= 1  # the worker's, kept between requests

        for _ in range(2):  # the first request after the drop, and the one after it
            after = httpx.get(f"{base_url}/api/v1/jobs", headers=headers, timeout=30)
            assert after.status_code == 200, after.text
            assert after.json() == before.json()


def test_tool_calls_answer_again_after_the_database_dropped_the_servers_connections(
    api_world: ApiWorld, tmp_path: Path
) -> None:
    with mcp_over_http(tmp_path / "mcp-http.log") as url:
        before = list_jobs(url, api_world.write_key)
        assert not before.is_error

        assert drop_server_connections() >= 1  # the key check's, kept between calls

        for _ in range(2):  # the first call after the drop, and the one after it
            after = list_jobs(url, api_world.write_key)
            assert not after.is_error, after.content
            assert after.structured_content == before.structured_content
