"""The simulator (``planner.simulation``): the engine's pure parts over a scenario in
simulated time, and the scenarios of ``bench/scenarios/`` it measures."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
from django.test import override_settings

from planner.models import AnalysisSession
from planner.simulation.database import DatabasePlanner
from planner.simulation.measures import goals, summary
from planner.simulation.scenarios import (
    Phase,
    Scenario,
    ScenarioError,
    load_scenario,
    load_scenarios,
)
from planner.simulation.simulator import RulesPlanner, Simulation
from tests.scripted_llm import scripted_llm

SCENARIOS = Path(__file__).resolve().parents[2] / "bench" / "scenarios"
HEALTHY = {"status": "healthy"}
MINUTE = 60_000


def _scenario(*phases: Phase, hours: float = 24, **endpoint: Any) -> Scenario:
    config = {"baseline_interval_ms": MINUTE, **endpoint}
    return Scenario(
        name="test", question="?", duration_s=hours * 3600, endpoint=config, phases=phases
    )


def _gaps_s(sim: Simulation) -> list[float]:
    starts = [call.started for call in sim.calls]
    return [(later - earlier).total_seconds() for earlier, later in pairwise(starts)]


def test_a_fixed_schedule_over_a_calm_day_makes_exactly_one_call_per_interval() -> None:
    calm = _scenario(Phase(0, "healthy", body=HEALTHY))

    on_the_hour = Simulation(calm, None).run()
    half_a_minute_in = Simulation(calm, None, offset_s=30).run()

    assert len(on_the_hour.calls) == 1440 and len(half_a_minute_in.calls) == 1440
    assert set(_gaps_s(on_the_hour)) == {60.0}
    assert {call.source for call in on_the_hour.calls} == {"baseline-interval"}
    assert half_a_minute_in.calls[-1].started == calm.start + timedelta(hours=24, seconds=-30)
    assert on_the_hour.written == [] and on_the_hour.sessions == 0


def test_failures_back_off_as_the_governor_says_and_recovery_resets_the_cadence() -> None:
    failing = _scenario(
        Phase(0, "failing", status=500, body={"error": "down"}),
        Phase(1_800, "healthy", body=HEALTHY),
        hours=1,
    )

    sim = Simulation(failing, None).run()

    # 2, 4, 8, 16 minutes after the 1st..4th failure; healthy at 30 min, then every minute.
    assert _gaps_s(sim)[:6] == [120.0, 240.0, 480.0, 960.0, 60.0, 60.0]
    assert [call.status_code for call in sim.calls[:6]] == [500] * 4 + [200] * 2


def test_a_slow_answer_past_the_timeout_is_a_timeout_and_plans_from_its_start() -> None:
    slow = _scenario(Phase(0, "slow", body=HEALTHY, latency_ms=45_000), hours=1, timeout_ms=30_000)

    sim = Simulation(slow, None).run()

    assert {call.status for call in sim.calls} == {"timeout"}
    assert (sim.calls[0].finished - sim.calls[0].started) == timedelta(seconds=30)


def test_the_rules_relax_a_calm_endpoint_to_twice_its_baseline_only_within_its_maximum() -> None:
    calm = (Phase(0, "healthy", body=HEALTHY),)
    with_max = Simulation(_scenario(*calm, max_interval_ms=5 * MINUTE), RulesPlanner()).run()
    at_baseline = Simulation(_scenario(*calm, max_interval_ms=MINUTE), RulesPlanner()).run()
    without_max = Simulation(_scenario(*calm), RulesPlanner()).run()

    assert [w.arguments["intervalMs"] for w in with_max.written][:1] == [2 * MINUTE]
    assert 700 < len(with_max.calls) < 740
    assert set(_gaps_s(with_max)[10:]) == {120.0}
    assert len(at_baseline.calls) == len(without_max.calls) == 1440
    assert at_baseline.written == without_max.written == []


def test_a_rate_limit_with_retry_after_is_called_once_and_right_after_it() -> None:
    limited = _scenario(
        Phase(0, "ok", body=HEALTHY),
        Phase(600, "limited", status=429, body={}, retry_after_until_s=1_800),
        Phase(1_800, "ok", body=HEALTHY),
        hours=1,
    )

    fixed = Simulation(limited, None).run()
    ruled = Simulation(limited, RulesPlanner()).run()

    assert sum(call.status_code == 429 for call in ruled.calls) == 1
    assert sum(call.status_code == 429 for call in fixed.calls) == 4
    [pause] = ruled.written
    assert pause.tool == "pause_until"
    # Retry-After counts from the answer (20 ms after the call started).
    until = datetime.fromisoformat(pause.arguments["untilIso"])
    assert until == limited.start + timedelta(seconds=1_800, milliseconds=20)
    after = next(
        call for call in ruled.calls if call.started >= limited.start + timedelta(minutes=30)
    )
    assert (after.source, after.status_code) == ("paused", 200)


def test_the_rules_leave_a_persons_retry_of_a_503_alone() -> None:
    [report] = load_scenarios(SCENARIOS, ["daily-report"])

    fixed = Simulation(report, None).run()
    ruled = Simulation(report, RulesPlanner()).run()

    assert [c.source for c in ruled.calls] == [c.source for c in fixed.calls]
    assert [c.source for c in ruled.calls] == [
        "baseline-cron",
        "baseline-cron",
        "retry",
        "retry",
        "baseline-cron",
    ]
    assert ruled.written == []


def test_the_simulator_with_the_rules_meets_the_goals_on_the_scenarios_kept_in_the_repo() -> None:
    # The figures of README "What adapting buys", at one start phase (the bench averages
    # four): every goal the rules are held to.
    scenarios = load_scenarios(SCENARIOS)
    table = {
        s.name: {
            "fixed": summary(s, [Simulation(s, None).run()]),
            "rules": summary(s, [Simulation(s, RulesPlanner()).run()]),
        }
        for s in scenarios
    }

    unmet = [
        (g["goal"], g["scenarios"], g["figures"]) for g in goals(scenarios, table) if not g["met"]
    ]

    assert unmet == []


def test_every_scenario_kept_in_the_repo_loads_and_asks_its_question() -> None:
    scenarios = load_scenarios(SCENARIOS)

    assert len(scenarios) >= 8
    for scenario in scenarios:
        assert scenario.question.endswith("?"), scenario.name
        assert scenario.phases[0].start_s == 0
        assert scenario.changes() or scenario.name == "calm-health"


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ({"question": "?", "endpoint": {}, "phases": []}, "phases must be a non-empty list"),
        (
            {"question": "?", "endpoint": {}, "phases": [{"from": "1:00:00", "state": "ok"}]},
            "the first phase must start at 0:00:00",
        ),
        (
            {"question": "?", "endpoint": {}, "phases": [{"from": "0:0", "state": "ok"}]},
            "is not a time; write H:MM:SS",
        ),
        (
            {
                "question": "?",
                "endpoint": {},
                "phases": [{"state": "a"}, {"from": 0, "state": "b"}],
            },
            "phases must be in time order",
        ),
        ({"question": "?", "endpoint": {}, "phases": [{"from": 0}]}, "needs a state"),
        (
            {"question": "?", "kinds": ["calm", "fun"], "endpoint": {}, "phases": [{"state": "a"}]},
            "unknown kinds ['fun']",
        ),
    ],
)
def test_a_scenario_file_that_cannot_be_used_says_where_and_how_to_fix_it(
    tmp_path: Path, document: dict[str, Any], message: str
) -> None:
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(document))

    with pytest.raises(ScenarioError, match=r"bad\.json") as raised:
        load_scenario(path)

    assert message in str(raised.value)


def test_a_compressed_scenario_divides_the_trace_and_the_endpoints_durations() -> None:
    [limited] = load_scenarios(SCENARIOS, ["rate-limit-retry-after"])

    fast = limited.compressed(30, start_s=14 * 3600 + 120, seconds=100)

    assert fast.endpoint["baseline_interval_ms"] == 2_000
    assert [round(change.at_s, 2) for change in fast.changes()][:2] == [2.67, 82.67]
    answer = fast.answer_at(fast.start + timedelta(seconds=12))
    assert (answer.status, answer.headers["retry-after"]) == (429, "71")


@pytest.mark.django_db
def test_the_llm_column_drives_the_llm_backend_through_its_real_client() -> None:
    limited = _scenario(
        Phase(0, "ok", body=HEALTHY),
        Phase(600, "limited", status=429, body={}, retry_after_until_s=1_800),
        Phase(1_800, "ok", body=HEALTHY),
        hours=1,
    )
    with (
        scripted_llm() as base_url,
        override_settings(CRONICORN_LLM_BASE_URL=base_url, CRONICORN_LLM_MODEL="scripted"),
    ):
        sim = Simulation(limited, DatabasePlanner("llm")).run()

    assert sim.tokens > 0 and sim.sessions >= 2
    assert sum(call.status_code == 429 for call in sim.calls) == 1
    assert [w.tool for w in sim.written] == ["pause_until"]
    sessions = AnalysisSession.objects.all()
    assert {s.backend for s in sessions} == {"llm"} and len(sessions) == sim.sessions
    assert sum(s.total_tokens for s in sessions) == sim.tokens
    after = next(
        call for call in sim.calls if call.started >= limited.start + timedelta(minutes=30)
    )
    assert (after.source, after.status_code) == ("paused", 200)
