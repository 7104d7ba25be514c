"""Database faults: a PostgreSQL restart or a 5 s outage costs no double execution, no
endpoint without a future run, and every endpoint runs again soon after, without
restarting any process."""

from __future__ import annotations

import pytest

from tests.faults.analysis import broken_promises
from tests.faults.conftest import RECOVERY_WINDOW

pytestmark = pytest.mark.faults


def test_after_a_postgresql_restart_every_endpoint_runs_again_and_none_twice(run_scenario):
    outcome = run_scenario("postgres-restart")
    assert broken_promises(outcome, recovery_window=RECOVERY_WINDOW) == {}


def test_after_a_5_s_postgresql_outage_every_endpoint_runs_again_within_the_lease_window(
    run_scenario,
):
    outcome = run_scenario("postgres-outage")
    assert broken_promises(outcome, recovery_window=RECOVERY_WINDOW) == {}
