"""The scheduler's requests run on one event loop per lane, a tenant's all on one: a
tenant whose loop is busy (fifty endpoints in phase, sent or answered together) does
not hold up another tenant's requests (issue 32). Against a real HTTP server on
127.0.0.1; the busy loop is held by a callback that waits for the test's signal."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
from pytest_httpserver import HTTPServer

from endpoints.engine import executor
from endpoints.engine.executor import HttpRequest, NetworkPolicy, submit_request

ALLOW_PRIVATE = NetworkPolicy(allow_private=True)
# Two tenants' ids on different lanes (CRONICORN_HTTP_LANES is 4 by default).
TENANT_A, TENANT_B = 8, 9


@pytest.fixture
def server() -> Iterator[HTTPServer]:
    server = HTTPServer(host="127.0.0.1", port=0, threaded=True)
    server.start()
    server.expect_request("/ok").respond_with_data("ok")
    yield server
    server.clear()
    server.stop()


@pytest.fixture
def busy_lane_of_a() -> Iterator[threading.Event]:
    """Tenant A's event loop held by a callback until the event is set."""
    release, holding = threading.Event(), threading.Event()

    def hold() -> None:
        holding.set()
        release.wait(30)

    executor._shared_client(TENANT_A).loop.call_soon_threadsafe(hold)
    assert holding.wait(10)
    yield release
    release.set()


def test_a_tenant_whose_loop_is_busy_does_not_hold_up_another_tenants_request(
    server: HTTPServer, busy_lane_of_a: threading.Event
) -> None:
    request = HttpRequest(url=server.url_for("/ok"), timeout_ms=5000)
    a = submit_request(request, policy=ALLOW_PRIVATE, lane=TENANT_A)
    b = submit_request(request, policy=ALLOW_PRIVATE, lane=TENANT_B)

    assert (b.result(timeout=10).status, b.result().body) == ("success", "ok")
    assert not a.done()  # A's own request waits for its loop
    busy_lane_of_a.set()
    assert a.result(timeout=10).status == "success"
