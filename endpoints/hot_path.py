"""The four statements every run makes, in plain SQL: read the claimed endpoint, insert
the Run, finish it, reschedule the endpoint.

Why not the ORM here: measured on this machine, these four through the ORM cost about
3 ms of CPU per run (query compilation and model building), which caps a worker process
near 300 runs/s; as plain SQL they cost a tenth of that (DESIGN.md "Cost facts"). Values
are adapted to and from the database by the model fields themselves, so the same SQL
serves PostgreSQL and SQLite. Everything else stays on the ORM.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, fields
from datetime import UTC, datetime
from functools import cache
from typing import Any

from django.db import connection
from django.db.models import DateTimeField, Field, JSONField, Model, UUIDField
from django.utils.dateparse import parse_datetime

from endpoints.models import Endpoint, Run, RunStatus

# Fields a person may change while a run is in flight; the reschedule only wins if they
# are still as read (see scheduling._reschedule).
PLANNING_FIELDS = (
    "baseline_cron",
    "timezone",
    "baseline_interval_ms",
    "min_interval_ms",
    "max_interval_ms",
    "ai_hint_interval_ms",
    "ai_hint_next_run_at",
    "ai_hint_expires_at",
    "paused_until",
    "failure_count",
)


@dataclass
class ClaimedEndpoint:
    """What a run needs of its endpoint, read in one query. Attribute names match the
    Endpoint fields, so the governor's ``EndpointSchedule.from_endpoint`` takes it."""

    pk: int
    url: str
    method: str
    headers: dict[str, str]
    body: Any
    timeout_ms: int
    max_response_size_kb: int
    claim_token: uuid.UUID | None
    locked_until: datetime | None
    archived_at: datetime | None
    paused_until: datetime | None
    baseline_cron: str
    timezone: str
    baseline_interval_ms: int | None
    min_interval_ms: int | None
    max_interval_ms: int | None
    ai_hint_interval_ms: int | None
    ai_hint_next_run_at: datetime | None
    ai_hint_expires_at: datetime | None
    ai_hint_reason: str
    failure_count: int
    job_status: str
    hmac_secret: str

    def is_paused(self, now: datetime) -> bool:
        return self.paused_until is not None and self.paused_until > now


_JOINED = {"pk": "e.id", "job_status": "j.status", "hmac_secret": "t.hmac_secret"}
_COLUMNS = [f.name for f in fields(ClaimedEndpoint)]
# Built from our own column names; values are always parameters.
_SELECT = (
    "SELECT "  # noqa: S608
    + ", ".join(_JOINED.get(name, f"e.{name}") for name in _COLUMNS)
    + " FROM endpoints_endpoint AS e"
    " JOIN endpoints_job AS j ON j.id = e.job_id"
    " JOIN endpoints_tenant AS t ON t.id = j.tenant_id"
    " WHERE e.id = %s"
)


def load_endpoint(
    endpoint_id: int, *, claim_token: uuid.UUID | None = None
) -> ClaimedEndpoint | None:
    """The endpoint, or None if it is gone (or, given a token, no longer claimed by it)."""
    sql, params = _SELECT, [endpoint_id]
    if claim_token is not None:
        sql += " AND e.claim_token = %s"
        params.append(_to_db(Endpoint, "claim_token", claim_token))
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        row = cursor.fetchone()
    if row is None:
        return None
    values = {
        name: _from_db(Endpoint, name, value) for name, value in zip(_COLUMNS, row, strict=True)
    }
    return ClaimedEndpoint(**values)


def insert_run(values: Mapping[str, Any]) -> int:
    """Insert a Run and return its id. ``values`` must cover every NOT NULL column that
    has no default in the database (Django keeps defaults in Python)."""
    names = list(values)
    sql = (
        f"INSERT INTO endpoints_run ({', '.join(names)}) "  # noqa: S608 - names are our own
        f"VALUES ({', '.join(['%s'] * len(names))}) RETURNING id"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [_to_db(Run, name, value) for name, value in values.items()])
        return int(cursor.fetchone()[0])


def finish_run(run_id: int, outcome: Mapping[str, Any]) -> bool:
    """Write the outcome unless the run is no longer running (the sweep declared it lost)."""
    assignments = ", ".join(f"{name} = %s" for name in outcome)
    params = [_to_db(Run, name, value) for name, value in outcome.items()]
    sql = f"UPDATE endpoints_run SET {assignments} WHERE id = %s AND status = %s"  # noqa: S608
    with connection.cursor() as cursor:
        cursor.execute(sql, [*params, run_id, RunStatus.RUNNING.value])
        return cursor.rowcount == 1


def reschedule(
    endpoint: ClaimedEndpoint, claim_token: uuid.UUID, values: Mapping[str, Any]
) -> bool:
    """Write ``values`` and release the lease, only if the claim is still ours and the
    planning fields are as ``endpoint`` read them. True if it won."""
    same = "IS NOT DISTINCT FROM" if connection.vendor == "postgresql" else "IS"
    assignments = ", ".join(f"{name} = %s" for name in values)
    unchanged = " AND ".join(f"{name} {same} %s" for name in PLANNING_FIELDS)
    sql = (
        f"UPDATE endpoints_endpoint SET {assignments}, locked_until = NULL, claim_token = NULL"  # noqa: S608
        f" WHERE id = %s AND claim_token = %s AND {unchanged}"
    )
    params = [_to_db(Endpoint, name, value) for name, value in values.items()]
    params += [endpoint.pk, _to_db(Endpoint, "claim_token", claim_token)]
    params += [_to_db(Endpoint, name, getattr(endpoint, name)) for name in PLANNING_FIELDS]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.rowcount == 1


def _to_db(model: type[Model], name: str, value: Any) -> Any:
    field = _adapting_field(model, name)
    return value if field is None or value is None else field.get_db_prep_save(value, connection)


@cache
def _adapting_field(model: type[Model], name: str) -> Field[Any, Any] | None:
    """The field whose adaptation a value needs (times, UUIDs, JSON); None for plain
    numbers and strings, which the driver takes as they are."""
    field = model._meta.get_field(name.removesuffix("_id") if name.endswith("_id") else name)
    return field if isinstance(field, DateTimeField | UUIDField | JSONField) else None


def _from_db(model: type[Model], name: str, value: Any) -> Any:
    if value is None or name in _JOINED:
        return value
    field = model._meta.get_field(name)
    if isinstance(field, DateTimeField):
        # SQLite keeps datetimes as naive UTC (text, or parsed by Django's converter).
        parsed = parse_datetime(value) if isinstance(value, str) else value
        return parsed.replace(tzinfo=UTC) if parsed and parsed.tzinfo is None else parsed
    if isinstance(field, JSONField):
        return field.from_db_value(value, None, connection)  # type: ignore[arg-type]
    if isinstance(field, UUIDField) and not isinstance(value, uuid.UUID):
        return uuid.UUID(str(value))
    return value
