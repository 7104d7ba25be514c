"""Alert channels in configuration files: imported with their targets from the
environment, exported with every target as a reference, never as its value."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from endpoints.config_io.documents import ConfigError, dump_document
from endpoints.config_io.exporting import export_config
from endpoints.config_io.importing import import_document
from notifications.models import Channel, ChannelKind

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 11, 24, 6, 0, tzinfo=UTC)
HOOK = "https://hooks.example.com/T000/B000/very-secret-token"
ENV = {"CRONICORN_SECRET_ONCALL_HOOK": HOOK}


def document(*channels: dict[str, object]) -> dict[str, object]:
    return {"version": 1, "tenants": [{"name": "Acme", "channels": list(channels)}]}


def oncall(**fields: object) -> dict[str, object]:
    return {
        "name": "oncall",
        "kind": "webhook",
        "target": "${CRONICORN_SECRET_ONCALL_HOOK}",
        **fields,
    }


def test_importing_a_channel_reads_its_target_from_the_environment_and_twice_changes_nothing():
    plan = import_document(document(oncall()), environ=ENV, now=NOW)
    assert [(c.kind, c.label, c.action) for c in plan.changes if c.kind == "channel"] == [
        ("channel", "Acme/oncall", "created")
    ]
    channel = Channel.objects.get()
    assert (channel.kind, channel.target, channel.enabled) == (ChannelKind.WEBHOOK, HOOK, True)

    again = import_document(document(oncall()), environ=ENV, now=NOW)
    assert not again.has_changes


def test_a_changed_target_is_reported_masked():
    import_document(document(oncall()), environ=ENV, now=NOW)
    plan = import_document(
        document(oncall()),
        environ={"CRONICORN_SECRET_ONCALL_HOOK": HOOK + "-rotated"},
        now=NOW,
        dry_run=True,
    )
    [change] = [c for c in plan.changes if c.kind == "channel"]
    assert change.action == "updated"
    assert [(f.name, f.old, f.new) for f in change.fields] == [("target", "••••", "••••")]


def test_export_writes_each_channel_target_as_a_reference_and_round_trips():
    import_document(document(oncall(), oncall(name="mail", kind="email", target="ops@example.com",
                                              enabled=False)), environ=ENV, now=NOW)  # fmt: skip
    exported, references = export_config()
    text = dump_document(exported, fmt="yaml")

    assert HOOK not in text and "ops@example.com" not in text
    assert references == [
        "CRONICORN_SECRET_ACME_CHANNEL_MAIL",
        "CRONICORN_SECRET_ACME_CHANNEL_ONCALL",
    ]
    [tenant] = exported["tenants"]
    assert tenant["channels"] == [
        {"name": "mail", "kind": "email", "target": "${CRONICORN_SECRET_ACME_CHANNEL_MAIL}",
         "enabled": False},
        {"name": "oncall", "kind": "webhook", "target": "${CRONICORN_SECRET_ACME_CHANNEL_ONCALL}"},
    ]  # fmt: skip
    environ = {references[0]: "ops@example.com", references[1]: HOOK}
    assert not import_document(exported, environ=environ, now=NOW, dry_run=True).has_changes


def test_a_bad_channel_is_refused_with_its_location_and_nothing_is_written():
    bad = document(
        oncall(kind="email", target="not-an-address"),
        {"name": "chat", "kind": "apprise", "target": "nonsense://x", "enabled": "yes"},
        {"name": "pager", "kind": "sms", "target": "x"},
    )
    with pytest.raises(ConfigError) as refused:
        import_document(bad, environ=ENV, now=NOW)
    problems = "\n".join(refused.value.problems)
    assert "tenants[0].channels[0].target: Give one or more email addresses" in problems
    assert "tenants[0].channels[1].enabled: expected true or false, got text" in problems
    assert "tenants[0].channels[1].target: Apprise does not understand this URL" in problems
    assert "tenants[0].channels[2].kind: Value 'sms' is not a valid choice." in problems
    assert not Channel.objects.exists()
