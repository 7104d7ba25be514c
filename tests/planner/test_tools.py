"""The planner's tools: schema validation, truncation, binding to one endpoint, writes."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import pytest

from endpoints.models import Endpoint, HintHistory, HintKind, Run, RunStatus, Tenant
from planner.models import AnalysisSession
from planner.tools import (
    BODY_PREVIEW_CHARS,
    TOOL_SCHEMAS,
    EndpointTools,
    ToolError,
    parse_arguments,
    tool_definitions,
)
from tests.planning import policy_job

# Validation (no database).


def test_the_tools_have_exactly_the_catalog_names() -> None:
    assert set(TOOL_SCHEMAS) == {
        "get_latest_response",
        "get_response_history",
        "get_sibling_latest_responses",
        "propose_interval",
        "propose_next_time",
        "pause_until",
        "clear_hints",
        "submit_analysis",
    }
    names = [tool["function"]["name"] for tool in tool_definitions()]
    assert names == list(TOOL_SCHEMAS)


def test_defaults_are_filled_in() -> None:
    assert parse_arguments("propose_interval", '{"intervalMs": 30000}') == {
        "intervalMs": 30000,
        "ttlMinutes": 60,
        "reason": "",
    }
    assert (
        parse_arguments("propose_next_time", {"nextRunAtIso": "2026-11-22T12:30:00Z"})["ttlMinutes"]
        == 30
    )
    assert parse_arguments("get_response_history", "") == {"limit": 2, "offset": 0}


@pytest.mark.parametrize(
    ("tool", "arguments", "message"),
    [
        ("propose_interval", '{"intervalMs": 30000', "not valid JSON"),
        ("propose_interval", "[1, 2]", "must be a JSON object"),
        ("propose_interval", {}, "intervalMs is required"),
        ("propose_interval", {"intervalMs": 1}, "intervalMs must be at least 1000"),
        ("propose_interval", {"intervalMs": "fast"}, "intervalMs must be integer"),
        ("propose_interval", {"intervalMs": 1500.5}, "intervalMs must be integer"),
        ("propose_interval", {"intervalMs": True}, "intervalMs must be integer"),
        (
            "propose_interval",
            {"intervalMs": 5000, "ttlMinutes": 0},
            "ttlMinutes must be at least 1",
        ),
        ("propose_interval", {"intervalMs": 5000, "ttlMinutes": 1441}, "at most 1440"),
        (
            "propose_interval",
            {"intervalMs": 5000, "endpointId": 7},
            "1 unknown argument: endpointId",
        ),
        ("propose_next_time", {"nextRunAtIso": "tomorrow"}, "not an ISO 8601 time"),
        ("propose_next_time", {"nextRunAtIso": "2026-11-22T12:30:00"}, "needs a time zone"),
        ("pause_until", {}, "untilIso is required"),
        ("pause_until", {"untilIso": 5}, "untilIso must be string or null"),
        ("get_response_history", {"limit": 11}, "limit must be at most 10"),
        ("get_response_history", {"offset": -1}, "offset must be at least 0"),
        ("submit_analysis", {}, "reasoning is required"),
        ("submit_analysis", {"reasoning": ""}, "reasoning must not be empty"),
        ("submit_analysis", {"reasoning": "x", "confidence": "sure"}, "must be one of"),
        ("submit_analysis", {"reasoning": "x", "next_analysis_in_ms": 1000}, "at least 300000"),
        ("submit_analysis", {"reasoning": "x", "next_analysis_in_ms": 86_400_001}, "at most"),
        ("submit_analysis", {"reasoning": "x", "actions_taken": [1]}, "actions_taken[0]"),
        ("delete_endpoint", {}, "Unknown tool 'delete_endpoint'"),
    ],
)
def test_a_bad_call_is_refused_with_a_message_saying_what_is_wrong(
    tool: str, arguments: Any, message: str
) -> None:
    with pytest.raises(ToolError, match=re.escape(message)):
        parse_arguments(tool, arguments)


def test_a_null_pause_means_resume_and_is_valid() -> None:
    assert parse_arguments("pause_until", '{"untilIso": null}') == {"untilIso": None, "reason": ""}


# Tools bound to an endpoint (database).


def _run(endpoint: Endpoint, at: datetime, body: Any, **fields: Any) -> Run:
    values: dict[str, Any] = {
        "endpoint": endpoint,
        "scheduled_for": at,
        "started_at": at,
        "finished_at": at + timedelta(milliseconds=120),
        "duration_ms": 120,
        "status": RunStatus.SUCCESS,
        "status_code": 200,
        "response_body": body,
    }
    values.update(fields)
    return Run.objects.create(**values)


@pytest.fixture
def tools_for(now: datetime) -> Callable[[Endpoint], EndpointTools]:
    def make(endpoint: Endpoint) -> EndpointTools:
        session = AnalysisSession.objects.create(endpoint=endpoint, backend="llm", started_at=now)
        return EndpointTools(endpoint=endpoint, session=session, now=now)

    return make


def test_the_latest_response_is_the_newest_finished_run(
    make_endpoint: Callable[..., Endpoint], tools_for: Any, now: datetime
) -> None:
    endpoint = make_endpoint()
    _run(endpoint, now - timedelta(minutes=2), {"queue_depth": 1})
    _run(endpoint, now - timedelta(minutes=1), {"queue_depth": 2})
    _run(endpoint, now, None, status=RunStatus.RUNNING, finished_at=None, status_code=None)

    result = tools_for(endpoint).call("get_latest_response", "{}")

    assert result["found"] is True
    assert result["responseBody"] == {"queue_depth": 2}
    assert result["status"] == "success"


def test_long_bodies_are_truncated_and_say_so(
    make_endpoint: Callable[..., Endpoint], tools_for: Any, now: datetime
) -> None:
    endpoint = make_endpoint()
    _run(endpoint, now, {"log": "x" * 5_000})

    result = tools_for(endpoint).call("get_latest_response", None)

    assert len(result["responseBody"]) == BODY_PREVIEW_CHARS
    assert result["bodyTruncated"] is True
    assert "first 1000 characters" in result["note"]


def test_history_pages_newest_first(
    make_endpoint: Callable[..., Endpoint], tools_for: Any, now: datetime
) -> None:
    endpoint = make_endpoint()
    for depth in range(5):
        _run(endpoint, now - timedelta(minutes=5 - depth), {"queue_depth": depth})
    tools = tools_for(endpoint)

    first = tools.call("get_response_history", {"limit": 2})
    last = tools.call("get_response_history", {"limit": 2, "offset": 4})

    assert [r["responseBody"]["queue_depth"] for r in first["responses"]] == [4, 3]
    assert first["hasMore"] is True and "offset 2" in first["hint"]
    assert [r["responseBody"]["queue_depth"] for r in last["responses"]] == [0]
    assert last["hasMore"] is False


def test_siblings_are_the_other_endpoints_of_the_same_job_only(
    make_endpoint: Callable[..., Endpoint], tools_for: Any, now: datetime, tenant: Any
) -> None:
    endpoint = make_endpoint(name="api")
    sibling = make_endpoint(name="worker")
    _run(sibling, now, {"ready": True})
    other_job = tenant.jobs.create(name="elsewhere")
    stranger = make_endpoint(job=other_job, name="stranger")
    _run(stranger, now, {"secret": 1})

    result = tools_for(endpoint).call("get_sibling_latest_responses", {})

    assert result["count"] == 1
    assert result["siblings"][0]["endpointName"] == "worker"
    assert result["siblings"][0]["responseBody"] == {"ready": True}


def test_an_interval_proposal_writes_the_hint_history_and_nudges_the_next_run(
    make_endpoint: Callable[..., Endpoint], tools_for: Any, now: datetime
) -> None:
    endpoint = make_endpoint(next_run_at=now + timedelta(minutes=1))
    tools = tools_for(endpoint)

    result = tools.call("propose_interval", {"intervalMs": 20_000, "ttlMinutes": 15, "reason": "r"})

    endpoint.refresh_from_db()
    assert result["ok"] is True
    assert endpoint.ai_hint_interval_ms == 20_000
    assert endpoint.ai_hint_expires_at == now + timedelta(minutes=15)
    assert endpoint.next_run_at == now + timedelta(seconds=20)
    assert endpoint.next_run_source == "ai-interval"
    history = HintHistory.objects.get(endpoint=endpoint)
    assert history.kind == HintKind.INTERVAL
    assert history.session == tools.session
    assert tools.actions == ["propose_interval"]


def test_an_interval_below_the_minimum_is_stored_as_asked_and_clamped_by_the_governor(
    make_endpoint: Callable[..., Endpoint], tools_for: Any, now: datetime
) -> None:
    endpoint = make_endpoint(min_interval_ms=30_000, next_run_at=now + timedelta(minutes=1))

    result = tools_for(endpoint).call("propose_interval", {"intervalMs": 1_000})

    endpoint.refresh_from_db()
    assert endpoint.ai_hint_interval_ms == 1_000  # what was asked, as manage.py hint stores it
    assert (endpoint.next_run_at, endpoint.next_run_source) == (
        now + timedelta(seconds=30),
        "clamped-min",
    )
    assert "the governor clamps each run to them (clamped-min)" in result["message"]


def test_an_interval_below_the_tenant_floor_is_clamped_even_under_the_endpoint_max(
    make_endpoint: Callable[..., Endpoint], tools_for: Any, now: datetime
) -> None:
    endpoint = make_endpoint(baseline_interval_ms=600_000, next_run_at=now + timedelta(hours=1))
    Tenant.objects.filter(pk=endpoint.job.tenant_id).update(min_interval_ms=300_000)
    Endpoint.objects.filter(pk=endpoint.pk).update(max_interval_ms=60_000)  # an old row
    endpoint = Endpoint.objects.select_related("job__tenant").get(pk=endpoint.pk)

    tools_for(endpoint).call("propose_interval", {"intervalMs": 1_000})

    endpoint.refresh_from_db()
    assert (endpoint.next_run_at, endpoint.next_run_source) == (
        now + timedelta(minutes=5),
        "clamped-min",
    )


@pytest.mark.parametrize("value", ["NaN", "Infinity", "-Infinity"])
def test_a_tool_call_with_nan_or_infinity_is_refused_not_fatal(
    make_endpoint: Callable[..., Endpoint], tools_for: Any, value: str
) -> None:
    endpoint = make_endpoint()

    result = tools_for(endpoint).call(
        "propose_interval", '{"intervalMs": 60000, "ttlMinutes": ' + value + "}"
    )

    assert "ttlMinutes must be a finite number" in result["error"]
    assert not HintHistory.objects.exists()


def test_a_one_shot_that_would_expire_before_it_fires_is_refused(
    make_endpoint: Callable[..., Endpoint], tools_for: Any, now: datetime
) -> None:
    endpoint = make_endpoint()
    at = (now + timedelta(hours=2)).isoformat()

    result = tools_for(endpoint).call("propose_next_time", {"nextRunAtIso": at, "ttlMinutes": 30})

    assert "a time to live of at least 121 minutes" in result["error"]
    assert not HintHistory.objects.exists()


def test_a_one_shot_in_the_future_is_written(
    make_endpoint: Callable[..., Endpoint], tools_for: Any, now: datetime
) -> None:
    endpoint = make_endpoint(next_run_at=now + timedelta(minutes=1))
    at = now + timedelta(seconds=10)

    tools_for(endpoint).call("propose_next_time", {"nextRunAtIso": at.isoformat()})

    endpoint.refresh_from_db()
    assert endpoint.ai_hint_next_run_at == at
    assert endpoint.next_run_at == at


def test_pauses_are_bounded_to_a_day_and_null_resumes(
    make_endpoint: Callable[..., Endpoint], tools_for: Any, now: datetime
) -> None:
    endpoint = make_endpoint(next_run_at=now + timedelta(minutes=1))
    tools = tools_for(endpoint)

    too_long = tools.call("pause_until", {"untilIso": "2099-01-01T00:00:00Z"})
    paused = tools.call("pause_until", {"untilIso": (now + timedelta(hours=1)).isoformat()})
    endpoint.refresh_from_db()
    paused_until = endpoint.paused_until
    resumed = tools.call("pause_until", {"untilIso": None, "reason": "back"})
    endpoint.refresh_from_db()

    assert "at most 24 hours" in too_long["error"]
    assert paused["ok"] and paused_until == now + timedelta(hours=1)
    assert resumed["ok"] and not endpoint.is_paused(now)
    kinds = list(HintHistory.objects.order_by("id").values_list("kind", flat=True))
    assert kinds == [HintKind.PAUSE, HintKind.RESUME]


def test_no_pause_while_the_run_policy_retries_the_slot(
    make_endpoint: Callable[..., Endpoint], tools_for: Any, now: datetime
) -> None:
    endpoint = make_endpoint(next_run_at=now + timedelta(seconds=10))
    policy_job(endpoint.job, retry_attempts=3)
    Endpoint.objects.filter(pk=endpoint.pk).update(retry_attempt=2)
    endpoint.refresh_from_db()

    refused = tools_for(endpoint).call(
        "pause_until", {"untilIso": (now + timedelta(minutes=5)).isoformat()}
    )

    assert refused["error"].startswith(
        "pause_until: the run policy retries this failure within its slot (attempt 2 of 3), "
        "as a person configured, and a pause would end those retries"
    )
    endpoint.refresh_from_db()
    assert endpoint.paused_until is None and not HintHistory.objects.exists()


def test_clear_hints_drops_the_active_hint(
    make_endpoint: Callable[..., Endpoint], tools_for: Any, now: datetime
) -> None:
    endpoint = make_endpoint(next_run_at=now + timedelta(minutes=1))
    tools = tools_for(endpoint)
    tools.call("propose_interval", {"intervalMs": 10_000})

    tools.call("clear_hints", {"reason": "calm"})

    endpoint.refresh_from_db()
    assert endpoint.ai_hint_interval_ms is None
    assert endpoint.ai_hint_expires_at is None


def test_every_call_is_recorded_with_its_result_or_error(
    make_endpoint: Callable[..., Endpoint], tools_for: Any
) -> None:
    tools = tools_for(make_endpoint())

    tools.call("get_latest_response", "{}")
    tools.call("propose_interval", '{"intervalMs": 1}')
    tools.call("submit_analysis", {"reasoning": "done", "confidence": "high"})

    assert [call["tool"] for call in tools.calls] == [
        "get_latest_response",
        "propose_interval",
        "submit_analysis",
    ]
    assert "result" in tools.calls[0]
    assert "at least 1000" in tools.calls[1]["error"]
    assert tools.submission is not None and tools.submission.confidence_score == 0.9
    json.dumps(tools.calls)  # stored as JSON on the session


def test_a_tool_reason_with_nul_is_refused_not_fatal(
    make_endpoint: Callable[..., Endpoint], tools_for: Any
) -> None:
    endpoint = make_endpoint()

    result = tools_for(endpoint).call("clear_hints", {"reason": "a\x00b"})

    assert "reason must not contain NUL characters" in result["error"]
    assert not HintHistory.objects.exists()
