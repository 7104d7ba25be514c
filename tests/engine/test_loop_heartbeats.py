"""Each every_loop loop records its last pass and what it did, where an operator looks.

Every loop (tick, zombie sweep, run retention, planner, alerts) ends a pass by writing its
Heartbeat row with counts, from its Celery task and from ``runscheduler`` alike; the
dashboard and ``scheduler_status`` show them. That is also why Celery keeps no results:
django-celery-results is gone, and with it the admin's empty "Celery results" section.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.apps import apps
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from endpoints import tasks as engine_tasks
from endpoints.embedded import EmbeddedScheduler, load_cycle
from endpoints.models import Endpoint, Heartbeat, Run, RunStatus
from notifications import tasks as notify_tasks
from planner import tasks as planner_tasks
from tests.engine_processes import wait_until
from tests.http_targets import TargetServer
from tests.world import build_world

DAY = timedelta(days=1)
LOOPS = ["tick", "maintenance", "prune", "planner", "notify"]


def give_every_loop_work(make_endpoint: Callable[..., Endpoint], now: datetime, url: str) -> None:
    """Something for each loop to count: a due endpoint (tick), a run past its lease (the
    sweep), two runs past retention beside a recent one (retention), finished runs never
    analysed (planner), and an endpoint failing three times in a row (alerts)."""
    make_endpoint(name="due", url=url, next_run_at=now)
    stuck = make_endpoint(name="stuck")
    Run.objects.create(
        endpoint=stuck,
        scheduled_for=now - 5 * timedelta(minutes=1),
        started_at=now - 5 * timedelta(minutes=1),
        status=RunStatus.RUNNING,
        lease_expires_at=now - timedelta(minutes=4),
    )
    Endpoint.objects.filter(pk=stuck.pk).update(failure_count=3)
    old = make_endpoint(name="old")
    for started in (now - 40 * DAY, now - 40 * DAY + timedelta(seconds=1), now - DAY):
        Run.objects.create(
            endpoint=old, scheduled_for=started, started_at=started, status=RunStatus.SUCCESS
        )


def status_loops() -> dict[str, dict[str, Any]]:
    out = io.StringIO()
    call_command("scheduler_status", "--json", "--max-tick-age", "86400", stdout=out)
    return {loop["name"]: loop for loop in json.loads(out.getvalue())["loops"]}


@pytest.fixture
def retention(settings: Any) -> None:
    settings.CRONICORN_RUN_RETENTION_DAYS = 30
    settings.CRONICORN_RUN_RETENTION_KEEP = 1
    settings.CRONICORN_PLANNER_BACKEND = "rules"


@pytest.fixture
def every_loop() -> Iterator[EmbeddedScheduler]:
    embedded = EmbeddedScheduler(
        max_in_flight=4, plan_cycle=load_cycle("plan"), notify_cycle=load_cycle("notify")
    )
    yield embedded
    embedded.shutdown(timeout=10)


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("retention", "loopback_allowed")
def test_every_runscheduler_loop_beats_with_what_it_did_and_the_operator_sees_it(
    every_loop: EmbeddedScheduler, make_endpoint: Callable[..., Endpoint], target: TargetServer
) -> None:
    now = timezone.now()
    give_every_loop_work(make_endpoint, now, target.url("/due"))

    every_loop.tick_once(now=now)
    ran = Run.objects.filter(endpoint__name="due", status=RunStatus.SUCCESS)
    assert wait_until(ran.exists, timeout=10)
    after = timezone.now()
    every_loop.maintain_once(now=after)  # the first pass prunes too
    every_loop.plan_once(now=after)
    every_loop.notify_once(now=after)

    beats = {beat.name: beat.info for beat in Heartbeat.objects.filter(name__in=LOOPS)}
    assert beats == {
        "tick": {"claimed": 1},
        "maintenance": {"lost": 1},
        "prune": {"deleted": 2},
        "planner": {"sessions": 3, "failed": 0},  # due, stuck (its lost run), old
        "notify": {"alerts": 1, "deliveries": 0, "sent": 0, "failed": 0},  # stuck is failing
    }
    loops = status_loops()
    assert [loops[name]["info"] for name in LOOPS] == [beats[name] for name in LOOPS]
    assert loops["prune"]["did"] == "deleted 2" and loops["prune"]["at"] == after.isoformat()

    root = get_user_model().objects.create_superuser("root", "root@example.com", "x")
    client = Client()
    client.force_login(root)
    page = client.get(reverse("admin:index")).content.decode()
    panel = page.split('id="cc-loops"')[1].split('id="cc-failing"')[0]
    for name, did in [
        ("tick", "claimed 1"),
        ("maintenance", "lost 1"),
        ("prune", "deleted 2"),
        ("planner", "sessions 3, failed 0"),
        ("notify", "alerts 1, deliveries 0, sent 0, failed 0"),
    ]:
        row = panel.split(f'id="cc-loop-{name}"')[1].split("</tr>")[0]
        assert did in row and "s ago" in row, name


@pytest.mark.usefixtures("retention")
def test_every_celery_task_beats_its_loop_with_what_it_did(
    make_endpoint: Callable[..., Endpoint],
) -> None:
    """The task bodies as a worker runs them (the claims are sent after a commit that
    this test's transaction never makes, so nothing reaches the broker)."""
    started = timezone.now()
    give_every_loop_work(make_endpoint, started, "http://127.0.0.1:9/due")

    assert engine_tasks.tick() == 1
    assert engine_tasks.sweep_zombies() == 1
    assert engine_tasks.prune_runs() == 2
    assert planner_tasks.plan_cycle_task() == 2  # stuck (its lost run) and old
    assert notify_tasks.notify_cycle() == 1

    loops = status_loops()
    assert {name: loops[name]["info"] for name in LOOPS} == {
        "tick": {"claimed": 1},
        "maintenance": {"lost": 1},
        "prune": {"deleted": 2},
        "planner": {"sessions": 2, "failed": 0},
        "notify": {"alerts": 1, "deliveries": 0, "sent": 0, "failed": 0},
    }
    assert all(loops[name]["at"] >= started.isoformat() for name in LOOPS)


def test_scheduler_status_says_never_for_a_loop_that_has_not_run(db: None) -> None:
    Heartbeat.beat("tick", now=timezone.now(), claimed=0)
    out = io.StringIO()

    call_command("scheduler_status", stdout=out)

    text = out.getvalue()
    assert "  Tick           " in text and "claimed 0" in text
    assert "  Alerts         never" in text


@pytest.mark.django_db
def test_a_staff_member_sees_when_each_loop_ran_but_not_the_fleets_counts() -> None:
    world = build_world()
    Heartbeat.beat("tick", now=timezone.now(), claimed=1234)

    staff = world.client_for(world.alice).get(reverse("admin:index")).content.decode()
    root = world.client_for(world.root).get(reverse("admin:index")).content.decode()

    tick_row = staff.split('id="cc-loop-tick"')[1].split("</tr>")[0]
    assert "s ago" in tick_row and "1234" not in staff and "What it did" not in staff
    assert "claimed 1234" in root.split('id="cc-loop-tick"')[1].split("</tr>")[0]
    assert "never" in staff.split('id="cc-loop-notify"')[1].split("</tr>")[0]


@pytest.mark.django_db
def test_the_admin_index_has_no_celery_results_section() -> None:
    root = get_user_model().objects.create_superuser("root", "root@example.com", "x")
    client = Client()
    client.force_login(root)

    page = client.get(reverse("admin:index")).content.decode()

    assert not apps.is_installed("django_celery_results")
    assert 'id="cc-loops"' in page
    assert "Celery results" not in page and "django_celery_results" not in page
    assert "Task results" not in page
