"""The simulator tells the truth: three scenarios, compressed, end to end through
``manage.py runscheduler`` against a target that plays the trace make the same decisions
(each run's source and status, each hint the planner wrote) as the simulator over the
same scenario from the same start (``tests/planner/realtime.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.engine_processes import child_database_url
from tests.planner.realtime import REAL_TIME, compare_with_runscheduler, real_time_scenario

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


@pytest.mark.timeout(240)
@pytest.mark.parametrize("name", [entry[0] for entry in REAL_TIME])
def test_the_simulator_makes_the_decisions_runscheduler_makes(name: str, tmp_path: Path) -> None:
    scenario = real_time_scenario(name)

    check = compare_with_runscheduler(
        scenario, database_url=child_database_url(), log=tmp_path / "runscheduler.log"
    )

    assert check.real_sources, check.words()
    assert check.same, check.words() + f"\n{check.as_dict()}"
    assert check.largest_gap_ms < 500, check.words()
