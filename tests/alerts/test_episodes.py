"""What an alert says and when: streaks that end between two samples (the engine's
outbox), digest titles that count endpoints, reminders that stop on acknowledgement,
escalation that fires once, channel targets masked in logs and pages.

A real SMTP server and a webhook receiver on 127.0.0.1; the notify cycle is driven with
``now`` passed in (minutes pass without waiting), as runscheduler and Celery call it.
"""

from __future__ import annotations

import json
import logging
import threading
from datetime import timedelta

import pytest
from django.db import connection, transaction

from endpoints.models import Endpoint, Flip, Run, RunStatus
from endpoints.operations import reset_failures
from endpoints.secrets import MASK
from notifications.alerts import acknowledge, consume_flips, notify_cycle
from notifications.delivery import send_test_message, wait_for_senders
from notifications.models import (
    Alert,
    AlertKind,
    AlertRule,
    AlertState,
    Channel,
    ChannelKind,
    Delivery,
)
from notifications.transports import masked_target

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("loopback_allowed")]

S = timedelta(seconds=1)
M = timedelta(minutes=1)


@pytest.fixture(autouse=True)
def settle(settings):
    settings.CRONICORN_ALERT_DIGEST_SECONDS = 5
    settings.CRONICORN_NOTIFY_TIMEOUT_SECONDS = 2
    yield
    assert wait_for_senders(30)


@pytest.fixture
def smtp(smtp, tenant):
    """The shared SMTP server, and the tenant's mail channel to it."""
    Channel.objects.create(
        tenant=tenant, name="mail", kind=ChannelKind.EMAIL, target="ops@example.com"
    )
    return smtp


def engine_writes(endpoint: Endpoint, failures: int, at) -> None:
    """The engine's reschedule as it records a run: the failure count, and on a success
    after failures its Flip, in one transaction."""
    with transaction.atomic():
        before = Endpoint.objects.select_for_update().get(pk=endpoint.pk).failure_count
        Endpoint.objects.filter(pk=endpoint.pk).update(failure_count=failures)
        if failures == 0 and before:
            Flip.objects.create(endpoint=endpoint, failures=before, at=at)


def cycles(now, *seconds: int) -> None:
    for second in seconds:
        notify_cycle(now=now + second * S)


# --- The outbox ------------------------------------------------------------------------


def test_a_streak_that_began_and_ended_between_two_cycles_alerts_failing_then_recovered(
    make_endpoint, smtp, now
):
    endpoint = make_endpoint(name="billing")
    notify_cycle(now=now)
    for failures in (1, 2, 3, 0):  # all within one notify period
        engine_writes(endpoint, failures, now + 1 * S)
    cycles(now, 5, 20)
    assert smtp.subjects() == ["[Cronicorn] ops/billing is failing, then recovered"]
    body = smtp.messages()[0].get_payload()
    assert "3 failed runs in a row" in body and "succeeded again after 3" in body
    assert not Flip.objects.exists()
    assert not AlertState.objects.get(pk=endpoint.pk).failing


def test_a_short_streak_below_the_rule_is_consumed_silently(make_endpoint, smtp, now):
    endpoint = make_endpoint()
    AlertRule.objects.create(job=endpoint.job, after_failures=5)
    for failures in (1, 2, 3, 4, 0):
        engine_writes(endpoint, failures, now)
    cycles(now, 0, 20)
    assert smtp.subjects() == []
    assert not Flip.objects.exists() and not Alert.objects.exists()


def test_a_sampled_failing_streak_is_told_recovered_once_by_its_flip(make_endpoint, smtp, now):
    endpoint = make_endpoint(name="api")
    engine_writes(endpoint, 3, now)
    cycles(now, 0, 10)  # sampled: failing
    engine_writes(endpoint, 0, now + 11 * S)
    cycles(now, 12, 20, 30)
    assert smtp.subjects() == ["[Cronicorn] ops/api is failing", "[Cronicorn] ops/api recovered"]


def test_two_cycles_consuming_the_outbox_at_once_tell_each_streak_once(make_endpoint, now):
    endpoints = [make_endpoint() for _ in range(30)]
    for endpoint in endpoints:
        for failures in (1, 2, 3, 0):
            engine_writes(endpoint, failures, now)
    barrier = threading.Barrier(2)
    told: list[int] = []

    def cycle() -> None:
        barrier.wait()
        try:
            told.append(len(consume_flips(now=now)))
        finally:
            connection.close()

    threads = [threading.Thread(target=cycle) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sum(told) == 60  # failing and recovered, for each of the 30
    assert Alert.objects.filter(kind=AlertKind.FAILING).count() == 30


# --- Digest titles --------------------------------------------------------------------------


def test_digest_titles_count_endpoints_not_alerts(make_endpoint, smtp, now):
    flaky, down = make_endpoint(name="flaky"), make_endpoint(name="down")
    engine_writes(flaky, 3, now)
    engine_writes(down, 3, now)
    notify_cycle(now=now)
    engine_writes(flaky, 0, now + 1 * S)
    cycles(now, 2, 10)
    assert smtp.subjects() == ["[Cronicorn] ops: 2 endpoints changed (1 recovered, 1 failing)"]


# --- Reminders, acknowledgement, escalation -----------------------------------------------


def test_a_reminder_arrives_on_schedule_and_stops_after_acknowledgement(make_endpoint, smtp, now):
    endpoint = make_endpoint(name="billing")
    AlertRule.objects.create(job=endpoint.job, remind_every_minutes=60)
    engine_writes(endpoint, 3, now)
    cycles(now, 0, 10)
    notify_cycle(now=now + 59 * M)  # not yet
    notify_cycle(now=now + 60 * M + 1 * S)
    notify_cycle(now=now + 60 * M + 10 * S)
    notify_cycle(now=now + 119 * M)  # not yet: an hour after the last reminder
    notify_cycle(now=now + 120 * M + 5 * S)
    notify_cycle(now=now + 120 * M + 15 * S)
    assert smtp.subjects() == [
        "[Cronicorn] ops/billing is failing",
        "[Cronicorn] ops/billing is still failing",
        "[Cronicorn] ops/billing is still failing",
    ]
    state = acknowledge(endpoint, now=now + 121 * M, by="alice")
    assert state is not None and state.acknowledged_by == "alice"
    for hours in (3, 4, 5):
        notify_cycle(now=now + hours * 60 * M)
        notify_cycle(now=now + hours * 60 * M + 10 * S)
    assert len(smtp.subjects()) == 3
    # Recovery ends the episode: the next failure alerts and reminds afresh.
    engine_writes(endpoint, 0, now + 6 * 60 * M)
    cycles(now + 6 * 60 * M, 1, 10)
    assert smtp.subjects()[-1] == "[Cronicorn] ops/billing recovered"
    assert AlertState.objects.get(pk=endpoint.pk).acknowledged_at is None


def test_failures_reset_by_hand_end_the_episode_its_reminders_and_escalation(
    make_endpoint, smtp, target, tenant, now
):
    """``reset_failures`` while the last run failed: no reminder or escalation says
    "failing" any more, and none says "recovered" either (no run has succeeded); the
    next streak alerts afresh."""
    pager = Channel.objects.create(
        tenant=tenant,
        name="pager",
        kind=ChannelKind.WEBHOOK,
        target=target.url("/pager"),
        escalation_only=True,
    )
    endpoint = make_endpoint(name="billing")
    AlertRule.objects.create(
        job=endpoint.job, remind_every_minutes=1, escalate_after_minutes=5, escalate_to=pager
    )
    Run.objects.create(
        endpoint=endpoint, scheduled_for=now, started_at=now, status=RunStatus.FAILURE
    )
    engine_writes(endpoint, 3, now)
    cycles(now, 0, 10)
    notify_cycle(now=now + 2 * M)
    notify_cycle(now=now + 2 * M + 10 * S)
    assert smtp.subjects() == [
        "[Cronicorn] ops/billing is failing",
        "[Cronicorn] ops/billing is still failing",
    ]

    reset_failures(Endpoint.objects.get(pk=endpoint.pk), now=now + 3 * M)
    for minutes in (4, 6, 10, 30):
        notify_cycle(now=now + minutes * M)
        notify_cycle(now=now + minutes * M + 10 * S)
    assert len(smtp.subjects()) == 2
    assert target.hits("/pager") == []
    assert not AlertState.objects.get(pk=endpoint.pk).failing

    engine_writes(endpoint, 3, now + 31 * M)
    cycles(now + 31 * M, 0, 10)
    assert smtp.subjects()[-1] == "[Cronicorn] ops/billing is failing"


def test_reminders_are_off_by_default(make_endpoint, smtp, now):
    engine_writes(make_endpoint(name="billing"), 3, now)
    cycles(now, 0, 10)
    for hours in range(1, 25, 6):
        notify_cycle(now=now + hours * 60 * M)
        notify_cycle(now=now + hours * 60 * M + 10 * S)
    assert smtp.subjects() == ["[Cronicorn] ops/billing is failing"]


def test_escalation_goes_once_to_its_channel_only_and_not_after_acknowledgement(
    make_endpoint, smtp, target, tenant, now
):
    pager = Channel.objects.create(
        tenant=tenant,
        name="pager",
        kind=ChannelKind.WEBHOOK,
        target=target.url("/pager"),
        escalation_only=True,
    )
    billing, api = make_endpoint(name="billing"), make_endpoint(name="api")
    AlertRule.objects.create(job=billing.job, escalate_after_minutes=30, escalate_to=pager)
    engine_writes(billing, 3, now)
    engine_writes(api, 3, now)
    cycles(now, 0, 10)
    acknowledge(api, now=now + 1 * M, by="bob")
    for minutes in (29, 31, 45, 90, 300):
        notify_cycle(now=now + minutes * M)
        notify_cycle(now=now + minutes * M + 10 * S)
    [hit] = target.hits("/pager")
    sent = json.loads(hit.body)
    assert [(a["endpoint"], a["event"]) for a in sent["alerts"]] == [("ops/billing", "escalated")]
    assert smtp.subjects() == ["[Cronicorn] ops: 2 endpoints changed (2 failing)"]


def test_acknowledging_an_endpoint_that_is_not_failing_acknowledges_nothing(make_endpoint, now):
    assert acknowledge(make_endpoint(), now=now, by="alice") is None


# --- Masking ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "scheme", "path"),
    [
        (ChannelKind.WEBHOOK, "http", "/services/T0/B0/Xy"),
        (ChannelKind.APPRISE, "json", "/T0/B0/Xy?token=q1"),
        (ChannelKind.APPRISE, "xml", "/T0/B0/Xy?token=q1"),
        (ChannelKind.APPRISE, "form", "/T0/B0/Xy?token=q1"),
    ],
)
def test_channel_target_paths_and_queries_never_reach_logs_or_pages(
    tenant, target, now, caplog, settings, kind, path, scheme
):
    target.reply(path.split("?")[0], status=500)
    host = target.url("/").split("://")[1].rstrip("/")
    url = f"{scheme}://{host}{path}"
    channel = Channel.objects.create(tenant=tenant, name="c", kind=kind, target=url)
    caplog.set_level(logging.DEBUG, logger="cronicorn.executor")
    caplog.set_level(logging.DEBUG, logger="apprise")
    with caplog.at_level(logging.DEBUG):
        send_test_message(channel, now=now)
        settings.CRONICORN_ALLOW_PRIVATE_ADDRESSES = False  # the guard's refusal line too
        send_test_message(channel, now=now)
    shown = masked_target(channel)
    assert shown.endswith(f"/{MASK}") and host in shown
    assert "POST" in caplog.text  # the executor's or Apprise's DEBUG line of the send
    for secret in ("T0/B0", "B0/Xy", "token=q1"):
        assert secret not in caplog.text
        assert secret not in shown
        assert all(secret not in d.last_error for d in Delivery.objects.all())
    assert "refused" in caplog.text or "blocked" in caplog.text


def test_masked_targets_show_hosts_never_tokens():
    def shown(kind: str, target: str) -> str:
        return masked_target(Channel(kind=kind, target=target))

    assert shown(ChannelKind.APPRISE, "slack://TokenA/TokenB/TokenC") == "slack://••••"
    assert shown(ChannelKind.APPRISE, "ntfy://my-secret-topic") == "ntfy://••••"
    assert shown(ChannelKind.APPRISE, "discord://123456/abcdef") == "discord://••••"
    assert shown(ChannelKind.APPRISE, "json://u:pw@hooks.example.com/t") == (
        "json://hooks.example.com/••••"
    )
    assert shown(ChannelKind.WEBHOOK, "https://hooks.slack.com/services/T/B/X") == (
        "https://hooks.slack.com/••••"
    )
    assert shown(ChannelKind.EMAIL, "ops@example.com") == "ops@example.com"


def test_an_escalation_needs_a_channel_of_the_rules_own_tenant(make_endpoint):
    from django.core.exceptions import ValidationError

    from endpoints.models import Tenant

    job = make_endpoint().job
    with pytest.raises(ValidationError, match="Pick the channel escalations go to"):
        AlertRule(job=job, escalate_after_minutes=30).full_clean()
    theirs = Channel.objects.create(
        tenant=Tenant.objects.create(name="Beta"), name="p", kind=ChannelKind.EMAIL, target="a@b.io"
    )
    with pytest.raises(ValidationError, match="a channel of the tenant"):
        AlertRule(job=job, escalate_after_minutes=30, escalate_to=theirs).full_clean()
