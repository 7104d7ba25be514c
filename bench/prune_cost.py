"""Retention at scale: what pruning old runs costs, and how fast one endpoint's history
reads with many rows.

Fills ``endpoints_run`` with ``--rows`` finished runs of ``--endpoints`` endpoints, spread
evenly over the ``--days`` days before the current partition (plain SQL,
``generate_series``), into the week partitions of the PostgreSQL history (issue 23); then:

- reads one endpoint's last 50 runs (the admin's and the API's history query) 20 times,
  through the ORM and with ``EXPLAIN ANALYZE`` (the server's planning and execution);
- prunes the oldest week (``--rows * 7 / --days`` runs) alternately by dropping its
  partition (``maintenance.prune_runs``'s path) and with the set-based statements (by
  ranges of ``started_at``, what deletes the partition that straddles an exact cutoff),
  each on a fresh copy of the same history, and with ``--orm`` the per-endpoint ORM loop
  (≈ 3 000 rows/s: keep it to a few 100 000 rows); reports rows/s and the CPU (this
  process and the PostgreSQL server process), and what a day of history at ``--rate``
  runs/s costs.

    .venv/bin/python bench/prune_cost.py [--rows 2000000] [--endpoints 2000] [--days 14]
    .venv/bin/python bench/prune_cost.py --rows 10000000 --days 30 --history-only
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from datetime import datetime, timedelta
from typing import Any

from _common import fresh_database, load, pg_url, print_table, setup_django
from _common import write_results as save
from _cpu import cpu_seconds

DROP = "drop the week's partition"
SET_BASED = "set-based delete"
ORM = "per endpoint (ORM)"


def fill(rows: int, endpoints: int, days: int) -> datetime:
    """Fill the history; returns its first instant."""
    from django.db import connection
    from django.utils import timezone

    from endpoints.engine import partitions
    from endpoints.models import Endpoint, Job, Tenant

    with connection.cursor() as cursor:
        cursor.execute("TRUNCATE endpoints_run")
    end = partitions.start_of(timezone.now())
    first_day = end - timedelta(days=days)
    have = set(partitions.starts())
    start = partitions.start_of(first_day)
    while start < end:
        if start not in have:
            assert partitions.create(start), start
        start += partitions.WIDTH
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
        # of the first day: every endpoint's runs spread over the whole span, in time order.
        cursor.execute(
            """
            INSERT INTO endpoints_run (endpoint_id, trigger, source, scheduled_for, started_at,
                finished_at, duration_ms, status, status_code, request_method, request_url,
                response_body, response_truncated, response_size_bytes, error, attempt)
            SELECT %s + g %% %s, 'scheduled', 'baseline-interval', t, t, t + interval '0.05 s',
                50, 'success', 200, 'GET', 'http://127.0.0.1:9/', '{"ok": true}'::jsonb,
                false, 12, '', 1
            FROM generate_series(0, %s - 1) AS g, LATERAL (
                SELECT %s::timestamptz + make_interval(secs => %s * g / %s)
            ) AS s(t)
            """,
            [first, endpoints, rows, first_day, span, rows],
        )
        cursor.execute("VACUUM ANALYZE endpoints_run")
    return first_day


def history_query_ms(endpoints: int, plain: bool) -> dict[str, float]:
    """One endpoint's last 50 runs; with ``plain``, the server's time on an unpartitioned
    copy of the same rows too (``bench_run_plain``, its history index only)."""
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
    tables = ["endpoints_run"]
    if plain:
        tables.append("bench_run_plain")
        with connection.cursor() as cursor:
            cursor.execute("DROP TABLE IF EXISTS bench_run_plain")
            cursor.execute("CREATE TABLE bench_run_plain AS SELECT * FROM endpoints_run")
            cursor.execute(
                "CREATE INDEX bench_run_plain_history ON bench_run_plain"
                " (endpoint_id, started_at DESC)"
            )
            cursor.execute("VACUUM ANALYZE bench_run_plain")
    server: dict[str, list[float]] = {table: [] for table in tables}
    planning: dict[str, list[float]] = {table: [] for table in tables}
    with connection.cursor() as cursor:
        for endpoint_id in ids[:20]:
            for table in tables:
                cursor.execute(
                    f"EXPLAIN (ANALYZE, FORMAT JSON) SELECT * FROM {table}"
                    " WHERE endpoint_id = %s ORDER BY started_at DESC LIMIT 50",
                    [endpoint_id],
                )
                plan = cursor.fetchone()[0]
                plan = json.loads(plan) if isinstance(plan, str) else plan
                server[table].append(plan[0]["Execution Time"])
                planning[table].append(plan[0]["Planning Time"])
        if plain:
            cursor.execute("DROP TABLE bench_run_plain")
    reset_queries()
    connection.close()
    figures = {
        "orm_median_ms": round(statistics.median(times), 3),
        "orm_max_ms": round(max(times), 3),
    }
    for table, label in (("endpoints_run", "server"), ("bench_run_plain", "plain")):
        if table in tables:
            figures[f"{label}_median_ms"] = round(statistics.median(server[table]), 3)
            figures[f"{label}_max_ms"] = round(max(server[table]), 3)
            figures[f"{label}_planning_median_ms"] = round(statistics.median(planning[table]), 3)
    figures["load"] = load()
    return figures


def prune_with(which: str, cutoff: datetime) -> dict[str, Any]:
    """Prune every run started before ``cutoff`` (the end of the first week) one way."""
    from django.conf import settings
    from django.db import connection

    from endpoints.engine import maintenance
    from endpoints.engine.sql import fetch
    from endpoints.models import Run

    keep = settings.CRONICORN_RUN_RETENTION_KEEP
    connection.ensure_connection()
    backend = connection.connection.info.backend_pid
    total = Run.objects.count()
    server_before, cpu_before, started = (
        cpu_seconds(backend),
        time.process_time(),
        time.perf_counter(),
    )
    if which == DROP:
        deleted = maintenance._prune_partitions(cutoff, keep, exact=False)
    elif which == SET_BASED:
        floors = fetch(maintenance._PRUNE_FLOORS, [keep - 1, cutoff])
        deleted = maintenance._prune_postgresql(cutoff, keep, floors)
    else:
        deleted = maintenance._prune_by_endpoint(cutoff, keep)
    wall = time.perf_counter() - started
    cpu, server = time.process_time() - cpu_before, cpu_seconds(backend) - server_before
    connection.close()
    return {
        "how": which,
        "rows": total,
        "deleted": deleted,
        "wall_s": round(wall, 3),
        "rows_per_s": round(deleted / wall),
        "python_cpu_s": round(cpu, 3),
        "postgres_cpu_s": round(server, 3),
        "python_us_per_row": round(1e6 * cpu / max(deleted, 1), 3),
        "postgres_us_per_row": round(1e6 * server / max(deleted, 1), 3),
        "load": load(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--endpoints", type=int, default=2_000)
    parser.add_argument("--days", type=int, default=14, help="days of history")
    parser.add_argument("--rate", type=float, default=2000.0, help="runs/s for the day figure")
    parser.add_argument("--rounds", type=int, default=1, help="drop/set-based alternations")
    parser.add_argument("--orm", action="store_true", help="also the ORM loop (slow)")
    parser.add_argument("--history-only", action="store_true", help="fill and read; no prune")
    parser.add_argument(
        "--compare-plain", action="store_true", help="also read an unpartitioned copy"
    )
    args = parser.parse_args()
    if not 10_000 <= args.rows <= 20_000_000:
        raise SystemExit("Keep --rows within 10 000..20 000 000 (the disk is shared).")
    if not 7 <= args.days <= 31 or not (args.history_only or args.days % 7 == 0):
        raise SystemExit("Keep --days within 7..31, whole weeks unless --history-only.")
    # Its own database, so a history-only run of a month can go beside a prune run.
    url = pg_url("cc_bench_prune_month" if args.history_only else "cc_bench_prune")
    fresh_database(url)
    setup_django(url)
    results, history = [], []
    ways = [] if args.history_only else [DROP, SET_BASED] + ([ORM] if args.orm else [])
    for _round in range(1 if args.history_only else args.rounds):
        for which in ways or [None]:
            first_day = fill(args.rows, args.endpoints, args.days)
            history.append(history_query_ms(args.endpoints, args.compare_plain))
            if which:
                results.append(prune_with(which, first_day + timedelta(days=7)))
    print(
        f"history: {args.rows} runs of {args.endpoints} endpoints over {args.days} days"
        f" in week partitions; load {load()}"
    )
    print("one endpoint's last 50 runs (ms):")
    print_table(list(history[0]), [list(h.values()) for h in history])
    if not results:
        save("prune_cost", {"args": vars(args), "history_ms": history})
        return
    print_table(
        [
            "how",
            "rows",
            "deleted",
            "wall s",
            "rows/s",
            "python CPU s",
            "postgres CPU s",
            "python µs/row",
            "postgres µs/row",
            "load",
        ],
        [list(r.values()) for r in results],
    )
    day = args.rate * 86400
    for r in results:
        # Linear in rows: an upper bound for the drop, whose DDL does not grow with them.
        per_row = (r["python_us_per_row"] + r["postgres_us_per_row"]) / 1e6
        print(
            f"{r['how']}: a day at {args.rate:.0f} runs/s ({day:.3g} rows) costs "
            f"{per_row * day:.1f} CPU s, {100 * per_row * day / 86400:.3f} % of a core"
        )
    save("prune_cost", {"args": vars(args), "rows": results, "history_ms": history})


if __name__ == "__main__":
    main()
