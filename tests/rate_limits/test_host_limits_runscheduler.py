"""Host rate limits in ``runscheduler`` on SQLite, the single-machine default: the budget
lives in the process (no Redis), the same grid and the same delays as on the fleet."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
from collections import Counter
from contextlib import closing
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from tests.engine_processes import manage, process_env, running, wait_until

pytestmark = pytest.mark.slow

COUNT = 40
RATE = 10
SETUP = """
from endpoints.models import Endpoint, Job, Tenant
tenant = Tenant.objects.create(name="t", host_rate_limits={{"127.0.0.1": {rate}}})
job = Job.objects.create(tenant=tenant, name="j")
for k in range({count}):
    url, name = f"{url}/e{{k}}", f"e{{k}}"
    Endpoint.objects.create(job=job, name=name, url=url, baseline_interval_ms=86_400_000)
"""


def _query(path: Path, sql: str, *args: object) -> list[sqlite3.Row]:
    with closing(sqlite3.connect(path, timeout=20)) as db, db:
        db.row_factory = sqlite3.Row
        return db.execute(sql, args).fetchall()


def test_runscheduler_on_sqlite_keeps_a_host_within_its_limit_in_process_memory(tmp_path, target):
    database = tmp_path / "cronicorn.sqlite3"
    # No Redis at all: a broker URL nobody listens on.
    env = process_env(
        DATABASE_URL=f"sqlite:///{database}", CELERY_BROKER_URL="redis://127.0.0.1:9/0"
    )
    subprocess.run(manage("migrate", "-v", "0"), env=env, check=True, timeout=120)
    setup = SETUP.format(rate=RATE, count=COUNT, url=target.url("").rstrip("/"))
    subprocess.run(manage("shell", "-c", setup), env=env, check=True, timeout=120)

    with running(manage("runscheduler"), env=env, log=tmp_path / "scheduler.log") as process:
        ticked = lambda: _query(database, "SELECT 1 FROM endpoints_heartbeat WHERE name = 'tick'")  # noqa: E731
        assert wait_until(ticked, timeout=60)
        instant = timezone.now().replace(microsecond=0) + timedelta(seconds=2)
        at = instant.astimezone(UTC).replace(tzinfo=None).isoformat(sep=" ")
        _query(
            database,
            "UPDATE endpoints_slot SET next_run_at = ?, next_run_source = 'baseline-interval'",
            at,
        )
        done = "SELECT count(*) FROM endpoints_run WHERE status != 'running'"
        assert wait_until(lambda: _query(database, done)[0][0] >= COUNT, timeout=60), (
            tmp_path / "scheduler.log"
        ).read_text()[-3000:]
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0

    hits = target.hits()
    per_second = Counter(int(hit.at) for hit in hits)
    print(f"\nrunscheduler on SQLite, {COUNT} due together, limit {RATE}/s; requests per second:")
    for second in sorted(per_second):
        count = per_second[second]
        print(f"  +{second - int(instant.timestamp()):2d} s {count:3d} {'#' * count}")
    assert max(per_second.values()) <= RATE
    assert Counter(hit.path for hit in hits) == {f"/e{k}": 1 for k in range(COUNT)}
    runs = _query(database, "SELECT scheduled_for, status, delay_reason FROM endpoints_run")
    assert len(runs) == COUNT and {run["status"] for run in runs} == {"success"}
    assert {datetime.fromisoformat(run["scheduled_for"]).replace(tzinfo=UTC) for run in runs} == {
        instant
    }
    assert (
        sum(1 for run in runs if "by the rate limit of 127.0.0.1" in run["delay_reason"])
        >= COUNT - RATE
    )
