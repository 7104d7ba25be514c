"""Long fault cases: the fault suite's scenarios (tests/faults) at a larger size, with
the recovery time measured instead of bounded.

The fleet runs as the README's processes against a Redis server and a PostgreSQL cluster
of its own (free ports, temporary directories), calling a target on 127.0.0.1 that logs
every arrival; see tests/faults/world.py. For each fault it prints and writes (JSON, to
bench/results/) the calls at the target, runs, lost runs, concurrent executions of one
endpoint, slots run twice, retries under the lost claim, endpoints without a future run,
the recovery time (from the end of the fault until every endpoint was called again) and
the busiest 50 ms before and after the fault (a burst after that was not there before means
endpoints freed together kept one phase).

    .venv/bin/python bench/faults.py --fault redis-outage --fault postgres-outage
    .venv/bin/python bench/faults.py --fault all --endpoints 200 --patience 90
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

from _common import RESULTS, ROOT, load, print_table, write_results

sys.path.insert(0, str(ROOT))

from tests.faults.analysis import Outcome, broken_promises, busiest_window, figures
from tests.faults.faults import SCENARIOS
from tests.faults.world import FaultCase, Services

LOGS = RESULTS / "logs" / "faults"
BURST_WIDTH = 0.05
STEADY_SECONDS = 2.0  # the steady state before the fault, for the burst it already had
RECOVERY_TARGET = 10.0
COLUMNS = (
    "fault",
    "endpoints",
    "fault_seconds",
    "in_flight_at_fault",
    "calls_at_target",
    "runs",
    "lost_runs",
    "concurrent_executions",
    "slots_run_twice",
    "retries_under_the_lost_claim",
    "endpoints_without_a_future_run",
    "recovery_seconds",
    "never_called_again",
    "busiest_50ms_before",
    "busiest_50ms_after",
)


def main() -> None:
    args = parse_args()
    names = list(SCENARIOS) if "all" in args.fault else args.fault
    rows: list[dict[str, Any]] = []
    load_before = load()
    with Services(Path(tempfile.mkdtemp(prefix="cronicorn-faults-bench-"))) as services:
        for name in names:
            rows.append(run_one(services, name, endpoints=args.endpoints, patience=args.patience))
            print(f"{name}: {figures_only(rows[-1])}", flush=True)
    print()
    print_table(COLUMNS, [[row[column] for column in COLUMNS] for row in rows])
    params = {"endpoints": args.endpoints, "patience": args.patience}
    write_results("faults", {"params": params, "load": [load_before, load()], "results": rows})


def run_one(services: Services, name: str, *, endpoints: int, patience: float) -> dict[str, Any]:
    scenario = SCENARIOS[name]
    with FaultCase(services, scenario.resized(endpoints), LOGS / name) as case:
        outcome = case.run(name, scenario.fault, patience=patience)
    return row(outcome)


def row(outcome: Outcome) -> dict[str, Any]:
    calls, start = outcome.executions, outcome.fault_started
    bursts = {
        "busiest_50ms_before": busiest_window(
            calls, since=start - STEADY_SECONDS, until=start, width=BURST_WIDTH
        ),
        "busiest_50ms_after": busiest_window(calls, since=outcome.fault_ended, width=BURST_WIDTH),
    }
    # The evidence (first few of each), judged against the 10 s recovery target.
    broken = broken_promises(outcome, recovery_window=RECOVERY_TARGET)
    return {**figures(outcome), **bursts, "broken": broken, "logs": outcome.logs}


def figures_only(row: dict[str, Any]) -> dict[str, Any]:
    return {column: row[column] for column in COLUMNS}


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--fault",
        action="append",
        choices=[*SCENARIOS, "all"],
        required=True,
        help="A fault to inject (repeat for several; 'all' for every one).",
    )
    parser.add_argument("--endpoints", type=int, default=200, help="Endpoints at 1 s (200).")
    parser.add_argument(
        "--patience",
        type=float,
        default=90.0,
        help="Seconds to wait after the fault for every endpoint to run again (90: more "
        "than today's lease of timeout 5 s + grace 30 s).",
    )
    return parser.parse_args()


if __name__ == "__main__":
    main()
