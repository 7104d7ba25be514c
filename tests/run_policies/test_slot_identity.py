"""Every call says which slot it is (issue 33): the slot's time, the run, the attempt and
the trigger as headers, signed with the body; a target verifies them with the README's
own recipe, and every attempt of a slot names the same slot. The in-process scheduler
against a real HTTP target on 127.0.0.1."""

from __future__ import annotations

from datetime import UTC
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone

from endpoints.models import RunStatus
from endpoints.operations import test_endpoint
from tests.e2e.readme import recipe
from tests.planning import DAY_MS, finished, policy_job, runs, tick_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("loopback_allowed")]
README = Path(__file__).resolve().parents[2] / "README.md"


def readme_verify_slot() -> Any:
    """``verify_slot`` as the README gives it to people."""
    return recipe(README.read_text(), "verify_slot.py", "verify_slot")


def stamp(at: Any) -> str:
    return at.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def test_each_attempt_names_its_slot_signed_as_the_readme_verifies(
    scheduler, job, make_endpoint, target
):
    verify_slot = readme_verify_slot()
    job.tenant.hmac_secret = "s3cret"
    job.tenant.save()
    policy_job(job, retry_attempts=2, retry_delay_ms=1_000)
    target.reply("/work", status=503, action=lambda: target.reply("/work", status=200))
    endpoint = make_endpoint(
        url=target.url("/work"),
        method="POST",
        body={"report": "daily"},
        baseline_interval_ms=DAY_MS,
        next_run_at=timezone.now(),
    )

    assert tick_until(scheduler, finished(endpoint, 2), timeout=20)

    first, second = runs(endpoint)
    assert (first.status, second.status) == (RunStatus.FAILURE, RunStatus.SUCCESS)
    hits = target.hits("/work")
    assert len(hits) == 2
    for hit, run in zip(hits, (first, second), strict=True):
        assert verify_slot(b"s3cret", hit.headers, hit.body)
        assert not verify_slot(b"other", hit.headers, hit.body)
        assert hit.headers["X-Cronicorn-Run-Id"] == str(run.pk)
        assert hit.headers["X-Cronicorn-Attempt"] == str(run.attempt)
        assert hit.headers["X-Cronicorn-Trigger"] == "scheduled"
        # Both attempts name the slot of the first: the key a target does its work once by.
        assert hit.headers["X-Cronicorn-Scheduled-For"] == stamp(first.scheduled_for)
    # A slot header changed on the way is caught by the signature.
    forged = {**hits[1].headers, "X-Cronicorn-Attempt": "1"}
    assert not verify_slot(b"s3cret", forged, hits[1].body)


def test_a_test_call_says_it_is_a_test_and_an_endpoint_cannot_forge_the_headers(
    job, make_endpoint, target
):
    endpoint = make_endpoint(url=target.url("/check"), headers={"X-Cronicorn-Trigger": "scheduled"})
    run = test_endpoint(endpoint)
    [hit] = target.hits("/check")
    assert hit.headers["X-Cronicorn-Trigger"] == "test"
    assert hit.headers["X-Cronicorn-Run-Id"] == str(run.pk)
    assert hit.headers["X-Cronicorn-Scheduled-For"] == stamp(run.scheduled_for)
