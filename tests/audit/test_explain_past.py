"""``explain --at PAST``: six past slots of an hourly endpoint, one per reason (ran, paused
by a named person, a blackout window, the breaker open, the scheduler not running,
archived), each answered from what was recorded and naming its reason."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from io import StringIO

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.test import Client as DjangoClient
from django.urls import reverse

from endpoints import breaker, past
from endpoints.audit import Actor, note_tick
from endpoints.models import Endpoint, Heartbeat, Job, Run, RunStatus, Tenant
from endpoints.operations import archive_endpoint, pause_endpoint, resume_endpoint
from endpoints.past import explain_past
from endpoints.policies import RunPolicy
from tests.world import make_key

DAY = datetime(2026, 11, 22, tzinfo=UTC)
NOW = DAY + timedelta(hours=12)


def at(hours: float) -> datetime:
    return DAY + timedelta(hours=hours)


@pytest.fixture
def history(db: None) -> Endpoint:
    """An hourly endpoint created at midnight, and what happened to it that morning."""
    tenant = Tenant.objects.create(name="Acme")
    job = Job.objects.create(tenant=tenant, name="billing")
    endpoint = Endpoint.objects.create(
        job=job, name="queue", url="http://127.0.0.1:9/q", baseline_cron="0 * * * *"
    )
    Endpoint.objects.filter(pk=endpoint.pk).update(
        created_at=at(0), run_policy={"blackout": [{"start": "03:00", "end": "03:30"}]}
    )
    endpoint.refresh_from_db()
    Heartbeat.beat("tick", now=at(11.9))
    # 01:00 ran.
    Run.objects.create(
        endpoint=endpoint,
        scheduled_for=at(1),
        started_at=at(1) + timedelta(seconds=0.2),
        status=RunStatus.SUCCESS,
    )
    # 02:00: alice paused it from 01:30 to 02:30.
    alice = get_user_model().objects.create_user("alice", is_staff=True)
    pause_endpoint(endpoint, now=at(1.5), until=at(2.5), reason="deploy", actor=Actor.person(alice))
    resume_endpoint(endpoint, now=at(2.5), actor=Actor.person(alice))
    # 03:00 falls in the blackout window. 04:00: the breaker opened at 03:50 for 20 minutes.
    policy = RunPolicy(breaker_failed_slots=3, breaker_cooldown_ms=20 * 60_000)
    breaker.open_breaker(endpoint.pk, policy, now=at(3 + 50 / 60), reason="Breaker: 3 in a row")
    # 05:00: no tick from 04:50 to 05:10.
    note_tick(at(4 + 50 / 60), now=at(5 + 10 / 60))
    # 06:00: archived at 05:30 by a command.
    archive_endpoint(endpoint, now=at(5.5), actor=Actor("command", "cli:ops"))
    endpoint.refresh_from_db()
    return endpoint


def test_six_past_slots_each_name_their_reason(history: Endpoint) -> None:
    answers = {
        hour: explain_past(history, at(hour) + timedelta(minutes=1), now=NOW)
        for hour in range(1, 7)
    }

    assert {hour: answer.slot for hour, answer in answers.items()} == {
        h: at(h) for h in range(1, 7)
    }
    assert {hour: answer.reason for hour, answer in answers.items()} == {
        1: past.RAN,
        2: past.PAUSED,
        3: past.WINDOW,
        4: past.BREAKER,
        5: past.DOWN,
        6: past.ARCHIVED,
    }
    run = Run.objects.get(endpoint=history)
    assert answers[1].run_id == run.pk and f"run {run.pk}" in answers[1].words
    assert answers[2].actor == "alice" and answers[2].until == at(2.5)
    assert "Paused by alice" in answers[2].words and "deploy" in answers[2].words
    assert "blackout window" in answers[3].words
    assert "breaker was open" in answers[4].words
    assert "scheduler was not running" in answers[5].words and "04:50:00" in answers[5].words
    assert "Archived by cli:ops" in answers[6].words


def test_before_the_endpoint_existed_and_the_command_and_the_api_say_the_same(
    history: Endpoint,
) -> None:
    before = explain_past(history, at(-1), now=NOW)
    assert before.reason == past.NOT_YET and "did not exist yet" in before.words

    out = StringIO()
    call_command("explain", str(history.pk), "--at", at(2).isoformat(), stdout=out)
    assert "(paused)" in out.getvalue() and "Paused by alice" in out.getvalue()
    out = StringIO()
    call_command("explain", str(history.pk), "--at", at(5).isoformat(), "--json", stdout=out)
    assert json.loads(out.getvalue())["past"]["reason"] == "scheduler-down"

    api = DjangoClient(headers={"Authorization": f"Bearer {make_key(history.job.tenant)}"})
    answer = api.get(f"/api/v1/endpoints/{history.pk}/explain", {"at": at(4).isoformat()})
    assert answer.status_code == 200, answer.content
    assert (answer.json()["reason"], answer.json()["actor"]) == ("breaker", "breaker")
    future = api.get(f"/api/v1/endpoints/{history.pk}/explain", {"at": "2999-01-01T00:00:00Z"})
    assert future.status_code == 422 and "past time" in future.json()["errors"]["at"][0]


def test_the_admin_line_answers_on_a_page_of_its_own(history: Endpoint) -> None:
    admin = get_user_model().objects.create_superuser("root")
    client = DjangoClient()
    client.force_login(admin)
    url = reverse("admin:endpoints_endpoint_explain", args=[history.pk])

    page = client.get(url, {"at": "2026-11-22T04:00:30"}).content.decode()

    assert "(breaker)" in page and "The breaker was open" in page
    change = client.get(reverse("admin:endpoints_endpoint_change", args=[history.pk]))
    assert url in change.content.decode() and "Why did a slot not run?" in change.content.decode()
    assert "Give a past time" in client.get(url, {"at": "2999-01-01T00:00:00"}).content.decode()
