"""Alerts of an endpoint deleted, archived or stopped: the notify cycle goes on for every
other endpoint when one is deleted while it reads it; a message about endpoints all since
archived or deleted (waiting for its retry, or not sent yet) is not sent as old news; an
endpoint stopped on purpose (its job archived or paused, itself paused) is not stale."""

from __future__ import annotations

import json
import threading
import time
from datetime import timedelta

import pytest
from django.db import connection, transaction

from endpoints.models import Endpoint, Slot
from endpoints.operations import archive_endpoint, archive_job, pause_endpoint, pause_job
from notifications.alerts import detect_changes, notify_cycle
from notifications.models import (
    AlertKind,
    AlertRule,
    AlertState,
    Channel,
    ChannelKind,
    Delivery,
    DeliveryStatus,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("quick_alerts")]

S = timedelta(seconds=1)


def test_an_endpoint_deleted_while_the_cycle_reads_it_does_not_abort_the_cycle(make_endpoint, now):
    gone, other = make_endpoint(name="gone"), make_endpoint(name="other")
    Endpoint.objects.filter(pk__in=[gone.pk, other.pk]).update(failure_count=3)
    deleted = threading.Event()

    def delete() -> None:
        # A delete in flight: its row lock holds until it commits, after the cycle read
        # the endpoint as a candidate (the cycle waits for it, then sees it gone).
        try:
            with transaction.atomic():
                Endpoint.objects.filter(pk=gone.pk).delete()
                deleted.set()
                time.sleep(1)
        finally:
            connection.close()

    deleting = threading.Thread(target=delete)
    deleting.start()
    assert deleted.wait(10)
    try:
        alerts = detect_changes(now=now)
    finally:
        deleting.join()

    assert [(a.endpoint_id, a.kind) for a in alerts] == [(other.pk, AlertKind.FAILING)]
    assert list(AlertState.objects.values_list("pk", flat=True)) == [other.pk]


def archive(endpoint: Endpoint, now) -> None:
    archive_endpoint(endpoint, now=now)


def delete(endpoint: Endpoint, now) -> None:
    endpoint.delete()


def archive_its_job(endpoint: Endpoint, now) -> None:
    archive_job(endpoint.job, now=now)


@pytest.mark.parametrize(
    "remove", [archive, archive_its_job, delete], ids=["archived", "job archived", "deleted"]
)
def test_a_message_waiting_for_its_retry_is_not_sent_once_its_endpoint_is_gone(
    make_endpoint, tenant, target, now, remove
):
    target.reply("/room", status=503)
    Channel.objects.create(
        tenant=tenant, name="room", kind=ChannelKind.WEBHOOK, target=target.url("/room")
    )
    endpoint = make_endpoint(name="api")
    Endpoint.objects.filter(pk=endpoint.pk).update(failure_count=3)
    notify_cycle(now=now)
    notify_cycle(now=now + 10 * S)  # the first attempt fails: retried after its backoff
    target.reply("/room", status=200)
    remove(endpoint, now + 20 * S)

    delivery = Delivery.objects.get()
    notify_cycle(now=delivery.next_attempt_at)
    notify_cycle(now=delivery.next_attempt_at + timedelta(hours=1))

    assert len(target.hits("/room")) == 1
    delivery.refresh_from_db()
    assert (delivery.status, delivery.attempts) == (DeliveryStatus.FAILED, 1)
    assert delivery.last_error == (
        "Not sent: every endpoint it told of was archived or deleted before it went out."
    )


def test_an_alert_of_an_endpoint_archived_before_it_was_sent_is_not_sent(
    make_endpoint, tenant, target, now
):
    Channel.objects.create(
        tenant=tenant, name="room", kind=ChannelKind.WEBHOOK, target=target.url("/room")
    )
    archived, live = make_endpoint(name="archived"), make_endpoint(name="live")
    Endpoint.objects.filter(pk=archived.pk).update(failure_count=3)
    notify_cycle(now=now)  # its failing alert waits out the digest
    archive(archived, now + 2 * S)
    notify_cycle(now=now + 10 * S)
    Endpoint.objects.filter(pk=live.pk).update(failure_count=3)
    notify_cycle(now=now + 20 * S)
    notify_cycle(now=now + 30 * S)

    subjects = [json.loads(hit.body)["alerts"] for hit in target.hits("/room")]
    assert [[a["endpoint"] for a in alerts] for alerts in subjects] == [["ops/live"]]


def archive_the_job(endpoint: Endpoint, now) -> None:
    archive_job(endpoint.job, now=now)


def pause_the_job(endpoint: Endpoint, now) -> None:
    pause_job(endpoint.job, now=now)


def pause_it(endpoint: Endpoint, now) -> None:
    pause_endpoint(endpoint, now=now, until=now + timedelta(days=1), reason="maintenance")


@pytest.mark.parametrize(
    "stop", [archive_the_job, pause_the_job, pause_it], ids=["job archived", "job paused", "paused"]
)
def test_an_endpoint_stopped_on_purpose_is_not_stale(make_endpoint, now, stop):
    endpoint = make_endpoint(name="feed", baseline_interval_ms=60_000)
    AlertRule.objects.create(job=endpoint.job, stale_factor=3)
    Slot.objects.filter(pk=endpoint.pk).update(last_run_at=now - timedelta(minutes=1))
    stop(Endpoint.objects.select_related("job").get(pk=endpoint.pk), now)

    later = [detect_changes(now=now + timedelta(minutes=m)) for m in (5, 60, 600)]

    assert [a.kind for alerts in later for a in alerts if a.kind != AlertKind.PAUSED] == []


def test_a_stale_endpoint_whose_job_is_archived_is_not_told_as_running_again(make_endpoint, now):
    endpoint = make_endpoint(name="feed", baseline_interval_ms=60_000)
    AlertRule.objects.create(job=endpoint.job, stale_factor=3)
    Slot.objects.filter(pk=endpoint.pk).update(last_run_at=now - timedelta(minutes=10))
    assert [a.kind for a in detect_changes(now=now)] == [AlertKind.STALE]
    archive_job(endpoint.job, now=now)

    assert detect_changes(now=now + timedelta(minutes=1)) == []
