"""Run-policy windows end to end: the in-process scheduler (what ``runscheduler`` runs)
against a real HTTP target on 127.0.0.1, counting what the target saw; the validation of
one-off times through the models; and a change of the active period through the REST API
(and so MCP), which plans the endpoint again at once."""

from __future__ import annotations

import io
import json
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from django.core.exceptions import ValidationError
from django.core.management import CommandError, call_command
from django.urls import reverse
from django.utils import timezone

from endpoints import operations
from endpoints.governor import ENDED, ONCE, WINDOW
from endpoints.models import Endpoint, Job, Run, RunStatus, Slot
from tests.planning import finished, runs, tick_until
from tests.world import build_world

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("loopback_allowed")]


def iso(at: datetime) -> str:
    return at.astimezone(UTC).isoformat().replace("+00:00", "Z")


def planned(endpoint: Endpoint) -> Endpoint:
    """The endpoint as created by an interface: saved, then planned as an edit."""
    operations.replan_after_edit(endpoint, now=timezone.now())
    endpoint.refresh_from_db()
    return endpoint


def tick_for(scheduler: Any, seconds: float) -> None:
    """Tick as ``runscheduler`` does for a while, to see that nothing more happens."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        scheduler.tick_once()
        time.sleep(0.2)


def explain(endpoint: Endpoint, *extra: str) -> str:
    out = io.StringIO()
    call_command("explain", str(endpoint.pk), *extra, stdout=out)
    return out.getvalue()


def test_a_one_off_runs_exactly_once(scheduler, make_endpoint, target) -> None:
    at = timezone.now() + timedelta(seconds=3)
    endpoint = planned(
        make_endpoint(
            url=target.url("/once"),
            baseline_interval_ms=1_000,  # required, unused while run_once_at is set
            run_policy={"run_once_at": iso(at)},
        )
    )
    assert (endpoint.next_run_at, endpoint.next_run_source) == (at, ONCE)

    assert tick_until(scheduler, finished(endpoint, 1), timeout=20)
    tick_for(scheduler, 3)  # a 1 s interval would have run it twice more by now

    assert len(target.hits("/once")) == 1
    [run] = runs(endpoint)
    assert run.status == RunStatus.SUCCESS and run.source == ONCE
    assert run.started_at >= at
    slot = Slot.objects.get(pk=endpoint.pk)
    assert (slot.next_run_at, slot.next_run_source) == (None, ENDED)
    assert "the one-off at" in explain(endpoint) and "has had its run: no more runs" in (
        explain(endpoint)
    )
    # The stored one-off is past now, and it ran: an unrelated edit still validates.
    endpoint.description = "edited after its run"
    endpoint.full_clean()


def test_an_endpoint_past_its_active_until_stops(scheduler, make_endpoint, target) -> None:
    until = timezone.now() + timedelta(seconds=2)
    endpoint = planned(
        make_endpoint(
            url=target.url("/until"),
            baseline_interval_ms=1_000,
            run_policy={"active_until": iso(until)},
        )
    )

    stopped = lambda: Slot.objects.filter(  # noqa: E731
        pk=endpoint.pk, next_run_at__isnull=True, claim_token__isnull=True
    ).exists()
    assert tick_until(scheduler, stopped, timeout=20)
    seen = len(target.hits("/until"))
    tick_for(scheduler, 2)

    assert seen >= 1 and len(target.hits("/until")) == seen  # no call after the end
    assert all(run.scheduled_for <= until for run in runs(endpoint))
    assert Slot.objects.get(pk=endpoint.pk).next_run_source == ENDED
    text = explain(endpoint, "--next", "5")
    assert "No next run (ended): the active period ended at" in text
    assert "then no more runs: the active period ended at" in text
    document = json.loads(explain(endpoint, "--next", "5", "--json"))
    assert (document["next_run_at"], document["source"], document["next"]) == (None, ENDED, [])
    assert document["runs_end"].startswith("the active period ended at")


def test_an_allowed_window_moves_runs_and_explain_says_so(scheduler, make_endpoint, target) -> None:
    now = timezone.now().astimezone(UTC)
    opened = now.replace(second=0, microsecond=0) - timedelta(minutes=1)
    window = {"start": f"{opened:%H:%M}", "end": f"{opened + timedelta(minutes=4):%H:%M}"}
    hourly = make_endpoint(
        url=target.url("/open"),
        baseline_interval_ms=3_600_000,
        run_policy={"allowed": [window]},
        next_run_at=now,  # due now, inside its window
    )
    closed_window = {
        "start": f"{opened + timedelta(hours=2):%H:%M}",
        "end": f"{opened + timedelta(hours=3):%H:%M}",
    }
    closed = planned(
        make_endpoint(
            url=target.url("/closed"),
            baseline_interval_ms=1_000,
            run_policy={"allowed": [closed_window]},
        )
    )
    # Created while its window is shut: planned at the window's opening, not now.
    assert closed.next_run_source == WINDOW
    assert closed.next_run_at == opened + timedelta(hours=2)

    assert tick_until(scheduler, finished(hourly, 1), timeout=20)
    tick_for(scheduler, 1)

    assert len(target.hits("/open")) == 1 and target.hits("/closed") == []
    [run] = runs(hourly)
    hourly.refresh_from_db()
    # An hour later the window is shut: moved to its next opening, the next day.
    assert hourly.next_run_source == WINDOW
    assert hourly.next_run_at - run.started_at > timedelta(hours=20)
    assert hourly.next_run_at.astimezone(UTC).strftime("%H:%M") == window["start"]
    text = explain(hourly, "--at", iso(run.started_at))
    assert "outside the allowed windows" in text and "moved to the next opening" in text


def test_a_past_one_off_is_refused_in_words_only_when_it_is_set(make_endpoint, job: Job) -> None:
    past = iso(timezone.now() - timedelta(hours=1))
    with pytest.raises(ValidationError) as caught:
        make_endpoint(run_policy={"run_once_at": past})
    assert caught.value.message_dict["run_policy"] == [
        f"run_once_at: {past} is in the past; give a future time, or use Run now."
    ]
    job.run_policy = {"run_once_at": past}
    with pytest.raises(ValidationError):
        job.full_clean()
    job.run_policy = {"active_from": "2026-12-01T09:00:00"}
    with pytest.raises(ValidationError) as caught:
        job.full_clean()
    assert 'add one, e.g. "+01:00" or "Z"' in caught.value.message_dict["run_policy"][0]
    job.run_policy = {}
    # Stored before its time (as a run would find it): later edits are not refused.
    endpoint = make_endpoint(run_policy={"run_once_at": iso(timezone.now() + timedelta(hours=1))})
    Endpoint.objects.filter(pk=endpoint.pk).update(run_policy={"run_once_at": past})
    endpoint.refresh_from_db()
    endpoint.name = "renamed"
    endpoint.full_clean()


def test_extending_the_active_period_through_the_api_plans_again(
    http: httpx.Client, job: Job, make_endpoint: Any
) -> None:
    ended = iso(timezone.now() - timedelta(hours=1))
    endpoint = planned(make_endpoint(run_policy={"active_until": ended}))
    assert (endpoint.next_run_at, endpoint.next_run_source) == (None, ENDED)
    detail = http.get(f"/endpoints/{endpoint.pk}").json()
    assert detail["explanation"].startswith("No next run: the active period ended at")
    assert http.get(f"/endpoints/{endpoint.pk}/preview").json()["runs"] == []

    later = iso(timezone.now() + timedelta(days=1))
    changed = http.patch(f"/endpoints/{endpoint.pk}", json={"run_policy": {"active_until": later}})
    assert changed.status_code == 200, changed.text
    endpoint.refresh_from_db()
    assert endpoint.next_run_at is not None and endpoint.next_run_source != ENDED

    # The job's defaults too: an active period ended there stops its endpoints at once,
    # but not one whose own policy overrides it.
    plain = planned(make_endpoint())
    assert plain.next_run_at is not None
    stopped = http.patch(f"/jobs/{job.pk}", json={"run_policy": {"active_until": ended}})
    assert stopped.status_code == 200, stopped.text
    plain.refresh_from_db()
    endpoint.refresh_from_db()
    assert (plain.next_run_at, plain.next_run_source) == (None, ENDED)
    assert endpoint.next_run_at is not None
    assert not Run.objects.filter(endpoint__in=[plain, endpoint]).exists()


def test_an_import_reads_unquoted_yaml_times_and_a_job_policy_change_replans(
    tmp_path: Any,
) -> None:
    def document(until: str) -> str:
        return f"""
version: 1
tenants:
  - name: Acme
    jobs:
      - name: campaign
        run_policy:
          active_until: {until}
        endpoints:
          - name: ping
            url: https://example.com/ping
            baseline_interval: 5m
"""

    path = tmp_path / "campaign.yaml"
    path.write_text(document("2020-01-01T00:00:00Z"))  # unquoted: YAML reads a date-time
    call_command("import_endpoints", str(path), stdout=io.StringIO(), stderr=io.StringIO())
    endpoint = Endpoint.objects.get(name="ping")
    assert endpoint.job.run_policy == {"active_until": "2020-01-01T00:00:00+00:00"}
    assert (endpoint.next_run_at, endpoint.next_run_source) == (None, ENDED)

    path.write_text(document(iso(timezone.now() + timedelta(days=30))))
    call_command("import_endpoints", str(path), stdout=io.StringIO(), stderr=io.StringIO())
    endpoint.refresh_from_db()
    assert endpoint.next_run_at is not None and endpoint.next_run_source != ENDED

    path.write_text(document("2026-12-01T09:00:00"))
    with pytest.raises(CommandError, match=r'add one, e\.g\. "\+01:00" or "Z"'):
        call_command("import_endpoints", str(path), stdout=io.StringIO(), stderr=io.StringIO())


def test_a_failed_one_off_is_retried_within_its_slot_then_ends(
    scheduler, make_endpoint, target
) -> None:
    target.reply("/flaky-once", status=503, action=lambda: target.reply("/flaky-once", status=200))
    endpoint = planned(
        make_endpoint(
            url=target.url("/flaky-once"),
            baseline_interval_ms=1_000,
            run_policy={
                "run_once_at": iso(timezone.now() + timedelta(seconds=3)),
                "retry_attempts": 3,
                "retry_delay_ms": 1_000,
            },
        )
    )

    assert tick_until(scheduler, finished(endpoint, 2), timeout=30)
    tick_for(scheduler, 2)

    first, second = runs(endpoint)
    assert (first.status, first.source, second.status, second.source) == (
        RunStatus.FAILURE,
        ONCE,
        RunStatus.SUCCESS,
        "retry",
    )
    assert second.retry_of_id == first.pk and len(target.hits("/flaky-once")) == 2
    slot = Slot.objects.get(pk=endpoint.pk)
    assert (slot.next_run_at, slot.next_run_source) == (None, ENDED)


def test_a_one_off_found_later_than_its_catchup_window_is_skipped_and_ends(
    scheduler, make_endpoint, target
) -> None:
    endpoint = make_endpoint(
        url=target.url("/late-once"),
        run_policy={
            "run_once_at": iso(timezone.now() + timedelta(hours=1)),
            "catchup_window_ms": 60_000,
        },
    )
    # The scheduler was down over the one-off's time: six hours ago, still in its slot.
    missed = timezone.now() - timedelta(hours=6)
    Endpoint.objects.filter(pk=endpoint.pk).update(
        run_policy={"run_once_at": iso(missed), "catchup_window_ms": 60_000}
    )
    Slot.objects.filter(pk=endpoint.pk).update(next_run_at=missed, next_run_source=ONCE)

    assert tick_until(scheduler, finished(endpoint, 1), timeout=20)

    [run] = runs(endpoint)
    assert run.status == RunStatus.SKIPPED and target.hits("/late-once") == []
    slot = Slot.objects.get(pk=endpoint.pk)
    assert (slot.next_run_at, slot.next_run_source) == (None, ENDED)


def test_a_job_policy_saved_in_the_admin_replans_its_endpoints(db: None) -> None:
    world = build_world()
    job, endpoint = world.a.job, world.a.endpoint
    operations.replan_after_edit(endpoint, now=timezone.now())
    client = world.client_for(world.alice)
    ended = iso(timezone.now() - timedelta(days=1))
    response = client.post(
        reverse("admin:endpoints_job_change", args=[job.pk]),
        {
            "tenant": str(job.tenant_id),
            "name": job.name,
            "description": job.description,
            "max_concurrent": "",
            "run_policy": json.dumps({"active_until": ended}),
        },
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    slot = Slot.objects.get(pk=endpoint.pk)
    assert (slot.next_run_at, slot.next_run_source) == (None, ENDED)
