"""Run history partitioned by week on PostgreSQL (issue 23): partitions made ahead, a
DEFAULT partition that takes what has no partition yet, retention by dropping whole
partitions with the same rules as before, and the exactly-once constraints and deletes
unchanged.

The weeks are in 2031 so that they never meet the partitions the migration made around
the real date; DDL is transactional, so each test's partitions go with its rollback.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import psycopg
import pytest
import time_machine
from django.db import IntegrityError, connection, transaction

from endpoints.engine import maintenance, outcomes, partitions, running
from endpoints.engine.claiming import claim_due_endpoints
from endpoints.engine.maintenance import prune_runs
from endpoints.models import Endpoint, Run, RunStatus, RunTrigger, Slot, Source
from tests.engine_processes import wait_until

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.skipif(connection.vendor != "postgresql", reason="SQLite keeps the plain table"),
]

NOW = datetime(2031, 3, 10, 12, 0, tzinfo=UTC)  # a Monday: its partition starts at 00:00
S = timedelta(seconds=1)
H = timedelta(hours=1)
DAY = timedelta(days=1)
WEEK = partitions.WIDTH
MONDAY = partitions.start_of(NOW)


def make_run(endpoint: Endpoint, started: datetime, **fields) -> Run:
    values = {"scheduled_for": started, "started_at": started, "status": RunStatus.SUCCESS}
    values.update(fields)
    return Run.objects.create(endpoint=endpoint, **values)


def home(run: Run) -> str:
    """The partition that holds ``run``."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT tableoid::regclass::text FROM endpoints_run WHERE id = %s", [run.pk])
        return cursor.fetchone()[0]


@pytest.fixture
def retention(settings, monkeypatch):
    settings.CRONICORN_RUN_RETENTION_DAYS = 30
    settings.CRONICORN_RUN_RETENTION_KEEP = 2
    monkeypatch.setattr(maintenance, "PRUNE_BATCH_SIZE", 2)


def test_the_history_is_partitioned_and_maintenance_makes_the_next_weeks_ahead():
    assert partitions.partitioned()
    assert datetime(2031, 3, 10, tzinfo=UTC) == MONDAY
    ahead = [MONDAY + k * WEEK for k in range(partitions.AHEAD + 1)]
    assert not set(ahead) & set(partitions.starts())

    assert partitions.create_ahead(now=NOW) == ahead
    assert set(ahead) <= set(partitions.starts())
    assert partitions.create_ahead(now=NOW) == []
    prune_runs(now=NOW + 3 * WEEK)  # the hourly maintenance path
    assert MONDAY + 5 * WEEK in partitions.starts()


def test_a_run_without_a_partition_lands_in_default_and_its_week_stays_there(make_endpoint):
    endpoint = make_endpoint()
    far = make_run(endpoint, NOW + 2 * DAY)
    farther = make_run(endpoint, NOW + WEEK + 5 * H)
    assert home(far) == home(farther) == partitions.DEFAULT

    # The weeks DEFAULT holds runs of get no partition (their runs are not moved: a
    # finish waiting meanwhile would miss its row); the next one does.
    assert partitions.create_ahead(now=NOW) == [MONDAY + 2 * WEEK]
    assert not partitions.create(MONDAY)

    assert home(far) == home(farther) == partitions.DEFAULT
    assert home(make_run(endpoint, NOW + DAY)) == partitions.DEFAULT
    assert home(make_run(endpoint, NOW + 2 * WEEK)) == "endpoints_run_p20310324"
    assert Run.objects.get(pk=far.pk).started_at == far.started_at
    assert endpoint.runs.count() == 4


def test_the_exactly_once_constraints_refuse_a_second_run_of_a_slot_in_a_day_and_in_default(
    make_endpoint,
):
    endpoint = make_endpoint()
    partitions.create_ahead(now=NOW)
    for slot in (NOW + H, NOW + 40 * DAY):  # a week's partition, then the default
        make_run(endpoint, slot)
        # Each partition's index is named after the constraint it carries.
        refused = pytest.raises(IntegrityError, match="endpoints_run_one_per_slot_")
        with refused, transaction.atomic():
            make_run(endpoint, slot, started_at=slot + S)
        retry = {"trigger": RunTrigger.RETRY, "attempt": 2}
        make_run(endpoint, slot, **retry)
        refused = pytest.raises(IntegrityError, match="endpoints_run_one_per_attempt_")
        with refused, transaction.atomic():
            make_run(endpoint, slot, started_at=slot + S, **retry)
    assert endpoint.runs.count() == 4


def test_deleting_an_endpoint_deletes_its_runs_in_every_partition(make_endpoint):
    endpoint, other = make_endpoint(), make_endpoint()
    partitions.create_ahead(now=NOW)
    runs = [make_run(endpoint, NOW + k * DAY) for k in (0, 7, 60)]
    theirs = make_run(other, NOW)
    assert {home(run) for run in runs} == {
        "endpoints_run_p20310310",
        "endpoints_run_p20310317",
        partitions.DEFAULT,
    }

    endpoint.delete()

    assert list(Run.objects.all()) == [theirs]


def test_a_retry_links_to_its_original_across_partitions_and_is_unlinked_when_deleted(
    make_endpoint,
):
    endpoint = make_endpoint()
    partitions.create_ahead(now=NOW)
    lost = make_run(endpoint, MONDAY + WEEK - S, status=RunStatus.LOST)
    retry = make_run(
        endpoint,
        MONDAY + WEEK + H,
        trigger=RunTrigger.RETRY,
        attempt=2,
        retry_of=lost,
    )
    assert home(lost) != home(retry)
    assert list(lost.retries.all()) == [retry]
    assert Run.objects.get(pk=retry.pk).retry_of == lost

    lost.delete()

    retry.refresh_from_db()
    assert retry.retry_of_id is None


@pytest.mark.usefixtures("retention")
def test_retention_drops_whole_partitions_and_keeps_what_the_rules_keep(make_endpoint):
    quiet, busy = make_endpoint(), make_endpoint()
    cutoff = NOW - 30 * DAY  # 2031-02-08 12:00, in the partition from Monday 02-03
    straddled = partitions.start_of(cutoff)
    for start in (straddled - 4 * WEEK, straddled - WEEK, straddled):
        assert partitions.create(start)
    start = straddled - 4 * WEEK + 6 * H
    # The quiet endpoint's runs are all old: its latest two stay, wherever they were.
    quiet_runs = [make_run(quiet, start + k * H) for k in range(4)]
    busy_old = [make_run(busy, start + k * H + S) for k in range(5)]
    in_flight = make_run(busy, start + 9 * H, status=RunStatus.RUNNING)
    # Due in an old partition but started after the cutoff (a retry's slot is its
    # original's).
    started_late = make_run(busy, start, started_at=NOW - H, trigger=RunTrigger.RETRY, attempt=2)
    original = make_run(busy, straddled - WEEK + H, status=RunStatus.LOST)
    kept_retry = make_run(busy, NOW - DAY, trigger=RunTrigger.RETRY, attempt=2, retry_of=original)
    # The partition that straddles the cutoff: its old runs stay unless asked exactly.
    straddling = make_run(busy, straddled + 9 * H)
    recent = [make_run(busy, NOW - k * H) for k in range(2)]

    deleted = prune_runs(now=NOW)

    assert deleted == 5 + 2 + 1  # busy_old, quiet's two oldest, the original
    assert partitions.starts()[0] == straddled  # both older partitions dropped whole
    assert set(Run.objects.filter(endpoint=quiet)) == set(quiet_runs[2:])
    assert set(Run.objects.filter(endpoint=busy)) == {
        in_flight,
        started_late,
        kept_retry,
        straddling,
        *recent,
    }
    assert {home(run) for run in [*quiet_runs[2:], in_flight, started_late]} == {partitions.DEFAULT}
    assert not Run.objects.filter(pk__in=[run.pk for run in busy_old]).exists()
    kept_retry.refresh_from_db()
    assert kept_retry.retry_of_id is None
    assert prune_runs(now=NOW) == 0

    # ``cleanup_runs`` asks for the exact cutoff: the straddling partition loses its old
    # runs, row by row, and stays.
    assert prune_runs(now=NOW, exact=True) == 1
    assert not Run.objects.filter(pk=straddling.pk).exists()
    assert partitions.starts()[0] == straddled


@pytest.mark.usefixtures("retention")
def test_a_partition_whose_lock_is_busy_waits_for_the_next_prune(make_endpoint, monkeypatch):
    endpoint = make_endpoint()
    old_start = MONDAY - 8 * WEEK
    assert partitions.create(old_start)
    old = [make_run(endpoint, old_start + 6 * H + k * S) for k in range(3)]
    recent = [make_run(endpoint, NOW - k * H) for k in range(2)]
    monkeypatch.setattr(partitions, "LOCK_TIMEOUT", "100ms")
    reader = _second_connection()
    try:
        # A long read elsewhere holds the history: a drop must not queue behind it.
        reader.execute("BEGIN")
        reader.execute("SET LOCAL lock_timeout = '2s'")
        reader.execute("LOCK TABLE ONLY endpoints_run IN ACCESS SHARE MODE")
        assert prune_runs(now=NOW) == 0
    finally:
        reader.close()

    assert set(Run.objects.all()) == {*old, *recent}  # nothing deleted, nothing half done
    assert prune_runs(now=NOW) == 3
    assert old_start not in partitions.starts()


@pytest.mark.django_db(transaction=True)  # three connections see each other's commits
def test_a_run_in_flight_keeps_its_outcome_when_maintenance_comes_back_after_weeks(
    make_endpoint, target
):
    """Maintenance stopped for weeks: this week has no partition, its runs are in DEFAULT.
    When maintenance comes back it makes the next weeks while a run of this week is in
    flight; the run's finish, waiting behind it, still lands (moving the week's runs out
    of DEFAULT under that finish made it update nothing: a successful run left running,
    then swept as lost)."""
    endpoint = make_endpoint(url=target.url("/"))
    blocker = _second_connection()
    try:
        with time_machine.travel(NOW, tick=True):
            Slot.objects.filter(pk=endpoint.pk).update(
                next_run_at=NOW, next_run_source=Source.BASELINE_INTERVAL
            )
            [claim] = claim_due_endpoints(now=NOW, limit=1, horizon_ms=0)
            called = running.call_claim(claim)
            assert isinstance(called, outcomes.Outcome)
            assert home(called.run) == partitions.DEFAULT
            # A long read elsewhere holds the history, so that maintenance waits to attach
            # with the DEFAULT partition locked, as a large move would keep it.
            blocker.execute("BEGIN")
            blocker.execute("LOCK TABLE ONLY endpoints_run IN SHARE UPDATE EXCLUSIVE MODE")
            making = _in_thread(lambda: partitions.create_ahead(now=NOW))
            assert wait_until(lambda: _waiting(blocker, "ALTER TABLE"), timeout=4)
            finishing = _in_thread(lambda: running.record_outcomes([called]))
            assert wait_until(lambda: _waiting(blocker, "UPDATE endpoints_run"), timeout=4)
            blocker.execute("COMMIT")
            making.join(timeout=10)
            finishing.join(timeout=10)
        assert not making.is_alive() and not finishing.is_alive()
        assert len(target.hits("/")) == 1
        run = Run.objects.get(pk=called.run.pk)
        assert (run.status, run.status_code) == (RunStatus.SUCCESS, 200)
        assert MONDAY + WEEK in partitions.starts()  # the next weeks are made all the same
    finally:
        _drop_partitions_between(blocker, MONDAY, MONDAY + 52 * WEEK)
        blocker.close()


@pytest.mark.usefixtures("retention")
@pytest.mark.django_db(transaction=True)
def test_a_run_recorded_in_a_partition_while_retention_drops_it_is_kept(make_endpoint, target):
    """Back after a longer outage than the retention, every endpoint catches up with a run
    of its slot, weeks old: in a partition the same maintenance pass drops. A run recorded
    there after the pass read what to keep is kept all the same (it was dropped with the
    partition: a run that happened, with no record)."""
    now = datetime(2020, 6, 15, 12, 0, tzinfo=UTC)  # before the partitions the migration made
    old_start = partitions.start_of(now) - 8 * WEEK
    quiet, behind = make_endpoint(), make_endpoint(url=target.url("/"))
    db = _second_connection()
    try:
        with time_machine.travel(now, tick=True):
            assert partitions.create(old_start)
            assert partitions.create(partitions.start_of(now - DAY))
            old = [make_run(quiet, old_start + H + k * S) for k in range(3)]
            original = make_run(quiet, old_start + 2 * H, status=RunStatus.LOST)
            retry = make_run(
                quiet, now - DAY, trigger=RunTrigger.RETRY, attempt=2, retry_of=original
            )
            recent = [make_run(quiet, now - k * H) for k in range(2)]
            slot = old_start + 3 * H  # where the outage left it
            Slot.objects.filter(pk=behind.pk).update(
                next_run_at=slot, next_run_source=Source.BASELINE_INTERVAL
            )
            [claim] = claim_due_endpoints(now=now, limit=1, horizon_ms=0)
            # The retry's row is busy a moment: the pass waits to unlink it, its list of
            # what to keep already read.
            db.execute(
                "SELECT id FROM endpoints_run WHERE id = %s AND scheduled_for = %s FOR UPDATE",
                [retry.pk, retry.scheduled_for],  # its partition alone
            )
            pruning = _in_thread(lambda: prune_runs(now=now))
            assert wait_until(lambda: _waiting(db, "UPDATE endpoints_run AS r"), timeout=4)
            called = running.call_claim(claim)  # the catch-up run, in the old partition
            assert isinstance(called, outcomes.Outcome)
            db.rollback()
            pruning.join(timeout=10)
            running.record_outcomes([called])
        assert not pruning.is_alive()
        assert old_start not in partitions.starts()
        run = Run.objects.filter(pk=called.run.pk).first()
        assert run is not None and (run.status, run.scheduled_for) == (RunStatus.SUCCESS, slot)
        assert set(Run.objects.filter(endpoint=quiet)) == {retry, *recent}
        assert not Run.objects.filter(pk__in=[r.pk for r in old]).exists()
    finally:
        _drop_partitions_between(db, now - 52 * WEEK, now + 52 * WEEK)
        db.close()


def _in_thread(work: Callable[[], object]) -> threading.Thread:
    def run() -> None:
        try:
            work()
        finally:
            connection.close()  # this thread's own connection

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def _waiting(observer: psycopg.Connection, query: str) -> bool:
    """Whether another connection's statement holding ``query`` waits for a lock."""
    observer.execute("SELECT pg_stat_clear_snapshot()")  # kept per transaction otherwise
    row = observer.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
        " AND query LIKE %s AND pid <> pg_backend_pid()",
        [f"%{query}%"],
    ).fetchone()
    return bool(row and row[0])


def _drop_partitions_between(db: psycopg.Connection, lo: datetime, hi: datetime) -> None:
    """Partitions made outside a test's rollback go by hand (DDL committed)."""
    db.rollback()
    with db.transaction():
        for name in [partitions.name_of(s) for s in _starts(db) if lo <= s < hi]:
            db.execute(f"DROP TABLE {name}")


def _starts(db: psycopg.Connection) -> list[datetime]:
    rows = db.execute(
        "SELECT c.relname FROM pg_inherits AS i JOIN pg_class AS c ON c.oid = i.inhrelid"
        " WHERE i.inhparent = 'endpoints_run'::regclass AND c.relname LIKE 'endpoints_run_p%'"
    ).fetchall()
    return [datetime.strptime(r[0][-8:], "%Y%m%d").replace(tzinfo=UTC) for r in rows]


def _second_connection() -> psycopg.Connection:
    db = connection.settings_dict
    return psycopg.connect(
        dbname=db["NAME"], user=db["USER"], host=db["HOST"], port=db["PORT"] or 5432
    )
