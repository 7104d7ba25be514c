"""The audit trail: who changed what, newest first, for the caller's tenants."""

from __future__ import annotations

from datetime import datetime

from ninja import Field, Router, Schema

from api.auth import Principal
from api.errors import InvalidInput
from api.operations import operation
from api.pagination import DEFAULT_LIMIT, Page, keyset_page
from endpoints.audit import AuditEntry, parse_object

router = Router(tags=["audit"])


class ChangeOut(Schema):
    field: str
    before: str = Field(description="The value before, as text; a secret shows as ••••.")
    after: str = Field(description="The value after, as text; a secret shows as ••••.")


class AuditOut(Schema):
    id: int
    at: datetime
    actor_kind: str = Field(description="person, api-key, command, planner, breaker or system.")
    actor: str = Field(
        description="Who: a user name, 'key cc_<prefix>', 'cli:<OS user>', "
        "'planner session N' or 'breaker'."
    )
    object_type: str = Field(description="endpoint, job or tenant.")
    object_id: int
    object_name: str
    action: str = Field(description="created, updated, paused, resumed, hint-set, archived, …")
    changes: list[ChangeOut]
    reason: str


class AuditPage(Schema):
    items: list[AuditOut]
    next_cursor: str | None = Field(description="Pass as ?cursor= for the next page.")


@operation(router, "get", "/audit", name="list_audit", response=AuditPage)
def list_audit(
    principal: Principal,
    object: str | None = None,
    cursor: str | None = None,
    limit: int = DEFAULT_LIMIT,
) -> Page:
    """Who changed what and when (the audit trail), newest first; ``object`` is e.g.
    ``endpoint:12``, ``job:3`` or ``tenant:1``.

    Every change through the admin, the API, MCP, an import, a command, the planner or the
    breaker is one entry: its actor, the object, each field before and after (secrets
    masked) and when. Entries are kept as long as runs.
    """
    entries = principal.scope(AuditEntry.objects.all(), "tenant_id")
    if object:
        try:
            kind, pk = parse_object(object)
        except ValueError as exc:
            raise InvalidInput({"object": [str(exc)]}) from None
        entries = entries.filter(object_type=kind, object_id=pk)
    return keyset_page(entries, key="at", cursor=cursor, limit=limit, descending=True)
