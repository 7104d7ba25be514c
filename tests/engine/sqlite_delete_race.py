"""A delete on SQLite, the embedded default, while the scheduler in the same process
records a run: run by tests/engine/test_sqlite_deletes.py in a child process whose
DATABASE_URL is a SQLite file (the tests' own database is PostgreSQL).

The scheduler's thread records its run just after the delete has listed the endpoint's
runs (Django lists them before it deletes them); the child prints what the delete
answered and what is left, as JSON."""

from __future__ import annotations

import json
import sqlite3
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
from tests.world import make_key

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


def delete_a_long_history() -> None:
    """Delete, through the API, an endpoint with more runs than this SQLite allows
    variables in a statement (one in 100 a retry of the run before it); prints what the
    API answered and what is left, as JSON."""
    connection.ensure_connection()
    runs = connection.connection.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER) + 1
    endpoint = Endpoint.objects.create(
        job=Job.objects.create(tenant=Tenant.objects.create(name="acme"), name="ops"),
        name="every second",
        url="http://127.0.0.1:9/",
        baseline_interval_ms=1_000,
    )
    with connection.cursor() as cursor:  # SQL: a quarter of a million model objects is slow
        cursor.execute(
            """
            WITH RECURSIVE g(n) AS (SELECT 0 UNION ALL SELECT n + 1 FROM g WHERE n + 1 < %s)
            INSERT INTO endpoints_run (endpoint_id, trigger, source, scheduled_for, started_at,
                status, request_method, request_url, response_truncated, error, attempt)
            SELECT %s, 'scheduled', '', t, t, 'failure', 'GET', '', 0, '', 1
            FROM (SELECT strftime('%%Y-%%m-%%d %%H:%%M:%%S', 'now', -n || ' seconds') AS t FROM g)
            """,
            [runs, endpoint.pk],
        )
        cursor.execute(
            "UPDATE endpoints_run SET trigger = 'retry', attempt = 2, retry_of_id = id - 1"
            " WHERE id %% %s = 0",
            [100],
        )
    status = DELETES["api-endpoint"](endpoint)
    print(json.dumps({"status": status, "runs": Run.objects.count()}))
