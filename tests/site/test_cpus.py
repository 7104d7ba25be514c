"""The scheduler's processes and the web's may keep to cores of their own
(CRONICORN_SCHEDULER_CPUS, CRONICORN_WEB_CPUS): every thread of a live runscheduler and
Celery worker, and gunicorn's workers (not its arbiter), read back from the kernel; a
list that is not one, or names a CPU the process may not use, is refused in words."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured

from endpoints.cpus import cpu_list, keep_to_the_scheduler_cores
from tests.api.serving import gunicorn_serving
from tests.engine_processes import (
    celery_worker,
    child_database_url,
    manage,
    process_env,
    running,
    wait_for_workers,
    wait_until,
)
from tests.site.test_web_priority import processes_started_with

CPUS = sorted(os.sched_getaffinity(0))
FIRST, LAST = CPUS[0], CPUS[-1]


def threads_cpus(pid: int) -> list[set[int]]:
    """The CPUs each thread of a process may run on."""
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            found.append(os.sched_getaffinity(int(task.name)))
        except ProcessLookupError:
            continue
    return found


@pytest.mark.parametrize(
    ("text", "cpus"), [("", set()), ("0", {0}), ("1-3", {1, 2, 3}), (" 0,2-3 ", {0, 2, 3})]
)
def test_a_cpu_list_reads_as_the_kernel_writes_it(text: str, cpus: set[int]) -> None:
    assert cpu_list(text, "CRONICORN_WEB_CPUS") == cpus


@pytest.mark.parametrize("text", ["one", "3-1", "0-", "-2", "0;1"])
def test_what_is_not_a_cpu_list_is_refused_in_words(text: str) -> None:
    with pytest.raises(ImproperlyConfigured) as refused:
        cpu_list(text, "CRONICORN_SCHEDULER_CPUS")
    assert str(refused.value) == (
        f"CRONICORN_SCHEDULER_CPUS={text!r} is not a CPU list; write CPUs and ranges as the "
        "kernel does, e.g. 0, 1-3 or 0,2-3."
    )


def test_a_cpu_the_process_may_not_use_is_refused_before_anything_moves(settings: Any) -> None:
    settings.CRONICORN_SCHEDULER_CPUS = frozenset({FIRST, 4096})
    with pytest.raises(ImproperlyConfigured) as refused:
        keep_to_the_scheduler_cores()
    assert str(refused.value).startswith(
        "CRONICORN_SCHEDULER_CPUS names CPUs this machine does not have (4096); it has 0"
    )
    assert os.sched_getaffinity(0) == set(CPUS)


@pytest.mark.slow
def test_every_thread_of_runscheduler_keeps_to_the_scheduler_cpus(tmp_path: Path) -> None:
    database = tmp_path / "cronicorn.sqlite3"
    env = process_env(DATABASE_URL=f"sqlite:///{database}", CRONICORN_SCHEDULER_CPUS=str(LAST))
    subprocess.run(manage("migrate", "-v", "0"), env=env, check=True, timeout=120)
    log = tmp_path / "scheduler.log"
    with running(manage("runscheduler"), env=env, log=log) as process:
        assert wait_until(lambda: len(threads_cpus(process.pid)) > 3, timeout=60), log.read_text()
        cpus = threads_cpus(process.pid)
    assert cpus and all(each == {LAST} for each in cpus), cpus


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_every_thread_of_a_celery_worker_keeps_to_the_scheduler_cpus(tmp_path: Path) -> None:
    env = process_env(DATABASE_URL=child_database_url(), CRONICORN_SCHEDULER_CPUS=str(LAST))
    worker, name = celery_worker(["maintenance"], concurrency=3)
    with running(worker, env=env, log=tmp_path / "worker.log") as process:
        wait_for_workers([name])
        cpus = threads_cpus(process.pid)
    # Its pool's threads start as tasks come, from threads already kept there.
    assert cpus and all(each == {LAST} for each in cpus), cpus


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_gunicorns_workers_keep_to_the_web_cpus_and_its_arbiter_does_not(tmp_path: Path) -> None:
    with gunicorn_serving(tmp_path, WEB_CONCURRENCY="2", CRONICORN_WEB_CPUS=str(FIRST)) as url:
        port = url.rsplit(":", 1)[1]
        pids = sorted(processes_started_with(f"--bind 127.0.0.1:{port}"))
        cpus = sorted((os.sched_getaffinity(pid) for pid in pids), key=len)
    assert cpus == [{FIRST}, {FIRST}, set(CPUS)]  # two workers, then the arbiter
