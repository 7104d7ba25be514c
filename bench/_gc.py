"""Garbage-collection pauses of the bench's Celery processes (issue 23: a full collection
holds the GIL, and no request is sent meanwhile).

With ``BENCH_GC_LOG=<dir>`` in its environment, ``bench/_celery_main.py`` calls ``watch``:
the process appends a line per collection (when it ended, its generation, how long it
took) to ``<dir>/<pid>.log``. ``pauses`` sums them up over a window, per process.
"""

from __future__ import annotations

import gc
import os
import time
from pathlib import Path
from typing import Any


def watch(directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    out = (directory / f"{os.getpid()}.log").open("a", buffering=1)
    began = [0.0]

    def timed(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            began[0] = time.perf_counter()
        else:
            took_ms = (time.perf_counter() - began[0]) * 1000
            out.write(f"{time.time():.3f} {info['generation']} {took_ms:.2f}\n")

    gc.callbacks.append(timed)


def pauses(directory: Path, pids: dict[str, int], start: float, end: float) -> dict[str, Any]:
    """Per process and generation: collections in the window, the longest, the total."""
    report: dict[str, Any] = {}
    for name, pid in pids.items():
        path = directory / f"{pid}.log"
        if not path.exists():
            continue
        by_generation: dict[str, dict[str, float]] = {}
        for line in path.read_text().splitlines():
            at, generation, took_ms = line.split()
            if start <= float(at) < end:
                figures = by_generation.setdefault(
                    generation, {"collections": 0, "longest_ms": 0.0, "total_ms": 0.0}
                )
                figures["collections"] += 1
                figures["longest_ms"] = max(figures["longest_ms"], float(took_ms))
                figures["total_ms"] += float(took_ms)
        report[name] = {
            gen: {key: round(value, 1) for key, value in figures.items()}
            for gen, figures in sorted(by_generation.items())
        }
    return report
