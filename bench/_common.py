"""Shared plumbing of the benchmarks: databases, Django setup, figures, tables, results.

Every benchmark works in its own database (``cc_bench`` or ``cc_bench_*``) and its own
Redis db (8), so it never touches what the tests or other engineers use.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
PG_SERVER = "postgres://postgres@127.0.0.1:5432"
BROKER_URL = "redis://127.0.0.1:6379/8"


def pg_url(name: str) -> str:
    if not name.startswith("cc_bench"):
        raise SystemExit(f"Benchmark databases are named cc_bench*, not {name!r}.")
    return f"{PG_SERVER}/{name}"


def sqlite_url(name: str) -> str:
    RESULTS.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{RESULTS / name}.sqlite3"


def bench_env(database_url: str, **overrides: str) -> dict[str, str]:
    """The environment of every process of a benchmark (children included)."""
    env = dict(os.environ)
    env.update(
        DJANGO_SETTINGS_MODULE="cronicorn_site.settings",
        DATABASE_URL=database_url,
        CELERY_BROKER_URL=BROKER_URL,
        CRONICORN_ALLOW_PRIVATE_ADDRESSES="true",
        # DEBUG is off unless set (issue 20): a local run needs its generated secret key.
        DEBUG=os.environ.get("DEBUG", "true"),
        CRONICORN_LOG_LEVEL="WARNING",
        PYTHONUNBUFFERED="1",
    )
    env.update(overrides)
    return env


def fresh_database(database_url: str) -> None:
    """Drop and recreate the benchmark database, then migrate it with manage.py."""
    if database_url.startswith("sqlite:///"):
        path = Path(database_url.removeprefix("sqlite:///"))
        for suffix in ("", "-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)
    else:
        import psycopg

        name = urlsplit(database_url).path.lstrip("/")
        pg_url(name)  # refuses any other name
        with psycopg.connect(f"{PG_SERVER}/postgres", autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            conn.execute(f'CREATE DATABASE "{name}"')
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "-v0"],
        cwd=ROOT,
        env=bench_env(database_url),
        check=True,
    )


def setup_django(database_url: str, **overrides: str) -> None:
    """Configure this process for ``database_url`` (before anything imports settings)."""
    os.environ.update(bench_env(database_url, **overrides))
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()


def load() -> str:
    """The machine load as `uptime` shows it (1, 5, 15 min)."""
    return " ".join(f"{value:.2f}" for value in os.getloadavg())


def percentile(values: Sequence[float], fraction: float) -> float:
    """Nearest-rank percentile (no interpolation: a reported p99 is a real sample)."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(1, round(fraction * len(ordered) + 0.5 - 1e-9))
    return ordered[min(rank, len(ordered)) - 1]


def summary_ms(samples_s: Sequence[float]) -> dict[str, float]:
    ms = [s * 1000 for s in samples_s]
    return {
        "n": len(ms),
        "median_ms": round(statistics.median(ms), 3) if ms else float("nan"),
        "p95_ms": round(percentile(ms, 0.95), 3),
        "max_ms": round(max(ms), 3) if ms else float("nan"),
    }


def print_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    cells = [[str(h) for h in headers]] + [[_cell(v) for v in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    for index, row in enumerate(cells):
        print("  ".join(value.rjust(widths[i]) for i, value in enumerate(row)))
        if index == 0:
            print("  ".join("-" * width for width in widths))


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.1f}" if abs(value) >= 100 else f"{value:.2f}"
    return str(value)


def write_results(name: str, data: dict[str, Any]) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    path = RESULTS / f"{name}-{stamp}.json"
    data = {
        "benchmark": name,
        "at": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "cpus": os.cpu_count(),
        "code": code_state(),
        **data,
    }
    path.write_text(json.dumps(data, indent=2, default=str) + "\n")
    print(f"\nwrote {path.relative_to(ROOT)}")
    return path


def code_state() -> dict[str, Any]:
    """The commit measured and any uncommitted engine change (others share this checkout)."""

    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)
        return done.stdout.strip()

    return {
        "commit": git("rev-parse", "--short", "HEAD"),
        "uncommitted": git("status", "--short", "--", "endpoints", "cronicorn_site").splitlines(),
    }


def wait_until(condition: Any, *, timeout: float, every: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(every)
    return bool(condition())
