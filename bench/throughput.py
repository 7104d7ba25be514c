"""Executions per second end to end (claim -> HTTP -> record -> reschedule).

Against a fast local server (bench/fast_server.py, a separate process), ``--n``
endpoints at a 1 s interval offer ``n`` runs/s; the completed runs per second over a
fixed window are the throughput (it can only be below the offer if the system cannot
keep up). Scenarios, each in its own process and database:

- ``celery-pg``: celery beat + a tick worker + ``--workers`` execute worker(s)
  (``-P threads -c --celery-concurrency``) on Redis (db 8) and PostgreSQL (cc_bench_celery);
- ``runscheduler-sqlite`` and ``runscheduler-pg``: ``manage.py runscheduler``;
- ``--chunks 1,10,50``: the Celery scenario again with that many claims per execute
  message (1 = one message per run), to show the per-message broker cost;
- ``--policy largest``: each scenario again with the largest run policy every endpoint's
  runs still succeed under (``LARGEST_POLICY``: the most windows of both kinds on every
  day, fifty status codes, retries, breaker, catch-up window), to show what the engine
  pays per run for a policy (issue 32: the policy is resolved once per content, a
  window is one lookup);

Baseline in the same run: the raw request rate of ``endpoints.engine.executor.perform_request``
against the same server on the same number of threads; each result is also given as a
ratio of that ceiling. CPU per run is read from /proc for every process involved.

    .venv/bin/python bench/throughput.py [--n 2000] [--window 20] [--only celery-pg] [--profile]
"""

from __future__ import annotations

import argparse
from typing import Any

from _common import load, print_table, write_results
from _profile import print_profile
from _scenario import Params, run_in_subprocess

TARGET = 1000
SCENARIOS = ("celery-pg", "runscheduler-sqlite", "runscheduler-pg")
# The largest policy the validation takes under which the fast target's answers still
# succeed and every minute of the day but 23:58-00:01 is free (no body check: the
# target's body is "ok"). Run the bench outside those minutes.
_EVERY_DAY = ["mon", "tue", "wed", "thu", "fri", "sat", "sun"]
LARGEST_POLICY: dict[str, Any] = {
    "expected_status": [*range(200, 249), "2xx"],
    "max_duration_ms": 60_000,
    "retry_attempts": 10,
    "retry_delay_ms": 1_000,
    "breaker_failed_slots": 1_000,
    "breaker_needs_person": True,
    "breaker_cooldown_ms": 60_000,
    "catchup_window_ms": 3_600_000,
    "backoff_cap_ms": 60_000,
    "allowed": [{"start": "00:00", "end": "23:59", "days": _EVERY_DAY}] * 20,
    "blackout": [{"start": "23:58", "end": "00:01", "days": _EVERY_DAY}] * 20,
    "active_from": "2026-01-01T00:00:00Z",
    "active_until": "2099-01-01T00:00:00Z",
}


def params_for(
    name: str, args: argparse.Namespace, chunk: int | None = None, *, policy: bool = False
) -> Params:
    mode, database = name.split("-")
    label = name if chunk is None else f"{name} chunk={chunk}"
    label += " largest policy" if policy else ""
    return Params(
        mode=mode,
        database="postgres" if database == "pg" else "sqlite",
        n=args.n,
        interval_ms=1000,
        warmup=args.warmup,
        window=args.window,
        threads=args.threads,
        in_flight=args.in_flight,
        celery_concurrency=args.celery_concurrency,
        workers=args.workers,
        batch=args.batch,
        chunk_size=chunk,
        label=label,
        extra_env={"CELERY_BROKER_URL": args.broker} if args.broker else {},
        database_suffix=args.database_suffix,
        profile=args.profile,
        run_policy=LARGEST_POLICY if policy else {},
    )


def row(result: dict[str, Any]) -> list[Any]:
    params, cpu = result["params"], result["cpu"]
    ceiling = result["raw_http"]["requests_per_s"]
    heaviest = max(cpu["cores_used_by_component"].items(), key=lambda item: item[1])
    return [
        params["label"],
        params["n"],
        result["runs_per_s"],
        ceiling,
        round(result["runs_per_s"] / ceiling, 2) if ceiling else "-",
        result["lateness_ms"]["p99"],
        cpu["cpu_ms_per_run_total"],
        f"{heaviest[0]} {heaviest[1]}",
        cpu["machine_cores_busy"],
        result["load_during"],
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=2000, help="endpoints at 1 s (the offer)")
    parser.add_argument("--warmup", type=float, default=5.0)
    parser.add_argument("--window", type=float, default=20.0)
    parser.add_argument("--threads", type=int, default=16, help="of the raw HTTP ceiling")
    parser.add_argument("--in-flight", type=int, default=200, help="CRONICORN_MAX_IN_FLIGHT")
    parser.add_argument("--celery-concurrency", type=int, default=4)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--batch", type=int, default=5000, help="CRONICORN_BATCH_SIZE")
    parser.add_argument("--only", default=",".join(SCENARIOS))
    parser.add_argument("--chunks", default="", help="e.g. 1,10,50: Celery chunk sizes")
    parser.add_argument(
        "--policy", choices=("empty", "largest"), default="empty",
        help="largest: each scenario also with LARGEST_POLICY, right after it",
    )  # fmt: skip
    parser.add_argument(
        "--profile", action="store_true", help="py-spy and pg_stat_statements over the window"
    )
    parser.add_argument("--broker", default="", help="CELERY_BROKER_URL (default: db 8)")
    parser.add_argument("--database-suffix", default="", help="cc_bench_<mode><suffix>")
    args = parser.parse_args()
    if not (1 <= args.n <= 20_000 and 1 <= args.window <= 300 and 0 <= args.warmup <= 60):
        raise SystemExit("Keep --n within 1..20000, --window 1..300 s, --warmup 0..60 s.")

    plans = []
    for name in filter(None, args.only.split(",")):
        plans.append(params_for(name, args))
        if args.policy == "largest":
            plans.append(params_for(name, args, policy=True))
    plans += [params_for("celery-pg", args, int(c)) for c in args.chunks.split(",") if c]
    results = []
    for params in plans:
        print(f"{params.label}: {params.n} endpoints at 1 s ... (load {load()})", flush=True)
        results.append(run_in_subprocess(params))
        print(f"  {results[-1]['runs_per_s']} runs/s", flush=True)

    print()
    print_table(
        [
            "scenario",
            "offer/s",
            "runs/s",
            "raw http/s",
            "x raw",
            "p99 late ms",
            "cpu ms/run",
            "busiest (cores)",
            "cores busy",
            "load 1/5/15",
        ],
        [row(result) for result in results],
    )
    for result in results:
        if "profile" in result:
            print_profile(result["params"]["label"], result["profile"], print_table)
    print(f"\ntarget: at least {TARGET} executions/s through Celery on this machine")
    write_results("throughput", {"args": vars(args), "results": results})


if __name__ == "__main__":
    main()
