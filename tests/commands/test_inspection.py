"""Inspection commands: endpoints, runs, explain, scheduler_status."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.core.management import CommandError, call_command

from endpoints.governor import EndpointSchedule, plan_next_run
from endpoints.models import Endpoint, Heartbeat, Job, Run, Slot, Tenant

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)


def run(command: str, *args: str) -> str:
    out = io.StringIO()
    call_command(command, *args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


def run_json(command: str, *args: str) -> Any:
    return json.loads(run(command, *args, "--json"))


def add_run(endpoint: Endpoint, minutes_ago: int, **fields: Any) -> Run:
    started = NOW - timedelta(minutes=minutes_ago)
    values: dict[str, Any] = {
        "endpoint": endpoint,
        "trigger": "scheduled",
        "source": "baseline-interval",
        "scheduled_for": started - timedelta(milliseconds=40),
        "started_at": started,
        "finished_at": started + timedelta(milliseconds=120),
        "duration_ms": 120,
        "status": "success",
        "status_code": 200,
    }
    values.update(fields)
    return Run.objects.create(**values)


@pytest.fixture
def fleet(make_endpoint: Callable[..., Endpoint], job: Job, frozen: Any) -> dict[str, Endpoint]:
    plain = make_endpoint(name="plain", baseline_interval_ms=300_000)
    make_endpoint(name="nightly", baseline_cron="30 2 * * *", timezone="Europe/Berlin")
    failing = make_endpoint(name="failing")
    hinted = make_endpoint(name="hinted")
    paused = make_endpoint(name="paused")
    gone = make_endpoint(name="gone")
    Slot.objects.filter(pk=plain.pk).update(
        next_run_at=NOW + timedelta(minutes=5), next_run_source="baseline-interval"
    )
    Endpoint.objects.filter(pk=failing.pk).update(failure_count=3)
    Endpoint.objects.filter(pk=hinted.pk).update(
        ai_hint_interval_ms=15_000,
        ai_hint_expires_at=NOW + timedelta(hours=1),
        ai_hint_reason="queue rising",
    )
    Endpoint.objects.filter(pk=paused.pk).update(
        paused_until=NOW + timedelta(hours=2), pause_reason="maintenance"
    )
    Endpoint.objects.filter(pk=gone.pk).update(archived_at=NOW - timedelta(days=1))
    add_run(failing, 3, status="failure", status_code=503, error="HTTP 503")
    add_run(failing, 10)
    other_tenant = Tenant.objects.create(name="Globex")
    other_job = Job.objects.create(tenant=other_tenant, name="billing")
    make_endpoint(job=other_job, name="invoices")
    return {e.name: e for e in Endpoint.objects.all()}


def test_endpoints_lists_live_endpoints_with_schedule_next_run_and_state(
    fleet: dict[str, Endpoint],
) -> None:
    output = run("endpoints")

    lines = {line.split()[1]: line for line in output.splitlines()[1:]}
    assert set(lines) == {
        "ops/plain",
        "ops/nightly",
        "ops/failing",
        "ops/hinted",
        "ops/paused",
        "billing/invoices",
    }
    assert "every 5 minutes" in lines["ops/plain"]
    assert "in 5 minutes (baseline-interval)" in lines["ops/plain"]
    assert "(Europe/Berlin)" in lines["ops/nightly"]
    assert "failure 503" in lines["ops/failing"] and " 3 " in lines["ops/failing"]
    assert "every 15s until 13:00" in lines["ops/hinted"]
    assert "until 2026-11-22 14:00" in lines["ops/paused"]
    assert all(len(line) <= 160 for line in output.splitlines())


def test_endpoints_filters_by_job_tenant_and_state(fleet: dict[str, Endpoint]) -> None:
    def names(*args: str) -> set[str]:
        return {item["ref"] for item in run_json("endpoints", *args)}

    assert names("--tenant", "Globex") == {"billing/invoices"}
    assert names("--job", "billing") == {"billing/invoices"}
    assert names("--status", "paused") == {"ops/paused"}
    assert names("--status", "failing") == {"ops/failing"}
    assert names("--status", "hinted") == {"ops/hinted"}
    assert names("--status", "archived") == {"ops/gone"}
    assert len(names("--status", "all")) == 7
    assert "ops/paused" not in names("--status", "active")


def test_endpoints_counts_a_paused_job_as_paused(fleet: dict[str, Endpoint], job: Job) -> None:
    Job.objects.filter(pk=job.pk).update(status="paused")

    output = run("endpoints", "--job", "ops", "--status", "paused")

    assert "job paused" in output and "ops/plain" in output


def test_endpoints_json_is_stable_for_scripts(fleet: dict[str, Endpoint]) -> None:
    items = {item["ref"]: item for item in run_json("endpoints")}

    hinted, paused, failing = items["ops/hinted"], items["ops/paused"], items["ops/failing"]
    assert hinted["hint"] == {
        "interval_ms": 15_000,
        "next_run_at": None,
        "expires_at": "2026-11-22T13:00:00+00:00",
        "reason": "queue rising",
    }
    assert paused["paused_until"] == "2026-11-22T14:00:00+00:00"
    assert paused["pause_reason"] == "maintenance"
    assert (failing["last_status"], failing["last_status_code"]) == ("failure", 503)
    assert items["ops/plain"]["next_run_at"] == "2026-11-22T12:05:00+00:00"
    assert set(hinted) == set(paused)  # every item has the same keys


def test_endpoints_with_nothing_to_show_says_how_to_add_some(db: None) -> None:
    assert "import_endpoints" in run("endpoints")
    assert run_json("endpoints") == []


def test_runs_shows_the_newest_runs_first_with_status_code_and_lateness(
    make_endpoint: Callable[..., Endpoint],
) -> None:
    endpoint = make_endpoint(name="api")
    for minutes in range(1, 31):
        add_run(endpoint, minutes)
    add_run(endpoint, 0, status="timeout", status_code=None, error="Timed out\nafter 30 s")

    output = run("runs", "ops/api", "--limit", "5")

    lines = output.splitlines()
    assert lines[0] == "ops/api: latest 5 runs"
    assert len(lines) == 2 + 5
    assert "timeout" in lines[2] and "Timed out after 30 s" in lines[2]
    assert "success" in lines[3] and "200" in lines[3] and "40 ms" in lines[3]


def test_runs_json_lists_each_run_with_stable_fields(
    make_endpoint: Callable[..., Endpoint],
) -> None:
    endpoint = make_endpoint(name="api")
    first = add_run(
        endpoint,
        2,
        status="failure",
        status_code=500,
        error="HTTP 500",
        response_headers={"retry-after": "30"},
    )
    add_run(endpoint, 1)

    items = run_json("runs", str(endpoint.pk))

    assert [item["status"] for item in items] == ["success", "failure"]
    assert items[1] == {
        "id": first.pk,
        "trigger": "scheduled",
        "source": "baseline-interval",
        "scheduled_for": "2026-11-22T11:57:59.960000+00:00",
        "started_at": "2026-11-22T11:58:00+00:00",
        "finished_at": "2026-11-22T11:58:00.120000+00:00",
        "duration_ms": 120,
        "lateness_ms": 40,
        "status": "failure",
        "status_code": 500,
        "response_size_bytes": None,
        "response_truncated": False,
        "response_headers": {"retry-after": "30"},
        "error": "HTTP 500",
        "attempt": 1,
        "retry_of": None,
    }


def test_runs_of_an_endpoint_without_runs_says_so(make_endpoint: Callable[..., Endpoint]) -> None:
    make_endpoint(name="api")

    assert run("runs", "ops/api") == "ops/api has no runs yet.\n"


@pytest.mark.parametrize("ref", ["ops/nope", "999999", "no-slash"])
def test_an_unknown_endpoint_is_an_error_that_says_how_to_find_one(db: None, ref: str) -> None:
    with pytest.raises(CommandError, match=r"manage\.py endpoints"):
        run("runs", ref)


def test_runs_refuses_a_limit_out_of_range(make_endpoint: Callable[..., Endpoint]) -> None:
    make_endpoint(name="api")

    with pytest.raises(CommandError, match="from 1 to 1000"):
        run("runs", "ops/api", "--limit", "0")


# --- explain --------------------------------------------------------------------------

AT = "2026-11-22T12:00:00Z"
STATES: dict[str, dict[str, Any]] = {
    "interval": {},
    "cron": {"baseline_cron": "*/15 * * * *", "baseline_interval_ms": None},
    "cron-in-berlin": {
        "baseline_cron": "30 2 * * *",
        "timezone": "Europe/Berlin",
        "baseline_interval_ms": None,
    },
    "backoff": {"failure_count": 4},
    "interval-hint": {
        "ai_hint_interval_ms": 20_000,
        "ai_hint_expires_at": NOW + timedelta(hours=1),
    },
    "oneshot-hint": {
        "ai_hint_next_run_at": NOW + timedelta(seconds=10),
        "ai_hint_expires_at": NOW + timedelta(minutes=30),
    },
    "past-oneshot": {
        "ai_hint_next_run_at": NOW - timedelta(minutes=5),
        "ai_hint_expires_at": NOW + timedelta(minutes=30),
    },
    "both-hints": {
        "ai_hint_interval_ms": 20_000,
        "ai_hint_next_run_at": NOW + timedelta(seconds=5),
        "ai_hint_expires_at": NOW + timedelta(minutes=30),
    },
    "expired-hint": {"ai_hint_interval_ms": 5_000, "ai_hint_expires_at": NOW},
    "clamped-min": {
        "ai_hint_interval_ms": 2_000,
        "ai_hint_expires_at": NOW + timedelta(hours=1),
        "min_interval_ms": 30_000,
    },
    "clamped-max": {"failure_count": 5, "max_interval_ms": 600_000},
    "paused": {"paused_until": NOW + timedelta(hours=3)},
    "pause-over": {"paused_until": NOW - timedelta(hours=3)},
}


@pytest.mark.parametrize("state", list(STATES))
def test_explain_json_agrees_with_plan_next_run(
    make_endpoint: Callable[..., Endpoint], state: str
) -> None:
    endpoint = make_endpoint(name="api")
    Endpoint.objects.filter(pk=endpoint.pk).update(**STATES[state])
    endpoint.refresh_from_db()

    explained = run_json("explain", "ops/api", "--at", AT)

    plan = plan_next_run(NOW, EndpointSchedule.from_endpoint(endpoint))
    assert explained["next_run_at"] == plan.next_run_at.isoformat()
    assert explained["source"] == plan.source
    assert sum(candidate["chosen"] for candidate in explained["candidates"]) == 1


def test_explain_shows_every_candidate_the_winner_the_clamp_and_the_pause(
    make_endpoint: Callable[..., Endpoint],
) -> None:
    endpoint = make_endpoint(name="api", min_interval_ms=30_000)
    Endpoint.objects.filter(pk=endpoint.pk).update(
        ai_hint_interval_ms=2_000,
        ai_hint_next_run_at=NOW + timedelta(minutes=10),
        ai_hint_expires_at=NOW + timedelta(hours=1),
        paused_until=NOW + timedelta(hours=1),
    )

    output = run("explain", "ops/api", "--at", AT)

    assert "   baseline-interval  2026-11-22 12:01:00" in output
    assert " * ai-interval        2026-11-22 12:00:02" in output
    assert "   ai-oneshot         2026-11-22 12:10:00" in output
    assert "both hints fresh" in output
    assert "raised to the minimum interval" in output
    assert "pause wins" in output
    assert "Next run in 1 hour at 2026-11-22 13:00:00 UTC, set by a pause (paused)." in output


def test_explain_reads_a_time_without_offset_as_utc(make_endpoint: Callable[..., Endpoint]) -> None:
    make_endpoint(name="api")

    assert run_json("explain", "ops/api", "--at", "2026-11-22T12:00:00")["at"] == (
        "2026-11-22T12:00:00+00:00"
    )


def test_explain_rejects_a_time_it_cannot_read(make_endpoint: Callable[..., Endpoint]) -> None:
    make_endpoint(name="api")

    with pytest.raises(CommandError, match="ISO 8601"):
        run("explain", "ops/api", "--at", "tomorrow")


def test_explain_mentions_a_stored_next_run_that_differs(
    make_endpoint: Callable[..., Endpoint],
) -> None:
    endpoint = make_endpoint(name="api")
    Slot.objects.filter(pk=endpoint.pk).update(
        next_run_at=NOW - timedelta(minutes=3), next_run_source="baseline-interval"
    )

    output = run("explain", "ops/api", "--at", AT)

    assert "Stored next run: 2026-11-22 11:57:00 UTC" in output


# --- scheduler_status -----------------------------------------------------------------


def test_scheduler_status_is_healthy_after_a_recent_tick(db: None, frozen: Any) -> None:
    Heartbeat.beat("tick", now=NOW - timedelta(seconds=2))
    Heartbeat.beat("planner", now=NOW - timedelta(seconds=30))

    output = run("scheduler_status")
    status = run_json("scheduler_status")

    assert "Scheduler:   healthy" in output and "(2 seconds ago)" in output
    assert status["healthy"] is True and status["last_tick_age_seconds"] == 2.0
    assert status["planner"]["last_cycle_at"] == "2026-11-22T11:59:30+00:00"
    assert {"due_backlog", "in_flight", "lateness_p95_ms", "failures_last_hour"} <= set(status)


def test_scheduler_status_fails_when_the_last_tick_is_too_old(db: None, frozen: Any) -> None:
    Heartbeat.beat(
        "tick", now=NOW - timedelta(seconds=settings.CRONICORN_READY_MAX_TICK_AGE_SECONDS + 5)
    )
    out = io.StringIO()

    with pytest.raises(CommandError, match="looks dead"):
        call_command("scheduler_status", "--json", stdout=out)

    assert json.loads(out.getvalue())["healthy"] is False


def test_scheduler_status_fails_before_the_first_tick(db: None) -> None:
    with pytest.raises(CommandError, match="never ticked"):
        run("scheduler_status")


def test_scheduler_status_takes_its_own_tick_age_limit(db: None, frozen: Any) -> None:
    Heartbeat.beat("tick", now=NOW - timedelta(seconds=10))

    assert run_json("scheduler_status", "--max-tick-age", "15")["healthy"] is True
    with pytest.raises(CommandError):
        run("scheduler_status", "--max-tick-age", "5")


def test_scheduler_status_counts_the_last_hour(
    make_endpoint: Callable[..., Endpoint], frozen: Any
) -> None:
    Heartbeat.beat("tick", now=NOW)
    endpoint = make_endpoint(name="api")
    add_run(endpoint, 5)
    add_run(endpoint, 6, status="failure", status_code=500)
    add_run(endpoint, 90)

    status = run_json("scheduler_status")

    assert (status["runs_last_hour"], status["failures_last_hour"]) == (2, 1)
    assert status["lateness_p50_ms"] == 40.0


# --- Through a real manage.py process -----------------------------------------------


@pytest.fixture
def cli(tmp_path: Path) -> Callable[..., subprocess.CompletedProcess[str]]:
    env = {**os.environ, "DATABASE_URL": f"sqlite:///{tmp_path / 'cli.sqlite3'}"}

    def manage(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "manage.py", *args],
            cwd=settings.BASE_DIR,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )

    assert manage("migrate", "-v0").returncode == 0
    return manage


def test_explain_runs_and_endpoints_through_manage_py(
    cli: Callable[..., subprocess.CompletedProcess[str]], tmp_path: Path
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(
        "tenants:\n- name: Acme\n  jobs:\n  - name: ops\n    endpoints:\n"
        "    - {name: api, url: 'https://example.com/', baseline_interval: 90s}\n"
    )
    assert cli("import_endpoints", str(config)).returncode == 0

    explained = cli("explain", "ops/api", "--at", AT, "--json")
    history = cli("runs", "ops/api", "--json")
    listing = cli("endpoints")
    missing = cli("runs", "ops/nope")

    assert explained.returncode == 0, explained.stderr
    assert json.loads(explained.stdout)["next_run_at"] == "2026-11-22T12:01:30+00:00"
    assert json.loads(explained.stdout)["source"] == "baseline-interval"
    assert history.returncode == 0 and json.loads(history.stdout) == []
    assert "ops/api" in listing.stdout and "every 90 seconds" in listing.stdout
    assert missing.returncode == 1 and "No endpoint 'ops/nope'" in missing.stderr
    assert missing.stdout == ""
