"""``cronicorn`` against the API served as deployed, with a read key and a write key: each
verb once, its human output and its ``--json`` (parsed here), what it changed in the
database, and the refusals in words with their exit codes. Every command runs as the
installed console script with no database variable in its environment (tests/cli/conftest.py)."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import pytest
import yaml
from django.utils import timezone

from cli.client import ROUTES, Client
from endpoints.backfill_models import Backfill
from endpoints.models import Endpoint, HintHistory, Job, Run
from tests.api.serving import gunicorn_serving
from tests.cli.conftest import Ran, operator_env, run_cli
from tests.http_targets import TargetServer, free_port
from tests.world import ApiWorld

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]
Cli = Callable[..., Ran]


def ok(ran: Ran) -> Ran:
    assert ran.code == 0, (ran.code, ran.stdout, ran.stderr)
    return ran


def test_the_reading_verbs_show_the_keys_tenant_as_tables_and_as_json(
    cli: Cli, api_world: ApiWorld
) -> None:
    a = api_world.a
    listed = ok(cli("endpoints", "list", key=api_world.read_key))
    header, row = listed.stdout.splitlines()
    assert header.split()[:4] == ["ID", "JOB", "NAME", "NEXT"]
    assert row.split()[:3] == [str(a.endpoint.pk), str(a.job.pk), "alpha-orders"]
    assert "beta" not in listed.stdout.lower()
    page = ok(cli("endpoints", "list", "--json", key=api_world.read_key)).json()
    assert [e["id"] for e in page["items"]] == [a.endpoint.pk]

    shown = ok(cli("endpoints", "show", str(a.endpoint.pk), key=api_world.read_key)).stdout
    assert "url" in shown and "https://alpha.example.com/orders" in shown
    assert ok(cli("endpoints", "show", str(a.endpoint.pk), "--json")).json()["name"] == (
        "alpha-orders"
    )

    runs = ok(cli("runs", str(a.endpoint.pk), key=api_world.read_key)).stdout.splitlines()
    assert runs[0].split()[:4] == ["ID", "STARTED", "STATUS", "CODE"]
    assert runs[1].split()[0] == str(a.run.pk) and "failure" in runs[1] and "503" in runs[1]
    items = ok(cli("runs", str(a.endpoint.pk), "--json")).json()["items"]
    assert [(r["id"], r["status_code"]) for r in items] == [(a.run.pk, 503)]

    explained = ok(cli("explain", str(a.endpoint.pk), key=api_world.read_key)).stdout
    assert explained.startswith(f"endpoint {a.endpoint.pk} (alpha-orders): next run ")
    assert len(explained.splitlines()) >= 2  # the governor's account under the head
    assert ok(cli("explain", str(a.endpoint.pk), "--json")).json()["explanation"]

    preview = ok(cli("preview", str(a.endpoint.pk), "--count", "3", key=api_world.read_key))
    assert len(preview.stdout.splitlines()) == 4 and "LOCAL (UTC)" in preview.stdout
    planned = ok(cli("preview", str(a.endpoint.pk), "--count", "3", "--json")).json()
    assert len(planned["runs"]) == 3 and planned["timezone"] == "UTC"


def test_the_changing_verbs_change_the_endpoint_with_a_write_key(
    cli: Cli, api_world: ApiWorld
) -> None:
    endpoint = api_world.a.endpoint
    eid = str(endpoint.pk)
    paused = ok(cli("pause", eid, "--for", "10m", "--reason", "maintenance"))
    assert paused.stdout.startswith(f"Paused endpoint {eid} (alpha-orders) until ")
    endpoint.refresh_from_db()
    assert endpoint.paused_until is not None and endpoint.pause_reason == "maintenance"
    assert endpoint.paused_until - timezone.now() > timedelta(minutes=9)

    resumed = ok(cli("resume", eid, "--json")).json()
    assert resumed["paused_until"] is None
    endpoint.refresh_from_db()
    assert endpoint.paused_until is None

    hinted = ok(cli("hint", eid, "--interval", "30s", "--ttl", "10m", "--reason", "deep queue"))
    assert hinted.stdout.startswith(f"Hinted endpoint {eid} (alpha-orders) until ")
    endpoint.refresh_from_db()
    assert endpoint.ai_hint_interval_ms == 30_000
    assert HintHistory.objects.filter(endpoint=endpoint, reason="deep queue").exists()
    ok(cli("hint", eid, "--clear"))
    endpoint.refresh_from_db()
    assert endpoint.ai_hint_interval_ms is None

    triggered = ok(cli("trigger", eid)).stdout
    assert triggered.startswith(f"Endpoint {eid} (alpha-orders) runs now")
    endpoint.refresh_from_db()
    assert endpoint.next_run_at is not None and endpoint.next_run_at <= timezone.now()


def test_test_calls_the_endpoint_once_and_shows_the_run(cli: Cli, api_world: ApiWorld) -> None:
    endpoint = api_world.a.endpoint
    with TargetServer() as target:
        target.reply("/probe", status=202, body={"ok": True})
        Endpoint.objects.filter(pk=endpoint.pk).update(url=target.url("/probe"))
        shown = ok(cli("test", str(endpoint.pk)))
        assert len(target.hits("/probe")) == 1
    run = Run.objects.filter(endpoint=endpoint).latest("started_at")
    assert shown.stdout.startswith(f"Run {run.pk}: success HTTP 202 in ")


def test_export_then_import_of_the_tenants_file(
    cli: Cli, api_world: ApiWorld, tmp_path: Path
) -> None:
    exported = ok(cli("export", key=api_world.read_key))
    document = yaml.safe_load(exported.stdout)
    assert [t["name"] for t in document["tenants"]] == ["Alpha"]
    assert "CRONICORN_SECRET_ALPHA_CHANNEL_ONCALL" in exported.stderr  # set before importing
    as_json = ok(cli("export", "--format", "json", "--json")).json()
    assert as_json["format"] == "json" and '"alpha-orders"' in as_json["text"]

    jobs = document["tenants"][0]["jobs"]
    jobs[0]["endpoints"].append(
        {"name": "added", "url": "https://alpha.example.com/added", "baseline_interval": "5m"}
    )
    path = tmp_path / "acme.yaml"
    path.write_text(yaml.safe_dump(document))
    secret = {"CRONICORN_SECRET_ALPHA_CHANNEL_ONCALL": "http://127.0.0.1:9/hook"}
    dry = ok(cli("import", str(path), "--dry-run", **secret))
    assert "+ endpoint ops-alpha/added: created" in dry.stdout
    assert dry.stdout.splitlines()[-1].startswith("Dry run: 1 created, 0 updated, 0 archived")
    assert not Endpoint.objects.filter(name="added").exists()

    done = ok(cli("import", str(path), "--json", **secret)).json()
    assert done["counts"]["created"] == 1 and not done["dry_run"]
    added = Endpoint.objects.get(name="added")
    assert added.job_id == api_world.a.job.pk and added.next_run_at is not None
    again = ok(cli("import", "-", "--dry-run", stdin=path.read_text(), **secret))
    assert "Dry run: 0 created, 0 updated, 0 archived" in again.stdout


def test_refusals_are_said_in_words_with_exit_code_1(cli: Cli, api_world: ApiWorld) -> None:
    missing = cli("endpoints", "show", "999999")
    assert missing.code == 1 and missing.stdout == ""
    assert "404 Not Found: No endpoint with id 999999 (or not in your tenant)." in missing.stderr
    other = cli("explain", str(api_world.b.endpoint.pk))  # another tenant's: does not exist
    assert other.code == 1 and "404 Not Found" in other.stderr
    assert "beta" not in other.stderr.lower()

    invalid = cli("pause", str(api_world.a.endpoint.pk), "--until", "tomorrow-ish")
    assert invalid.code == 1
    # "Unprocessable Entity" up to Python 3.12, "Unprocessable Content" since (RFC 9110).
    assert "422 Unprocessable " in invalid.stderr
    assert "The input is invalid; fix the fields listed." in invalid.stderr
    assert "\n  until: " in invalid.stderr  # the field, with its message, on its own line
    problem = cli("pause", str(api_world.a.endpoint.pk), "--until", "tomorrow-ish", "--json")
    assert problem.code == 1 and problem.json()["status"] == 422
    assert "until" in problem.json()["errors"]

    read_only = cli("resume", str(api_world.a.endpoint.pk), key=api_world.read_key)
    assert read_only.code == 1 and "403 Forbidden: This API key is read-only" in read_only.stderr

    bad_key = cli("endpoints", "list", key="cc_00000000_not-a-key")
    assert bad_key.code == 1 and "401 Unauthorized" in bad_key.stderr
    assert "the API key was refused: check CRONICORN_API_KEY" in bad_key.stderr

    archived = api_world.world.add_endpoint(api_world.a.job, "gone", archived_at=timezone.now())
    conflict = cli("trigger", str(archived.pk))
    assert conflict.code == 1 and "409 Conflict: " in conflict.stderr
    assert "archived" in conflict.stderr

    elsewhere = Path(__file__).with_name("beta.yaml")
    beta = "version: 1\ntenants:\n  - name: Beta\n    jobs: [{name: stolen}]\n"
    refused = cli("import", "-", stdin=beta)
    assert refused.code == 1 and "404 Not Found: No tenant named 'Beta'" in refused.stderr
    assert not Job.objects.filter(name="stolen").exists() and not elsewhere.exists()
    broken = cli("import", "-", stdin="version: 1\ntenants:\n  - name: Alpha\n    jobs: 3\n")
    assert broken.code == 1 and "\n  text: tenants[0].jobs: " in broken.stderr


def test_usage_errors_exit_2_and_an_unreachable_server_exits_3(tmp_path: Path) -> None:
    def cli(*args: str, **env: str) -> Ran:
        values = {"CRONICORN_URL": f"http://127.0.0.1:{free_port()}", "CRONICORN_API_KEY": "k"}
        return run_cli(operator_env(tmp_path, **{**values, **env}), *args)

    no_url = cli("endpoints", "list", CRONICORN_URL="")
    assert no_url.code == 2 and "No server URL: set CRONICORN_URL" in no_url.stderr
    no_key = cli("endpoints", "list", CRONICORN_API_KEY="")
    assert no_key.code == 2 and "No API key: set CRONICORN_API_KEY" in no_key.stderr
    bad_duration = cli("pause", "1", "--for", "a while")
    assert bad_duration.code == 2 and "is not a duration" in bad_duration.stderr
    no_verb = cli()
    assert no_verb.code == 2 and "usage: cronicorn" in no_verb.stderr
    no_file = cli("import", "/nonexistent/file.yaml")
    assert no_file.code == 2 and "no such file" in no_file.stderr
    down = cli("endpoints", "list")  # nothing listens on that port
    assert down.code == 3 and "cannot reach the server" in down.stderr


def test_too_many_requests_says_when_to_retry(api_world: ApiWorld, tmp_path: Path) -> None:
    with gunicorn_serving(tmp_path, CRONICORN_API_RATE="2/m") as base_url:
        env = operator_env(tmp_path, CRONICORN_URL=base_url, CRONICORN_API_KEY=api_world.read_key)
        answers = [run_cli(env, "endpoints", "list") for _ in range(3)]
    assert [ran.code for ran in answers] == [0, 0, 1]
    assert "429 Too Many Requests: Too many requests for this key" in answers[2].stderr
    assert re.search(r"\n  Retry after \d+ s\.", answers[2].stderr), answers[2].stderr


def test_the_verbs_call_operations_the_served_document_has(
    served: str, api_world: ApiWorld
) -> None:
    document = Client(served, api_world.read_key).request("GET", "/openapi.json")
    served_routes = {
        operation["operationId"]: (method.upper(), path.removeprefix("/api/v1"))
        for path, item in document["paths"].items()
        for method, operation in item.items()
    }
    for name, route in ROUTES.items():
        assert served_routes.get(name) == route, name


def test_backfill_lists_starts_shows_and_cancels_a_past_range(
    cli: Cli, api_world: ApiWorld
) -> None:
    endpoint = api_world.a.endpoint
    Endpoint.objects.filter(pk=endpoint.pk).update(baseline_interval_ms=600_000)
    end = (timezone.now() - timedelta(minutes=15)).replace(microsecond=0)
    span = ["--from", (end - timedelta(hours=1)).isoformat(), "--to", end.isoformat()]
    eid = str(endpoint.pk)

    dry = ok(cli("backfill", eid, *span, "--dry-run")).stdout
    assert re.match(
        r"Dry run: 6 slots from \S+ \S+ to \S+ \S+: 6 would run \(about 1 s at 5/s\)", dry
    )
    assert dry.count(f"  endpoint {eid}  run") == 6 and "Nothing was written." in dry
    before = set(Backfill.objects.values_list("pk", flat=True))  # the world's finished ones
    assert Backfill.objects.count() == len(before)

    started = ok(cli("backfill", eid, *span, "--rate", "2/s", "--json")).json()
    backfill = Backfill.objects.exclude(pk__in=before).get()
    assert (started["id"], started["status"], started["total"]) == (backfill.pk, "queued", 6)
    assert backfill.rate == 2 and backfill.requested_by.startswith("API key ")

    shown = ok(cli("backfill", "--status", str(backfill.pk))).stdout
    assert shown.startswith(
        f"Backfill {backfill.pk} of {endpoint.job.name}/{endpoint.name} (queued)"
    )
    assert f"cronicorn backfill --cancel {backfill.pk}" in shown

    cancelled = ok(cli("backfill", "--cancel", str(backfill.pk))).stdout
    assert "(cancelled): 0 of 6 run" in cancelled
    backfill.refresh_from_db()
    assert backfill.status == "cancelled"
    # Done already: --wait returns at once with the last word.
    assert "(cancelled)" in ok(cli("backfill", "--status", str(backfill.pk), "--wait")).stdout

    read_only = cli("backfill", eid, *span, key=api_world.read_key)
    assert read_only.code == 1 and "403" in read_only.stderr
    assert Backfill.objects.count() == len(before) + 1
    others = cli("backfill", "--status", str(api_world.b.backfill.pk))  # tenant B's
    assert others.code == 1 and "404" in others.stderr
    unnamed = cli("backfill", *span)
    assert (
        unnamed.code == 2 and "Name the ENDPOINT_ID to backfill, or --job JOB_ID." in unnamed.stderr
    )
    bad_rate = cli("backfill", eid, *span, "--rate", "fast")
    assert bad_rate.code == 2 and "'fast' is not a rate" in bad_rate.stderr
