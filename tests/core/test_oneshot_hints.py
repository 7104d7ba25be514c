"""A one-shot hint and its time to live, from every writer to the engine: a one-shot the
hint would have expired by is refused in the same words by the REST API (and so MCP),
``manage.py hint`` and the planner's tool, nothing written; one whose hint lasts until
its time runs then, even when something plans the endpoint again in between. The
engine's real functions on PostgreSQL, a real HTTP target on 127.0.0.1, the clock
simulated (time-machine)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.core.management import CommandError, call_command
from django.test import Client

from endpoints.engine.claiming import claim_due_endpoints
from endpoints.engine.running import execute_claim
from endpoints.models import Endpoint, HintHistory, Tenant
from tests.world import make_key

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("loopback_allowed")]

START = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
HOUR = timedelta(hours=1)


def post_hint(endpoint: Endpoint, tenant: Tenant, **payload: object):
    return Client().post(
        f"/api/v1/endpoints/{endpoint.pk}/hint",
        payload,
        content_type="application/json",
        headers={"Authorization": f"Bearer {make_key(tenant)}"},
    )


def test_a_one_shot_after_its_hints_expiry_is_refused_and_one_within_it_runs(
    make_endpoint, target, tenant, time_machine
):
    """A daily endpoint, next run tomorrow. A one-shot in 2 h with the one-shot's default
    time to live (30 min) would expire first, and an expired hint never runs: the API and
    the command refuse it saying so, and nothing changes. Given 3 h to live it is taken,
    and it runs at 14:00 though a pause and resume at 12:45 plan the endpoint again."""
    time_machine.move_to(START, tick=False)
    endpoint = make_endpoint(
        url=target.url("/"), baseline_interval_ms=86_400_000, next_run_at=START + 24 * HOUR
    )
    at = START + 2 * HOUR

    refused = post_hint(endpoint, tenant, next_run_in_ms=2 * 3_600_000)
    with pytest.raises(CommandError) as command:
        call_command("hint", str(endpoint.pk), "--at", at.isoformat())
    endpoint.refresh_from_db()

    assert refused.status_code == 409, refused.content
    for said in (refused.json()["detail"], str(command.value)):
        assert "would come after its hint expires" in said
        assert "a time to live of at least 121 minutes" in said
    assert (endpoint.ai_hint_next_run_at, endpoint.ai_hint_expires_at) == (None, None)
    assert endpoint.next_run_at == START + 24 * HOUR
    assert not HintHistory.objects.exists()

    taken = post_hint(endpoint, tenant, next_run_at=at.isoformat(), ttl_ms=3 * 3_600_000)
    assert taken.status_code == 200, taken.content
    time_machine.move_to(START + 45 * timedelta(minutes=1), tick=False)
    call_command("pause", str(endpoint.pk), "--for", "5m")
    call_command("resume", str(endpoint.pk))
    endpoint.refresh_from_db()
    assert (endpoint.next_run_at, endpoint.next_run_source) == (at, "ai-oneshot")

    time_machine.move_to(at, tick=False)
    [claim] = claim_due_endpoints(now=at, limit=10, horizon_ms=0)
    run = execute_claim(claim)
    run.refresh_from_db()
    assert (run.status, run.scheduled_for, run.source) == ("success", at, "ai-oneshot")
    assert len(target.hits("/")) == 1
