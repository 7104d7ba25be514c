"""What a hostile configuration file costs ``config_io.load_document``: alias bombs,
10 000-deep nesting, 100 000-key objects, each against an ordinary file of 100
endpoints (the ratio column). No database: parsing only.

    .venv/bin/python bench/hostile_files.py [--reps 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench._common import load, print_table, setup_django

CASES: dict[str, tuple[str, Callable[[], str]]] = {}


def case(name: str, fmt: str) -> Callable[[Callable[[], str]], Callable[[], str]]:
    def register(build: Callable[[], str]) -> Callable[[], str]:
        CASES[name] = (fmt, build)
        return build

    return register


@case("ordinary file, 100 endpoints (yaml)", "yaml")
def ordinary() -> str:
    import yaml

    endpoints = [
        {"name": f"e{n}", "url": f"https://example.com/{n}", "baseline_interval": "5m"}
        for n in range(100)
    ]
    jobs = [{"name": "ops", "endpoints": endpoints}]
    return yaml.safe_dump({"version": 1, "tenants": [{"name": "Acme", "jobs": jobs}]})


@case("alias bomb 9x9, 460 bytes (yaml)", "yaml")
def alias_bomb() -> str:
    lines = ["a0: &a0 [" + ", ".join(["lol"] * 9) + "]"]
    lines += [f"a{n}: &a{n} [" + ", ".join([f"*a{n - 1}"] * 9) + "]" for n in range(1, 9)]
    return "\n".join(lines) + "\n"


@case("merge-key bomb, 24 levels (yaml)", "yaml")
def merge_bomb() -> str:
    lines = ["m0: &m0 {k: v}"]
    lines += [f"m{n}: &m{n} {{<<: [*m{n - 1}, *m{n - 1}], k{n}: v}}" for n in range(1, 24)]
    return "\n".join(lines) + "\n"


@case("10 000-deep lists (json)", "json")
def deep_json() -> str:
    return "[" * 10_000 + "]" * 10_000


@case("10 000-deep lists (yaml)", "yaml")
def deep_yaml() -> str:
    return "[" * 10_000 + "]" * 10_000


@case("100 000-key object (json)", "json")
def wide_json() -> str:
    return json.dumps({f"k{n}": n for n in range(100_000)})


@case("100 000-key mapping (yaml)", "yaml")
def wide_yaml() -> str:
    return "".join(f"k{n}: {n}\n" for n in range(100_000))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--reps", type=int, default=5)
    reps = parser.parse_args().reps
    setup_django("sqlite:///:memory:")
    from endpoints.config_io.documents import ConfigError, load_document

    rows, baseline = [], None
    for name, (fmt, build) in CASES.items():
        text, samples, outcome = build(), [], "parsed"
        for _ in range(reps):
            started = time.perf_counter()
            try:
                load_document(text, fmt=fmt)
            except ConfigError as refused:
                outcome = refused.problems[0][:60]
            samples.append(time.perf_counter() - started)
        median_ms = statistics.median(samples) * 1000
        baseline = baseline or median_ms
        rows.append([name, len(text), round(median_ms, 2), round(median_ms / baseline, 1), outcome])
    print(f"load {load()}, {reps} repetitions, median")
    print_table(["file", "bytes", "ms", "x ordinary", "outcome"], rows)


if __name__ == "__main__":
    main()
