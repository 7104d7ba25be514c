"""The Celery fleet of the backfill scenarios: beat, a worker on the tick and maintenance
queues and a threads worker on the execute queue (which runs the backfill loop), over
Redis and PostgreSQL, sharing the test database; started once for the folder and
stopped after its last test (package scope): a fleet left running would tick the test
database under every later test of the worker, claiming and calling their endpoints."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from endpoints.backfill_models import Backfill
from endpoints.choices import BackfillStatus
from endpoints.models import Heartbeat, Job, JobStatus, Run, RunStatus, Slot
from tests.engine_processes import (
    celery_beat,
    celery_worker,
    child_database_url,
    clear_broker,
    process_env,
    running,
    wait_for_workers,
    wait_until,
)


@dataclass(frozen=True)
class Fleet:
    logs: Path

    def tail(self) -> str:
        return "\n".join(
            f"--- {log.name}\n{log.read_text(errors='replace')[-2000:]}"
            for log in sorted(self.logs.glob("*.log"))
        )


@pytest.fixture(scope="package")
def celery_fleet(
    django_db_setup: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Fleet]:
    logs = tmp_path_factory.mktemp("backfill-fleet")
    clear_broker()
    env = process_env(DATABASE_URL=child_database_url())
    ticker, tick_name = celery_worker(["tick", "maintenance"], concurrency=2)
    executor, execute_name = celery_worker(["execute"], concurrency=8)
    with (
        running(ticker, env=env, log=logs / "tick.log"),
        running(executor, env=env, log=logs / "execute.log"),
        running(celery_beat(logs / "beat-schedule"), env=env, log=logs / "beat.log"),
    ):
        wait_for_workers([tick_name, execute_name])
        yield Fleet(logs)


@pytest.fixture
def fleet(celery_fleet: Fleet, transactional_db: None) -> Iterator[Fleet]:
    """The fleet, ticking into this test's database; idle before that database is
    emptied (no backfill left to run, nothing in flight)."""
    ticked = wait_until(lambda: Heartbeat.objects.filter(name="tick").exists(), timeout=60)
    assert ticked, celery_fleet.tail()
    yield celery_fleet
    Backfill.objects.filter(status__in=["queued", "running"]).update(
        status=BackfillStatus.CANCELLED
    )
    Job.objects.update(status=JobStatus.PAUSED)
    idle = wait_until(
        lambda: (
            not Slot.objects.filter(claim_token__isnull=False).exists()
            and not Run.objects.filter(status=RunStatus.RUNNING).exists()
        ),
        timeout=120,
    )
    assert idle, celery_fleet.tail()
