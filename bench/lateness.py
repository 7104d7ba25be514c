"""Lateness of start times (Run.started_at - Run.scheduled_for) at a steady rate.

``--n`` endpoints at ``--interval-ms`` (default 200 at 1 s: 200 runs/s), their first
runs spread evenly over one interval, run for ``--window`` seconds after a warm-up,
through Celery (beat + tick worker + execute worker, Redis db 8, PostgreSQL) and through
``manage.py runscheduler`` (SQLite and PostgreSQL), each in its own process and
database, against the fast local server. Reports p50/p95/p99/max over every slot
scheduled inside the window, and how many of the expected slots started.

The window (after ``--warmup``) is the steady state; the cold start is reported apart:
lateness per second due from the fleet's first slot (``--per-second`` prints every
second: slots due, mean, p99, max) and the time until on time (from then on every
second's p99 under 100 ms).

``--outage S`` (Celery) then stops the beat for S seconds, so nothing is claimed, resumes
it and reports the time until on time again after the resume, per second with
``--per-second``, and the second half of ``--after-outage`` (60 s) as a steady state.

``--lead`` adds a what-if for each scenario: ticks every 0.5 s with the 1 s horizon
(bench/whatif_settings.py), so every slot is claimed at least 0.5 s before it is due.

    .venv/bin/python bench/lateness.py [--n 200] [--interval-ms 1000] [--window 30] [--lead]
"""

from __future__ import annotations

import argparse
from typing import Any

from _common import load, print_table, write_results
from _profile import print_profile
from _scenario import Params, run_in_subprocess

TARGET_P99_MS = 100.0
SCENARIOS = ("celery-pg", "runscheduler-sqlite", "runscheduler-pg")
WHAT_IF_LEAD = {"DJANGO_SETTINGS_MODULE": "bench.whatif_settings", "BENCH_TICK_SECONDS": "0.5"}


def params_for(name: str, args: argparse.Namespace, *, lead: bool) -> Params:
    mode, database = name.split("-")
    return Params(
        mode=mode,
        database="postgres" if database == "pg" else "sqlite",
        n=args.n,
        interval_ms=args.interval_ms,
        warmup=args.warmup,
        window=args.window,
        threads=args.threads,
        in_flight=args.in_flight,
        batch=args.batch,
        workers=args.workers,
        label=f"{name} lead 0.5s" if lead else name,
        extra_env=WHAT_IF_LEAD if lead else {},
        profile=args.profile,
        outage=args.outage,
        after_outage=args.after_outage,
    )


def row(result: dict[str, Any]) -> list[Any]:
    params, late = result["params"], result["lateness_ms"]
    expected = params["n"] * params["window"] * 1000 / params["interval_ms"]
    return [
        params["label"],
        round(params["n"] * 1000 / params["interval_ms"]),
        result["runs_per_s"],
        f"{result['slots_started']}/{round(expected)}",
        late["p50"],
        late["p95"],
        late["p99"],
        late["max"],
        result["cpu"]["machine_cores_busy"],
        result["load_during"],
        fleet_says(result.get("fleet")),
    ]


def fleet_says(fleet: dict[str, Any] | None) -> str:
    """What scheduler_status and the dashboard said at the window's end."""
    if fleet is None:
        return "(no such warning)"
    return f"behind {fleet['behind_seconds']} s" if fleet["fleet_behind"] else "keeping up"


def print_outage(label: str, outage: dict[str, Any], per_second: bool) -> None:
    after = outage["on_time_after_resume_s"]
    said = "not within the watch" if after is None else f"{after} s after the resume"
    late = outage["lateness_ms"]
    print(
        f"{label}: beat stopped {outage['seconds']} s ({outage['slots_due_during']} slots due"
        f" meanwhile); on time (p99 < 100 ms every second) {said}; second half of the watch:"
        f" p50 {late['p50']} ms, p99 {late['p99']} ms, {outage['slots_started']} slots"
    )
    if per_second:
        print_table(
            ["second after resume", "slots", "mean ms", "p99 ms", "max ms"],
            [
                [s["second"], s["due"], s["mean_ms"], s["p99_ms"], s["max_ms"]]
                for s in outage["after"]
            ],
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=200)
    parser.add_argument("--interval-ms", type=int, default=1000)
    parser.add_argument("--warmup", type=float, default=5.0)
    parser.add_argument("--window", type=float, default=30.0)
    parser.add_argument("--threads", type=int, default=16, help="of the raw HTTP ceiling")
    parser.add_argument("--in-flight", type=int, default=200, help="CRONICORN_MAX_IN_FLIGHT")
    parser.add_argument("--batch", type=int, default=5000, help="CRONICORN_BATCH_SIZE")
    parser.add_argument("--workers", type=int, default=1, help="Celery execute worker processes")
    parser.add_argument("--only", default=",".join(SCENARIOS))
    parser.add_argument("--lead", action="store_true", help="also claim 0.5 s ahead")
    parser.add_argument("--per-second", action="store_true", help="print lateness per second")
    parser.add_argument(
        "--profile", action="store_true", help="py-spy and pg_stat_statements over the window"
    )
    parser.add_argument(
        "--outage",
        type=float,
        default=0.0,
        help="after the window, stop the Celery beat this many seconds (nothing claimed)",
    )
    parser.add_argument("--after-outage", type=float, default=60.0, help="seconds watched after")
    args = parser.parse_args()
    if not (1 <= args.n <= 20_000 and args.interval_ms >= 1000 and 1 <= args.window <= 300):
        raise SystemExit("Keep --n within 1..20000, --interval-ms >= 1000, --window 1..300 s.")
    if not (0 <= args.outage <= 600 and 10 <= args.after_outage <= 300):
        raise SystemExit("Keep --outage within 0..600 s and --after-outage within 10..300 s.")

    plans = [params_for(name, args, lead=False) for name in args.only.split(",")]
    if args.lead:
        plans += [params_for(name, args, lead=True) for name in args.only.split(",")]
    results = []
    for params in plans:
        print(f"{params.label}: {args.n} endpoints every {args.interval_ms} ms (load {load()})")
        results.append(run_in_subprocess(params))
        print(f"  p99 {results[-1]['lateness_ms']['p99']} ms", flush=True)

    print()
    print_table(
        [
            "scenario",
            "offer/s",
            "runs/s",
            "slots started",
            "p50 ms",
            "p95 ms",
            "p99 ms",
            "max ms",
            "cores busy",
            "load 1/5/15",
            "status says",
        ],
        [row(result) for result in results],
    )
    for result in results:
        figures = result.get("per_second", {})
        after = figures.get("on_time_after_s")
        said = "never (within the run)" if after is None else f"{after} s after the first slot"
        print(f"{result['params']['label']}: on time (p99 < 100 ms every second) {said}")
        if at := result.get("at_target"):
            print(
                f"  at the target (arrival - slot): p50 {at['p50']} ms, p95 {at['p95']} ms,"
                f" p99 {at['p99']} ms, max {at['max']} ms over {at['slots']} slots; endpoints"
                f" whose calls and runs differ: {at['endpoints_mismatched']}, slots run"
                f" twice: {at['slots_run_twice']}"
            )
        for name, generations in result.get("gc", {}).items():
            if full := generations.get("2"):
                print(
                    f"  {name}: {full['collections']} full garbage collections in the window,"
                    f" the longest {full['longest_ms']} ms, {full['total_ms']} ms in all"
                )
        if args.per_second:
            print_table(
                ["second due", "slots", "mean ms", "p99 ms", "max ms"],
                [
                    [s["second"], s["due"], s["mean_ms"], s["p99_ms"], s["max_ms"]]
                    for s in figures.get("seconds", [])
                ],
            )
        if "outage" in result:
            print_outage(result["params"]["label"], result["outage"], args.per_second)
        if "profile" in result:
            print_profile(result["params"]["label"], result["profile"], print_table)
    print(f"\ntarget: p99 under {TARGET_P99_MS:.0f} ms at a steady 200 runs/s")
    write_results("lateness", {"args": vars(args), "results": results})


if __name__ == "__main__":
    main()
