"""Backfills: start one (or its dry run), see its progress, cancel it. Every call is an
``endpoints.backfill`` function; tenants see only their own endpoints' and jobs'."""

from __future__ import annotations

from typing import Any

from django.db.models import Q
from django.utils import timezone
from ninja import Router

from api.auth import NotFound, Principal
from api.backfill_schemas import BackfillIn, BackfillOut
from api.errors import InvalidInput
from api.models import ApiKey
from api.operations import operation
from api.routers.endpoints import scoped_endpoint
from api.routers.jobs import scoped_job
from endpoints.backfill import (
    BackfillPlan,
    backfill_progress,
    cancel_backfill,
    plan_backfill,
    start_backfill,
)
from endpoints.backfill_models import Backfill

router = Router(tags=["backfills"])


def scoped_backfill(principal: Principal, backfill_id: int) -> Backfill:
    backfills = Backfill.objects.all()
    if principal.tenant_ids is not None:
        backfills = backfills.filter(
            Q(endpoint__job__tenant__in=principal.tenant_ids)
            | Q(job__tenant__in=principal.tenant_ids)
        )
    found = backfills.filter(pk=backfill_id).order_by().first()
    if found is None:
        raise NotFound("backfill", backfill_id)
    return found


def requester(principal: Principal) -> str:
    if principal.api_key_id is not None:
        prefix = ApiKey.objects.filter(pk=principal.api_key_id).values_list("prefix", flat=True)
        return f"API key {prefix.first() or principal.api_key_id}"
    return f"user {principal.user.get_username()}" if principal.user else ""


@operation(
    router, "post", "/backfills", name="start_backfill", response=BackfillOut, status=201,
    idempotent=True, calls_out=True,
)  # fmt: skip
def start(principal: Principal, payload: BackfillIn) -> dict[str, Any]:
    """Run the past slots of a range once each (backfill), or list them (dry_run).

    Every slot of [range_from, range_to) by the endpoint's schedule and run policy (cron
    in its time zone, interval on its phase, windows, active period) that has no
    successful run gets one run (trigger backfill, its scheduled_for the slot), paced at
    rate runs a second by the running scheduler; never a slot twice. At most 10 000
    slots; the range must end at or before now. Give endpoint_id or job_id."""
    if (payload.endpoint_id is None) == (payload.job_id is None):
        raise InvalidInput({"endpoint_id": ["Give exactly one of endpoint_id or job_id."]})
    endpoint = scoped_endpoint(principal, payload.endpoint_id) if payload.endpoint_id else None
    job = scoped_job(principal, payload.job_id) if payload.job_id else None
    now = timezone.now()
    start, end, rate = payload.range_from, payload.range_to, payload.rate
    if payload.dry_run:
        plan = plan_backfill(endpoint=endpoint, job=job, start=start, end=end, rate=rate, now=now)
        return dry_run_out(plan)
    backfill = start_backfill(
        endpoint=endpoint,
        job=job,
        start=start,
        end=end,
        rate=rate,
        requested_by=requester(principal),
        now=now,
    )
    return dict(backfill_progress(backfill))


@operation(router, "get", "/backfills/{backfill_id}", name="get_backfill", response=BackfillOut)
def get(principal: Principal, backfill_id: int) -> dict[str, Any]:
    """A backfill's progress: its slots pending, in flight, succeeded, failed, skipped."""
    return dict(backfill_progress(scoped_backfill(principal, backfill_id)))


@operation(
    router, "post", "/backfills/{backfill_id}/cancel", name="cancel_backfill",
    response=BackfillOut,
)  # fmt: skip
def cancel(principal: Principal, backfill_id: int) -> dict[str, Any]:
    """Stop a backfill: no more of its runs start; those in flight finish."""
    backfill = cancel_backfill(scoped_backfill(principal, backfill_id))
    return dict(backfill_progress(backfill))


def dry_run_out(plan: BackfillPlan) -> dict[str, Any]:
    runs = plan.to_run
    return {
        "id": None,
        "endpoint": plan.endpoints[0].ref if len(plan.endpoints) == 1 else None,
        "job": plan.endpoints[0].job.name if plan.endpoints else None,
        "range_from": plan.start,
        "range_to": plan.end,
        "rate": plan.rate,
        "status": "dry run",
        "requested_by": "",
        "created_at": None,
        "started_at": None,
        "finished_at": None,
        "total": runs,
        "pending": runs,
        "started": 0,
        "succeeded": 0,
        "failed": 0,
        "skipped": len(plan.slots) - runs,
        "slots": [
            {
                "endpoint_id": slot.endpoint.pk,
                "scheduled_for": slot.scheduled_for,
                "runs": slot.runs,
                "note": slot.note,
            }
            for slot in plan.slots
        ],
    }
