"""Who changed what: the audit trail, and the scheduler's recorded gaps.

Every change to an endpoint, a job or a tenant, through any interface (the admin, the
API, MCP, the import, the commands, the planner, the breaker), is one ``AuditEntry``:
its actor (an ``Actor``, passed down from the interface), the object (type, id and a
readable name, kept as text so the entry outlives the object), what changed (each field
before and after, secrets masked by ``endpoints.secrets``) and when. ``record`` is the
only writer; ``endpoints.operations``, ``endpoints.breaker`` and the import call it.

``SchedulerGap`` rows are the times no tick ran (the tick's heartbeat is only its last
pass): ``explain --at`` reads them to say a slot was missed because nothing was running.

Both are kept as long as runs (``CRONICORN_RUN_RETENTION_DAYS``, ``prune_audit``).
"""

from __future__ import annotations

import getpass
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, ClassVar

from django.conf import settings
from django.db import models
from django.db.models import Q

from endpoints.secrets import MASK, is_secret_header, redact_url

MAX_VALUE_CHARS = 300  # a body or a policy is shown cut, never whole
# The fields whose values are secrets (headers and URLs are masked part by part).
SECRET_FIELDS = frozenset({"hmac_secret", "hmac_secret_previous", "target"})
# A tick this much later than the one before means nothing was ticking in between.
GAP_SECONDS = 60


class ActorKind(models.TextChoices):
    PERSON = "person"  # a signed-in user: the admin, or the API and MCP with a session
    API_KEY = "api-key"  # the API or MCP with a key, named by its prefix
    COMMAND = "command"  # a management command, named by the OS user running it
    PLANNER = "planner"  # an analysis session
    BREAKER = "breaker"
    SYSTEM = "system"  # the scheduler itself, or code that named no one


@dataclass(frozen=True)
class Actor:
    """Who makes a change, as every interface passes it down to the operations."""

    kind: str
    name: str
    user_id: int | None = None
    session_id: int | None = None

    SYSTEM: ClassVar[Actor]
    BREAKER: ClassVar[Actor]

    def __str__(self) -> str:
        return self.name

    @classmethod
    def person(cls, user: Any) -> Actor:
        """A signed-in user; an anonymous or absent one is the system."""
        if getattr(user, "pk", None) is None:
            return cls.SYSTEM
        return cls(ActorKind.PERSON, user.get_username(), user_id=user.pk)

    @classmethod
    def api_key(cls, prefix: str) -> Actor:
        return cls(ActorKind.API_KEY, f"key cc_{prefix}")

    @classmethod
    def command(cls) -> Actor:
        """The OS user running this management command."""
        try:
            user = getpass.getuser()
        except (KeyError, OSError):  # no name for the uid (a bare container)
            user = "unknown"
        return cls(ActorKind.COMMAND, f"cli:{user}")

    @classmethod
    def planner(cls, session: Any) -> Actor:
        return cls(ActorKind.PLANNER, f"planner session {session.pk}", session_id=session.pk)

    @property
    def is_planner(self) -> bool:
        return self.kind == ActorKind.PLANNER


Actor.SYSTEM = Actor(ActorKind.SYSTEM, "system")
Actor.BREAKER = Actor(ActorKind.BREAKER, "breaker")


class AuditEntry(models.Model):
    """One change to one object. The tenant and the object are plain ids (no keys): an
    entry stays after the object is deleted, which is when "who deleted it" is asked."""

    at = models.DateTimeField()
    tenant_id = models.BigIntegerField(null=True, blank=True)
    actor_kind = models.CharField(max_length=16, choices=ActorKind.choices)
    actor = models.CharField(max_length=200)
    object_type = models.CharField(max_length=16)  # endpoint | job | tenant
    object_id = models.BigIntegerField()
    object_name = models.CharField(max_length=500)
    action = models.CharField(max_length=32)
    # [{"field": …, "before": …, "after": …}], every value text, secrets masked.
    changes = models.JSONField(default=list, blank=True)
    reason = models.TextField(blank=True)

    class Meta:
        app_label = "endpoints"
        ordering = ["-at", "-pk"]
        verbose_name_plural = "audit entries"
        constraints = [
            models.CheckConstraint(
                condition=Q(actor_kind__in=ActorKind.values),
                name="endpoints_auditentry_actor_kind_valid",
            )
        ]
        indexes = [
            # The object's history: its admin page, ?object=, manage.py audit --object.
            models.Index(fields=["object_type", "object_id", "-at"], name="endpoints_audit_object"),
            # A tenant's trail, newest first (the API's list), and the retention's cutoff.
            models.Index(fields=["tenant_id", "-at"], name="endpoints_audit_tenant"),
            models.Index(fields=["at"], name="endpoints_audit_at"),
        ]

    def __str__(self) -> str:
        return f"{self.action} {self.object_type} {self.object_name} by {self.actor}"

    @property
    def change_words(self) -> str:
        """Each change as ``field: before -> after``, joined by "; "."""
        return "; ".join(f"{c['field']}: {c['before']} -> {c['after']}" for c in self.changes)


class SchedulerGap(models.Model):
    """A time no tick ran (``GAP_SECONDS`` or more between two ticks): the scheduler was
    stopped, or could not reach the database. The current gap, if any, is the tick
    heartbeat's age; these rows keep the past ones."""

    started_at = models.DateTimeField(help_text="The last tick before the gap.")
    ended_at = models.DateTimeField(help_text="The first tick after it.")

    class Meta:
        app_label = "endpoints"
        ordering = ["-started_at"]
        indexes = [models.Index(fields=["ended_at"], name="endpoints_gap_ended")]

    def __str__(self) -> str:
        return f"no tick from {self.started_at:%Y-%m-%d %H:%M:%S} to {self.ended_at:%H:%M:%S}"


def record(
    actor: Actor,
    obj: Any,
    action: str,
    *,
    now: datetime,
    changes: Sequence[Mapping[str, str]] = (),
    reason: str = "",
) -> AuditEntry:
    """Record one change of ``obj`` (an endpoint, a job or a tenant) by ``actor``."""
    kind = obj._meta.model_name
    return AuditEntry.objects.create(
        at=now,
        tenant_id=_tenant_id(obj),
        actor_kind=actor.kind,
        actor=actor.name[:200],
        object_type=kind,
        object_id=obj.pk,
        object_name=_name_of(obj)[:500],
        action=action,
        changes=[dict(change) for change in changes],
        reason=reason,
    )


def record_fields(
    actor: Actor, obj: Any, action: str, *, now: datetime, reason: str = "", **fields: Any
) -> AuditEntry:
    """Record a change an operation made: ``fields`` are (before, after) by name."""
    before = {name: pair[0] for name, pair in fields.items()}
    after = {name: pair[1] for name, pair in fields.items()}
    return record(actor, obj, action, now=now, changes=field_changes(before, after), reason=reason)


def stored_values(obj: models.Model, changed: Sequence[str] | None) -> dict[str, Any]:
    """The stored values of the fields about to change (none for a new object), read
    before the save for ``record_save``."""
    if not changed:
        return {}
    names = {name: obj._meta.get_field(name).attname for name in changed}  # type: ignore[union-attr]
    row = type(obj)._default_manager.filter(pk=obj.pk).values(*names.values()).first() or {}
    return {name: row.get(attname) for name, attname in names.items()}


def record_save(
    obj: models.Model,
    before: dict[str, Any],
    changed: Sequence[str] | None,
    *,
    actor: Actor,
    now: datetime,
) -> None:
    """The audit entry of a save (``changed`` None: a new object): each changed field
    before and after; for a new object each field set to other than its default. A save
    that changed nothing is no entry."""
    if changed is None:
        fields = [f for f in obj._meta.concrete_fields if f.editable and not f.primary_key]
        names = [f.name for f in fields if getattr(obj, f.attname) != f.get_default()]
    else:
        names = list(changed)
    after = {name: getattr(obj, obj._meta.get_field(name).attname) for name in names}  # type: ignore[union-attr]
    secret = [*(getattr(obj, "secret_header_names", None) or ())]
    secret += before.get("secret_header_names") or []
    changes = field_changes(before, after, secret_names=secret)
    if changed is None or changes:
        action = "created" if changed is None else "updated"
        record(actor, obj, action, now=now, changes=changes)


def _tenant_id(obj: Any) -> int | None:
    kind = obj._meta.model_name
    if kind == "tenant":
        return int(obj.pk)
    if hasattr(obj, "tenant_id"):  # a job, an alert channel
        return obj.tenant_id  # type: ignore[no-any-return]
    return int(obj.job.tenant_id)  # an endpoint


def _name_of(obj: Any) -> str:
    return str(getattr(obj, "ref", None) or getattr(obj, "name", None) or obj.pk)


def field_changes(
    before: Mapping[str, Any], after: Mapping[str, Any], *, secret_names: Iterable[str] = ()
) -> list[dict[str, str]]:
    """What changed from ``before`` to ``after`` (field values by name; a field missing
    from ``before`` was not set), secrets masked: a secret header's value, a URL's
    password, the signing secrets. A header is its own change (``headers.X``)."""
    declared = tuple(secret_names)
    changes: list[dict[str, str]] = []
    for name, new in after.items():
        old = before.get(name)
        if old == new:
            continue
        if name == "headers" and isinstance(new, dict):
            changes += _header_changes(old if isinstance(old, dict) else {}, new, declared)
        else:
            changes.append(_change(name, _shown(name, old), _shown(name, new)))
    return changes


def _header_changes(
    old: Mapping[str, Any], new: Mapping[str, Any], declared: tuple[str, ...]
) -> list[dict[str, str]]:
    changes = []
    for header in sorted({*old, *new}):
        if old.get(header) == new.get(header):
            continue
        hidden = is_secret_header(header, declared)
        shown = [
            "(absent)" if value is None else MASK if hidden else render(value)
            for value in (old.get(header), new.get(header))
        ]
        changes.append(_change(f"headers.{header}", *shown))
    return changes


def _change(name: str, before: str, after: str) -> dict[str, str]:
    return {"field": name, "before": before, "after": after}


def _shown(name: str, value: Any) -> str:
    if value in (None, ""):
        return render(value)
    if name in SECRET_FIELDS:
        return MASK
    if name == "url" and isinstance(value, str):
        return redact_url(value)
    return render(value)


def render(value: Any) -> str:
    """A value as an entry shows it: text as it is, anything else as JSON, cut short."""
    if value is None or value == "":
        return "(none)"
    if isinstance(value, datetime):
        text = value.isoformat(timespec="seconds")
    elif isinstance(value, str):
        text = value
    elif isinstance(value, models.Model):
        text = _name_of(value)
    else:
        text = json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)
    return text if len(text) <= MAX_VALUE_CHARS else text[: MAX_VALUE_CHARS - 1] + "…"


OBJECT_TYPES = ("endpoint", "job", "tenant")


def parse_object(text: str) -> tuple[str, int]:
    """``endpoint:12`` as ("endpoint", 12); ValueError in words otherwise."""
    kind, _, pk = text.strip().partition(":")
    if kind not in OBJECT_TYPES or not pk.isdecimal() or not 1 <= int(pk) < 2**63:
        raise ValueError(
            f"{text!r} names no object; write its type and id, e.g. endpoint:12, job:3 or tenant:1."
        )
    return kind, int(pk)


def note_tick(previous: datetime | None, *, now: datetime) -> None:
    """Called by the tick with its heartbeat's time before this pass: a long silence
    before it is kept as a ``SchedulerGap``."""
    if previous is not None and now - previous >= timedelta(seconds=GAP_SECONDS):
        SchedulerGap.objects.create(started_at=previous, ended_at=now)


def prune_audit(*, now: datetime) -> int:
    """Delete audit entries and scheduler gaps older than the run retention; how many
    entries went."""
    cutoff = now - timedelta(days=settings.CRONICORN_RUN_RETENTION_DAYS)
    SchedulerGap.objects.filter(ended_at__lt=cutoff).delete()
    return AuditEntry.objects.filter(at__lt=cutoff).delete()[0]
