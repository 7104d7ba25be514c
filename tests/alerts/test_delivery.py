"""Alerts people can trust: a test message goes out exactly once while the notify loop
runs; retries keep their backoff even after a hanging send; one channel that never
answers delays no other channel or tenant.

Real servers on 127.0.0.1: an SMTP server (aiosmtpd), a webhook receiver, Apprise's
json:// posting to the receiver, and a TCP server that accepts and never answers. The
notify cycle is driven directly (as runscheduler's loop calls it) with short settings.
"""

from __future__ import annotations

import io
import itertools
import json
import time
from datetime import timedelta

import pytest
from django.core.management import CommandError, call_command
from django.db import transaction
from django.utils import timezone

from endpoints.models import Endpoint, Flip, Job, Tenant
from notifications.delivery import backoff, wait_for_senders
from notifications.models import AlertRule, Channel, ChannelKind, Delivery, DeliveryStatus
from tests.alerts.servers import SilentServer, notify_loop
from tests.http_targets import Hit, TargetServer

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("loopback_allowed")]


@pytest.fixture(autouse=True)
def senders_done():
    yield
    assert wait_for_senders(30), "a sender thread outlived its test"


@pytest.fixture
def quick(settings):
    settings.CRONICORN_NOTIFY_SECONDS = 0.1
    settings.CRONICORN_ALERT_DIGEST_SECONDS = 0.2
    settings.CRONICORN_NOTIFY_TIMEOUT_SECONDS = 2
    settings.CRONICORN_NOTIFY_RETRY_SECONDS = 0.5
    settings.CRONICORN_NOTIFY_MAX_ATTEMPTS = 4


def test_test_channel_sends_exactly_one_message_per_call_while_the_notify_loop_runs(
    tenant, smtp, target, quick
):
    host = target.url("/").split("://")[1].rstrip("/")
    Channel.objects.create(tenant=tenant, name="mail", kind=ChannelKind.EMAIL, target="a@b.io")
    Channel.objects.create(
        tenant=tenant, name="hook", kind=ChannelKind.WEBHOOK, target=target.url("/hook")
    )
    Channel.objects.create(
        tenant=tenant, name="chat", kind=ChannelKind.APPRISE, target=f"json://{host}/chat"
    )
    with notify_loop(0.01) as errors:
        for _ in range(10):
            for name in ("Acme/mail", "Acme/hook", "Acme/chat"):
                call_command("test_channel", name)  # raises CommandError if it failed
        time.sleep(0.3)  # a loop that would also send them has had its turns
    assert errors == []
    assert len(smtp.messages()) == 10
    assert len(target.hits("/hook")) == 10
    assert len(target.hits("/chat")) == 10
    assert Delivery.objects.filter(status=DeliveryStatus.SENT).count() == 30
    assert all(d.attempts == 1 for d in Delivery.objects.all())


def test_test_channel_json_gives_the_outcome_and_a_failure_still_exits_non_zero(
    tenant, target, quick
):
    hook = Channel.objects.create(
        tenant=tenant, name="hook", kind=ChannelKind.WEBHOOK, target=target.url("/hook")
    )
    target.reply("/down", status=500)
    down = Channel.objects.create(
        tenant=tenant, name="down", kind=ChannelKind.WEBHOOK, target=target.url("/down")
    )
    out = io.StringIO()
    call_command("test_channel", "Acme/hook", "--json", stdout=out)
    failed = io.StringIO()
    with pytest.raises(CommandError, match="the test message failed"):
        call_command("test_channel", "Acme/down", "--json", stdout=failed)

    sent, refused = json.loads(out.getvalue()), json.loads(failed.getvalue())
    assert (sent["channel_id"], sent["kind"], sent["status"], sent["error"]) == (
        hook.pk,
        "webhook",
        "sent",
        "",
    )
    assert (refused["channel_id"], refused["status"]) == (down.pk, "failed")
    assert "500" in refused["error"]
    assert Delivery.objects.get(pk=sent["delivery_id"]).status == DeliveryStatus.SENT


def test_a_test_message_to_a_channel_that_never_answers_fails_once_within_its_timeout(
    tenant, quick
):
    with SilentServer() as silent:
        Channel.objects.create(
            tenant=tenant, name="dead", kind=ChannelKind.WEBHOOK, target=silent.url("/x")
        )
        started = time.monotonic()
        with pytest.raises(Exception, match="the test message failed"):
            call_command("test_channel", "Acme/dead")
        assert time.monotonic() - started < 3
    [delivery] = Delivery.objects.all()
    assert (delivery.status, delivery.attempts) == (DeliveryStatus.FAILED, 1)
    assert "timed out" in delivery.last_error


def fail_like_the_engine(endpoint: Endpoint, failures: int) -> None:
    """What the engine's reschedule writes for a run's outcome: the failure count, and on
    a success after failures the Flip, in one transaction (endpoints.engine)."""
    with transaction.atomic():
        before = Endpoint.objects.get(pk=endpoint.pk).failure_count
        Endpoint.objects.filter(pk=endpoint.pk).update(failure_count=failures)
        if failures == 0 and before:
            Flip.objects.create(endpoint=endpoint, failures=before, at=timezone.now())


def test_retries_are_never_earlier_than_their_backoff_even_after_a_hanging_send(
    tenant, target, quick, make_endpoint
):
    target.reply("/down", status=500)
    with SilentServer() as silent:
        # The silent channel hangs each cycle's turn for its full timeout beside the other.
        Channel.objects.create(
            tenant=tenant, name="dead", kind=ChannelKind.WEBHOOK, target=silent.url("/x")
        )
        Channel.objects.create(
            tenant=tenant, name="down", kind=ChannelKind.WEBHOOK, target=target.url("/down")
        )
        fail_like_the_engine(make_endpoint(name="api"), 3)
        with notify_loop(0.05) as errors:
            assert target.wait_for(lambda: len(target.hits("/down")) >= 4, timeout=20)
        assert errors == []
        # The fourth attempt is recorded once its answer is in, by its own sender thread.
        assert wait_for_senders(30)
    arrivals = [hit.at for hit in target.hits("/down")]
    delivery = Delivery.objects.get(channel__name="down")
    attempts = list(delivery.attempt_log.all())
    assert [a.number for a in attempts] == [1, 2, 3, 4]
    for number, (earlier, later) in enumerate(itertools.pairwise(arrivals), 1):
        assert later - earlier >= backoff(number).total_seconds()
    for earlier, later in itertools.pairwise(attempts):
        assert later.at - timedelta(milliseconds=later.duration_ms) >= earlier.at + backoff(
            earlier.number
        )
    assert delivery.status == DeliveryStatus.FAILED


def failing_hits(receiver: TargetServer, ref: str) -> list[Hit]:
    return [
        hit
        for hit in receiver.hits("/b")
        if any(
            (alert["endpoint"], alert["event"]) == (ref, "failing")
            for alert in json.loads(hit.body)["alerts"]
        )
    ]


def test_a_hanging_channel_of_one_tenant_never_silences_a_short_streak_of_another(
    quick, settings, make_endpoint
):
    """Tenant A's only channel never answers and A keeps failing; tenant B's endpoint fails
    three times within 0.6 s and recovers 2 s after its first failure. B's failing alert
    reaches B's receiver within the usual delay (a cycle and the digest wait), 20 of 20."""
    settings.CRONICORN_NOTIFY_RETRY_SECONDS = 0  # A's channel is retried every cycle
    settings.CRONICORN_NOTIFY_MAX_ATTEMPTS = 1000
    usual = settings.CRONICORN_NOTIFY_SECONDS + settings.CRONICORN_ALERT_DIGEST_SECONDS
    a_endpoint = make_endpoint(name="a-api")
    b_tenant = Tenant.objects.create(name="Beta")
    b_job = Job.objects.create(tenant=b_tenant, name="b")
    AlertRule.objects.create(job=b_job, on_recovery=True)
    delays = []
    with SilentServer() as silent, TargetServer() as receiver:
        Channel.objects.create(
            tenant=a_endpoint.job.tenant,
            name="dead",
            kind=ChannelKind.WEBHOOK,
            target=silent.url("/hook"),
        )
        Channel.objects.create(
            tenant=b_tenant, name="hook", kind=ChannelKind.WEBHOOK, target=receiver.url("/b")
        )
        fail_like_the_engine(a_endpoint, 3)
        with notify_loop(settings.CRONICORN_NOTIFY_SECONDS) as errors:
            for round_ in range(20):
                b = Endpoint.objects.create(
                    job=b_job,
                    name=f"streak-{round_}",
                    url="https://example.com/",
                    baseline_interval_ms=60_000,
                )
                started = time.monotonic()
                for failures in (1, 2, 3):
                    fail_like_the_engine(b, failures)
                    if failures < 3:
                        time.sleep(0.3)
                third = time.time()
                ref = f"b/streak-{round_}"
                time.sleep(max(0.0, 2.0 - (time.monotonic() - started)))
                fail_like_the_engine(b, 0)
                assert receiver.wait_for(
                    lambda ref=ref: bool(failing_hits(receiver, ref)), timeout=10
                ), f"round {round_}: no failing alert"
                [hit] = failing_hits(receiver, ref)
                delays.append(hit.at - third)
        assert errors == []
        assert silent.accepted >= 3  # A's channel was tried, and hung, all along
    assert max(delays) <= usual + 1.0, delays
