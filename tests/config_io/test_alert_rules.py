"""Alert rules in the import/export format: a job's ``alerts`` and an endpoint's override,
created with the job or endpoint they belong to, checked with located messages, exported
with the keys that differ from the defaults, and round-tripped unchanged."""

from __future__ import annotations

import io
from datetime import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from django.core.management import CommandError, call_command

from notifications.models import AlertRule, Channel, ChannelKind

pytestmark = pytest.mark.django_db


def document(job_alerts: Any = None, endpoint_alerts: Any = None) -> dict[str, Any]:
    endpoint: dict[str, Any] = {
        "name": "health",
        "url": "https://example.com/health",
        "baseline_interval": "5m",
    }
    job: dict[str, Any] = {"name": "ops", "endpoints": [endpoint]}
    if job_alerts is not None:
        job["alerts"] = job_alerts
    if endpoint_alerts is not None:
        endpoint["alerts"] = endpoint_alerts
    return {"version": 1, "tenants": [{"name": "Acme", "jobs": [job]}]}


def run_import(tmp_path: Path, content: dict[str, Any] | str, *args: str) -> str:
    path = tmp_path / "config.yaml"
    path.write_text(content if isinstance(content, str) else yaml.safe_dump(content))
    out = io.StringIO()
    call_command("import_endpoints", str(path), *args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


def export() -> str:
    out = io.StringIO()
    call_command("export_endpoints", stdout=out, stderr=io.StringIO())
    return out.getvalue()


def test_rules_are_created_with_a_new_job_and_endpoint_and_round_trip(tmp_path: Path) -> None:
    run_import(
        tmp_path,
        document(
            {"after_failures": 2, "quiet_from": "22:00", "quiet_until": "07:00"},
            {"on_pause": False},
        ),
    )
    job_rule = AlertRule.objects.get(job__name="ops")
    assert job_rule.after_failures == 2 and job_rule.quiet_from == time(22, 0)
    endpoint_rule = AlertRule.objects.get(endpoint__name="health")
    assert endpoint_rule.on_pause is False and endpoint_rule.after_failures == 3

    exported = yaml.safe_load(export())
    job = exported["tenants"][0]["jobs"][0]
    assert job["alerts"] == {"after_failures": 2, "quiet_from": "22:00", "quiet_until": "07:00"}
    assert job["endpoints"][0]["alerts"] == {"on_pause": False}
    again = run_import(tmp_path, export(), "--dry-run")
    assert "0 created, 0 updated, 0 archived" in again


def test_a_changed_rule_is_updated_keys_left_out_take_defaults_and_no_alerts_keeps_it(
    tmp_path: Path,
) -> None:
    run_import(tmp_path, document({"after_failures": 2, "stale_factor": 4}))
    rule = AlertRule.objects.get(job__name="ops")
    output = run_import(tmp_path, document({"stale_factor": 4}))
    assert "after_failures" in output
    rule.refresh_from_db()
    assert rule.after_failures == 3 and rule.stale_factor == 4
    run_import(tmp_path, document())
    assert AlertRule.objects.filter(pk=rule.pk).exists()


@pytest.mark.parametrize(
    ("alerts", "problem"),
    [
        ({"after_failures": "two"}, "alerts.after_failures: expected a whole number"),
        ({"after_failures": 0}, "alerts.after_failures: alert after at least 1 failure"),
        ({"quiet_from": "22:00"}, "give both quiet_from and quiet_until"),
        ({"quiet_from": "late", "quiet_until": "07:00"}, "alerts.quiet_from: expected a UTC"),
        ({"colour": "red"}, "alerts.colour: unknown key"),
        ({"remind_every_minutes": 366 * 24 * 60}, "alerts.remind_every_minutes: "),
        ("often", "alerts: expected a mapping"),
    ],
)
def test_a_bad_rule_is_refused_with_its_location_and_nothing_is_written(
    tmp_path: Path, alerts: Any, problem: str
) -> None:
    with pytest.raises(CommandError) as raised:
        run_import(tmp_path, document(alerts))
    assert problem in str(raised.value)
    assert not AlertRule.objects.exists()


def with_pager(content: dict[str, Any]) -> dict[str, Any]:
    content["tenants"][0]["channels"] = [
        {
            "name": "pager",
            "kind": "webhook",
            "target": "${CRONICORN_SECRET_ACME_CHANNEL_PAGER}",
            "escalation_only": True,
        }
    ]
    return content


ESCALATING = {
    "after_failures": 2,
    "remind_every_minutes": 60,
    "escalate_after_minutes": 30,
    "escalate_to": "pager",
}


def test_reminders_and_escalation_round_trip_export_import_export_unchanged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CRONICORN_SECRET_ACME_CHANNEL_PAGER", "https://e.com/pager")
    run_import(tmp_path, with_pager(document(ESCALATING)))
    rule = AlertRule.objects.select_related("escalate_to").get()
    assert (rule.remind_every_minutes, rule.escalate_after_minutes) == (60, 30)
    assert rule.escalate_to is not None and rule.escalate_to.name == "pager"
    assert rule.escalate_to.escalation_only and rule.escalate_to.tenant == rule.job.tenant

    first = export()
    exported = yaml.safe_load(first)["tenants"][0]
    assert exported["jobs"][0]["alerts"] == ESCALATING
    assert exported["channels"][0]["escalation_only"] is True
    assert "0 created, 0 updated, 0 archived" in run_import(tmp_path, first)
    assert export() == first


def test_an_escalation_set_elsewhere_goes_with_the_export_to_a_fresh_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_import(tmp_path, document({"after_failures": 2}))
    rule = AlertRule.objects.get()
    channel = Channel.objects.create(
        tenant=rule.job.tenant, name="boss", kind=ChannelKind.WEBHOOK, target="https://e.com/b"
    )
    AlertRule.objects.filter(pk=rule.pk).update(
        remind_every_minutes=15, escalate_after_minutes=30, escalate_to=channel
    )
    first = export()

    Channel.objects.all().delete()
    AlertRule.objects.all().delete()
    monkeypatch.setenv("CRONICORN_SECRET_ACME_CHANNEL_BOSS", "https://e.com/b")
    run_import(tmp_path, first)

    rule = AlertRule.objects.select_related("escalate_to").get()
    assert (rule.remind_every_minutes, rule.escalate_after_minutes) == (15, 30)
    assert rule.escalate_to is not None and rule.escalate_to.name == "boss"
    assert export() == first


@pytest.mark.parametrize(
    ("alerts", "problem"),
    [
        ({"escalate_after_minutes": 30}, "alerts.escalate_to: name the channel"),
        (
            {"escalate_after_minutes": 30, "escalate_to": "nobody"},
            "alerts.escalate_to: Acme has no channel named 'nobody'",
        ),
    ],
)
def test_an_escalation_without_its_channel_is_refused_with_its_location(
    tmp_path: Path, alerts: dict[str, Any], problem: str
) -> None:
    with pytest.raises(CommandError) as raised:
        run_import(tmp_path, document(alerts))
    assert problem in str(raised.value)
    assert not AlertRule.objects.exists()


def test_a_file_that_leaves_escalation_out_turns_it_off_like_any_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CRONICORN_SECRET_ACME_CHANNEL_PAGER", "https://e.com/pager")
    run_import(tmp_path, with_pager(document(ESCALATING)))
    output = run_import(tmp_path, with_pager(document({"after_failures": 2})))
    assert "escalate_to" in output
    rule = AlertRule.objects.get()
    assert (rule.remind_every_minutes, rule.escalate_after_minutes) == (0, 0)
    assert rule.escalate_to is None
