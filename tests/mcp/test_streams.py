"""``GET /mcp`` event streams are capped per key and per process and end on their own:
a live ``manage.py mcp --http`` (uvicorn), many streams opened at once, counted."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.mcp.serving import mcp_over_http
from tests.world import ApiWorld

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]
STREAM_SECONDS = 5


@pytest.fixture
def mcp_url(api_world: ApiWorld, tmp_path: Path) -> Iterator[str]:
    with mcp_over_http(
        tmp_path / "mcp-http.log",
        CRONICORN_MCP_MAX_STREAMS_PER_KEY="2",
        CRONICORN_MCP_MAX_STREAMS="3",
        CRONICORN_MCP_STREAM_SECONDS=str(STREAM_SECONDS),
    ) as url:
        yield url


class Streams:
    """GET streams opened at once, one per key, each on its own thread: its status as soon
    as the response's headers arrive, and how long it lasted once it ended."""

    def __init__(self, url: str, keys: list[str]) -> None:
        self.statuses: list[int] = []
        self.results: list[tuple[int, float]] = []
        self._lock = threading.Condition()
        barrier = threading.Barrier(len(keys))

        def one(key: str) -> None:
            headers = {"Authorization": f"Bearer {key}", "Accept": "text/event-stream"}
            barrier.wait()
            started = time.monotonic()
            timeout = STREAM_SECONDS + 20
            with httpx.stream("GET", url, headers=headers, timeout=timeout) as response:
                with self._lock:
                    self.statuses.append(response.status_code)
                    self._lock.notify_all()
                try:
                    for _ in response.iter_bytes():
                        pass
                except httpx.HTTPError:
                    pass  # the server cut the stream at its time limit
                with self._lock:
                    self.results.append((response.status_code, time.monotonic() - started))

        self._threads = [threading.Thread(target=one, args=(key,)) for key in keys]
        for thread in self._threads:
            thread.start()

    def answered(self) -> list[int]:
        """Every stream's status, once each has its response headers."""
        with self._lock:
            self._lock.wait_for(lambda: len(self.statuses) == len(self._threads), 20)
            return sorted(self.statuses)

    def ended(self) -> list[tuple[int, float]]:
        for thread in self._threads:
            thread.join(STREAM_SECONDS + 30)
        return self.results


def test_streams_are_capped_per_key_and_per_process_and_end_on_their_own(
    api_world: ApiWorld, mcp_url: str
) -> None:
    # Six streams at once with one key: its two, and 429 for the four beyond them.
    read = Streams(mcp_url, [api_world.read_key] * 6)
    assert read.answered() == [200] * 2 + [429] * 4
    # While those two are open, two with another key: one more reaches the process cap of 3.
    write = Streams(mcp_url, [api_world.write_key] * 2)
    assert write.answered() == [200, 503]
    results = read.ended() + write.ended()
    assert len(results) == 8
    opened = [seconds for status, seconds in results if status == 200]
    assert len(opened) == 3
    assert all(STREAM_SECONDS - 0.5 <= s <= STREAM_SECONDS + 10 for s in opened), opened
    # Once they ended, the key may open streams again.
    again = Streams(mcp_url, [api_world.read_key]).ended()
    assert [status for status, _ in again] == [200]
