"""The common world of the tests, made in one place (the root conftest.py serves it as
fixtures: ``world``, ``api_world``, ``key``, ``http``).

- ``build_world``: two tenants with one of everything each. Alpha belongs to staff user
  alice, Beta to staff user bob; root is a superuser. Beta's names contain "beta-secret"
  so a leak into any Alpha page is easy to spot.
- ``build_api_world``: the same with API keys, an alert channel and rule each, and
  ``sample_url``/``sample_body``: a call of every API operation against one tenant's
  objects (the isolation tests of the REST API and of the MCP tools).
- ``make_key``: an API key of a tenant, its raw value.
- ``endpoint_form``: what the admin's endpoint form posts for a valid endpoint.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import reverse
from django.utils import timezone

import api.main  # noqa: F401 - registers every operation
from api.models import ApiKey, Scope
from api.operations import OPERATIONS, Operation
from endpoints.backfill_models import Backfill
from endpoints.choices import BackfillStatus
from endpoints.models import Endpoint, HintHistory, Job, Run, RunStatus, Tenant
from notifications.models import AlertRule, Channel
from planner.models import AnalysisSession

TOOL_CALLS = [
    {"tool": "get_latest_response", "arguments": {}, "result": {"found": True, "status": 503}},
    {
        "tool": "propose_interval",
        "arguments": {"intervalMs": 30000, "ttlMinutes": 60, "reason": "queue growing"},
        "result": {"ok": True},
    },
    {
        "tool": "propose_next_time",
        "arguments": {"nextRunAtIso": "soon", "ttlMinutes": 9999},
        "error": "ttlMinutes must be between 1 and 1440.",
    },
]


@dataclass
class TenantWorld:
    tenant: Tenant
    job: Job
    endpoint: Endpoint
    run: Run
    hint: HintHistory
    session: AnalysisSession
    channel: Any = None  # an alert channel, made by tests/world.py
    rule: Any = None  # an alert rule of the job, made by tests/world.py
    backfill: Any = None  # a finished backfill of the endpoint


@dataclass
class World:
    a: TenantWorld
    b: TenantWorld
    alice: Any
    bob: Any
    root: Any

    def client_for(self, user: Any) -> Client:
        client = Client()
        client.force_login(user)
        return client

    def add_endpoint(self, job: Job, name: str, **fields: Any) -> Endpoint:
        values: dict[str, Any] = {
            "url": f"https://{job.tenant.name.lower()}.example.com/{name}",
            "baseline_interval_ms": 300_000,
            "next_run_at": timezone.now() + timedelta(minutes=5),
            "next_run_source": "baseline-interval",
        }
        values.update(fields)
        return Endpoint.objects.create(job=job, name=name, **values)

    def add_run(self, endpoint: Endpoint, **fields: Any) -> Run:
        started = fields.pop("started_at", timezone.now() - timedelta(minutes=10))
        values: dict[str, Any] = {
            "trigger": "manual",
            "source": "baseline-interval",
            "scheduled_for": started - timedelta(milliseconds=200),
            "started_at": started,
            "status": RunStatus.SUCCESS,
        }
        values.update(fields)
        if values["status"] != RunStatus.RUNNING:
            values.setdefault("finished_at", started + timedelta(milliseconds=120))
            values.setdefault("duration_ms", 120)
        return Run.objects.create(endpoint=endpoint, **values)


def _tenant_world(name: str, job_name: str, endpoint_name: str, member: Any) -> TenantWorld:
    now = timezone.now()
    tenant = Tenant.objects.create(name=name, monthly_token_budget=100_000)
    tenant.members.add(member)
    job = Job.objects.create(tenant=tenant, name=job_name)
    endpoint = Endpoint.objects.create(
        job=job,
        name=endpoint_name,
        url=f"https://{name.lower()}.example.com/orders",
        baseline_interval_ms=300_000,
        next_run_at=now + timedelta(minutes=4),
        next_run_source="baseline-interval",
    )
    started = now - timedelta(minutes=10)
    run = Run.objects.create(
        endpoint=endpoint,
        trigger="scheduled",
        source="baseline-interval",
        scheduled_for=started - timedelta(milliseconds=200),
        started_at=started,
        finished_at=started + timedelta(milliseconds=1500),
        duration_ms=1500,
        status=RunStatus.FAILURE,
        status_code=503,
        request_method="GET",
        request_url=endpoint.url,
        response_body={"queue_depth": 42, "status": "degraded"},
        response_size_bytes=41,
        error="upstream said 503",
    )
    session = AnalysisSession.objects.create(
        endpoint=endpoint,
        backend="llm",
        model="gpt-test",
        status="succeeded",
        started_at=now - timedelta(minutes=5),
        finished_at=now - timedelta(minutes=5) + timedelta(seconds=3),
        duration_ms=3000,
        tool_calls=TOOL_CALLS,
        reasoning="Queue is growing; tightening.",
        actions_taken=["propose_interval"],
        confidence=0.8,
        prompt_tokens=1000,
        completion_tokens=234,
        total_tokens=1234,
    )
    hint = HintHistory.objects.create(
        endpoint=endpoint,
        kind="interval",
        interval_ms=30_000,
        expires_at=now + timedelta(hours=1),
        reason="queue growing",
        created_at=now - timedelta(minutes=5),
        session=session,
    )
    backfill = Backfill.objects.create(
        endpoint=endpoint,
        range_from=now - timedelta(hours=2),
        range_to=now - timedelta(hours=1),
        rate=5,
        status=BackfillStatus.DONE,
        created_at=now,
        finished_at=now,
        paced_until=now,
    )
    return TenantWorld(tenant, job, endpoint, run, hint, session, backfill=backfill)


def build_world() -> World:
    users = get_user_model().objects
    # No passwords: the tests sign in with force_login, and hashing is slow on purpose.
    alice = users.create_user("alice", is_staff=True)
    bob = users.create_user("bob", is_staff=True)
    root = users.create_superuser("root", "root@example.com", None)
    return World(
        a=_tenant_world("Alpha", "ops-alpha", "alpha-orders", alice),
        b=_tenant_world("Beta", "beta-secret-job", "beta-secret-endpoint", bob),
        alice=alice,
        bob=bob,
        root=root,
    )


def operation_url(endpoint: Endpoint, name: str) -> str:
    return reverse("admin:endpoints_endpoint_operation", args=[endpoint.pk, name])


def endpoint_form(job: Job | None, **values: Any) -> dict[str, Any]:
    """Everything the admin's endpoint form posts, as its page would, for a valid new
    endpoint of ``job`` (every 5 minutes, the rest as the page leaves it) or for one whose
    headers and run policy are the defaults; ``values`` are what the person typed or
    changed."""
    return {
        "job": str(job.pk) if job else "",
        "name": "orders",
        "url": "https://example.com/orders",
        "method": "GET",
        "headers": "{}",
        "secret_header_names": "[]",
        "body": "null",
        "timeout_ms": "30s",
        "max_response_size_kb": "100",
        "baseline_cron": "",
        "timezone": "UTC",
        "baseline_interval_ms": "5m",
        "min_interval_ms": "",
        "max_interval_ms": "",
        "description": "",
        "run_policy": "{}",
        # What the page holds hidden beside the fields whose default is a new object: the
        # value it showed, from which Django tells whether the person changed it.
        "initial-headers": "{}",
        "initial-secret_header_names": "[]",
        "initial-run_policy": "{}",
        **values,
    }


def make_key(tenant: Any, *, scope: str = Scope.WRITE, **fields: Any) -> str:
    key = ApiKey(tenant=tenant, name=f"{scope} key", scope=scope, **fields)
    raw = key.issue()
    key.save()
    return raw


@dataclass
class ApiWorld:
    world: World
    write_key: str  # tenant A's
    read_key: str
    expired_key: str
    revoked_key: str

    @property
    def a(self) -> TenantWorld:
        return self.world.a

    @property
    def b(self) -> TenantWorld:
        return self.world.b


def build_api_world() -> ApiWorld:
    world = build_world()
    now = timezone.now()
    for side in (world.a, world.b):
        side.channel = Channel.objects.create(
            tenant=side.tenant, name="oncall", kind="webhook", target="http://127.0.0.1:9/hook"
        )
        side.rule = AlertRule.objects.create(job=side.job, after_failures=2)
    return ApiWorld(
        world=world,
        write_key=make_key(world.a.tenant),
        read_key=make_key(world.a.tenant, scope=Scope.READ),
        expired_key=make_key(world.a.tenant, expires_at=now - timedelta(seconds=1)),
        revoked_key=make_key(world.a.tenant, revoked_at=now),
    )


def ids_of(side: TenantWorld) -> dict[str, int]:
    return {
        "job_id": side.job.pk,
        "endpoint_id": side.endpoint.pk,
        "run_id": side.run.pk,
        "hint_id": side.hint.pk,
        "session_id": side.session.pk,
        "tenant_id": side.tenant.pk,
        "channel_id": side.channel.pk,
        "rule_id": side.rule.pk,
        "backfill_id": side.backfill.pk,
    }


def sample_body(op: Operation, side: TenantWorld) -> dict[str, Any] | None:
    """A valid body for ``op`` naming ``side``'s objects (None: the operation takes none)."""
    bodies: dict[str, dict[str, Any]] = {
        "create_job": {"name": "new-job", "tenant_id": side.tenant.pk},
        "update_job": {"description": "changed"},
        "create_endpoint": {
            "job_id": side.job.pk,
            "name": "new-endpoint",
            "url": "https://example.com/new",
            "baseline_interval_ms": 60_000,
        },
        "update_endpoint": {"description": "changed"},
        "preview_change": {"baseline_interval_ms": 120_000},
        "pause_endpoint": {"for_ms": 60_000},
        "set_hint": {"interval_ms": 30_000, "ttl_ms": 3_600_000},
        "clear_hints": {},
        "create_channel": {
            "name": "new-channel",
            "kind": "email",
            "target": "ops@example.com",
            "tenant_id": side.tenant.pk,
        },
        "update_channel": {"enabled": False},
        "set_alert_rule": {"job_id": side.job.pk, "after_failures": 4},
        "analyze_endpoint": {"backend": "rules"},
        # Names the tenant, lists no job: a dry run that finds nothing to change.
        "import_config": {
            "text": f"version: 1\ntenants:\n  - name: {side.tenant.name}\n",
            "dry_run": True,
        },
        "start_backfill": {
            "endpoint_id": side.endpoint.pk,
            "range_from": (timezone.now() - timedelta(hours=2)).isoformat(timespec="seconds"),
            "range_to": (timezone.now() - timedelta(hours=1)).isoformat(timespec="seconds"),
            "dry_run": True,
        },
    }
    return bodies.get(op.name)


def sample_query(op: Operation, side: TenantWorld) -> dict[str, Any]:
    """Filters naming ``side``'s objects, for the list operations that take them."""
    if op.name == "explain_slot":
        return {"at": "2026-01-01T00:00:00Z"}
    return {"job_id": side.job.pk} if op.name == "list_endpoints" else {}


def sample_url(op: Operation, side: TenantWorld) -> str:
    return "/api/v1" + op.path.format(**ids_of(side))


def operations(*, write: bool | None = None) -> list[Operation]:
    return [op for op in OPERATIONS if write is None or op.write == write]


def names_objects(op: Operation) -> bool:
    """Whether the call names a tenant's object (in its path, filters or body)."""
    named = (
        "create_job",
        "create_endpoint",
        "create_channel",
        "list_endpoints",
        "set_alert_rule",
        "import_config",
        "start_backfill",
    )
    return "{" in op.path or op.name in named
