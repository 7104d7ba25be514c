"""Log lines an operator can search: scheduler ids on every line, JSON on demand, no secrets."""

from __future__ import annotations

import io
import json
import logging
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from celery.contrib.testing.worker import start_worker

from cronicorn_site.celery import app
from cronicorn_site.logs import (
    JsonFormatter,
    SchedulerContextFilter,
    TextFormatter,
    mask_secrets,
)
from endpoints.engine.logs import log_context

CLAIM = "6f1c0b6e-8c1d-4a8e-9a57-1b2c3d4e5f60"
logger = logging.getLogger("test.ops.scheduler")


class Capture:
    """A handler like the console one (same filter, chosen formatter) writing to memory."""

    def __init__(self, formatter: logging.Formatter) -> None:
        self.stream = io.StringIO()
        self.handler = logging.StreamHandler(self.stream)
        self.handler.addFilter(SchedulerContextFilter())
        self.handler.setFormatter(formatter)

    def lines(self) -> list[str]:
        return self.stream.getvalue().splitlines()

    def records(self) -> list[dict]:
        return [json.loads(line) for line in self.lines()]


@contextmanager
def capturing(formatter: logging.Formatter) -> Iterator[Capture]:
    capture = Capture(formatter)
    root = logging.getLogger()
    root.addHandler(capture.handler)
    old_level = logger.level
    logger.setLevel(logging.DEBUG)
    try:
        yield capture
    finally:
        root.removeHandler(capture.handler)
        logger.setLevel(old_level)


@pytest.fixture
def capture_json() -> Iterator[Capture]:
    with capturing(JsonFormatter()) as capture:
        yield capture


@pytest.fixture
def capture_text() -> Iterator[Capture]:
    with capturing(TextFormatter()) as capture:
        yield capture


def test_a_scheduler_line_in_json_carries_all_four_ids_even_when_unknown(capture_json) -> None:
    capture = capture_json
    scheduler = logging.getLogger("cronicorn.scheduler")
    scheduler.addHandler(capture.handler)
    try:
        scheduler.warning("claimed", extra={"endpoint_id": 7, "claim_token": uuid.UUID(CLAIM)})
    finally:
        scheduler.removeHandler(capture.handler)
    (record,) = [r for r in capture.records() if r["logger"] == "cronicorn.scheduler"]
    assert record["message"] == "claimed"
    assert record["level"] == "WARNING"
    assert record["endpoint_id"] == 7
    assert record["claim_token"] == CLAIM
    assert record["run_id"] is None
    assert record["source"] is None


def test_a_line_outside_the_scheduler_gets_no_id_fields(capture_json) -> None:
    capture = capture_json
    logger.warning("unrelated")
    (record,) = capture.records()
    assert "endpoint_id" not in record
    assert "claim_token" not in record


def test_ids_bound_around_a_unit_of_work_reach_every_line_inside_and_no_line_after(
    capture_json,
) -> None:
    capture = capture_json
    with log_context(endpoint_id=3, claim_token=CLAIM, source="ai-interval"):
        logger.info("calling the endpoint")
        with log_context(run_id=41):
            logger.info("run finished", extra={"source": "clamped-min"})
    logger.info("after")
    inside, finished, after = capture.records()
    assert (inside["endpoint_id"], inside["claim_token"], inside["run_id"]) == (3, CLAIM, None)
    assert inside["source"] == "ai-interval"
    # An explicit extra wins over the bound value.
    assert (finished["run_id"], finished["source"]) == (41, "clamped-min")
    assert "endpoint_id" not in after


def test_text_lines_end_with_the_ids_they_carry(capture_text) -> None:
    capture = capture_text
    with log_context(endpoint_id=3, run_id=41):
        logger.info("run success in 12 ms")
    (line,) = capture.lines()
    assert line.endswith("run success in 12 ms endpoint_id=3 run_id=41")
    assert "INFO test.ops.scheduler" in line


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        ("headers: {'Authorization': 'Bearer abc.def-123456'}", "abc.def-123456"),
        ('{"authorization": "Basic dXNlcjpwYXNzd29yZA=="}', "dXNlcjpwYXNzd29yZA=="),
        ("calling https://api.example.com/?api_key=s3cr3tvalue&x=1", "s3cr3tvalue"),
        ("connecting to redis://:hunter2pass@redis:6379/0", "hunter2pass"),
        ("X-Api-Key: 0123456789abcdef", "0123456789abcdef"),
        ("password=correct-horse-battery", "correct-horse-battery"),
        (json.dumps({"body": json.dumps({"api_key": "k-0123456789"})}), "k-0123456789"),
        ("sent Bearer eyJhbGciOiJIUzI1NiJ9.payload.sig upstream", "eyJhbGciOiJIUzI1NiJ9"),
    ],
)
def test_secret_looking_values_are_masked(text: str, secret: str) -> None:
    masked = mask_secrets(text)
    assert secret not in masked
    assert "••••" in masked


def test_claim_tokens_and_secret_header_names_are_not_mistaken_for_secrets() -> None:
    text = f'{{"claim_token": "{CLAIM}", "secret_header_names": ["X-Key"]}}'
    assert mask_secrets(text) == text


def test_configured_secret_values_are_masked_wherever_they_appear(settings) -> None:
    settings.CRONICORN_LLM_API_KEY = "sk-test-0123456789"
    assert mask_secrets("LLM said no to sk-test-0123456789 today") == "LLM said no to •••• today"


def test_secrets_in_extra_fields_and_tracebacks_never_reach_the_json_line(capture_json) -> None:
    capture = capture_json
    try:
        raise RuntimeError("upstream rejected Authorization: Bearer tok-0123456789")
    except RuntimeError:
        logger.exception(
            "request failed", extra={"headers": {"Authorization": "Bearer hdr-0123456789"}}
        )
    (line,) = capture.lines()
    assert "tok-0123456789" not in line
    assert "hdr-0123456789" not in line
    record = json.loads(line)
    assert "RuntimeError" in record["exc_info"]


task_done = threading.Event()


@app.task(name="tests.ops.log_in_task")
def log_in_task(endpoint_id: int, claim_token: str) -> None:
    with log_context(endpoint_id=endpoint_id, claim_token=claim_token):
        logging.getLogger("test.ops.task").warning("executing")
    task_done.set()


def test_a_celery_task_line_carries_the_task_id_and_the_bound_ids() -> None:
    task_done.clear()
    # A queue of its own: no other test's worker or leftover message can get in the way.
    queue = "ops-logging-test"
    with app.connection_for_write() as connection:
        connection.default_channel.queue_purge(queue)
    # Starting the worker applies LOGGING (setup_logging), so capture from after it.
    with (
        start_worker(
            app, queues=[queue], pool="solo", perform_ping_check=False, loglevel="WARNING"
        ),
        capturing(JsonFormatter()) as capture,
    ):
        result = log_in_task.apply_async(args=[5, CLAIM], queue=queue)
        assert task_done.wait(timeout=20), "the worker did not run the task"
    (record,) = [r for r in capture.records() if r.get("message") == "executing"]
    assert record["task_id"] == result.id
    assert record["task_name"] == "tests.ops.log_in_task"
    assert (record["endpoint_id"], record["claim_token"]) == (5, CLAIM)


def test_a_request_made_on_the_event_loop_logs_with_the_ids_of_its_run() -> None:
    """The executor runs on its own thread's event loop; its lines still carry the ids
    bound where the request was handed over."""
    from endpoints.engine.executor import HttpRequest, NetworkPolicy, submit_request

    capture = Capture(JsonFormatter())
    executor_logger = logging.getLogger("cronicorn.executor")
    executor_logger.addHandler(capture.handler)
    try:
        strict = NetworkPolicy(allow_private=False)
        with log_context(endpoint_id=3, claim_token=CLAIM, run_id=41):
            request = submit_request(HttpRequest(url="http://127.0.0.1:9/"), policy=strict)
        result = request.result(timeout=10)
    finally:
        executor_logger.removeHandler(capture.handler)

    assert result.error.startswith("blocked: 127.0.0.1 is a loopback address")
    [refused] = [r for r in capture.records() if r["message"].startswith("refused")]
    assert (refused["endpoint_id"], refused["claim_token"], refused["run_id"]) == (3, CLAIM, 41)
