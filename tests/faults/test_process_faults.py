"""Process faults: a worker killed or stalled mid-request, a tick worker killed, and two
beats with two tick workers; no endpoint runs twice at once and every endpoint runs again."""

from __future__ import annotations

import pytest

from tests.faults.analysis import broken_promises, figures
from tests.faults.conftest import RECOVERY_WINDOW, assert_side_by_side

pytestmark = pytest.mark.faults


def test_an_execute_worker_killed_mid_request_costs_no_double_run_and_its_endpoints_recover(
    run_scenario,
):
    outcome = run_scenario("execute-sigkill")
    assert broken_promises(outcome, recovery_window=RECOVERY_WINDOW) == {}


def test_a_stalled_execute_worker_that_wakes_up_never_runs_an_endpoint_beside_its_retry(
    run_scenario,
):
    outcome = run_scenario("execute-sigstop")
    assert broken_promises(outcome, recovery_window=RECOVERY_WINDOW) == {}


def test_a_killed_tick_worker_is_replaced_and_every_endpoint_runs_again(run_scenario):
    outcome = run_scenario("tick-sigkill")
    assert broken_promises(outcome, recovery_window=RECOVERY_WINDOW) == {}


def test_two_beats_and_two_tick_workers_run_every_slot_once(run_scenario):
    outcome = run_scenario("two-beats")
    assert broken_promises(outcome, recovery_window=RECOVERY_WINDOW) == {}


def test_a_worker_killed_with_three_calls_of_each_endpoint_in_flight_runs_no_slot_twice(
    run_scenario,
):
    """Issue 34, ``overlap: {"allow": 3}``: the calls the killed worker held are lost, not
    run again; never more than three calls of an endpoint at the target at once."""
    outcome = run_scenario("execute-sigkill-allow")
    assert broken_promises(outcome, recovery_window=RECOVERY_WINDOW) == {}
    assert_side_by_side(outcome)
    assert figures(outcome)["lost_runs"] >= 1  # the killed calls, each its slot's only run
