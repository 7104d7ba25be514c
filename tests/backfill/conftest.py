"""The Celery fleet of the backfill scenarios (``tests.fleets``: its execute worker runs
the backfill loop), started once for the folder and stopped after its last test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from endpoints.backfill_models import Backfill
from endpoints.choices import BackfillStatus
from tests import fleets
from tests.fleets import Fleet


@pytest.fixture(scope="package")
def celery_fleet(
    django_db_setup: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Fleet]:
    with fleets.celery_fleet(tmp_path_factory.mktemp("backfill-fleet")) as fleet:
        yield fleet


@pytest.fixture
def fleet(celery_fleet: Fleet, transactional_db: None) -> Iterator[Fleet]:
    """The fleet, ticking into this test's database; no backfill left to run after it."""
    yield from fleets.ticking_into_this_test(
        celery_fleet,
        before_idle=lambda: Backfill.objects.filter(status__in=["queued", "running"]).update(
            status=BackfillStatus.CANCELLED
        ),
    )
