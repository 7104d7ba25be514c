"""The fixtures every folder shares, each defined once: a tenant, its job and endpoints
(``tenant``, ``job``, ``make_endpoint``), the two-tenant world of the admin and API tests
(``world``, ``api_world``, built in tests/world.py), a tenant's API key and an HTTP client
of the served API (``key``, ``http``), a fixed ``now`` and a recording HTTP ``target``.

A folder's own conftest.py holds what only its tests share; a fixture one file needs
stays in that file. Tests that need their rows committed (a live server, a process)
say so with ``pytest.mark.django_db(transaction=True)``; ``live_server`` implies it.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
from django.core.management.base import CommandError
from django.core.servers import basehttp
from django.db import OperationalError
from django.test import TransactionTestCase

from endpoints.embedded import EmbeddedScheduler
from endpoints.models import Endpoint, Job, Tenant
from tests.http_targets import TargetServer
from tests.world import ApiWorld, World, build_api_world, build_world, make_key


def pytest_configure(config: pytest.Config) -> None:
    TransactionTestCase._fixture_teardown = _flush_again_if_chosen_as_deadlock_victim  # type: ignore[method-assign]
    basehttp.WSGIRequestHandler.setup = _setup_without_nagle  # type: ignore[method-assign]


_handler_setup = basehttp.WSGIRequestHandler.setup


def _setup_without_nagle(self: basehttp.WSGIRequestHandler) -> None:
    """The live server's connections send at once (TCP_NODELAY). Django's development
    server writes a response's headers and its body apart; on a kept-alive connection
    the body then waits for the client's delayed ACK of the headers: 40 ms a request,
    every request after a connection's first (httpx clients, Schemathesis: ~90 % of the
    contract test's time). Production's gunicorn is not this server."""
    self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    _handler_setup(self)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test whose rows must be committed (a live server, a thread or a process reads
    them: ``transaction=True``, ``live_server``) is ``integration``: ``scripts/test --fast``
    leaves those out, with the slow, browser and fault tests."""
    for item in items:
        db = item.get_closest_marker("django_db")
        names = getattr(item, "fixturenames", ())
        if (db is not None and db.kwargs.get("transaction")) or {
            "live_server",
            "transactional_db",
        } & set(names):
            item.add_marker(pytest.mark.integration)


_flush = TransactionTestCase._fixture_teardown


def _flush_again_if_chosen_as_deadlock_victim(self: TransactionTestCase) -> None:
    """Empty the database after a transactional test, again if PostgreSQL chose the flush
    as a deadlock's victim: what PostgreSQL asks of every client whose transaction it
    aborts so, and what the flush's TRUNCATE of every table can meet while a process the
    test started is still finishing a transaction. Fixtures stop their processes before
    the flush (tests/run_policies/test_run_policies_celery.py ``fleet``); this is the
    net under that rule, so that one slow exit costs a retry, not the next test's rows."""
    for attempt in range(3):
        try:
            _flush(self)
            return
        except CommandError as exc:
            if attempt == 2 or not isinstance(exc.__cause__, OperationalError):
                raise
            time.sleep(0.5 * (attempt + 1))


@pytest.fixture
def tenant(db: None) -> Tenant:
    return Tenant.objects.create(name="Acme")


@pytest.fixture
def job(tenant: Tenant) -> Job:
    return Job.objects.create(tenant=tenant, name="ops")


@pytest.fixture
def make_endpoint(job: Job) -> Callable[..., Endpoint]:
    """Create a valid endpoint (1 minute interval unless told otherwise), full_clean'ed."""
    counter = iter(range(1, 1_000_000))

    def make(**fields: Any) -> Endpoint:
        values: dict[str, Any] = {
            "job": job,
            "name": f"endpoint-{next(counter)}",
            "url": "http://127.0.0.1:9/health",
        }
        values.update(fields)
        if "baseline_cron" not in fields and "baseline_interval_ms" not in fields:
            values["baseline_interval_ms"] = 60_000
        endpoint = Endpoint(**values)
        endpoint.full_clean()
        endpoint.save()
        return endpoint

    return make


@pytest.fixture
def now() -> datetime:
    return datetime(2026, 11, 22, 12, 0, tzinfo=UTC)


@pytest.fixture
def scheduler(transactional_db: None) -> Iterator[EmbeddedScheduler]:
    """What ``runscheduler`` runs, in this process (four runs in flight), ticked by the
    test (``tick_once``); its runs finished and its threads stopped at the end, before
    the database is emptied (it is set up after it). Its threads have connections of
    their own, so the rows they read must be committed."""
    embedded = EmbeddedScheduler(max_in_flight=4)
    yield embedded
    embedded.shutdown(timeout=10)


@pytest.fixture
def loopback_allowed(settings: Any) -> None:
    """Let the executor call the test servers on 127.0.0.1 (the SSRF guard refuses it)."""
    settings.CRONICORN_ALLOW_PRIVATE_ADDRESSES = True


@pytest.fixture
def target() -> Iterator[TargetServer]:
    """A recording HTTP server on 127.0.0.1 (see tests/http_targets.py)."""
    with TargetServer() as server:
        yield server


@pytest.fixture
def world(db: None) -> World:
    """Two tenants with one of everything, their staff users and a superuser."""
    return build_world()


@pytest.fixture
def api_world(db: None) -> ApiWorld:
    """``world`` with API keys (write, read-only, expired, revoked), channels and rules."""
    return build_api_world()


@pytest.fixture
def key(tenant: Tenant) -> str:
    """A write key of ``tenant``, raw."""
    return make_key(tenant)


@pytest.fixture
def http(live_server: Any, key: str) -> Iterator[httpx.Client]:
    """The API served on a live server, as ``tenant`` with ``key``: paths from /api/v1."""
    headers = {"Authorization": f"Bearer {key}"}
    with httpx.Client(base_url=f"{live_server.url}/api/v1", headers=headers, timeout=30) as c:
        yield c
