"""What a backfill refuses, in words, through the command and the API, writing nothing:
a range over 10 000 slots (with where to cut it), an empty or reversed range, a range in
the future, a bad rate or time; and what it shows: a dry run's slots, a backfill's
progress, its cancel."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from endpoints.backfill_models import Backfill, BackfillSlot
from endpoints.choices import BackfillStatus
from tests.backfill.slots import CRON, ran_successfully, the_range

pytestmark = pytest.mark.django_db


def backfill(*args: str) -> str:
    out = StringIO()
    call_command("backfill", *args, stdout=out)
    return out.getvalue()


def iso(at) -> str:
    return at.isoformat(timespec="seconds")


@pytest.fixture
def every_minute(make_endpoint):
    return make_endpoint(name="tick", baseline_cron="* * * * *")


def test_a_range_over_ten_thousand_slots_is_refused_with_where_to_cut_it(every_minute):
    end = timezone.now().replace(second=0, microsecond=0) - timedelta(hours=1)
    start = end - timedelta(days=8)  # 11 520 minutes
    with pytest.raises(CommandError) as refused:
        backfill(every_minute.ref, "--from", iso(start), "--to", iso(end))
    message = str(refused.value)
    assert "holds more than 10 000 slots" in message
    assert "a backfill holds at most 10 000" in message
    assert "Split it: e.g. --to " in message
    assert not Backfill.objects.exists() and not BackfillSlot.objects.exists()


@pytest.mark.parametrize(
    ("shift", "words"),
    [
        (lambda s, e: (e, s), "The range is empty: --from"),
        (lambda s, e: (s, s), "The range is empty: --from"),
        (lambda s, e: (s, timezone.now() + timedelta(hours=1)), "in the future"),
    ],
    ids=["reversed", "empty", "future"],
)
def test_a_range_that_is_not_past_and_ordered_is_refused_in_words(every_minute, shift, words):
    start, end = shift(*the_range())
    with pytest.raises(CommandError, match=words):
        backfill(every_minute.ref, "--from", iso(start), "--to", iso(end))
    assert not Backfill.objects.exists()


def test_bad_options_are_refused_in_words(every_minute):
    start, end = the_range()
    span = ["--from", iso(start), "--to", iso(end)]
    with pytest.raises(CommandError, match="'fast' is not a rate; write runs a second"):
        backfill(every_minute.ref, *span, "--rate", "fast")
    with pytest.raises(CommandError, match="at most 200 runs a second"):
        backfill(every_minute.ref, *span, "--rate", "5000/s")
    with pytest.raises(CommandError, match="is not an ISO 8601 time"):
        backfill(every_minute.ref, "--from", "last night", "--to", iso(end))
    with pytest.raises(CommandError, match="Name the ENDPOINT to backfill"):
        backfill(*span)
    with pytest.raises(CommandError, match="Give the range"):
        backfill(every_minute.ref)
    assert not Backfill.objects.exists()


def test_a_dry_run_lists_the_slots_and_writes_nothing(make_endpoint):
    endpoint = make_endpoint(name="report", baseline_cron=CRON)
    start, end = the_range()
    ran_successfully(endpoint, start)
    text = backfill(endpoint.ref, "--from", iso(start), "--to", iso(end), "--dry-run")
    assert text.startswith("Dry run: 48 slots from ")
    assert "38 would run" in text and "10 not. Nothing was written." in text
    assert "skip (ran: run " in text
    assert not Backfill.objects.exists()


def test_the_command_starts_shows_and_cancels_a_backfill(make_endpoint):
    endpoint = make_endpoint(name="report", baseline_cron=CRON)
    start, end = the_range()
    text = backfill(endpoint.ref, "--from", iso(start), "--to", iso(end), "--rate", "2/s")
    made = Backfill.objects.get()
    assert f"Backfill {made.pk} of ops/report (queued): 0 of 48 run" in text
    assert f"manage.py backfill --cancel {made.pk}" in text
    assert "(cancelled)" in backfill("--cancel", str(made.pk))
    assert Backfill.objects.get().status == BackfillStatus.CANCELLED
    with pytest.raises(CommandError, match="is cancelled already; nothing to cancel"):
        backfill("--cancel", str(made.pk))


@pytest.mark.django_db(transaction=True)
def test_the_api_refuses_a_range_over_the_cap_and_bad_input_in_words(http, make_endpoint):
    endpoint = make_endpoint(name="tick", baseline_cron="* * * * *")
    end = timezone.now().replace(second=0, microsecond=0) - timedelta(hours=1)
    body = {"endpoint_id": endpoint.pk, "range_to": iso(end)}

    over = http.post("/backfills", json={**body, "range_from": iso(end - timedelta(days=8))})
    assert over.status_code == 409
    assert "holds more than 10 000 slots" in over.json()["detail"]

    future = http.post(
        "/backfills",
        json={**body, "range_from": iso(end), "range_to": iso(timezone.now() + timedelta(days=1))},
    )
    assert future.status_code == 409 and "in the future" in future.json()["detail"]

    reversed_ = http.post("/backfills", json={**body, "range_from": iso(end + timedelta(hours=1))})
    assert reversed_.status_code == 409 and "The range is empty" in reversed_.json()["detail"]

    neither = http.post("/backfills", json={"range_from": iso(end), "range_to": iso(end)})
    assert neither.status_code == 422
    assert neither.json()["errors"]["endpoint_id"] == ["Give exactly one of endpoint_id or job_id."]

    bad_time = http.post("/backfills", json={**body, "range_from": "yesterday"})
    assert bad_time.status_code == 422 and "ISO 8601" in str(bad_time.json()["errors"])
    assert not Backfill.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_the_api_starts_shows_and_cancels_a_backfill(http, make_endpoint):
    endpoint = make_endpoint(name="report", baseline_cron=CRON)
    start, end = the_range()
    ran_successfully(endpoint, start)
    body = {"endpoint_id": endpoint.pk, "range_from": iso(start), "range_to": iso(end), "rate": 1}

    dry = http.post("/backfills", json={**body, "dry_run": True}).json()
    assert (dry["id"], dry["total"], dry["skipped"], len(dry["slots"])) == (None, 38, 10, 48)
    assert not Backfill.objects.exists()

    made = http.post("/backfills", json=body)
    assert made.status_code == 201, made.text
    shown = http.get(f"/backfills/{made.json()['id']}").json()
    assert (shown["status"], shown["total"], shown["pending"]) == ("queued", 38, 38)
    assert shown["requested_by"].startswith("API key ")
    cancelled = http.post(f"/backfills/{shown['id']}/cancel").json()
    assert cancelled["status"] == "cancelled"
    assert http.post(f"/backfills/{shown['id']}/cancel").status_code == 409
