"""Issue 36: what adapting buys, measured. Every scenario of ``bench/scenarios/`` in
simulated time (``planner.simulation``), for the fixed schedule (the baseline and the
run policy alone), the rules planner and an LLM planner (a scripted OpenAI-compatible
server on 127.0.0.1 through the planner's real client, or your own with ``--llm-server``):
calls, calls in calm periods, the delay to see an incident start and its recovery, 429s,
hints written, tokens. Each scenario is run from ``--offsets`` start phases (the first
run at k/N of the baseline after the scenario's start) and averaged. Then the goals for
the rules against fixed.

``--real-time`` also plays three scenarios, compressed, end to end through
``manage.py runscheduler`` (SQLite) against a target on 127.0.0.1 that plays the trace,
and compares its decisions (each run's source, each hint) with the simulator's.

    .venv/bin/python bench/adaptation.py
    .venv/bin/python bench/adaptation.py --llm-server http://127.0.0.1:11434/v1 --llm-model qwen2.5
    .venv/bin/python bench/adaptation.py --real-time --modes fixed,rules
"""

from __future__ import annotations

import argparse
import sys
import time
from contextlib import ExitStack
from typing import Any

from _common import ROOT, fresh_database, load, print_table, setup_django, sqlite_url, write_results

SCENARIOS = ROOT / "bench" / "scenarios"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenarios", default="", help="names, comma-separated (default all)")
    parser.add_argument("--modes", default="fixed,rules,llm")
    parser.add_argument("--offsets", type=int, default=4, help="start phases per scenario")
    parser.add_argument(
        "--llm-offsets", type=int, default=1, help="start phases for the LLM (a session each 5 min)"
    )
    parser.add_argument("--llm-server", default="", help="your OpenAI-compatible base URL")
    parser.add_argument("--llm-model", default="gpt-4o-mini")
    parser.add_argument("--llm-key", default="")
    parser.add_argument("--real-time", action="store_true", help="also check against runscheduler")
    args = parser.parse_args()
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[attr-defined]
    modes = [mode.strip() for mode in args.modes.split(",") if mode.strip()]
    database = sqlite_url("cc_bench_adaptation")
    fresh_database(database)
    with ExitStack() as stack:
        server = args.llm_server
        if "llm" in modes and not server:
            sys.path.insert(0, str(ROOT))
            from tests.scripted_llm import scripted_llm

            server = stack.enter_context(scripted_llm())
        setup_django(
            database,
            CRONICORN_LLM_BASE_URL=server or "http://127.0.0.1:9/v1",
            CRONICORN_LLM_MODEL=args.llm_model if args.llm_server else "scripted",
            CRONICORN_LLM_API_KEY=args.llm_key,
            CRONICORN_PLANNER_BACKEND="rules",
        )
        llm_label = f"llm:{args.llm_model}" if args.llm_server else "scripted-llm"
        result = simulate(args, modes, llm_label)
        if args.real_time:
            result["real_time"] = real_time(database)
    write_results("adaptation", result)


def simulate(args: argparse.Namespace, modes: list[str], llm_label: str) -> dict[str, Any]:
    from planner.simulation.database import DatabasePlanner
    from planner.simulation.measures import goals, summary
    from planner.simulation.scenarios import load_scenarios
    from planner.simulation.simulator import RulesPlanner, Simulation

    names = [name for name in args.scenarios.split(",") if name]
    scenarios = load_scenarios(SCENARIOS, names or None)
    table: dict[str, dict[str, Any]] = {}
    rows = []
    before = load()
    for scenario in scenarios:
        base_s = (scenario.baseline_ms() or 0) / 1000
        table[scenario.name] = {}
        for mode in modes:
            count = args.llm_offsets if mode == "llm" else args.offsets
            offsets = [base_s * k / count for k in range(count)] if base_s else [0.0]
            started = time.perf_counter()
            sims = []
            for offset in offsets:
                planner: Any = {
                    "fixed": lambda: None,
                    "rules": RulesPlanner,
                    "llm": lambda: DatabasePlanner("llm", label=llm_label),
                }[mode]()
                sims.append(Simulation(scenario, planner, offset_s=offset).run())
            figures = summary(scenario, sims)
            figures["seconds_per_day"] = (
                (time.perf_counter() - started) / len(sims) / (scenario.duration_s / 86_400)
            )
            label = llm_label if mode == "llm" else mode
            figures["offsets_s"] = offsets
            table[scenario.name][mode] = figures
            rows.append(
                [
                    scenario.name,
                    label,
                    len(offsets),
                    figures["calls"],
                    figures["calm_calls"],
                    _seconds(figures["incident_seen_s"]),
                    _seconds(figures["recovery_seen_s"]),
                    figures["status_429"],
                    figures["hints_written"],
                    figures["tokens"],
                    f"{figures['seconds_per_day']:.3f}",
                ]
            )
    print("\nWhat adapting buys (averaged over the start phases)\n")
    print_table(
        [
            "scenario",
            "planner",
            "phases",
            "calls",
            "calm calls",
            "incident seen",
            "recovery seen",
            "429s",
            "hints",
            "tokens",
            "s/day simulated",
        ],
        rows,
    )
    result: dict[str, Any] = {
        "load_before": before,
        "load_after": load(),
        "offsets": args.offsets,
        "scenarios": {
            s.name: {"question": s.question, "kinds": list(s.kinds), **table[s.name]}
            for s in scenarios
        },
    }
    if "fixed" in modes and "rules" in modes:
        checked = goals(scenarios, table)
        print("\nGoals for the rules against the fixed schedule\n")
        print_table(
            ["goal", "scenarios", "figures", "met"],
            [[g["goal"], ",".join(g["scenarios"]), g["figures"], g["met"]] for g in checked],
        )
        result["goals"] = checked
    return result


def real_time(database: str) -> list[dict[str, Any]]:
    """The three compressed scenarios through runscheduler, beside the simulator."""
    from tests.planner.realtime import REAL_TIME, compare_with_runscheduler, real_time_scenario

    checks = []
    for name, _factor, _start, seconds in REAL_TIME:
        compressed = real_time_scenario(name)
        log = ROOT / "bench" / "results" / "logs" / f"adaptation-{name}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        print(f"\nreal time: {compressed.name}, {seconds} s through runscheduler ...")
        check = compare_with_runscheduler(compressed, database_url=database, log=log)
        print(check.words())
        checks.append(check.as_dict())
    return checks


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f} s"


if __name__ == "__main__":
    main()
