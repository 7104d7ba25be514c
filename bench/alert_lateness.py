"""Does a dead alert channel delay runs, or other channels' alerts? Start lateness and
alert delay with and without dead channels.

Each scenario: ``--n`` healthy endpoints at 1 s against the fast local server, plus
``--failing`` endpoints that fail on every run (a refused port), each in its own job
with an alert rule firing after one failure, so every one of them is an alert and a
delivery of its own. ``quiet`` has no channel; ``dead`` adds ``--dead`` webhook channels
on a port that accepts connections and never answers, so every send waits for its
deadline (``CRONICORN_NOTIFY_TIMEOUT_SECONDS``, 2 s here) and is retried every second.
Alerts are sent by the notify loop of runscheduler and by the Celery notify worker.

With ``--live`` (the default) both scenarios also have one webhook channel to a receiver
in this process, and the failing endpoints' rule fires after ``--after`` failures: the
alert delay is each failing alert's arrival at the receiver minus the end of the run that
made its streak reach ``--after`` failures (the issue-24 question: does a dead channel of
the tenant hold back the live one?).

Reports lateness p50/p95/p99/max of every slot in the window, the ratio dead/quiet of
p99, the delivery attempts made in the window (so the dead channel was really hit) and
the alert delay p50/p95/max with how many failing endpoints alerted.

    .venv/bin/python bench/alert_lateness.py [--n 200] [--failing 50] [--dead 3] [--window 30]
        [--after 3] [--no-live]
"""

from __future__ import annotations

import argparse
from typing import Any

from _common import load, print_table, write_results
from _scenario import Params, run_in_subprocess

SCENARIOS = ("runscheduler-pg", "celery-pg")
ALERT_ENV = {
    "CRONICORN_NOTIFY_SECONDS": "0.5",
    "CRONICORN_ALERT_DIGEST_SECONDS": "0",
    "CRONICORN_NOTIFY_TIMEOUT_SECONDS": "2",
    "CRONICORN_NOTIFY_RETRY_SECONDS": "1",
    "CRONICORN_NOTIFY_MAX_ATTEMPTS": "1000",
}


def params_for(name: str, args: argparse.Namespace, *, dead: int) -> Params:
    mode, database = name.split("-")
    env = dict(ALERT_ENV)
    if args.broker:
        env["CELERY_BROKER_URL"] = args.broker
    return Params(
        mode=mode,
        database="postgres" if database == "pg" else "sqlite",
        n=args.n,
        interval_ms=1000,
        warmup=args.warmup,
        window=args.window,
        failing=args.failing,
        dead_channels=dead,
        after_failures=args.after,
        live_channel=args.live,
        database_suffix=args.database_suffix,
        label=f"{name} {'dead' if dead else 'quiet'}",
        extra_env=env,
    )


def row(result: dict[str, Any], quiet: dict[str, Any] | None) -> list[Any]:
    late = result["lateness_ms"]
    ratio = round(late["p99"] / quiet["lateness_ms"]["p99"], 2) if quiet else "—"
    return [
        result["params"]["label"],
        result["runs_per_s"],
        late["p50"],
        late["p95"],
        late["p99"],
        late["max"],
        ratio,
        result["delivery_attempts_in_window"],
        result["failed_attempts_in_window"],
        *delay_columns(result),
        result["load_during"],
    ]


def delay_columns(result: dict[str, Any]) -> list[Any]:
    if "alert_delay_ms" not in result:
        return ["—", "—", "—"]
    delay = result["alert_delay_ms"]
    return [f"{result['alerted']}/{result['failing_endpoints']}", delay["p50"], delay["max"]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=200)
    parser.add_argument("--failing", type=int, default=50)
    parser.add_argument("--dead", type=int, default=3, help="dead webhook channels")
    parser.add_argument("--after", type=int, default=3, help="the failing rule's threshold")
    parser.add_argument(
        "--live",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="a live webhook channel timing each failing alert",
    )
    parser.add_argument("--warmup", type=float, default=8.0)
    parser.add_argument("--window", type=float, default=30.0)
    parser.add_argument("--only", default=",".join(SCENARIOS))
    parser.add_argument("--broker", default="", help="CELERY_BROKER_URL (default: db 8)")
    parser.add_argument("--database-suffix", default="", help="cc_bench_<mode><suffix>")
    args = parser.parse_args()
    if not (1 <= args.n <= 5_000 and 0 <= args.failing <= 500 and 1 <= args.window <= 300):
        raise SystemExit("Keep --n within 1..5000, --failing 0..500, --window 1..300 s.")

    rows = []
    results = []
    for name in args.only.split(","):
        quiet = None
        for dead in (0, args.dead):
            params = params_for(name, args, dead=dead)
            print(f"{params.label}: {args.n} + {args.failing} failing (load {load()})", flush=True)
            result = run_in_subprocess(params)
            results.append(result)
            rows.append(row(result, quiet))
            quiet = quiet or result
            print(f"  p99 {result['lateness_ms']['p99']} ms", flush=True)
    print()
    print_table(
        [
            "scenario",
            "runs/s",
            "p50 ms",
            "p95 ms",
            "p99 ms",
            "max ms",
            "p99 dead/quiet",
            "attempts",
            "failed",
            "alerted",
            "alert delay p50 ms",
            "alert delay max ms",
            "load 1/5/15",
        ],
        rows,
    )
    write_results("alert_lateness", {"args": vars(args), "results": results})


if __name__ == "__main__":
    main()
