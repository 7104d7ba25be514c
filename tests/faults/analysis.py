"""What a fault did, measured at the target and in the database, as the promises read.

Everything here is a small pure function over plain records (no Django, no clock), so the
tests and ``bench/faults.py`` judge an outcome the same way:

- every execution the target saw is recorded as a run;
- no endpoint is executed twice at once (overlapping requests at the target), or, under
  a run policy's ``overlap: {"allow": N}``, never more than N times at once;
- no slot runs twice, except a retry after a ``lost`` run, and that retry holds a new claim;
- every attempt of a slot (its first run and every retry linked to it, by the run policy
  or after a lost run) has its own attempt number, each link going back to an earlier
  attempt of the same endpoint;
- every endpoint still has a future run (a next run or a live claim) at the end;
- every endpoint is called again soon after the fault ends (the recovery time).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

LOST = "lost"
RECORD_GRACE = 1.0  # seconds


@dataclass(frozen=True)
class Execution:
    """One request that arrived at the target (wall-clock seconds)."""

    endpoint: str
    arrived: float
    finished: float | None  # None: still open when the outcome was taken


@dataclass(frozen=True)
class RunRecord:
    """One Run row, times as wall-clock seconds."""

    id: int
    endpoint: str
    scheduled_for: float
    started_at: float
    finished_at: float | None
    trigger: str
    status: str
    claim_token: str | None
    retry_of: int | None
    error: str
    attempt: int = 1


@dataclass
class Outcome:
    """Everything measured around one fault."""

    fault: str
    endpoints: list[str]
    fault_started: float
    fault_ended: float
    executions: list[Execution]
    runs: list[RunRecord]
    endpoints_without_a_future_run: list[str]
    logs: dict[str, str] = field(default_factory=dict)  # process name -> log file
    in_flight_at_fault: int = 0  # calls open at the target when the fault began
    taken_at: float = math.inf  # when the runs were read from the database
    # Calls of one endpoint allowed at once: its run policy's ``overlap: {"allow": N}``.
    allow: int = 1


def executions_per_endpoint(executions: Iterable[Execution]) -> dict[str, int]:
    counts: dict[str, int] = defaultdict(int)
    for execution in executions:
        counts[execution.endpoint] += 1
    return dict(counts)


def concurrent_executions(executions: Iterable[Execution]) -> list[tuple[Execution, Execution]]:
    """Pairs of requests to one endpoint that were open at the same time at the target."""
    overlaps = []
    for mine in _by_endpoint(executions).values():
        open_until, holder = -math.inf, None
        for execution in mine:
            if holder is not None and execution.arrived < open_until:
                overlaps.append((holder, execution))
            end = math.inf if execution.finished is None else execution.finished
            if end > open_until:
                open_until, holder = end, execution
    return overlaps


def most_at_once(executions: Iterable[Execution]) -> dict[str, int]:
    """The most requests to each endpoint open at the same time at the target (one that
    ends as another arrives is not open beside it)."""
    most: dict[str, int] = {}
    for endpoint, mine in _by_endpoint(executions).items():
        # At one instant an end comes before an arrival (False sorts first).
        events = sorted(
            [(e.arrived, True) for e in mine]
            + [(e.finished, False) for e in mine if e.finished is not None]
        )
        open_now = 0
        for _at, arrives in events:
            open_now += 1 if arrives else -1
            most[endpoint] = max(most.get(endpoint, 0), open_now)
    return most


def slots_run_twice(runs: Iterable[RunRecord]) -> list[list[RunRecord]]:
    """Slots with more than one run where an earlier run of the slot was not ``lost``."""
    slots: dict[tuple[str, float], list[RunRecord]] = defaultdict(list)
    for run in runs:
        slots[(run.endpoint, run.scheduled_for)].append(run)
    doubled = []
    for mine in slots.values():
        mine.sort(key=lambda run: run.started_at)
        if any(run.status != LOST for run in mine[:-1]):
            doubled.append(mine)
    return doubled


def retries_under_the_lost_claim(runs: Sequence[RunRecord]) -> list[tuple[RunRecord, RunRecord]]:
    """(lost run, retry) pairs where the retry reused the claim it should have replaced."""
    by_id = {run.id: run for run in runs}
    pairs = []
    for run in runs:
        lost = by_id.get(run.retry_of) if run.retry_of is not None else None
        if (
            lost is not None
            and lost.claim_token is not None
            and lost.claim_token == run.claim_token
        ):
            pairs.append((lost, run))
    return pairs


def attempts_used_twice(runs: Sequence[RunRecord]) -> list[list[RunRecord]]:
    """Slots (a first run and the retries linked to it, followed back through
    ``retry_of``) in which one attempt number was used by more than one run."""
    by_id = {run.id: run for run in runs}
    slots: dict[int, list[RunRecord]] = defaultdict(list)
    for run in runs:
        slots[_first_attempt(run, by_id).id].append(run)
    doubled = []
    for mine in slots.values():
        numbers = [run.attempt for run in mine]
        if len(numbers) != len(set(numbers)):
            doubled.append(sorted(mine, key=lambda run: (run.attempt, run.started_at)))
    return doubled


def runs_of_one_attempt(runs: Iterable[RunRecord]) -> list[list[RunRecord]]:
    """Runs sharing (endpoint, scheduled_for, attempt): one attempt recorded twice."""
    attempts: dict[tuple[str, float, int], list[RunRecord]] = defaultdict(list)
    for run in runs:
        attempts[(run.endpoint, run.scheduled_for, run.attempt)].append(run)
    return [mine for mine in attempts.values() if len(mine) > 1]


def broken_retry_links(runs: Sequence[RunRecord]) -> list[tuple[RunRecord, str]]:
    """Runs whose place among their slot's attempts does not hold, with why: a first
    attempt linked to another run, a later attempt linked to none, or a link to a run
    missing, of another endpoint, with no smaller attempt number or started later; a retry
    after a lost run (trigger ``retry``) must follow a lost run of the same slot."""
    by_id = {run.id: run for run in runs}
    broken = []
    for run in runs:
        if run.retry_of is None:
            if run.attempt != 1:
                broken.append((run, f"attempt {run.attempt} is linked to no earlier attempt"))
            continue
        earlier = by_id.get(run.retry_of)
        if earlier is None:
            broken.append((run, f"its earlier attempt {run.retry_of} is not recorded"))
        elif earlier.endpoint != run.endpoint:
            broken.append((run, f"its earlier attempt {earlier.id} is another endpoint's"))
        elif not earlier.attempt < run.attempt or earlier.started_at > run.started_at:
            broken.append((run, f"it does not come after its earlier attempt {earlier}"))
        elif run.trigger == "retry" and (
            earlier.status != LOST or earlier.scheduled_for != run.scheduled_for
        ):
            broken.append((run, f"a retry after a lost run, but {earlier} was not that run"))
    return broken


def _first_attempt(run: RunRecord, by_id: dict[int, RunRecord]) -> RunRecord:
    seen = {run.id}
    while run.retry_of is not None and run.retry_of in by_id and run.retry_of not in seen:
        run = by_id[run.retry_of]
        seen.add(run.id)
    return run


def unrecorded_executions(
    executions: Iterable[Execution], runs: Iterable[RunRecord]
) -> dict[str, tuple[int, int]]:
    """Endpoints called more often than they have runs: {endpoint: (calls, runs)}."""
    calls = executions_per_endpoint(executions)
    recorded: dict[str, int] = defaultdict(int)
    for run in runs:
        recorded[run.endpoint] += 1
    return {name: (n, recorded[name]) for name, n in calls.items() if n > recorded[name]}


def recovery_seconds(
    executions: Iterable[Execution], endpoints: Sequence[str], *, since: float
) -> float | None:
    """Seconds from ``since`` until every endpoint had been called again; None if one never was."""
    first_after: dict[str, float] = {}
    for execution in executions:
        if execution.arrived >= since:
            known = first_after.get(execution.endpoint)
            if known is None or execution.arrived < known:
                first_after[execution.endpoint] = execution.arrived
    if any(name not in first_after for name in endpoints):
        return None
    return max((first_after[name] - since for name in endpoints), default=0.0)


def silent_endpoints(
    executions: Iterable[Execution], endpoints: Sequence[str], *, since: float
) -> list[str]:
    called = {execution.endpoint for execution in executions if execution.arrived >= since}
    return [name for name in endpoints if name not in called]


def busiest_window(
    executions: Iterable[Execution], *, since: float, width: float, until: float = math.inf
) -> int:
    """The most calls (all endpoints) arriving within ``width`` seconds between ``since``
    and ``until``: endpoints freed together that keep one phase show as a burst."""
    arrivals = sorted(e.arrived for e in executions if since <= e.arrived < until)
    busiest, first = 0, 0
    for last, arrived in enumerate(arrivals):
        while arrived - arrivals[first] > width:
            first += 1
        busiest = max(busiest, last - first + 1)
    return busiest


def broken_promises(outcome: Outcome, *, recovery_window: float) -> dict[str, Any]:
    """Each promise the outcome breaks, with its evidence; empty when all were kept."""
    broken: dict[str, Any] = {}
    allow = outcome.allow
    if allow == 1 and (overlaps := concurrent_executions(outcome.executions)):
        broken["concurrent executions of one endpoint"] = _shown(overlaps)
    most = most_at_once(outcome.executions)
    if allow > 1 and (over := {name: n for name, n in most.items() if n > allow}):
        broken[f"more than {allow} calls of one endpoint at once"] = over
    if doubled := slots_run_twice(outcome.runs):
        broken["slots run twice without a lost run"] = _shown(doubled)
    if reused := retries_under_the_lost_claim(outcome.runs):
        broken["retries under the lost run's own claim"] = _shown(reused)
    if twice := attempts_used_twice(outcome.runs):
        broken["attempt numbers used twice in one slot"] = _shown(twice)
    if again := runs_of_one_attempt(outcome.runs):
        broken["one (endpoint, slot, attempt) recorded twice"] = _shown(again)
    if links := broken_retry_links(outcome.runs):
        broken["retries that do not follow their slot's earlier attempt"] = _shown(links)
    # A run's row is written before its request, but the fleet keeps working while the
    # runs are read: calls that arrived in the last second may have rows not read yet.
    settled = [e for e in outcome.executions if e.arrived < outcome.taken_at - RECORD_GRACE]
    if unrecorded := unrecorded_executions(settled, outcome.runs):
        broken["calls at the target without a run (calls, runs)"] = unrecorded
    if outcome.endpoints_without_a_future_run:
        broken["endpoints without a future run"] = outcome.endpoints_without_a_future_run
    recovery = recovery_seconds(outcome.executions, outcome.endpoints, since=outcome.fault_ended)
    if recovery is None or recovery > recovery_window:
        late = recovery_late(outcome, recovery_window=recovery_window)
        broken[f"endpoints not called again within {recovery_window:g} s of the fault"] = late
    return broken


def recovery_late(outcome: Outcome, *, recovery_window: float) -> list[str]:
    """Endpoints whose first call after the fault came later than the window (or never)."""
    deadline = outcome.fault_ended + recovery_window
    in_time = [e for e in outcome.executions if outcome.fault_ended <= e.arrived <= deadline]
    return silent_endpoints(in_time, outcome.endpoints, since=outcome.fault_ended)


def figures(outcome: Outcome) -> dict[str, Any]:
    """The numbers of an outcome, for the bench's output and the tests' failure messages."""
    recovery = recovery_seconds(outcome.executions, outcome.endpoints, since=outcome.fault_ended)
    return {
        "fault": outcome.fault,
        "endpoints": len(outcome.endpoints),
        "fault_seconds": round(outcome.fault_ended - outcome.fault_started, 2),
        "in_flight_at_fault": outcome.in_flight_at_fault,
        "calls_at_target": len(outcome.executions),
        "runs": len(outcome.runs),
        "lost_runs": sum(1 for run in outcome.runs if run.status == LOST),
        "concurrent_executions": len(concurrent_executions(outcome.executions)),
        "most_calls_of_one_endpoint_at_once": max(
            most_at_once(outcome.executions).values(), default=0
        ),
        "slots_run_twice": len(slots_run_twice(outcome.runs)),
        "retries_under_the_lost_claim": len(retries_under_the_lost_claim(outcome.runs)),
        # Retries within a slot planned by a run policy, and retries of lost runs.
        "policy_retries": sum(
            1 for run in outcome.runs if run.trigger == "scheduled" and run.attempt > 1
        ),
        "lost_run_retries": sum(1 for run in outcome.runs if run.trigger == "retry"),
        "attempts_used_twice": len(attempts_used_twice(outcome.runs)),
        "endpoints_without_a_future_run": len(outcome.endpoints_without_a_future_run),
        "recovery_seconds": None if recovery is None else round(recovery, 2),
        "never_called_again": len(
            silent_endpoints(outcome.executions, outcome.endpoints, since=outcome.fault_ended)
        ),
    }


def _by_endpoint(executions: Iterable[Execution]) -> dict[str, list[Execution]]:
    grouped: dict[str, list[Execution]] = defaultdict(list)
    for execution in executions:
        grouped[execution.endpoint].append(execution)
    return {name: sorted(mine, key=lambda e: e.arrived) for name, mine in grouped.items()}


def _shown(items: Sequence[Any], limit: int = 5) -> list[Any]:
    """The first few pieces of evidence and how many there were in all."""
    return [*items[:limit], f"... {len(items)} in all"] if len(items) > limit else list(items)
