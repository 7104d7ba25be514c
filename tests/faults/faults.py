"""The faults, each a function of a running ``FaultCase`` that returns when the fault is over.

The time spent inside a function is the fault (an outage's length, a stopped worker's
pause); the recovery time is measured from its return. Crashed processes come back at once,
as a restart policy brings them back; outages end without restarting any process.
"""

from __future__ import annotations

import json
import signal
import time
from dataclasses import dataclass, field, replace

from tests.faults.world import Fault, FaultCase, Shape

OUTAGE_SECONDS = 5.0
# How long a stopped worker stays stopped; longer than a short renewed lease should be.
STOP_SECONDS = 6.0
# The lease in the stalled-worker case: shorter than the stall.
STALL_LEASE_SECONDS = 3
# How long the faults that are a configuration (two beats, a short visibility timeout) run.
WINDOW_SECONDS = 6.0
# Kombu's Redis transport keeps unacknowledged messages in this hash (its default key).
UNACKED_KEY = "unacked"


def drop_broker_connections(case: FaultCase) -> None:
    """``CLIENT KILL TYPE normal``: every client connection to Redis is cut, Redis stays up."""
    case.services.redis.drop_client_connections()


def restart_redis(case: FaultCase) -> None:
    case.services.redis.restart()


def redis_outage(case: FaultCase, seconds: float = OUTAGE_SECONDS) -> None:
    case.services.redis.stop()
    time.sleep(seconds)  # the outage itself
    case.services.redis.start()


def restart_postgres(case: FaultCase) -> None:
    case.services.postgres.restart()


def postgres_outage(case: FaultCase, seconds: float = OUTAGE_SECONDS) -> None:
    case.services.postgres.stop()
    time.sleep(seconds)  # the outage itself
    case.services.postgres.start()


def kill_execute_worker(case: FaultCase) -> None:
    """SIGKILL with runs in flight; the restart policy starts a new one."""
    case.fleet.restart("execute0")


def stop_execute_worker(case: FaultCase, seconds: float = STOP_SECONDS) -> None:
    """SIGSTOP (a stalled VM, a long GC pause), then SIGCONT: its runs resume afterwards."""
    case.fleet.kill("execute0", signal.SIGSTOP)
    time.sleep(seconds)  # the stall itself
    case.fleet.kill("execute0", signal.SIGCONT)


def kill_tick_worker(case: FaultCase) -> None:
    case.fleet.restart("tick0")


def run_for_a_window(case: FaultCase, seconds: float = WINDOW_SECONDS) -> None:
    """No event: the fault is the fleet's configuration (two beats, a short visibility)."""
    time.sleep(seconds)


def publish_execute_messages_twice(case: FaultCase, seconds: float = 3.0) -> None:
    """Publish a second copy of every ``execute`` message the workers hold (waiting for its
    ETA, or in flight), polled for three seconds, as a producer retry or a restore does. The
    execute task acknowledges its message once the worker's dispatcher holds the claims, so
    a message is held mostly while it waits for its ETA: poll often, on endpoints whose
    slots are claimed ahead (``AHEAD_OF_THE_SLOT``)."""
    client = case.services.redis.client()
    copied: set[bytes | str] = set()
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for tag, raw in client.hgetall(UNACKED_KEY).items():
            message, _exchange, routing_key = json.loads(raw)
            if routing_key == "execute" and tag not in copied:
                client.lpush("execute", json.dumps(message))
                copied.add(tag)
        time.sleep(0.02)
    if not copied:
        raise AssertionError("no execute message was held by a worker to publish twice")


# Kombu's Redis transport restores unacknowledged messages older than this; the harness's
# settings module (child_settings.py) passes it on, as the project's settings have no hook.
SHORT_VISIBILITY = {
    "DJANGO_SETTINGS_MODULE": "tests.faults.child_settings",
    "FAULTS_BROKER_TRANSPORT_OPTIONS": json.dumps(
        {"visibility_timeout": 1, "unacked_restore_interval": 1, "unacked_restore_throttle": 1}
    ),
}

# A threads-pool worker has no event loop timer: kombu restores expired messages only when
# a poll comes back empty. Few endpoints leave such gaps, and a 2 s answer keeps each
# message unacknowledged past the 1 s visibility timeout.
QUIET_SLOW_ENDPOINTS = Shape(endpoints=2, interval="3s", hold_ms=2000, env=SHORT_VISIBILITY)


# A tick claims the slots of the next two ticks and sends each with an ETA half a second
# before it; a run of a 1 s interval that answers in 0.5 s is claimed when its next slot is
# due already, so its message is acknowledged at once. On a 3 s interval every message
# waits at the worker, unacknowledged, for 0.5-1.5 s: there is always one to publish twice.
AHEAD_OF_THE_SLOT = Shape(interval="3s")

# Retries on (issue 21): each endpoint answers 503 four times, then 200, and its job tries
# a slot five times, a second apart: a fault meets a slot between attempts, so the retry
# of a lost attempt fails too and the policy's attempts go on after it. The interval
# leaves room for them (a retry due after the next slot is not made); the stall case's
# short lease, so lost attempts are retried within seconds.
RETRY_POLICY = {"retry_attempts": 5, "retry_delay_ms": 1_000, "retry_backoff": "fixed"}
RETRYING = Shape(
    endpoints=8,
    interval="5s",
    run_policy=RETRY_POLICY,
    failures_per_success=4,
    env={"CRONICORN_LEASE_SECONDS": str(STALL_LEASE_SECONDS)},
)


# Overlap allowed (issue 34): each endpoint may have three calls in flight; a call takes
# 2.5 s and a slot comes every second, so two or three are in flight whenever a fault
# hits. Each slot runs at most once: a call lost with its worker is not run again. The
# stall case's short lease and a sweep every second, so the lost calls are declared lost
# (and their places freed) within seconds.
ALLOW = 3
SIDE_BY_SIDE = Shape(
    endpoints=3,
    hold_ms=2500,
    run_policy={"overlap": {"allow": ALLOW}},
    env={"CRONICORN_LEASE_SECONDS": str(STALL_LEASE_SECONDS), "CRONICORN_MAINTENANCE_SECONDS": "1"},
)


def kill_execute_worker_and_outlive_its_leases(case: FaultCase) -> None:
    """SIGKILL with calls in flight, then as long as their leases and a sweep take: the
    outcome then holds the calls declared lost, and what ran after them."""
    kill_execute_worker(case)
    time.sleep(STALL_LEASE_SECONDS + 2)  # the lost calls' leases run out, a sweep comes


@dataclass(frozen=True)
class Scenario:
    fault: Fault
    shape: Shape = field(default_factory=Shape)

    def resized(self, endpoints: int) -> Shape:
        return replace(self.shape, endpoints=endpoints)


SCENARIOS: dict[str, Scenario] = {
    "connection-drop": Scenario(drop_broker_connections),
    "redis-restart": Scenario(restart_redis),
    "redis-outage": Scenario(redis_outage),
    "postgres-restart": Scenario(restart_postgres),
    "postgres-outage": Scenario(postgres_outage),
    "execute-sigkill": Scenario(kill_execute_worker),
    # A stall longer than the lease: the stalled worker's claims are retried by the other
    # worker, and its own runs, resumed after SIGCONT, must not run beside the retries.
    "execute-sigstop": Scenario(
        stop_execute_worker,
        Shape(execute_workers=2, env={"CRONICORN_LEASE_SECONDS": str(STALL_LEASE_SECONDS)}),
    ),
    "tick-sigkill": Scenario(kill_tick_worker),
    "execute-sigkill-retries": Scenario(kill_execute_worker, RETRYING),
    "execute-sigstop-retries": Scenario(stop_execute_worker, replace(RETRYING, execute_workers=2)),
    "execute-sigkill-allow": Scenario(kill_execute_worker_and_outlive_its_leases, SIDE_BY_SIDE),
    "redis-restart-allow": Scenario(restart_redis, SIDE_BY_SIDE),
    "connection-drop-allow": Scenario(drop_broker_connections, SIDE_BY_SIDE),
    "two-beats": Scenario(run_for_a_window, Shape(beats=2, tick_workers=2)),
    "duplicate-publish": Scenario(publish_execute_messages_twice, AHEAD_OF_THE_SLOT),
    "visibility-timeout": Scenario(run_for_a_window, QUIET_SLOW_ENDPOINTS),
}
