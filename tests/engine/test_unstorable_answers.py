"""Answers PostgreSQL cannot store as they came: NaN and Infinity (Python's json writes
them by default, so many services send them), NUL and unpaired surrogates (escaped in
JSON, or a NUL byte in text). The run keeps the body with those values replaced ("NaN",
"Infinity", U+FFFD), whichever path records it: a scheduled run through the engine, or
a Test (the API's route here; the admin, MCP and the command call the same operation).
Before, a scheduled run dropped the whole body (and the planner had nothing to read) and
a Test answered 500 and left its run ``running``."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from django.utils import timezone

from endpoints.engine.claiming import claim_due_endpoints
from endpoints.engine.running import call_claim, record_outcomes
from endpoints.models import Endpoint, Run, RunStatus, Slot, Source
from tests.http_targets import TargetServer

pytestmark = pytest.mark.usefixtures("loopback_allowed")

# (what the target sends, what the run keeps)
ANSWERS: list[tuple[bytes, Any]] = [
    (
        b'{"queue_depth": 12, "mean": NaN, "max": Infinity, "min": -Infinity}',
        {"queue_depth": 12, "mean": "NaN", "max": "Infinity", "min": "-Infinity"},
    ),
    (b'{"v": 1e400, "w": [-1e999]}', {"v": "Infinity", "w": ["-Infinity"]}),
    (b'{"name": "a\\u0000b", "k\\u0000": 1}', {"name": "a\ufffdb", "k\ufffd": 1}),
    (b'{"emoji": "half \\ud83d", "ok": "\\ud83d\\ude00"}', {"emoji": "half \ufffd", "ok": "😀"}),
    (b"plain text with a NUL \x00 byte", "plain text with a NUL \ufffd byte"),
]
IDS = ["nan-infinity", "overflow", "nul-escape", "lone-surrogate", "nul-byte-text"]


@pytest.mark.django_db
@pytest.mark.parametrize(("raw", "kept"), ANSWERS, ids=IDS)
def test_a_scheduled_run_keeps_the_body_with_what_cannot_be_stored_replaced(
    make_endpoint: Callable[..., Endpoint], target: TargetServer, raw: bytes, kept: Any
) -> None:
    endpoint = make_endpoint(url=target.url("/stats"), baseline_interval_ms=600_000)
    target.reply("/stats", raw=raw)
    now = timezone.now()
    Slot.objects.update(next_run_at=now, next_run_source=Source.BASELINE_INTERVAL)
    claims = claim_due_endpoints(now=now, limit=10, horizon_ms=0)

    record_outcomes([call_claim(claim) for claim in claims])  # type: ignore[misc]

    run = Run.objects.get(endpoint=endpoint)
    assert (run.status, run.error) == (RunStatus.SUCCESS, "")
    assert run.response_body == kept
    endpoint.refresh_from_db()
    assert endpoint.claim_token is None and endpoint.next_run_at is not None


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("raw", "kept"),
    # A literal past a float's range (no encoder writes one) is made storable by the
    # engine's recording only; see endpoints/engine/bodies.py.
    [answer for answer, name in zip(ANSWERS, IDS, strict=True) if name != "overflow"],
    ids=[name for name in IDS if name != "overflow"],
)
def test_a_test_request_from_the_api_keeps_the_body_too(
    http: httpx.Client,
    make_endpoint: Callable[..., Endpoint],
    target: TargetServer,
    raw: bytes,
    kept: Any,
) -> None:
    endpoint = make_endpoint(url=target.url("/stats"))
    target.reply("/stats", raw=raw)

    response = http.post(f"/endpoints/{endpoint.pk}/test")

    assert response.status_code == 200, response.text
    assert json.loads(response.text)["response_body"] == kept
    run = Run.objects.get(endpoint=endpoint)
    assert (run.status, run.response_body) == (RunStatus.SUCCESS, kept)


@pytest.mark.django_db(transaction=True)
def test_a_kept_header_of_bytes_that_are_not_utf8_is_kept_replaced(
    http: httpx.Client, make_endpoint: Callable[..., Endpoint], target: TargetServer
) -> None:
    # The bytes FF FE (sent as latin-1): the HTTP client reads them as lone surrogates.
    target.reply("/limited", status=429, headers={"Retry-After": "\xff\xfe"})
    endpoint = make_endpoint(url=target.url("/limited"))

    response = http.post(f"/endpoints/{endpoint.pk}/test")

    assert response.status_code == 200, response.text
    run = Run.objects.get(endpoint=endpoint)
    assert run.status == RunStatus.FAILURE and run.status_code == 429
    assert run.response_headers["retry-after"] == "\ufffd\ufffd"
