"""Run history partitioned by day on PostgreSQL (issue 23): partitions made ahead, a
DEFAULT partition that takes what has no day yet, retention by dropping whole days with
the same rules as before, and the exactly-once constraints and deletes unchanged.

The days are in 2031 so that they never meet the partitions the migration made around
the real date; DDL is transactional, so each test's partitions go with its rollback.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import psycopg
import pytest
from django.db import IntegrityError, connection, transaction

from endpoints.engine import maintenance, partitions
from endpoints.engine.maintenance import prune_runs
from endpoints.models import Endpoint, Run, RunStatus, RunTrigger

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.skipif(connection.vendor != "postgresql", reason="SQLite keeps the plain table"),
]

NOW = datetime(2031, 3, 10, 12, 0, tzinfo=UTC)
S = timedelta(seconds=1)
H = timedelta(hours=1)
DAY = timedelta(days=1)


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


def test_the_history_is_partitioned_and_maintenance_makes_the_next_week_ahead():
    assert partitions.partitioned()
    today = NOW.date()
    week = [today + timedelta(days=k) for k in range(partitions.DAYS_AHEAD + 1)]
    assert not set(week) & set(partitions.days())

    assert partitions.create_ahead(now=NOW) == week
    assert set(week) <= set(partitions.days())
    assert partitions.create_ahead(now=NOW) == []
    prune_runs(now=NOW + 3 * DAY)  # the hourly maintenance path
    assert set(partitions.days()) >= {today + timedelta(days=k) for k in range(3, 11)}


def test_a_run_of_a_day_without_a_partition_lands_in_default_and_moves_when_the_day_is_made(
    make_endpoint,
):
    endpoint = make_endpoint()
    far = make_run(endpoint, NOW + 2 * DAY + 5 * H)
    neighbour = make_run(endpoint, NOW + 3 * DAY + 5 * H)
    assert home(far) == home(neighbour) == partitions.DEFAULT

    partitions.create_ahead(now=NOW)

    assert home(far) == "endpoints_run_p20310312"
    assert home(neighbour) == "endpoints_run_p20310313"
    assert Run.objects.get(pk=far.pk).started_at == far.started_at
    assert list(endpoint.runs.order_by("started_at")) == [far, neighbour]


def test_the_exactly_once_constraints_refuse_a_second_run_of_a_slot_in_a_day_and_in_default(
    make_endpoint,
):
    endpoint = make_endpoint()
    partitions.create_ahead(now=NOW)
    for slot in (NOW + H, NOW + 40 * DAY):  # a day's partition, then the default
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
    runs = [make_run(endpoint, NOW + k * DAY) for k in (0, 1, 60)]
    theirs = make_run(other, NOW)
    assert {home(run) for run in runs} == {
        "endpoints_run_p20310310",
        "endpoints_run_p20310311",
        partitions.DEFAULT,
    }

    endpoint.delete()

    assert list(Run.objects.all()) == [theirs]


def test_a_retry_links_to_its_original_across_days_and_is_unlinked_when_it_is_deleted(
    make_endpoint,
):
    endpoint = make_endpoint()
    partitions.create_ahead(now=NOW)
    lost = make_run(endpoint, datetime(2031, 3, 11, 23, 59, 59, tzinfo=UTC), status="lost")
    retry = make_run(
        endpoint,
        datetime(2031, 3, 12, 0, 30, tzinfo=UTC),
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
def test_retention_drops_whole_days_and_keeps_what_the_rules_keep(make_endpoint):
    quiet, busy = make_endpoint(), make_endpoint()
    old_days = [date(2031, 1, 20), date(2031, 2, 5), date(2031, 2, 8)]
    for day in old_days:
        assert partitions.create(day)
    start = datetime(2031, 1, 20, 6, tzinfo=UTC)
    # The quiet endpoint's runs are all old: its latest two stay, wherever they were.
    quiet_runs = [make_run(quiet, start + k * H) for k in range(4)]
    busy_old = [make_run(busy, start + k * H + S) for k in range(5)]
    in_flight = make_run(busy, start + 9 * H, status=RunStatus.RUNNING)
    # Due on an old day but started after the cutoff (a retry's slot is its original's).
    started_late = make_run(busy, start, started_at=NOW - H, trigger=RunTrigger.RETRY, attempt=2)
    original = make_run(busy, datetime(2031, 2, 5, 1, tzinfo=UTC), status=RunStatus.LOST)
    kept_retry = make_run(busy, NOW - DAY, trigger=RunTrigger.RETRY, attempt=2, retry_of=original)
    # The day that straddles the cutoff (2031-02-08 12:00): kept unless asked exactly.
    straddling = make_run(busy, datetime(2031, 2, 8, 9, tzinfo=UTC))
    recent = [make_run(busy, NOW - k * H) for k in range(2)]

    deleted = prune_runs(now=NOW)

    assert deleted == 5 + 2 + 1  # busy_old, quiet's two oldest, the original
    assert partitions.days()[0] == date(2031, 2, 8)  # both older days dropped whole
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

    # ``cleanup_runs`` asks for the exact cutoff: the straddling day loses its old runs.
    assert prune_runs(now=NOW, exact=True) == 1
    assert not Run.objects.filter(pk=straddling.pk).exists()
    assert partitions.days()[0] == date(2031, 2, 8)


@pytest.mark.usefixtures("retention")
def test_a_day_whose_lock_is_busy_waits_for_the_next_prune(make_endpoint, monkeypatch):
    endpoint = make_endpoint()
    assert partitions.create(date(2031, 1, 20))
    old = [make_run(endpoint, datetime(2031, 1, 20, 6, tzinfo=UTC) + k * S) for k in range(3)]
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
    assert date(2031, 1, 20) not in partitions.days()


def _second_connection() -> psycopg.Connection:
    db = connection.settings_dict
    return psycopg.connect(
        dbname=db["NAME"], user=db["USER"], host=db["HOST"], port=db["PORT"] or 5432
    )
