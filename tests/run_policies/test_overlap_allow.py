"""``overlap: {"allow": N}`` in the in-process scheduler (what ``runscheduler`` runs)
against a real HTTP target on 127.0.0.1: up to N calls of an endpoint in flight at once,
a slot due while N are waits for one to end, each slot once (issue 34). The Celery
fleet's case is in ``test_run_policies_celery.py``, the faults' in ``tests/faults``."""

from __future__ import annotations

import asyncio
import io
from datetime import timedelta

import pytest
import yaml
from django.core.exceptions import ValidationError
from django.core.management import CommandError, call_command
from django.utils import timezone
from mcp import Client

from api.mcp_server import build_server
from console.admin.forms import EndpointAdminForm
from console.admin.policy_widgets import POLICY_GROUPS, policy_words
from endpoints.engine.claiming import Claim, claim_due_endpoints
from endpoints.engine.overlap_allow import FULL
from endpoints.engine.running import Started, record_outcomes, start_claims
from endpoints.models import Endpoint, Job, JobStatus, Run, RunStatus, Slot, Source
from endpoints.policies import stored_policy
from tests.faults.analysis import Execution, most_at_once
from tests.planning import policy_job, runs, tick_until
from tests.world import endpoint_form

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("loopback_allowed")]

S = timedelta(seconds=1)


def test_allow_2_runs_two_calls_at_once_and_a_slot_due_beside_two_waits_for_one_to_end(
    scheduler, job, make_endpoint, target
):
    policy_job(job, overlap={"allow": 2})
    target.reply("/slow", delay=2.5)
    endpoint = make_endpoint(
        url=target.url("/slow"), baseline_interval_ms=1_000, next_run_at=timezone.now() + S
    )

    assert tick_until(scheduler, lambda: len(target.hits("/slow")) >= 6, timeout=40)
    Job.objects.filter(pk=job.pk).update(status=JobStatus.PAUSED)
    in_flight = Run.objects.filter(endpoint=endpoint, status=RunStatus.RUNNING)
    assert tick_until(scheduler, lambda: not in_flight.exists(), timeout=20)

    every = runs(endpoint)
    hits = target.hits("/slow")
    assert len(hits) == len(every) >= 6
    assert {run.status for run in every} == {RunStatus.SUCCESS}
    slots = [run.scheduled_for for run in every]
    assert len(slots) == len(set(slots))  # each slot once
    calls = {hit.headers["X-Cronicorn-Run-Id"]: hit for hit in hits}
    spans = [Execution("slow", hit.at, hit.finished) for hit in hits]
    assert most_at_once(spans) == {"slow": 2}
    # The second slot started on time beside the first call (not after its end)...
    first, second = (calls[str(run.pk)] for run in every[:2])
    assert every[1].scheduled_for - every[0].scheduled_for == S
    assert first.finished is not None and second.at < first.finished
    # ...and the third, due while two were in flight, waited for the first to end, then ran
    # (late, once), not skipped.
    third = calls[str(every[2].pk)]
    assert every[2].scheduled_for.timestamp() < first.finished <= third.at
    # The outcomes never wrote the slot: its next run is the one after the last started.
    next_run_at = Slot.objects.get(pk=endpoint.pk).next_run_at
    assert next_run_at is not None and next_run_at > max(slots)


def test_a_failure_beside_other_calls_counts_once_and_a_success_resets_the_count(
    scheduler, job, make_endpoint, target
):
    policy_job(job, overlap={"allow": 3})
    statuses = iter([500, 500, 200])
    target.reply("/mixed", status=500)

    def next_reply() -> None:
        target.reply("/mixed", status=next(statuses, 200), delay=1.5, action=next_reply)

    next_reply()
    endpoint = make_endpoint(
        url=target.url("/mixed"), baseline_interval_ms=1_000, next_run_at=timezone.now() + S
    )
    done = Run.objects.filter(endpoint=endpoint).exclude(status=RunStatus.RUNNING)
    assert tick_until(scheduler, lambda: done.count() >= 2, timeout=30)
    endpoint.refresh_from_db()
    assert endpoint.failure_count == 2  # each failed call's own +1, side by side
    assert tick_until(scheduler, lambda: done.filter(status=RunStatus.SUCCESS).exists(), timeout=30)
    endpoint.refresh_from_db()
    Job.objects.filter(pk=job.pk).update(status=JobStatus.PAUSED)
    assert endpoint.failure_count == 0


ALLOW_11 = "overlap: allow is how many calls of the endpoint may be in flight at once"


@pytest.mark.parametrize(
    ("policy", "words"),
    [
        ({"overlap": {"allow": 11}}, ALLOW_11),
        ({"overlap": {"allow": 0}}, "a whole number from 1 to 10"),
        ({"overlap": {"allow": 3}, "retry_attempts": 2}, "set retry_attempts to 1"),
    ],
)
def test_an_allowance_outside_1_to_10_or_with_retries_is_refused_in_words(job, policy, words):
    job.run_policy = policy
    with pytest.raises(ValidationError) as refused:
        job.full_clean()
    assert words in str(refused.value)


def test_the_api_takes_an_allowance_and_refuses_one_over_10_in_words(http, job):
    refused = http.patch(f"/jobs/{job.pk}", json={"run_policy": {"overlap": {"allow": 11}}})
    assert refused.status_code == 422, refused.text
    assert ALLOW_11 in refused.text and "got 11" in refused.text
    taken = http.patch(f"/jobs/{job.pk}", json={"run_policy": {"overlap": {"allow": 3}}})
    assert taken.status_code == 200, taken.text
    assert taken.json()["run_policy"] == {"overlap": {"allow": 3}}


def test_an_mcp_tool_refuses_an_allowance_over_10_in_words(api_world):
    job = api_world.a.job

    async def scenario() -> list[tuple[bool, str]]:
        async with Client(build_server(stdio_key=api_world.write_key)) as client:
            said = []
            for allow in (12, 2):
                result = await client.call_tool(
                    "update_job", {"job_id": job.pk, "run_policy": {"overlap": {"allow": allow}}}
                )
                said.append((result.is_error, result.content[0].text))  # type: ignore[union-attr]
            return said

    (refused, words), (failed, _text) = asyncio.run(scenario())
    assert refused and ALLOW_11 in words and "got 12" in words
    assert not failed
    job.refresh_from_db()
    assert job.run_policy == {"overlap": {"allow": 2}}


def test_an_allowance_round_trips_through_export_and_import_and_a_bad_one_is_refused(
    job, make_endpoint, tmp_path
):
    endpoint = make_endpoint()
    endpoint.run_policy = {"overlap": {"allow": 4}}
    endpoint.full_clean()
    endpoint.save()
    out = io.StringIO()
    call_command("export_endpoints", stdout=out, stderr=io.StringIO())
    exported = yaml.safe_load(out.getvalue())
    [mine] = exported["tenants"][0]["jobs"][0]["endpoints"]
    assert mine["run_policy"] == {"overlap": {"allow": 4}}
    again = tmp_path / "again.yaml"
    again.write_text(out.getvalue())
    report = io.StringIO()
    call_command("import_endpoints", str(again), "--dry-run", stdout=report, stderr=io.StringIO())
    assert "0 created, 0 updated" in report.getvalue()

    mine["run_policy"] = {"overlap": {"allow": 11}}
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(exported))
    with pytest.raises(CommandError) as refused:
        call_command("import_endpoints", str(bad), stdout=io.StringIO(), stderr=io.StringIO())
    assert ALLOW_11 in str(refused.value)

    form = EndpointAdminForm(data=endpoint_form(job, run_policy='{"overlap": {"allow": 0}}'))
    assert not form.is_valid()
    assert "a whole number from 1 to 10" in str(form.errors["run_policy"])


def test_an_allowance_and_a_jobs_max_concurrent_are_refused_together_whichever_comes_last(
    job, make_endpoint
):
    """A job's limit counts claimed slots, and a call under ``allow`` holds none: the two
    cannot be used together, set on the job, on an endpoint, or the limit set later."""
    words = "which job ops's max_concurrent (2) would not count: use one or the other"
    job.max_concurrent, job.run_policy = 2, {"overlap": {"allow": 3}}
    with pytest.raises(ValidationError) as refused:
        job.full_clean()
    assert words in " ".join(refused.value.message_dict["max_concurrent"])

    job.run_policy = {}
    job.full_clean()
    job.save()
    endpoint = make_endpoint()
    endpoint.run_policy = {"overlap": {"allow": 3}}
    with pytest.raises(ValidationError) as refused:
        endpoint.full_clean()
    assert words in " ".join(refused.value.message_dict["run_policy"])

    job.max_concurrent = None
    job.save()
    endpoint.full_clean()
    endpoint.save()
    job.max_concurrent = 2
    with pytest.raises(ValidationError) as refused:
        job.full_clean()
    assert words in " ".join(refused.value.message_dict["max_concurrent"])
    endpoint.run_policy = {"overlap": "wait"}  # its own wait over the job's: fine again
    endpoint.save()
    job.full_clean()


def claim_now(endpoint) -> Claim:
    """The endpoint's slot made due now and claimed."""
    now = timezone.now()
    Slot.objects.filter(pk=endpoint.pk).update(
        next_run_at=now, next_run_source=Source.BASELINE_INTERVAL
    )
    [claim] = claim_due_endpoints(now=now, limit=10, horizon_ms=0)
    return claim


def test_a_slots_lease_passes_to_its_run_and_a_later_claim_is_never_clobbered(
    job, make_endpoint, target
):
    """The lease per slot, step by step against the database: the start releases the slot
    lease and plans the next slot from this one; a second delivery of the claim starts
    nothing; the next slot is claimed beside the call; the outcome writes the failure
    count, never the later claim's slot; at the allowance a claim waits (FULL), writing
    nothing."""
    policy_job(job, overlap={"allow": 1})
    endpoint = make_endpoint(url=target.url("/one"), baseline_interval_ms=60_000)
    first = claim_now(endpoint)
    [started] = start_claims([first])
    assert isinstance(started, Started)
    slot = Slot.objects.get(pk=endpoint.pk)
    assert (slot.claim_token, slot.locked_until) == (None, None)
    assert slot.next_run_at == first.scheduled_for + timedelta(minutes=1)  # from the slot
    assert start_claims([first]) == [None]  # delivered again: its run exists, nothing done

    second = claim_now(endpoint)  # "run now" or the next slot: claimable at once
    assert start_claims([second]) == [FULL]  # allow 1, one call in flight: it waits
    assert Run.objects.filter(endpoint=endpoint).count() == 1
    held = Slot.objects.get(pk=endpoint.pk)
    assert held.claim_token == second.claim_token and held.next_run_at == second.scheduled_for

    target.reply("/one", status=500)
    Endpoint.objects.filter(pk=endpoint.pk).update(failure_count=2)
    record_outcomes([started.outcome(started.call_and_wait())])
    after = Slot.objects.get(pk=endpoint.pk)
    assert (after.claim_token, after.next_run_at) == (held.claim_token, held.next_run_at)
    endpoint.refresh_from_db()
    assert endpoint.failure_count == 3  # its own +1, on the count as it was
    assert Run.objects.get(pk=started.run.pk).status == RunStatus.FAILURE

    [then] = start_claims([second])  # the call ended: the held claim starts now
    assert isinstance(then, Started) and then.run.scheduled_for == second.scheduled_for


def test_the_admin_says_a_saved_allowance_in_words_in_the_overlap_group():
    words = policy_words(stored_policy({}, {"overlap": {"allow": 3}}))
    assert words == ["A slot due while a call is in flight: allow, up to 3 calls at once"]
    [group] = [group for group in POLICY_GROUPS if group.title == "Overlap"]
    assert [(key.key, key.kind, key.choices) for key in group.keys] == [
        ("overlap", "overlap", ("wait", "skip", "allow"))
    ]
