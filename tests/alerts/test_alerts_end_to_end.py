"""Alerts end to end: an endpoint fails and recovers, on Celery (beat, a worker on the
tick, execute and notify queues) and in runscheduler, with a real SMTP server and a real
webhook receiver. Exactly one alert per channel for the failure, one for the recovery.
runscheduler's own lines for the scenario are checked line by line."""

from __future__ import annotations

import json
import re
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from endpoints.models import Endpoint, Run, RunStatus
from notifications.models import AlertRule, Channel, ChannelKind, Delivery, DeliveryStatus
from tests.alerts.smtp import SmtpCapture
from tests.engine_processes import (
    celery_beat,
    celery_worker,
    child_database_url,
    clear_broker,
    manage,
    process_env,
    running,
    wait_for_workers,
    wait_until,
)
from tests.http_targets import TargetServer

pytestmark = pytest.mark.django_db(transaction=True)

FAILING = "[Cronicorn] ops/flaky is failing"
RECOVERED = "[Cronicorn] ops/flaky recovered"


def alert_env(smtp: SmtpCapture, **overrides: str) -> dict[str, str]:
    return process_env(
        DATABASE_URL=child_database_url(),
        EMAIL_HOST="127.0.0.1",
        EMAIL_PORT=str(smtp.port),
        CRONICORN_NOTIFY_SECONDS="0.5",
        CRONICORN_ALERT_DIGEST_SECONDS="1",
        **overrides,
    )


def watched_endpoint(job, make_endpoint, target: TargetServer) -> Endpoint:
    job.tenant.hmac_secret = "e2e-hmac-secret"
    job.tenant.save(update_fields=["hmac_secret"])
    AlertRule.objects.create(job=job, after_failures=2)
    Channel.objects.create(
        tenant=job.tenant, name="mail", kind=ChannelKind.EMAIL, target="oncall@example.com"
    )
    Channel.objects.create(
        tenant=job.tenant, name="hook", kind=ChannelKind.WEBHOOK, target=target.url("/hook")
    )
    return make_endpoint(
        name="flaky",
        url=target.url("/flaky"),
        baseline_interval_ms=1_000,
        next_run_at=timezone.now() + timedelta(seconds=2),
    )


def fail_then_recover(endpoint: Endpoint, target: TargetServer, smtp: SmtpCapture, log: Path):
    """Two successes, failures until the alert is out, then successes until the recovery
    alert is out and two more runs succeeded after it."""

    def ok_runs() -> int:
        return Run.objects.filter(endpoint=endpoint, status=RunStatus.SUCCESS).count()

    assert wait_until(lambda: ok_runs() >= 2, timeout=60), log.read_text()[-3000:]
    target.reply("/flaky", status=500, body={"error": "database down"})
    assert wait_until(lambda: smtp.subjects() == [FAILING], timeout=60), log.read_text()[-3000:]
    target.reply("/flaky", status=200)
    assert wait_until(lambda: len(smtp.subjects()) >= 2, timeout=60), log.read_text()[-3000:]
    after = ok_runs()
    assert wait_until(lambda: ok_runs() >= after + 2, timeout=60)


def assert_one_alert_per_channel_and_change(target: TargetServer, smtp: SmtpCapture) -> None:
    assert smtp.subjects() == [FAILING, RECOVERED]
    hooks = [json.loads(hit.body) for hit in target.hits("/hook")]
    assert [[a["event"] for a in hook["alerts"]] for hook in hooks] == [["failing"], ["recovered"]]
    assert all(hit.headers.get("X-Cronicorn-Signature") for hit in target.hits("/hook"))
    deliveries = Delivery.objects.all()
    assert {(d.status, d.attempts) for d in deliveries} == {(DeliveryStatus.SENT, 1)}
    assert deliveries.count() == 4


def test_through_celery_a_failing_endpoint_alerts_once_per_channel_and_recovers_once(
    job, make_endpoint, tmp_path
):
    clear_broker()
    worker, name = celery_worker(["tick", "execute", "notify"])
    with SmtpCapture() as smtp, TargetServer() as target:
        env = alert_env(smtp)
        endpoint = watched_endpoint(job, make_endpoint, target)
        log = tmp_path / "worker.log"
        with (
            running(worker, env=env, log=log),
            running(celery_beat(tmp_path / "beat-schedule"), env=env, log=tmp_path / "beat.log"),
        ):
            wait_for_workers([name])
            fail_then_recover(endpoint, target, smtp, log)
        assert_one_alert_per_channel_and_change(target, smtp)


RUN_LINE = re.compile(
    r"(?:INFO|WARNING) cronicorn\.scheduler ops/flaky "
    r"(?P<status>success \(recovered\)|success|failure)"
    r"(?: HTTP (?P<code>\d{3}))? in (?P<took>\d+ ms|\d+\.\d s), "
    r"next run (?P<next>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)Z \((?P<source>[a-z-]+)\)(?P<error>: .*?)?"
    r" endpoint_id=\d+ run_id=\d+ claim_token=[0-9a-f-]+ source=[a-z-]*$"
)


def test_through_runscheduler_the_same_scenario_alerts_once_and_each_run_prints_one_line(
    job, make_endpoint, tmp_path
):
    with SmtpCapture() as smtp, TargetServer() as target:
        env = alert_env(smtp, CRONICORN_LOG_LEVEL="INFO")
        endpoint = watched_endpoint(job, make_endpoint, target)
        log = tmp_path / "scheduler.log"
        with running(manage("runscheduler"), env=env, log=log):
            fail_then_recover(endpoint, target, smtp, log)
        assert_one_alert_per_channel_and_change(target, smtp)

    lines = [line for line in log.read_text().splitlines() if "ops/flaky" in line]
    run_lines = [line for line in lines if " cronicorn.scheduler " in line]
    print("\n".join(run_lines))
    matches = [RUN_LINE.search(line) for line in run_lines]
    assert all(matches), [line for line, m in zip(run_lines, matches) if not m]
    statuses = [m["status"] for m in matches if m]
    # Each run once, in order: successes, failures, one recovery, successes.
    collapsed = [s for k, s in enumerate(statuses) if k == 0 or statuses[k - 1] != s]
    assert collapsed == ["success", "failure", "success (recovered)", "success"]
    runs = Run.objects.filter(endpoint=endpoint).exclude(status=RunStatus.RUNNING)
    assert len(statuses) == runs.count()
    for match in matches:
        assert match is not None
        assert match["code"] == ("500" if match["status"] == "failure" else "200")
        assert match["source"] == "baseline-interval"
        assert (match["error"] or "") == (
            ": HTTP 500 Internal Server Error" if match["status"] == "failure" else ""
        )
    failure = next(line for line in run_lines if " failure " in line)
    assert " WARNING " in failure
    assert " INFO " in next(line for line in run_lines if " success " in line)
    assert log.read_text().count("alert sent on channel Acme/") == 4
