"""A rate limit per target host and tenant: runs are delayed to stay within it, never
dropped (issue 34).

A tenant's ``host_rate_limits`` maps a host (as in its endpoints' URLs) to requests per
second; ``CRONICORN_HOST_RATE_LIMIT`` (0, the default: none) limits every other host of
every tenant. One budget per tenant and host, shared by the whole fleet: in Redis (the
broker's) when the database is PostgreSQL and the broker Redis, in process memory for the
single ``runscheduler`` on SQLite (or on PostgreSQL with no Redis to reach). Each start
is reserved atomically before it is spent (DESIGN "Fair share"), one Lua call per host
for the claims a starter records together.

The budget is a grid: each UTC second holds ``rate`` starts, spaced evenly over its first
``SPREAD`` of it. A reservation takes the next free start at or after the run's own time
(never before its slot), so a burst of 300 due at once goes out at 20 per second, in
order; any one-second window, aligned or not, holds at most ``rate`` starts, and a
request sent up to a fifth of a second late still lands in its own second at the target
(the last start of a second is ``1 - SPREAD`` plus one spacing before the next).

The dispatcher asks ``pace`` when it records the runs of claims due now. A start within
``HOLD_BEYOND`` runs then, its Run saying why it is late (``Run.delay_reason``: the slot,
``scheduled_for``, is kept); a later one is held: the claim goes back to the
dispatcher's heap with its reservation, its lease renewed while it waits like any claim
waiting for its time, and no Run recorded yet, so it can neither be declared lost nor
fill ``max_in_flight``. When it comes back, the reservation stands unless a pause voided it.

A 429 with a ``Retry-After`` (in seconds) from a limited host pauses the host's budget
until then (``note_outcomes``): every reservation made before is void, and held claims
take new starts after the pause. Runs already on their way (within ``HOLD_BEYOND``) go.

The default path costs nothing: the tenant's limits come with the run's endpoint
(``sql.load_endpoints``), and a tenant without limits, with no default set, is never
looked up further. If Redis stops answering, the runs go unlimited meanwhile (logged):
the broker that delivers them is then down too.
"""

from __future__ import annotations

import json
import logging
import math
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from functools import cache, lru_cache
from typing import TYPE_CHECKING, Protocol
from urllib.parse import urlsplit

import redis
from django.conf import settings
from django.db import connection

from endpoints.engine.claiming import Claim, Reservation
from endpoints.policies import MAX_RETRY_AFTER_MS, retry_after_ms
from endpoints.wording import duration_words

if TYPE_CHECKING:
    from endpoints.engine.outcomes import Outcome
    from endpoints.engine.sql import ClaimedEndpoint

logger = logging.getLogger("cronicorn.scheduler")

# The share of each second its starts are spread over: the rest is margin for lateness
# (a worker's loop busy, its process descheduled). Any one-second window holds at most
# ``rate`` starts whatever this is; it only sets how far apart they are within a second.
SPREAD = 0.8
# A start further ahead than this is held in the dispatcher rather than sent to the loop.
# More than the dispatcher's lead (``dispatch.START_AHEAD``, 0.2 s), or a held claim it
# hands over again at its time would be held again; the requests a 429 cannot stop are
# those within it.
HOLD_BEYOND = timedelta(milliseconds=500)
KEY_PREFIX = "cronicorn:host-limit:"
# A budget's state outlives its last reservation by this long (Redis keys expire).
KEEP_SECONDS = 60


@dataclass(frozen=True)
class Held:
    """A claim held back by its host's limit, to start at its ``start_at`` (no Run yet)."""

    claim: Claim


@dataclass(frozen=True)
class Paced:
    start: datetime
    delay_reason: str


@dataclass(frozen=True)
class Limit:
    key: str
    host: str
    rate: int


def limit_of(endpoint: ClaimedEndpoint) -> Limit | None:
    """The limit on the endpoint's host for its tenant, or None."""
    default = settings.CRONICORN_HOST_RATE_LIMIT
    if endpoint.host_rate_limits_json == "{}" and not default:  # the common case
        return None
    host = (urlsplit(endpoint.url).hostname or "").lower()
    rate = _limits(endpoint.host_rate_limits_json).get(host, default)
    if not rate:
        return None
    return Limit(f"{endpoint.tenant_id}:{host}", host, int(rate))


@lru_cache(maxsize=1024)
def _limits(text: str) -> dict[str, int]:
    # Decoded once per version of a tenant's limits in this process.
    limits = json.loads(text)
    return limits if isinstance(limits, dict) else {}


# --- the grid ------------------------------------------------------------------------
# Start n of a budget at ``rate`` is at second n // rate, place n % rate of it.


def start_time(n: int, rate: int) -> float:
    second, place = divmod(n, rate)
    return second + place * SPREAD / rate


def first_start_at(t: float, rate: int) -> int:
    """The first start at or after ``t``."""
    second = math.floor(t)
    place = math.ceil((t - second) * rate / SPREAD - 1e-9)
    return (second + 1) * rate if place >= rate else second * rate + place


class Store(Protocol):
    def reserve(
        self, key: str, rate: int, not_before: Sequence[float], now: float
    ) -> tuple[list[float], int, float]:
        """One start for each of ``not_before`` (ascending), each at or after its own; and
        the budget's generation and pause end (0 when never paused)."""
        ...

    def generation(self, keys: Sequence[str]) -> list[int]: ...

    def pause(self, key: str, rate: int, until: float, now: float) -> bool:
        """Pause the budget until ``until``, voiding every reservation; False if it was
        paused until then or later already."""
        ...


_RESERVE = """
local spread = tonumber(ARGV[1])
local rate = tonumber(ARGV[2])
local now = tonumber(ARGV[3])
local state = redis.call('HMGET', KEYS[1], 'next', 'rate', 'gen', 'paused')
local nxt = tonumber(state[1]) or 0
local old = tonumber(state[2]) or rate
local gen = tonumber(state[3]) or 0
local paused = tonumber(state[4]) or 0
local function at(n, r)
  local second = math.floor(n / r)
  return second + (n - second * r) * spread / r
end
local function first(t, r)
  local second = math.floor(t)
  local place = math.ceil((t - second) * r / spread - 1e-9)
  if place >= r then return (second + 1) * r end
  return second * r + place
end
if old ~= rate then nxt = first(at(nxt, old), rate) end
local out = {tostring(gen), string.format('%.6f', paused)}
local last = now
for i = 4, #ARGV do
  local n = math.max(nxt, first(math.max(tonumber(ARGV[i]), paused), rate))
  last = at(n, rate)
  out[#out + 1] = string.format('%.6f', last)
  nxt = n + 1
end
redis.call('HSET', KEYS[1], 'next', string.format('%.0f', nxt), 'rate', ARGV[2])
redis.call('EXPIRE', KEYS[1], math.ceil(math.max(last, paused) - now) + 60)
return out
"""

_PAUSE = """
local rate = tonumber(ARGV[1])
local untl = tonumber(ARGV[2])
local now = tonumber(ARGV[3])
local spread = tonumber(ARGV[4])
local paused = tonumber(redis.call('HGET', KEYS[1], 'paused')) or 0
if untl <= paused then return 0 end
local second = math.floor(untl)
local place = math.ceil((untl - second) * rate / spread - 1e-9)
local nxt = second * rate + place
if place >= rate then nxt = (second + 1) * rate end
redis.call('HSET', KEYS[1], 'paused', string.format('%.6f', untl),
  'next', string.format('%.0f', nxt), 'rate', ARGV[1])
redis.call('HINCRBY', KEYS[1], 'gen', 1)
redis.call('EXPIRE', KEYS[1], math.ceil(untl - now) + 60)
return 1
"""


class RedisStore:
    def __init__(self, url: str) -> None:
        self._client = redis.Redis.from_url(url, socket_timeout=2, socket_connect_timeout=2)
        self._reserve = self._client.register_script(_RESERVE)
        self._pause = self._client.register_script(_PAUSE)

    def reserve(
        self, key: str, rate: int, not_before: Sequence[float], now: float
    ) -> tuple[list[float], int, float]:
        args: list[str | float] = [SPREAD, rate, now, *(f"{t:.6f}" for t in not_before)]
        gen, paused, *starts = self._reserve(keys=[KEY_PREFIX + key], args=args)
        return [float(t) for t in starts], int(gen), float(paused)

    def generation(self, keys: Sequence[str]) -> list[int]:
        with self._client.pipeline(transaction=False) as pipe:
            for key in keys:
                pipe.hget(KEY_PREFIX + key, "gen")
            return [int(gen or 0) for gen in pipe.execute()]

    def pause(self, key: str, rate: int, until: float, now: float) -> bool:
        args: list[str | float] = [rate, f"{until:.6f}", now, SPREAD]
        return bool(self._pause(keys=[KEY_PREFIX + key], args=args))

    def ping(self) -> None:
        self._client.ping()


@dataclass
class _Budget:
    next: int = 0
    rate: int = 0
    generation: int = 0
    paused: float = 0.0


class MemoryStore:
    """One process's budgets (the single ``runscheduler`` on SQLite); the same grid."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._budgets: dict[str, _Budget] = {}

    def reserve(
        self, key: str, rate: int, not_before: Sequence[float], now: float
    ) -> tuple[list[float], int, float]:
        with self._lock:
            budget = self._budgets.setdefault(key, _Budget(rate=rate))
            if budget.rate != rate:
                budget.next = first_start_at(start_time(budget.next, budget.rate), rate)
                budget.rate = rate
            starts = []
            for t in not_before:
                n = max(budget.next, first_start_at(max(t, budget.paused), rate))
                starts.append(start_time(n, rate))
                budget.next = n + 1
            return starts, budget.generation, budget.paused

    def generation(self, keys: Sequence[str]) -> list[int]:
        with self._lock:
            return [self._budgets[key].generation if key in self._budgets else 0 for key in keys]

    def pause(self, key: str, rate: int, until: float, now: float) -> bool:
        with self._lock:
            budget = self._budgets.setdefault(key, _Budget(rate=rate))
            if until <= budget.paused:
                return False
            budget.paused, budget.rate = until, rate
            budget.next = first_start_at(until, rate)
            budget.generation += 1
            return True


@cache
def store() -> Store:
    """Redis when the fleet shares one (PostgreSQL and a Redis broker), else this process:
    SQLite has one scheduler process, and a ``runscheduler`` on PostgreSQL with no Redis
    running keeps its own budget (said once, in its log)."""
    url = settings.CELERY_BROKER_URL
    if connection.vendor == "sqlite" or not url.startswith(("redis://", "rediss://")):
        return MemoryStore()
    shared = RedisStore(url)
    try:
        shared.ping()
    except redis.RedisError as exc:
        logger.warning(
            "host rate limits are kept in this process only: Redis at CELERY_BROKER_URL "
            "cannot be reached (%s)",
            exc,
        )
        return MemoryStore()
    return shared


# --- the dispatcher's side -----------------------------------------------------------


def pace(
    entries: Sequence[tuple[ClaimedEndpoint, Claim, datetime]], *, now: datetime
) -> dict[int, Paced | Held]:
    """For the claims (with their endpoints and unlimited starts) that a limit holds
    back, by endpoint id: the later start of those that run now, or the claim held."""
    groups: dict[Limit, list[tuple[Claim, datetime]]] = {}
    for endpoint, claim, start in entries:
        if (limit := limit_of(endpoint)) is not None:
            groups.setdefault(limit, []).append((claim, start))
    paced: dict[int, Paced | Held] = {}
    for limit, items in groups.items():
        try:
            paced.update(_pace_host(limit, items, now))
        except redis.RedisError as exc:
            logger.warning("host rate limit of %s not applied: %s", limit.host, exc)
    return paced


def _pace_host(
    limit: Limit, items: list[tuple[Claim, datetime]], now: datetime
) -> dict[int, Paced | Held]:
    budget = store()
    reserved: list[tuple[Claim, Reservation]] = []
    fresh = [(claim, start) for claim, start in items if not _still_held(claim, limit)]
    held = [claim for claim, _start in items if _still_held(claim, limit)]
    if held:
        [generation] = budget.generation([limit.key])
        for claim in held:
            assert claim.held is not None
            if claim.held.generation == generation:
                reserved.append((claim, claim.held))
            else:  # a pause voided it: a new start, still counted from the first
                fresh.append((claim, claim.held.since))
    if fresh:
        fresh.sort(key=lambda item: item[1])
        starts, generation, paused = budget.reserve(
            limit.key,
            limit.rate,
            [max(start, now).timestamp() for _claim, start in fresh],
            now.timestamp(),
        )
        for (claim, start), at in zip(fresh, starts, strict=True):
            since = claim.held.since if claim.held is not None else start
            reservation = Reservation(limit.key, at, generation, since, paused)
            reserved.append((claim, reservation))
    return {claim.endpoint_id: _paced(claim, held, limit, now) for claim, held in reserved}


def _still_held(claim: Claim, limit: Limit) -> bool:
    return claim.held is not None and claim.held.key == limit.key


def _paced(claim: Claim, reservation: Reservation, limit: Limit, now: datetime) -> Paced | Held:
    at = datetime.fromtimestamp(reservation.at, tz=UTC)
    if at > now + HOLD_BEYOND:
        return Held(replace(claim, start_at=at, held=reservation))
    late_ms = int((at - reservation.since).total_seconds() * 1000)
    if late_ms <= 0:
        return Paced(max(at, reservation.since), "")
    why = f"Held back {duration_words(late_ms)} by the rate limit of {limit.host}"
    why += f" ({limit.rate} requests/s for this tenant"
    if (paused := reservation.paused) > reservation.since.timestamp():
        why += f", paused by a 429 until {datetime.fromtimestamp(paused, tz=UTC):%H:%M:%S} UTC"
    return Paced(at, f"{why}); its slot was kept.")


def note_outcomes(outcomes: Sequence[Outcome]) -> None:
    """A 429 with a Retry-After from a limited host pauses that host's budget until then."""
    for outcome in outcomes:
        result = outcome.result
        if result.status_code != 429 or (limit := limit_of(outcome.endpoint)) is None:
            continue
        if (wait_ms := retry_after_ms(result.headers)) is None:
            continue
        now = time.time()
        until = now + min(wait_ms, MAX_RETRY_AFTER_MS) / 1000
        try:
            if store().pause(limit.key, limit.rate, until, now):
                logger.warning(
                    "%s answered 429: its rate limit budget is paused for %s",
                    limit.host,
                    duration_words(wait_ms),
                )
        except redis.RedisError as exc:
            logger.warning("could not pause the rate limit of %s: %s", limit.host, exc)
