"""How late the kernel wakes a process on given cores: the machine's own share of lateness.

A sleeper, on ``--cpus`` (the scheduler's), wakes at every ``--every`` boundary for
``--seconds`` and writes one line per wake-up, ``<planned epoch s> <late ms>``. It
uses no CPU to speak of, so it stands beside the scheduler without slowing it: what it
sees late is what the kernel and the hypervisor (its steal) gave any process on those
cores, the floor under the scheduler's own start lateness in the same window.

    .venv/bin/python bench/_wake_probe.py OUT --cpus 0 --every 0.05 --seconds 120
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--cpus", default="", help="e.g. 0 (default: any core)")
    parser.add_argument("--every", type=float, default=0.05, help="s between wake-ups")
    parser.add_argument("--seconds", type=float, default=120.0, help="how long in all")
    args = parser.parse_args()
    if not (0.005 <= args.every <= 1 and 1 <= args.seconds <= 3600):
        raise SystemExit("Keep --every within 0.005..1 s and --seconds within 1..3600 s.")
    if args.cpus:
        os.sched_setaffinity(0, {int(cpu) for cpu in args.cpus.split(",")})
    end = time.time() + args.seconds
    with args.out.open("w") as out:
        while (now := time.time()) < end:
            planned = (now // args.every + 1) * args.every
            time.sleep(planned - now)
            out.write(f"{planned:.3f} {(time.time() - planned) * 1000:.3f}\n")


if __name__ == "__main__":
    main()
