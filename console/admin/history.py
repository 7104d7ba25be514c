"""The "History of changes" panel of the endpoint and job change pages: the object's
audit entries (``endpoints.audit``), newest first, and on an endpoint a line to ask why a
past slot did not run (the explain-at operation of the API, which the admin's session may
call)."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from endpoints.audit import AuditEntry

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
    explain = reverse("api:explain_slot", kwargs={"endpoint_id": obj.pk})
    return format_html(
        "{}<form method='get' action='{}' target='_blank' style='margin-top:.5em'>"
        "Why did a slot not run? At <input type='datetime-local' name='at' step='1'> UTC "
        "<button type='submit'>Explain</button></form>",
        table,
        explain,
    )


def _details(entry: AuditEntry) -> str:
    words = entry.change_words
    return f"{words} — {entry.reason}" if entry.reason and words else words or entry.reason
