"""Action and maintenance commands: trigger, test_endpoint, pause, resume, hint,
clear_hints, reset_failures, archive, tick, cleanup_runs."""

from __future__ import annotations

import io
import json
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.core.management import CommandError, call_command, get_commands, load_command_class
from django.db.models import F
from django.utils import timezone
from pytest_httpserver import HTTPServer

from endpoints.models import Endpoint, HintHistory, Job, Run, Slot

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)


def run(command: str, *args: str) -> str:
    out = io.StringIO()
    call_command(command, *args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


@pytest.fixture
def api(make_endpoint: Callable[..., Endpoint], frozen: Any) -> Endpoint:
    endpoint = make_endpoint(name="api", baseline_interval_ms=600_000)
    Slot.objects.filter(pk=endpoint.pk).update(
        next_run_at=NOW + timedelta(minutes=10), next_run_source="baseline-interval"
    )
    endpoint.refresh_from_db()
    return endpoint


def fresh(endpoint: Endpoint) -> Endpoint:
    endpoint.refresh_from_db()
    return endpoint


# --- trigger --------------------------------------------------------------------------


def test_trigger_makes_the_endpoint_due_now_through_the_normal_path(api: Endpoint) -> None:
    output = run("trigger", "ops/api")

    assert (fresh(api).next_run_at, api.next_run_source) == (NOW, "manual")
    assert "due now" in output and "runs ops/api" in output


def test_trigger_is_refused_while_a_run_is_in_flight(api: Endpoint) -> None:
    Slot.objects.filter(pk=api.pk).update(
        claim_token=uuid.uuid4(), locked_until=NOW + timedelta(minutes=1)
    )

    with pytest.raises(CommandError, match="wait"):
        run("trigger", "ops/api")
    assert fresh(api).next_run_at == NOW + timedelta(minutes=10)


def test_trigger_is_refused_while_paused_and_points_to_test_endpoint(api: Endpoint) -> None:
    run("pause", "ops/api", "--for", "1h")

    with pytest.raises(CommandError, match="Test"):
        run("trigger", "ops/api")


# --- test_endpoint --------------------------------------------------------------------


@pytest.fixture
def target(httpserver: HTTPServer, make_endpoint: Callable[..., Endpoint]) -> Endpoint:
    return make_endpoint(name="target", url=httpserver.url_for("/status"))


def test_test_endpoint_prints_status_code_duration_and_body_and_records_a_test_run(
    httpserver: HTTPServer, target: Endpoint
) -> None:
    httpserver.expect_request("/status").respond_with_json({"queue_depth": 7, "status": "ok"})
    before = (target.next_run_at, target.next_run_source)

    output = run("test_endpoint", "ops/target")

    test_run = Run.objects.get(endpoint=target)
    assert test_run.trigger == "test" and test_run.status == "success"
    assert output.startswith(f"ops/target: success HTTP 200 in {test_run.duration_ms} ms")
    assert '"queue_depth": 7' in output
    assert (fresh(target).next_run_at, target.next_run_source) == before


def test_test_endpoint_works_while_paused(httpserver: HTTPServer, target: Endpoint) -> None:
    httpserver.expect_request("/status").respond_with_data("pong")
    run("pause", "ops/target", "--for", "1h")

    assert "pong" in run("test_endpoint", "ops/target")


def test_test_endpoint_exits_non_zero_when_the_call_fails_after_showing_it(
    httpserver: HTTPServer, target: Endpoint
) -> None:
    httpserver.expect_request("/status").respond_with_json({"error": "down"}, status=503)
    out = io.StringIO()

    with pytest.raises(CommandError, match="failed"):
        call_command("test_endpoint", "ops/target", stdout=out)

    assert "failure HTTP 503" in out.getvalue() and '"error": "down"' in out.getvalue()


def test_test_endpoint_json_carries_the_body_and_long_bodies_are_cut_in_text(
    httpserver: HTTPServer, target: Endpoint
) -> None:
    httpserver.expect_request("/status").respond_with_data(
        "\n".join(f"line {i}" for i in range(100))
    )

    data = json.loads(run("test_endpoint", "ops/target", "--json"))
    # Past the tenant's floor (1 s) before the second test.
    Run.objects.update(started_at=F("started_at") - timedelta(seconds=2))
    text = run("test_endpoint", "ops/target", "--lines", "5")

    assert data["response_body"].startswith("line 0\nline 1") and data["trigger"] == "test"
    assert "line 4" in text and "line 5\n" not in text and "95 more lines" in text


# --- pause and resume -----------------------------------------------------------------


def test_pause_for_a_duration_moves_the_next_run_to_the_end_of_the_pause(api: Endpoint) -> None:
    output = run("pause", "ops/api", "--for", "2h", "--reason", "maintenance")

    endpoint = fresh(api)
    assert endpoint.paused_until == NOW + timedelta(hours=2)
    assert (endpoint.next_run_at, endpoint.next_run_source) == (NOW + timedelta(hours=2), "paused")
    assert endpoint.pause_reason == "maintenance"
    assert HintHistory.objects.get(endpoint=api).kind == "pause"
    assert "next run in 2 hours" in output and "set by a pause" in output


@pytest.mark.parametrize(
    ("command", "args", "message"),
    [
        ("hint", ["--interval", "30s", "--ttl", "15"], "--ttl 15: missing unit: write 15m"),
        ("hint", ["--interval", "30"], "--interval 30: missing unit: write 30m"),
        ("cleanup_runs", ["--older-than", "30"], "--older-than 30: missing unit: write 30m"),
    ],
)
def test_a_duration_without_a_unit_is_refused_on_the_command_line(
    api: Endpoint, command: str, args: list[str], message: str
) -> None:
    target = [] if command == "cleanup_runs" else ["ops/api"]

    with pytest.raises(CommandError, match=message):
        run(command, *target, *args)
    assert fresh(api).ai_hint_expires_at is None


@pytest.mark.parametrize(
    ("command", "args"),
    [
        ("hint", ["--at", "0001-01-01T00:00:00+01:00", "--ttl", "5m"]),
        ("hint", ["--at", "9999-12-31T23:59:59-01:00", "--ttl", "5m"]),
        ("pause", ["--until", "9999-12-31T23:59:59-01:00"]),
        ("explain", ["--at", "0001-01-01T00:00:00+01:00"]),
        ("explain", ["--at", "9999-12-31T23:59:59-01:00"]),
    ],
)
def test_a_time_whose_instant_is_out_of_range_is_refused_in_words(
    api: Endpoint, command: str, args: list[str]
) -> None:
    # In UTC these are in the years 0 and 10000: an OverflowError or a DataError before.
    option, text = args[0], args[1]
    expected = f"{option} {text!r} is out of range in UTC; give a year between 1 and 9999."
    with pytest.raises(CommandError) as caught:
        run(command, "ops/api", *args)
    assert str(caught.value) == expected
    endpoint = fresh(api)
    assert (endpoint.ai_hint_next_run_at, endpoint.paused_until) == (None, None)


@pytest.mark.parametrize(
    "args",
    [["pause", "\u00b2", "--for", "1h"], ["pause", "--job", "\u00b2"]],
)
def test_a_reference_of_digits_int_cannot_read_is_not_found_in_words(
    api: Endpoint, args: list[str]
) -> None:
    # "²" is a digit to str.isdigit, not to int: a ValueError traceback before.
    with pytest.raises(CommandError, match="\u00b2"):
        run(*args)
    assert fresh(api).paused_until is None


def test_pause_until_a_time(api: Endpoint) -> None:
    run("pause", str(api.pk), "--until", "2026-11-23T08:00:00+01:00")

    assert fresh(api).paused_until == datetime(2026, 11, 23, 7, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["ops/api"], "--for 2h"),
        (["ops/api", "--for", "soon"], "--for"),
        (["ops/api", "--for", "30"], "--for 30: missing unit: write 30m"),
        (["ops/api", "--until", "2020-01-01T00:00:00Z"], "not in the future"),
        (["ops/api", "--for", "1h", "--until", "2027-01-01T00:00:00Z"], "not allowed with"),
        (["--for", "1h"], "Name the ENDPOINT"),
        (["--job", "ops", "--for", "1h"], "resume --job"),
    ],
)
def test_pause_explains_what_is_wrong_with_its_arguments(
    api: Endpoint, args: list[str], message: str
) -> None:
    with pytest.raises(CommandError, match=message):
        run("pause", *args)
    assert fresh(api).paused_until is None


def test_resume_lifts_the_pause_and_plans_from_now(api: Endpoint) -> None:
    run("pause", "ops/api", "--for", "2h")

    run("resume", "ops/api", "--reason", "done early")

    endpoint = fresh(api)
    assert endpoint.paused_until is None
    assert (endpoint.next_run_at, endpoint.next_run_source) == (
        NOW + timedelta(minutes=10),
        "baseline-interval",
    )
    assert HintHistory.objects.filter(endpoint=api, kind="resume", reason="done early").exists()


def test_pause_and_resume_a_whole_job(api: Endpoint, job: Job) -> None:
    paused = run("pause", "--job", "ops")
    assert fresh(job).status == "paused" and "resume --job ops" in paused

    run("resume", "--job", str(job.pk))

    assert fresh(job).status == "active"


@pytest.mark.parametrize("duration", [["--for", "2h"], ["--until", "2026-11-22T14:00:00Z"]])
@pytest.mark.parametrize("whole", [["--tenant", "Acme"], ["--job", "ops"]])
def test_a_tenant_or_job_pause_for_a_while_is_refused_saying_what_is_accepted(
    api: Endpoint, job: Job, whole: list[str], duration: list[str]
) -> None:
    """A job's pause is its status, with no end of its own: the command says so and what
    to do instead, and pauses nothing."""
    with pytest.raises(CommandError) as refused:
        run("pause", *whole, *duration)

    message = str(refused.value)
    assert f"{whole[0]} pauses every endpoint of the" in message
    assert "takes no --for or --until" in message
    assert f"resume {whole[0]}" in message and "pause ENDPOINT --for 2h" in message
    assert fresh(job).status == "active" and fresh(api).paused_until is None


def test_resume_needs_an_endpoint_or_a_job(api: Endpoint) -> None:
    with pytest.raises(CommandError, match="either an ENDPOINT or --job"):
        run("resume")


def test_a_job_name_shared_by_two_tenants_must_be_given_by_id(api: Endpoint, job: Job) -> None:
    from endpoints.models import Tenant

    Job.objects.create(tenant=Tenant.objects.create(name="Other"), name="ops")

    with pytest.raises(CommandError, match="several tenants"):
        run("pause", "--job", "ops")


# --- hints ----------------------------------------------------------------------------


def test_hint_interval_sets_a_fresh_hint_that_takes_effect_at_once(api: Endpoint) -> None:
    output = run("hint", "ops/api", "--interval", "30s", "--reason", "queue deep")

    endpoint = fresh(api)
    assert endpoint.ai_hint_interval_ms == 30_000
    assert endpoint.ai_hint_expires_at == NOW + timedelta(minutes=60)
    assert endpoint.ai_hint_reason == "queue deep"
    assert (endpoint.next_run_at, endpoint.next_run_source) == (
        NOW + timedelta(seconds=30),
        "ai-interval",
    )
    assert "Hint set until 2026-11-22 13:00:00 UTC" in output


def test_hint_at_sets_a_one_shot_with_its_own_ttl(api: Endpoint) -> None:
    run("hint", "ops/api", "--at", "2026-11-22T12:03:00Z", "--ttl", "15m")

    endpoint = fresh(api)
    assert endpoint.ai_hint_next_run_at == NOW + timedelta(minutes=3)
    assert endpoint.ai_hint_expires_at == NOW + timedelta(minutes=15)
    assert (endpoint.next_run_at, endpoint.next_run_source) == (
        NOW + timedelta(minutes=3),
        "ai-oneshot",
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "one of the arguments --interval --at is required"),
        (["--interval", "500ms"], "at least 1000 ms"),
        (["--interval", "fast"], "--interval"),
        (["--at", "noon"], "ISO 8601"),
        (["--interval", "30s", "--ttl", "0s"], "longer than zero"),
    ],
)
def test_hint_rejects_bad_arguments_with_a_message(
    api: Endpoint, args: list[str], message: str
) -> None:
    with pytest.raises(CommandError, match=message):
        run("hint", "ops/api", *args)
    assert fresh(api).ai_hint_expires_at is None


def test_clear_hints_goes_back_to_the_baseline(api: Endpoint) -> None:
    run("hint", "ops/api", "--interval", "30s")

    output = run("clear_hints", "ops/api", "--reason", "recovered")

    endpoint = fresh(api)
    assert endpoint.ai_hint_interval_ms is None and endpoint.ai_hint_expires_at is None
    assert endpoint.next_run_source == "baseline-interval"
    assert HintHistory.objects.filter(endpoint=api, kind="clear", reason="recovered").exists()
    assert "set by the baseline interval" in output


# --- reset_failures and archive -------------------------------------------------------


def test_reset_failures_drops_the_backoff(api: Endpoint) -> None:
    Endpoint.objects.filter(pk=api.pk).update(failure_count=3)
    Slot.objects.filter(pk=api.pk).update(next_run_at=NOW + timedelta(minutes=80))

    output = run("reset_failures", "ops/api")

    endpoint = fresh(api)
    assert endpoint.failure_count == 0
    assert endpoint.next_run_at == NOW + timedelta(minutes=10)
    assert "Failure count 3 -> 0." in output


def test_archive_stops_the_endpoint_and_refuses_to_archive_twice(api: Endpoint) -> None:
    assert run("archive", "ops/api") == "ops/api archived.\n"

    assert fresh(api).archived_at == NOW
    with pytest.raises(CommandError, match="already archived"):
        run("archive", "ops/api")
    with pytest.raises(CommandError, match="archived"):
        run("hint", "ops/api", "--interval", "30s")


# --- tick and cleanup_runs ------------------------------------------------------------


# The runs execute on worker threads with their own connections: data must be committed.
@pytest.mark.django_db(transaction=True)
def test_tick_claims_the_due_endpoints_and_runs_them_here(
    httpserver: HTTPServer, make_endpoint: Callable[..., Endpoint]
) -> None:
    httpserver.expect_request("/a").respond_with_json({"ok": True})
    httpserver.expect_request("/b").respond_with_json({"ok": False}, status=500)
    now = timezone.now()
    due = [
        make_endpoint(name=name, url=httpserver.url_for(f"/{name}"), baseline_interval_ms=60_000)
        for name in ("a", "b")
    ]
    later = make_endpoint(name="later", url=httpserver.url_for("/later"))
    Slot.objects.filter(pk__in=[e.pk for e in due]).update(next_run_at=now - timedelta(seconds=1))
    Slot.objects.filter(pk=later.pk).update(next_run_at=now + timedelta(hours=1))

    output = run("tick")

    assert "Claimed 2 due endpoints; 2 ran." in output
    assert "ops/a: success HTTP 200" in output and "ops/b: failure HTTP 500" in output
    assert Run.objects.filter(trigger="scheduled").count() == 2
    for endpoint in due:
        assert fresh(endpoint).next_run_at > now and endpoint.claim_token is None
    assert not Run.objects.filter(endpoint=later).exists()
    assert run("tick") == "Claimed 0 due endpoints; 0 ran.\n"


@pytest.mark.django_db(transaction=True)
def test_tick_json_lists_the_runs(
    httpserver: HTTPServer, make_endpoint: Callable[..., Endpoint]
) -> None:
    httpserver.expect_request("/a").respond_with_json({"ok": True})
    endpoint = make_endpoint(name="a", url=httpserver.url_for("/a"))
    Slot.objects.filter(pk=endpoint.pk).update(next_run_at=timezone.now())

    runs = json.loads(run("tick", "--json"))

    assert [(r["endpoint_id"], r["status"], r["status_code"]) for r in runs] == [
        (endpoint.pk, "success", 200)
    ]


def test_cleanup_runs_deletes_old_runs_but_keeps_each_endpoints_latest(
    api: Endpoint, settings: Any
) -> None:
    settings.CRONICORN_RUN_RETENTION_KEEP = 2
    for days in (1, 3, 5, 7, 9):
        started = NOW - timedelta(days=days)
        Run.objects.create(
            endpoint=api, scheduled_for=started, started_at=started, status="success"
        )

    output = run("cleanup_runs", "--older-than", "2d")

    kept = sorted((NOW - run.started_at).days for run in Run.objects.all())
    assert kept == [1, 3]  # day 1 is recent; day 3 is among the latest two
    assert "Deleted 3 runs that started before 2026-11-20 12:00 UTC." in output


def test_cleanup_runs_defaults_to_the_retention_setting(api: Endpoint, settings: Any) -> None:
    settings.CRONICORN_RUN_RETENTION_KEEP = 1
    settings.CRONICORN_RUN_RETENTION_DAYS = 30
    for days in (1, 20, 40):
        started = NOW - timedelta(days=days)
        Run.objects.create(
            endpoint=api, scheduled_for=started, started_at=started, status="success"
        )

    run("cleanup_runs")

    assert sorted((NOW - run.started_at).days for run in Run.objects.all()) == [1, 20]


def test_cleanup_runs_json_says_how_many_were_deleted_and_the_cutoff(
    api: Endpoint, settings: Any
) -> None:
    settings.CRONICORN_RUN_RETENTION_KEEP = 1
    for days in (1, 5, 9):
        started = NOW - timedelta(days=days)
        Run.objects.create(
            endpoint=api, scheduled_for=started, started_at=started, status="success"
        )

    shown = json.loads(run("cleanup_runs", "--older-than", "2d", "--json"))

    assert shown == {"deleted": 2, "started_before": "2026-11-20T12:00:00+00:00"}


# --- Every command: help, errors and JSON ----------------------------------------------

OURS = [
    "archive",
    "clear_hints",
    "cleanup_runs",
    "demo",
    "endpoints",
    "explain",
    "export_endpoints",
    "hint",
    "import_endpoints",
    "pause",
    "reset_failures",
    "resume",
    "runs",
    "scheduler_status",
    "test_endpoint",
    "tick",
    "trigger",
]
# Those that list or show something; the rest act and print one line about it.
SHOWING = [
    "cleanup_runs",
    "endpoints",
    "explain",
    "import_endpoints",
    "plan",
    "runs",
    "scheduler_status",
    "test_channel",
    "test_endpoint",
    "tick",
]
DJANGO_OPTIONS = {
    "help", "version", "verbosity", "settings", "pythonpath", "traceback",
    "no_color", "force_color", "skip_checks",
}  # fmt: skip


@pytest.mark.parametrize("name", OURS)
def test_every_command_has_help_for_itself_and_each_of_its_arguments(name: str) -> None:
    command = load_command_class(get_commands()[name], name)
    parser = command.create_parser("manage.py", name)

    assert len(command.help) > 40
    for action in parser._actions:
        if action.dest not in DJANGO_OPTIONS:
            assert action.help, f"{name}: {action.dest} has no help"


@pytest.mark.parametrize("name", SHOWING)
def test_every_command_that_lists_or_shows_takes_json(name: str) -> None:
    command = load_command_class(get_commands()[name], name)
    options = {
        o for a in command.create_parser("manage.py", name)._actions for o in a.option_strings
    }
    assert "--json" in options


@pytest.mark.parametrize(
    "name", ["trigger", "test_endpoint", "clear_hints", "reset_failures", "archive", "explain"]
)
def test_every_endpoint_command_names_the_way_to_find_endpoints(db: None, name: str) -> None:
    with pytest.raises(CommandError, match=r"manage\.py endpoints"):
        run(name, "nope/nope")
