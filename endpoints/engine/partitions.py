"""Run history partitioned by week on PostgreSQL (issue 23), so retention drops a whole
week's table instead of deleting its rows one by one (no row-by-row CPU, no vacuum, no
bloat).

``endpoints_run`` is partitioned by ``RANGE (scheduled_for)`` (migration 0017): the column
every exactly-once unique constraint already holds, so the constraints stay as they were.
One partition per ``WIDTH`` (a week, Monday 00:00 UTC to Monday), named after its first
day (``endpoints_run_p20261123``), created ahead by the hourly maintenance
(``maintenance.prune_runs``); a DEFAULT partition takes any row whose week has no
partition yet, so an insert never fails when maintenance fell behind. A week DEFAULT
already holds runs of keeps them there, and gets no partition (see :func:`create`).
SQLite keeps the plain table: every function here is only called when
:func:`partitioned` says so.

Why a week and not a day (bench/README.md "Issue 23: partitioned history"): a query
that is not bounded by ``scheduled_for``, as every "latest runs of an endpoint" is, is
planned and run against every partition; over a month, days (≈ 40 partitions) cost it
≈ 6 ms of planning and 1 to 2 ms of execution, weeks (≈ 7) ≈ 1 ms and 0.3 ms. The price:
runs stay up to a week past the retention (a drop takes whole weeks).

Each change of the partition set is one short transaction that waits at most
``LOCK_TIMEOUT`` for its lock: attaching and detaching lock the parent (detaching
exclusively), and a lock request queued behind a long query would stall every insert
queued behind it. Failing that, the next hour tries again.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import UTC, date, datetime, time, timedelta

from django.db import OperationalError, connection, transaction
from django.db.backends.utils import CursorWrapper

from endpoints.engine.logs import log_event

TABLE = "endpoints_run"
DEFAULT = "endpoints_run_default"
WIDTH = timedelta(days=7)
AHEAD = 2  # partitions made beyond the current one: always at least a week ahead
LOCK_TIMEOUT = "5s"
_PREFIX = "endpoints_run_p"
_EPOCH = datetime(2001, 1, 1, tzinfo=UTC)  # a Monday: partitions start on Mondays


# ATTACH gives the partition an index per index of the table, named by PostgreSQL
# (``endpoints_run_p20310310_endpoint_id_scheduled_for_idx``); renamed after the table's
# (``endpoints_run_one_per_slot_p20310310``) so that an error still names the constraint.
_INDEXES_OF = """
SELECT c.relname, p.relname FROM pg_index AS x
JOIN pg_class AS c ON c.oid = x.indexrelid
JOIN pg_inherits AS i ON i.inhrelid = x.indexrelid JOIN pg_class AS p ON p.oid = i.inhparent
WHERE x.indrelid = to_regclass(%s) AND NOT x.indisprimary
"""


def partitioned() -> bool:
    """Whether the history is the partitioned table (PostgreSQL after migration 0017)."""
    if connection.vendor != "postgresql":
        return False
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT 1 FROM pg_partitioned_table WHERE partrelid = to_regclass(%s)", [TABLE]
        )
        return cursor.fetchone() is not None


def start_of(at: datetime) -> datetime:
    """The lower bound of the partition that holds ``at``."""
    return _EPOCH + ((at - _EPOCH) // WIDTH) * WIDTH


def name_of(start: datetime) -> str:
    return f"{_PREFIX}{start:%Y%m%d}"


def starts() -> list[datetime]:
    """The lower bounds of the partitions there are, oldest first (from our own names)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname FROM pg_inherits AS i JOIN pg_class AS c ON c.oid = i.inhrelid"
            " WHERE i.inhparent = to_regclass(%s) AND c.relname LIKE %s",
            [TABLE, f"{_PREFIX}%"],
        )
        names = [row[0] for row in cursor.fetchall()]
    return sorted(
        datetime.combine(date.fromisoformat(n.removeprefix(_PREFIX)), time(), tzinfo=UTC)
        for n in names
    )


def create_ahead(*, now: datetime) -> list[datetime]:
    """Create the current partition and the next ``AHEAD`` that are missing, except those
    whose week the DEFAULT partition already holds runs of (:func:`create`); returns the
    lower bounds of those created. Stops at the first that cannot take its lock."""
    have = set(starts())
    weeks = [start_of(now) + k * WIDTH for k in range(AHEAD + 1)]
    with connection.cursor() as cursor:
        missing = [s for s in weeks if s not in have and not _held_by_default(cursor, s)]
    created = []
    for start in missing:
        if not create(start):
            break
        created.append(start)
    return created


def create(start: datetime) -> bool:
    """Create the partition from ``start``, unless the DEFAULT partition holds runs of its
    range (PostgreSQL refuses to attach such a range): False then, or when the lock
    could not be had (nothing changed either way).

    Such runs are not moved into the new partition: a statement that waited on the
    DEFAULT partition's lock meanwhile (a run's finish, a lease renewal, a delete) was
    planned against the partitions there were, so it would then look for its row in
    DEFAULT alone, find it gone and change nothing: a finished run left ``running``, later
    swept as lost. Their week stays in DEFAULT, whose old runs retention deletes row by
    row (``maintenance.prune_runs``); only weeks not yet written get partitions.
    Created apart and then attached: ``ATTACH`` takes a lock on the parent that inserts
    and reads pass, where ``CREATE TABLE … PARTITION OF`` would block them."""
    name = name_of(start)
    bounds = [start, start + WIDTH]
    try:
        with transaction.atomic(), connection.cursor() as cursor:
            _bounded_wait(cursor)
            # Nothing may enter the default for this range between the check and the attach.
            cursor.execute(f"LOCK TABLE {DEFAULT} IN ACCESS EXCLUSIVE MODE")
            if _held_by_default(cursor, start):
                log_event(logging.INFO, f"run partition {name} not made: DEFAULT holds its runs")
                return False
            cursor.execute(
                f"CREATE TABLE {name} (LIKE {TABLE} INCLUDING DEFAULTS INCLUDING CONSTRAINTS)"
            )
            cursor.execute(
                f"ALTER TABLE {TABLE} ATTACH PARTITION {name} FOR VALUES FROM (%s) TO (%s)",
                bounds,
            )
            cursor.execute(_INDEXES_OF, [name])
            for index, of_table in cursor.fetchall():
                suffix = name.removeprefix(TABLE)
                cursor.execute(f'ALTER INDEX "{index}" RENAME TO "{of_table}{suffix}"')
    except OperationalError as error:  # the lock wait ran out: the next hour tries again
        log_event(logging.WARNING, f"run partition {name} not created yet: {error}")
        return False
    return True


def _held_by_default(cursor: CursorWrapper, start: datetime) -> bool:
    """Whether the DEFAULT partition holds runs of the week from ``start``."""
    cursor.execute(
        f"SELECT EXISTS (SELECT 1 FROM {DEFAULT}"  # noqa: S608 - our names
        " WHERE scheduled_for >= %s AND scheduled_for < %s)",
        [start, start + WIDTH],
    )
    return bool(cursor.fetchone()[0])


def older_than(cutoff: datetime) -> list[datetime]:
    """The lower bounds of the partitions that end at or before ``cutoff``."""
    return [start for start in starts() if start + WIDTH <= cutoff]


def drop(start: datetime, *, keep: Sequence[int], since: datetime) -> bool:
    """Drop the partition from ``start``, first moving the runs ``keep`` names (by id) back
    into the table, and with them every run of it in flight or started at or after
    ``since``: one recorded there after ``keep`` was read (a catch-up of a slot that old,
    after an outage longer than the retention) is kept too, found once the partition is
    detached and nothing can enter it any more. With their partition detached they land
    in the DEFAULT partition, ids intact. False when the lock could not be had (nothing
    changed)."""
    name = name_of(start)
    try:
        with transaction.atomic(), connection.cursor() as cursor:
            _bounded_wait(cursor)
            cursor.execute(f"ALTER TABLE {TABLE} DETACH PARTITION {name}")
            cursor.execute(
                f"INSERT INTO {TABLE} SELECT * FROM {name}"  # noqa: S608
                " WHERE id = ANY(%s) OR status = 'running' OR started_at >= %s",
                [list(keep), since],
            )
            cursor.execute(f"DROP TABLE {name}")
    except OperationalError as error:
        log_event(logging.WARNING, f"run partition {name} not dropped yet: {error}")
        return False
    return True


def _bounded_wait(cursor: CursorWrapper) -> None:
    # A caller's transaction (a test's) may hold deferred foreign-key checks on the
    # history, and ALTER TABLE refuses to run with pending trigger events: run them now.
    # Outside such a transaction both statements are free.
    cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
    cursor.execute(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'")
