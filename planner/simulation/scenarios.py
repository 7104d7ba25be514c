"""Scenarios: what an endpoint answers over time, kept as JSON in ``bench/scenarios/``.

A scenario file holds the endpoint as its owner configured it (``endpoint``: the
schedule fields and a run policy), the question it asks, and its ``phases``: from each
phase's start (``"from"``, ``H:MM:SS`` after the scenario's start, hours may pass 24, or
seconds) until the next one, every call gets that phase's answer (``status``, ``body``,
``headers``, ``latency_ms``; ``retry_after_until`` adds a ``Retry-After`` header counting
down to that time). A phase with ``cycle`` repeats its list of answers (each lasting its
``seconds``) until ``until``. Each phase names the target's ``state``; the measures count
calls in the ``calm_states`` and the delay from each change of state to the first call
that sees it.
"""

from __future__ import annotations

import bisect
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

START = datetime(2026, 11, 23, tzinfo=UTC)  # a Monday, midnight UTC
KINDS = ("calm", "incident", "rate-limit")  # which of the goals a scenario counts for


class ScenarioError(ValueError):
    """A scenario file that cannot be used; the message says where and how to fix it."""


@dataclass(frozen=True)
class Answer:
    """What the target answers to one call."""

    state: str
    status: int
    body: Any
    headers: Mapping[str, str]
    latency_ms: int


@dataclass(frozen=True)
class Phase:
    start_s: float
    state: str
    status: int = 200
    body: Any = None
    headers: Mapping[str, str] = field(default_factory=dict)
    latency_ms: int = 20
    retry_after_until_s: float | None = None

    def answer(self, offset_s: float) -> Answer:
        headers = {name.lower(): value for name, value in self.headers.items()}
        if self.retry_after_until_s is not None:
            headers["retry-after"] = str(max(1, math.ceil(self.retry_after_until_s - offset_s)))
        return Answer(self.state, self.status, self.body, headers, self.latency_ms)


@dataclass(frozen=True)
class Change:
    at_s: float
    before: str
    after: str

    @property
    def label(self) -> str:
        return f"{self.before} -> {self.after}"


@dataclass(frozen=True)
class Scenario:
    name: str
    question: str
    duration_s: float
    endpoint: Mapping[str, Any]
    phases: tuple[Phase, ...]
    description: str = ""
    calm_states: tuple[str, ...] = ("healthy",)
    kinds: tuple[str, ...] = ()
    start: datetime = START

    def answer_at(self, at: datetime) -> Answer:
        offset = (at - self.start).total_seconds()
        starts = [phase.start_s for phase in self.phases]
        index = max(bisect.bisect_right(starts, offset) - 1, 0)
        return self.phases[index].answer(offset)

    @property
    def end(self) -> datetime:
        return self.start + timedelta(seconds=self.duration_s)

    def changes(self) -> list[Change]:
        """Every change of the target's state, in order."""
        found: list[Change] = []
        for earlier, later in zip(self.phases, self.phases[1:], strict=False):
            if later.state != earlier.state and later.start_s < self.duration_s:
                found.append(Change(later.start_s, earlier.state, later.state))
        return found

    def baseline_ms(self) -> int | None:
        interval = self.endpoint.get("baseline_interval_ms")
        return int(interval) if interval else None

    def compressed(self, factor: float, *, start_s: float = 0.0, seconds: float) -> Scenario:
        """The same scenario ``factor`` times faster, from ``start_s`` for ``seconds`` (of
        the compressed time): every time in the trace and every duration of the endpoint
        (interval, bounds, retry delays, Retry-After) divided by ``factor``. The
        planner's own constants (re-analysis, default pause, TTLs) are not compressed."""
        phases = []
        for index, phase in enumerate(self.phases):
            end = self.phases[index + 1].start_s if index + 1 < len(self.phases) else math.inf
            if end <= start_s:
                continue
            until = phase.retry_after_until_s
            phases.append(
                replace(
                    phase,
                    start_s=max(phase.start_s - start_s, 0.0) / factor,
                    latency_ms=max(1, int(phase.latency_ms / factor)),
                    retry_after_until_s=None if until is None else (until - start_s) / factor,
                )
            )
        endpoint = dict(self.endpoint)
        for key in ("baseline_interval_ms", "min_interval_ms", "max_interval_ms"):
            if endpoint.get(key):
                endpoint[key] = max(1_000, int(endpoint[key] / factor))
        policy = dict(endpoint.get("run_policy") or {})
        for key in ("retry_delay_ms", "retry_max_delay_ms", "breaker_cooldown_ms"):
            if policy.get(key):
                policy[key] = max(1_000, int(policy[key] / factor))
        endpoint["run_policy"] = policy
        return replace(
            self,
            name=f"{self.name} (x{factor:g})",
            duration_s=seconds,
            endpoint=endpoint,
            phases=tuple(phases),
        )


def parse_offset(value: Any, where: str) -> float:
    """Seconds from ``H:MM:SS`` (hours may pass 24) or a number of seconds."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str):
        parts = value.strip().split(":")
        if len(parts) == 3 and all(part.isdigit() for part in parts):
            hours, minutes, seconds = (int(part) for part in parts)
            if minutes < 60 and seconds < 60:
                return float(hours * 3600 + minutes * 60 + seconds)
    raise ScenarioError(f"{where}: {value!r} is not a time; write H:MM:SS (e.g. 10:07:13).")


def _phase(raw: Any, start_s: float, where: str) -> Phase:
    if not isinstance(raw, dict) or not isinstance(raw.get("state"), str):
        raise ScenarioError(f"{where}: each answer needs a state (a word, e.g. healthy).")
    until = raw.get("retry_after_until")
    return Phase(
        start_s=start_s,
        state=raw["state"],
        status=int(raw.get("status", 200)),
        body=raw.get("body"),
        headers=dict(raw.get("headers") or {}),
        latency_ms=int(raw.get("latency_ms", 20)),
        retry_after_until_s=None if until is None else parse_offset(until, f"{where}.until"),
    )


def _phases(raw: Any, where: str) -> tuple[Phase, ...]:
    if not isinstance(raw, list) or not raw:
        raise ScenarioError(f"{where}: phases must be a non-empty list.")
    phases: list[Phase] = []
    for index, item in enumerate(raw):
        here = f"{where}[{index}]"
        start = parse_offset(item.get("from", 0), f"{here}.from")
        if phases and start <= phases[-1].start_s:
            raise ScenarioError(f"{here}: phases must be in time order.")
        if "cycle" in item:
            until = parse_offset(item.get("until"), f"{here}.until")
            at = start
            while at < until:
                for step, answer in enumerate(item["cycle"]):
                    if at >= until:
                        break
                    phases.append(_phase(answer, at, f"{here}.cycle[{step}]"))
                    at += float(answer["seconds"])
            continue
        phases.append(_phase(item, start, here))
    if phases[0].start_s != 0:
        raise ScenarioError(f"{where}: the first phase must start at 0:00:00.")
    return tuple(phases)


def load_scenario(path: Path) -> Scenario:
    where = path.name
    try:
        raw = json.loads(path.read_text())
    except ValueError as exc:
        raise ScenarioError(f"{where}: not valid JSON ({exc}).") from None
    kinds = tuple(raw.get("kinds", ()))
    unknown = sorted(set(kinds) - set(KINDS))
    if unknown:
        raise ScenarioError(f"{where}: unknown kinds {unknown}; use {', '.join(KINDS)}.")
    return Scenario(
        name=raw.get("name") or path.stem,
        question=raw["question"],
        description=raw.get("description", ""),
        duration_s=parse_offset(raw.get("duration", "24:00:00"), f"{where}.duration"),
        endpoint=dict(raw["endpoint"]),
        phases=_phases(raw.get("phases"), f"{where}.phases"),
        calm_states=tuple(raw.get("calm_states", ("healthy",))),
        kinds=kinds,
    )


def load_scenarios(folder: Path, names: list[str] | None = None) -> list[Scenario]:
    paths = sorted(folder.glob("*.json"))
    scenarios = [load_scenario(path) for path in paths]
    if names:
        wanted = set(names)
        missing = wanted - {scenario.name for scenario in scenarios}
        if missing:
            raise ScenarioError(
                f"No scenario named {', '.join(sorted(missing))} in {folder}; there are: "
                + ", ".join(scenario.name for scenario in scenarios)
            )
        scenarios = [scenario for scenario in scenarios if scenario.name in wanted]
    return scenarios
