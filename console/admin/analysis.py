"""Analysis sessions in the admin: read-only records, scoped to the user's tenants."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from console.admin.base import RecordAdmin
from console.admin.display import endpoint_link, pretty_json, status_badge, when
from console.admin.filters import BoundedCountPaginator, EndpointFilter, JobFilter, StartedFilter
from planner.models import AnalysisSession


def render_tool_call(index: int, call: Any) -> SafeString:
    """One call as a person reads it: the tool, its arguments, then its result or error."""
    if not isinstance(call, dict):
        return format_html('<div class="cc-toolcall">{}. {}</div>', index, pretty_json(call))
    name = call.get("tool") or call.get("name") or "tool"
    outcome = (
        format_html("<strong>refused:</strong> {}", call["error"])
        if call.get("error")
        else pretty_json(call.get("result"))
    )
    return format_html(
        '<div class="cc-toolcall"><strong>{}. {}</strong>'
        "<div>arguments:</div>{}<div>result:</div>{}</div>",
        index,
        name,
        pretty_json(call.get("arguments")),
        outcome,
    )


@admin.register(AnalysisSession)
class AnalysisSessionAdmin(RecordAdmin):
    tenant_path = "endpoint__job__tenant"
    list_display = (
        "started_at",
        "endpoint_ref",
        "backend",
        "model",
        "status_shown",
        "confidence",
        "total_tokens",
        "duration_ms",
    )
    list_filter = (
        "status",
        "backend",
        EndpointFilter,
        ("endpoint__job", JobFilter),
        StartedFilter,
    )
    list_select_related = ("endpoint__job",)
    ordering = ("-started_at",)
    paginator = BoundedCountPaginator
    fieldsets = (
        (None, {"fields": ("endpoint_ref", "backend", "model", "status_shown", "note")}),
        ("Outcome", {"fields": ("reasoning", "actions_shown", "confidence", "next_analysis",
                                "hints_written", "error")}),
        ("Tool calls", {"fields": ("tool_calls_readable",)}),
        ("Cost", {"fields": ("started_at", "finished_at", "duration_ms", "tokens")}),
    )  # fmt: skip
    readonly_fields = (
        "endpoint_ref",
        "backend",
        "model",
        "status_shown",
        "note",
        "reasoning",
        "actions_shown",
        "confidence",
        "next_analysis",
        "hints_written",
        "error",
        "tool_calls_readable",
        "started_at",
        "finished_at",
        "duration_ms",
        "tokens",
    )

    @admin.display(description="endpoint", ordering="endpoint__name")
    def endpoint_ref(self, obj: AnalysisSession) -> SafeString:
        return endpoint_link(obj.endpoint)

    @admin.display(description="status", ordering="status")
    def status_shown(self, obj: AnalysisSession) -> SafeString:
        return status_badge(obj.status)

    @admin.display(description="actions taken")
    def actions_shown(self, obj: AnalysisSession) -> str:
        taken = obj.actions_taken or []
        return ", ".join(str(action) for action in taken) if taken else "none"

    @admin.display(description="next analysis")
    def next_analysis(self, obj: AnalysisSession) -> str:
        return when(obj.next_analysis_at)

    @admin.display(description="tokens")
    def tokens(self, obj: AnalysisSession) -> str:
        return (
            f"{obj.total_tokens:,} total ({obj.prompt_tokens:,} prompt, "
            f"{obj.completion_tokens:,} completion)"
        )

    @admin.display(description="hints written")
    def hints_written(self, obj: AnalysisSession) -> SafeString | str:
        hints = list(obj.hints.order_by("created_at"))
        if not hints:
            return "none"
        return format_html_join(
            "",
            '<div><a href="{}">{}</a> — {}</div>',
            (
                (reverse("admin:endpoints_hinthistory_change", args=[h.pk]), h.kind, h.reason)
                for h in hints
            ),
        )

    @admin.display(description="calls")
    def tool_calls_readable(self, obj: AnalysisSession) -> SafeString | str:
        calls = obj.tool_calls if isinstance(obj.tool_calls, list) else [obj.tool_calls]
        if not calls:
            return "No tool calls."
        return format_html_join(
            "", "{}", ((render_tool_call(i, call),) for i, call in enumerate(calls, 1))
        )
