"""When the fleet cannot keep up, every place an operator looks says so, and by how much:
``scheduler_status``, ``/readyz``, ``/metrics`` and the admin dashboard (trap 17)."""

from __future__ import annotations

import json
from datetime import timedelta
from io import StringIO

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import Client
from django.urls import reverse
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from endpoints.health import fleet_behind
from endpoints.models import Endpoint, Heartbeat, Run, RunStatus, RunTrigger, Slot, Source

pytestmark = pytest.mark.django_db

S = timedelta(seconds=1)


def late_runs(endpoint: Endpoint, *, late: timedelta, count: int = 20) -> None:
    now = timezone.now()
    Run.objects.bulk_create(
        Run(
            endpoint=endpoint,
            trigger=RunTrigger.SCHEDULED,
            scheduled_for=now - k * S - late,
            started_at=now - k * S,
            status=RunStatus.SUCCESS,
        )
        for k in range(count)
    )


@pytest.fixture
def behind(make_endpoint) -> Endpoint:
    """Scheduled runs starting 3 s late for the last 20 s, the way 2 000 endpoints at 1 s
    ran when the tick claimed only a fixed batch."""
    Heartbeat.beat("tick", now=timezone.now())
    endpoint = make_endpoint()
    late_runs(endpoint, late=3 * S)
    return endpoint


def test_runs_on_time_are_keeping_up(make_endpoint):
    late_runs(make_endpoint(), late=timedelta(milliseconds=40))
    state = fleet_behind(now=timezone.now())
    assert state["fleet_behind"] is False and state["behind_warning"] == ""
    assert state["behind_seconds"] < 1


def test_late_starts_make_the_fleet_behind_and_say_by_how_much(behind):
    state = fleet_behind(now=timezone.now())
    assert state["fleet_behind"] is True
    assert state["behind_seconds"] == pytest.approx(3, abs=0.2)
    assert "behind by 3 seconds" in state["behind_warning"]
    assert "CRONICORN_MAX_IN_FLIGHT" in state["behind_warning"]


def test_a_due_endpoint_left_unclaimed_makes_the_fleet_behind(make_endpoint):
    endpoint = make_endpoint()
    Slot.objects.filter(pk=endpoint.pk).update(
        next_run_at=timezone.now() - 8 * S, next_run_source=Source.BASELINE_INTERVAL
    )
    state = fleet_behind(now=timezone.now())
    assert state["fleet_behind"] is True
    assert state["oldest_due_seconds"] == pytest.approx(8, abs=0.5)


def test_scheduler_status_warns_and_stays_a_liveness_probe(behind):
    out = StringIO()
    call_command("scheduler_status", stdout=out)  # no CommandError: it is alive
    assert "Keeping up:  NO, The fleet is behind by 3 seconds" in out.getvalue()

    out = StringIO()
    call_command("scheduler_status", "--json", stdout=out)
    status = json.loads(out.getvalue())
    assert (status["healthy"], status["fleet_behind"]) == (True, True)
    assert status["behind_seconds"] == pytest.approx(3, abs=0.2)


def test_readyz_shows_the_warning_without_taking_the_web_out_of_service(behind):
    response = Client().get("/readyz")
    fleet = response.json()["checks"]["fleet"]
    assert response.status_code == 200
    assert fleet["ok"] is True and fleet["behind"] is True
    assert "behind by 3 seconds" in fleet["warning"]


def test_metrics_expose_how_far_behind(behind, settings):
    settings.CRONICORN_METRICS_TOKEN = "t"
    text = Client().get("/metrics", headers={"Authorization": "Bearer t"}).content.decode()
    samples = {
        sample.name: sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }
    assert samples["cronicorn_fleet_behind"] == 1
    assert samples["cronicorn_behind_seconds"] == pytest.approx(3, abs=0.2)


def test_the_dashboard_shows_the_warning(behind):
    User.objects.create_superuser("root", "root@example.com", "pw-for-tests-only")
    client = Client()
    client.login(username="root", password="pw-for-tests-only")
    text = client.get(reverse("admin:index")).content.decode()
    assert 'id="cc-behind"' in text and "The fleet is behind by 3 seconds" in text
    assert "cc-tile cc-bad" in text.split('id="cc-behind-tile"')[0][-80:]
