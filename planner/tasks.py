"""Celery tasks of the planner (queue ``planner``): thin wrappers over planner.analysis."""

from __future__ import annotations

import logging

from celery import shared_task
from django.conf import settings

from endpoints.models import Endpoint
from planner.analysis import AnalysisBusy, analysis_lease, analyze_endpoint, plan_cycle

logger = logging.getLogger("cronicorn.planner")

# A soft limit inside the lease: the session is still recorded (as failed) when it hits.
_ANALYSIS_SECONDS = int(analysis_lease(settings.CRONICORN_PLANNER_BACKEND).total_seconds())
_CYCLE_SECONDS = _ANALYSIS_SECONDS * settings.CRONICORN_PLANNER_BATCH_SIZE


@shared_task(
    name="cronicorn.plan_cycle",
    ignore_result=True,
    soft_time_limit=_CYCLE_SECONDS,
    time_limit=_CYCLE_SECONDS + 60,
)
def plan_cycle_task() -> int:
    """One planner cycle; returns how many sessions it recorded."""
    return len(plan_cycle())


@shared_task(
    name="cronicorn.analyze_endpoint",
    ignore_result=True,
    soft_time_limit=_ANALYSIS_SECONDS,
    time_limit=_ANALYSIS_SECONDS + 60,
)
def analyze_endpoint_task(endpoint_id: int, backend: str | None = None) -> int | None:
    """Analyse one endpoint now; returns the session id (None: gone or already busy)."""
    endpoint = Endpoint.objects.live().filter(pk=endpoint_id).first()
    if endpoint is None:
        logger.warning("planner: endpoint %s is gone or archived; not analysed", endpoint_id)
        return None
    try:
        return analyze_endpoint(endpoint, backend=backend).pk
    except AnalysisBusy as exc:
        logger.info("planner: %s", exc)
        return None
