"""The built-in demo target: JSON that changes over time, for ``manage.py demo``.

Every answer is a deterministic function of the current time (``demo_response``), so the
planner sees a queue that fills and drains, a health status that degrades and recovers,
a value that crosses its warning and critical thresholds, and now and then a 429 with
``Retry-After`` — without any state, and reproducibly in tests.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.utils import timezone
from django.views.decorators.csrf import csrf_exempt

# One cycle of the queue: fills for 60 % of it, drains for the rest.
QUEUE_CYCLE_SECONDS = 600
QUEUE_PEAK = 500
# The thresholds value swings on a different period, so the signals do not move in step.
VALUE_CYCLE_SECONDS = 420
WARNING_THRESHOLD = 70
CRITICAL_THRESHOLD = 90
# The rate-limited target refuses for the first minute of every five.
RATE_LIMIT_CYCLE_SECONDS = 300
RATE_LIMIT_WINDOW_SECONDS = 60


@dataclass(frozen=True)
class DemoResponse:
    status: int
    body: dict[str, object]
    headers: dict[str, str] = field(default_factory=dict)


def queue_depth_at(now: datetime) -> int:
    phase = (now.timestamp() % QUEUE_CYCLE_SECONDS) / QUEUE_CYCLE_SECONDS
    if phase < 0.6:
        return round(QUEUE_PEAK * phase / 0.6)
    return round(QUEUE_PEAK * (1 - phase) / 0.4)


def health_status(depth: int) -> str:
    if depth >= 0.8 * QUEUE_PEAK:
        return "critical"
    if depth >= 0.4 * QUEUE_PEAK:
        return "degraded"
    return "healthy"


def _queue(now: datetime) -> DemoResponse:
    depth = queue_depth_at(now)
    return DemoResponse(
        200,
        {
            "queue_depth": depth,
            "processing_rate_per_min": 100,
            "status": health_status(depth),
        },
    )


def _health(now: datetime) -> DemoResponse:
    depth = queue_depth_at(now)
    return DemoResponse(
        200,
        {
            "status": health_status(depth),
            "error_rate_pct": round(12.0 * depth / QUEUE_PEAK, 2),
            "avg_latency_ms": 120 + depth,
        },
    )


def _thresholds(now: datetime) -> DemoResponse:
    angle = 2 * math.pi * (now.timestamp() % VALUE_CYCLE_SECONDS) / VALUE_CYCLE_SECONDS
    return DemoResponse(
        200,
        {
            "current_value": round(65 + 30 * math.sin(angle), 1),
            "warning_threshold": WARNING_THRESHOLD,
            "critical_threshold": CRITICAL_THRESHOLD,
        },
    )


def _ingest(now: datetime) -> DemoResponse:
    return DemoResponse(200, {"accepted": True, "queue_depth": queue_depth_at(now)})


def _rate_limited(now: datetime) -> DemoResponse:
    second = int(now.timestamp()) % RATE_LIMIT_CYCLE_SECONDS
    if second < RATE_LIMIT_WINDOW_SECONDS:
        retry_after = RATE_LIMIT_WINDOW_SECONDS - second
        return DemoResponse(
            429,
            {"error": "rate limited", "retry_after_seconds": retry_after},
            {"Retry-After": str(retry_after)},
        )
    return DemoResponse(200, {"status": "healthy", "remaining_quota": 300 - second})


def _inbox(now: datetime) -> DemoResponse:
    # The demo tenant's alert channel (a signed webhook): it takes every message.
    return DemoResponse(200, {"received": True})


DEMO_TARGETS = {
    "queue": _queue,
    "health": _health,
    "thresholds": _thresholds,
    "ingest": _ingest,
    "rate-limited": _rate_limited,
    "inbox": _inbox,
}


def demo_response(name: str, now: datetime) -> DemoResponse:
    """What ``/demo/<name>/`` answers at ``now``; 404 naming the known targets otherwise."""
    target = DEMO_TARGETS.get(name)
    if target is None:
        known = ", ".join(sorted(DEMO_TARGETS))
        return DemoResponse(404, {"error": f"No demo target {name!r}; try one of: {known}."})
    answer = target(now)
    answer.body["timestamp"] = now.isoformat()
    return answer


@csrf_exempt  # A machine target for the scheduler's own requests; it holds no session state.
def demo_target(request: HttpRequest, name: str) -> HttpResponse:
    answer = demo_response(name, timezone.now())
    response = JsonResponse(answer.body, status=answer.status)
    for header, value in answer.headers.items():
        response[header] = value
    if request.method in ("POST", "PUT", "PATCH") and request.body:
        # Echo the size only: the demo never stores what it is sent.
        response["X-Demo-Received-Bytes"] = str(len(request.body))
    return response
