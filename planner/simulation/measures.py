"""What a simulated (or real) day is worth: the measures of ``bench/adaptation.py``."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from planner.simulation.scenarios import Change, Scenario


@dataclass(frozen=True)
class Seen:
    """A change of the target's state and the first call that saw it."""

    change: Change
    delay_s: float | None  # None: no call saw it before the scenario ended


def delays(scenario: Scenario, starts: Sequence[datetime]) -> list[Seen]:
    """For each change of state, the time from it to the first call started at or after
    it (and before the next change)."""
    changes = scenario.changes()
    found = []
    for index, change in enumerate(changes):
        at = scenario.start.timestamp() + change.at_s
        until = (
            scenario.start.timestamp() + changes[index + 1].at_s
            if index + 1 < len(changes)
            else scenario.end.timestamp()
        )
        first = next((s.timestamp() for s in starts if at <= s.timestamp() < until), None)
        found.append(Seen(change, None if first is None else first - at))
    return found


def incident_delays(scenario: Scenario, seen: list[Seen]) -> tuple[float | None, float | None]:
    """The delay to see the first change away from calm (an incident's start) and the
    first change back to calm after it (its recovery); None when there is none."""
    calm = set(scenario.calm_states)
    start = next((s for s in seen if s.change.before in calm and s.change.after not in calm), None)
    if start is None:
        return None, None
    back = next(
        (
            s
            for s in seen
            if s.change.at_s > start.change.at_s
            and s.change.after in calm
            and s.change.before not in calm
        ),
        None,
    )
    return start.delay_s, None if back is None else back.delay_s


def mean(values: Sequence[float | None]) -> float | None:
    known = [value for value in values if value is not None]
    return statistics.fmean(known) if known else None


def summary(scenario: Scenario, sims: Sequence[Any]) -> dict[str, Any]:
    """The measures of one mode on one scenario, averaged over its runs (start offsets)."""
    rows = []
    for sim in sims:
        starts = [call.started for call in sim.calls]
        seen = delays(scenario, starts)
        incident, recovery = incident_delays(scenario, seen)
        rows.append(
            {
                "calls": len(sim.calls),
                "calm_calls": sum(call.state in scenario.calm_states for call in sim.calls),
                "incident_seen_s": incident,
                "recovery_seen_s": recovery,
                "changes": [
                    {"at_s": s.change.at_s, "change": s.change.label, "seen_after_s": s.delay_s}
                    for s in seen
                ],
                "status_429": sum(call.status_code == 429 for call in sim.calls),
                "failures": sum(call.status != "success" for call in sim.calls),
                "hints_written": len(sim.written),
                "sessions": sim.sessions,
                "tokens": sim.tokens,
                "breaker_opened": sim.breaker_opened,
            }
        )
    keys = ("calls", "calm_calls", "status_429", "failures", "hints_written", "sessions", "tokens")
    result: dict[str, Any] = {key: statistics.fmean(row[key] for row in rows) for key in keys}
    result["incident_seen_s"] = mean([row["incident_seen_s"] for row in rows])
    result["recovery_seen_s"] = mean([row["recovery_seen_s"] for row in rows])
    result["runs"] = rows
    return result


# The goals of issue 36 for the rules against the fixed schedule, same baseline.
CALM_SAVING = 0.30  # at least 30 % fewer calls over the calm scenarios
RECOVERY_SPEEDUP = 2.0  # recovery seen at least twice as soon in the incident scenarios
RATE_LIMIT_SHARE = 0.5  # at most half the 429s in the rate-limit scenarios
MAX_EXTRA_CALLS = 0.05  # never more than 5 % more calls than fixed on any scenario


def goals(scenarios: Sequence[Scenario], table: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Each goal with its figures and whether the rules meet it; ``table`` maps a
    scenario's name to its modes' summaries (``fixed`` and ``rules`` at least)."""
    found: list[dict[str, Any]] = []
    calm = [s.name for s in scenarios if "calm" in s.kinds]
    if calm:
        fixed = sum(table[name]["fixed"]["calls"] for name in calm)
        ruled = sum(table[name]["rules"]["calls"] for name in calm)
        saving = 1 - ruled / fixed if fixed else 0.0
        found.append(
            {
                "goal": f">= {CALM_SAVING:.0%} fewer calls over the calm scenarios",
                "scenarios": calm,
                "figures": f"{ruled:.0f} vs {fixed:.0f} calls: {saving:.0%} fewer",
                "met": saving >= CALM_SAVING,
            }
        )
    for scenario in scenarios:
        fixed, ruled = table[scenario.name]["fixed"], table[scenario.name]["rules"]
        if "incident" in scenario.kinds:
            before, after = fixed["recovery_seen_s"], ruled["recovery_seen_s"]
            speedup = before / after if before and after else None
            found.append(
                {
                    "goal": f"recovery seen >= {RECOVERY_SPEEDUP:g}x sooner",
                    "scenarios": [scenario.name],
                    "figures": f"{_s(after)} vs {_s(before)}"
                    + (f": {speedup:.1f}x" if speedup else ""),
                    "met": speedup is not None and speedup >= RECOVERY_SPEEDUP,
                }
            )
        if "rate-limit" in scenario.kinds:
            before, after = fixed["status_429"], ruled["status_429"]
            found.append(
                {
                    "goal": f"<= {RATE_LIMIT_SHARE:.0%} of the 429s",
                    "scenarios": [scenario.name],
                    "figures": f"{after:.1f} vs {before:.1f} 429s",
                    "met": after <= RATE_LIMIT_SHARE * before,
                }
            )
        extra = ruled["calls"] / fixed["calls"] - 1 if fixed["calls"] else 0.0
        found.append(
            {
                "goal": f"<= {MAX_EXTRA_CALLS:.0%} more calls than fixed",
                "scenarios": [scenario.name],
                "figures": f"{ruled['calls']:.0f} vs {fixed['calls']:.0f} calls ({extra:+.0%})",
                "met": extra <= MAX_EXTRA_CALLS,
            }
        )
    return found


def _s(value: float | None) -> str:
    return "never" if value is None else f"{value:.0f} s"
