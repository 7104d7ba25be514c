"""The "History of changes" panel of the endpoint and job change pages: the object's
audit entries (``endpoints.audit``), newest first; on an endpoint, a line to ask why a
past slot did not run, answered on a page of its own (``endpoints.past``, as ``explain
--at`` and the API answer it)."""

from __future__ import annotations

from datetime import UTC
from typing import Any

from django.contrib import admin
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from endpoints.audit import AuditEntry
from endpoints.past import explain_past

SHOWN = 20


@admin.display(description="history of changes")
def changes_of(model_admin: Any, obj: Any) -> SafeString | str:
    if obj is None or obj.pk is None:
        return "—"
    entries = AuditEntry.objects.filter(object_type=obj._meta.model_name, object_id=obj.pk)
    rows = format_html_join(
        "",
        "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
        (
            (f"{e.at:%Y-%m-%d %H:%M:%S} UTC", e.actor, e.action, _details(e))
            for e in entries.order_by("-at", "-pk")[:SHOWN]
        ),
    )
    table = (
        format_html(
            "<table class='cc-history'><tr><th>when</th><th>who</th><th>what</th>"
            "<th>changes</th></tr>{}</table>",
            rows,
        )
        if rows
        else format_html("<span class='cc-muted'>{}</span>", "No changes recorded.")
    )
    if obj._meta.model_name != "endpoint":
        return table
    explain = reverse("admin:endpoints_endpoint_explain", args=[obj.pk])
    return format_html(
        "{}<form method='get' action='{}' style='margin-top:.5em'>"
        "Why did a slot not run? At <input type='datetime-local' name='at' step='1' required> "
        "UTC <button type='submit'>Explain</button></form>",
        table,
        explain,
    )


def explain_urls(model_admin: admin.ModelAdmin[Any]) -> list[URLPattern]:
    def view(request: HttpRequest, object_id: str) -> HttpResponse:
        return explain_slot_view(model_admin, request, object_id)

    explain = model_admin.admin_site.admin_view(view)
    return [path("<path:object_id>/explain/", explain, name="endpoints_endpoint_explain")]


def explain_slot_view(
    model_admin: admin.ModelAdmin[Any], request: HttpRequest, object_id: str
) -> HttpResponse:
    """``?at=`` (ISO 8601, UTC without an offset): why the slot due then ran or did not."""
    endpoint = model_admin.get_object(request, unquote(object_id))
    if endpoint is None:
        raise Http404("No such endpoint (or not in your tenants).")
    if not model_admin.has_view_permission(request, endpoint):
        raise PermissionDenied
    text, now = request.GET.get("at", "").strip(), timezone.now()
    at = parse_datetime(text) if text else None
    answer, problem = None, ""
    if at is None:
        problem = "Give the time as ISO 8601, e.g. 2026-03-01T09:00:00 (UTC)."
    else:
        at = at.astimezone(UTC) if at.tzinfo else at.replace(tzinfo=UTC)
        if at > now:
            problem = "Give a past time; the change page shows the next runs."
        else:
            answer = explain_past(endpoint, at, now=now)
    context = {
        **model_admin.admin_site.each_context(request),
        "opts": model_admin.opts,
        "title": f"Why did a slot of {endpoint} not run?",
        "endpoint": endpoint,
        "asked": text,
        "answer": answer,
        "problem": problem,
    }
    return TemplateResponse(request, "admin/endpoints/endpoint/explain_slot.html", context)


def _details(entry: AuditEntry) -> str:
    words = entry.change_words
    return f"{words} — {entry.reason}" if entry.reason and words else words or entry.reason
