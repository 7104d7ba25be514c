"""The admin's live run preview (``console/admin/preview.py``), as the policy fields call
it while a person types: one request's server time, p50/p99/max over ``--requests``
requests (after 10 warm-up ones), in-process through Django's test client (session,
middleware, the admin's form and the governor; no HTTP server, no network), for an
endpoint with no run policy and with the worst valid windows a policy may have: one free
minute a week, as two blackouts (``api_requests.WORST_WINDOWS``) and as 20 allowed and 20
blackout windows on every day (``noisy_neighbour.worst_windows``, the most that
validation accepts). The first request of each is reported apart: the one that meets its
policy first, resolving it and its free week; and the SQL statements of one request
(validating the form runs one per CHECK and UNIQUE constraint of the model; ``--what-if``
measures each again without them). Issue 32's goal: under 50 ms.

    .venv/bin/python bench/admin_preview.py [--requests 200] [--what-if]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench._common import (
    fresh_database,
    load,
    percentile,
    pg_url,
    print_table,
    setup_django,
    write_results,
)

DATABASE = pg_url("cc_bench_admin_preview")
WARM_UP = 10


def scenarios() -> dict[str, dict[str, Any]]:
    from _largest_policy import worst_windows
    from api_requests import WORST_WINDOWS

    from endpoints.windows import DAYS, MAX_WINDOWS

    # Wednesday 23:59 UTC: the free minute of both worst policies.
    free = datetime(2026, 12, 2, 23, 59, tzinfo=UTC)
    return {
        "no policy": {},
        "worst windows, 2 blackouts": WORST_WINDOWS,
        f"worst windows, {MAX_WINDOWS}+{MAX_WINDOWS}": worst_windows(MAX_WINDOWS, free, len(DAYS)),
    }


def measure(client: Any, url: str, form: dict[str, str], requests: int) -> dict[str, Any]:
    cpu: list[float] = []

    def once() -> float:
        started, used = time.perf_counter(), time.process_time()
        response = client.post(url, form)
        took = time.perf_counter() - started
        cpu.append((time.process_time() - used) * 1000)
        if response.status_code != 200 or len(response.json()["runs"]) != 10:
            raise SystemExit(f"the preview failed: {response.status_code} {response.content!r}")
        return took * 1000

    from django.db import connection

    first = once()
    for _ in range(WARM_UP):
        once()
    queries: list[str] = []  # counted at the driver: each request clears Django's own log
    with connection.execute_wrapper(lambda run, sql, *rest: queries.append(sql) or run(sql, *rest)):
        once()
    cpu.clear()
    ms = [once() for _ in range(requests)]
    return {
        "requests": requests,
        "queries": len(queries),
        "first_ms": round(first, 2),
        "p50_ms": round(percentile(ms, 0.50), 2),
        "p99_ms": round(percentile(ms, 0.99), 2),
        "max_ms": round(max(ms), 2),
        # This process's CPU (not PostgreSQL's): less moved by other load than the wall.
        "cpu_p50_ms": round(percentile(cpu, 0.50), 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument(
        "--what-if",
        action="store_true",
        help="also each policy with the model's constraints (CHECK, UNIQUE) not queried on "
        "validation (what the preview would cost if it skipped them; its messages come from "
        "full_clean)",
    )
    args = parser.parse_args()
    fresh_database(DATABASE)
    setup_django(DATABASE, CRONICORN_LOG_LEVEL="ERROR")
    from django.contrib.auth import get_user_model
    from django.test import Client
    from django.test.utils import setup_test_environment
    from django.urls import reverse
    from noisy_neighbour import admin_form

    from endpoints.models import Endpoint, Job, Tenant

    setup_test_environment()  # the test client's host, "testserver", is allowed
    user = get_user_model().objects.create_user("bench", is_staff=True)
    tenant = Tenant.objects.create(name="bench")
    tenant.members.add(user)
    job = Job.objects.create(tenant=tenant, name="bench")
    client = Client()
    client.force_login(user)
    results: dict[str, Any] = {"load_before": load()}
    previews = []
    for name, policy in scenarios().items():
        endpoint = Endpoint.objects.create(
            job=job, name=name, url="https://example.com/", baseline_interval_ms=60_000
        )
        Endpoint.objects.filter(pk=endpoint.pk).update(run_policy=policy)
        form = admin_form(job.pk, endpoint.pk, "https://example.com/", policy)
        form["initial-run_policy"] = json.dumps(policy)
        url = reverse("admin:endpoints_endpoint_preview", args=[endpoint.pk])
        previews.append((name, url, form))
    for name, url, form in previews:
        results[name] = measure(client, url, form, args.requests)
    if args.what_if:
        validate = Endpoint.validate_constraints
        Endpoint.validate_constraints = lambda self, exclude=None: None  # type: ignore[method-assign]
        for name, url, form in previews:
            results[f"{name}, no constraint queries"] = measure(client, url, form, args.requests)
        Endpoint.validate_constraints = validate  # type: ignore[method-assign]
    results["load_after"] = load()
    columns = ("requests", "queries", "first_ms", "p50_ms", "p99_ms", "max_ms", "cpu_p50_ms")
    rows = [[name, *(r[c] for c in columns)] for name, r in results.items() if isinstance(r, dict)]
    headers = ["policy", "requests", "queries", "first ms", "p50 ms", "p99 ms", "max ms", "CPU p50"]
    print_table(headers, rows)
    print(f"load before/after: {results['load_before']} / {results['load_after']}")
    write_results("admin_preview", results)


if __name__ == "__main__":
    main()
