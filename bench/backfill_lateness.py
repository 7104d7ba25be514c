"""The live schedule's start lateness while a 10 000-slot backfill runs, against without,
in one run (issue 33: the goal is within 2x).

``runscheduler`` on PostgreSQL, ``--n`` live endpoints at ``--interval-ms`` (default 100
at 1 s: 100 runs/s) against the fast local server. After ``--warmup`` a first window of
``--window`` seconds without a backfill; then a backfill of the 10 000 minutes of a
``* * * * *`` endpoint of another tenant (ending an hour ago) is started at ``--rate``
runs a second, and a second window of ``--window`` seconds is measured while it runs;
then it is cancelled and a third, quiet again (the machine's drift between the two quiet
windows says how far to trust the ratio; it is taken against the worse of them).
Reports the live endpoints' scheduled runs' lateness (started_at - scheduled_for)
p50/p95/p99/max in each window, the ratio of the p99s, and the backfill's runs started
in its window (its achieved rate).

    .venv/bin/python bench/backfill_lateness.py [--n 100] [--window 30] [--rate 100]
"""

from __future__ import annotations

import argparse
import sys
from datetime import datetime, timedelta
from typing import Any

from _common import bench_env, fresh_database, load, print_table, setup_django, write_results
from _scenario import (
    FAR_FUTURE,
    Params,
    Processes,
    _sleep_until,
    free_port,
    make_due,
    make_endpoints,
    start_runscheduler,
    wait_until,
)

SLOTS = 10_000
GOAL = 2.0


def lateness(start: datetime, end: datetime) -> dict[str, Any]:
    from _common import percentile

    from endpoints.models import Run, RunTrigger

    late_ms = [
        (started - scheduled).total_seconds() * 1000
        for started, scheduled in Run.objects.filter(
            endpoint__job__name="load",
            trigger=RunTrigger.SCHEDULED,
            scheduled_for__gte=start,
            scheduled_for__lt=end,
        ).values_list("started_at", "scheduled_for")
    ]
    return {
        "slots": len(late_ms),
        "p50": round(percentile(late_ms, 0.50), 1),
        "p95": round(percentile(late_ms, 0.95), 1),
        "p99": round(percentile(late_ms, 0.99), 1),
        "max": round(max(late_ms), 1) if late_ms else None,
    }


def backfill_endpoint(url: str) -> Any:
    from django.utils import timezone

    from endpoints.models import Endpoint, Job, Tenant

    tenant = Tenant.objects.create(name="history")
    job = Job.objects.create(tenant=tenant, name="replay")
    return Endpoint.objects.create(
        job=job,
        name="minutely",
        url=f"{url}?backfill=1",
        baseline_cron="* * * * *",
        timeout_ms=5000,
        next_run_at=timezone.now() + FAR_FUTURE,
        next_run_source="baseline-cron",
    )


def run(args: argparse.Namespace) -> dict[str, Any]:
    params = Params(
        mode="runscheduler",
        database="postgres",
        n=args.n,
        interval_ms=args.interval_ms,
        warmup=args.warmup,
        # runscheduler's --duration covers the three windows and the pauses between them.
        window=3 * args.window + 15,
        database_suffix="_backfill",
        label="runscheduler-pg",
    )
    url = params.database_url()
    env = bench_env(url, CRONICORN_MAX_IN_FLIGHT=str(params.in_flight))
    fresh_database(url)
    setup_django(url, **env)
    from django.utils import timezone

    from endpoints.backfill import backfill_progress, cancel_backfill, start_backfill
    from endpoints.models import Run, RunTrigger

    result: dict[str, Any] = {"params": vars(args), "load_before": load()}
    with Processes(env) as procs:
        port = free_port()
        procs.start("server", [sys.executable, "bench/fast_server.py", str(port)])
        if not wait_until(lambda: "ready" in procs.log("server"), timeout=20):
            raise RuntimeError("the fast server did not start")
        target = f"http://127.0.0.1:{port}/ping"
        make_endpoints(params, target)
        start_runscheduler(params, procs)
        first = make_due(params)
        quiet = (first + timedelta(seconds=args.warmup), args.window)
        quiet_end = quiet[0] + timedelta(seconds=quiet[1])
        history = backfill_endpoint(target)
        _sleep_until(quiet_end)
        end = timezone.now().replace(second=0, microsecond=0) - timedelta(hours=1)
        backfill = start_backfill(
            endpoint=history,
            start=end - timedelta(minutes=SLOTS),
            end=end,
            rate=args.rate,
            requested_by="bench",
        )
        busy_start = timezone.now() + timedelta(seconds=2)  # the loop has picked it up
        busy_end = busy_start + timedelta(seconds=args.window)
        result["load_during"] = load()
        _sleep_until(busy_end + timedelta(seconds=2))
        progress = backfill_progress(backfill)
        cancel_backfill(backfill)
        # Without again, once the backfill's last runs are done: the machine's own
        # drift (other load) shows as a difference between the two quiet windows.
        after_start = timezone.now() + timedelta(seconds=2)
        after_end = after_start + timedelta(seconds=args.window)
        _sleep_until(after_end + timedelta(seconds=2))
        backfilled = Run.objects.filter(
            trigger=RunTrigger.BACKFILL, started_at__gte=busy_start, started_at__lt=busy_end
        ).count()
        result.update(
            without=lateness(quiet[0], quiet_end),
            during=lateness(busy_start, busy_end),
            without_after=lateness(after_start, after_end),
            backfill={
                "slots": backfill.total,
                "runs_started_in_window": backfilled,
                "rate_achieved": round(backfilled / args.window, 1),
                "progress_at_end": {k: progress[k] for k in ("succeeded", "failed", "skipped")},
            },
            alive={name: child.poll() is None for name, child in procs.children.items()},
            load_after=load(),
        )
    # Against the quiet windows before and after it, together.
    without = max(result["without"]["p99"], result["without_after"]["p99"])
    result["p99_ratio"] = round(result["during"]["p99"] / without, 2) if without else None
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=100)
    parser.add_argument("--interval-ms", type=int, default=1000)
    parser.add_argument("--warmup", type=float, default=5.0)
    parser.add_argument("--window", type=float, default=30.0)
    parser.add_argument("--rate", type=float, default=100.0)
    args = parser.parse_args()
    result = run(args)
    rows = [
        [name, f["slots"], f["p50"], f["p95"], f["p99"], f["max"]]
        for name, f in (
            ("without (before)", result["without"]),
            ("during backfill", result["during"]),
            ("without (after)", result["without_after"]),
        )
    ]
    print_table(["live endpoints", "slots", "p50 ms", "p95 ms", "p99 ms", "max ms"], rows)
    bf = result["backfill"]
    print(
        f"backfill: {bf['slots']} slots at {args.rate:g}/s; {bf['runs_started_in_window']} runs "
        f"started in the window ({bf['rate_achieved']}/s); p99 during / the worse quiet one: "
        f"{result['p99_ratio']} (goal <= {GOAL:g})"
    )
    print(f"results: {write_results('backfill_lateness', result)}")


if __name__ == "__main__":
    main()
