"""Archiving and unarchiving jobs from the admin's job list: the same operations as the
API, the MCP tools and the commands, and only on the user's own tenant's jobs."""

from __future__ import annotations

import pytest
from django.urls import reverse

from endpoints.models import Job, Run
from tests.world import World

pytestmark = pytest.mark.django_db


def act(world: World, action: str, job: Job) -> None:
    world.client_for(world.alice).post(
        reverse("admin:endpoints_job_changelist"),
        {"action": action, "_selected_action": [str(job.pk)], "index": "0"},
    )


def test_a_job_is_archived_keeping_its_runs_and_unarchived_paused(world: World) -> None:
    runs = Run.objects.filter(endpoint__job=world.a.job).count()
    act(world, "archive_jobs", world.a.job)
    assert Job.objects.get(pk=world.a.job.pk).status == "archived"
    assert Run.objects.filter(endpoint__job=world.a.job).count() == runs > 0
    act(world, "unarchive_jobs", world.a.job)
    assert Job.objects.get(pk=world.a.job.pk).status == "paused"
    act(world, "resume_jobs", world.a.job)
    assert Job.objects.get(pk=world.a.job.pk).status == "active"


@pytest.mark.parametrize("action", ["archive_jobs", "unarchive_jobs"])
def test_archive_actions_ignore_another_tenants_jobs(world: World, action: str) -> None:
    Job.objects.filter(pk=world.b.job.pk).update(
        status="archived" if action == "unarchive_jobs" else "active"
    )
    before = Job.objects.get(pk=world.b.job.pk).status
    act(world, action, world.b.job)
    assert Job.objects.get(pk=world.b.job.pk).status == before
