"""Follow-ups (run policy ``follow_ups``, issue 34): an endpoint's run makes the endpoints
it names run after it, through the normal claim, once per triggering run, the cause
linked (``caused_by``); counted at a real target with the in-process scheduler (what
``runscheduler`` runs). Names and cycles are checked when saved, in words, by every
interface: the REST API (and so MCP, the same registry), the admin's forms and the
import, where a file may name endpoints it creates further down."""

from __future__ import annotations

import json
import time
from datetime import timedelta
from typing import Any

import httpx
import pytest
from django.urls import reverse
from django.utils import timezone

from endpoints import operations
from endpoints.config_io.documents import ConfigError
from endpoints.config_io.importing import import_document
from endpoints.models import Endpoint, Job, Run, RunStatus, RunTrigger, Tenant
from tests.planning import daily_cron_far_from_now, runs, tick_until
from tests.world import World, endpoint_form


def follow(job: Job, name: str, on: str = "success") -> dict[str, str]:
    return {"endpoint": f"{job.name}/{name}", "on": on}


def planned(endpoint: Endpoint) -> Endpoint:
    operations.replan_after_edit(endpoint, now=timezone.now())
    endpoint.refresh_from_db()
    return endpoint


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("loopback_allowed")
def test_a_chain_runs_once_per_success_and_not_after_a_failure(
    scheduler: Any, job: Job, make_endpoint: Any, target: Any
) -> None:
    daily = daily_cron_far_from_now()  # b, c and cleanup run only as follow-ups here
    c = make_endpoint(name="c", url=target.url("/c"), baseline_cron=daily)
    cleanup = make_endpoint(name="cleanup", url=target.url("/cleanup"), baseline_cron=daily)
    b = make_endpoint(
        name="b", url=target.url("/b"), baseline_cron=daily,
        run_policy={"follow_ups": [follow(job, "c")]},
    )  # fmt: skip
    a = make_endpoint(
        name="a", url=target.url("/a"), baseline_interval_ms=2_000,
        run_policy={"follow_ups": [follow(job, "b")]},
    )  # fmt: skip
    target.reply("/failing", status=500)
    failing = make_endpoint(
        name="failing", url=target.url("/failing"), baseline_interval_ms=2_000,
        run_policy={"follow_ups": [follow(job, "b"), follow(job, "cleanup", "failure")]},
    )  # fmt: skip
    for endpoint in (a, b, c, cleanup, failing):
        planned(endpoint)

    def done(endpoint: Endpoint) -> list[Run]:
        return [run for run in runs(endpoint) if run.status != RunStatus.RUNNING]

    assert tick_until(scheduler, lambda: len(done(a)) >= 3 and len(done(failing)) >= 2, 40)
    now = timezone.now()
    operations.archive_endpoint(a, now=now)
    operations.archive_endpoint(failing, now=now)
    successes = [run for run in done(a) if run.status == RunStatus.SUCCESS]
    failures = [run for run in done(failing) if run.status == RunStatus.FAILURE]
    assert tick_until(
        scheduler,
        lambda: len(done(c)) >= len(successes) and len(done(cleanup)) >= len(failures),
        30,
    )
    end = time.monotonic() + 3  # a few ticks more: nothing else comes
    while time.monotonic() < end:
        scheduler.tick_once()
        time.sleep(0.2)
    successes = [run for run in done(a) if run.status == RunStatus.SUCCESS]
    failures = [run for run in done(failing) if run.status == RunStatus.FAILURE]

    # Counted at the target: one call of b and of c per success of a, none per failure.
    assert len(target.hits("/a")) == len(successes) >= 3
    assert len(target.hits("/b")) == len(target.hits("/c")) == len(successes)
    assert len(target.hits("/cleanup")) == len(failures) >= 2
    b_runs, c_runs = done(b), done(c)
    assert {run.trigger for run in [*b_runs, *c_runs]} == {RunTrigger.FOLLOW_UP}
    assert sorted(run.caused_by for run in b_runs) == sorted(run.pk for run in successes)
    assert sorted(run.caused_by for run in c_runs) == sorted(run.pk for run in b_runs)
    assert {run.caused_by for run in done(cleanup)} == {run.pk for run in failures}
    assert all(run.status == RunStatus.SUCCESS for run in [*b_runs, *c_runs])
    hit = target.hits("/b")[0]
    assert hit.headers.get("X-Cronicorn-Trigger") == "follow-up"


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("loopback_allowed")
def test_a_follow_up_whose_endpoint_is_paused_is_recorded_skipped_in_words(
    scheduler: Any, job: Job, make_endpoint: Any, target: Any
) -> None:
    b = make_endpoint(name="b", url=target.url("/b"), baseline_cron=daily_cron_far_from_now())
    a = make_endpoint(
        name="a", url=target.url("/a"), baseline_interval_ms=3_600_000, next_run_at=timezone.now(),
        run_policy={"follow_ups": [follow(job, "b", "always")]},
    )  # fmt: skip
    now = timezone.now()
    operations.pause_endpoint(b, until=now + timedelta(hours=1), now=now, reason="maintenance")

    assert tick_until(scheduler, lambda: bool(runs(b)), 20)

    assert target.hits("/b") == []
    [skipped] = runs(b)
    [cause] = runs(a)
    assert (skipped.status, skipped.trigger, skipped.caused_by) == (
        RunStatus.SKIPPED,
        RunTrigger.FOLLOW_UP,
        cause.pk,
    )
    assert skipped.error.startswith(f"Follow-up of run {cause.pk} (ops/a) not run: it is paused")


@pytest.mark.django_db(transaction=True)
def test_the_api_refuses_a_cycle_and_another_tenants_endpoint_in_words(
    http: httpx.Client, job: Job, make_endpoint: Any
) -> None:
    a = make_endpoint(name="a")
    b = make_endpoint(name="b", run_policy={"follow_ups": [follow(job, "a")]})
    other = Job.objects.create(tenant=Tenant.objects.create(name="Other"), name="theirs")
    Endpoint(job=other, name="x", url="http://127.0.0.1:9/", baseline_interval_ms=60_000).save()

    cycle = http.patch(
        f"/endpoints/{a.pk}", json={"run_policy": {"follow_ups": [follow(job, "b")]}}
    )
    assert cycle.status_code == 422, cycle.text
    assert "follow_ups: a cycle: ops/a -> ops/b -> ops/a" in cycle.text
    assert "Remove one of these follow-ups." in cycle.text

    theirs = http.patch(
        f"/endpoints/{a.pk}", json={"run_policy": {"follow_ups": [follow(other, "x")]}}
    )
    assert theirs.status_code == 422, theirs.text
    assert "'theirs/x' is no live endpoint of this tenant" in theirs.text

    # Through the job: its follow-ups are each of its endpoints', b's own key aside.
    through_job = http.patch(
        f"/jobs/{job.pk}", json={"run_policy": {"follow_ups": [follow(job, "b")]}}
    )
    assert through_job.status_code == 422, through_job.text
    assert "follow_ups: a cycle: ops/a -> ops/b -> ops/a" in through_job.text
    missing = http.patch(
        f"/jobs/{job.pk}", json={"run_policy": {"follow_ups": [follow(job, "nope")]}}
    )
    assert missing.status_code == 422, missing.text
    assert "'ops/nope' is no live endpoint of this tenant" in missing.text
    ok = http.patch(f"/endpoints/{a.pk}", json={"run_policy": {"follow_ups": []}})
    assert ok.status_code == 200, ok.text
    assert Endpoint.objects.get(pk=b.pk).run_policy == {"follow_ups": [follow(job, "a")]}

    # A follow-up's run names its cause in the API (and so in MCP's get_run).
    now = timezone.now()
    cause = Run.objects.create(endpoint=b, scheduled_for=now, started_at=now, status="success")
    run = Run.objects.create(
        endpoint=a, trigger=RunTrigger.FOLLOW_UP, source="follow-up", scheduled_for=now,
        started_at=now, status="success", caused_by=cause.pk,
    )  # fmt: skip
    shown = http.get(f"/runs/{run.pk}").json()
    assert (shown["trigger"], shown["caused_by"]) == ("follow-up", cause.pk)


def chain_document(last_follows_first: bool) -> dict[str, Any]:
    def endpoint(name: str, then: str | None) -> dict[str, Any]:
        policy = {"follow_ups": [{"endpoint": f"etl/{then}"}]} if then else {}
        return {"name": name, "url": "https://example.com/", "baseline_interval": "1h",
                "run_policy": policy}  # fmt: skip

    return {
        "version": 1,
        "tenants": [
            {
                "name": "Acme",
                "jobs": [
                    {
                        "name": "etl",
                        "endpoints": [
                            endpoint("extract", "load"),  # named before it is declared
                            endpoint("load", "report"),
                            endpoint("report", "extract" if last_follows_first else None),
                        ],
                    }
                ],
            }
        ],
    }


@pytest.mark.django_db
def test_an_import_takes_a_chain_named_ahead_and_refuses_a_cycle(now: Any) -> None:
    with pytest.raises(ConfigError) as refused:
        import_document(chain_document(True), environ={}, now=now)
    assert "follow_ups: a cycle: etl/extract -> etl/load -> etl/report -> etl/extract" in str(
        refused.value
    )
    assert not Endpoint.objects.exists()

    import_document(chain_document(False), environ={}, now=now)
    extract = Endpoint.objects.get(name="extract")
    assert extract.run_policy == {"follow_ups": [{"endpoint": "etl/load"}]}


@pytest.mark.django_db
def test_the_admin_refuses_a_cycle_and_shows_a_follow_ups_cause(world: World) -> None:
    job, first = world.a.job, world.a.endpoint
    ref = f"{job.name}/{first.name}"
    client = world.client_for(world.alice)
    policy = json.dumps({"follow_ups": [{"endpoint": ref}]})
    Endpoint.objects.filter(pk=first.pk).update(
        run_policy={"follow_ups": [{"endpoint": f"{job.name}/orders"}]}
    )

    added = client.post(
        reverse("admin:endpoints_endpoint_add"), endpoint_form(job, run_policy=policy)
    )
    # orders -> the first -> orders: refused on the form, in words, nothing saved.
    assert added.status_code == 200
    errors = [str(m) for m in added.context["adminform"].form.errors["run_policy"]]
    assert errors == [
        f"follow_ups: a cycle: {job.name}/orders -> {ref} -> {job.name}/orders; each run "
        "would start the next and the last the first again, without end. Remove one of "
        "these follow-ups."
    ]
    assert not Endpoint.objects.filter(name="orders").exists()

    now = timezone.now()
    cause = Run.objects.create(
        endpoint=first, scheduled_for=now, started_at=now, status=RunStatus.SUCCESS
    )
    second = Endpoint.objects.create(
        job=job, name="second", url="https://example.com/", baseline_interval_ms=60_000
    )
    follow_up = Run.objects.create(
        endpoint=second, trigger=RunTrigger.FOLLOW_UP, source="follow-up", scheduled_for=now,
        started_at=now, status=RunStatus.SUCCESS, caused_by=cause.pk,
    )  # fmt: skip
    page = client.get(reverse("admin:endpoints_run_change", args=[follow_up.pk]))
    assert page.status_code == 200
    text = page.content.decode()
    assert "Follow-up of" in text
    assert reverse("admin:endpoints_run_change", args=[cause.pk]) in text
