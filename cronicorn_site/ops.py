"""Probes and metrics for operators: ``/healthz``, ``/readyz`` and ``/metrics``.

- ``/healthz`` (liveness) answers 200 while the web process can answer at all; it touches
  nothing else, so a database outage never gets healthy web processes restarted.
- ``/readyz`` (readiness) answers 200 only when the database is reachable, every migration
  is applied, the broker is reachable (unless ``CRONICORN_BROKER_REQUIRED`` is false, for the
  embedded ``runscheduler``) and the last tick is younger than
  ``CRONICORN_READY_MAX_TICK_AGE_SECONDS``; otherwise 503. Either way the JSON names each
  check and why it failed.
- ``/metrics`` is the Prometheus exposition, behind ``Authorization: Bearer
  <CRONICORN_METRICS_TOKEN>``. With no token configured it is open under ``DEBUG`` and
  refused (403) otherwise, so a production deployment never publishes it by accident.
"""

from __future__ import annotations

import hmac
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import Error as DatabaseError
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.utils import timezone
from django.views.decorators.http import require_safe
from kombu import Connection

from console.metrics import render_metrics
from cronicorn_site.logs import mask_secrets
from endpoints.health import fleet_behind
from endpoints.models import Heartbeat

BROKER_TIMEOUT_SECONDS = 2
Check = dict[str, Any]


@require_safe
def healthz(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"status": "ok"})


@require_safe
def readyz(request: HttpRequest) -> JsonResponse:
    now = timezone.now()
    checks = {"database": check_database()}
    if checks["database"]["ok"]:
        checks["migrations"] = check_migrations()
        checks["tick"] = check_tick(now=now)
        checks["fleet"] = check_fleet(now=now)
    else:
        unreachable = {"ok": False, "error": "skipped: the database is unreachable"}
        checks["migrations"] = checks["tick"] = checks["fleet"] = unreachable
    checks["broker"] = check_broker()
    ready = all(check["ok"] for check in checks.values())
    body = {"status": "ready" if ready else "unavailable", "checks": checks}
    return JsonResponse(body, status=200 if ready else 503)


def check_database() -> Check:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except DatabaseError as exc:
        return {"ok": False, "error": _describe(exc)}
    return {"ok": True}


def check_migrations() -> Check:
    try:
        executor = MigrationExecutor(connection)
        plan = executor.migration_plan(executor.loader.graph.leaf_nodes())
    except DatabaseError as exc:
        return {"ok": False, "error": _describe(exc)}
    pending = [f"{migration.app_label}.{migration.name}" for migration, _ in plan]
    if pending:
        return {
            "ok": False,
            "pending": pending,
            "error": f"{len(pending)} migration(s) not applied; run `manage.py migrate`.",
        }
    return {"ok": True}


def check_tick(*, now: datetime) -> Check:
    max_age = settings.CRONICORN_READY_MAX_TICK_AGE_SECONDS
    beat = Heartbeat.objects.filter(name="tick").first()
    if beat is None:
        return {
            "ok": False,
            "max_age_seconds": max_age,
            "error": "No tick has run yet; start celery beat and a tick worker "
            "(or manage.py runscheduler).",
        }
    age = (now - beat.at).total_seconds()
    check: Check = {"ok": age <= max_age, "age_seconds": round(age, 3), "max_age_seconds": max_age}
    if not check["ok"]:
        check["error"] = (
            f"The last tick ran {age:.0f} s ago (more than {max_age} s); is celery beat "
            "running, and a worker consuming the tick queue?"
        )
    return check


def check_fleet(*, now: datetime) -> Check:
    """Whether the workers keep up: a warning, not a reason to take this process out of
    service (more web processes would not help)."""
    try:
        behind = fleet_behind(now=now)
    except DatabaseError as exc:
        return {"ok": False, "error": _describe(exc)}
    check: Check = {
        "ok": True,
        "behind": behind["fleet_behind"],
        "behind_seconds": behind["behind_seconds"],
        "oldest_due_seconds": behind["oldest_due_seconds"],
        "lateness_recent_p95_ms": behind["lateness_recent_p95_ms"],
    }
    if behind["fleet_behind"]:
        check["warning"] = behind["behind_warning"]
    return check


def check_broker() -> Check:
    if not settings.CRONICORN_BROKER_REQUIRED:
        return {"ok": True, "skipped": "CRONICORN_BROKER_REQUIRED is false"}
    try:
        with Connection(settings.CELERY_BROKER_URL, connect_timeout=BROKER_TIMEOUT_SECONDS) as conn:
            conn.ensure_connection(max_retries=1, interval_start=0, timeout=BROKER_TIMEOUT_SECONDS)
    except Exception as exc:  # every transport raises its own kinds
        return {
            "ok": False,
            "error": f"{_describe(exc)}. If this deployment runs the embedded runscheduler "
            "without a broker, set CRONICORN_BROKER_REQUIRED=false.",
        }
    return {"ok": True}


def _describe(exc: Exception) -> str:
    # Connection errors can quote URLs; keep passwords out of the response.
    return mask_secrets(f"{type(exc).__name__}: {exc}".strip())


@require_safe
def metrics(request: HttpRequest) -> HttpResponse:
    refusal = _refuse_metrics(request)
    if refusal is not None:
        return refusal
    body, content_type = render_metrics(now=timezone.now())
    return HttpResponse(body, content_type=content_type)


def _refuse_metrics(request: HttpRequest) -> HttpResponse | None:
    token = settings.CRONICORN_METRICS_TOKEN
    if not token:
        if settings.DEBUG:
            return None
        return HttpResponse(
            "Metrics are off: set CRONICORN_METRICS_TOKEN and scrape with "
            "'Authorization: Bearer <token>'.\n",
            status=403,
            content_type="text/plain",
        )
    scheme, _, given = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), token.encode()):
        return None
    response = HttpResponse(
        "Send 'Authorization: Bearer <CRONICORN_METRICS_TOKEN>'.\n",
        status=401,
        content_type="text/plain",
    )
    response["WWW-Authenticate"] = 'Bearer realm="metrics"'
    return response
