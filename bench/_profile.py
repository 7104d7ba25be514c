"""Where the time of a scenario's window goes: py-spy on the engine's processes,
``pg_stat_statements`` and lock waits (``pg_locks``, ``pg_stat_activity``) on its database.

Used by ``bench/lateness.py --profile`` and ``bench/throughput.py --profile``. py-spy samples
each process from outside (``--nonblocking``: the process is never paused; ``--gil``: only
the thread running Python) and writes
collapsed stacks, summarised here as the functions with the most samples, on their own
("self") and with what they call ("total"). ``pg_stat_statements`` needs
``shared_preload_libraries = 'pg_stat_statements'`` in postgresql.conf (a restart); without
it the report says so and the rest still runs.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import psycopg

# Processes worth sampling: the engine's (the target server and Redis are not ours).
SKIP = ("server", "redis (shared)")
TOP = 12
LOCK_SAMPLE_SECONDS = 0.1


class Profiler:
    def __init__(self, pids: dict[str, int], seconds: float, database_url: str, out: Path):
        self.pids = {name: pid for name, pid in pids.items() if name not in SKIP}
        self.seconds = seconds
        self.database_url = database_url
        self.out = out
        self.spies: dict[str, tuple[subprocess.Popen[bytes], Path]] = {}
        self.stopping = threading.Event()
        self.lock_samples: list[tuple[int, Counter[str]]] = []

    def start(self) -> None:
        self.out.mkdir(parents=True, exist_ok=True)
        spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
        for name, pid in self.pids.items():
            path = self.out / f"{re.sub(r'[^a-z0-9]+', '-', name)}.collapsed"
            args = [spy, "record", "--pid", str(pid), "--duration", str(int(self.seconds))]
            # --gil: only threads holding the GIL, i.e. running Python, not waiting for it
            # (without it a thread queued for the GIL is counted where it waits).
            args += ["--rate", "100", "--nonblocking", "--gil", "--format", "raw", "-o", str(path)]
            child = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            self.spies[name] = (child, path)
        self.statements = _reset_statements(self.database_url)
        self.sampler = threading.Thread(target=self._sample_locks, daemon=True)
        self.sampler.start()

    def stop(self) -> dict[str, Any]:
        self.stopping.set()
        self.sampler.join(timeout=5)
        report: dict[str, Any] = {"processes": {}}
        for name, (child, path) in self.spies.items():
            try:
                _, err = child.communicate(timeout=self.seconds + 30)
            except subprocess.TimeoutExpired:
                child.kill()
                _, err = child.communicate()
            if not path.exists():
                report["processes"][name] = {"error": err.decode(errors="replace")[-300:]}
                continue
            report["processes"][name] = summarise_stacks(path)
        report["statements"] = (
            _top_statements(self.database_url) if self.statements else self.statements_error
        )
        report["locks"] = self._lock_report()
        return report

    def _sample_locks(self) -> None:
        # A connection of its own: the scenario's Django connection belongs to its thread.
        with psycopg.connect(self.database_url, autocommit=True) as conn:
            while not self.stopping.wait(LOCK_SAMPLE_SECONDS):
                waiting = conn.execute(
                    "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a USING (pid) "
                    "WHERE NOT l.granted AND a.datname = current_database()"
                ).fetchone()
                events = conn.execute(
                    "SELECT coalesce(wait_event_type || ':' || wait_event, 'on CPU'), count(*) "
                    "FROM pg_stat_activity WHERE datname = current_database() "
                    "AND state = 'active' AND pid <> pg_backend_pid() GROUP BY 1"
                ).fetchall()
                self.lock_samples.append((waiting[0] if waiting else 0, Counter(dict(events))))

    def _lock_report(self) -> dict[str, Any]:
        samples = self.lock_samples
        if not samples:
            return {}
        events: Counter[str] = Counter()
        for _, counter in samples:
            events.update(counter)
        return {
            "samples": len(samples),
            "share_with_a_lock_wait": round(sum(1 for w, _ in samples if w) / len(samples), 3),
            "most_waiting": max(w for w, _ in samples),
            # Mean active backends per state: what the database's active time is made of.
            "active_backends_by_wait": {
                event: round(count / len(samples), 2) for event, count in events.most_common(8)
            },
        }

    @property
    def statements_error(self) -> dict[str, str]:
        return {"unavailable": "pg_stat_statements is not loaded (shared_preload_libraries)"}


def summarise_stacks(path: Path) -> dict[str, Any]:
    """The top functions of py-spy's collapsed stacks (``frame;frame;leaf count``)."""
    own: Counter[str] = Counter()
    total: Counter[str] = Counter()
    samples = 0
    for line in path.read_text(errors="replace").splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = [_short(frame) for frame in stack.split(";")]
        samples += count
        own[frames[-1]] += count
        for frame in set(frames):
            total[frame] += count

    def share(count: int) -> float:
        return round(count / samples, 3) if samples else 0.0

    return {
        "samples": samples,
        "self": [(frame, share(n)) for frame, n in own.most_common(TOP)],
        "total": [(frame, share(n)) for frame, n in total.most_common(TOP * 2)],
    }


def _short(frame: str) -> str:
    # "function (path/to/module.py:line)" -> "function (module.py)", one entry per function.
    match = re.match(r"(.*) \((?:.*/)?([^/:]+)(?::\d+)?\)$", frame)
    return f"{match.group(1)} ({match.group(2)})" if match else frame


def _reset_statements(database_url: str) -> bool:
    try:
        with psycopg.connect(database_url, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
            conn.execute("SELECT pg_stat_statements_reset()")
            conn.execute("SELECT count(*) FROM pg_stat_statements")
    except psycopg.Error:
        return False
    return True


def _top_statements(database_url: str) -> list[dict[str, Any]]:
    with psycopg.connect(database_url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT query, calls, total_exec_time, mean_exec_time, rows, "
            "shared_blks_hit + shared_blks_read, wal_records "
            "FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid "
            "WHERE d.datname = current_database() ORDER BY total_exec_time DESC LIMIT %s",
            (TOP,),
        ).fetchall()
    return [
        {
            "query": " ".join(query.split())[:140],
            "calls": calls,
            "total_ms": round(total_ms, 1),
            "mean_ms": round(mean_ms, 3),
            "rows": rows_,
            "blocks": blocks,
            "wal_records": wal,
        }
        for query, calls, total_ms, mean_ms, rows_, blocks, wal in rows
    ]


def print_profile(label: str, report: dict[str, Any], print_table: Any) -> None:
    print(f"\n{label}: where the window's time went")
    for name, figures in report.get("processes", {}).items():
        if "error" in figures:
            print(f"  {name}: py-spy failed: {figures['error']}")
            continue
        print(f"  {name}: {figures['samples']} samples (100/s, the thread holding the GIL)")
        print_table(["self: function", "share"], figures["self"][:8])
        print_table(["total: function", "share"], figures["total"][:12])
    statements = report.get("statements")
    if isinstance(statements, list):
        print_table(
            ["statement", "calls", "total ms", "mean ms", "rows", "blocks", "WAL records"],
            [list(statement.values()) for statement in statements],
        )
    elif statements:
        print(f"  statements: {statements}")
    if locks := report.get("locks"):
        print(f"  locks: {locks}")
