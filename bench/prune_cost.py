"""Retention at scale: what pruning old runs costs, and how fast one endpoint's history
reads with many rows.

Fills ``endpoints_run`` with ``--rows`` finished runs of ``--endpoints`` endpoints, spread
evenly over the last ``--days`` days (plain SQL, ``generate_series``), half of them older
than the retention; then:

- reads one endpoint's last 50 runs (the admin's and the API's history query) 20 times;
- prunes with the set-based PostgreSQL retention (``maintenance.prune_runs``) and, with
  ``--orm``, with the per-endpoint ORM loop it replaced (≈ 3 000 rows/s: keep it to a
  few 100 000 rows), each on a fresh copy of the same history, alternately; reports
  rows/s and the CPU per row (this process and the PostgreSQL server process), and what
  a day of history at ``--rate`` runs/s would cost.

    .venv/bin/python bench/prune_cost.py [--rows 2000000] [--endpoints 2000]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from datetime import timedelta
from typing import Any

from _common import fresh_database, load, pg_url, print_table, setup_django
from _common import write_results as save
from _scenario import cpu_seconds

RETENTION_DAYS = 1


def fill(rows: int, endpoints: int, days: float) -> None:
    from django.db import connection
    from django.utils import timezone

    from endpoints.models import Endpoint, Job, Tenant

    with connection.cursor() as cursor:
        cursor.execute("TRUNCATE endpoints_run")
    if not Endpoint.objects.exists():
        tenant = Tenant.objects.create(name="bench", max_endpoints=endpoints + 10)
        job = Job.objects.create(tenant=tenant, name="history")
        later = timezone.now() + timedelta(days=1)
        Endpoint.objects.bulk_create(
            [
                Endpoint(
                    job=job,
                    name=f"e{i}",
                    url="http://127.0.0.1:9/",
                    baseline_interval_ms=60_000,
                    next_run_at=later,
                    next_run_source="baseline-interval",
                )
                for i in range(endpoints)
            ],
            batch_size=2000,
        )
    first = Endpoint.objects.order_by("pk").values_list("pk", flat=True).first()
    span = days * 86400.0
    with connection.cursor() as cursor:
        # Run g is endpoint g % endpoints, started (span * g / rows) seconds after the start
        # of the span: every endpoint's runs spread over the whole span, in time order.
        cursor.execute(
            """
            INSERT INTO endpoints_run (endpoint_id, trigger, source, scheduled_for, started_at,
                finished_at, duration_ms, status, status_code, request_method, request_url,
                response_body, response_truncated, response_size_bytes, error, attempt)
            SELECT %s + g %% %s, 'scheduled', 'baseline-interval', t, t, t + interval '0.05 s',
                50, 'success', 200, 'GET', 'http://127.0.0.1:9/', '{"ok": true}'::jsonb,
                false, 12, '', 1
            FROM generate_series(0, %s - 1) AS g, LATERAL (
                SELECT now() - make_interval(secs => %s) + make_interval(secs => %s * g / %s)
            ) AS s(t)
            """,
            [first, endpoints, rows, span, span, rows],
        )
        cursor.execute("VACUUM ANALYZE endpoints_run")


def history_query_ms(endpoints: int) -> dict[str, float]:
    from django.db import connection, reset_queries

    from endpoints.models import Endpoint, Run

    ids = list(
        Endpoint.objects.order_by("pk").values_list("pk", flat=True)[:: max(1, endpoints // 20)]
    )
    times = []
    for endpoint_id in ids[:20]:
        started = time.perf_counter()
        got = list(Run.objects.filter(endpoint_id=endpoint_id).order_by("-started_at")[:50])
        times.append(1000 * (time.perf_counter() - started))
        assert len(got) == 50, len(got)
    server = []
    with connection.cursor() as cursor:
        for endpoint_id in ids[:20]:
            cursor.execute(
                "EXPLAIN (ANALYZE, FORMAT JSON) SELECT * FROM endpoints_run"
                " WHERE endpoint_id = %s ORDER BY started_at DESC LIMIT 50",
                [endpoint_id],
            )
            plan = cursor.fetchone()[0]
            plan = json.loads(plan) if isinstance(plan, str) else plan
            server.append(plan[0]["Execution Time"])
    reset_queries()
    connection.close()
    return {
        "orm_median_ms": round(statistics.median(times), 3),
        "orm_max_ms": round(max(times), 3),
        "server_median_ms": round(statistics.median(server), 3),
        "server_max_ms": round(max(server), 3),
    }


def prune_with(which: str) -> dict[str, Any]:
    from django.conf import settings
    from django.db import connection
    from django.utils import timezone

    from endpoints.engine import maintenance
    from endpoints.models import Run

    settings.CRONICORN_RUN_RETENTION_DAYS = RETENTION_DAYS
    connection.ensure_connection()
    backend = connection.connection.info.backend_pid
    total = Run.objects.count()
    server_before, cpu_before, started = (
        cpu_seconds(backend),
        time.process_time(),
        time.perf_counter(),
    )
    if which == "set-based (PostgreSQL)":
        deleted = maintenance.prune_runs(now=timezone.now())
    else:
        now = timezone.now()
        deleted = maintenance._prune_by_endpoint(
            now - timedelta(days=RETENTION_DAYS), settings.CRONICORN_RUN_RETENTION_KEEP
        )
    wall = time.perf_counter() - started
    cpu, server = time.process_time() - cpu_before, cpu_seconds(backend) - server_before
    connection.close()
    return {
        "how": which,
        "rows": total,
        "deleted": deleted,
        "rows_per_s": round(deleted / wall),
        "python_us_per_row": round(1e6 * cpu / max(deleted, 1), 2),
        "postgres_us_per_row": round(1e6 * server / max(deleted, 1), 2),
        "load": load(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--endpoints", type=int, default=2_000)
    parser.add_argument("--rate", type=float, default=2000.0, help="runs/s for the day figure")
    parser.add_argument("--rounds", type=int, default=1, help="old/new alternations")
    parser.add_argument("--orm", action="store_true", help="also the ORM loop (slow)")
    args = parser.parse_args()
    if not 10_000 <= args.rows <= 20_000_000:
        raise SystemExit("Keep --rows within 10 000..20 000 000 (the disk is shared).")
    url = pg_url("cc_bench_prune")
    fresh_database(url)
    setup_django(url)
    results, history = [], []
    for _round in range(args.rounds):
        ways = ["set-based (PostgreSQL)"] + (["per endpoint (ORM)"] if args.orm else [])
        for which in ways:
            fill(args.rows, args.endpoints, days=2 * RETENTION_DAYS)
            history.append(history_query_ms(args.endpoints))
            results.append(prune_with(which))
    print(f"history: {args.rows} runs of {args.endpoints} endpoints over 2 days; load {load()}")
    print(f"one endpoint's last 50 runs: {history}")
    print_table(
        ["how", "rows", "deleted", "rows/s", "python µs/row", "postgres µs/row", "load"],
        [list(r.values()) for r in results],
    )
    day = args.rate * 86400
    for r in results:
        per_row = (r["python_us_per_row"] + r["postgres_us_per_row"]) / 1e6
        print(
            f"{r['how']}: a day at {args.rate:.0f} runs/s ({day:.3g} rows) costs "
            f"{per_row * day:.0f} CPU s, {100 * per_row * day / 86400:.2f} % of a core"
        )
    save("prune_cost", {"args": vars(args), "rows": results, "history_ms": history})


if __name__ == "__main__":
    main()
