"""How the processes share the machine's CPU: the web yields it to the scheduler
(``CRONICORN_WEB_NICE``), and each may keep to cores of its own
(``CRONICORN_SCHEDULER_CPUS``, ``CRONICORN_WEB_CPUS``).

A run's start is a timer firing in the scheduler: when every core is busy with others'
work, the timer waits for a core, and a tenant's requests to the API make another
tenant's runs late. Niceness shares the CPU by weight but still lets a busy core make the
scheduler wait its turn; cores of its own do not (bench/noisy_neighbour.py, "cores of
their own"). Each process calls one function as it starts, before its threads: its
threads (and theirs) inherit the choice.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured


def cpu_list(text: str, name: str) -> frozenset[int]:
    """A CPU list in the kernel's format (``0``, ``1-3``, ``0,2-3``); empty for any. Hand-
    written: the standard library reads no CPU list. Whether the machine has those CPUs
    is checked where a process takes them (``_keep_to``)."""
    cpus: set[int] = set()
    for part in filter(None, text.strip().split(",")):
        first, dash, last = part.strip().partition("-")
        last = last if dash else first
        if not (first.isdigit() and last.isdigit()) or int(last) < int(first):
            raise ImproperlyConfigured(
                f"{name}={text!r} is not a CPU list; write CPUs and ranges as the kernel "
                "does, e.g. 0, 1-3 or 0,2-3."
            )
        cpus.update(range(int(first), int(last) + 1))
    return frozenset(cpus)


def yield_to_the_scheduler() -> None:
    """A web process (a gunicorn worker, ``mcp --http``): nicer, and on its own cores."""
    os.nice(settings.CRONICORN_WEB_NICE)
    _keep_to("CRONICORN_WEB_CPUS", settings.CRONICORN_WEB_CPUS)


def keep_to_the_scheduler_cores() -> None:
    """A scheduler process (``runscheduler``, a Celery worker or beat): on its own cores."""
    _keep_to("CRONICORN_SCHEDULER_CPUS", settings.CRONICORN_SCHEDULER_CPUS)


def _keep_to(name: str, cpus: frozenset[int]) -> None:
    if not cpus:
        return
    machine = set(range(os.cpu_count() or 1))
    if cpus - machine:
        raise ImproperlyConfigured(
            f"{name} names CPUs this machine does not have ({_words(sorted(cpus - machine))}); "
            f"it has {_words(sorted(machine))}: name some of those."
        )
    # Every thread of the process, those already started (a library's) included: the
    # affinity is a thread's own, and only threads started after it inherit it.
    for task in Path("/proc/self/task").iterdir():
        try:
            os.sched_setaffinity(int(task.name), cpus)
        except ProcessLookupError:  # a thread that ended meanwhile
            continue
        except OSError as exc:  # none of them in this process's cpuset (a container's)
            raise ImproperlyConfigured(
                f"{name} names CPUs this process may not use ({exc.strerror}); name CPUs of "
                "its cpuset (its container's)."
            ) from None


def _words(cpus: Iterable[int]) -> str:
    return ", ".join(map(str, cpus))
