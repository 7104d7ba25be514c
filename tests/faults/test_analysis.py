"""The judge of the fault suite: each promise check catches what it names and lets the
allowed cases through (a retry after a lost run, back-to-back requests)."""

from __future__ import annotations

import pytest

from tests.faults.analysis import (
    Execution,
    Outcome,
    RunRecord,
    attempts_used_twice,
    broken_promises,
    broken_retry_links,
    busiest_window,
    concurrent_executions,
    most_at_once,
    recovery_seconds,
    retries_under_the_lost_claim,
    runs_of_one_attempt,
    slots_run_twice,
    unrecorded_executions,
)

pytestmark = pytest.mark.faults


def run(id_: int, slot: float, status: str = "success", **fields: object) -> RunRecord:
    values: dict[str, object] = {
        "id": id_,
        "endpoint": "a",
        "scheduled_for": slot,
        "started_at": slot,
        "finished_at": slot + 0.5,
        "trigger": "scheduled",
        "status": status,
        "claim_token": f"token-{id_}",
        "retry_of": None,
        "error": "",
    }
    values.update(fields)
    return RunRecord(**values)  # type: ignore[arg-type]


def test_requests_to_one_endpoint_that_overlap_are_concurrent_and_back_to_back_ones_are_not():
    first = Execution("a", arrived=10.0, finished=10.5)
    overlapping = Execution("a", arrived=10.4, finished=10.9)
    after = Execution("a", arrived=10.9, finished=11.0)
    other_endpoint = Execution("b", arrived=10.1, finished=10.2)
    assert concurrent_executions([after, other_endpoint, overlapping, first]) == [
        (first, overlapping)
    ]


def test_a_request_still_open_overlaps_every_later_one():
    still_open = Execution("a", arrived=10.0, finished=None)
    later = Execution("a", arrived=30.0, finished=30.1)
    assert concurrent_executions([still_open, later]) == [(still_open, later)]


def test_most_at_once_counts_open_requests_per_endpoint_and_an_end_meeting_an_arrival_is_not():
    calls = [Execution("a", 0.0, 2.5), Execution("a", 1.0, 3.5), Execution("a", 2.0, None)]
    calls += [Execution("a", 3.5, 4.0), Execution("b", 0.5, 0.6)]
    assert most_at_once(calls) == {"a": 3, "b": 1}


def test_under_an_overlap_allowance_only_more_calls_at_once_than_allowed_break_a_promise():
    calls = [Execution("a", 10.0 + k, 12.5 + k) for k in range(4)]
    runs = [run(k + 1, 10.0 + k) for k in range(4)]
    side_by_side = Outcome("none", ["a"], 9.0, 10.0, calls, runs, [], allow=3)
    assert broken_promises(side_by_side, recovery_window=5.0) == {}
    one_too_many = Outcome("none", ["a"], 9.0, 10.0, calls, runs, [], allow=2)
    assert broken_promises(one_too_many, recovery_window=5.0) == {
        "more than 2 calls of one endpoint at once": {"a": 3}
    }
    one_at_a_time = Outcome("none", ["a"], 9.0, 10.0, calls, runs, [])
    assert "concurrent executions of one endpoint" in broken_promises(
        one_at_a_time, recovery_window=5.0
    )


def test_a_slot_may_run_again_only_after_a_lost_run():
    lost = run(1, 100.0, "lost")
    retry = run(2, 100.0, trigger="retry", retry_of=1, started_at=101.0)
    doubled = [run(3, 200.0), run(4, 200.0, started_at=200.1)]
    assert slots_run_twice([lost, retry, *doubled]) == [doubled]


def test_a_retry_that_reuses_the_lost_runs_claim_is_caught():
    lost = run(1, 100.0, "lost", claim_token="same")
    reused = run(2, 100.0, trigger="retry", retry_of=1, claim_token="same")
    fresh = run(3, 100.0, trigger="retry", retry_of=1, claim_token="new")
    assert retries_under_the_lost_claim([lost, reused, fresh]) == [(lost, reused)]


def slot_with_retries() -> list[RunRecord]:
    """A slot's first attempt lost, its retry (attempt 2) failed, the policy's attempt 3."""
    return [
        run(1, 100.0, "lost"),
        run(
            2,
            100.0,
            "failure",
            trigger="retry",
            retry_of=1,
            attempt=2,
            started_at=110.0,
            finished_at=110.5,
        ),
        run(3, 111.5, retry_of=1, attempt=3),
    ]


def test_attempts_of_a_slot_each_have_their_own_number():
    kept = slot_with_retries()
    assert attempts_used_twice(kept) == [] and broken_retry_links(kept) == []
    assert runs_of_one_attempt(kept) == []
    # The policy's next attempt numbered as if the lost run's retry were not one.
    again = [*kept[:2], run(3, 111.5, retry_of=2, attempt=2)]
    assert attempts_used_twice(again) == [again]  # the slot's runs, by attempt
    assert [why for _run, why in broken_retry_links(again)] == [
        f"it does not come after its earlier attempt {again[1]}"
    ]


def test_retry_links_that_do_not_go_back_to_the_slot_are_broken():
    first, retry, _policy = slot_with_retries()
    unlinked = run(4, 120.0, attempt=2)
    elsewhere = run(5, 130.0, "failure", retry_of=1, attempt=2, endpoint="b")
    not_lost = run(6, 100.0, trigger="retry", retry_of=2, attempt=3, started_at=112.0)
    assert [why for _run, why in broken_retry_links([first, retry, unlinked, elsewhere])] == [
        "attempt 2 is linked to no earlier attempt",
        "its earlier attempt 1 is another endpoint's",
    ]
    assert broken_retry_links([first, retry, not_lost])[0][0] == not_lost
    assert runs_of_one_attempt([first, run(7, 100.0, "lost")]) == [[first, run(7, 100.0, "lost")]]


def test_calls_at_the_target_beyond_the_recorded_runs_are_unrecorded():
    calls = [Execution("a", arrived=t, finished=t + 0.1) for t in (1.0, 2.0, 3.0)]
    assert unrecorded_executions(calls, [run(1, 1.0), run(2, 2.0)]) == {"a": (3, 2)}


def test_recovery_is_the_time_until_the_last_endpoint_is_called_again():
    calls = [Execution("a", 12.0, 12.1), Execution("b", 17.0, 17.1), Execution("a", 9.0, 9.1)]
    assert recovery_seconds(calls, ["a", "b"], since=10.0) == pytest.approx(7.0)
    assert recovery_seconds(calls, ["a", "b", "c"], since=10.0) is None


def test_the_busiest_window_counts_a_burst_of_endpoints_sharing_one_phase():
    burst = [Execution(name, 20.0 + k * 0.001, None) for k, name in enumerate("abcde")]
    spread = [Execution(name, 21.0 + k * 0.2, None) for k, name in enumerate("abcde")]
    assert busiest_window([*burst, *spread], since=19.0, width=0.05) == 5


def test_an_outcome_that_keeps_every_promise_breaks_none_and_a_silent_endpoint_breaks_one():
    calls = [Execution("a", 11.0, 11.5), Execution("b", 11.5, 12.0)]
    runs = [run(1, 11.0), run(2, 11.5, endpoint="b")]
    kept = Outcome("none", ["a", "b"], 9.0, 10.0, calls, runs, [])
    assert broken_promises(kept, recovery_window=5.0) == {}
    silent = Outcome("none", ["a", "b", "c"], 9.0, 10.0, calls, runs, ["c"])
    assert broken_promises(silent, recovery_window=5.0) == {
        "endpoints without a future run": ["c"],
        "endpoints not called again within 5 s of the fault": ["c"],
    }
