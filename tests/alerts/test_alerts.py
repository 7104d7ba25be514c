"""Alerts: one per state change and channel, digests, retries with backoff, secrets.

Real PostgreSQL, a real SMTP server (aiosmtpd) and a real webhook receiver on 127.0.0.1;
the notify cycle is called with ``now`` passed in, as the Celery task and runscheduler
call it (their end-to-end tests are in test_alerts_end_to_end.py).
"""

from __future__ import annotations

import json
import logging
import threading
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone

from endpoints.models import Endpoint, Slot
from endpoints.operations import replan_after_edit
from notifications.alerts import detect_changes, notify_cycle
from notifications.delivery import backoff, send_test_message
from notifications.models import (
    Alert,
    AlertKind,
    AlertRule,
    Channel,
    ChannelKind,
    Delivery,
    DeliveryStatus,
)
from tests.e2e.readme import recipe

# Transactional: each channel sends in its own thread, on its own database connection.
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("quick_alerts")]

S = timedelta(seconds=1)
M = timedelta(minutes=1)
H = timedelta(hours=1)


@pytest.fixture
def channels(tenant, smtp, target):
    tenant.hmac_secret = "tenant-hmac-secret-123"
    tenant.save(update_fields=["hmac_secret"])
    return [
        Channel.objects.create(
            tenant=tenant, name="ops-mail", kind=ChannelKind.EMAIL, target="ops@example.com"
        ),
        Channel.objects.create(
            tenant=tenant,
            name="hook",
            kind=ChannelKind.WEBHOOK,
            target=target.url("/hook/s3cr3t-path-token"),
        ),
    ]


def fail(endpoint: Endpoint, times: int) -> None:
    Endpoint.objects.filter(pk=endpoint.pk).update(failure_count=times)


def hooks(target):
    return [json.loads(hit.body) for hit in target.hits("/hook/s3cr3t-path-token")]


def test_a_failing_endpoint_alerts_once_per_channel_after_three_failures_then_once_on_recovery(
    make_endpoint, channels, smtp, target, now
):
    endpoint = make_endpoint(name="billing")
    for failures, at in [(1, 0), (2, 10), (3, 20), (4, 30), (5, 40)]:
        fail(endpoint, failures)
        notify_cycle(now=now + at * S)
    fail(endpoint, 0)
    notify_cycle(now=now + 50 * S)
    notify_cycle(now=now + 60 * S)
    notify_cycle(now=now + 70 * S)

    assert smtp.subjects() == [
        "[Cronicorn] ops/billing is failing",
        "[Cronicorn] ops/billing recovered",
    ]
    assert [(h["kind"], [a["event"] for a in h["alerts"]]) for h in hooks(target)] == [
        ("alert", ["failing"]),
        ("alert", ["recovered"]),
    ]
    assert smtp.messages()[0]["X-Envelope-To"] == "ops@example.com"


def test_fewer_failures_than_the_rule_asks_for_send_nothing(make_endpoint, channels, smtp, now):
    endpoint = make_endpoint()
    AlertRule.objects.create(job=endpoint.job, after_failures=5)
    fail(endpoint, 4)
    notify_cycle(now=now)
    fail(endpoint, 0)
    notify_cycle(now=now + 10 * S)
    notify_cycle(now=now + 20 * S)
    assert smtp.subjects() == []
    assert not Alert.objects.exists()


def test_an_endpoint_rule_overrides_its_jobs_rule(make_endpoint, channels, smtp, now):
    strict, lax = make_endpoint(name="strict"), make_endpoint(name="lax")
    AlertRule.objects.create(job=strict.job, after_failures=5)
    AlertRule.objects.create(endpoint=strict, after_failures=1, on_recovery=False)
    fail(strict, 1)
    fail(lax, 1)
    notify_cycle(now=now)
    fail(strict, 0)
    notify_cycle(now=now + 10 * S)
    notify_cycle(now=now + 20 * S)
    assert smtp.subjects() == ["[Cronicorn] ops/strict is failing"]


def test_fifty_endpoints_of_one_job_failing_together_send_one_digest(
    job, make_endpoint, channels, smtp, target, now
):
    endpoints = [make_endpoint(name=f"shard-{k:02}") for k in range(50)]
    Endpoint.objects.filter(pk__in=[e.pk for e in endpoints[:30]]).update(failure_count=3)
    notify_cycle(now=now)
    Endpoint.objects.filter(pk__in=[e.pk for e in endpoints[30:]]).update(failure_count=3)
    notify_cycle(now=now + 2 * S)  # within the digest wait of the first ones
    notify_cycle(now=now + 10 * S)
    notify_cycle(now=now + 20 * S)

    assert smtp.subjects() == ["[Cronicorn] ops: 50 endpoints changed (50 failing)"]
    [digest] = hooks(target)
    assert digest["kind"] == "digest"
    assert sorted(a["endpoint"] for a in digest["alerts"]) == [
        f"ops/shard-{k:02}" for k in range(50)
    ]
    assert Delivery.objects.count() == 2


def test_a_planner_pause_alerts_once_with_its_reason(make_endpoint, channels, smtp, now):
    endpoint = make_endpoint(name="queue")
    Endpoint.objects.filter(pk=endpoint.pk).update(
        paused_until=now + timedelta(hours=2), pause_reason="maintenance window"
    )
    for at in (0, 10, 20):
        notify_cycle(now=now + at * S)
    [subject] = smtp.subjects()
    assert subject == "[Cronicorn] ops/queue was paused"
    assert "maintenance window" in smtp.messages()[0].get_payload()


def test_an_endpoint_that_stops_running_alerts_after_its_stale_factor(
    make_endpoint, channels, smtp, now
):
    endpoint = make_endpoint(name="nightly", baseline_interval_ms=60_000)
    AlertRule.objects.create(job=endpoint.job, stale_factor=3)
    Slot.objects.filter(pk=endpoint.pk).update(last_run_at=now - 2 * timedelta(minutes=1))
    notify_cycle(now=now)
    assert smtp.subjects() == []
    Slot.objects.filter(pk=endpoint.pk).update(last_run_at=now - 4 * timedelta(minutes=1))
    notify_cycle(now=now + 1 * S)
    notify_cycle(now=now + 10 * S)
    assert smtp.subjects() == ["[Cronicorn] ops/nightly has stopped running"]
    assert "has not run for 4 minutes 1 second" in smtp.messages()[0].get_payload()


@pytest.mark.parametrize("rest", ["blackout", "active period over", "one-off ahead"])
def test_an_endpoint_its_run_policy_keeps_from_running_is_not_stale(make_endpoint, rest):
    t0 = timezone.now().replace(second=0, microsecond=0)
    policy: dict[str, Any] = {
        "blackout": {"blackout": [{"start": f"{t0:%H:%M}", "end": f"{t0 + 3 * H:%H:%M}"}]},
        "active period over": {"active_until": (t0 + 5 * M).isoformat()},
        "one-off ahead": {"run_once_at": (t0 + 3 * H).isoformat()},
    }[rest]
    endpoint = make_endpoint(baseline_interval_ms=60_000, run_policy=policy)
    AlertRule.objects.create(job=endpoint.job, stale_factor=3)
    Slot.objects.filter(pk=endpoint.pk).update(last_run_at=t0 - M)
    later = t0 + 10 * M  # 11 minutes without a run, more than 3 intervals
    replan_after_edit(endpoint, now=later if rest == "active period over" else t0)

    assert not [a for a in detect_changes(now=later) if a.kind == AlertKind.STALE]
    if rest == "blackout":  # stale all the same once its run is overdue after the window
        [stale] = [a for a in detect_changes(now=t0 + 3 * H + 4 * M) if a.kind == "stale"]
        assert stale.detail == "has not run for 3 hours 5 minutes"


def test_alerts_wait_out_quiet_hours_then_go_as_one_message(make_endpoint, channels, smtp, now):
    endpoint = make_endpoint(name="batch")
    AlertRule.objects.create(
        job=endpoint.job,
        quiet_from=(now - timedelta(hours=1)).time(),
        quiet_until=(now + timedelta(hours=1)).time(),
    )
    fail(endpoint, 3)
    notify_cycle(now=now)
    notify_cycle(now=now + 10 * S)
    assert smtp.subjects() == []
    notify_cycle(now=now + timedelta(hours=1, seconds=1))
    assert smtp.subjects() == ["[Cronicorn] ops/batch is failing"]


@pytest.mark.django_db(transaction=True)
def test_two_cycles_at_once_raise_each_change_once(make_endpoint, tenant, now):
    endpoints = [make_endpoint() for _ in range(20)]
    Endpoint.objects.filter(pk__in=[e.pk for e in endpoints]).update(failure_count=3)
    barrier = threading.Barrier(2)
    raised: list[int] = []

    def cycle() -> None:
        from django.db import connection

        barrier.wait()
        try:
            raised.append(len(detect_changes(now=now)))
        finally:
            connection.close()

    threads = [threading.Thread(target=cycle) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sum(raised) == 20
    assert Alert.objects.filter(kind=AlertKind.FAILING).count() == 20


def test_the_webhook_signature_verifies_with_the_documented_recipe(
    make_endpoint, channels, target, now
):
    fail(make_endpoint(name="api"), 3)
    notify_cycle(now=now)
    notify_cycle(now=now + 10 * S)
    [hit] = target.hits("/hook/s3cr3t-path-token")

    # The recipe as README.md ("Alerts") shows it, run as written there.
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    verify = recipe(readme, "verify.py", "verify")
    assert verify(b"tenant-hmac-secret-123", hit.headers, hit.body) is True
    assert verify(b"another-secret", hit.headers, hit.body) is False
    assert hit.headers["Content-Type"].startswith("application/json")


def test_a_channel_answering_500_is_retried_with_backoff_every_attempt_recorded_then_marked(
    make_endpoint, tenant, target, now, settings
):
    target.reply("/down/tok3n-in-path", status=500)
    channel = Channel.objects.create(
        tenant=tenant,
        name="down",
        kind=ChannelKind.WEBHOOK,
        target=target.url("/down/tok3n-in-path"),
    )
    fail(make_endpoint(name="api"), 3)
    notify_cycle(now=now)
    at = now + 10 * S
    notify_cycle(now=at)  # first attempt
    delivery = Delivery.objects.get()
    waits = []
    for _ in range(settings.CRONICORN_NOTIFY_MAX_ATTEMPTS - 1):
        delivery.refresh_from_db()
        waits.append(delivery.next_attempt_at - delivery.attempt_log.last().at)
        notify_cycle(now=delivery.next_attempt_at - 1 * S)  # not due yet: nothing sent
        notify_cycle(now=delivery.next_attempt_at)

    delivery.refresh_from_db()
    channel.refresh_from_db()
    assert waits == [backoff(n) for n in range(1, settings.CRONICORN_NOTIFY_MAX_ATTEMPTS)]
    assert waits[1] == 2 * waits[0]
    assert len(target.hits("/down/tok3n-in-path")) == settings.CRONICORN_NOTIFY_MAX_ATTEMPTS
    assert delivery.status == DeliveryStatus.FAILED
    assert [a.ok for a in delivery.attempt_log.all()] == [False] * delivery.attempts
    assert "HTTP 500" in delivery.last_error
    assert channel.failing_since is not None and channel.consecutive_failures == 5
    assert "tok3n-in-path" not in delivery.last_error


def test_a_channel_that_times_out_is_recorded_as_such_and_retried(
    make_endpoint, tenant, target, now
):
    hold = threading.Event()
    target.reply("/slow", hold=hold)
    Channel.objects.create(
        tenant=tenant, name="slow", kind=ChannelKind.WEBHOOK, target=target.url("/slow")
    )
    fail(make_endpoint(name="api"), 3)
    notify_cycle(now=now)
    notify_cycle(now=now + 10 * S)
    hold.set()
    delivery = Delivery.objects.get()
    assert delivery.status == DeliveryStatus.PENDING
    assert "timed out" in delivery.last_error
    assert delivery.next_attempt_at > now + 10 * S


def test_a_recovered_channel_sends_what_waited_and_is_no_longer_marked(
    make_endpoint, tenant, target, now, settings
):
    settings.CRONICORN_NOTIFY_CHANNEL_FAILING_AFTER = 1
    target.reply("/flaky", status=503)
    channel = Channel.objects.create(
        tenant=tenant, name="flaky", kind=ChannelKind.WEBHOOK, target=target.url("/flaky")
    )
    fail(make_endpoint(name="api"), 3)
    notify_cycle(now=now)
    notify_cycle(now=now + 10 * S)
    channel.refresh_from_db()
    assert channel.failing_since is not None
    target.reply("/flaky", status=200)
    notify_cycle(now=Delivery.objects.get().next_attempt_at)
    channel.refresh_from_db()
    assert (channel.failing_since, channel.consecutive_failures) == (None, 0)
    assert Delivery.objects.get().status == DeliveryStatus.SENT


def test_a_channel_disabled_while_a_delivery_waits_for_its_retry_sends_nothing_more(
    make_endpoint, tenant, target, now
):
    target.reply("/old-room", status=503)
    channel = Channel.objects.create(
        tenant=tenant, name="old", kind=ChannelKind.WEBHOOK, target=target.url("/old-room")
    )
    fail(make_endpoint(name="api"), 3)
    notify_cycle(now=now)
    notify_cycle(now=now + 10 * S)  # the first attempt fails: retried after its backoff
    target.reply("/old-room", status=200)
    channel.enabled = False
    channel.save(update_fields=["enabled"])

    delivery = Delivery.objects.get()
    notify_cycle(now=delivery.next_attempt_at)
    notify_cycle(now=delivery.next_attempt_at + timedelta(hours=1))

    assert len(target.hits("/old-room")) == 1
    delivery.refresh_from_db()
    channel.refresh_from_db()
    assert (delivery.status, delivery.attempts) == (DeliveryStatus.FAILED, 1)
    assert delivery.last_error == "Not sent: the channel was disabled before it went out."
    assert channel.consecutive_failures == 1  # the one real failure, nothing for the rest


def test_apprise_channels_deliver_through_apprise(make_endpoint, tenant, target, now):
    # Apprise's json:// service posts to any host: the receiver stands in for Slack & co.
    host = target.url("/").split("://")[1].rstrip("/")
    Channel.objects.create(
        tenant=tenant, name="chat", kind=ChannelKind.APPRISE, target=f"json://{host}/chat"
    )
    fail(make_endpoint(name="api"), 3)
    notify_cycle(now=now)
    notify_cycle(now=now + 10 * S)
    [hit] = target.hits("/chat")
    sent = json.loads(hit.body)
    assert sent["title"] == "[Cronicorn] ops/api is failing"
    assert "3 failed runs in a row" in sent["message"]


def test_an_apprise_channel_to_a_private_address_is_refused_unless_allowed(
    make_endpoint, tenant, target, now, settings
):
    settings.CRONICORN_ALLOW_PRIVATE_ADDRESSES = False
    host = target.url("/").split("://")[1].rstrip("/")
    channel = Channel.objects.create(
        tenant=tenant, name="chat", kind=ChannelKind.APPRISE, target=f"json://{host}/chat"
    )
    delivery = send_test_message(channel, now=now)
    assert delivery.status == DeliveryStatus.FAILED
    assert "blocked" in delivery.last_error and "CRONICORN_ALLOW_PRIVATE_ADDRESSES" in (
        delivery.last_error
    )
    assert target.hits() == []


def test_channel_secrets_never_reach_the_logs(make_endpoint, tenant, target, now, caplog):
    secret = "xoxb-very-secret-token-42"
    target.reply(f"/hooks/{secret}", status=500)
    Channel.objects.create(
        tenant=tenant,
        name="slackish",
        kind=ChannelKind.WEBHOOK,
        target=target.url(f"/hooks/{secret}"),
    )
    host = target.url("/").split("://")[1].rstrip("/")
    Channel.objects.create(
        tenant=tenant,
        name="chat",
        kind=ChannelKind.APPRISE,
        target=f"json://user:{secret}@{host}:1/x",
    )
    fail(make_endpoint(name="api"), 3)
    with caplog.at_level(logging.DEBUG):
        notify_cycle(now=now)
        notify_cycle(now=now + 10 * S)
    assert "alert delivery failed" in caplog.text
    assert secret not in caplog.text
    assert all(secret not in d.last_error for d in Delivery.objects.all())
