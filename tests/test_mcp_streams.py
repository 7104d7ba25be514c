"""``GET /mcp`` event streams are capped per key and per process and end on their own:
a live ``manage.py mcp --http`` (uvicorn), many streams opened at once, counted."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.api_world import ApiWorld, build_api_world
from tests.engine_processes import child_database_url, manage, process_env, running

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]
STREAM_SECONDS = 3


@pytest.fixture
def api_world(transactional_db: None) -> ApiWorld:
    return build_api_world()


@pytest.fixture
def mcp_url(api_world: ApiWorld, tmp_path: Path) -> Iterator[str]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    env = process_env(
        DATABASE_URL=child_database_url(),
        CRONICORN_MCP_MAX_STREAMS_PER_KEY="2",
        CRONICORN_MCP_MAX_STREAMS="3",
        CRONICORN_MCP_STREAM_SECONDS=str(STREAM_SECONDS),
    )
    with running(manage("mcp", "--http", "--port", str(port)), env=env, log=tmp_path / "l"):
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1)
                break
            except httpx.TransportError:
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/mcp"


def open_streams(url: str, keys: list[str]) -> list[tuple[int, float]]:
    """Open one GET stream per key at once; each (status, seconds until it ended)."""
    results: list[tuple[int, float]] = []
    lock = threading.Lock()
    barrier = threading.Barrier(len(keys))

    def one(key: str) -> None:
        headers = {"Authorization": f"Bearer {key}", "Accept": "text/event-stream"}
        barrier.wait()
        started = time.monotonic()
        with httpx.stream("GET", url, headers=headers, timeout=STREAM_SECONDS + 20) as response:
            try:
                for _ in response.iter_bytes():
                    pass
            except httpx.HTTPError:
                pass  # the server cut the stream at its time limit
            with lock:
                results.append((response.status_code, time.monotonic() - started))

    threads = [threading.Thread(target=one, args=(key,)) for key in keys]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(STREAM_SECONDS + 30)
    return results


def test_streams_are_capped_per_key_and_per_process_and_end_on_their_own(
    api_world: ApiWorld, mcp_url: str
) -> None:
    # Six streams with one read-only key, two with another: 2 + 1 (the process cap of 3).
    keys = [api_world.read_key] * 6 + [api_world.write_key] * 2
    results = open_streams(mcp_url, keys)
    statuses = sorted(status for status, _ in results)
    assert len(results) == len(keys)
    assert statuses.count(200) == 3, statuses
    assert statuses.count(429) >= 4, statuses  # the read key's four beyond its two
    opened = [seconds for status, seconds in results if status == 200]
    assert all(STREAM_SECONDS - 0.5 <= s <= STREAM_SECONDS + 10 for s in opened), opened
    # Once they ended, the key may open streams again.
    again = open_streams(mcp_url, [api_world.read_key])
    assert [status for status, _ in again] == [200]
