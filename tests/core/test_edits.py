"""An edit is planned the way a run is (DESIGN.md, trap 18): start-to-start from the last
run's start, clamps included, or now if that has passed. Adding a bound never moves a
due run later. Shown for every schedule field, in the admin, through import and through
the operation every interface calls after ``Endpoint.save`` (``replan_after_edit``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import time_machine
import yaml
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import reverse

from endpoints.config_io.importing import import_config
from endpoints.governor import EndpointSchedule, plan_after_edit
from endpoints.models import Endpoint, Slot
from endpoints.operations import replan_after_edit
from endpoints.schedules import format_interval
from tests.world import endpoint_form

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 11, 24, 11, 55, tzinfo=UTC)
DAY = 86_400_000
HOUR = 3_600_000


@dataclass(frozen=True)
class Edit:
    before: dict[str, Any]
    last_run_at: datetime
    change: dict[str, Any]
    expected: datetime


EDITS = {
    # The two cases a person noticed: a daily endpoint due in 5 minutes.
    "adding-max-2d-keeps-a-daily-run-due-in-5-min": Edit(
        {"baseline_interval_ms": DAY},
        NOW - timedelta(days=1) + timedelta(minutes=5),
        {"max_interval_ms": 2 * DAY},
        NOW + timedelta(minutes=5),
    ),
    "1d-to-12h-runs-now-as-12h-have-passed": Edit(
        {"baseline_interval_ms": DAY},
        NOW - timedelta(days=1) + timedelta(minutes=5),
        {"baseline_interval_ms": 12 * HOUR},
        NOW,
    ),
    "1h-to-2h-counts-from-the-last-start": Edit(
        {"baseline_interval_ms": HOUR},
        NOW - timedelta(minutes=30),
        {"baseline_interval_ms": 2 * HOUR},
        NOW + timedelta(minutes=90),
    ),
    "a-new-cron-takes-its-first-slot-after-the-last-run": Edit(
        {"baseline_cron": "0 9 * * *", "baseline_interval_ms": None},
        datetime(2026, 11, 24, 9, 0, tzinfo=UTC),
        {"baseline_cron": "0 13 * * *"},
        datetime(2026, 11, 24, 13, 0, tzinfo=UTC),
    ),
    "a-new-cron-whose-first-slot-passed-runs-now": Edit(
        {"baseline_cron": "0 9 * * *", "baseline_interval_ms": None},
        datetime(2026, 11, 23, 9, 0, tzinfo=UTC),
        {"baseline_cron": "0 10 * * *"},
        NOW,
    ),
    "adding-a-min-clamps-from-the-last-start": Edit(
        {"baseline_interval_ms": 60_000},
        NOW - timedelta(seconds=30),
        {"min_interval_ms": 10 * 60_000},
        NOW + timedelta(minutes=9, seconds=30),
    ),
    "adding-a-max-clamps-from-the-last-start": Edit(
        {"baseline_interval_ms": DAY},
        NOW - timedelta(hours=1),
        {"max_interval_ms": 2 * HOUR},
        NOW + timedelta(hours=1),
    ),
    "a-new-time-zone-moves-the-cron-slot": Edit(
        {"baseline_cron": "0 13 * * *", "baseline_interval_ms": None},
        datetime(2026, 11, 23, 13, 0, tzinfo=UTC),
        {"timezone": "Europe/Berlin"},
        datetime(2026, 11, 24, 12, 0, tzinfo=UTC),  # 13:00 CET
    ),
}


@pytest.fixture
def edited(make_endpoint: Callable[..., Endpoint]) -> Callable[[Edit], Endpoint]:
    def make(edit: Edit) -> Endpoint:
        endpoint = make_endpoint(**edit.before)
        Slot.objects.filter(pk=endpoint.pk).update(last_run_at=edit.last_run_at)
        Slot.objects.filter(pk=endpoint.pk).update(
            next_run_at=NOW + timedelta(days=30), next_run_source="baseline-interval"
        )
        return Endpoint.objects.get(pk=endpoint.pk)

    return make


def next_run(endpoint: Endpoint) -> datetime | None:
    return Slot.objects.get(pk=endpoint.pk).next_run_at


@pytest.mark.parametrize("name", EDITS)
def test_an_edit_saved_by_any_caller_is_planned_from_the_last_run(
    edited: Callable[[Edit], Endpoint], name: str
) -> None:
    edit = EDITS[name]
    endpoint = edited(edit)
    for field, value in edit.change.items():
        setattr(endpoint, field, value)
    endpoint.full_clean()
    endpoint.save(update_fields=[*edit.change, "updated_at"])

    replan_after_edit(endpoint, now=NOW)

    assert next_run(endpoint) == edit.expected


@pytest.mark.parametrize("name", EDITS)
def test_an_edit_in_the_admin_is_planned_from_the_last_run(
    edited: Callable[[Edit], Endpoint], name: str
) -> None:
    edit = EDITS[name]
    endpoint = edited(edit)
    client = Client()
    client.force_login(get_user_model().objects.create_superuser("root", password="x"))
    data = {**admin_form(endpoint), **admin_form_values(edit.change)}

    with time_machine.travel(NOW, tick=False):
        response = client.post(reverse("admin:endpoints_endpoint_change", args=[endpoint.pk]), data)

    assert response.status_code == 302, response.content.decode()[:2000]
    assert next_run(endpoint) == edit.expected


@pytest.mark.parametrize("name", EDITS)
def test_an_edit_through_import_is_planned_from_the_last_run(
    edited: Callable[[Edit], Endpoint], name: str
) -> None:
    edit = EDITS[name]
    endpoint = edited(edit)
    for field, value in edit.change.items():
        setattr(endpoint, field, value)

    import_config(yaml.safe_dump(file_for(endpoint)), fmt="yaml", environ={}, now=NOW)

    assert next_run(endpoint) == edit.expected


def test_an_endpoint_that_never_ran_is_planned_from_now() -> None:
    plan = plan_after_edit(NOW, None, EndpointSchedule(baseline_interval_ms=HOUR))

    assert plan.next_run_at == NOW + timedelta(hours=1)


def test_a_pause_in_force_still_wins_over_an_edit() -> None:
    until = NOW + timedelta(days=2)
    schedule = EndpointSchedule(baseline_interval_ms=HOUR, paused_until=until)

    plan = plan_after_edit(NOW, NOW - timedelta(minutes=5), schedule)

    assert (plan.next_run_at, plan.source) == (until, "paused")


def test_a_hint_that_expired_before_now_does_not_plan_the_edit() -> None:
    schedule = EndpointSchedule(
        baseline_interval_ms=HOUR,
        ai_hint_interval_ms=60_000,
        ai_hint_expires_at=NOW - timedelta(minutes=1),
    )

    plan = plan_after_edit(NOW, NOW - timedelta(minutes=30), schedule)

    assert (plan.next_run_at, plan.source) == (NOW + timedelta(minutes=30), "baseline-interval")


# --- helpers ----------------------------------------------------------------------------


def _duration(value: int | None) -> str:
    return format_interval(value) if value else ""


def admin_form_values(values: dict[str, Any]) -> dict[str, str]:
    durations = ("baseline_interval_ms", "min_interval_ms", "max_interval_ms", "timeout_ms")
    return {
        field: _duration(value) if field in durations else str(value or "")
        for field, value in values.items()
    }


def admin_form(endpoint: Endpoint) -> dict[str, str]:
    return endpoint_form(
        endpoint.job,
        name=endpoint.name,
        url=endpoint.url,
        method=endpoint.method,
        max_response_size_kb=str(endpoint.max_response_size_kb),
        baseline_cron=endpoint.baseline_cron,
        timezone=endpoint.timezone,
        description=endpoint.description,
        **admin_form_values(
            {
                "timeout_ms": endpoint.timeout_ms,
                "baseline_interval_ms": endpoint.baseline_interval_ms,
                "min_interval_ms": endpoint.min_interval_ms,
                "max_interval_ms": endpoint.max_interval_ms,
            }
        ),
    )


def file_for(endpoint: Endpoint) -> dict[str, Any]:
    entry: dict[str, Any] = {"name": endpoint.name, "url": endpoint.url}
    if endpoint.baseline_cron:
        entry.update(baseline_cron=endpoint.baseline_cron, timezone=endpoint.timezone)
    else:
        entry["baseline_interval"] = format_interval(endpoint.baseline_interval_ms or 0)
    for key in ("min_interval", "max_interval"):
        if value := getattr(endpoint, f"{key}_ms"):
            entry[key] = format_interval(value)
    jobs = [{"name": endpoint.job.name, "endpoints": [entry]}]
    return {"version": 1, "tenants": [{"name": endpoint.job.tenant.name, "jobs": jobs}]}
