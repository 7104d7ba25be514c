"""Redelivery: an ``execute`` message delivered again (published twice, or restored after
its visibility timeout) while its claim runs or after it finished does nothing."""

from __future__ import annotations

import pytest

from tests.faults.analysis import broken_promises
from tests.faults.conftest import RECOVERY_WINDOW

pytestmark = pytest.mark.faults


def test_an_execute_message_published_twice_runs_its_claims_once(run_scenario):
    outcome = run_scenario("duplicate-publish")
    assert broken_promises(outcome, recovery_window=RECOVERY_WINDOW) == {}


def test_messages_restored_after_the_visibility_timeout_run_their_claims_once(run_scenario):
    outcome = run_scenario("visibility-timeout")
    assert broken_promises(outcome, recovery_window=RECOVERY_WINDOW) == {}
