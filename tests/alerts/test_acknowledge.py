"""Acknowledging a failing endpoint's alert through the REST API and MCP (one operation,
``acknowledge_alert``) and the admin, and the API's test message sent exactly once while the notify
loop runs, against a real webhook receiver."""

from __future__ import annotations

import asyncio

import pytest
from asgiref.sync import sync_to_async
from django.db import connections
from mcp import Client

from api.mcp_server import build_server
from endpoints.models import Endpoint, Job, Tenant
from notifications.alerts import notify_cycle
from notifications.delivery import wait_for_senders
from notifications.models import AlertState, Channel, ChannelKind, Delivery, DeliveryStatus
from tests.alerts.servers import notify_loop
from tests.http_targets import TargetServer
from tests.world import build_world, operation_url

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("loopback_allowed")]


@pytest.fixture(autouse=True)
def senders_done():
    yield
    assert wait_for_senders(30)


def failing_endpoint(tenant: Tenant, now, name: str = "billing") -> Endpoint:
    job, _made = Job.objects.get_or_create(tenant=tenant, name="ops")
    endpoint = Endpoint.objects.create(
        job=job, name=name, url="https://example.com/", baseline_interval_ms=60_000
    )
    Endpoint.objects.filter(pk=endpoint.pk).update(failure_count=3)
    notify_cycle(now=now)
    assert AlertState.objects.get(pk=endpoint.pk).failing
    return endpoint


def test_the_api_acknowledges_a_failing_endpoint_once_and_refuses_one_that_is_not(
    http, tenant, now
):
    endpoint = failing_endpoint(tenant, now)
    answer = http.post(f"/endpoints/{endpoint.pk}/acknowledge")
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["failing"] is True and body["acknowledged_at"] is not None
    assert body["acknowledged_by"].startswith("API key ")
    again = http.post(f"/endpoints/{endpoint.pk}/acknowledge")
    assert again.json()["acknowledged_at"] == body["acknowledged_at"]  # the first one stands

    healthy = Endpoint.objects.create(
        job=endpoint.job, name="fine", url="https://example.com/", baseline_interval_ms=60_000
    )
    refused = http.post(f"/endpoints/{healthy.pk}/acknowledge")
    assert refused.status_code == 409, refused.text
    assert "nothing to acknowledge" in refused.json()["detail"]

    other = failing_endpoint(Tenant.objects.create(name="Beta"), now, name="theirs")
    assert http.post(f"/endpoints/{other.pk}/acknowledge").status_code == 404
    assert AlertState.objects.get(pk=other.pk).acknowledged_at is None


def test_mcp_acknowledges_through_the_same_operation(tenant, key, now):
    endpoint = failing_endpoint(tenant, now)

    async def scenario() -> dict:
        async with Client(build_server(stdio_key=key)) as client:
            result = await client.call_tool("acknowledge_alert", {"endpoint_id": endpoint.pk})
        await sync_to_async(connections.close_all)()
        assert not result.is_error, result.content
        return result.structured_content

    acknowledged = asyncio.run(scenario())
    assert acknowledged["acknowledged_by"].startswith("API key ")
    assert AlertState.objects.get(pk=endpoint.pk).acknowledged_at is not None


def test_the_apis_test_message_goes_out_exactly_once_per_call_while_the_loop_runs(http):
    with TargetServer() as receiver:
        made = http.post(
            "/channels", json={"name": "hook", "kind": "webhook", "target": receiver.url("/t")}
        )
        assert made.status_code == 201, made.text
        with notify_loop(0.01) as errors:
            answers = [http.post(f"/channels/{made.json()['id']}/test") for _ in range(30)]
            receiver.wait_for(lambda: False, timeout=0.3)  # the loop's turns, had it sent
        assert errors == []
        assert [a.status_code for a in answers] == [200] * 30
        assert all(a.json()["status"] == "sent" for a in answers)
        assert len(receiver.hits("/t")) == 30
    assert Delivery.objects.filter(status=DeliveryStatus.SENT).count() == 30
    assert Channel.objects.get().kind == ChannelKind.WEBHOOK


def test_the_admin_acknowledges_from_the_endpoint_page_and_bob_cannot(now):
    world = build_world()
    endpoint = world.a.endpoint
    Endpoint.objects.filter(pk=endpoint.pk).update(failure_count=3)
    notify_cycle(now=now)
    assert (
        world.client_for(world.bob).post(operation_url(endpoint, "acknowledge")).status_code == 404
    )
    answer = world.client_for(world.alice).post(operation_url(endpoint, "acknowledge"), follow=True)
    assert "Acknowledged" in answer.content.decode()
    state = AlertState.objects.get(pk=endpoint.pk)
    assert state.acknowledged_by == "alice" and state.acknowledged_at is not None
