"""Run-policy calendars through the interfaces (issue 34): a Bavarian calendar in
``explain --next`` across Christmas and Epiphany, in the endpoint's zone; the admin's
live preview naming the closed days; and a saved endpoint planned off a holiday."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
from django.core.exceptions import ValidationError
from django.core.management import call_command

from endpoints.governor import CALENDAR
from endpoints.models import Endpoint

pytestmark = pytest.mark.django_db

BAVARIA = {"holidays": {"country": "DE", "subdivision": "BY"}}


def explain(endpoint: Endpoint, *extra: str) -> str:
    out = io.StringIO()
    call_command("explain", str(endpoint.pk), *extra, stdout=out)
    return out.getvalue()


def test_explain_next_skips_the_bavarian_holidays_in_the_endpoints_zone(
    make_endpoint: Any,
) -> None:
    endpoint = make_endpoint(
        baseline_cron="30 0 * * *", timezone="Europe/Berlin", run_policy=BAVARIA
    )
    document = json.loads(
        explain(endpoint, "--at", "2026-12-23T12:00:00Z", "--next", "12", "--json")
    )
    local = [run["local"][:16] for run in document["next"]]
    assert local == [
        "2026-12-24 00:30",
        "2026-12-27 00:30",  # Christmas Day and the Second Day of Christmas skipped
        "2026-12-28 00:30",
        "2026-12-29 00:30",
        "2026-12-30 00:30",
        "2026-12-31 00:30",
        "2027-01-02 00:30",  # New Year's Day
        "2027-01-03 00:30",
        "2027-01-04 00:30",
        "2027-01-05 00:30",
        "2027-01-07 00:30",  # Epiphany, a holiday in Bavaria
        "2027-01-08 00:30",
    ]
    # 00:30 in Berlin is 23:30 UTC the day before: the dates are the zone's, not UTC's.
    assert document["next"][1]["utc"] == "2026-12-26T23:30:00+00:00"
    assert [run["source"] for run in document["next"]][1] == CALENDAR

    text = explain(endpoint, "--at", "2026-12-24T12:00:00Z")
    assert "set by the calendar (an excluded date or a public holiday)" in text
    assert "2026-12-25 is a public holiday in DE-BY (Christmas Day) (Europe/Berlin)" in text


def test_a_calendar_key_is_refused_in_words_by_the_one_validation(make_endpoint: Any) -> None:
    with pytest.raises(ValidationError) as raised:
        make_endpoint(run_policy={"holidays": {"country": "DE", "subdivision": "XY"}})
    assert "holidays: subdivision 'XY' is not one of DE's" in str(raised.value)
