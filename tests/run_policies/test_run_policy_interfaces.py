"""Run policies through every interface: import/export, the REST API (and so MCP, which
serves the same operations), the admin's form and ``explain --next``."""

from __future__ import annotations

import io
import itertools
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from django.core.exceptions import ValidationError
from django.core.management import CommandError, call_command

from api.operations import OPERATIONS
from console.admin.forms import EndpointAdminForm
from endpoints.models import Endpoint, Job, Tenant
from tests.world import endpoint_form

POLICY = {"retry_attempts": 3, "body_json_path": "status", "body_json_equals": "ok"}


def test_policies_round_trip_through_import_and_export(db: None, tmp_path: Path) -> None:
    document = {
        "version": 1,
        "tenants": [
            {
                "name": "Acme",
                "jobs": [
                    {
                        "name": "ops",
                        "run_policy": {"jitter_ms": 30_000, "catchup_window_ms": 3_600_000},
                        "endpoints": [
                            {
                                "name": "health",
                                "url": "https://example.com/health",
                                "baseline_interval": "5m",
                                "run_policy": POLICY,
                            }
                        ],
                    }
                ],
            }
        ],
    }
    path = tmp_path / "in.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    call_command("import_endpoints", str(path), stdout=io.StringIO(), stderr=io.StringIO())

    assert Job.objects.get(name="ops").run_policy["jitter_ms"] == 30_000
    assert Endpoint.objects.get(name="health").run_policy == POLICY
    out = io.StringIO()
    call_command("export_endpoints", stdout=out, stderr=io.StringIO())
    exported = yaml.safe_load(out.getvalue())
    job = exported["tenants"][0]["jobs"][0]
    assert job["run_policy"] == {"jitter_ms": 30_000, "catchup_window_ms": 3_600_000}
    assert job["endpoints"][0]["run_policy"] == POLICY

    again = tmp_path / "again.yaml"
    again.write_text(out.getvalue())
    report = io.StringIO()
    call_command("import_endpoints", str(again), "--dry-run", stdout=report, stderr=io.StringIO())
    assert "0 created, 0 updated, 0 archived, 3 unchanged" in report.getvalue()


def test_a_bad_policy_in_a_file_is_refused_with_its_place_and_key(db: None, tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(
        "version: 1\ntenants:\n- name: Acme\n  jobs:\n  - name: ops\n"
        "    run_policy: {retry_attempts: 99}\n"
    )
    with pytest.raises(CommandError) as caught:
        call_command("import_endpoints", str(path), stdout=io.StringIO(), stderr=io.StringIO())
    assert "retry_attempts: must be between 1 and 10" in str(caught.value)
    assert not Job.objects.exists()


def test_the_admin_form_takes_a_policy_as_json_text(job: Job) -> None:
    data = endpoint_form(job, run_policy='{"retry_attempts": 0}')
    form = EndpointAdminForm(data=data)
    assert not form.is_valid()
    assert "retry_attempts: must be between 1 and 10" in str(form.errors["run_policy"])
    form = EndpointAdminForm(data={**data, "run_policy": json.dumps(POLICY)})
    assert form.is_valid(), form.errors
    assert form.cleaned_data["run_policy"] == POLICY


def test_explain_next_lists_runs_in_the_zone_and_utc_across_dst(make_endpoint: Any) -> None:
    endpoint = make_endpoint(baseline_cron="30 2 * * *", timezone="America/New_York")
    out = io.StringIO()
    call_command(
        "explain",
        str(endpoint.pk),
        "--at",
        "2026-03-06T12:00:00Z",
        "--next",
        "3",
        "--json",
        stdout=out,
    )
    runs = json.loads(out.getvalue())["next"]
    assert [run["utc"] for run in runs] == [
        "2026-03-07T07:30:00+00:00",
        "2026-03-08T07:00:00+00:00",  # 02:30 does not exist that day: 03:00 EDT
        "2026-03-09T06:30:00+00:00",
    ]
    assert runs[0]["local"].endswith("EST-0500") and runs[2]["local"].endswith("EDT-0400")
    text = io.StringIO()
    call_command("explain", str(endpoint.pk), "--at", "2026-03-06T12:00:00Z", "--next", "2",
                 stdout=text)  # fmt: skip
    assert "Next 2 runs (America/New_York | UTC):" in text.getvalue()
    with pytest.raises(CommandError):
        call_command("explain", str(endpoint.pk), "--next", "101", stdout=io.StringIO())


@pytest.mark.django_db(transaction=True)
def test_the_api_sets_checks_and_previews_policies(http: httpx.Client, job: Job) -> None:
    bad = http.patch(f"/jobs/{job.pk}", json={"run_policy": {"jitter_ms": -1}})
    assert bad.status_code == 422, bad.text
    assert "run_policy" in bad.text and "jitter_ms" in bad.text
    ok = http.patch(f"/jobs/{job.pk}", json={"run_policy": {"jitter_ms": 30_000}})
    assert ok.status_code == 200 and ok.json()["run_policy"] == {"jitter_ms": 30_000}

    created = http.post(
        "/endpoints",
        json={
            "job_id": job.pk,
            "name": "hourly",
            "url": "https://example.com/",
            "baseline_cron": "0 * * * *",
            "timezone": "Europe/Berlin",
            "run_policy": POLICY,
        },
    )
    assert created.status_code == 201, created.text
    assert created.json()["run_policy"] == POLICY
    preview = http.get(f"/endpoints/{created.json()['id']}/preview", params={"count": 5})
    assert preview.status_code == 200, preview.text
    runs = preview.json()["runs"]
    assert len(runs) == 5 and preview.json()["timezone"] == "Europe/Berlin"
    times = [datetime.fromisoformat(run["utc"]).astimezone(UTC) for run in runs]
    offsets = {(t.minute, t.second) for t in times}
    assert len(offsets) == 1  # the same jitter every hour
    assert all(b - a == times[1] - times[0] for a, b in itertools.pairwise(times))
    assert http.get(f"/endpoints/{created.json()['id']}/preview?count=0").status_code == 422
    # One operation, both a route and an MCP tool.
    assert "preview_runs" in {op.name for op in OPERATIONS}


def test_explain_says_a_blackout_window_moved_the_run(job: Job, make_endpoint: Any) -> None:
    job.run_policy = {"blackout": [{"start": "02:00", "end": "04:00"}]}
    job.full_clean()
    job.save()
    endpoint = make_endpoint(baseline_cron="0 * * * *", timezone="Europe/Berlin")
    out = io.StringIO()
    call_command("explain", str(endpoint.pk), "--at", "2026-11-25T00:30:00Z", stdout=out)
    assert "inside the blackout window 02:00-04:00 daily (Europe/Berlin)" in out.getvalue()
    assert (
        "set by a time window (blackout, allowed hours or active period) (window)" in out.getvalue()
    )


@pytest.mark.parametrize(
    ("windows", "message"),
    [
        ([{"start": "2am", "end": "04:00"}], "start is a time of day as HH:MM"),
        ([{"start": "02:00", "end": "02:00"}], "start and end are the same"),
        ([{"start": "02:00", "end": "04:00", "days": ["funday"]}], "days is a list of mon"),
        ({"start": "02:00"}, "a list of at most 20 windows"),
    ],
)
def test_bad_blackout_windows_are_refused_in_words(job: Job, windows: Any, message: str) -> None:
    job.run_policy = {"blackout": windows}
    with pytest.raises(ValidationError) as caught:
        job.full_clean()
    assert message in str(caught.value.message_dict["run_policy"])


def test_a_job_runs_now_and_a_tenant_pauses_and_resumes_from_the_commands(
    tenant: Tenant, job: Job, make_endpoint: Any
) -> None:
    one, two = make_endpoint(), make_endpoint()
    paused = make_endpoint()
    call_command("pause", paused.ref, "--for", "1h", stdout=io.StringIO())
    out, err = io.StringIO(), io.StringIO()
    call_command("trigger", "--job", job.name, stdout=out, stderr=err)
    assert "2 endpoints of job ops due now." in out.getvalue()
    assert "paused until" in err.getvalue()
    for endpoint in (one, two):
        endpoint.refresh_from_db()
        assert endpoint.next_run_source == "manual"

    other = Job.objects.create(tenant=tenant, name="reports")
    out = io.StringIO()
    call_command("pause", "--tenant", tenant.name, stdout=out)
    assert "Acme: 2 jobs paused" in out.getvalue()
    assert set(Job.objects.values_list("status", flat=True)) == {"paused"}
    with pytest.raises(CommandError, match="resume the job first"):
        call_command("trigger", "--job", other.name, stdout=io.StringIO())
    out = io.StringIO()
    call_command("resume", "--tenant", str(tenant.pk), stdout=out)
    assert "Acme: 2 jobs resumed." in out.getvalue()
    assert set(Job.objects.values_list("status", flat=True)) == {"active"}


@pytest.mark.django_db(transaction=True)
def test_the_api_runs_a_job_now_and_pauses_a_tenant(
    http: httpx.Client, tenant: Tenant, job: Job, make_endpoint: Any
) -> None:
    endpoint = make_endpoint()
    response = http.post(f"/jobs/{job.pk}/run")
    assert response.status_code == 200, response.text
    assert response.json()["detail"] == "1 endpoint of ops due now."
    endpoint.refresh_from_db()
    assert endpoint.next_run_source == "manual"
    assert http.post(f"/tenants/{tenant.pk}/pause").json()["detail"] == "Acme: 1 job paused."
    assert Job.objects.get(pk=job.pk).status == "paused"
    assert http.post(f"/tenants/{tenant.pk}/resume").json()["detail"] == "Acme: 1 job resumed."
    stranger = Tenant.objects.create(name="Other")
    assert http.post(f"/tenants/{stranger.pk}/pause").status_code == 404


def test_the_admin_endpoint_page_previews_the_next_runs(client: Any, make_endpoint: Any) -> None:
    from django.contrib.auth import get_user_model

    admin_user = get_user_model().objects.create_superuser("root", "root@example.com", "pw")
    client.force_login(admin_user)
    endpoint = make_endpoint(baseline_cron="30 9 * * *", timezone="America/New_York")
    page = client.get(f"/admin/endpoints/endpoint/{endpoint.pk}/change/")
    assert page.status_code == 200
    text = page.content.decode()
    assert "next runs" in text.lower()
    assert text.count(" UTC &nbsp;(baseline-cron)") == 5
    assert "EST" in text or "EDT" in text


def test_an_oversized_policy_is_refused_in_words_by_the_api_and_the_admin_form(
    http: httpx.Client, job: Job, tmp_path: Path
) -> None:
    """The 2.2 MB policy the API took (issue 32): one window's days repeated. The one
    validation refuses it, through the API (and so MCP), the admin and an import."""
    huge = {"blackout": [{"start": "02:00", "end": "04:00", "days": ["mon"] * 300_000}]}
    refused = http.patch(f"/jobs/{job.pk}", json={"run_policy": huge})
    assert refused.status_code == 422, refused.text[:300]
    assert "bytes of JSON; at most 20480 are allowed" in refused.text
    job.refresh_from_db()
    assert job.run_policy == {}

    form = EndpointAdminForm(data=endpoint_form(job, run_policy=json.dumps(huge)))
    assert not form.is_valid()
    assert "at most 20480 are allowed" in str(form.errors["run_policy"])

    # A file has its own bound (2 MB): a policy just over its own.
    over = {"blackout": [{"start": "02:00", "end": "04:00", "days": ["mon"] * 4_000}]}
    path = tmp_path / "big.yaml"
    path.write_text(
        "version: 1\ntenants:\n- name: Acme\n  jobs:\n  - name: ops\n"
        f"    run_policy: {json.dumps(over)}\n"
    )
    with pytest.raises(CommandError, match="at most 20480 are allowed"):
        call_command("import_endpoints", str(path), stdout=io.StringIO(), stderr=io.StringIO())
