"""The smaller findings, each through the interface that showed it: one signature after
the grace period even before maintenance, no "recovered" alert for a manual reset,
scheduler_status with no scheduler, an import file whose header name is not text."""

from __future__ import annotations

import io
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client
from django.utils import timezone

from endpoints.engine.claiming import claim_due_endpoints
from endpoints.engine.running import execute_claim
from endpoints.models import Endpoint, Run, RunStatus, Slot, Source, Tenant
from endpoints.operations import rotate_signing_secret, test_endpoint
from notifications.alerts import notify_cycle
from notifications.models import Alert, AlertKind, Channel, ChannelKind
from notifications.transports import Message, send
from tests.world import make_key

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("loopback_allowed")]


def test_after_the_grace_period_one_signature_even_before_maintenance(
    tenant: Tenant, make_endpoint: Any, target: Any
) -> None:
    Tenant.objects.filter(pk=tenant.pk).update(hmac_secret="the-old-secret")
    tenant.refresh_from_db()
    an_hour_ago = timezone.now() - timedelta(hours=1)
    rotate_signing_secret(tenant, now=an_hour_ago, grace=timedelta(minutes=5))
    tenant.refresh_from_db()
    assert tenant.hmac_secret_previous  # maintenance has not cleared it
    endpoint = make_endpoint(url=target.url("/signed"))

    test_endpoint(Endpoint.objects.select_related("job__tenant").get(pk=endpoint.pk))
    Slot.objects.filter(pk=endpoint.pk).update(
        next_run_at=timezone.now(), next_run_source=Source.BASELINE_INTERVAL
    )
    [claim] = claim_due_endpoints(now=timezone.now(), limit=10, horizon_ms=0)
    execute_claim(claim)
    hook = Channel.objects.create(
        tenant=tenant, name="hook", kind=ChannelKind.WEBHOOK, target=target.url("/signed")
    )
    send(Channel.objects.select_related("tenant").get(pk=hook.pk), Message("s", "b", {}))

    hits = target.hits("/signed")
    assert len(hits) == 3
    assert all("," not in hit.headers["X-Cronicorn-Signature"] for hit in hits)


def test_a_reset_failing_endpoint_is_never_called_recovered_the_reset_ended_its_episode(
    tenant: Tenant, make_endpoint: Any, target: Any, settings: Any
) -> None:
    settings.CRONICORN_ALERT_DIGEST_SECONDS = 0
    Channel.objects.create(
        tenant=tenant, name="hook", kind=ChannelKind.WEBHOOK, target=target.url("/hook")
    )
    target.reply("/missing", status=404)
    endpoint = make_endpoint(url=target.url("/missing"))
    now = timezone.now()
    for minutes in (3, 2, 1):  # a minute apart: the tenant's floor allows one call a second
        test_endpoint(
            Endpoint.objects.select_related("job__tenant").get(pk=endpoint.pk),
            now=now - timedelta(minutes=minutes),
        )
    Endpoint.objects.filter(pk=endpoint.pk).update(failure_count=3)
    notify_cycle(now=now)
    assert list(Alert.objects.values_list("kind", flat=True)) == [AlertKind.FAILING]

    api = Client(headers={"Authorization": f"Bearer {make_key(tenant)}"})
    assert api.post(f"/api/v1/endpoints/{endpoint.pk}/reset-failures").status_code == 200
    notify_cycle(now=now + timedelta(seconds=10))
    notify_cycle(now=now + timedelta(seconds=20))
    assert list(Alert.objects.values_list("kind", flat=True)) == [AlertKind.FAILING]

    # The reset ended the episode (tests/alerts/test_episodes.py): a success after it is
    # the endpoint's normal state, told to nobody; only a success ending a streak that
    # is still open is "recovered".
    Run.objects.filter(endpoint=endpoint).update(started_at=now - timedelta(minutes=1))
    Run.objects.create(
        endpoint=endpoint,
        trigger="scheduled",
        source="baseline-interval",
        status=RunStatus.SUCCESS,
        status_code=200,
        scheduled_for=now,
        started_at=now,
        finished_at=now,
    )
    notify_cycle(now=now + timedelta(seconds=30))
    assert list(Alert.objects.values_list("kind", flat=True)) == [AlertKind.FAILING]


def test_scheduler_status_with_no_scheduler_says_so_first() -> None:
    out = io.StringIO()
    with pytest.raises(CommandError, match="never ticked"):
        call_command("scheduler_status", stdout=out)
    text = out.getvalue()
    first = text.splitlines()[0]
    assert "NOT HEALTHY" in first and "never ticked" in first
    assert "worker" not in text.split("Keeping up:")[1].splitlines()[0]


def test_an_import_file_with_a_header_name_that_is_not_text_says_so(
    tmp_path: Path, tenant: Tenant
) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(
        "tenants:\n"
        f"  - name: {tenant.name}\n"
        "    jobs:\n"
        "      - name: ops\n"
        "        endpoints:\n"
        "          - name: e\n"
        "            url: https://example.com/\n"
        "            baseline_interval: 5m\n"
        "            headers:\n"
        "              200: ok\n"
    )
    with pytest.raises(CommandError) as refused:
        call_command("import_endpoints", str(path), stdout=io.StringIO(), stderr=io.StringIO())
    message = str(refused.value)
    assert "header names must be text, got int 200; quote it" in message, message
    assert "got text" not in message
