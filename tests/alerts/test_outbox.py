"""The engine's outbox for alerts: a run that ends a failure streak writes one Flip (the
streak's length) in the statement that reschedules its endpoint; other runs write none.
Real runs against a real HTTP server on 127.0.0.1, recorded alone and in a batch."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from django.utils import timezone

from endpoints.engine.claiming import claim_due_endpoints
from endpoints.engine.outcomes import Outcome
from endpoints.engine.running import call_claim, record_outcomes
from endpoints.models import Endpoint, Flip, Slot, Source

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("loopback_allowed")]


def run_once(*endpoints: Endpoint) -> None:
    """Make the endpoints due, claim, call and record them together, as the engine does."""
    now = timezone.now()
    Slot.objects.filter(pk__in=[e.pk for e in endpoints]).update(
        next_run_at=now - timedelta(milliseconds=1), next_run_source=Source.BASELINE_INTERVAL
    )
    claims = claim_due_endpoints(now=now, limit=100, horizon_ms=0)
    assert {c.endpoint_id for c in claims} == {e.pk for e in endpoints}
    outcomes = [call_claim(claim) for claim in claims]
    assert all(isinstance(outcome, Outcome) for outcome in outcomes)
    record_outcomes(outcomes)  # type: ignore[arg-type]


@pytest.mark.parametrize("together", [1, 2], ids=["recorded alone", "recorded in a batch"])
def test_a_success_after_failures_writes_one_flip_with_the_streaks_length(
    make_endpoint, target, together
):
    endpoints = [
        make_endpoint(url=target.url(f"/e{k}"), baseline_interval_ms=600_000, timeout_ms=2_000)
        for k in range(together)
    ]
    for k in range(together):
        target.reply(f"/e{k}", status=500)
    for _ in range(3):
        run_once(*endpoints)
    assert not Flip.objects.exists()  # failures write nothing
    assert {e.failure_count for e in Endpoint.objects.all()} == {3}
    for k in range(together):
        target.reply(f"/e{k}", status=200)
    run_once(*endpoints)
    flips = list(Flip.objects.order_by("endpoint_id"))
    assert [(f.endpoint_id, f.failures) for f in flips] == [(e.pk, 3) for e in endpoints]
    assert {e.failure_count for e in Endpoint.objects.all()} == {0}
    run_once(*endpoints)  # a success after a success writes nothing
    assert Flip.objects.count() == together


def test_a_reschedule_that_loses_its_claim_writes_no_flip(make_endpoint, target):
    endpoint = make_endpoint(url=target.url("/x"), baseline_interval_ms=600_000, timeout_ms=2_000)
    Endpoint.objects.filter(pk=endpoint.pk).update(failure_count=2)
    now = timezone.now()
    Slot.objects.filter(pk=endpoint.pk).update(next_run_at=now, next_run_source="baseline-interval")
    [claim] = claim_due_endpoints(now=now, limit=10, horizon_ms=0)
    outcome = call_claim(claim)
    Slot.objects.filter(pk=endpoint.pk).update(claim_token=uuid.uuid4())  # another took it
    record_outcomes([outcome])  # type: ignore[list-item]
    assert not Flip.objects.exists()
