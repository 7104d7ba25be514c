"""Runs: per endpoint and per job, newest first, by cursor; one run with its details."""

from __future__ import annotations

from datetime import datetime

from django.db.models import QuerySet
from ninja import Router

from api.auth import Principal, get_scoped
from api.operations import operation
from api.pagination import DEFAULT_LIMIT, Page, keyset_page
from api.routers.endpoints import scoped_endpoint
from api.routers.jobs import scoped_job
from api.schemas import IsoTime, RunDetail, RunOut, RunPage, RunStatusFilter
from endpoints.models import Run

router = Router(tags=["runs"])

# The list leaves out the response body and headers (the heavy columns); get a run for them.
LIST_FIELDS = [name for name in RunOut.model_fields if name != "endpoint_id"] + ["endpoint_id"]


def _page(
    runs: QuerySet[Run],
    status: str | None,
    since: datetime | None,
    until: datetime | None,
    cursor: str | None,
    limit: int,
) -> Page:
    if status:
        runs = runs.filter(status=status)
    if since:
        runs = runs.filter(started_at__gte=since)
    if until:
        runs = runs.filter(started_at__lt=until)
    return keyset_page(
        runs.only(*LIST_FIELDS), key="started_at", cursor=cursor, limit=limit, descending=True
    )


@operation(
    router, "get", "/endpoints/{endpoint_id}/runs", name="list_endpoint_runs", response=RunPage
)
def list_endpoint_runs(
    principal: Principal,
    endpoint_id: int,
    status: RunStatusFilter | None = None,
    since: IsoTime | None = None,
    until: IsoTime | None = None,
    cursor: str | None = None,
    limit: int = DEFAULT_LIMIT,
) -> Page:
    """An endpoint's runs, newest first; filter by status and started time [since, until)."""
    endpoint = scoped_endpoint(principal, endpoint_id)
    runs = Run.objects.filter(endpoint_id=endpoint.pk)
    return _page(runs, status, since, until, cursor, limit)


@operation(router, "get", "/jobs/{job_id}/runs", name="list_job_runs", response=RunPage)
def list_job_runs(
    principal: Principal,
    job_id: int,
    status: RunStatusFilter | None = None,
    since: IsoTime | None = None,
    until: IsoTime | None = None,
    cursor: str | None = None,
    limit: int = DEFAULT_LIMIT,
) -> Page:
    """The runs of all a job's endpoints, newest first; same filters as an endpoint's."""
    job = scoped_job(principal, job_id)
    runs = Run.objects.filter(endpoint__job_id=job.pk)
    return _page(runs, status, since, until, cursor, limit)


@operation(router, "get", "/runs/{run_id}", name="get_run", response=RunDetail)
def get_run(principal: Principal, run_id: int) -> Run:
    """A run with its request, response body, kept headers and timings."""
    return get_scoped(principal, Run.objects.all(), "endpoint__job__tenant", run_id)
