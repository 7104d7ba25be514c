"""The simulator tells the truth: a scenario, compressed, end to end through
``manage.py runscheduler`` against a target that plays the trace makes the same decisions
(each run's source and status, each hint the planner wrote) as the simulator over the
same scenario from the same start (``tests/planner/realtime.py``).

The suite plays the incident (the planner tightening, then relaxing) and compares
decisions only: how far apart the real and simulated slots fall depends on how late the
machine starts runs. ``bench/adaptation.py --real-time`` plays all three scenarios of
REAL_TIME and reports that distance."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.engine_processes import child_database_url
from tests.planner.realtime import compare_with_runscheduler, real_time_scenario

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


@pytest.mark.timeout(240)
@pytest.mark.parametrize("name", ["incident"])
def test_the_simulator_makes_the_decisions_runscheduler_makes(name: str, tmp_path: Path) -> None:
    scenario = real_time_scenario(name)

    check = compare_with_runscheduler(
        scenario, database_url=child_database_url(), log=tmp_path / "runscheduler.log"
    )

    assert check.real_sources, check.words()
    assert check.same, check.words() + f"\n{check.as_dict()}"
