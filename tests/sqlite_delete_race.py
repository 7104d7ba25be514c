"""A delete on SQLite, the embedded default, while the scheduler in the same process
records a run: run by tests/test_sqlite_deletes.py in a child process whose DATABASE_URL is a SQLite
file (the tests' own database is PostgreSQL).

The scheduler's thread records its run just after the delete has listed the endpoint's
runs (Django lists them before it deletes them); the child prints what the delete
answered and what is left, as JSON."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from django.db import connection
from django.test import Client
from django.utils import timezone

from endpoints.engine.claiming import claim_due_endpoints
from endpoints.engine.running import start_claims
from endpoints.models import Endpoint, Job, Run, RunStatus, Slot, Source, Tenant
from tests.api_world import make_key

RUNS_LISTED = 'SELECT "endpoints_run"."id" FROM "endpoints_run"'


def main(interface: str) -> None:
    tenant = Tenant.objects.create(name="acme")
    endpoint = Endpoint(
        job=Job.objects.create(tenant=tenant, name="ops"),
        name="orders",
        url="http://127.0.0.1:9/orders",
        baseline_interval_ms=60_000,
    )
    endpoint.full_clean()
    endpoint.save()
    now = timezone.now()
    before = now - timedelta(minutes=1)
    Run.objects.create(
        endpoint=endpoint, scheduled_for=before, started_at=before, status=RunStatus.SUCCESS
    )
    Slot.objects.filter(pk=endpoint.pk).update(
        next_run_at=now, next_run_source=Source.BASELINE_INTERVAL
    )
    [claim] = claim_due_endpoints(now=now, limit=1, horizon_ms=0)  # before the delete
    scheduler = threading.Thread(target=lambda: _start(claim), daemon=True)

    def once_the_runs_are_listed(execute: Callable[..., Any], sql: str, *args: Any) -> Any:
        result = execute(sql, *args)
        if sql.startswith(RUNS_LISTED) and scheduler.ident is None:
            scheduler.start()
            # It records its run at once, unless the delete holds the write lock: then it
            # waits for the delete (up to SQLite's busy timeout), and this goes on.
            scheduler.join(timeout=2)
        return result

    with connection.execute_wrapper(once_the_runs_are_listed):
        status = DELETES[interface](endpoint)
    if scheduler.ident is not None:
        scheduler.join(timeout=30)
    print(
        json.dumps(
            {
                "status": status,
                "endpoints": Endpoint.objects.count(),
                "runs": Run.objects.count(),
                "scheduler_done": not scheduler.is_alive(),
            }
        )
    )


def _start(claim: Any) -> None:
    try:
        start_claims([claim])
    finally:
        connection.close()


def _api(method: str, path: str, endpoint: Endpoint) -> int:
    key = make_key(endpoint.job.tenant)
    client = Client(HTTP_HOST="localhost", HTTP_AUTHORIZATION=f"Bearer {key}")
    return int(getattr(client, method)(f"/api/v1{path}").status_code)


DELETES: dict[str, Callable[[Endpoint], int]] = {
    "api-endpoint": lambda endpoint: _api("delete", f"/endpoints/{endpoint.pk}", endpoint),
    "api-job": lambda endpoint: _api("delete", f"/jobs/{endpoint.job_id}", endpoint),
}
