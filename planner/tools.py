"""The planner's tools, bound to the one endpoint under analysis.

Both backends act only through these tools: the LLM calls them by name with JSON
arguments, the rules backend calls them directly. Every argument is validated against
the same JSON schema the model is shown (``TOOL_SCHEMAS``) before anything is read or
written; a bad call returns an error message to the caller and writes nothing. No tool
takes an endpoint argument, so nothing a response body says can reach another endpoint.
Action tools write through ``endpoints.operations`` (hint, hint history, nudge).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from endpoints import operations
from endpoints.audit import Actor
from endpoints.models import Endpoint, Run, RunStatus, Source
from endpoints.wording import count_words
from planner.models import AnalysisSession

BODY_PREVIEW_CHARS = 1_000
ERROR_PREVIEW_CHARS = 300
MAX_HISTORY = 10
MAX_SIBLINGS = 20
MIN_INTERVAL_MS = 1_000
MAX_INTERVAL_MS = 30 * 24 * 3_600_000
MIN_TTL_MINUTES = 1
MAX_TTL_MINUTES = 1_440
MIN_NEXT_ANALYSIS_MS = 5 * 60_000
MAX_NEXT_ANALYSIS_MS = 24 * 3_600_000
# An AI pause is bounded so an untrusted body cannot stop an endpoint for good; the
# planner re-analyses paused endpoints and may extend it.
MAX_PAUSE = timedelta(hours=24)
# A one-shot slightly in the past (clock skew, a slow model) still means "run now".
ONESHOT_PAST_TOLERANCE = timedelta(minutes=1)
CONFIDENCE_SCORES = {"low": 0.3, "medium": 0.6, "high": 0.9}
ACTION_TOOLS = ("propose_interval", "propose_next_time", "pause_until", "clear_hints")

_REASON = {
    "type": "string",
    "maxLength": 500,
    "default": "",
    "description": "Why, in one sentence a person can read.",
}
_TTL = {
    "type": "number",
    "minimum": MIN_TTL_MINUTES,
    "maximum": MAX_TTL_MINUTES,
    "description": "How long the hint stays valid, in minutes (1..1440).",
}


def _object(properties: dict[str, Any], required: tuple[str, ...] = ()) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": list(required),
        "additionalProperties": False,
    }


TOOL_SCHEMAS: dict[str, dict[str, Any]] = {
    "get_latest_response": {
        "description": "The most recent response of this endpoint (body truncated).",
        "parameters": _object({}),
    },
    "get_response_history": {
        "description": "Recent responses of this endpoint, newest first, to see trends "
        f"(bodies truncated to {BODY_PREVIEW_CHARS} characters).",
        "parameters": _object(
            {
                "limit": {"type": "integer", "minimum": 1, "maximum": MAX_HISTORY, "default": 2},
                "offset": {"type": "integer", "minimum": 0, "maximum": 1_000, "default": 0},
            }
        ),
    },
    "get_sibling_latest_responses": {
        "description": "The latest response of every other endpoint in the same job "
        "(read only; bodies truncated).",
        "parameters": _object({}),
    },
    "propose_interval": {
        "description": "Run this endpoint every intervalMs for ttlMinutes, overriding the "
        "baseline. The governor still clamps to the endpoint's min/max.",
        "parameters": _object(
            {
                "intervalMs": {
                    "type": "integer",
                    "minimum": MIN_INTERVAL_MS,
                    "maximum": MAX_INTERVAL_MS,
                    "description": "Interval in milliseconds (at least 1000).",
                },
                "ttlMinutes": {**_TTL, "default": 60},
                "reason": _REASON,
            },
            ("intervalMs",),
        ),
    },
    "propose_next_time": {
        "description": "Run this endpoint once at nextRunAtIso (competes with the baseline: "
        "the earlier wins).",
        "parameters": _object(
            {
                "nextRunAtIso": {
                    "type": "string",
                    "format": "date-time",
                    "description": "ISO 8601 time with a zone, e.g. 2026-11-22T14:30:00Z.",
                },
                "ttlMinutes": {**_TTL, "default": 30},
                "reason": _REASON,
            },
            ("nextRunAtIso",),
        ),
    },
    "pause_until": {
        "description": "Pause this endpoint until untilIso (at most 24 h ahead), or resume "
        "it with null.",
        "parameters": _object(
            {
                "untilIso": {
                    "type": ["string", "null"],
                    "format": "date-time",
                    "description": "ISO 8601 time with a zone, or null to resume.",
                },
                "reason": _REASON,
            },
            ("untilIso",),
        ),
    },
    "clear_hints": {
        "description": "Drop the active interval and one-shot hints: back to the baseline.",
        "parameters": _object({"reason": _REASON}),
    },
    "submit_analysis": {
        "description": "Finish the analysis. Must be the last call.",
        "parameters": _object(
            {
                "reasoning": {"type": "string", "minLength": 1, "maxLength": 4_000},
                "actions_taken": {
                    "type": "array",
                    "items": {"type": "string", "maxLength": 100},
                    "maxItems": 20,
                    "default": [],
                },
                "confidence": {"type": "string", "enum": list(CONFIDENCE_SCORES)},
                "next_analysis_in_ms": {
                    "type": "integer",
                    "minimum": MIN_NEXT_ANALYSIS_MS,
                    "maximum": MAX_NEXT_ANALYSIS_MS,
                    "description": "When to look again, 300000 (5 min)..86400000 (24 h).",
                },
            },
            ("reasoning",),
        ),
    },
}


def tool_definitions() -> list[dict[str, Any]]:
    """The tools in the Chat Completions ``tools`` format."""
    return [
        {"type": "function", "function": {"name": name, **spec}}
        for name, spec in TOOL_SCHEMAS.items()
    ]


class ToolError(Exception):
    """A call the tool refused; the message goes back to the model as the tool's result."""


def parse_arguments(name: str, raw: str | dict[str, Any] | None) -> dict[str, Any]:
    """Decode and validate one call's arguments; defaults filled in. Raises ToolError."""
    spec = TOOL_SCHEMAS.get(name)
    if spec is None:
        raise ToolError(f"Unknown tool {name!r}; the tools are: {', '.join(TOOL_SCHEMAS)}.")
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        raw = {}
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except ValueError as exc:
            raise ToolError(f"{name}: the arguments are not valid JSON ({exc}).") from None
    if not isinstance(raw, dict):
        raise ToolError(f"{name}: the arguments must be a JSON object.")
    schema = spec["parameters"]
    _check_object(name, schema, raw)
    args = dict(raw)
    for key, prop in schema["properties"].items():
        if key not in args and "default" in prop:
            args[key] = prop["default"]
    return args


def _check_object(tool: str, schema: dict[str, Any], value: dict[str, Any]) -> None:
    allowed = schema["properties"]
    unknown = sorted(set(value) - set(allowed))
    if unknown:
        known = ", ".join(allowed) or "none"
        raise ToolError(
            f"{tool}: {count_words(len(unknown), 'unknown argument')}: {', '.join(unknown)}; "
            f"this tool takes: {known}. "
            "Tools act only on the endpoint under analysis."
        )
    for key in schema["required"]:
        if key not in value:
            raise ToolError(f"{tool}: {key} is required.")
    for key, item in value.items():
        _check_value(f"{tool}: {key}", allowed[key], item)


def _check_value(where: str, prop: dict[str, Any], value: Any) -> None:
    types = prop["type"] if isinstance(prop["type"], list) else [prop["type"]]
    if value is None:
        if "null" not in types:
            raise ToolError(f"{where} must not be null.")
        return
    kind = next((t for t in types if _is_type(t, value)), None)
    if kind is None:
        raise ToolError(f"{where} must be {' or '.join(types)}; got {json.dumps(value)[:80]}.")
    if "enum" in prop and value not in prop["enum"]:
        raise ToolError(f"{where} must be one of {', '.join(prop['enum'])}; got {value!r}.")
    if kind in ("integer", "number"):
        _check_range(where, prop, value)
    elif kind == "string":
        _check_string(where, prop, value)
    elif kind == "array":
        if len(value) > prop.get("maxItems", len(value)):
            raise ToolError(f"{where} may have at most {prop['maxItems']} items.")
        for index, item in enumerate(value):
            _check_value(f"{where}[{index}]", prop["items"], item)


def _is_type(kind: str, value: Any) -> bool:
    if isinstance(value, bool):
        return kind == "boolean"
    if kind == "integer":
        return isinstance(value, int) or (isinstance(value, float) and value.is_integer())
    python_types: dict[str, type | tuple[type, ...]] = {
        "number": (int, float),
        "string": str,
        "array": list,
        "null": type(None),
    }
    return isinstance(value, python_types[kind])


def _check_range(where: str, prop: dict[str, Any], value: float) -> None:
    if not math.isfinite(value):  # JSON from a model may carry NaN or Infinity
        raise ToolError(f"{where} must be a finite number; got {value}.")
    if "minimum" in prop and value < prop["minimum"]:
        raise ToolError(f"{where} must be at least {prop['minimum']}; got {value}.")
    if "maximum" in prop and value > prop["maximum"]:
        raise ToolError(f"{where} must be at most {prop['maximum']}; got {value}.")


def _check_string(where: str, prop: dict[str, Any], value: str) -> None:
    if "\x00" in value:  # PostgreSQL cannot store it: refused, not a failed session
        raise ToolError(f"{where} must not contain NUL characters.")
    if len(value) < prop.get("minLength", 0):
        raise ToolError(f"{where} must not be empty.")
    if len(value) > prop.get("maxLength", len(value)):
        raise ToolError(f"{where} is too long (at most {prop['maxLength']} characters).")
    if prop.get("format") == "date-time":
        parse_iso(where, value)


def parse_iso(where: str, value: str) -> datetime:
    try:
        at = datetime.fromisoformat(value)
    except ValueError:
        raise ToolError(
            f"{where} is not an ISO 8601 time: {value!r}; use e.g. 2026-11-22T14:30:00Z."
        ) from None
    if at.tzinfo is None:
        raise ToolError(f"{where} needs a time zone, e.g. {value}Z or {value}+01:00.")
    return at


@dataclass(frozen=True)
class Submission:
    reasoning: str
    actions_taken: list[str]
    confidence: str | None
    next_analysis_in_ms: int | None

    @property
    def confidence_score(self) -> float | None:
        return CONFIDENCE_SCORES.get(self.confidence or "")


@dataclass
class EndpointTools:
    """The tools for one analysis session; records every call (the session's tool_calls)."""

    endpoint: Endpoint
    session: AnalysisSession
    now: datetime
    calls: list[dict[str, Any]] = field(default_factory=list)
    actions: list[str] = field(default_factory=list)
    submission: Submission | None = None

    def call(self, name: str, raw_arguments: str | dict[str, Any] | None) -> dict[str, Any]:
        """Run one tool; a refused call returns {"error": ...} and writes nothing."""
        record: dict[str, Any] = {"tool": name, "arguments": raw_arguments}
        self.calls.append(record)
        try:
            args = parse_arguments(name, raw_arguments)
            record["arguments"] = args
            result = self._handlers()[name](args)
        except (ToolError, operations.OperationRefused) as exc:
            record["error"] = str(exc)
            return {"error": str(exc)}
        record["result"] = result
        if name in ACTION_TOOLS:
            self.actions.append(name)
        return result

    def _handlers(self) -> dict[str, Callable[[dict[str, Any]], dict[str, Any]]]:
        return {
            "get_latest_response": self._latest_response,
            "get_response_history": self._response_history,
            "get_sibling_latest_responses": self._sibling_responses,
            "propose_interval": self._propose_interval,
            "propose_next_time": self._propose_next_time,
            "pause_until": self._pause_until,
            "clear_hints": self._clear_hints,
            "submit_analysis": self._submit_analysis,
        }

    # Query tools.

    def _latest_response(self, args: dict[str, Any]) -> dict[str, Any]:
        run = finished_runs(self.endpoint).first()
        if run is None:
            return {"found": False, "note": "This endpoint has no finished runs yet."}
        return {"found": True, **describe_run(run)}

    def _response_history(self, args: dict[str, Any]) -> dict[str, Any]:
        limit, offset = int(args["limit"]), int(args["offset"])
        runs = list(finished_runs(self.endpoint)[offset : offset + limit + 1])
        has_more = len(runs) > limit
        result: dict[str, Any] = {
            "count": min(len(runs), limit),
            "hasMore": has_more,
            "pagination": {"offset": offset, "limit": limit, "nextOffset": offset + limit},
            "responses": [describe_run(run) for run in runs[:limit]],
        }
        if has_more:
            result["hint"] = f"More history available: call again with offset {offset + limit}."
        return result

    def _sibling_responses(self, args: dict[str, Any]) -> dict[str, Any]:
        siblings = (
            Endpoint.objects.live()
            .filter(job_id=self.endpoint.job_id)
            .exclude(pk=self.endpoint.pk)
            .order_by("name")[:MAX_SIBLINGS]
        )
        entries = []
        for sibling in siblings:
            run = finished_runs(sibling).first()
            entry: dict[str, Any] = {"endpointName": sibling.name}
            entries.append({**entry, **describe_run(run)} if run else {**entry, "found": False})
        return {"count": len(entries), "siblings": entries, "note": "Read only."}

    # Action tools: all writes go through endpoints.operations.

    def _propose_interval(self, args: dict[str, Any]) -> dict[str, Any]:
        # Stored as asked, as `manage.py hint` does: the governor clamps to the endpoint's
        # and the tenant's bounds at every plan and names it (clamped-min/-max).
        interval = int(args["intervalMs"])
        operations.apply_hint(
            self.endpoint,
            now=self.now,
            interval_ms=interval,
            ttl=timedelta(minutes=args["ttlMinutes"]),
            reason=args["reason"],
            actor=Actor.planner(self.session),
        )
        written = self._written(f"Interval hint of {interval} ms written.")
        if written["nextRunSource"] in (Source.CLAMPED_MIN, Source.CLAMPED_MAX):
            written["message"] += (
                " It is outside this endpoint's (or its tenant's) bounds, so the governor "
                f"clamps each run to them ({written['nextRunSource']})."
            )
        return written

    def _propose_next_time(self, args: dict[str, Any]) -> dict[str, Any]:
        at = parse_iso("nextRunAtIso", args["nextRunAtIso"])
        ttl = timedelta(minutes=args["ttlMinutes"])
        if at < self.now - ONESHOT_PAST_TOLERANCE:
            raise ToolError(
                f"propose_next_time: {args['nextRunAtIso']} is in the past "
                f"(now is {self.now.isoformat()}); give a future time."
            )
        operations.apply_hint(
            self.endpoint,
            now=self.now,
            next_run_at=at,
            ttl=ttl,
            reason=args["reason"],
            actor=Actor.planner(self.session),
        )
        return self._written(f"One-shot hint for {at.isoformat()} written.")

    def _pause_until(self, args: dict[str, Any]) -> dict[str, Any]:
        if args["untilIso"] is None:
            operations.resume_endpoint(
                self.endpoint,
                now=self.now,
                reason=args["reason"],
                actor=Actor.planner(self.session),
            )
            return self._written("Endpoint resumed.")
        if retrying := policy_retry_words(self.endpoint):
            raise ToolError(
                f"pause_until: {retrying}, as a person configured, and a pause would end "
                "those retries; the retry waits for the answer's Retry-After itself. "
                "Leave the slot to the run policy."
            )
        until = parse_iso("untilIso", args["untilIso"])
        if until <= self.now:
            raise ToolError(
                f"pause_until: {args['untilIso']} is not in the future "
                f"(now is {self.now.isoformat()}); use null to resume."
            )
        if until > self.now + MAX_PAUSE:
            raise ToolError(
                "pause_until: the planner may pause for at most 24 hours "
                f"(until {(self.now + MAX_PAUSE).isoformat()}); it can extend later."
            )
        operations.pause_endpoint(
            self.endpoint,
            now=self.now,
            until=until,
            reason=args["reason"],
            actor=Actor.planner(self.session),
        )
        return self._written(f"Endpoint paused until {until.isoformat()}.")

    def _clear_hints(self, args: dict[str, Any]) -> dict[str, Any]:
        operations.clear_hints(
            self.endpoint, now=self.now, reason=args["reason"], actor=Actor.planner(self.session)
        )
        return self._written("Hints cleared: the baseline schedule applies.")

    def _submit_analysis(self, args: dict[str, Any]) -> dict[str, Any]:
        interval = args.get("next_analysis_in_ms")
        self.submission = Submission(
            reasoning=args["reasoning"],
            actions_taken=list(args["actions_taken"]),
            confidence=args.get("confidence"),
            next_analysis_in_ms=int(interval) if interval is not None else None,
        )
        return {"status": "analysis_complete", "actions_taken": self.actions}

    def _written(self, message: str) -> dict[str, Any]:
        self.endpoint.refresh_from_db()
        endpoint = self.endpoint
        return {
            "ok": True,
            "message": message,
            "nextRunAt": _iso(endpoint.next_run_at),
            "nextRunSource": endpoint.next_run_source,
            "activeHint": active_hint(endpoint, self.now),
            "pausedUntil": _iso(endpoint.paused_until) if endpoint.is_paused(self.now) else None,
        }


def policy_retry_words(endpoint: Endpoint) -> str:
    """What the run policy does with the slot's failure while it retries it within the
    slot (a retry planned or in flight, attempts left), in words; "" otherwise. What a
    person configured wins over the planner's guesses: the planner never pauses then."""
    attempt = endpoint.retry_attempt
    attempts = endpoint.policy.retry_attempts
    if attempt < 2 or attempt > attempts:
        return ""
    return f"the run policy retries this failure within its slot (attempt {attempt} of {attempts})"


def finished_runs(endpoint: Endpoint) -> Any:
    return Run.objects.filter(endpoint=endpoint).exclude(status=RunStatus.RUNNING)


def describe_run(run: Run) -> dict[str, Any]:
    """One run as the model sees it: the body cut to BODY_PREVIEW_CHARS, flagged."""
    body, cut = preview_body(run.response_body)
    described: dict[str, Any] = {
        "responseBody": body,
        "timestamp": _iso(run.started_at),
        "status": run.status,
        "statusCode": run.status_code,
        "durationMs": run.duration_ms,
    }
    if run.response_headers:
        described["responseHeaders"] = run.response_headers  # rate limits, Content-Type
    if run.error:
        described["error"] = run.error[:ERROR_PREVIEW_CHARS]
    if cut or run.response_truncated:
        described["bodyTruncated"] = True
        described["note"] = (
            f"responseBody is cut to its first {BODY_PREVIEW_CHARS} characters"
            if cut
            else "the endpoint's response exceeded its size cap and was cut"
        )
    return described


def preview_body(body: Any) -> tuple[Any, bool]:
    """The body unchanged when short, else its first characters as text (and True)."""
    text = body if isinstance(body, str) else json.dumps(body, ensure_ascii=False)
    if len(text) <= BODY_PREVIEW_CHARS:
        return body, False
    return text[:BODY_PREVIEW_CHARS], True


def active_hint(endpoint: Endpoint, now: datetime) -> dict[str, Any] | None:
    if endpoint.ai_hint_expires_at is None or endpoint.ai_hint_expires_at <= now:
        return None
    return {
        "intervalMs": endpoint.ai_hint_interval_ms,
        "nextRunAt": _iso(endpoint.ai_hint_next_run_at),
        "expiresAt": _iso(endpoint.ai_hint_expires_at),
        "reason": endpoint.ai_hint_reason,
    }


def _iso(at: datetime | None) -> str | None:
    return at.isoformat() if at else None
