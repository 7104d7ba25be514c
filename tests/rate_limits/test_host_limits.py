"""The host rate limiter's budget (endpoints/engine/host_limits.py): reservations made at
once by several processes on one Redis never share a start and never put more than the
rate in any second; a pause voids what was reserved; the memory store (the single
``runscheduler`` on SQLite) keeps the same grid. And the tenant setting, validated in
the one validation path, carried by import and export."""

from __future__ import annotations

import multiprocessing
import time
import uuid
from bisect import bisect_left
from collections import Counter
from typing import Any

import pytest
import redis
from django.conf import settings
from django.utils import timezone

from endpoints.engine.claiming import claim_due_endpoints, release_claims
from endpoints.engine.host_limits import (
    KEY_PREFIX,
    Held,
    MemoryStore,
    RedisStore,
    Store,
    first_start_at,
    start_time,
)
from endpoints.engine.running import Started, start_claims
from endpoints.models import Run, Slot

PROCESSES = 4
RESERVATIONS = 150  # per process, in batches of BATCH
BATCH = 5
RATE = 40


def _reserve_many(url: str, key: str, start: float, out: multiprocessing.Queue) -> None:
    """In a child process: its own connection, many small reservations in a row."""
    budget = RedisStore(url)
    starts: list[float] = []
    for _ in range(RESERVATIONS // BATCH):
        got, _generation, _paused = budget.reserve(key, RATE, [start] * BATCH, start)
        starts += got
    out.put(starts)


def _in_any_second(starts: list[float]) -> int:
    """The most starts in any half-open one-second window, aligned or not."""
    ordered = sorted(starts)
    return max(bisect_left(ordered, t + 1) - k for k, t in enumerate(ordered))


def test_reservations_from_several_processes_at_once_never_share_a_start_or_exceed_the_rate():
    key = f"test-{uuid.uuid4().hex}"
    start = time.time() + 3600  # a start far enough ahead that no reservation is "now"
    context = multiprocessing.get_context("fork")
    out: multiprocessing.Queue = context.Queue()
    children = [
        context.Process(target=_reserve_many, args=(settings.CELERY_BROKER_URL, key, start, out))
        for _ in range(PROCESSES)
    ]
    for child in children:
        child.start()
    starts = [t for _ in children for t in out.get(timeout=60)]
    for child in children:
        child.join(timeout=30)
        assert child.exitcode == 0

    total = PROCESSES * RESERVATIONS
    assert len(starts) == len(set(starts)) == total  # no start given twice
    # Together they are exactly the first starts of the grid from ``start``: no gap, no
    # double booking, whatever the interleaving of the processes' calls.
    first = first_start_at(start, RATE)
    grid = [round(start_time(first + n, RATE), 6) for n in range(total)]
    assert sorted(round(t, 6) for t in starts) == grid
    per_second = Counter(int(t) for t in starts)
    assert max(per_second.values()) <= RATE
    assert _in_any_second(starts) <= RATE
    redis.Redis.from_url(settings.CELERY_BROKER_URL).delete(KEY_PREFIX + key)


@pytest.mark.parametrize("kind", ["redis", "memory"])
def test_a_pause_moves_every_later_start_after_it_and_voids_older_reservations(kind):
    budget: Store = RedisStore(settings.CELERY_BROKER_URL) if kind == "redis" else MemoryStore()
    key = f"test-{uuid.uuid4().hex}"
    now = time.time()
    before, generation, _ = budget.reserve(key, 20, [now] * 5, now)
    assert before == sorted(before) and before[0] >= now

    assert budget.pause(key, 20, now + 3, now)
    assert not budget.pause(key, 20, now + 2, now)  # an earlier end changes nothing
    [after_pause] = budget.generation([key])
    assert after_pause == generation + 1
    later, generation2, paused = budget.reserve(key, 20, [now] * 3, now)
    assert generation2 == after_pause and paused == pytest.approx(now + 3, abs=1e-5)
    assert all(t >= now + 3 for t in later)
    assert Counter(int(t) for t in later).most_common(1)[0][1] <= 20


def test_the_memory_store_keeps_the_same_grid_as_redis():
    key = f"test-{uuid.uuid4().hex}"
    start = float(int(time.time()) + 3600) + 0.37
    memory, shared = MemoryStore(), RedisStore(settings.CELERY_BROKER_URL)
    for rate in (20, 7):  # a change of rate carries on from where the budget was
        a, _, _ = memory.reserve(key, rate, [start] * 30, start)
        b, _, _ = shared.reserve(key, rate, [start] * 30, start)
        assert [round(t, 6) for t in a] == [round(t, 6) for t in b]
    redis.Redis.from_url(settings.CELERY_BROKER_URL).delete(KEY_PREFIX + key)


def _counting_redis_calls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every call this process makes to the shared budget in Redis (the store is the only
    code that talks to it), by name: the server's own counts are shared with the other
    test processes."""
    calls: list[str] = []
    for name in ("reserve", "generation", "pause"):
        method = getattr(RedisStore, name)

        def counted(self: RedisStore, *args: Any, _name: str = name, _m: Any = method) -> Any:
            calls.append(_name)
            return _m(self, *args)

        monkeypatch.setattr(RedisStore, name, counted)
    return calls


@pytest.mark.django_db
@pytest.mark.usefixtures("loopback_allowed")
def test_runs_of_a_tenant_without_limits_cost_no_redis_round_trip(
    tenant, job, make_endpoint, monkeypatch
):
    redis.Redis.from_url(settings.CELERY_BROKER_URL).delete(f"{KEY_PREFIX}{tenant.pk}:127.0.0.1")
    due = timezone.now()
    endpoints = [make_endpoint(url=f"http://127.0.0.1:9/e{k}") for k in range(10)]
    Slot.objects.filter(job=job).update(next_run_at=due)

    def start_all() -> list[object]:
        claims = claim_due_endpoints(now=due, limit=100, horizon_ms=0)
        assert len(claims) == len(endpoints)
        started = start_claims(claims, ahead=True)
        release_claims(claims)
        Run.objects.all().delete()
        Slot.objects.filter(job=job).update(next_run_at=due)
        return started

    calls = _counting_redis_calls(monkeypatch)
    assert all(isinstance(item, Started) for item in start_all())
    assert calls == []  # no limit: Redis never asked

    tenant.host_rate_limits = {"127.0.0.1": 1}
    tenant.save(update_fields=["host_rate_limits"])
    started = start_all()
    assert calls == ["reserve"]  # one reservation for the ten, in one call
    # One start a second, at whole seconds: at most the first runs now, the rest are
    # held back (no Run yet), each for a second of its own.
    held = [item for item in started if isinstance(item, Held)]
    assert len(held) >= 9 and len(held) + sum(isinstance(item, Started) for item in started) == 10
    starts = [item.claim.starts_at for item in held]
    assert len(set(starts)) == len(starts) and {start.microsecond for start in starts} == {0}
