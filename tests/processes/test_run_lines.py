"""What runscheduler prints for each run: one line with the endpoint, status, HTTP code,
duration in words and the next run; the same fields in JSON logs; ``--quiet`` keeps the
failures and recoveries only. (The line-by-line scenario with alerts is in
test_alerts_end_to_end.py.)"""

from __future__ import annotations

import itertools
import json
import logging
from datetime import timedelta

import pytest
from django.utils import timezone

from cronicorn_site.logs import JsonFormatter, SchedulerContextFilter
from endpoints.embedded import EmbeddedScheduler
from endpoints.models import Run, RunStatus
from tests.engine_processes import child_database_url, manage, process_env, running, wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("loopback_allowed")]


class Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []
        self.setFormatter(JsonFormatter())
        self.addFilter(SchedulerContextFilter())

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


def test_json_logs_carry_each_runs_fields(make_endpoint, target):
    endpoint = make_endpoint(name="api", url=target.url("/api"), next_run_at=timezone.now())
    handler = Lines()
    logger = logging.getLogger("cronicorn.scheduler")
    logger.addHandler(handler)
    scheduler = EmbeddedScheduler(max_in_flight=2)
    try:
        scheduler.tick_once()
        assert wait_until(lambda: Run.objects.filter(status=RunStatus.SUCCESS).exists(), timeout=10)
        assert wait_until(lambda: any('"ops/api' in line for line in handler.lines), timeout=5)
    finally:
        scheduler.shutdown(timeout=5)
        logger.removeHandler(handler)

    [line] = [json.loads(line) for line in handler.lines if '"ops/api' in line]
    run = Run.objects.get(endpoint=endpoint)
    assert line["level"] == "INFO"
    assert line["message"].startswith("ops/api success HTTP 200 in ")
    assert {k: line[k] for k in ("endpoint", "status", "status_code", "run_id", "error")} == {
        "endpoint": "ops/api",
        "status": "success",
        "status_code": 200,
        "run_id": run.pk,
        "error": None,
    }
    assert line["next_run_source"] == "baseline-interval"
    assert line["next_run_at"].startswith(str(run.started_at.year))
    assert line["duration_ms"] == run.duration_ms


def test_quiet_prints_the_failure_and_the_recovery_but_no_healthy_run(
    make_endpoint, target, tmp_path
):
    answers = itertools.chain([200, 500], itertools.repeat(200))
    reply = target.reply("/flaky")
    reply.action = lambda: setattr(reply, "status", next(answers))
    make_endpoint(
        name="flaky",
        url=target.url("/flaky"),
        baseline_interval_ms=1_000,
        next_run_at=timezone.now() + timedelta(seconds=1),
    )
    log = tmp_path / "scheduler.log"
    env = process_env(DATABASE_URL=child_database_url(), CRONICORN_LOG_LEVEL="INFO")
    with running(manage("runscheduler", "--quiet"), env=env, log=log):
        assert wait_until(lambda: len(target.hits("/flaky")) >= 5, timeout=60), log.read_text()

    # The run lines (the planner, if its loop came round, names the endpoint too).
    lines = [
        line
        for line in log.read_text().splitlines()
        if "ops/flaky" in line and " cronicorn.planner " not in line
    ]
    assert [line.split(" ")[2:5] for line in lines] == [
        ["WARNING", "cronicorn.scheduler", "ops/flaky"],
        ["WARNING", "cronicorn.scheduler", "ops/flaky"],
    ]
    assert " failure HTTP 500 " in lines[0] and lines[0].split(" endpoint_id=")[0].endswith(
        ": HTTP 500 Internal Server Error"
    )
    assert " success (recovered) HTTP 200 " in lines[1]
    assert "scheduler started" not in log.read_text()


def test_a_minute_with_many_runs_prints_one_summary_line(make_endpoint, caplog):
    endpoint = make_endpoint(name="busy")
    now = timezone.now()
    slots = [now - timedelta(seconds=59) + timedelta(seconds=k * 2) for k in range(25)]
    Run.objects.bulk_create(
        Run(endpoint=endpoint, scheduled_for=slot, started_at=slot + timedelta(milliseconds=4),
            status=RunStatus.FAILURE if k < 2 else RunStatus.SUCCESS)
        for k, slot in enumerate(slots)
    )  # fmt: skip
    scheduler = EmbeddedScheduler(max_in_flight=2)
    try:
        with caplog.at_level(logging.INFO, logger="cronicorn.scheduler"):
            scheduler.summarize_once(now=now)
            Run.objects.all().delete()
            scheduler.summarize_once(now=now)  # a quiet minute: no summary
    finally:
        scheduler.shutdown(timeout=5)
    summaries = [r.getMessage() for r in caplog.records if "last minute" in r.getMessage()]
    assert summaries == ["last minute: 25 runs, 2 failed, lateness p95 4 ms, 0 in flight"]
