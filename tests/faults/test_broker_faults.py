"""Broker faults: the fleet keeps every promise when Redis drops its clients, restarts, or
is gone for 5 s, without restarting any process."""

from __future__ import annotations

import pytest

from tests.faults.analysis import broken_promises
from tests.faults.conftest import RECOVERY_WINDOW, assert_side_by_side

pytestmark = pytest.mark.faults


def test_a_dropped_broker_connection_runs_no_claim_twice_and_every_endpoint_runs_again(
    run_scenario,
):
    outcome = run_scenario("connection-drop")
    assert broken_promises(outcome, recovery_window=RECOVERY_WINDOW) == {}


def test_after_a_redis_restart_the_workers_reconnect_and_every_endpoint_runs_again(run_scenario):
    outcome = run_scenario("redis-restart")
    assert broken_promises(outcome, recovery_window=RECOVERY_WINDOW) == {}


def test_after_a_5_s_redis_outage_every_endpoint_runs_again_within_the_lease_window(
    run_scenario,
):
    outcome = run_scenario("redis-outage")
    assert broken_promises(outcome, recovery_window=RECOVERY_WINDOW) == {}


def test_a_dropped_broker_connection_with_three_calls_of_each_endpoint_in_flight_runs_no_slot_twice(
    run_scenario,
):
    """Issue 34, ``overlap: {"allow": 3}``: the workers' broker connections killed mid-call."""
    outcome = run_scenario("connection-drop-allow")
    assert broken_promises(outcome, recovery_window=RECOVERY_WINDOW) == {}
    assert_side_by_side(outcome)


def test_a_redis_restart_with_three_calls_of_each_endpoint_in_flight_runs_no_slot_twice(
    run_scenario,
):
    """Issue 34, ``overlap: {"allow": 3}``: restored or lost messages start no slot again."""
    outcome = run_scenario("redis-restart-allow")
    assert broken_promises(outcome, recovery_window=RECOVERY_WINDOW) == {}
    assert_side_by_side(outcome)
