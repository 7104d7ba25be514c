"""Where the CPU goes, from /proc: a process's seconds, the machine's, and every
process's summed by the part of the system it belongs to."""

from __future__ import annotations

import os
from collections.abc import Collection, Sequence
from pathlib import Path

CLK_TCK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a process (all its threads) so far; 0 if it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def cpu_by_process(parts: Sequence[tuple[str, str]]) -> dict[int, tuple[str, float]]:
    """Every process on the machine: its part and its CPU seconds so far. The part is the
    first of ``parts`` (name, a word of the command line) its command line holds, else
    "other"."""
    spent: dict[int, tuple[str, float]] = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            command = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        part = next((name for name, word in parts if word in command), "other")
        spent[int(proc.name)] = (part, cpu_seconds(int(proc.name)))
    return spent


def cores_by_part(
    before: dict[int, tuple[str, float]], after: dict[int, tuple[str, float]], seconds: float
) -> dict[str, float]:
    """The cores each part kept busy between two readings of ``cpu_by_process`` (a
    process started in between counts from 0; one gone before the second is not counted)."""
    cores: dict[str, float] = {}
    for pid, (part, spent) in after.items():
        was = before.get(pid)
        used = spent - (was[1] if was and was[0] == part and was[1] <= spent else 0.0)
        cores[part] = cores.get(part, 0.0) + used / seconds
    return {part: round(value, 2) for part, value in sorted(cores.items())}


def machine_busy() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine so far, from /proc/stat."""
    values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = values[3] + values[4]
    return (sum(values) - idle) / CLK_TCK, sum(values) / CLK_TCK


def cores_busy(before: tuple[float, float], after: tuple[float, float]) -> float:
    busy, total = after[0] - before[0], after[1] - before[1]
    return round(busy / max(total, 1e-9) * (os.cpu_count() or 1), 2)


def move_to(pids: Sequence[int], cpus: Sequence[int] | frozenset[int]) -> None:
    """Every thread of these processes onto ``cpus`` (one gone meanwhile is skipped)."""
    for pid in pids:
        try:
            for task in Path(f"/proc/{pid}/task").iterdir():
                os.sched_setaffinity(int(task.name), cpus)
        except (FileNotFoundError, ProcessLookupError):
            continue


def stolen(cpus: Collection[int] | None = None) -> tuple[float, float]:
    """(steal, total) seconds so far of the cores ``cpus`` (every core when None), from
    /proc/stat: steal is the time the hypervisor ran something else while they had work."""
    steal = total = 0
    for line in Path("/proc/stat").read_text().splitlines():
        name, *values = line.split()
        if not (name.startswith("cpu") and name[3:].isdigit()):
            continue
        if cpus is None or int(name[3:]) in cpus:
            steal, total = steal + int(values[7]), total + sum(int(v) for v in values[:8])
    return steal / CLK_TCK, total / CLK_TCK


def steal_percent(before: tuple[float, float], after: tuple[float, float]) -> float:
    return round(100 * (after[0] - before[0]) / max(after[1] - before[1], 1e-9), 1)
