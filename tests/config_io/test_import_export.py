"""Configuration as code: import_endpoints and export_endpoints."""

from __future__ import annotations

import copy
import io
import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command

from endpoints.governor import EndpointSchedule, plan_next_run
from endpoints.models import Endpoint, Job, Slot, Tenant
from tests.config_io.files import document, endpoint_entry, run_export, run_import, snapshot

pytestmark = pytest.mark.django_db

REPO = Path(settings.BASE_DIR)


def test_import_creates_tenants_jobs_and_endpoints_scheduled_by_the_governor(
    write: Callable[..., Path],
) -> None:
    doc = document(
        endpoint_entry("health", baseline_interval="30s", min_interval="10s", max_interval="1h"),
        endpoint_entry(
            "report",
            baseline_interval=None,
            baseline_cron="@daily",
            timezone="Europe/Berlin",
            method="post",
            body={"full": True},
            timeout="10s",
        ),
    )
    doc["tenants"][0]["jobs"][0]["description"] = "Operations checks."

    output = run_import(write(doc))

    health = Endpoint.objects.get(name="health")
    report = Endpoint.objects.get(name="report")
    assert (health.baseline_interval_ms, health.min_interval_ms, health.max_interval_ms) == (
        30_000,
        10_000,
        3_600_000,
    )
    assert (report.baseline_cron, report.timezone, report.method) == (
        "0 0 * * *",
        "Europe/Berlin",
        "POST",
    )
    assert report.body == {"full": True} and report.timeout_ms == 10_000
    assert Job.objects.get(name="ops").description == "Operations checks."
    for endpoint in (health, report):
        plan = plan_next_run(endpoint.created_at, EndpointSchedule.from_endpoint(endpoint))
        assert endpoint.next_run_source == plan.source
        assert abs(endpoint.next_run_at - plan.next_run_at) < timedelta(seconds=5)
    assert "+ endpoint ops/health: created" in output
    assert "4 created" in output  # the tenant, the job and two endpoints


def test_importing_the_same_file_twice_changes_nothing_the_second_time(
    write: Callable[..., Path],
) -> None:
    cron = endpoint_entry("cron", baseline_interval=None, baseline_cron="*/5 * * * *")
    path = write(document(endpoint_entry(), cron))
    run_import(path)
    before = list(Endpoint.objects.order_by("pk").values())

    output = run_import(path)

    assert list(Endpoint.objects.order_by("pk").values()) == before
    assert "0 created, 0 updated, 0 archived, 4 unchanged" in output


@pytest.fixture
def rich_setup(tenant: Tenant, job: Job, make_endpoint: Callable[..., Endpoint]) -> Iterator[None]:
    """Endpoints using every field, a member, tenant settings and secrets."""
    user = get_user_model().objects.create_user("alice")
    tenant.members.add(user)
    Tenant.objects.filter(pk=tenant.pk).update(
        max_endpoints=50, min_interval_ms=5_000, hmac_secret="tenant-hmac-value"
    )
    Job.objects.filter(pk=job.pk).update(description="Ops things", max_concurrent=2)
    make_endpoint(
        name="api",
        url="https://api.example.com/v1/status?full=1",
        method="PATCH",
        headers={"Authorization": "Bearer sekrit-1", "X-Plain": "visible", "X-Hidden": "sekrit-2"},
        secret_header_names=["X-Hidden"],
        body={"a": [1, 2, {"b": None}], "flag": True},
        timeout_ms=12_345,
        max_response_size_kb=2048,
        baseline_interval_ms=90_500,
        min_interval_ms=0,
        max_interval_ms=7_200_000,
        description="Line one.\nLine two: with colon.",
    )
    make_endpoint(name="nightly", baseline_cron="30 2 * * 1-5", timezone="America/New_York")
    archived = make_endpoint(name="gone")
    Endpoint.objects.filter(pk=archived.pk).update(archived_at=archived.created_at)
    secrets = {
        "CRONICORN_SECRET_ACME_OPS_API_AUTHORIZATION": "Bearer sekrit-1",
        "CRONICORN_SECRET_ACME_OPS_API_X_HIDDEN": "sekrit-2",
        "CRONICORN_SECRET_ACME_HMAC_SECRET": "tenant-hmac-value",
    }
    with pytest.MonkeyPatch.context() as patch:
        for name, value in secrets.items():
            patch.setenv(name, value)
        yield


@pytest.mark.usefixtures("rich_setup")
def test_export_then_dry_run_import_reports_nothing_to_change(
    write: Callable[..., Path],
) -> None:
    exported, _ = run_export()

    output = run_import(write(exported), "--dry-run")

    assert "Dry run (nothing to change)" in output
    assert "0 created, 0 updated, 0 archived" in output


@pytest.mark.usefixtures("rich_setup")
def test_export_as_json_round_trips_too(write: Callable[..., Path]) -> None:
    exported, _ = run_export("--format", "json")
    before = snapshot()

    output = run_import(write(exported, ".json"))

    assert "0 created, 0 updated, 0 archived" in output
    assert snapshot() == before


@pytest.mark.usefixtures("rich_setup")
def test_export_never_writes_secret_values_and_names_the_variables_to_set() -> None:
    exported, notes = run_export()

    for secret in ("sekrit-1", "sekrit-2", "tenant-hmac-value"):
        assert secret not in exported
    assert "${CRONICORN_SECRET_ACME_OPS_API_AUTHORIZATION}" in exported
    assert "CRONICORN_SECRET_ACME_HMAC_SECRET" in notes
    assert "visible" in exported  # an ordinary header is exported as it is


@pytest.mark.usefixtures("rich_setup")
def test_export_writes_intervals_in_words_and_leaves_out_archived_endpoints() -> None:
    exported = yaml.safe_load(run_export()[0])

    endpoints = exported["tenants"][0]["jobs"][0]["endpoints"]
    assert [e["name"] for e in endpoints] == ["api", "nightly"]
    assert endpoints[0]["baseline_interval"] == "1m30s500ms"
    assert endpoints[0]["timeout"] == "12s345ms" and endpoints[0]["max_interval"] == "2h"
    assert "min_interval" not in endpoints[0]  # zero means no bound


@pytest.mark.usefixtures("rich_setup")
def test_export_can_be_limited_to_one_job(job: Job) -> None:
    Job.objects.create(tenant=job.tenant, name="other")

    exported = yaml.safe_load(run_export("--job", "other")[0])

    assert [j["name"] for j in exported["tenants"][0]["jobs"]] == ["other"]


def test_export_of_an_unknown_tenant_is_an_error() -> None:
    with pytest.raises(CommandError, match="Nothing matches"):
        run_export("--tenant", "Nobody")


def test_dry_run_lists_changes_field_by_field_and_writes_nothing(
    write: Callable[..., Path], make_endpoint: Callable[..., Endpoint]
) -> None:
    make_endpoint(name="health", url="https://example.com/health", baseline_interval_ms=300_000)
    make_endpoint(name="same", url="https://example.com/health", baseline_interval_ms=300_000)
    before = snapshot()
    doc = document(
        endpoint_entry("health", baseline_interval="30s", headers={"X-Trace": "v"}),
        endpoint_entry("same"),
        endpoint_entry("new"),
    )

    output = run_import(write(doc), "--dry-run")

    assert snapshot() == before
    assert "~ endpoint ops/health: updated" in output
    assert "    baseline_interval: 5m -> 30s" in output
    assert "    headers.X-Trace: (absent) -> v" in output
    assert "= endpoint ops/same: unchanged" in output
    assert "+ endpoint ops/new: created" in output
    assert "Nothing was written" in output


def test_import_keeps_runtime_state_and_resets_omitted_keys_to_defaults(
    write: Callable[..., Path], make_endpoint: Callable[..., Endpoint], now: Any
) -> None:
    endpoint = make_endpoint(
        name="health",
        url="https://example.com/health",
        baseline_interval_ms=300_000,
        description="old words",
        timeout_ms=5_000,
    )
    Endpoint.objects.filter(pk=endpoint.pk).update(
        failure_count=3,
        ai_hint_interval_ms=10_000,
        ai_hint_expires_at=now + timedelta(hours=1),
        paused_until=now + timedelta(days=400),
    )

    run_import(write(document(endpoint_entry("health"))))

    endpoint.refresh_from_db()
    assert (endpoint.description, endpoint.timeout_ms) == ("", 30_000)
    assert endpoint.failure_count == 3 and endpoint.ai_hint_interval_ms == 10_000
    assert endpoint.paused_until == now + timedelta(days=400)


def test_a_schedule_change_recomputes_the_next_run_but_a_description_change_does_not(
    write: Callable[..., Path], make_endpoint: Callable[..., Endpoint], now: Any
) -> None:
    make_endpoint(name="a", url="https://example.com/health", baseline_interval_ms=300_000)
    make_endpoint(name="b", url="https://example.com/health", baseline_interval_ms=300_000)
    far = now + timedelta(days=30)
    Slot.objects.update(next_run_at=far, next_run_source="baseline-interval")

    run_import(
        write(
            document(
                endpoint_entry("a", baseline_interval="1m"), endpoint_entry("b", description="x")
            )
        )
    )

    a, b = Endpoint.objects.get(name="a"), Endpoint.objects.get(name="b")
    assert a.next_run_at < far and b.next_run_at == far


def test_prune_archives_endpoints_the_file_no_longer_lists_in_its_jobs(
    write: Callable[..., Path], make_endpoint: Callable[..., Endpoint], job: Job
) -> None:
    for name in ("keep", "drop"):
        make_endpoint(name=name, url="https://example.com/health", baseline_interval_ms=300_000)
    other_job = Job.objects.create(tenant=job.tenant, name="other")
    make_endpoint(job=other_job, name="elsewhere")
    path = write(document(endpoint_entry("keep")))

    dry = run_import(path, "--prune", "--dry-run")
    assert Endpoint.objects.live().count() == 3
    without_prune = run_import(path)
    assert Endpoint.objects.live().count() == 3
    output = run_import(path, "--prune")

    assert "- endpoint ops/drop: archived" in dry
    assert "archived" not in without_prune.replace("0 archived", "")
    assert set(Endpoint.objects.live().values_list("name", flat=True)) == {"keep", "elsewhere"}
    assert "1 archived" in output


def test_importing_an_archived_endpoint_brings_it_back(
    write: Callable[..., Path], make_endpoint: Callable[..., Endpoint]
) -> None:
    endpoint = make_endpoint(
        name="health", url="https://example.com/health", baseline_interval_ms=300_000
    )
    Endpoint.objects.filter(pk=endpoint.pk).update(archived_at=endpoint.created_at)

    output = run_import(write(document(endpoint_entry("health"))))

    endpoint.refresh_from_db()
    assert endpoint.archived_at is None and endpoint.next_run_at is not None
    assert "archived: yes -> no" in output


def test_secrets_are_read_from_the_environment_and_masked_in_the_diff(
    write: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CRONICORN_SECRET_ACME_TOKEN", "t0ken-value")
    entry = endpoint_entry(
        headers={"Authorization": "Bearer ${CRONICORN_SECRET_ACME_TOKEN}"},
        secret_headers=["Authorization"],
    )
    run_import(write(document(entry)))
    monkeypatch.setenv("CRONICORN_SECRET_ACME_TOKEN", "rotated-value")

    output = run_import(write(document(entry)), "--dry-run")

    endpoint = Endpoint.objects.get(name="health")
    assert endpoint.headers == {"Authorization": "Bearer t0ken-value"}
    assert endpoint.secret_header_names == ["Authorization"]
    assert "headers.Authorization: •••• -> ••••" in output
    assert "value" not in output


def test_an_environment_header_not_marked_secret_draws_a_warning(
    write: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CRONICORN_SECRET_TRACE", "abc")
    err = io.StringIO()

    call_command(
        "import_endpoints",
        str(write(document(endpoint_entry(headers={"X-Trace": "${CRONICORN_SECRET_TRACE}"})))),
        stdout=io.StringIO(),
        stderr=err,
    )

    assert "headers.X-Trace: comes from the environment but is not listed" in err.getvalue()


def test_import_sets_members_and_tenant_settings_only_when_given(
    write: Callable[..., Path], tenant: Tenant
) -> None:
    get_user_model().objects.create_user("bob")
    Tenant.objects.filter(pk=tenant.pk).update(max_endpoints=7)
    doc = document(endpoint_entry())
    doc["tenants"][0]["members"] = ["bob"]

    run_import(write(doc))

    tenant.refresh_from_db()
    assert list(tenant.members.values_list("username", flat=True)) == ["bob"]
    assert tenant.max_endpoints == 7


def test_import_reads_json_and_stdin(
    write: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    run_import(write(document(endpoint_entry("from-json")), ".json"))
    monkeypatch.setattr(sys, "stdin", io.StringIO(json.dumps(document(endpoint_entry("piped")))))
    run_import("-")

    assert set(Endpoint.objects.values_list("name", flat=True)) == {"from-json", "piped"}


def test_a_missing_file_is_a_clear_error() -> None:
    with pytest.raises(CommandError, match="no such file"):
        run_import("/nonexistent/config.yaml")


def test_every_problem_in_a_file_is_reported_at_once(write: Callable[..., Path]) -> None:
    doc = document(
        endpoint_entry("a", baseline_interval="100ms"),
        endpoint_entry("b", method="FETCH", url="ftp://example.com/"),
    )

    with pytest.raises(CommandError) as raised:
        run_import(write(doc))

    message = str(raised.value)
    assert "3 problems, so nothing was written" in message, message
    for location in (
        "endpoints[0].baseline_interval:",
        "endpoints[1].method:",
        "endpoints[1].url:",
    ):
        assert f"tenants[0].jobs[0].{location}" in message


# --- Invalid files: each rejected with its location, nothing written -------------------

E0 = "tenants[0].jobs[0].endpoints[0]"


def bad(**fields: Any) -> dict[str, Any]:
    """A file whose first endpoint has ``fields`` and whose second is valid."""
    return document(endpoint_entry(**fields), endpoint_entry("valid-sibling"))


def edited(change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    doc = document(endpoint_entry(), endpoint_entry("second"))
    change(doc)
    return doc


def tenant0(doc: dict[str, Any]) -> dict[str, Any]:
    return doc["tenants"][0]


def job0(doc: dict[str, Any]) -> dict[str, Any]:
    return tenant0(doc)["jobs"][0]


YAML_DATE_IN_BODY = """
tenants:
- name: Acme
  jobs:
  - name: ops
    endpoints:
    - {name: h, url: "https://e.com", baseline_interval: 5m, body: {day: 2026-01-01}}
"""
INVALID: list[tuple[str, dict[str, Any] | str, str, str]] = [
    (
        "cron-out-of-range",
        bad(baseline_interval=None, baseline_cron="61 * * * *"),
        f"{E0}.baseline_cron",
        "not a valid cron",
    ),
    (
        "cron-four-fields",
        bad(baseline_interval=None, baseline_cron="* * * *"),
        f"{E0}.baseline_cron",
        "cron needs 5",
    ),
    (
        "cron-unknown-shorthand",
        bad(baseline_interval=None, baseline_cron="@sometimes"),
        f"{E0}.baseline_cron",
        "unknown shorthand",
    ),
    (
        "cron-never-fires",
        bad(baseline_interval=None, baseline_cron="0 0 30 2 *"),
        f"{E0}.baseline_cron",
        "cron",
    ),
    (
        "interval-below-1s",
        bad(baseline_interval="500ms"),
        f"{E0}.baseline_interval",
        "at least 1 s",
    ),
    ("interval-zero", bad(baseline_interval="0s"), f"{E0}.baseline_interval", "at least 1 s"),
    (
        "interval-unknown-unit",
        bad(baseline_interval="5 parsecs"),
        f"{E0}.baseline_interval",
        "unit",
    ),
    (
        "interval-wrong-type",
        bad(baseline_interval=1.5),
        f"{E0}.baseline_interval",
        "expected a duration",
    ),
    ("both-cron-and-interval", bad(baseline_cron="@hourly"), f"{E0}.baseline_cron", "not both"),
    ("no-schedule", bad(baseline_interval=None), f"{E0}.baseline_interval", "Give a schedule"),
    (
        "min-above-max",
        bad(min_interval="10m", max_interval="1m"),
        f"{E0}.min_interval",
        "above the maximum",
    ),
    ("unknown-method", bad(method="FETCH"), f"{E0}.method", "FETCH"),
    ("non-http-url", bad(url="ftp://example.com/file"), f"{E0}.url", "Only http:// and https://"),
    ("not-a-url", bad(url="example dot com"), f"{E0}.url", "valid URL"),
    ("url-wrong-type", bad(url=["https://example.com"]), f"{E0}.url", "expected text"),
    ("timeout-too-long", bad(timeout="45m"), f"{E0}.timeout", "between 1 s and 30 min"),
    ("timeout-too-short", bad(timeout="200ms"), f"{E0}.timeout", "between 1 s and 30 min"),
    ("response-cap-zero", bad(max_response_size_kb=0), f"{E0}.max_response_size_kb", "1..10000"),
    (
        "response-cap-text",
        bad(max_response_size_kb="big"),
        f"{E0}.max_response_size_kb",
        "whole number",
    ),
    (
        "bad-timezone",
        bad(baseline_interval=None, baseline_cron="@daily", timezone="Mars/Olympus"),
        f"{E0}.timezone",
        "IANA",
    ),
    ("headers-a-list", bad(headers=["X-Key: v"]), f"{E0}.headers", "mapping of header names"),
    ("header-value-a-number", bad(headers={"X-Count": 5}), f"{E0}.headers.X-Count", "quote it"),
    (
        "secret-header-not-set",
        bad(headers={"A": "b"}, secret_headers=["Authorization"]),
        f"{E0}.secret_headers",
        "not among the headers",
    ),
    (
        "missing-env-var",
        bad(headers={"Authorization": "${CRONICORN_SECRET_UNSET_VARIABLE}"}),
        f"{E0}.headers.Authorization",
        "CRONICORN_SECRET_UNSET_VARIABLE is not set",
    ),
    (
        "malformed-reference",
        bad(headers={"Authorization": "${not-a-name}"}),
        f"{E0}.headers.Authorization",
        "is not a secret reference",
    ),
    ("description-a-list", bad(description=["a", "b"]), f"{E0}.description", "expected text"),
    ("unknown-endpoint-key", bad(intervall="5m"), f"{E0}.intervall", "unknown key"),
    (
        "duplicate-endpoint-names",
        document(endpoint_entry("dup"), endpoint_entry("dup")),
        "tenants[0].jobs[0].endpoints[1].name",
        "duplicate endpoint name",
    ),
    (
        "endpoint-without-name",
        edited(lambda d: job0(d)["endpoints"][0].pop("name")),
        E0,
        "needs a name",
    ),
    ("name-with-slash", bad(name="a/b"), f"{E0}.name", "cannot contain '/'"),
    ("empty-name", bad(name="  "), f"{E0}.name", "cannot be empty"),
    (
        "endpoint-not-a-mapping",
        edited(lambda d: job0(d)["endpoints"].insert(0, "health")),
        E0,
        "expected a mapping",
    ),
    (
        "endpoints-not-a-list",
        edited(lambda d: job0(d).update(endpoints={"name": "x"})),
        "tenants[0].jobs[0].endpoints",
        "expected a list",
    ),
    (
        "unknown-job-key",
        edited(lambda d: job0(d).update(schedule="5m")),
        "tenants[0].jobs[0].schedule",
        "unknown key",
    ),
    (
        "duplicate-job-names",
        edited(lambda d: tenant0(d)["jobs"].append({"name": "ops"})),
        "tenants[0].jobs[1].name",
        "duplicate job name",
    ),
    (
        "max-concurrent-zero",
        edited(lambda d: job0(d).update(max_concurrent=0)),
        "tenants[0].jobs[0].max_concurrent",
        "at least 1 run",
    ),
    (
        "max-concurrent-bool",
        edited(lambda d: job0(d).update(max_concurrent=True)),
        "tenants[0].jobs[0].max_concurrent",
        "whole number",
    ),
    (
        "unknown-tenant-key",
        edited(lambda d: tenant0(d).update(owner="me")),
        "tenants[0].owner",
        "unknown key",
    ),
    (
        "duplicate-tenant-names",
        edited(lambda d: d["tenants"].append({"name": "Acme"})),
        "tenants[1].name",
        "duplicate tenant name",
    ),
    (
        "unknown-member",
        edited(lambda d: tenant0(d).update(members=["ghost"])),
        "tenants[0].members",
        "no user named ghost",
    ),
    (
        "tenant-min-interval-below-1s",
        edited(lambda d: tenant0(d).update(min_interval="10ms")),
        "tenants[0].min_interval",
        "at least 1 s",
    ),
    (
        "below-tenant-floor",
        edited(lambda d: tenant0(d).update(min_interval="10m")),
        f"{E0}.baseline_interval",
        "plan allows intervals of at least",
    ),
    (
        "below-tenant-floor-new-job",
        edited(lambda d: (tenant0(d).update(min_interval="10m"), job0(d).update(name="new"))),
        f"{E0}.baseline_interval",
        "plan allows intervals of at least",
    ),
    (
        "over-endpoint-quota",
        edited(lambda d: tenant0(d).update(max_endpoints=1)),
        "tenants[0]",
        "max_endpoints is 1",
    ),
    (
        "hmac-secret-unset",
        edited(lambda d: tenant0(d).update(hmac_secret="${CRONICORN_SECRET_UNSET_HMAC}")),
        "tenants[0].hmac_secret",
        "CRONICORN_SECRET_UNSET_HMAC is not set",
    ),
    (
        "tenants-not-a-list",
        {"version": 1, "tenants": {"name": "Acme"}},
        "tenants",
        "expected a list",
    ),
    ("no-tenants-key", {"version": 1, "jobs": []}, "(top level)", "'tenants'"),
    ("unknown-top-level-key", edited(lambda d: d.update(extra=True)), "extra", "unknown key"),
    (
        "unsupported-version",
        edited(lambda d: d.update(version=2)),
        "version",
        "unsupported version",
    ),
    ("top-level-a-list", "- name: Acme\n", "(top level)", "expected a mapping"),
    ("malformed-yaml", "tenants:\n  - name: Acme\n   jobs: []\n", "line 3", "malformed YAML"),
    ("yaml-tab-indentation", "tenants:\n\t- name: Acme\n", "line 2", "malformed YAML"),
    (
        "yaml-duplicate-key",
        "tenants:\n  - name: Acme\n    name: Other\n",
        "line 3",
        "appears twice",
    ),
    (
        "yaml-date-in-body",
        YAML_DATE_IN_BODY,
        f"{E0}.body",
        "quote dates",
    ),
    ("empty-file", "  \n", "(file)", "empty"),
]
INVALID_JSON: list[tuple[str, str, str, str]] = [
    ("malformed-json", '{"tenants": [ {"name": "Acme",} ]}', "line 1, column", "malformed JSON"),
    ("json-duplicate-key", '{"tenants": [], "tenants": []}', "(file)", "appears twice"),
    (
        "json-wrong-type",
        json.dumps(document(endpoint_entry(timeout=True))),
        f"{E0}.timeout",
        "expected a duration",
    ),
]


@pytest.fixture
def existing(make_endpoint: Callable[..., Endpoint]) -> Endpoint:
    """An endpoint every invalid file would otherwise update: it must stay as it is."""
    return make_endpoint(name="health", url="https://old.example.com/", baseline_interval_ms=60_000)


@pytest.mark.parametrize(
    ("content", "suffix", "location", "fragment"),
    [pytest.param(c, ".yaml", loc, frag, id=name) for name, c, loc, frag in INVALID]
    + [pytest.param(c, ".json", loc, frag, id=name) for name, c, loc, frag in INVALID_JSON],
)
def test_an_invalid_file_is_rejected_with_its_location_and_nothing_is_written(
    write: Callable[..., Path],
    existing: Endpoint,
    content: dict[str, Any] | str,
    suffix: str,
    location: str,
    fragment: str,
) -> None:
    before = snapshot()
    path = write(copy.deepcopy(content) if isinstance(content, dict) else content, suffix)

    with pytest.raises(CommandError) as raised:
        run_import(path)

    message = str(raised.value)
    problems = [line.strip() for line in message.splitlines()[1:]]
    assert any(p.startswith(f"{location}") and fragment in p for p in problems), message
    assert "nothing was written" in message
    assert snapshot() == before


def test_there_are_at_least_thirty_invalid_cases() -> None:
    assert len(INVALID) + len(INVALID_JSON) >= 30


# --- Through a real manage.py process -----------------------------------------------


@pytest.fixture
def sqlite_env(tmp_path: Path) -> dict[str, str]:
    env = {
        **os.environ,
        "DATABASE_URL": f"sqlite:///{tmp_path / 'cli.sqlite3'}",
        "CRONICORN_SECRET_TEST": "from-env",
    }
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "-v0"], cwd=REPO, env=env, check=True, timeout=120
    )
    return env


def manage(env: dict[str, str], *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=REPO,
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_import_and_export_through_manage_py(
    sqlite_env: dict[str, str], write: Callable[..., Path]
) -> None:
    entry = endpoint_entry(
        headers={"X-Api-Key": "${CRONICORN_SECRET_TEST}"}, secret_headers=["X-Api-Key"]
    )
    path = write(document(entry))

    first = manage(sqlite_env, "import_endpoints", str(path))
    again = manage(sqlite_env, "import_endpoints", "-", "--dry-run", stdin=path.read_text())
    exported = manage(sqlite_env, "export_endpoints")
    broken = manage(sqlite_env, "import_endpoints", str(write(bad(method="FETCH"))))

    assert first.returncode == 0, first.stderr
    assert "+ endpoint ops/health: created" in first.stdout
    assert "Dry run (nothing to change)" in again.stdout
    assert (
        "from-env" not in exported.stdout
        and "${CRONICORN_SECRET_ACME_OPS_HEALTH_X_API_KEY}" in exported.stdout
    )
    assert broken.returncode != 0 and broken.stdout == ""
    assert f"{E0}.method" in broken.stderr
