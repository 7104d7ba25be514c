"""The endpoint form's run preview before saving (console/admin/preview.py).

The form's values are posted as the page's script posts them; the answer is the next
runs in the endpoint's zone (with its UTC offset) and in UTC, or the very messages a save
of the same values shows. Nothing is ever written, whatever is posted.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
import time_machine
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from endpoints.models import Endpoint, HintHistory, Job, Run
from endpoints.policies import jitter_offset_ms
from tests.world import World, endpoint_form

BEFORE_FALL_BACK = datetime(2026, 10, 30, 12, 0, tzinfo=UTC)
ADD_PREVIEW = reverse("admin:endpoints_endpoint_preview")


@pytest.fixture
def frozen() -> Iterator[None]:
    with time_machine.travel(BEFORE_FALL_BACK, tick=False):
        yield


def form_values(job: Job | None, **values: str) -> dict[str, str]:
    """Everything the add form posts, as a person left it (name, URL and interval not
    typed yet)."""
    return endpoint_form(job, **{"name": "", "url": "", "baseline_interval_ms": "", **values})


def change_preview(endpoint: Endpoint) -> str:
    return reverse("admin:endpoints_endpoint_preview", args=[endpoint.pk])


def preview(client: Client, values: dict[str, str], url: str = ADD_PREVIEW) -> Any:
    response = client.post(url, values)
    assert response.status_code == 200, response.content
    return response.json()


def refused(client: Client, values: dict[str, str], url: str = ADD_PREVIEW) -> dict[str, Any]:
    response = client.post(url, values)
    assert response.status_code == 400, response.content
    return {problem["field"]: problem for problem in response.json()["errors"]}


def messages_on_save(client: Client, values: dict[str, str], field: str) -> list[str]:
    """What the add page itself says about ``field`` when the same values are saved."""
    response = client.post(reverse("admin:endpoints_endpoint_add"), values)
    assert response.status_code == 200  # the form again, with its messages
    return [str(message) for message in response.context["adminform"].form.errors[field]]


def rows(answer: dict[str, Any]) -> list[tuple[str, str, str]]:
    return [(run["local"], run["utc"], run["source"]) for run in answer["runs"]]


def test_a_cron_across_the_fall_back_shows_the_offset_change_and_the_utc_shift(
    world: World, frozen: None
) -> None:
    values = form_values(world.a.job, baseline_cron="30 1 * * *", timezone="America/New_York")

    answer = preview(world.client_for(world.alice), values)

    assert answer["timezone"] == "America/New_York"
    assert rows(answer)[:4] == [
        ("Sat 2026-10-31 01:30:00 EDT (UTC-04:00)", "2026-10-31 05:30:00", "baseline-cron"),
        # 01:30 happens twice that night: the first one only (classic cron).
        ("Sun 2026-11-01 01:30:00 EDT (UTC-04:00)", "2026-11-01 05:30:00", "baseline-cron"),
        ("Mon 2026-11-02 01:30:00 EST (UTC-05:00)", "2026-11-02 06:30:00", "baseline-cron"),
        ("Tue 2026-11-03 01:30:00 EST (UTC-05:00)", "2026-11-03 06:30:00", "baseline-cron"),
    ]
    assert len(answer["runs"]) == 10
    assert {run["why"] for run in answer["runs"]} == {"the cron schedule"}
    assert answer["schedule"] == "at 01:30 (America/New_York)"


def test_the_jobs_jitter_moves_each_slot_by_the_endpoints_own_offset(
    world: World, frozen: None
) -> None:
    endpoint = world.a.endpoint
    Job.objects.filter(pk=world.a.job.pk).update(run_policy={"jitter_ms": 30_000})
    offset = jitter_offset_ms(endpoint.pk, 30_000)
    assert 0 < offset <= 30_000
    client = world.client_for(world.alice)
    values = form_values(
        world.a.job, name=endpoint.name, url=endpoint.url, baseline_cron="0 * * * *"
    )

    jittered = preview(client, values, change_preview(endpoint))
    typed_off = preview(
        client, {**values, "run_policy": '{"jitter_ms": 0}'}, change_preview(endpoint)
    )
    unsaved = preview(client, values)

    def stamp(ms: int) -> str:
        seconds, millis = divmod(ms, 1000)
        return f"{seconds // 60:02d}:{seconds % 60:02d}" + (f".{millis:03d}" if millis else "")

    # The 12:00 slot's run is still ahead at 12:00 when the offset is added, though never
    # sooner than the tenant's floor after now (an offset under a second waits for it:
    # the offset comes from the endpoint's id, whatever the database gave it).
    first = max(offset, world.a.tenant.min_interval_ms)
    assert [run["utc"] for run in jittered["runs"][:2]] == [
        f"2026-10-30 12:{stamp(first)}",
        f"2026-10-30 13:{stamp(offset)}",
    ]
    # The endpoint's own policy, as typed, overrides its job's.
    assert [run["utc"] for run in typed_off["runs"][:2]] == [
        "2026-10-30 13:00:00",
        "2026-10-30 14:00:00",
    ]
    # A new endpoint has no id yet, so no offset: the preview says so instead.
    assert unsaved["runs"][0]["utc"] == "2026-10-30 13:00:00"
    assert any("up to 30 s" in note for note in unsaved["notes"])


def test_a_blackout_window_typed_in_the_policy_moves_the_runs_inside_it(
    world: World, frozen: None
) -> None:
    values = form_values(
        world.a.job,
        baseline_cron="0 * * * *",
        timezone="Europe/Berlin",
        run_policy='{"blackout": [{"start": "16:00", "end": "18:30"}]}',
    )

    answer = preview(world.client_for(world.alice), values)

    local_times = [run["local"][4:20] for run in answer["runs"][:5]]
    assert local_times == [
        "2026-10-30 14:00",
        "2026-10-30 15:00",
        "2026-10-30 18:30",  # 16:00 moved to the window's end; 17:00 and 18:00 skipped
        "2026-10-30 19:00",
        "2026-10-30 20:00",
    ]
    moved = answer["runs"][2]
    assert (moved["source"], moved["why"]) == (
        "window",
        "a time window (blackout, allowed hours or active period)",
    )
    assert moved["utc"] == "2026-10-30 17:30:00"


def test_the_chosen_jobs_tenant_floor_applies_before_saving(world: World, frozen: None) -> None:
    world.a.tenant.min_interval_ms = 600_000
    world.a.tenant.save(update_fields=["min_interval_ms"])
    client = world.client_for(world.alice)
    values = form_values(world.a.job, baseline_interval_ms="5m")

    problems = refused(client, values)
    without_job = preview(client, {**values, "job": ""})

    assert problems["baseline_interval_ms"]["label"] == "Interval"
    assert problems["baseline_interval_ms"]["messages"] == [
        "This tenant's plan allows intervals of at least 600000 ms (10m)."
    ]
    assert problems["baseline_interval_ms"]["messages"] == messages_on_save(
        client, values, "baseline_interval_ms"
    )
    assert without_job["runs"][0]["utc"] == "2026-10-30 12:05:00"
    assert any(note.startswith("No job chosen yet") for note in without_job["notes"])


def test_another_tenants_job_is_refused_as_missing(world: World, frozen: None) -> None:
    client = world.client_for(world.alice)
    values = form_values(world.b.job, baseline_interval_ms="5m")

    response = client.post(ADD_PREVIEW, values)

    assert response.status_code == 400
    assert response.json() == {
        "errors": [
            {
                "field": "job",
                "label": "Job",
                "messages": [
                    "Select a valid choice. That choice is not one of the available choices."
                ],
            }
        ]
    }
    assert b"beta" not in response.content.lower()


def test_another_tenants_endpoint_has_no_preview(world: World) -> None:
    values = form_values(world.a.job, baseline_interval_ms="5m")

    response = world.client_for(world.alice).post(change_preview(world.b.endpoint), values)

    assert response.status_code == 404


@pytest.mark.parametrize(
    ("typed", "field"),
    [
        ({"baseline_cron": "61 * * * *"}, "baseline_cron"),
        ({"baseline_cron": "0 * * * *", "baseline_interval_ms": "5m"}, "baseline_cron"),
        ({"baseline_interval_ms": "5m", "timezone": "Mars/Olympus"}, "timezone"),
        (
            {"baseline_interval_ms": "5m", "min_interval_ms": "10m", "max_interval_ms": "5m"},
            "min_interval_ms",
        ),
        ({"baseline_interval_ms": "5m", "run_policy": '{"jitter_ms": "soon"}'}, "run_policy"),
        ({"baseline_interval_ms": "5m", "run_policy": '{"blackout": '}, "run_policy"),
    ],
)
def test_values_that_cannot_be_planned_get_the_sentences_a_save_shows(
    world: World, typed: dict[str, str], field: str
) -> None:
    client = world.client_for(world.alice)
    values = form_values(world.a.job, **typed)

    problems = refused(client, values)

    assert list(problems) == [field]  # not the name and URL, which do not plan anything
    assert problems[field]["messages"] == messages_on_save(client, values, field)


def test_a_preview_writes_nothing(world: World, frozen: None) -> None:
    endpoint = world.a.endpoint
    stored = Endpoint.objects.filter(pk=endpoint.pk).values().get()
    counts = (Endpoint.objects.count(), Run.objects.count(), HintHistory.objects.count())
    client = world.client_for(world.alice)
    edited = form_values(
        world.a.job,
        name="renamed",
        url="https://example.com/renamed",
        baseline_cron="*/5 * * * *",
        timezone="Asia/Tokyo",
        min_interval_ms="1m",
        run_policy='{"jitter_ms": 1000}',
    )
    new = form_values(
        world.a.job, name="new-one", url="https://example.com/", baseline_cron="@daily"
    )

    with CaptureQueriesContext(connection) as queries:
        assert preview(client, edited, change_preview(endpoint))["runs"]
        assert preview(client, new)["runs"]
        refused(client, {**new, "baseline_cron": "bad"})

    writes = [q["sql"] for q in queries if q["sql"].split()[0] in {"INSERT", "UPDATE", "DELETE"}]
    assert writes == []
    assert Endpoint.objects.filter(pk=endpoint.pk).values().get() == stored
    assert (Endpoint.objects.count(), Run.objects.count(), HintHistory.objects.count()) == counts


def test_a_preview_is_a_csrf_checked_post_for_signed_in_staff(world: World) -> None:
    values = form_values(world.a.job, baseline_interval_ms="5m")
    signed_in = world.client_for(world.alice)
    no_token = Client(enforce_csrf_checks=True)
    no_token.force_login(world.alice)

    assert signed_in.get(ADD_PREVIEW).status_code == 405
    assert no_token.post(ADD_PREVIEW, values).status_code == 403
    anonymous = Client().post(ADD_PREVIEW, values)
    assert anonymous.status_code == 302 and "/login/" in anonymous["Location"]


def test_the_add_and_change_forms_carry_the_preview_panel(world: World) -> None:
    client = world.client_for(world.alice)
    endpoint = world.a.endpoint

    add_page = client.get(reverse("admin:endpoints_endpoint_add")).content.decode()
    change_page = client.get(
        reverse("admin:endpoints_endpoint_change", args=[endpoint.pk])
    ).content.decode()

    assert f'data-url="{ADD_PREVIEW}"' in add_page
    assert f'data-url="{change_preview(endpoint)}"' in change_page
    assert "console/run_preview.js" in add_page and "console/run_preview.js" in change_page


def test_the_preview_says_when_nothing_will_run(world: World, frozen: None) -> None:
    endpoint = world.a.endpoint
    Endpoint.objects.filter(pk=endpoint.pk).update(archived_at=BEFORE_FALL_BACK)
    Job.objects.filter(pk=world.a.job.pk).update(status="paused")
    client = world.client_for(world.alice)
    values = form_values(world.a.job, name=endpoint.name, url=endpoint.url, baseline_cron="@daily")

    archived = preview(client, values, change_preview(endpoint))
    new = preview(client, values)

    assert archived["runs"] == []
    assert "This endpoint is archived: it never runs." in archived["notes"]
    assert len(new["runs"]) == 10
    assert "The job 'ops-alpha' is paused: nothing runs now." in new["notes"]


def test_the_preview_skips_the_holidays_typed_and_names_them(world: World) -> None:
    policy = '{"holidays": {"country": "DE", "subdivision": "BY"}, "exclude_dates": ["2026-12-24"]}'
    values = form_values(
        world.a.job, baseline_cron="0 9 * * *", timezone="Europe/Berlin", run_policy=policy
    )

    with time_machine.travel(datetime(2026, 12, 23, 12, 0, tzinfo=UTC), tick=False):
        client = world.client_for(world.alice)
        answer = preview(client, values)
        refusal = refused(client, {**values, "run_policy": '{"exclude_dates": ["2026-02-30"]}'})

    assert [run["local"][:14] for run in answer["runs"][:3]] == [
        "Sun 2026-12-27",  # the 24th excluded, the 25th and 26th holidays in Bavaria
        "Mon 2026-12-28",
        "Tue 2026-12-29",
    ]
    assert answer["runs"][0]["source"] == "calendar"
    assert answer["runs"][0]["why"] == "the calendar (an excluded date or a public holiday)"
    assert (
        "Never on 2026-12-24; public holidays of DE-BY (dates in Europe/Berlin): a run due on "
        "one moves to the next open day (source calendar)." in answer["notes"]
    )
    assert "exclude_dates: entry 1: '2026-02-30' is not a date of the calendar." in str(
        refusal["run_policy"]["messages"]
    )
