"""Deleting an endpoint with a month of history: Django's delete against ``delete_for_good``.

Fills one endpoint with ``--runs`` finished runs spread over ``--days`` days (into the
week partitions on PostgreSQL; one in 100 a retry of the run before it) beside a second
endpoint with a few runs that must stay, then deletes the first endpoint, alternately:

- *Django's delete*: ``QuerySet.delete()`` in one transaction, what every interface did
  before (it reads each run's id into Python, ``retry_of`` being SET_NULL, and deletes
  100 at a time);
- *delete_for_good*: ``endpoints.operations.delete_for_good``, the runs set-based.

Each delete runs in a child process of its own on a fresh copy of the same history, so
its peak memory (the rise of the child's ``VmHWM``) is its own; reports wall time, CPU
of the child, statements, and the ratios before/after. Each child is killed after
``--timeout`` seconds (reported as such).

    .venv/bin/python bench/delete_cost.py [--runs 300000] [--days 30] [--sqlite] [--rounds 1]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from _common import bench_env, fresh_database, load, pg_url, print_table, setup_django, sqlite_url
from _common import write_results as save

DJANGO = "Django's delete"
OURS = "delete_for_good"


def fill(runs: int, days: int) -> int:
    """A fresh tenant with the endpoint to delete and one that stays; the first's id."""
    from datetime import timedelta

    from django.db import connection
    from django.utils import timezone

    from endpoints import operations
    from endpoints.engine import partitions
    from endpoints.models import Endpoint, Job, Run, Tenant

    # The previous round's (all of it, if Django's delete failed).
    operations.delete_for_good(Tenant.objects.all())
    now = timezone.now()
    first_day = now - timedelta(days=days)
    if connection.vendor == "postgresql":
        start = partitions.start_of(first_day)
        have = set(partitions.starts())
        while start < now:
            if start not in have:
                partitions.create(start)
            start += partitions.WIDTH
    tenant = Tenant.objects.create(name="bench", max_endpoints=10)
    job = Job.objects.create(tenant=tenant, name="history")
    doomed, kept = (
        Endpoint.objects.create(
            job=job, name=name, url="http://127.0.0.1:9/", baseline_interval_ms=1_000
        )
        for name in ("every second", "kept")
    )
    span = days * 86400.0
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(
                """
                INSERT INTO endpoints_run (endpoint_id, trigger, source, scheduled_for,
                    started_at, finished_at, duration_ms, status, status_code, request_method,
                    request_url, response_body, response_truncated, response_size_bytes,
                    error, attempt)
                SELECT %s, 'scheduled', 'baseline-interval', t, t, t + interval '0.05 s', 50,
                    'success', 200, 'GET', 'http://127.0.0.1:9/', '{"ok": true}'::jsonb,
                    false, 12, '', 1
                FROM generate_series(0, %s - 1) AS g, LATERAL (
                    SELECT %s::timestamptz + make_interval(secs => %s * g / %s)
                ) AS s(t)
                """,
                [doomed.pk, runs, first_day, span, runs],
            )
        else:
            start_s = first_day.timestamp()
            cursor.execute(
                """
                WITH RECURSIVE g(n) AS (SELECT 0 UNION ALL SELECT n + 1 FROM g WHERE n + 1 < %s)
                INSERT INTO endpoints_run (endpoint_id, trigger, source, scheduled_for,
                    started_at, finished_at, duration_ms, status, status_code, request_method,
                    request_url, response_body, response_truncated, response_size_bytes,
                    error, attempt, claim_token, lease_expires_at, response_headers,
                    retry_of_id)
                SELECT %s, 'scheduled', 'baseline-interval', t, t, t, 50, 'success', 200,
                    'GET', 'http://127.0.0.1:9/', '{"ok": true}', 0, 12, '', 1, NULL, NULL,
                    NULL, NULL
                FROM (SELECT strftime('%%Y-%%m-%%d %%H:%%M:%%f',
                        %s + %s * n / %s, 'unixepoch') AS t FROM g)
                """,
                [runs, doomed.pk, start_s, span, runs],
            )
    # One in 100 a retry of the run before it (what Django's SET_NULL looks for).
    ids = Run.objects.filter(endpoint=doomed).order_by("pk").values_list("pk", flat=True)
    retries = list(ids[1::100])
    Run.objects.filter(pk__in=retries).update(trigger="retry", attempt=2)
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE endpoints_run SET retry_of_id = id - 1 WHERE endpoint_id = %s"
            " AND trigger = 'retry'",
            [doomed.pk],
        )
    for k in range(5):
        at = now - timedelta(seconds=k)
        Run.objects.create(endpoint=kept, scheduled_for=at, started_at=at)
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("VACUUM ANALYZE endpoints_run")
    return doomed.pk


def peak_kb() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return 0


def child(variant: str, endpoint_id: int) -> None:
    """Delete the endpoint one way and print what it cost as JSON."""
    import resource

    from django.db import connection, transaction
    from django.test.utils import CaptureQueriesContext

    from endpoints import operations
    from endpoints.models import Endpoint, Run

    assert Run.objects.filter(endpoint_id=endpoint_id).exists(), "nothing to delete"
    before_kb = peak_kb()
    cpu = resource.getrusage(resource.RUSAGE_SELF)
    started = time.perf_counter()
    with CaptureQueriesContext(connection) as queries:
        objects = Endpoint.objects.filter(pk=endpoint_id)
        if variant == DJANGO:
            with transaction.atomic():
                objects.delete()
        else:
            operations.delete_for_good(objects)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_SELF)
    assert not Run.objects.filter(endpoint_id=endpoint_id).exists()
    assert Run.objects.count() == 5, "the other endpoint's runs stay"
    print(
        json.dumps(
            {
                "wall_s": round(wall, 3),
                "cpu_s": round(after.ru_utime + after.ru_stime - cpu.ru_utime - cpu.ru_stime, 3),
                "statements": len(queries),
                "peak_rise_mb": round((peak_kb() - before_kb) / 1024, 1),
            }
        )
    )


def measure(variant: str, url: str, endpoint_id: int, timeout: float) -> dict[str, Any]:
    command = [sys.executable, __file__, "--child", variant, "--endpoint", str(endpoint_id)]
    if url.startswith("sqlite"):
        command.append("--sqlite")
    try:
        done = subprocess.run(
            command, env=bench_env(url), capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        return {"timed_out_after_s": timeout}
    if done.returncode:  # Django's delete on SQLite past its limit of variables, say
        return {"failed": done.stderr.strip().splitlines()[-1]}
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=300_000)
    parser.add_argument("--days", type=int, default=30, help="days of history")
    parser.add_argument("--rounds", type=int, default=1, help="before/after alternations")
    parser.add_argument("--timeout", type=float, default=600.0, help="s per delete")
    parser.add_argument("--sqlite", action="store_true", help="SQLite instead of PostgreSQL")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--endpoint", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    url = sqlite_url("cc_bench_delete") if args.sqlite else pg_url("cc_bench_delete")
    if args.child:
        setup_django(url)
        child(args.child, args.endpoint)
        return
    fresh_database(url)
    setup_django(url)
    from django.db import connection

    loads = [load()]
    results: list[dict[str, Any]] = []
    for _ in range(args.rounds):
        for variant in (DJANGO, OURS):
            fill_started = time.perf_counter()
            endpoint_id = fill(args.runs, args.days)
            connection.close()
            filled = time.perf_counter() - fill_started
            print(f"{variant}: {args.runs} runs filled in {filled:.1f} s", flush=True)
            results.append({"variant": variant, **measure(variant, url, endpoint_id, args.timeout)})
            loads.append(load())
    headers = ["delete", "wall s", "cpu s", "statements", "peak rise MB"]
    keys = ["wall_s", "cpu_s", "statements", "peak_rise_mb"]
    print_table(headers, [[r["variant"], *(r.get(k, "-") for k in keys)] for r in results])
    for r in results:
        if "failed" in r or "timed_out_after_s" in r:
            print(f"{r['variant']}: {r.get('failed') or 'timed out'}")
    ratios = {}
    for key in keys:
        before = [r[key] for r in results if r["variant"] == DJANGO and key in r]
        after = [r[key] for r in results if r["variant"] == OURS and key in r]
        if before and after and min(after) > 0:
            ratios[key] = round(min(before) / min(after), 1)
    print(f"before/after (best of each): {ratios}; load {' | '.join(loads)}")
    backend = "sqlite" if args.sqlite else "postgresql"
    save(
        "delete_cost",
        {"args": vars(args), "backend": backend, "rows": results, "ratios": ratios, "load": loads},
    )


if __name__ == "__main__":
    main()
