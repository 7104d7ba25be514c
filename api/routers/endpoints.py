"""Endpoints: list, create, get, update, delete, archive, pause, resume, run now, test,
hints, reset failures. Every write is ``endpoints.forms`` and an ``endpoints.operations``
function."""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo

from django.db.models import Q, QuerySet
from django.utils import timezone
from ninja import Router
from ninja.errors import HttpError

from api.auth import Principal, get_scoped
from api.errors import InvalidInput
from api.forms import endpoint_form
from api.operations import operation
from api.pagination import DEFAULT_LIMIT, Page, keyset_page
from api.routers.jobs import scoped_job
from api.schemas import (
    EndpointDetail,
    EndpointIn,
    EndpointOut,
    EndpointPage,
    EndpointPatch,
    HintedEndpointOut,
    HintIn,
    Message,
    PauseIn,
    PlannedRun,
    ReasonIn,
    RunDetail,
    RunPreview,
)
from endpoints import operations
from endpoints.choices import DEFAULT_HINT_TTL_MS
from endpoints.governor import explain_plan, preview_runs
from endpoints.models import Endpoint, EndpointStatus, HintKind, Run
from endpoints.validation import duration_from_ms

router = Router(tags=["endpoints"])
# A word of a name or URL, as long as the longest name: a search and a cursor of the
# longest, in any characters, fit the web server's request line (settings).
MAX_SEARCH_CHARS = 200


def endpoints_of(principal: Principal) -> QuerySet[Endpoint]:
    # The page's slots in a second query by id: joined, PostgreSQL merges the slot table
    # from its first row up to the cursor's, so a late page would cost more.
    return principal.scope(Endpoint.objects.prefetch_related("slot"), "job__tenant")


def scoped_endpoint(principal: Principal, endpoint_id: int) -> Endpoint:
    # With its job and tenant: the operations read the job's status and tenant's secret.
    endpoints = Endpoint.objects.select_related("slot", "job__tenant")
    return get_scoped(principal, endpoints, "job__tenant", endpoint_id)


@operation(router, "get", "/endpoints", name="list_endpoints", response=EndpointPage)
def list_endpoints(
    principal: Principal,
    job_id: int | None = None,
    status: EndpointStatus | None = None,
    search: str | None = None,
    cursor: str | None = None,
    limit: int = DEFAULT_LIMIT,
) -> Page:
    """List endpoints, oldest first; filter by job, status or a word in the name or URL."""
    endpoints = endpoints_of(principal)
    if job_id is not None:
        endpoints = endpoints.filter(job_id=scoped_job(principal, job_id).pk)
    if status:
        endpoints = endpoints.in_status(status, now=timezone.now())  # type: ignore[attr-defined]
    if search:
        if len(search) > MAX_SEARCH_CHARS:
            raise HttpError(400, f"search holds at most {MAX_SEARCH_CHARS} characters.")
        endpoints = endpoints.filter(Q(name__icontains=search) | Q(url__icontains=search))
    return keyset_page(endpoints, key="id", cursor=cursor, limit=limit, descending=False)


@operation(
    router,
    "post",
    "/endpoints",
    name="create_endpoint",
    response=EndpointOut,
    status=201,
    idempotent=True,
)
def create_endpoint(principal: Principal, payload: EndpointIn) -> Endpoint:
    """Create an endpoint in a job; it is planned at once."""
    values = payload.dict(exclude_unset=True)
    values["job"] = scoped_job(principal, values.pop("job_id")).pk
    form = endpoint_form(principal, Endpoint(), values)
    operations.save_endpoint(
        form.instance,
        now=timezone.now(),
        changed=None,
        schedule_changed=True,
        actor=principal.actor,
    )
    return form.instance


@operation(router, "get", "/endpoints/{endpoint_id}", name="get_endpoint", response=EndpointDetail)
def get_endpoint(principal: Principal, endpoint_id: int) -> Endpoint:
    """Get an endpoint with its next run, why (source) and the governor's explanation."""
    endpoint = scoped_endpoint(principal, endpoint_id)
    explanation = explain_plan(
        timezone.now(), operations.held_schedule(endpoint), last_run_at=endpoint.last_run_at
    )
    endpoint.explanation = explanation  # type: ignore[attr-defined]  # for EndpointDetail
    return endpoint


MAX_PREVIEW = 100


@operation(
    router, "get", "/endpoints/{endpoint_id}/preview", name="preview_runs", response=RunPreview
)
def preview_endpoint_runs(principal: Principal, endpoint_id: int, count: int = 10) -> RunPreview:
    """The next ``count`` run times in the endpoint's zone and UTC, with DST: the first
    start to start from the last run (where the scheduler has it), each after it assumed
    on time and successful; hints and a pause as they are now."""
    return _run_preview(scoped_endpoint(principal, endpoint_id), count)


def _run_preview(endpoint: Endpoint, count: int) -> RunPreview:
    if not 1 <= count <= MAX_PREVIEW:
        raise InvalidInput({"count": [f"Ask for 1..{MAX_PREVIEW} runs; got {count}."]})
    zone = ZoneInfo(endpoint.timezone or "UTC")
    plans = preview_runs(
        timezone.now(),
        operations.held_schedule(endpoint),
        count,
        last_run_at=endpoint.last_run_at,
    )
    return RunPreview(
        timezone=endpoint.timezone,
        runs=[
            PlannedRun(
                utc=plan.next_run_at,
                local=plan.next_run_at.astimezone(zone).isoformat(),
                source=plan.source,
            )
            for plan in plans
        ],
    )


@operation(
    router,
    "post",
    "/endpoints/{endpoint_id}/preview",
    name="preview_change",
    response=RunPreview,
    reads_only=True,
)
def preview_change(
    principal: Principal, endpoint_id: int, payload: EndpointPatch, count: int = 10
) -> RunPreview:
    """The next ``count`` run times a change would give, saving nothing: the fields as
    update_endpoint takes them, validated as it validates them (a problem is a 422 naming
    the field), planned as the saved change would be (start to start from the last run;
    hints and a pause as they are now)."""
    endpoint = scoped_endpoint(principal, endpoint_id)
    values = payload.dict(exclude_unset=True)
    if "job_id" in values:
        values["job"] = scoped_job(principal, values.pop("job_id")).pk
    form = endpoint_form(principal, endpoint, values)  # assigns in memory, never saves
    return _run_preview(form.instance, count)


@operation(
    router,
    "patch",
    "/endpoints/{endpoint_id}",
    name="update_endpoint",
    response=EndpointOut,
)
def update_endpoint(principal: Principal, endpoint_id: int, payload: EndpointPatch) -> Endpoint:
    """Change an endpoint (only the fields given); a schedule change replans it."""
    endpoint = scoped_endpoint(principal, endpoint_id)
    values = payload.dict(exclude_unset=True)
    if "job_id" in values:
        values["job"] = scoped_job(principal, values.pop("job_id")).pk
    form = endpoint_form(principal, endpoint, values)
    editable = {f.name for f in Endpoint._meta.concrete_fields}
    operations.save_endpoint(
        endpoint,
        now=timezone.now(),
        changed=[name for name in form.changed_data if name in editable],
        schedule_changed=form.schedule_changed(),
        actor=principal.actor,
    )
    return endpoint


@operation(
    router,
    "delete",
    "/endpoints/{endpoint_id}",
    name="delete_endpoint",
    response=Message,
)
def delete_endpoint(principal: Principal, endpoint_id: int) -> Message:
    """Delete an endpoint and its runs (archive it instead to keep its history)."""
    endpoint = scoped_endpoint(principal, endpoint_id)
    ref = endpoint.ref
    operations.delete_for_good(Endpoint.objects.filter(pk=endpoint.pk), actor=principal.actor)
    return Message(detail=f"Endpoint {ref} deleted.")


@operation(
    router,
    "post",
    "/endpoints/{endpoint_id}/archive",
    name="archive_endpoint",
    response=EndpointOut,
    destructive=True,
)
def archive_endpoint(principal: Principal, endpoint_id: int) -> Endpoint:
    """Archive an endpoint: it never runs again; its runs are kept."""
    endpoint = scoped_endpoint(principal, endpoint_id)
    operations.archive_endpoint(endpoint, now=timezone.now(), actor=principal.actor)
    return endpoint


@operation(
    router,
    "post",
    "/endpoints/{endpoint_id}/pause",
    name="pause_endpoint",
    response=EndpointOut,
    repeatable=False,
)
def pause_endpoint(principal: Principal, endpoint_id: int, payload: PauseIn) -> Endpoint:
    """Pause an endpoint until a time (``until``) or for a while (``for_ms``)."""
    endpoint = scoped_endpoint(principal, endpoint_id)
    now = timezone.now()
    if (payload.until is None) == (payload.for_ms is None):
        raise InvalidInput({"until": ["Give exactly one of until (a time) or for_ms."]})
    until = payload.until or now + duration_from_ms(payload.for_ms, field="for_ms")
    operations.pause_endpoint(
        endpoint, now=now, until=until, reason=payload.reason, actor=principal.actor
    )
    return endpoint


@operation(
    router,
    "post",
    "/endpoints/{endpoint_id}/resume",
    name="resume_endpoint",
    response=EndpointOut,
    repeatable=True,
)
def resume_endpoint(principal: Principal, endpoint_id: int) -> Endpoint:
    """Resume a paused endpoint; it is planned afresh."""
    endpoint = scoped_endpoint(principal, endpoint_id)
    operations.resume_endpoint(endpoint, now=timezone.now(), actor=principal.actor)
    return endpoint


@operation(
    router,
    "post",
    "/endpoints/{endpoint_id}/run",
    name="run_endpoint_now",
    response=EndpointOut,
    status=202,
    idempotent=True,
)
def run_endpoint_now(principal: Principal, endpoint_id: int) -> Endpoint:
    """Run now: the endpoint becomes due at once and the scheduler runs it."""
    endpoint = scoped_endpoint(principal, endpoint_id)
    operations.run_now(endpoint, now=timezone.now(), actor=principal.actor)
    return endpoint


@operation(
    router,
    "post",
    "/endpoints/{endpoint_id}/test",
    name="test_endpoint",
    calls_out=True,
    response=RunDetail,
)
def test_endpoint(principal: Principal, endpoint_id: int) -> Run:
    """Call the endpoint once now and return the run; its schedule is untouched."""
    return operations.test_endpoint(scoped_endpoint(principal, endpoint_id))


@operation(
    router,
    "post",
    "/endpoints/{endpoint_id}/hint",
    name="set_hint",
    response=HintedEndpointOut,
)
def set_hint(principal: Principal, endpoint_id: int, payload: HintIn) -> Endpoint:
    """Set a hint: a new cadence (interval_ms) or one run (next_run_at or next_run_in_ms).

    The hint lasts ttl_ms (default an hour for an interval, 30 minutes for a one-shot),
    always inside the endpoint's min/max interval; a tighter cadence or an earlier run takes
    effect at once. Both kinds share one expiry, so a one-shot changes an active interval
    hint's expiry too: the answer's notice says so.
    """
    endpoint = scoped_endpoint(principal, endpoint_id)
    now = timezone.now()
    given = [
        name
        for name in ("interval_ms", "next_run_at", "next_run_in_ms")
        if getattr(payload, name) is not None
    ]
    if len(given) != 1:
        message = "Give exactly one of interval_ms, next_run_at or next_run_in_ms."
        raise InvalidInput({name: [message] for name in given or ["interval_ms"]})
    next_run_at = payload.next_run_at
    if payload.next_run_in_ms is not None:
        delay = duration_from_ms(payload.next_run_in_ms, field="next_run_in_ms", minimum=0)
        next_run_at = now + delay
    kind = HintKind.INTERVAL if payload.interval_ms is not None else HintKind.ONESHOT
    ttl_ms = payload.ttl_ms if payload.ttl_ms is not None else DEFAULT_HINT_TTL_MS[kind]
    before = (endpoint.ai_hint_interval_ms, endpoint.ai_hint_expires_at)
    operations.apply_hint(
        endpoint,
        now=now,
        interval_ms=payload.interval_ms,
        next_run_at=next_run_at,
        ttl=duration_from_ms(ttl_ms, field="ttl_ms"),
        reason=payload.reason,
        actor=principal.actor,
    )
    endpoint.notice = _hint_notice(kind, before, endpoint.ai_hint_expires_at, now)  # type: ignore[attr-defined]
    return endpoint


def _hint_notice(
    kind: str,
    before: tuple[int | None, datetime | None],
    expires_at: datetime | None,
    now: datetime,
) -> str:
    interval_ms, old_expiry = before
    active = interval_ms is not None and old_expiry is not None and old_expiry > now
    if kind != HintKind.ONESHOT or not active or expires_at == old_expiry:
        return ""
    return (
        f"The active interval hint ({interval_ms} ms) now also expires at "
        f"{expires_at:%Y-%m-%d %H:%M:%S} UTC instead of {old_expiry:%Y-%m-%d %H:%M:%S} UTC: "
        "both kinds of hint share one expiry."
    )


@operation(
    router,
    "post",
    "/endpoints/{endpoint_id}/clear-hints",
    name="clear_hints",
    response=EndpointOut,
    repeatable=True,
)
def clear_hints(principal: Principal, endpoint_id: int, payload: ReasonIn) -> Endpoint:
    """Drop the endpoint's hints; it runs on its baseline again."""
    endpoint = scoped_endpoint(principal, endpoint_id)
    operations.clear_hints(
        endpoint, now=timezone.now(), reason=payload.reason, actor=principal.actor
    )
    return endpoint


@operation(
    router,
    "post",
    "/endpoints/{endpoint_id}/reset-failures",
    name="reset_failures",
    response=EndpointOut,
    repeatable=True,
)
def reset_failures(principal: Principal, endpoint_id: int) -> Endpoint:
    """Forget the failure streak (and its backoff)."""
    endpoint = scoped_endpoint(principal, endpoint_id)
    operations.reset_failures(endpoint, now=timezone.now(), actor=principal.actor)
    return endpoint
