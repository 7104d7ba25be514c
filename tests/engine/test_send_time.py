"""A request sent at a given time (the dispatcher records Runs ahead of their slots and
the HTTP event loop sends each at its own, issue 23), and never past its deadline."""

from __future__ import annotations

import asyncio
import concurrent.futures
import gc
import time
from collections import Counter
from typing import Any

import pytest

from endpoints.engine import executor
from endpoints.engine.executor import (
    HttpRequest,
    HttpResult,
    NetworkPolicy,
    NotSent,
    submit_request,
)

ALLOW_PRIVATE = NetworkPolicy(allow_private=True)


def test_a_request_given_a_time_is_sent_then_and_not_before(target) -> None:
    at = time.time() + 0.3

    result = submit_request(HttpRequest(url=target.url("/at")), policy=ALLOW_PRIVATE, at=at).result(
        timeout=5
    )

    assert result.status == "success"
    assert result.sent_at is not None and result.sent_at >= at
    [hit] = target.hits("/at")
    assert hit.at >= at


def test_a_request_reached_after_its_deadline_is_not_sent(target) -> None:
    """A process stalled past its run's lease must not send the request: the lease, and
    the slot, may belong to another worker by then."""
    now = time.time()

    future = submit_request(
        HttpRequest(url=target.url("/late")), policy=ALLOW_PRIVATE, at=now, deadline=now - 1
    )

    with pytest.raises(NotSent, match="after its deadline"):
        future.result(timeout=5)
    # The future settles when the loop decides; a request sent first would be here by
    # now: a second request on the same loop arrives, the first never does.
    submit_request(HttpRequest(url=target.url("/after")), policy=ALLOW_PRIVATE).result(timeout=5)
    assert len(target.hits("/after")) == 1
    assert target.hits("/late") == []


def test_a_request_whose_connection_is_ready_after_its_deadline_is_not_sent(
    target, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The deadline is checked again once the connection is ready, just before the
    request's bytes go out: a process stopped between the first check and the send (the
    stalled-worker fault case) must not send either. Here the host check, our own step
    between the two, takes longer than the time left."""
    real_check_host = executor._check_host

    async def slow_check_host(url: Any, policy: NetworkPolicy) -> None:
        await asyncio.sleep(0.3)
        await real_check_host(url, policy)

    monkeypatch.setattr(executor, "_check_host", slow_check_host)
    now = time.time()

    future = submit_request(
        HttpRequest(url=target.url("/slow")), policy=ALLOW_PRIVATE, at=now, deadline=now + 0.1
    )

    with pytest.raises(NotSent, match=r"connected .* after its deadline"):
        future.result(timeout=5)
    submit_request(HttpRequest(url=target.url("/after")), policy=ALLOW_PRIVATE).result(timeout=5)
    assert len(target.hits("/after")) == 1
    assert target.hits("/slow") == []


def test_requests_sent_at_their_time_leave_no_garbage_for_the_collector(target) -> None:
    """Each request's objects are freed by reference counting, none is left in a cycle
    for the collector: a worker at 833 runs/s that left its runs' objects in cycles
    ran a full collection, a pause of every thread of 110-150 ms, every 1.7 s.

    What the collector finds is kept (``DEBUG_SAVEALL``) and the requests', results' and
    futures' among it are counted: the process's other threads (servers and event loops
    of earlier tests) leave garbage of their own meanwhile, more on a busy machine."""
    requests = 50
    warm = [
        submit_request(HttpRequest(url=target.url("/warm")), policy=ALLOW_PRIVATE)
        for _ in range(requests)
    ]
    assert all(future.result(timeout=10).status == "success" for future in warm)
    del warm
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        at = time.time() + 0.05
        futures = [
            submit_request(HttpRequest(url=target.url("/gc")), policy=ALLOW_PRIVATE, at=at)
            for _ in range(requests)
        ]
        assert all(future.result(timeout=10).status == "success" for future in futures)
        del futures
        gc.collect()
        ours = [
            type(found).__name__
            for found in gc.garbage
            if isinstance(found, HttpRequest | HttpResult | concurrent.futures.Future)
        ]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()

    assert len(target.hits("/gc")) == requests
    assert ours == [], f"{len(ours)} requests' objects were in cycles: {Counter(ours)}"
