"""The run preview of the endpoint form, before saving: the next runs the values typed
would plan, in the endpoint's zone (with its UTC offset, so DST shows) and in UTC.

The form's script (``console/static/console/run_preview.js``) posts the whole form here
as the person types. The values go through the admin's own form class (so the job
choices are the user's tenants' and every message is the one a save would show) and the
plan through ``governor.preview_runs``, as the saved page, ``explain --next`` and the
API do. Nothing is saved: validating a form assigns to an unsaved (or unsaved-again)
instance in memory only.
"""

from __future__ import annotations

from typing import TypedDict, cast
from zoneinfo import ZoneInfo

from django.contrib import admin
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed, JsonResponse
from django.utils import timezone

from api.auth import principal_for_user
from api.fair_share import OverCpuBudget, cpu_budget
from console.admin.display import local_stamp, utc_stamp
from endpoints import operations
from endpoints.forms import EndpointForm
from endpoints.governor import SOURCE_WORDS, preview_runs
from endpoints.models import Endpoint, JobStatus
from endpoints.schedules import describe_schedule
from endpoints.wording import count_words

PREVIEW_COUNT = 10


class PreviewRun(TypedDict):
    local: str
    utc: str
    source: str
    why: str


class RunsPreview(TypedDict):
    schedule: str
    timezone: str
    computed_at: str
    runs: list[PreviewRun]
    notes: list[str]


class FieldProblems(TypedDict):
    field: str
    label: str
    messages: list[str]


def preview_view(
    model_admin: admin.ModelAdmin[Endpoint], request: HttpRequest, object_id: str | None
) -> HttpResponse:
    """POST the form's fields (CSRF-checked by ``admin_view``); answer the next runs, or
    the form's messages with status 400. Another tenant's endpoint is a 404, and another
    tenant's job is refused as the form refuses it (not one of the choices)."""
    if request.method != "POST":
        return HttpResponseNotAllowed(["POST"])
    endpoint = model_admin.get_object(request, unquote(object_id)) if object_id else None
    if endpoint is None and not model_admin.has_add_permission(request):
        raise PermissionDenied
    if endpoint is not None and not model_admin.has_change_permission(request, endpoint):
        raise PermissionDenied
    principal = principal_for_user(request.user)
    if principal is None:
        raise PermissionDenied
    try:
        # Sent as a person types: the user's share of a core, when set, bounds it.
        with cpu_budget(principal):
            return _answer(model_admin, request, endpoint)
    except OverCpuBudget as refused:
        response = JsonResponse({"busy": refused.detail}, status=429)
        response["Retry-After"] = str(refused.wait)
        return response


def _answer(
    model_admin: admin.ModelAdmin[Endpoint], request: HttpRequest, endpoint: Endpoint | None
) -> JsonResponse:
    form_class = model_admin.get_form(request, endpoint, change=endpoint is not None)
    form = cast(EndpointForm, form_class(request.POST, instance=endpoint or Endpoint()))
    if problems := form.preview_problems():
        return JsonResponse({"errors": _problems(form, problems)}, status=400)
    return JsonResponse(_preview(form.instance))


def _problems(form: EndpointForm, problems: dict[str, list[str]]) -> list[FieldProblems]:
    return [
        {"field": name, "label": str(form[name].label), "messages": messages}
        for name, messages in problems.items()
    ]


def _preview(endpoint: Endpoint) -> RunsPreview:
    now = timezone.now()
    zone = ZoneInfo(endpoint.timezone)
    plans = [] if endpoint.archived_at else preview_runs(
        now, operations.held_schedule(endpoint), PREVIEW_COUNT,
        last_run_at=endpoint.last_run_at,
    )  # fmt: skip
    runs: list[PreviewRun] = [
        {
            "local": local_stamp(plan.next_run_at, zone),
            "utc": utc_stamp(plan.next_run_at),
            "source": plan.source,
            "why": SOURCE_WORDS.get(plan.source, plan.source),
        }
        for plan in plans
    ]
    schedule = describe_schedule(
        baseline_cron=endpoint.baseline_cron,
        timezone=endpoint.timezone,
        baseline_interval_ms=endpoint.baseline_interval_ms,
    )
    return {
        "schedule": schedule,
        "timezone": endpoint.timezone,
        "computed_at": utc_stamp(now.replace(microsecond=0)),
        "runs": runs,
        "notes": _notes(endpoint, shown=len(runs)),
    }


def _notes(endpoint: Endpoint, *, shown: int) -> list[str]:
    """What the list leaves out or assumes, in words."""
    notes = [
        "The first run start to start from the last run, as saving plans it; each after it "
        "assumed on time and successful; hints and a pause as they are now."
    ]
    if endpoint.archived_at:
        notes.append("This endpoint is archived: it never runs.")
    elif shown == 0:
        notes.append("With these values it never runs again.")
    elif shown < PREVIEW_COUNT:
        notes.append(f"With these values it runs only {count_words(shown, 'more time')}.")
    if not endpoint.job_id:
        notes.append(
            "No job chosen yet: its run policy defaults and its tenant's minimum "
            "interval are not included."
        )
    elif endpoint.job.status != JobStatus.ACTIVE:
        notes.append(f"The job {endpoint.job.name!r} is {endpoint.job.status}: nothing runs now.")
    calendar = endpoint.policy.calendar
    if calendar is not None:
        notes.append(
            f"Never on {calendar.words()} (dates in {endpoint.timezone}): a run due on one "
            "moves to the next open day (source calendar)."
        )
    jitter = endpoint.policy.jitter_ms
    if jitter and endpoint.baseline_cron and endpoint.pk is None:
        notes.append(
            f"Jitter: each cron slot moves by a fixed offset of up to {jitter / 1000:g} s, "
            "taken from the endpoint's id when it is saved; not included here."
        )
    return notes
