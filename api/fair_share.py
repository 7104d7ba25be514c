"""What one key (or admin user) may take of the web processes, whatever its rate limit
allows: a few requests in flight at once (``in_flight``), and, when set, a share of a
CPU core (``cpu_budget``). Both are counted in the ``api`` cache, like the rate limit
(``auth``): Redis when CRONICORN_API_CACHE_URL names one, shared by every web process;
each process's memory otherwise. Every REST operation and MCP tool call, and the admin's live
run preview, passes both.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from contextlib import contextmanager

from django.conf import settings
from django.core.cache import caches
from ninja.errors import Throttled

from api.auth import Principal

# How long a request's place among its key's requests in flight is held at most: the
# longest request (a test call of an endpoint at its longest timeout, 30 min) and a
# margin. A process killed mid-request gives its place back no later than this.
IN_FLIGHT_HOLD_SECONDS = 30 * 60 + 60
# The CPU a key's requests used is counted in windows of this length.
CPU_WINDOW_SECONDS = 10


class TooManyInFlight(Throttled):
    """A key over CRONICORN_API_CALLS_PER_KEY requests at once (429, retry in a second)."""

    def __init__(self, limit: int) -> None:
        super().__init__(wait=1)
        self.detail = (
            f"This API key already has {limit} requests in flight, the most one key may have "
            "at once (CRONICORN_API_CALLS_PER_KEY); retry when one has answered."
        )


@contextmanager
def in_flight(principal: Principal) -> Iterator[None]:
    """A place among the key's (or user's) requests in flight for the length of a
    request: at most CRONICORN_API_CALLS_PER_KEY at once, so one tenant's slow requests
    hold at most that many of the web server's workers and the others' requests still
    find one. Counted in the ``api`` cache, like the rate limit: shared by every web
    process when that is Redis.

    Each place is its own cache entry taken with ``add`` (Redis SET NX with an expiry):
    atomic, so two requests never take the same place, and a place whose process died
    frees itself when its expiry passes (no counter to leak)."""
    limit = settings.CRONICORN_API_CALLS_PER_KEY
    cache = caches["api"]
    for place in range(limit):
        name = f"in-flight:{principal}:{place}"
        if cache.add(name, 1, timeout=IN_FLIGHT_HOLD_SECONDS):
            break
    else:
        raise TooManyInFlight(limit)
    try:
        yield
    finally:
        cache.delete(name)


class OverCpuBudget(Throttled):
    """A key whose requests used its share of a core in this window (429 until its end)."""

    def __init__(self, share: float, wait: float) -> None:
        super().__init__(wait=max(1, math.ceil(wait)))
        self.detail = (
            f"This API key's requests have used the server CPU one key may use ({share:g} of "
            f"a core over {CPU_WINDOW_SECONDS} s, CRONICORN_API_CPU_PER_KEY); retry in "
            f"{self.wait} s, or ask for less at a time (a smaller count, a shorter range)."
        )


@contextmanager
def cpu_budget(principal: Principal) -> Iterator[None]:
    """Refuse a request of a key whose requests already used CRONICORN_API_CPU_PER_KEY of
    a core in the current window of CPU_WINDOW_SECONDS, and charge this one's CPU to the
    window it ends in. A rate limit counts requests, which differ a thousandfold in cost
    (a preview of 100 runs of the largest window policy against a list of one job): a
    key within its rate can still keep the web workers busy that others' requests wait
    for. GitHub's secondary rate limit counts CPU time the same way. (It does not keep a
    shared machine's cores free for the scheduler: a client in a loop turns each refusal
    into another request; ``endpoints.cpus`` does that.)

    The CPU is this thread's (``time.thread_time``): a request runs whole in one thread
    (a gunicorn sync worker, an MCP call's pool thread), so it is the request's, and the
    load of the machine does not inflate it as wall time would. A request is checked
    when it starts, so a key overshoots by at most its requests in flight."""
    share = settings.CRONICORN_API_CPU_PER_KEY
    if not share:
        yield
        return
    cache = caches["api"]
    now = time.time()
    window = int(now // CPU_WINDOW_SECONDS)
    if (cache.get(f"cpu:{principal}:{window}") or 0) >= share * CPU_WINDOW_SECONDS * 1000:
        raise OverCpuBudget(share, (window + 1) * CPU_WINDOW_SECONDS - now)
    began = time.thread_time()
    try:
        yield
    finally:
        spent_ms = math.ceil((time.thread_time() - began) * 1000)
        name = f"cpu:{principal}:{int(time.time() // CPU_WINDOW_SECONDS)}"
        cache.add(name, 0, timeout=CPU_WINDOW_SECONDS + 1)
        try:
            cache.incr(name, spent_ms)
        except ValueError:  # expired between add and incr
            cache.add(name, spent_ms, timeout=CPU_WINDOW_SECONDS + 1)
