"""Who changed what: one change through each interface (the admin, the API, MCP, an
import, a command, the planner, the breaker) is one audit entry naming its actor, and a
secret header's value never appears in any entry nor in any answer about them."""

from __future__ import annotations

import asyncio
import getpass
import json
import re
from datetime import timedelta
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.test import Client as DjangoClient
from django.urls import reverse
from django.utils import timezone
from mcp import Client

from api.mcp_server import build_server
from endpoints import breaker
from endpoints.audit import GAP_SECONDS, AuditEntry, SchedulerGap, note_tick
from endpoints.engine.maintenance import retention_cycle
from endpoints.models import Endpoint
from endpoints.policies import RunPolicy
from planner.models import AnalysisSession
from planner.tools import EndpointTools
from tests.world import ApiWorld

SECRET = "s3cr3t-value-never-shown"

pytestmark = pytest.mark.django_db(transaction=True)


def entries_of(endpoint: Endpoint) -> list[AuditEntry]:
    return list(
        AuditEntry.objects.filter(object_type="endpoint", object_id=endpoint.pk).order_by("pk")
    )


def test_one_change_through_each_interface_is_one_entry_with_its_actor(
    api_world: ApiWorld, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    world = api_world.world
    endpoint = world.a.endpoint
    prefix = api_world.write_key.split("_")[1]  # cc_<prefix>_<secret>
    seen: list[tuple[str, str, str]] = []

    def newest() -> AuditEntry:
        entry = AuditEntry.objects.order_by("-pk").first()
        assert entry is not None
        seen.append((entry.actor_kind, entry.actor, entry.action))
        return entry

    # The API: a key sets a secret header.
    api = DjangoClient(headers={"Authorization": f"Bearer {api_world.write_key}"})
    response = api.patch(
        f"/api/v1/endpoints/{endpoint.pk}",
        {"headers": {"X-Api-Token": SECRET}},
        content_type="application/json",
    )
    assert response.status_code == 200, response.content
    entry = newest()
    assert (entry.actor, entry.action) == (f"key cc_{prefix}", "updated")
    assert entry.changes == [
        {"field": "headers.X-Api-Token", "before": "(absent)", "after": "••••"}
    ]

    # The admin: alice pauses it from the list.
    admin = world.client_for(world.alice)
    admin.post(
        reverse("admin:endpoints_endpoint_changelist"),
        {"action": "pause_1h", "_selected_action": [str(endpoint.pk)], "index": "0"},
    )
    entry = newest()
    assert (entry.actor_kind, entry.actor, entry.action) == ("person", "alice", "paused")

    # MCP: the same key resumes it through the tool.
    async def resume() -> None:
        async with Client(build_server(stdio_key=api_world.write_key)) as client:
            result = await client.call_tool("resume_endpoint", {"endpoint_id": endpoint.pk})
            assert not result.is_error, result

    asyncio.run(resume())
    entry = newest()
    assert (entry.actor, entry.action) == (f"key cc_{prefix}", "resumed")

    # An import, by the command: the OS user running it.
    cli = f"cli:{getpass.getuser()}"
    out = StringIO()
    call_command("export_endpoints", "--tenant", world.a.tenant.name, stdout=out)
    exported = out.getvalue().replace(f"description: {endpoint.description}", "description: x")
    config = exported.replace(endpoint.url, endpoint.url + "?from=import")
    for name in re.findall(r"\$\{(CRONICORN_SECRET_\w+)\}", config):  # the file's secrets
        monkeypatch.setenv(name, SECRET if "TOKEN" in name else world.a.channel.target)
    path = tmp_path / "config.yaml"
    path.write_text(config)
    call_command("import_endpoints", str(path), stdout=StringIO())
    entry = newest()
    assert (entry.actor, entry.action, entry.reason) == (cli, "updated", "import")
    assert any(change["field"] == "url" for change in entry.changes)

    # A command.
    call_command("clear_hints", endpoint.ref, stdout=StringIO())
    entry = newest()
    assert (entry.actor_kind, entry.actor, entry.action) == ("command", cli, "hints-cleared")

    # The planner writes a hint.
    endpoint.refresh_from_db()
    session = AnalysisSession.objects.create(
        endpoint=endpoint, backend="rules", started_at=timezone.now()
    )
    tools = EndpointTools(endpoint=endpoint, session=session, now=timezone.now())
    tools.call("propose_interval", {"intervalMs": 120_000, "ttlMinutes": 30, "reason": "deep"})
    entry = newest()
    assert (entry.actor, entry.action) == (f"planner session {session.pk}", "hint-set")

    # The breaker opens.
    policy = RunPolicy(breaker_failed_slots=3, breaker_cooldown_ms=60_000)
    assert breaker.open_breaker(endpoint.pk, policy, now=timezone.now(), reason="Breaker: 3")
    entry = newest()
    assert (entry.actor_kind, entry.actor, entry.action) == ("breaker", "breaker", "breaker-opened")

    # Exactly one entry each, in that order; nothing else recorded the endpoint.
    assert [(e.actor, e.action) for e in entries_of(endpoint)] == [(a, c) for _, a, c in seen]
    assert len(seen) == 7

    # The secret is in no entry, and in no answer of the API, the command or the admin.
    stored = json.dumps([e.changes for e in AuditEntry.objects.all()])
    assert SECRET not in stored
    assert SECRET not in json.dumps(list(AuditEntry.objects.values()), default=str)
    listing = api.get(f"/api/v1/audit?object=endpoint:{endpoint.pk}")
    assert listing.status_code == 200
    assert len(listing.json()["items"]) == 7
    assert SECRET not in listing.content.decode()
    out = StringIO()
    call_command("audit", "--object", f"endpoint:{endpoint.pk}", "--json", stdout=out)
    assert len(json.loads(out.getvalue())) == 7 and SECRET not in out.getvalue()
    page = admin.get(reverse("admin:endpoints_endpoint_change", args=[endpoint.pk]))
    assert "History of changes" in page.content.decode()
    assert f"key cc_{prefix}" in page.content.decode()
    assert SECRET not in page.content.decode()


def test_the_trail_is_the_callers_tenants_only_and_says_a_bad_object_in_words(
    api_world: ApiWorld,
) -> None:
    world = api_world.world
    api = DjangoClient(headers={"Authorization": f"Bearer {api_world.write_key}"})
    other = world.b.endpoint
    call_command("pause", other.ref, "--for", "1h", stdout=StringIO())  # tenant B's

    assert api.get(f"/api/v1/audit?object=endpoint:{other.pk}").json()["items"] == []
    assert api.get("/api/v1/audit").json()["items"] == []
    bad = api.get("/api/v1/audit?object=endpoint-12")
    assert bad.status_code == 422
    assert "e.g. endpoint:12" in bad.json()["errors"]["object"][0]


def test_a_job_saved_through_the_api_is_one_entry_and_the_trail_is_kept_as_long_as_runs(
    api_world: ApiWorld, settings: Any
) -> None:
    world = api_world.world
    api = DjangoClient(headers={"Authorization": f"Bearer {api_world.write_key}"})
    response = api.patch(
        f"/api/v1/jobs/{world.a.job.pk}", {"max_concurrent": 2}, content_type="application/json"
    )
    assert response.status_code == 200, response.content
    (entry,) = AuditEntry.objects.filter(object_type="job", object_id=world.a.job.pk)
    assert entry.changes == [{"field": "max_concurrent", "before": "(none)", "after": "2"}]

    now = timezone.now()
    note_tick(now - timedelta(seconds=GAP_SECONDS + 1), now=now)
    assert SchedulerGap.objects.count() == 1
    settings.CRONICORN_RUN_RETENTION_DAYS = 1
    retention_cycle(now=now + timedelta(days=2))
    assert not AuditEntry.objects.exists()
    assert not SchedulerGap.objects.exists()


def test_a_tenants_new_signing_secret_set_in_the_admin_is_recorded_masked(
    api_world: ApiWorld,
) -> None:
    world = api_world.world
    tenant = world.a.tenant
    admin = DjangoClient()
    admin.force_login(world.root)
    response = admin.post(
        reverse("admin:endpoints_tenant_change", args=[tenant.pk]),
        {
            "name": tenant.name,
            "members": [user.pk for user in tenant.members.all()],
            "max_endpoints": 7,
            "min_interval_ms": tenant.min_interval_ms,
            "monthly_token_budget": tenant.monthly_token_budget,
            "hmac_secret": SECRET,
        },
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    (entry,) = AuditEntry.objects.filter(object_type="tenant", object_id=tenant.pk)
    assert (entry.actor, entry.action) == (world.root.get_username(), "updated")
    assert {"field": "hmac_secret", "before": "••••", "after": "••••"} in entry.changes or {
        "field": "hmac_secret",
        "before": "(none)",
        "after": "••••",
    } in entry.changes
    assert {
        "field": "max_endpoints",
        "before": str(tenant.max_endpoints),
        "after": "7",
    } in entry.changes
    assert SECRET not in json.dumps(entry.changes)
