"""``{% cronicorn_dashboard %}``: the scheduler dashboard on the admin index, and the
``duration_words`` filter (``5.6 min``, ``340 ms``)."""

from __future__ import annotations

from typing import Any

from django import template
from django.utils import timezone

from console.admin.filters import user_tenant_ids
from console.dashboard import build_dashboard
from endpoints.wording import duration_words

register = template.Library()


@register.inclusion_tag("admin/cronicorn/dashboard.html", takes_context=True)
def cronicorn_dashboard(context: template.Context) -> dict[str, Any]:
    request = context["request"]
    now = timezone.now()
    return {"now": now, **build_dashboard(tenant_ids=user_tenant_ids(request), now=now)}


register.filter("duration_words", duration_words)
