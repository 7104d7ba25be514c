"""Process faults with retries on: the endpoints fail transiently and their run policy
retries each slot (five attempts, a second apart) while an execute worker is killed or
stalled mid-run. A retry after a lost lease is one more attempt of its slot: never beside
another attempt (counted at the target), never twice (the Run rows: one run per
(endpoint, slot, attempt), one attempt number per slot, every retry linked back)."""

from __future__ import annotations

import pytest

from tests.faults.analysis import LOST, Outcome, broken_promises, figures
from tests.faults.conftest import RECOVERY_WINDOW
from tests.faults.faults import RETRY_POLICY

pytestmark = pytest.mark.faults


def assert_retries_kept_their_promises(outcome: Outcome) -> None:
    assert broken_promises(outcome, recovery_window=RECOVERY_WINDOW) == {}
    shown = figures(outcome)
    # Not vacuous: the fault cost runs their leases, those were retried, and the slots
    # were retried by the policy too.
    assert shown["lost_runs"] >= 1 and shown["lost_run_retries"] >= 1, shown
    assert shown["policy_retries"] >= 1, shown
    # The policy's attempts are a slot's limit; only a retry of a lost last attempt
    # goes past it.
    limit = int(str(RETRY_POLICY["retry_attempts"]))
    beyond = [run for run in outcome.runs if run.attempt > limit]
    by_id = {run.id: run for run in outcome.runs}
    assert all(
        run.trigger == "retry" and run.retry_of is not None and by_id[run.retry_of].status == LOST
        for run in beyond
    ), beyond


def test_a_worker_killed_mid_retry_runs_no_attempt_twice_nor_two_at_once(run_scenario):
    assert_retries_kept_their_promises(run_scenario("execute-sigkill-retries"))


def test_a_stalled_worker_that_wakes_up_never_runs_an_attempt_beside_its_retry(run_scenario):
    assert_retries_kept_their_promises(run_scenario("execute-sigstop-retries"))
