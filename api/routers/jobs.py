"""Jobs: list, create, get, update, delete, pause, resume."""

from __future__ import annotations

from typing import Any

from django.utils import timezone
from ninja import Router

from api.auth import Principal, get_scoped
from api.errors import InvalidInput
from api.forms import validated_job
from api.operations import operation
from api.pagination import DEFAULT_LIMIT, Page, keyset_page
from api.schemas import JobIn, JobOut, JobPage, JobPatch, JobStatusFilter, Message
from endpoints import operations
from endpoints.models import Job, Tenant
from endpoints.wording import count_words

router = Router(tags=["jobs"])


def scoped_job(principal: Principal, job_id: int) -> Job:
    return get_scoped(principal, Job.objects.all(), "tenant", job_id)


@operation(router, "get", "/jobs", name="list_jobs", response=JobPage)
def list_jobs(
    principal: Principal,
    status: JobStatusFilter | None = None,
    cursor: str | None = None,
    limit: int = DEFAULT_LIMIT,
) -> Page:
    """List jobs, oldest first; filter by status (active, paused, archived)."""
    jobs = principal.scope(Job.objects.all(), "tenant")
    if status:
        jobs = jobs.filter(status=status)
    return keyset_page(jobs, key="id", cursor=cursor, limit=limit, descending=False)


@operation(
    router,
    "post",
    "/jobs",
    name="create_job",
    response=JobOut,
    status=201,
    idempotent=True,
)
def create_job(principal: Principal, payload: JobIn) -> Job:
    """Create a job (a group of endpoints that can be paused together)."""
    values = {**payload.dict(exclude={"tenant_id"}), "tenant": tenant_for(principal, payload)}
    job = validated_job(principal, Job(), values)
    operations.save_job(job, now=timezone.now(), changed=None, actor=principal.actor)
    return job


def tenant_for(principal: Principal, payload: Any) -> int | None:
    """The tenant a new object goes to: the payload's ``tenant_id`` (one of the caller's),
    or the caller's only tenant."""
    if payload.tenant_id is not None:
        return get_scoped(principal, Tenant.objects.all(), "pk", payload.tenant_id).pk
    if principal.tenant_ids is not None and len(principal.tenant_ids) == 1:
        return principal.tenant_ids[0]
    raise InvalidInput({"tenant_id": ["You belong to several tenants; say which one."]})


@operation(router, "get", "/jobs/{job_id}", name="get_job", response=JobOut)
def get_job(principal: Principal, job_id: int) -> Job:
    """Get a job."""
    return scoped_job(principal, job_id)


@operation(router, "patch", "/jobs/{job_id}", name="update_job", response=JobOut)
def update_job(principal: Principal, job_id: int, payload: JobPatch) -> Job:
    """Change a job's name, description or concurrency limit (only the fields given)."""
    values = payload.dict(exclude_unset=True)
    job = scoped_job(principal, job_id)
    job = validated_job(principal, job, values)
    changed = ["name", "description", "max_concurrent", "run_policy"]
    operations.save_job(job, now=timezone.now(), changed=changed, actor=principal.actor)
    return job


@operation(
    router,
    "delete",
    "/jobs/{job_id}",
    name="delete_job",
    response=Message,
)
def delete_job(principal: Principal, job_id: int) -> Message:
    """Delete a job with its endpoints and all their runs, for good.

    To stop a job but keep its history, archive it instead (archive_job)."""
    job = scoped_job(principal, job_id)
    operations.delete_for_good(Job.objects.filter(pk=job.pk), actor=principal.actor)
    return Message(detail=f"Job {job.name} deleted.")


@operation(router, "post", "/jobs/{job_id}/run", name="run_job_now", response=Message)
def run_job_now(principal: Principal, job_id: int) -> Message:
    """Run every endpoint of the job now through the scheduler (paused ones and runs in
    flight are left out, and named)."""
    job = scoped_job(principal, job_id)
    due, left_out = operations.run_job_now(job, now=timezone.now(), actor=principal.actor)
    detail = f"{count_words(due, 'endpoint')} of {job.name} due now."
    if left_out:
        detail += " Left out: " + " ".join(left_out)
    return Message(detail=detail)


@operation(
    router,
    "post",
    "/jobs/{job_id}/pause",
    name="pause_job",
    response=JobOut,
    repeatable=True,
)
def pause_job(principal: Principal, job_id: int) -> Job:
    """Pause a job: none of its endpoints is claimed until it is resumed."""
    job = scoped_job(principal, job_id)
    operations.pause_job(job, now=timezone.now(), actor=principal.actor)
    return job


@operation(
    router,
    "post",
    "/jobs/{job_id}/resume",
    name="resume_job",
    response=JobOut,
    repeatable=True,
)
def resume_job(principal: Principal, job_id: int) -> Job:
    """Resume a paused job; its endpoints are planned afresh."""
    job = scoped_job(principal, job_id)
    operations.resume_job(job, now=timezone.now(), actor=principal.actor)
    return job


@operation(
    router,
    "post",
    "/jobs/{job_id}/archive",
    name="archive_job",
    response=JobOut,
    repeatable=True,
)
def archive_job(principal: Principal, job_id: int) -> Job:
    """Archive a job: none of its endpoints runs again; every run and hint is kept.

    unarchive_job brings it back (paused); delete_job removes it and its history for good.
    """
    job = scoped_job(principal, job_id)
    operations.archive_job(job, now=timezone.now(), actor=principal.actor)
    return job


@operation(
    router,
    "post",
    "/jobs/{job_id}/unarchive",
    name="unarchive_job",
    response=JobOut,
)
def unarchive_job(principal: Principal, job_id: int) -> Job:
    """Bring an archived job back, paused: resume_job then runs its endpoints again."""
    job = scoped_job(principal, job_id)
    operations.unarchive_job(job, now=timezone.now(), actor=principal.actor)
    return job
