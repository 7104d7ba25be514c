"""Alerts of an endpoint deleted while the notify cycle reads it: the cycle goes on for
every other endpoint (a delete commits between the cycle's reads and its writes)."""

from __future__ import annotations

import threading
import time

import pytest
from django.db import connection, transaction

from endpoints.models import Endpoint
from notifications.alerts import detect_changes
from notifications.models import AlertKind, AlertState

pytestmark = pytest.mark.django_db(transaction=True)


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
