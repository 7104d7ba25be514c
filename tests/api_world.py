"""The admin tests' two tenants (tests/admin_world.py) with API keys, and a sample call
of every API operation against one tenant's objects (used by the isolation tests of the
REST API and of the MCP tools)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.utils import timezone

import api.main  # noqa: F401 - registers every operation
from api.models import ApiKey, Scope
from api.operations import OPERATIONS, Operation
from notifications.models import AlertRule, Channel
from tests.admin_world import TenantWorld, World, build_world


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
    }
    return bodies.get(op.name)


def sample_query(op: Operation, side: TenantWorld) -> dict[str, Any]:
    """Filters naming ``side``'s objects, for the list operations that take them."""
    return {"job_id": side.job.pk} if op.name == "list_endpoints" else {}


def sample_url(op: Operation, side: TenantWorld) -> str:
    return "/api/v1" + op.path.format(**ids_of(side))


def operations(*, write: bool | None = None) -> list[Operation]:
    return [op for op in OPERATIONS if write is None or op.write == write]


def names_objects(op: Operation) -> bool:
    """Whether the call names a tenant's object (in its path, filters or body)."""
    named = ("create_job", "create_endpoint", "create_channel", "list_endpoints", "set_alert_rule")
    return "{" in op.path or op.name in named
