"""The four statements every run makes, in plain SQL: read the claimed endpoints, insert
their Runs, finish them, reschedule the endpoints (and their slots), each for many runs
at once.

Why not the ORM here: measured on this machine, these four through the ORM cost about
3 ms of CPU per run (query compilation and model building), which caps a worker process
near 300 runs/s; as plain SQL they cost a tenth of that (DESIGN.md "Cost facts"). Values
are adapted to and from the database by the model fields themselves, so the same SQL
serves PostgreSQL and SQLite. Everything else stays on the ORM.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, fields
from datetime import UTC, datetime
from functools import cache, partial
from typing import Any, NamedTuple

import psycopg
from django.db import connection, transaction
from django.db.models import DateTimeField, Field, JSONField, Model, UUIDField
from django.utils.dateparse import parse_datetime

from endpoints.governor import HINT_FIELDS, REPLAN_FIELDS
from endpoints.models import SLOT_FIELDS, Endpoint, Flip, Run, RunStatus, Slot
from endpoints.policies import DEFAULT as DEFAULT_POLICY
from endpoints.policies import RunPolicy, policy_of_version, resolved_policy

# Fields a person may change while a run is in flight; the reschedule only wins if they
# are still as read (see ``endpoints.engine.outcomes.reschedule``), and so must the run
# policy (its windows, active period and one-off plan the next run as the schedule
# does), compared by its version (``POLICY_VERSION``), not its content.
PLANNING_FIELDS = (
    *(name for name in REPLAN_FIELDS if name != "run_policy"),
    *HINT_FIELDS,
    "paused_until",
    "failure_count",
    "archived_at",
)


@dataclass
class ClaimedEndpoint:
    """What a run needs of its endpoint, read in one query. Attribute names match the
    Endpoint fields, so the governor's ``EndpointSchedule.from_endpoint`` takes it."""

    pk: int
    url: str
    method: str
    headers: dict[str, str]
    secret_header_names: list[str]
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
    hmac_secret_previous: str  # during a rotation's grace period, else ""
    tenant_min_interval_ms: int
    tenant_id: int
    # The tenant's host rate limits as the database's JSON text: "{}" (none) is never
    # decoded (engine.host_limits).
    host_rate_limits_json: str
    retry_attempt: int
    retry_of_run: int | None
    # The version of the endpoint's and its job's run policy together, as the database
    # keeps it (``Endpoint.run_policy_digest``); the policies' text is read only for a
    # version this process has not resolved yet (``load_endpoints``).
    policy_version: str
    # The two policies as one typed value, resolved once per version.
    policy: RunPolicy = DEFAULT_POLICY

    def is_paused(self, now: datetime) -> bool:
        return self.paused_until is not None and self.paused_until > now


_JOINED = {
    "pk": "e.id",
    "job_status": "j.status",
    "hmac_secret": "t.hmac_secret",
    # Only while the grace period lasts, whether or not maintenance has cleared it yet.
    "hmac_secret_previous": (
        "CASE WHEN t.hmac_previous_until > CURRENT_TIMESTAMP"
        " THEN t.hmac_secret_previous ELSE '' END"
    ),
    "tenant_min_interval_ms": "t.min_interval_ms",
    "tenant_id": "t.id",
    "host_rate_limits_json": "CAST(t.host_rate_limits AS text)",
}
# The version of an endpoint's run policy and its job's where the endpoint is read and
# where its reschedule checks it is unchanged: the two digests the database keeps
# (``endpoints.models.policy_digest``), so a run passes 64 characters and the database
# reads two short columns, instead of the policies themselves (for the largest policy
# most of the engine's CPU per run, bench/throughput.py --policy largest) or a digest
# computed over them on every read (most of a batch's read, bench/README.md issue 32).
POLICY_VERSION = (
    "({e}.run_policy_digest || "
    "(SELECT j.run_policy_digest FROM endpoints_job AS j WHERE j.id = {e}.job_id))"
)
_JOINED["policy_version"] = "e.run_policy_digest || j.run_policy_digest"
# Both policies empty (``{}``), the common case: the defaults, never read nor parsed.
_EMPTY_VERSION = 2 * hashlib.md5(b"{}", usedforsecurity=False).hexdigest()
_COLUMNS = [f.name for f in fields(ClaimedEndpoint) if f.name != "policy"]
# Built from our own column names; values are always parameters.
_SELECT = (
    "SELECT "  # noqa: S608
    + ", ".join(
        _JOINED.get(name, f"s.{name}" if name in SLOT_FIELDS else f"e.{name}") for name in _COLUMNS
    )
    + " FROM endpoints_endpoint AS e"
    " JOIN endpoints_slot AS s ON s.endpoint_id = e.id"
    " JOIN endpoints_job AS j ON j.id = e.job_id"
    " JOIN endpoints_tenant AS t ON t.id = j.tenant_id"
    " WHERE e.id IN "
)


def load_endpoint(endpoint_id: int) -> ClaimedEndpoint | None:
    """The endpoint, or None if it is gone."""
    return load_endpoints([endpoint_id]).get(endpoint_id)


def load_endpoints(endpoint_ids: Sequence[int]) -> dict[int, ClaimedEndpoint]:
    """The endpoints that still exist, by id, in one query, with their run policies: a
    second query reads the policies' text only of versions this process has not
    resolved yet, and its own versions with them (a policy edited between the two
    queries is then run, and checked at the reschedule, as that version)."""
    rows = fetch(_SELECT + _placeholders(len(endpoint_ids)), list(endpoint_ids))
    loaded = {
        endpoint.pk: endpoint
        for endpoint in (
            ClaimedEndpoint(
                **{
                    name: _from_db(Slot if name in SLOT_FIELDS else Endpoint, name, value)
                    for name, value in zip(_COLUMNS, row, strict=True)
                }
            )
            for row in rows
        )
    }
    unknown = []
    for endpoint in loaded.values():
        if endpoint.policy_version == _EMPTY_VERSION:
            continue
        policy = resolved_policy(endpoint.policy_version)
        if policy is None:
            unknown.append(endpoint.pk)
        else:
            endpoint.policy = policy
    if unknown:
        for pk, version, job_policy, own_policy in fetch(
            _POLICIES + _placeholders(len(unknown)), unknown
        ):
            loaded[pk].policy_version = version
            loaded[pk].policy = policy_of_version(
                version, partial(_decoded, job_policy, own_policy)
            )
    return loaded


def _decoded(*texts: str) -> tuple[Any, ...]:
    return tuple(json.loads(text) for text in texts)


_POLICIES = (
    "SELECT e.id, e.run_policy_digest || j.run_policy_digest,"
    " CAST(j.run_policy AS text), CAST(e.run_policy AS text)"
    " FROM endpoints_endpoint AS e JOIN endpoints_job AS j ON j.id = e.job_id WHERE e.id IN "
)


def insert_run(values: Mapping[str, Any]) -> int:
    """Insert a Run and return its id. ``values`` must cover every NOT NULL column that
    has no default in the database (Django keeps defaults in Python)."""
    names = list(values)
    sql = (
        f"INSERT INTO endpoints_run ({', '.join(names)}) "  # noqa: S608 - names are our own
        f"VALUES {_placeholders(len(names))} RETURNING id"
    )
    return int(fetch(sql, [_to_db(Run, name, value) for name, value in values.items()])[0][0])


def insert_runs_of_slots(runs: Sequence[Mapping[str, Any]]) -> list[int | None]:
    """Insert the Runs of several endpoints' slots in one statement; for each, its id, or
    None if its slot already has a Run (``endpoints_run_one_per_slot``: a reclaimed slot,
    left to the caller). At most one Run per endpoint; all with the same keys.

    On PostgreSQL the values travel as one array per column (``unnest``), so the
    statement's text is the same whatever the number of runs: psycopg converts and
    PostgreSQL plans it once, where a many-row VALUES list was parsed anew every time
    (9 % of a worker's CPU by py-spy)."""
    names = list(runs[0])
    columns = [[_to_db(Run, name, run[name]) for run in runs] for name in names]
    if connection.vendor == "postgresql":
        arrays = ", ".join(f"%s::{_array_type(name)}" for name in names)
        values, params = f"SELECT * FROM unnest({arrays})", columns  # noqa: S608 - our types
    else:
        values = "VALUES " + ", ".join([_placeholders(len(names))] * len(runs))
        params = [value for row in zip(*columns, strict=True) for value in row]
    sql = (
        f"INSERT INTO endpoints_run ({', '.join(names)}) {values}"
        " ON CONFLICT DO NOTHING RETURNING id, endpoint_id"
    )
    inserted = {endpoint_id: run_id for run_id, endpoint_id in fetch(sql, params)}
    return [inserted.get(run["endpoint_id"]) for run in runs]


def insert_runs(runs: Sequence[Mapping[str, Any]]) -> list[int | None]:
    """Insert several Runs (any endpoints, any slots) in one statement; for each, its id,
    or None when a unique constraint already holds its place (another's run of that slot
    and attempt). All with the same keys; (endpoint, slot, attempt) distinct among them."""
    names = list(runs[0])
    params = [_to_db(Run, name, run[name]) for run in runs for name in names]
    sql = (
        f"INSERT INTO endpoints_run ({', '.join(names)}) "  # noqa: S608 - names are our own
        f"VALUES {', '.join([_placeholders(len(names))] * len(runs))}"
        " ON CONFLICT DO NOTHING RETURNING id, endpoint_id, scheduled_for, attempt"
    )
    inserted = {
        (endpoint_id, _from_db(Run, "scheduled_for", at), attempt): run_id
        for run_id, endpoint_id, at, attempt in fetch(sql, params, prepare=False)
    }
    return [inserted.get((r["endpoint_id"], r["scheduled_for"], r["attempt"])) for r in runs]


@cache
def _array_type(name: str, model: type[Model] = Run) -> str:
    field = model._meta.get_field(name.removesuffix("_id") if name.endswith("_id") else name)
    assert isinstance(field, Field)
    return f"{field.db_type(connection)}[]"  # a foreign key's is its target's


def _placeholders(count: int) -> str:
    return "(" + ", ".join(["%s"] * count) + ")"


def finish_runs(finishes: Sequence[tuple[int, Mapping[str, Any]]]) -> list[bool]:
    """Write each run's outcome unless it is no longer running (the sweep declared it
    lost); True for each one written. All outcomes must have the same keys."""
    if not finishes:
        return []
    names = list(finishes[0][1])
    if connection.vendor == "postgresql" and len(finishes) > 1:
        return _finish_runs_at_once(names, finishes)
    assignments = ", ".join(f"{name} = %s" for name in names)
    sql = f"UPDATE endpoints_run SET {assignments} WHERE id = %s AND status = %s RETURNING id"  # noqa: S608
    rows = [
        [*(_to_db(Run, name, values[name]) for name in names), run_id, RunStatus.RUNNING.value]
        for run_id, values in finishes
    ]
    return _each(sql, rows)


def _finish_runs_at_once(
    names: Sequence[str], finishes: Sequence[tuple[int, Mapping[str, Any]]]
) -> list[bool]:
    """PostgreSQL: the outcomes of several runs in one statement, one array per column
    (``unnest``), so its text, and its prepared plan, are the same for any number of runs.
    Per run this is one statement instead of two (bench/run_statements.py)."""
    ids = [run_id for run_id, _values in finishes]
    columns = [[_to_db(Run, name, values[name]) for _id, values in finishes] for name in names]
    arrays = ", ".join(f"%s::{_array_type(name)}" for name in ("id", *names))
    sql = (
        f"UPDATE endpoints_run AS r SET {', '.join(f'{name} = v.{name}' for name in names)}"  # noqa: S608
        f" FROM unnest({arrays}) AS v(id, {', '.join(names)})"
        " WHERE r.id = v.id AND r.status = %s RETURNING r.id"
    )
    done = {row[0] for row in fetch(sql, [ids, *columns, RunStatus.RUNNING.value])}
    return [run_id in done for run_id in ids]


def reschedule_all(
    reschedules: Sequence[tuple[ClaimedEndpoint, uuid.UUID, Mapping[str, Any]]],
) -> list[bool]:
    """For each endpoint, write ``values`` (to the endpoint and its slot) and release the
    lease, only if the claim is still ours and the planning fields are as ``endpoint``
    read them; True for each one that won. All ``values`` must have the same keys.

    The endpoint's row is written only when one of its own values changes (failures,
    hints, a retry): a healthy run writes its slot alone, the endpoint's row locked but
    not copied (a new version of the wide row was 60 % of the statement's server time,
    bench/run_statements.py)."""
    if not reschedules:
        return []
    names = list(reschedules[0][2])
    own = [name for name in names if name not in SLOT_FIELDS]
    slot = [name for name in names if name in SLOT_FIELDS]
    rows = [
        _Reschedule(
            endpoint.pk,
            _to_db(Slot, "claim_token", claim_token),
            [_to_db(Endpoint, name, values[name]) for name in own]
            if any(values[name] != getattr(endpoint, name) for name in own)
            else None,
            [
                *(_to_db(Endpoint, name, getattr(endpoint, name)) for name in PLANNING_FIELDS),
                endpoint.policy_version,
            ],
            [_to_db(Slot, name, values[name]) for name in slot],
            _flip_of(endpoint, values),
        )
        for endpoint, claim_token, values in reschedules
    ]
    if connection.vendor == "postgresql":
        return _reschedule_pg(rows, own, slot)
    endpoint_sql = _SQLITE_RESCHEDULE_ENDPOINT.format(own=_assign(own), unchanged=_unchanged("IS"))
    lock_sql = _SQLITE_ENDPOINT_UNCHANGED.format(unchanged=_unchanged("IS"))
    slot_sql = _SQLITE_RESCHEDULE_SLOT.format(slot=_assign(slot))
    won = []
    with transaction.atomic():
        for row in rows:
            if row.own is None:
                mine = bool(fetch(lock_sql, [row.pk, *row.same, row.pk, row.token]))
            else:
                mine = bool(fetch(endpoint_sql, [*row.own, row.pk, *row.same, row.pk, row.token]))
            won.append(mine and bool(fetch(slot_sql, [*row.slot, row.pk, row.token])))
            if won[-1] and row.flip[0]:
                fetch(_SQLITE_FLIP, [row.pk, *row.flip])
    return won


class _Reschedule(NamedTuple):
    pk: int
    token: Any
    own: list[Any] | None  # the endpoint's new values; None when none of them changes
    same: list[Any]  # the planning fields as read, then the policies' version
    slot: list[Any]
    flip: tuple[int, Any]


def _reschedule_pg(rows: list[_Reschedule], own: list[str], slot: list[str]) -> list[bool]:
    """The two kinds of reschedule (with and without the endpoint's row): the healthy
    runs' of a batch in one statement, the others pipelined in one round trip; the
    results in the order of ``rows``."""
    unchanged = _unchanged("IS NOT DISTINCT FROM")
    writes = [k for k, row in enumerate(rows) if row.own is not None]
    locks = [k for k, row in enumerate(rows) if row.own is None]
    won = [False] * len(rows)
    if writes:
        sql = _PG_RESCHEDULE.format(own=_assign(own), unchanged=unchanged, slot=_assign(slot))
        params = [
            [row.pk, row.token, *(row.own or ()), *row.same, *row.flip, row.flip[0], *row.slot]
            for row in (rows[k] for k in writes)
        ]
        for k, result in zip(writes, _each(sql, params), strict=True):
            won[k] = result
    if len(locks) > 1 and len({rows[k].pk for k in locks}) == len(locks):
        at_once = _reschedule_slots_at_once([rows[k] for k in locks], slot)
        for k, result in zip(locks, at_once, strict=True):
            won[k] = result
    elif locks:
        sql = _PG_RESCHEDULE_SLOT.format(
            unchanged=_unchanged("IS NOT DISTINCT FROM", "e"), slot=_assign(slot)
        )
        params = [
            [row.pk, row.token, *row.same, *row.slot, row.token] for row in (rows[k] for k in locks)
        ]
        for k, result in zip(locks, _each(sql, params), strict=True):
            won[k] = result
    return won


def _flip_of(endpoint: ClaimedEndpoint, values: Mapping[str, Any]) -> tuple[int, Any]:
    """(streak length, when) for a run that ends a failure streak, else (0, None): the
    alerts' outbox row (``endpoints.Flip``), written with the reschedule that wins."""
    if values.get("failure_count") == 0 and endpoint.failure_count:
        return endpoint.failure_count, _to_db(Flip, "at", values["last_run_at"])
    return 0, None


# The endpoint and slot rows are locked first, in that order (every writer of both takes
# the endpoint's first, so none of them deadlocks with another), and only if the claim is
# still ours, so the lease cannot change hands between the two updates: both are written
# or neither. A person's edit that committed meanwhile fails the planning-fields test.
# A run that ends a failure streak also writes the alerts' outbox row (``flip``), from
# ``won``: only with a reschedule that wins, in its statement; for other runs the INSERT
# selects nothing (measured: no difference in the statement's time, see bench/README.md).
_PG_RESCHEDULE = """
WITH mine AS (
    SELECT s.endpoint_id FROM endpoints_endpoint AS e
    JOIN endpoints_slot AS s ON s.endpoint_id = e.id
    WHERE e.id = %s AND s.claim_token = %s
    FOR NO KEY UPDATE
), won AS (
    UPDATE endpoints_endpoint SET {own}
    WHERE id IN (SELECT endpoint_id FROM mine) AND {unchanged} RETURNING id
), flip AS (
    INSERT INTO endpoints_flip (endpoint_id, failures, at)
    SELECT id, %s::integer, %s::timestamptz FROM won WHERE %s::integer > 0
)
UPDATE endpoints_slot SET {slot}, locked_until = NULL, claim_token = NULL
WHERE endpoint_id IN (SELECT id FROM won) RETURNING endpoint_id
"""
# The same when none of the endpoint's own values changes: its row is locked (so an edit
# waits, and plans after this) and its planning fields checked, not written; the slot is
# written only if the claim is still ours, checked again by the UPDATE itself, so it
# needs no lock of its own (nothing else is written that the two would keep together).
_PG_RESCHEDULE_SLOT = """
WITH mine AS (
    SELECT e.id FROM endpoints_endpoint AS e
    JOIN endpoints_slot AS s ON s.endpoint_id = e.id
    WHERE e.id = %s AND s.claim_token = %s AND {unchanged}
    FOR NO KEY UPDATE OF e
)
UPDATE endpoints_slot SET {slot}, locked_until = NULL, claim_token = NULL
WHERE endpoint_id IN (SELECT id FROM mine) AND claim_token = %s RETURNING endpoint_id
"""
# Several of those at once, one array per column (``unnest``): one statement for a batch,
# its text the same for any size, so it is prepared once. The endpoints are locked in id
# order, so two writers' batches never wait on each other in a cycle.
_PG_RESCHEDULE_SLOTS = """
WITH v AS (SELECT * FROM unnest({arrays}) AS v({names})),
mine AS (
    SELECT e.id, v.claim_token FROM endpoints_endpoint AS e
    JOIN v ON v.endpoint_id = e.id
    JOIN endpoints_slot AS s ON s.endpoint_id = e.id AND s.claim_token = v.claim_token
    WHERE {unchanged}
    ORDER BY e.id
    FOR NO KEY UPDATE OF e
)
UPDATE endpoints_slot AS s SET {slot}, locked_until = NULL, claim_token = NULL
FROM mine JOIN v ON v.endpoint_id = mine.id
WHERE s.endpoint_id = mine.id AND s.claim_token = mine.claim_token RETURNING s.endpoint_id
"""
# SQLite has one writer at a time: the two statements run in one transaction.
_SQLITE_RESCHEDULE_ENDPOINT = """
UPDATE endpoints_endpoint SET {own}
WHERE id = %s AND {unchanged} AND EXISTS (
    SELECT 1 FROM endpoints_slot WHERE endpoint_id = %s AND claim_token = %s
) RETURNING id
"""
_SQLITE_ENDPOINT_UNCHANGED = """
SELECT id FROM endpoints_endpoint
WHERE id = %s AND {unchanged} AND EXISTS (
    SELECT 1 FROM endpoints_slot WHERE endpoint_id = %s AND claim_token = %s
)
"""
_SQLITE_FLIP = "INSERT INTO endpoints_flip (endpoint_id, failures, at) VALUES (%s, %s, %s)"
_SQLITE_RESCHEDULE_SLOT = """
UPDATE endpoints_slot SET {slot}, locked_until = NULL, claim_token = NULL
WHERE endpoint_id = %s AND claim_token = %s RETURNING endpoint_id
"""


def _reschedule_slots_at_once(rows: list[_Reschedule], slot: list[str]) -> list[bool]:
    """PostgreSQL: the healthy reschedules of a batch (``_PG_RESCHEDULE_SLOT`` for each,
    the endpoints' ids all different) in one statement. Per run, the pipelined statements
    were the one statement left of a run (bench/run_statements.py, issue 23)."""
    names = ["endpoint_id", "claim_token", *PLANNING_FIELDS, "policy_version", *slot]
    types = [
        _array_type("endpoint_id", Slot),
        _array_type("claim_token", Slot),
        *(_array_type(name, Endpoint) for name in PLANNING_FIELDS),
        "text[]",
        *(_array_type(name, Slot) for name in slot),
    ]
    columns = [
        [row.pk for row in rows],
        [row.token for row in rows],
        *([row.same[k] for row in rows] for k in range(len(PLANNING_FIELDS) + 1)),
        *([row.slot[k] for row in rows] for k in range(len(slot))),
    ]
    sql = _PG_RESCHEDULE_SLOTS.format(
        arrays=", ".join(f"%s::{array}" for array in types),
        names=", ".join(names),
        unchanged=" AND ".join(
            [
                *(f"e.{name} IS NOT DISTINCT FROM v.{name}" for name in PLANNING_FIELDS),
                f"{POLICY_VERSION.format(e='e')} IS NOT DISTINCT FROM v.policy_version",
            ]
        ),
        slot=", ".join(f"{name} = v.{name}" for name in slot),
    )
    won = {endpoint_id for (endpoint_id,) in fetch(sql, columns)}
    return [row.pk in won for row in rows]


def _assign(names: Sequence[str]) -> str:
    return ", ".join(f"{name} = %s" for name in names)


def _unchanged(same: str, e: str = "endpoints_endpoint") -> str:
    """The planning fields, then the version of the endpoint's and its job's run policy
    (a job edit committed during a run is checked as the endpoint's fields are), each as
    read (``_Reschedule.same``); ``e`` names the endpoint's table in the statement."""
    terms = [f"{e}.{name} {same} %s" for name in PLANNING_FIELDS]
    return " AND ".join([*terms, f"{POLICY_VERSION.format(e=e)} {same} %s"])


def fetch(
    sql: str, params: Sequence[Any] | Mapping[str, Any], *, prepare: bool = True
) -> list[Any]:
    """Run one statement and return its rows.

    On PostgreSQL the rows come in binary, so times, UUIDs and JSON are decoded by
    psycopg's C loaders rather than Django's Python timestamp loader (≈ 4 µs per value,
    which alone was ≈ 4 ms of a 1 000-row claim).
    """
    with _cursor() as cursor:
        if isinstance(cursor, psycopg.Cursor):
            cursor.execute(sql, params, prepare=prepare, binary=True)
        else:
            cursor.execute(sql, params)
        return list(cursor.fetchall()) if cursor.description else []


def _each(sql: str, rows: list[list[Any]]) -> list[bool]:
    """Run ``sql`` (an UPDATE ... RETURNING id) once per parameter row; True for each row
    it updated. On PostgreSQL several rows travel pipelined, in one round trip."""
    with _cursor() as cursor:
        if isinstance(cursor, psycopg.Cursor) and len(rows) > 1:
            cursor.executemany(sql, rows, returning=True)
            updated = []
            while True:
                updated.append(cursor.fetchone() is not None)
                if not cursor.nextset():
                    return updated
    return [bool(fetch(sql, row)) for row in rows]


@contextmanager
def _cursor() -> Iterator[Any]:
    """On PostgreSQL, a server-side binding cursor on Django's connection (so in its
    transaction, with its type loaders): the statements above are then prepared once per
    connection. Measured here, planning the read's three-table join cost twice as much
    server CPU as running it (0.25 → 0.08 ms per run; the insert 0.30 → 0.23 ms).
    Elsewhere, Django's own cursor."""
    if connection.vendor != "postgresql":
        with connection.cursor() as cursor:
            yield cursor
        return
    connection.ensure_connection()
    with connection.wrap_database_errors, psycopg.Cursor(connection.connection) as cursor:
        yield cursor


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
        if not isinstance(value, str):  # already decoded (PostgreSQL's binary rows)
            return value
        return field.from_db_value(value, None, connection)  # type: ignore[arg-type]
    if isinstance(field, UUIDField) and not isinstance(value, uuid.UUID):
        return uuid.UUID(str(value))
    return value
