"""A scripted OpenAI-compatible Chat Completions server on 127.0.0.1, for the
simulator's LLM column (``bench/adaptation.py``) and its tests.

It plays a small, deterministic "model": it asks for the latest response, then acts on
it as a careful operator would (a 429/503 pauses until its Retry-After, else 5 minutes;
a paused endpoint that answers again is resumed; degraded or critical tightens to a
half or a quarter of the baseline; healthy again clears its hint), then submits. Each
reply counts tokens as a quarter of the request's bytes (prompt) and 40 (completion).
What the planner's real client sends and parses is exercised end to end; the choices
are the script's, not a real model's.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

UNITS_MS = {"second": 1_000, "minute": 60_000, "hour": 3_600_000, "day": 86_400_000}
COMPLETION_TOKENS = 40


def _call(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": f"call_{name}",
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(arguments)},
    }


def _baseline_ms(system: str) -> int | None:
    found = re.search(r"Schedule: every (?:(\d+) )?(second|minute|hour|day)s?\b", system)
    if not found:
        return None
    return int(found.group(1) or 1) * UNITS_MS[found.group(2)]


def _now(messages: list[dict[str, Any]]) -> datetime:
    found = re.search(r"now \(([^)]+)\)", messages[1]["content"])
    assert found, "the user message names the time"
    return datetime.fromisoformat(found.group(1))


def _action(messages: list[dict[str, Any]], latest: dict[str, Any]) -> dict[str, Any] | None:
    system = messages[0]["content"]
    now = _now(messages)
    code = latest.get("statusCode")
    body = latest.get("responseBody")
    status = body.get("status") if isinstance(body, dict) else None
    hinted = "Active hint: none." not in system
    if code in (429, 503):
        headers = latest.get("responseHeaders") or {}
        wait = int(headers.get("retry-after", 300))
        until = datetime.fromisoformat(latest["timestamp"]) + timedelta(seconds=wait)
        if until > now:
            return _call("pause_until", {"untilIso": until.isoformat(), "reason": "rate limited"})
        return None
    if "PAUSED until" in system:
        return _call("pause_until", {"untilIso": None, "reason": "answering again"})
    baseline = _baseline_ms(system)
    if status in ("degraded", "critical") and baseline:
        factor = 4 if status == "critical" else 2
        interval = max(baseline // factor, 1_000)
        return _call("propose_interval", {"intervalMs": interval, "reason": f"{status}"})
    if hinted and status in (None, "healthy", "ok"):
        return _call("clear_hints", {"reason": "healthy again"})
    return None


def next_reply(messages: list[dict[str, Any]]) -> dict[str, Any]:
    """The script's reply to a conversation."""
    last = messages[-1]
    calls: list[dict[str, Any]]
    if last["role"] == "user" and len(messages) == 2:
        calls = [_call("get_latest_response", {})]
    elif last["role"] == "tool" and last.get("tool_call_id") == "call_get_latest_response":
        latest = json.loads(last["content"])
        action = _action(messages, latest) if latest.get("found") else None
        calls = [action] if action else [_submit("nothing to change")]
    else:
        calls = [_submit("acted on the latest response")]
    prompt = len(json.dumps(messages)) // 4
    return {
        "id": "chatcmpl-scripted",
        "object": "chat.completion",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": None, "tool_calls": calls},
                "finish_reason": "tool_calls",
            }
        ],
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": COMPLETION_TOKENS,
            "total_tokens": prompt + COMPLETION_TOKENS,
        },
    }


def _submit(reasoning: str) -> dict[str, Any]:
    return _call(
        "submit_analysis",
        {"reasoning": reasoning, "confidence": "medium", "next_analysis_in_ms": 300_000},
    )


@contextmanager
def scripted_llm() -> Iterator[str]:
    """Serve the script on 127.0.0.1; yields its base URL (``…/v1``)."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", 0))
            request = json.loads(self.rfile.read(length))
            payload = json.dumps(next_reply(request["messages"])).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()
