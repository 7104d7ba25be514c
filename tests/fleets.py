"""A Celery fleet as the README runs it, for the tests of a folder or a module: beat, a
threads worker on the tick queues and one on the execute queue, over Redis and
PostgreSQL, sharing the test database.

A fleet is started by a fixture of the narrowest scope that holds its tests (a module, a
folder), never the session: left running, it would tick the test database under every
later test of the worker, claiming and calling their endpoints. Each test takes it
through ``ticking_into_this_test`` (a function-scoped fixture set up after the
database): the fleet idle again before the database is emptied for the next test, which
a fleet still running a test's endpoints turned into a deadlock (issue 31).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

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
        """The end of each process's log, for a failure message."""
        return "\n".join(
            f"--- {log.name}\n{log.read_text(errors='replace')[-2000:]}"
            for log in sorted(self.logs.glob("*.log"))
        )


@contextmanager
def celery_fleet(
    logs: Path,
    *,
    tick_queues: Sequence[str] = ("tick", "maintenance"),
    execute_workers: int = 1,
    execute_threads: int = 8,
    **env: str,
) -> Iterator[Fleet]:
    """Beat, a worker on ``tick_queues`` (2 threads) and ``execute_workers`` on
    ``execute`` (each its own dispatcher, of ``execute_threads``), with ``env`` added to
    the environment, until the block ends."""
    clear_broker()
    environment = process_env(DATABASE_URL=child_database_url(), **env)
    ticker, tick_name = celery_worker(list(tick_queues), concurrency=2)
    executors = [
        celery_worker(["execute"], concurrency=execute_threads) for _ in range(execute_workers)
    ]
    with ExitStack() as stack:
        stack.enter_context(running(ticker, env=environment, log=logs / "tick.log"))
        for k, (executor, _name) in enumerate(executors, start=1):
            log = logs / ("execute.log" if execute_workers == 1 else f"execute-{k}.log")
            stack.enter_context(running(executor, env=environment, log=log))
        beat = celery_beat(logs / "beat-schedule")
        stack.enter_context(running(beat, env=environment, log=logs / "beat.log"))
        wait_for_workers([tick_name, *(name for _executor, name in executors)])
        yield Fleet(logs)


def ticking_into_this_test(
    fleet: Fleet, *, before_idle: Callable[[], object] = lambda: None
) -> Iterator[Fleet]:
    """The body of a test's fleet fixture: the fleet, once it ticks into this test's
    database; afterwards nothing left to claim (``before_idle`` first, then every job
    paused: the claim takes active jobs only) and nothing in flight."""
    ticked = wait_until(lambda: Heartbeat.objects.filter(name="tick").exists(), timeout=60)
    assert ticked, fleet.tail()
    yield fleet
    before_idle()
    Job.objects.update(status=JobStatus.PAUSED)
    idle = wait_until(
        lambda: (
            not Slot.objects.filter(claim_token__isnull=False).exists()
            and not Run.objects.filter(status=RunStatus.RUNNING).exists()
        ),
        timeout=120,
    )
    assert idle, fleet.tail()
