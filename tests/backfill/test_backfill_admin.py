"""The admin's backfill: the endpoints' action asks for the range, lists every slot with
what would happen to it (nothing written), then starts the backfill once confirmed; the
backfills' list shows the progress and cancels."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from endpoints.backfill_models import Backfill
from endpoints.choices import BackfillStatus
from tests.backfill.slots import CRON, ran_successfully, the_range

pytestmark = pytest.mark.django_db
CHANGELIST = "/admin/endpoints/endpoint/"


@pytest.fixture
def admin_client_() -> Client:
    root = get_user_model().objects.create_superuser("root", "root@example.com", "x")
    client = Client()
    client.force_login(root)
    return client


def test_the_admin_lists_the_slots_then_starts_the_backfill_once_confirmed(
    admin_client_, make_endpoint
):
    endpoint = make_endpoint(name="report", baseline_cron=CRON)
    start, end = the_range()
    ran_successfully(endpoint, start)
    chosen = {"action": "backfill_range", "index": "0", "_selected_action": [endpoint.pk]}

    asked = admin_client_.post(CHANGELIST, chosen)
    assert asked.status_code == 200 and b"From (UTC)" in asked.content

    span = {
        "range_from": start.strftime("%Y-%m-%d %H:%M"),
        "range_to": end.strftime("%Y-%m-%d %H:%M"),
    }
    listed = admin_client_.post(CHANGELIST, {**chosen, **span, "rate": "5/s", "preview": "1"})
    page = listed.content.decode()
    assert "ops/report: 48 slots, 38 would run" in page
    assert page.count("<td>runs</td>") == 38 and page.count("not run: ran: run ") == 10
    assert "Start the backfill" in page
    assert not Backfill.objects.exists()

    started = admin_client_.post(CHANGELIST, {**chosen, **span, "rate": "5/s", "confirm": "1"})
    assert started.status_code == 302
    made = Backfill.objects.get()
    assert (made.total, made.status, made.requested_by) == (38, BackfillStatus.QUEUED, "user root")

    shown = admin_client_.get("/admin/endpoints/backfill/").content.decode()
    assert f"Backfill {made.pk} of ops/report (queued): 0 of 38 run" in shown
    admin_client_.post(
        "/admin/endpoints/backfill/",
        {"action": "cancel", "index": "0", "_selected_action": [made.pk]},
    )
    assert Backfill.objects.get().status == BackfillStatus.CANCELLED


def test_the_admin_refuses_a_range_in_the_future_in_words_and_starts_nothing(
    admin_client_, make_endpoint
):
    endpoint = make_endpoint(name="report", baseline_cron=CRON)
    start, _end = the_range()
    chosen = {"action": "backfill_range", "index": "0", "_selected_action": [endpoint.pk]}
    span = {"range_from": start.strftime("%Y-%m-%d %H:%M"), "range_to": "2999-01-01 00:00"}
    page = admin_client_.post(CHANGELIST, {**chosen, **span, "rate": "5/s", "confirm": "1"})
    assert "in the future: a backfill runs past slots only" in page.content.decode()
    assert "Start the backfill" not in page.content.decode()
    assert not Backfill.objects.exists()
