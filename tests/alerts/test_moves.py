"""Alerts of a job moved to another tenant: each goes to the tenant it was raised for.

A job moves with the admin's job form (its tenant field); its alerts already raised but
not yet sent stay the old tenant's (raised while it owned the job), and what happens
after the move is the new tenant's alone: never told on the old tenant's channels. The
old tenant's episode (its acknowledgement, who gave it) stays with the old tenant: the
new one is told afresh what its endpoint is going through."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.urls import reverse

from endpoints.forms import JobForm
from endpoints.models import Endpoint, Job, Tenant
from notifications.alerts import acknowledge, notify_cycle
from notifications.models import AlertRule, Channel, ChannelKind, Delivery, DeliveryStatus
from tests.world import build_world

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("quick_alerts")]

S = timedelta(seconds=1)


def fail(endpoint: Endpoint, times: int) -> None:
    Endpoint.objects.filter(pk=endpoint.pk).update(failure_count=times)


def move(job: Job, tenant: Tenant) -> None:
    form = JobForm(
        instance=job,
        data={"tenant": tenant.pk, "name": job.name, "description": job.description},
    )
    assert form.is_valid(), form.errors
    form.save()


def told(target, path: str) -> list[tuple[str, list[tuple[str, str]]]]:
    payloads = [json.loads(hit.body) for hit in target.hits(path)]
    return [(p["tenant"], [(a["endpoint"], a["event"]) for a in p["alerts"]]) for p in payloads]


def test_alerts_raised_after_a_job_moved_tenant_go_to_the_new_tenant_only(
    tenant, job, make_endpoint, target, now
):
    other = Tenant.objects.create(name="Globex")
    for owner, path in [(tenant, "/hook-acme"), (other, "/hook-globex")]:
        Channel.objects.create(
            tenant=owner, name="hook", kind=ChannelKind.WEBHOOK, target=target.url(path)
        )
    before, after = make_endpoint(name="before"), make_endpoint(name="after")
    fail(before, 3)
    notify_cycle(now=now)  # raised for Acme, waiting out the digest
    move(job, other)
    fail(after, 3)
    notify_cycle(now=now + 2 * S)  # raised for Globex, in the same digest wait
    notify_cycle(now=now + 10 * S)

    assert told(target, "/hook-acme") == [("Acme", [("ops/before", "failing")])]
    # Globex is told afresh of what its endpoints are going through, "before" included.
    assert told(target, "/hook-globex") == [
        ("Globex", [("ops/before", "failing"), ("ops/after", "failing")])
    ]


def test_an_endpoint_failing_when_its_job_moves_tenant_is_told_afresh_to_the_new_tenant(
    tenant, job, make_endpoint, target, now
):
    other = Tenant.objects.create(name="Globex")
    for owner, path in [(tenant, "/hook-acme"), (other, "/hook-globex")]:
        Channel.objects.create(
            tenant=owner, name="hook", kind=ChannelKind.WEBHOOK, target=target.url(path)
        )
    endpoint = make_endpoint(name="billing")
    fail(endpoint, 3)
    notify_cycle(now=now)
    notify_cycle(now=now + 10 * S)
    acknowledge(endpoint, now=now + 15 * S, by="alice@acme")
    move(job, other)
    notify_cycle(now=now + 20 * S)
    notify_cycle(now=now + 30 * S)

    assert told(target, "/hook-acme") == [("Acme", [("ops/billing", "failing")])]
    assert told(target, "/hook-globex") == [("Globex", [("ops/billing", "failing")])]
    state = acknowledge(endpoint, now=now + 40 * S, by="bob@globex")
    assert state is not None
    assert (state.acknowledged_by, state.failing_since) == ("bob@globex", now + 20 * S)


def test_a_job_or_endpoint_whose_rule_escalates_to_its_tenants_channel_is_not_moved_away():
    world = build_world()
    pager = Channel.objects.create(
        tenant=world.a.tenant, name="pager", kind=ChannelKind.EMAIL, target="oncall@alpha.test"
    )
    rule = AlertRule.objects.create(job=world.a.job, escalate_after_minutes=30, escalate_to=pager)
    client = world.client_for(world.root)
    job_page = reverse("admin:endpoints_job_change", args=[world.a.job.pk])
    move_job = {"tenant": world.b.tenant.pk, "name": world.a.job.name, "run_policy": "{}"}

    page = client.post(job_page, move_job)
    assert page.status_code == 200
    assert "escalates to pager, a channel of the current tenant" in page.content.decode()
    assert Job.objects.get(pk=world.a.job.pk).tenant == world.a.tenant

    AlertRule.objects.filter(pk=rule.pk).update(job=None, endpoint=world.a.endpoint)
    endpoint_page = reverse("admin:endpoints_endpoint_change", args=[world.a.endpoint.pk])
    form = client.get(endpoint_page).context["adminform"].form
    move_endpoint = {k: v for k, v in form.initial.items() if v is not None}
    page = client.post(endpoint_page, {**move_endpoint, "job": world.b.job.pk})
    assert page.status_code == 200
    assert "escalates to pager, a channel of the current tenant" in page.content.decode()
    assert Endpoint.objects.get(pk=world.a.endpoint.pk).job == world.a.job
    answer = client.patch(
        f"/api/v1/endpoints/{world.a.endpoint.pk}",
        {"job_id": world.b.job.pk},
        content_type="application/json",
    )
    assert answer.status_code == 422, answer.content
    assert "escalates to pager, a channel of the current tenant" in answer.content.decode()
    assert Endpoint.objects.get(pk=world.a.endpoint.pk).job == world.a.job

    AlertRule.objects.filter(pk=rule.pk).update(escalate_to=None, escalate_after_minutes=0)
    assert client.post(job_page, move_job).status_code == 302
    assert Job.objects.get(pk=world.a.job.pk).tenant == world.b.tenant


def test_a_channel_that_told_its_tenants_alerts_is_not_moved_to_another_tenant(now):
    world = build_world()
    room = Channel.objects.create(
        tenant=world.a.tenant, name="room", kind=ChannelKind.EMAIL, target="ops@alpha.test"
    )
    page = reverse("admin:notifications_channel_change", args=[room.pk])
    move = {"tenant": world.b.tenant.pk, "name": "room", "kind": "email", "enabled": "on"}
    client = world.client_for(world.root)
    Delivery.objects.create(
        channel=room,
        subject="[Cronicorn] alpha-ops/alpha-orders is failing",
        body="alpha-orders failing: HTTP 500",
        payload={"kind": "alert", "tenant": "Alpha"},
        next_attempt_at=now,
        created_at=now,
        status=DeliveryStatus.SENT,
    )

    answer = client.post(page, move)
    assert answer.status_code == 200
    assert "Add a channel with the same target to the other tenant" in answer.content.decode()
    assert Channel.objects.get(pk=room.pk).tenant == world.a.tenant

    fresh = Channel.objects.create(
        tenant=world.a.tenant, name="fresh", kind=ChannelKind.EMAIL, target="ops@alpha.test"
    )
    page = reverse("admin:notifications_channel_change", args=[fresh.pk])
    assert client.post(page, {**move, "name": "fresh"}).status_code == 302
    assert Channel.objects.get(pk=fresh.pk).tenant == world.b.tenant
