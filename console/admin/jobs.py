"""The management UI: tenants, jobs, endpoints, runs and hint history in the Django admin,
scoped as ``console.admin.base`` says."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.db.models import Count, OuterRef, Q, QuerySet, Subquery
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseNotAllowed
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from console.admin.actions import OPERATIONS, perform
from console.admin.base import DeletesForGood, NoSecretLookups, RecordAdmin, TenantScopedAdmin
from console.admin.display import (
    endpoint_link,
    hint_badge,
    hint_summary,
    next_run_words,
    next_runs,
    pretty_json,
    run_link,
    status_badge,
    waiting_words,
    when,
    when_precisely,
)
from console.admin.filters import (
    BoundedCountPaginator,
    EndpointFilter,
    EndpointStatusListFilter,
    JobFilter,
    SourceFilter,
    StartedFilter,
    TenantFilter,
    scope,
)
from console.admin.forms import EndpointAdminForm, JobAdminForm, PauseUntilForm, TenantAdminForm
from console.admin.history import changes_of, explain_urls
from console.admin.preview import preview_view
from console.charts import (
    Bar,
    Period,
    adaptation_chart,
    adaptation_legend,
    chart_legend,
    duration_chart,
)
from endpoints import operations
from endpoints.audit import Actor
from endpoints.choices import PauseSource
from endpoints.governor import explain_plan
from endpoints.models import Endpoint, HintHistory, HintKind, Job, Run, RunStatus, Tenant
from endpoints.schedules import describe_schedule, format_interval
from endpoints.secrets import USERINFO_REGEX
from endpoints.wording import count_words
from planner.models import AnalysisSession

admin.site.site_header = "Cronicorn"
admin.site.site_title = "Cronicorn"
admin.site.index_title = "Scheduler"

RECENT_RUNS = 50
ADAPTATION_RUNS = 300
RECENT_RUNS_LISTED = 15
RECENT_SESSIONS = 5
LIST_TEST_CAP = 10


@admin.register(Tenant)
class TenantAdmin(DeletesForGood, NoSecretLookups):
    """Superusers only: members and quotas."""

    form = TenantAdminForm
    list_display = ("name", "members_count", "endpoints_used", "min_interval", "token_budget")
    search_fields = ("name",)
    filter_horizontal = ("members",)
    fieldsets = (
        (None, {"fields": ("name", "members")}),
        ("Quotas", {"fields": ("max_endpoints", "min_interval_ms", "monthly_token_budget")}),
        ("Rate limits per target host", {"fields": ("host_rate_limits",)}),
        ("Request signing", {"fields": ("hmac_secret", "clear_hmac_secret")}),
    )
    actions = ("rotate_signing_secret", "pause_tenants", "resume_tenants")

    @admin.action(description="Pause every job of the selected tenants")
    def pause_tenants(self, request: HttpRequest, queryset: QuerySet[Tenant]) -> None:
        for tenant in queryset:
            count = operations.pause_tenant(
                tenant, now=timezone.now(), actor=Actor.person(request.user)
            )
            self.message_user(request, f"{tenant.name}: {count_words(count, 'job')} paused.")

    @admin.action(description="Resume every paused job of the selected tenants")
    def resume_tenants(self, request: HttpRequest, queryset: QuerySet[Tenant]) -> None:
        for tenant in queryset:
            count = operations.resume_tenant(
                tenant, now=timezone.now(), actor=Actor.person(request.user)
            )
            self.message_user(request, f"{tenant.name}: {count_words(count, 'job')} resumed.")

    @admin.action(description="Rotate the signing secret (the previous one signs for a while)")
    def rotate_signing_secret(self, request: HttpRequest, queryset: QuerySet[Tenant]) -> None:
        now = timezone.now()
        for tenant in queryset:
            secret = operations.rotate_signing_secret(
                tenant, now=now, actor=Actor.person(request.user)
            )
            until = tenant.hmac_previous_until
            also = (
                f" The previous secret also signs until {until:%Y-%m-%d %H:%M} UTC."
                if until
                else ""
            )
            self.message_user(
                request,
                f"New signing secret for {tenant.name} (shown once, copy it now): {secret}.{also}",
                messages.WARNING,
            )

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        editable = {f.name for f in self.opts.concrete_fields}
        changed = [name for name in form.changed_data if name in editable] if change else None
        actor = Actor.person(request.user)
        operations.save_tenant(obj, now=timezone.now(), changed=changed, actor=actor)

    def has_module_permission(self, request: HttpRequest) -> bool:
        user: Any = request.user
        return bool(user.is_superuser)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self.has_module_permission(request)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return self.has_module_permission(request)

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self.has_module_permission(request)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self.has_module_permission(request)

    def get_queryset(self, request: HttpRequest) -> QuerySet[Tenant]:
        live = Endpoint.objects.live().filter(job__tenant=OuterRef("pk"))
        return (
            super()
            .get_queryset(request)
            .annotate(
                members_total=Count("members", distinct=True),
                endpoints_total=Subquery(
                    live.order_by().values("job__tenant").annotate(n=Count("pk")).values("n")
                ),
            )
        )

    @admin.display(description="members", ordering="members_total")
    def members_count(self, obj: Any) -> int:
        return int(obj.members_total)

    @admin.display(description="endpoints (live / max)")
    def endpoints_used(self, obj: Any) -> str:
        return f"{obj.endpoints_total or 0} / {obj.max_endpoints}"

    @admin.display(description="minimum interval", ordering="min_interval_ms")
    def min_interval(self, obj: Tenant) -> str:
        return format_interval(obj.min_interval_ms)

    @admin.display(description="monthly tokens", ordering="monthly_token_budget")
    def token_budget(self, obj: Tenant) -> str:
        return f"{obj.monthly_token_budget:,}" if obj.monthly_token_budget else "rules only"


@admin.register(Job)
class JobAdmin(DeletesForGood, TenantScopedAdmin):
    form = JobAdminForm
    tenant_path = "tenant"
    editable = True
    list_display = ("name", "tenant", "status", "max_concurrent", "endpoints_link")
    list_filter = (("tenant", TenantFilter), "status")
    search_fields = ("name",)
    list_select_related = ("tenant",)
    actions = ("run_jobs_now", "pause_jobs", "resume_jobs", "archive_jobs", "unarchive_jobs")
    fields = (
        "tenant",
        "name",
        "description",
        "status",
        "max_concurrent",
        "run_policy",
        "endpoints_link",
        "changes",
    )
    readonly_fields = ("endpoints_link", "changes")
    changes = changes_of

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        # An aggregate drops Meta.ordering, so order explicitly (autocomplete paginates it).
        return (
            super()
            .get_queryset(request)
            .annotate(endpoints_total=Count("endpoints"))
            .order_by("tenant__name", "name")
        )

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        # A job's status changes through pause/resume, which reschedule its endpoints.
        return ("status", "endpoints_link", "changes") if obj else ("endpoints_link", "changes")

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        editable = {f.name for f in self.opts.concrete_fields}
        changed = [name for name in form.changed_data if name in editable] if change else None
        actor = Actor.person(request.user)
        operations.save_job(obj, now=timezone.now(), changed=changed, actor=actor)

    def formfield_for_foreignkey(self, db_field: Any, request: HttpRequest, **kwargs: Any) -> Any:
        if db_field.name == "tenant":
            kwargs["queryset"] = scope(Tenant.objects.all(), request, "pk")
        return super().formfield_for_foreignkey(db_field, request, **kwargs)

    @admin.display(description="endpoints")
    def endpoints_link(self, obj: Any) -> str:
        if not obj.pk:
            return "—"
        url = reverse("admin:endpoints_endpoint_changelist") + f"?job__id__exact={obj.pk}"
        return format_html('<a href="{}">{} endpoints</a>', url, obj.endpoints_total)

    @admin.action(description="Run every endpoint of the selected jobs now")
    def run_jobs_now(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        now = timezone.now()
        for job in queryset:
            try:
                due, left_out = operations.run_job_now(
                    job, now=now, actor=Actor.person(request.user)
                )
            except operations.OperationRefused as exc:
                self.message_user(request, f"{job.name}: {exc}", messages.ERROR)
                continue
            self.message_user(request, f"{job.name}: {count_words(due, 'endpoint')} due now.")
            for reason in left_out:
                self.message_user(request, f"{job.name}: left out: {reason}", messages.WARNING)

    @admin.action(description="Pause the selected jobs")
    def pause_jobs(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        self._each_job(request, queryset, operations.pause_job, "paused")

    @admin.action(description="Resume the selected jobs")
    def resume_jobs(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        self._each_job(request, queryset, operations.resume_job, "resumed")

    @admin.action(description="Archive the selected jobs (stop for good, keep the history)")
    def archive_jobs(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        self._each_job(request, queryset, operations.archive_job, "archived")

    @admin.action(description="Unarchive the selected jobs (back, paused)")
    def unarchive_jobs(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        self._each_job(request, queryset, operations.unarchive_job, "unarchived (paused)")

    def _each_job(
        self,
        request: HttpRequest,
        queryset: QuerySet[Job],
        operation: Callable[..., Any],
        done: str,
    ) -> None:
        now = timezone.now()
        names = []
        for job in queryset:
            try:
                operation(job, now=now, actor=Actor.person(request.user))
                names.append(job.name)
            except operations.OperationRefused as exc:
                self.message_user(request, f"{job.name}: {exc}", messages.ERROR)
        if names:
            self.message_user(
                request, f"{count_words(len(names), 'job')} {done}: {', '.join(names)}."
            )


def _list_action(name: str) -> Callable[..., Any]:
    def action(
        modeladmin: EndpointAdmin, request: HttpRequest, queryset: QuerySet[Endpoint]
    ) -> Any:
        return modeladmin.apply_to_selection(request, queryset, name)

    action.__name__ = name
    return admin.action(description=OPERATIONS[name].label)(action)


@admin.register(Endpoint)
class EndpointAdmin(DeletesForGood, TenantScopedAdmin):
    tenant_path = "job__tenant"
    editable = True
    form = EndpointAdminForm
    change_form_template = "admin/endpoints/endpoint/change_form.html"

    class Media:
        js = ("console/run_preview.js",)  # the form's run preview, as the person types

    list_display = (
        "name",
        "job",
        "schedule",
        "next_run",
        "last_status",
        "failure_count",
        "state",
    )
    list_filter = (("job", JobFilter), ("job__tenant", TenantFilter), EndpointStatusListFilter)
    search_fields = ("name", "url")
    list_select_related = ("job", "slot")
    list_per_page = 50
    show_full_result_count = False
    autocomplete_fields = ("job",)
    actions = tuple(_list_action(name) for name in OPERATIONS)
    readonly_fields = (
        "next_run_explained",
        "next_runs",
        "waiting",
        "active_hint",
        "pause_state",
        "failure_count",
        "last_run_at",
        "archived_at",
        "changes",
    )
    changes = changes_of
    fieldsets = (
        ("Request", {"fields": ("job", "name", "url", "method", "headers", "secret_header_names",
                                "body", "timeout_ms", "max_response_size_kb")}),
        ("Schedule", {"fields": ("baseline_interval_ms", "baseline_cron", "timezone"),
                      "description": "Give either an interval or a cron expression."}),
        ("Limits", {"fields": ("min_interval_ms", "max_interval_ms"),
                    "description": "Hints from the planner always stay inside these bounds."}),
        ("Planner description", {"fields": ("description",)}),
        ("Run policy", {"fields": ("run_policy",),
                        "description": "Success criteria, retries, breaker, catch-up, jitter."}),
    )  # fmt: skip
    state_fieldset = (
        "State",
        {
            "fields": (
                "next_run_explained",
                "next_runs",
                "waiting",
                "active_hint",
                "pause_state",
                "failure_count",
                "last_run_at",
                "archived_at",
            )
        },
    )

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        # The last run's status comes from one correlated subquery over the
        # (endpoint, -started_at) index: no query per row of the list.
        last_run = Run.objects.filter(endpoint=OuterRef("pk")).order_by("-started_at")
        return (
            super()
            .get_queryset(request)
            .annotate(last_run_status=Subquery(last_run.values("status")[:1]))
        )

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Any], search_term: str
    ) -> tuple[QuerySet[Any], bool]:
        """Search names and URLs, but never match inside a URL's ``user:password@``: a
        URL with userinfo is found by its name only (else a search probes the password)."""
        found, duplicates = super().get_search_results(request, queryset, search_term)
        if search_term.strip():
            by_url = Q(url__icontains=search_term.strip()) & Q(url__regex=USERINFO_REGEX)
            by_name = Q(name__icontains=search_term.strip())
            found = found.exclude(by_url & ~by_name)
        return found, duplicates

    def get_fieldsets(self, request: HttpRequest, obj: Any = None) -> Any:
        # The state comes first on a change page: it is what a person opens it for.
        history = ("History of changes", {"fields": ("changes",)})
        return (self.state_fieldset, *self.fieldsets, history) if obj else self.fieldsets

    def formfield_for_foreignkey(self, db_field: Any, request: HttpRequest, **kwargs: Any) -> Any:
        if db_field.name == "job":
            kwargs["queryset"] = scope(Job.objects.select_related("tenant"), request, "tenant")
        return super().formfield_for_foreignkey(db_field, request, **kwargs)

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        editable = {f.name for f in self.opts.concrete_fields}
        operations.save_endpoint(
            obj,
            now=timezone.now(),
            changed=[name for name in form.changed_data if name in editable] if change else None,
            schedule_changed=form.schedule_changed(),
            actor=Actor.person(request.user),
        )

    # --- list columns -------------------------------------------------------------------

    @admin.display(description="schedule")
    def schedule(self, obj: Endpoint) -> str:
        return describe_schedule(
            baseline_cron=obj.baseline_cron,
            timezone=obj.timezone,
            baseline_interval_ms=obj.baseline_interval_ms,
        )

    @admin.display(description="next run", ordering="slot__next_run_at")
    def next_run(self, obj: Endpoint) -> str:
        return next_run_words(obj, timezone.now())

    @admin.display(description="last run", ordering="last_run_status")
    def last_status(self, obj: Any) -> SafeString | str:
        return status_badge(obj.last_run_status) if obj.last_run_status else "never"

    @admin.display(description="state")
    def state(self, obj: Endpoint) -> SafeString:
        now = timezone.now()
        badges = []
        if obj.archived_at:
            badges.append(format_html('<span class="cc-badge cc-archived">{}</span>', "archived"))
        if obj.is_paused(now):
            badges.append(
                format_html(
                    '<span class="cc-badge cc-paused" title="{}">paused {}</span>',
                    obj.pause_reason,
                    obj.pause_words(now),
                )
            )
        hint = hint_badge(obj, now)
        if hint:
            badges.append(hint)
        if not badges:
            return format_html('<span class="cc-muted">{}</span>', "active")
        return format_html_join(" ", "{}", ((badge,) for badge in badges))

    # --- change page ----------------------------------------------------------------------

    next_runs = next_runs  # the preview of the next runs, in the zone and UTC

    @admin.display(description="next run")
    def next_run_explained(self, obj: Endpoint) -> SafeString:
        now = timezone.now()
        stored = next_run_words(obj, now)
        if obj.archived_at:
            return format_html("<strong>{}</strong>", stored)
        explanation = explain_plan(now, operations.held_schedule(obj), last_run_at=obj.last_run_at)
        return format_html(
            "<strong>{}</strong><br><span class='cc-muted'>Planned now, the governor says: {}"
            "</span>",
            stored,
            explanation,
        )

    @admin.display(description="active hint")
    def active_hint(self, obj: Endpoint) -> str:
        history = reverse("admin:endpoints_hinthistory_changelist") + f"?endpoint={obj.pk}"
        return format_html(
            '{} <a href="{}">(hint history)</a>', hint_summary(obj, timezone.now()), history
        )

    @admin.display(description="waiting")
    def waiting(self, obj: Endpoint) -> str:
        running = Run.objects.filter(endpoint__job_id=obj.job_id, status=RunStatus.RUNNING)
        words = waiting_words(obj, timezone.now(), in_flight_of_job=running.count())
        return words or "No."

    @admin.display(description="paused")
    def pause_state(self, obj: Endpoint) -> str:
        now = timezone.now()
        if not obj.is_paused(now):
            return "No."
        reason = f" — {obj.pause_reason}" if obj.pause_reason else ""
        return f"{obj.pause_words(now).capitalize()}{reason}"

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        endpoint = self.get_object(request, unquote(object_id))
        context = {**(extra_context or {}), **self._history_context(endpoint)}
        context["operations"] = [
            (name, operation.label, reverse("admin:endpoints_endpoint_operation",
                                            args=[endpoint.pk, name]))
            for name, operation in OPERATIONS.items()
            if name != "pause_until"
        ]  # fmt: skip
        context["pause_until_url"] = reverse(
            "admin:endpoints_endpoint_operation", args=[endpoint.pk, "pause_until"]
        )
        context["pause_form"] = PauseUntilForm(now=timezone.now())
        return super().change_view(request, object_id, form_url, context)

    def _history_context(self, endpoint: Endpoint) -> dict[str, Any]:
        runs = list(endpoint.runs.order_by("-started_at")[:RECENT_RUNS])
        sessions = list(
            AnalysisSession.objects.filter(endpoint=endpoint).order_by("-started_at")[
                :RECENT_SESSIONS
            ]
        )
        bars = [Bar(r.started_at, r.duration_ms, r.status) for r in reversed(runs)]
        now = timezone.now()
        recent = endpoint.runs.order_by("-started_at").values_list(
            "started_at", "duration_ms", "status"
        )[:ADAPTATION_RUNS]
        timeline = [Bar(*row) for row in reversed(recent)]
        return {
            "adaptation_chart": adaptation_chart(
                timeline, adaptation_periods(endpoint, timeline, now), now=now
            ),
            "adaptation_legend": adaptation_legend(),
            "recent_runs": runs[:RECENT_RUNS_LISTED],
            "runs_url": reverse("admin:endpoints_run_changelist") + f"?endpoint={endpoint.pk}",
            "duration_chart": duration_chart(bars, slots=RECENT_RUNS),
            "chart_legend": chart_legend(),
            "recent_sessions": sessions,
            "sessions_url": reverse("admin:planner_analysissession_changelist")
            + f"?endpoint={endpoint.pk}",
        }

    # --- operations -------------------------------------------------------------------------

    def get_urls(self) -> list[URLPattern]:
        operation = path(
            "<path:object_id>/operation/<str:name>/",
            self.admin_site.admin_view(self.operation_view),
            name="endpoints_endpoint_operation",
        )
        preview = self.admin_site.admin_view(self.preview_view)
        return [
            path("preview/", preview, name="endpoints_endpoint_preview"),
            path("<path:object_id>/preview/", preview, name="endpoints_endpoint_preview"),
            operation,
            *explain_urls(self),
            *super().get_urls(),
        ]

    def preview_view(self, request: HttpRequest, object_id: str | None = None) -> HttpResponse:
        """The form's run preview before saving (``console.admin.preview``)."""
        return preview_view(self, request, object_id)

    def operation_view(self, request: HttpRequest, object_id: str, name: str) -> HttpResponse:
        """A change page button: POST only (with CSRF, via admin_view), then back."""
        if name not in OPERATIONS:
            raise Http404(f"There is no endpoint operation {name!r}.")
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        endpoint = self.get_object(request, unquote(object_id))
        if not self.has_change_permission(request, endpoint):
            raise PermissionDenied
        outcome = perform(name, endpoint, now=timezone.now(), user=request.user, data=request.POST)
        self.message_user(request, outcome.message, outcome.level)
        return redirect("admin:endpoints_endpoint_change", endpoint.pk)

    def apply_to_selection(
        self, request: HttpRequest, queryset: QuerySet[Endpoint], name: str
    ) -> HttpResponse | None:
        if name == "pause_until" and "apply" not in request.POST:
            return self._pause_until_step(request, queryset)
        operation = OPERATIONS[name]
        endpoints = list(queryset.select_related("job__tenant"))
        if operation.slow and len(endpoints) > LIST_TEST_CAP:
            self.message_user(
                request,
                f"Select at most {LIST_TEST_CAP} endpoints to test at once "
                f"({len(endpoints)} selected): each test waits for its HTTP answer.",
                messages.ERROR,
            )
            return None
        now = timezone.now()
        outcomes = [
            perform(name, e, now=now, user=request.user, data=request.POST) for e in endpoints
        ]
        self._report(request, operation.label, outcomes, each=operation.slow)
        return None

    def _report(self, request: HttpRequest, label: str, outcomes: list[Any], *, each: bool) -> None:
        done = [o for o in outcomes if o.level != messages.ERROR]
        if each or len(outcomes) == 1:
            for outcome in outcomes:
                self.message_user(request, outcome.message, outcome.level)
            return
        if done:
            self.message_user(request, f"{label}: done for {count_words(len(done), 'endpoint')}.")
        for outcome in [o for o in outcomes if o.level == messages.ERROR]:
            self.message_user(request, outcome.message, messages.ERROR)

    def _pause_until_step(
        self, request: HttpRequest, queryset: QuerySet[Endpoint]
    ) -> TemplateResponse:
        context = {
            **self.admin_site.each_context(request),
            "title": "Pause until a time",
            "opts": self.opts,
            "endpoints": queryset.select_related("job"),
            "form": PauseUntilForm(now=timezone.now()),
            "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
            "select_across": request.POST.get("select_across", "0"),
        }
        return TemplateResponse(request, "admin/endpoints/endpoint/pause_until.html", context)


@admin.register(Run)
class RunAdmin(RecordAdmin):
    tenant_path = "endpoint__job__tenant"
    list_display = (
        "started",
        "endpoint_ref",
        "trigger",
        "source",
        "status_shown",
        "status_code",
        "duration",
    )
    list_filter = (
        "status",
        SourceFilter,
        "trigger",
        EndpointFilter,
        ("endpoint__job", JobFilter),
        StartedFilter,
    )
    list_select_related = ("endpoint__job",)
    ordering = ("-started_at",)
    paginator = BoundedCountPaginator
    list_per_page = 100
    fieldsets = (
        (None, {"fields": ("endpoint_ref", "trigger", "source", "status_shown", "attempt",
                           "retry_link", "cause_link")}),
        ("Request", {"fields": ("request_made",)}),
        ("Timings", {"fields": ("scheduled", "started", "finished", "duration", "lateness")}),
        ("Response", {"fields": ("status_code", "response_size", "headers_shown",
                                 "response_pretty")}),
        ("Error", {"fields": ("error",)}),
    )  # fmt: skip
    readonly_fields = (
        "endpoint_ref",
        "trigger",
        "source",
        "status_shown",
        "attempt",
        "retry_link",
        "cause_link",
        "request_made",
        "scheduled",
        "started",
        "finished",
        "duration",
        "lateness",
        "status_code",
        "response_size",
        "headers_shown",
        "response_pretty",
        "error",
    )

    @admin.display(description="endpoint", ordering="endpoint__name")
    def endpoint_ref(self, obj: Run) -> str:
        return endpoint_link(obj.endpoint)

    @admin.display(description="started", ordering="started_at")
    def started(self, obj: Run) -> str:
        return when_precisely(obj.started_at)

    @admin.display(description="scheduled for")
    def scheduled(self, obj: Run) -> str:
        return when_precisely(obj.scheduled_for)

    @admin.display(description="finished")
    def finished(self, obj: Run) -> str:
        return when_precisely(obj.finished_at)

    @admin.display(description="status", ordering="status")
    def status_shown(self, obj: Run) -> SafeString:
        return status_badge(obj.status)

    @admin.display(description="duration", ordering="duration_ms")
    def duration(self, obj: Run) -> str:
        return f"{obj.duration_ms} ms" if obj.duration_ms is not None else "—"

    @admin.display(description="late by")
    def lateness(self, obj: Run) -> str:
        late_ms = (obj.started_at - obj.scheduled_for).total_seconds() * 1000
        return f"{late_ms:.0f} ms" + (f": {obj.delay_reason}" if obj.delay_reason else "")

    @admin.display(description="retry of")
    def retry_link(self, obj: Run) -> str:
        return run_link(obj.retry_of_id) if obj.retry_of_id else "—"

    @admin.display(description="follow-up of")
    def cause_link(self, obj: Run) -> str:
        return run_link(obj.caused_by) if obj.caused_by else "—"

    @admin.display(description="request")
    def request_made(self, obj: Run) -> str:
        if not obj.request_url:
            return "—"
        return format_html("<code>{} {}</code>", obj.request_method or "GET", obj.request_url)

    @admin.display(description="size")
    def response_size(self, obj: Run) -> str:
        if obj.response_size_bytes is None:
            return "—"
        truncated = " (truncated at the size cap)" if obj.response_truncated else ""
        return f"{obj.response_size_bytes:,} bytes{truncated}"

    @admin.display(description="headers kept")
    def headers_shown(self, obj: Run) -> SafeString | str:
        if not obj.response_headers:
            return "—"
        return pretty_json(obj.response_headers)

    @admin.display(description="body")
    def response_pretty(self, obj: Run) -> SafeString:
        return pretty_json(obj.response_body)


@admin.register(HintHistory)
class HintHistoryAdmin(RecordAdmin):
    tenant_path = "endpoint__job__tenant"
    list_display = ("created_at", "endpoint_ref", "kind", "value", "expires_at", "reason", "by")
    list_filter = ("kind", EndpointFilter, ("endpoint__job", JobFilter))
    list_select_related = ("endpoint__job", "created_by", "session")
    ordering = ("-created_at",)
    paginator = BoundedCountPaginator
    fields = (
        "endpoint_ref",
        "kind",
        "value",
        "expires_at",
        "reason",
        "by",
        "created_at",
    )
    readonly_fields = fields

    @admin.display(description="endpoint", ordering="endpoint__name")
    def endpoint_ref(self, obj: HintHistory) -> str:
        return endpoint_link(obj.endpoint)

    @admin.display(description="value")
    def value(self, obj: HintHistory) -> str:
        if obj.interval_ms is not None:
            return f"every {format_interval(obj.interval_ms)}"
        if obj.next_run_at is not None:
            return f"once at {when(obj.next_run_at)}"
        if obj.paused_until is not None and obj.pause_source == PauseSource.HELD:
            return "paused until resumed"
        if obj.paused_until is not None:
            return f"paused until {when(obj.paused_until)}"
        return "—"

    @admin.display(description="by")
    def by(self, obj: HintHistory) -> str:
        if obj.session_id:
            url = reverse("admin:planner_analysissession_change", args=[obj.session_id])
            return format_html('<a href="{}">planner session {}</a>', url, obj.session_id)
        return obj.created_by.get_username() if obj.created_by else "—"


def adaptation_periods(endpoint: Endpoint, bars: list[Bar], now: datetime) -> list[Period]:
    """The hints and pauses written since the first run charted, each until it expired,
    was replaced or was cleared (the next hint record of the same family ends it)."""
    if not bars:
        return []
    records = list(
        HintHistory.objects.filter(endpoint=endpoint, created_at__gte=bars[0].started_at)
        .order_by("created_at")
        .values_list("kind", "created_at", "expires_at", "paused_until", "reason")
    )
    periods = []
    for index, (kind, start, expires, paused_until, reason) in enumerate(records):
        family = _family(kind)
        if kind in (HintKind.RESUME, HintKind.CLEAR):
            continue
        end = paused_until if family == "pause" else expires
        later = [r[1] for r in records[index + 1 :] if _family(r[0]) == family]
        end = min([t for t in (end, *later[:1], now) if t is not None])
        label = f"{kind}: {reason or 'no reason given'} (until {end:%H:%M:%S})"
        periods.append(Period(start, end, family, label))
    return periods


def _family(kind: str) -> str:
    return "pause" if kind in (HintKind.PAUSE, HintKind.RESUME) else "hint"
