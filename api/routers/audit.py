"""Who changed what (the audit trail, newest first, for the caller's tenants), and why a
past slot of an endpoint ran or did not."""

from __future__ import annotations

from datetime import datetime

from django.utils import timezone
from ninja import Field, Router, Schema

from api.auth import Principal
from api.errors import InvalidInput
from api.operations import operation
from api.pagination import DEFAULT_LIMIT, Page, keyset_page
from api.routers.endpoints import scoped_endpoint
from api.schemas import IsoTime
from endpoints.audit import AuditEntry, parse_object
from endpoints.past import PastSlot, explain_past

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


class SlotOut(Schema):
    at: datetime = Field(description="The instant asked about.")
    slot: datetime = Field(description="The slot that was due at that instant.")
    reason: str = Field(
        description="ran, rate-limit (ran, held back by its host's rate limit), skipped, "
        "not-created, archived, job, paused, breaker, window, scheduler-down, hint or unknown."
    )
    words: str = Field(description="What happened to the slot, in a sentence.")
    run_id: int | None = Field(description="The slot's run (get_run), if it ran or was skipped.")
    actor: str = Field(description="Who paused or archived it, if someone did.")
    until: datetime | None = Field(description="The end of the pause it fell in, if paused.")


@operation(router, "get", "/endpoints/{endpoint_id}/explain", name="explain_slot", response=SlotOut)
def explain_slot(principal: Principal, endpoint_id: int, at: IsoTime) -> PastSlot:
    """Why the endpoint's slot due at a past instant ``at`` ran or did not.

    From what was recorded, not planned again: its run (ran, or skipped by the catch-up
    window), the audit trail (archived, its job paused), the hint history (paused by whom
    until when, the breaker open, a hint), the scheduler's gaps (not running), the run
    policy's windows.
    """
    endpoint = scoped_endpoint(principal, endpoint_id)
    now = timezone.now()
    if at > now:
        raise InvalidInput(
            {"at": ["Give a past time; for the next runs ask get_endpoint or preview_runs."]}
        )
    return explain_past(endpoint, at, now=now)
