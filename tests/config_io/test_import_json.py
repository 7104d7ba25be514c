"""import_endpoints --json: what a dry run would change and what an import wrote, for
scripts (the README calls --json output stable)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from endpoints.models import Endpoint
from tests.config_io.files import document, endpoint_entry, run_import, snapshot

pytestmark = pytest.mark.django_db


def test_dry_run_json_lists_each_change_with_its_fields_and_the_counts(
    write: Callable[..., Path], make_endpoint: Callable[..., Endpoint]
) -> None:
    make_endpoint(name="health", url="https://example.com/health", baseline_interval_ms=300_000)
    make_endpoint(name="same", url="https://example.com/health", baseline_interval_ms=300_000)
    before = snapshot()
    doc = document(
        endpoint_entry("health", baseline_interval="30s"),
        endpoint_entry("same"),
        endpoint_entry("new"),
    )

    shown = json.loads(run_import(write(doc), "--dry-run", "--json"))

    assert snapshot() == before
    assert shown["dry_run"] is True
    assert shown["counts"] == {"created": 1, "updated": 1, "archived": 0, "unchanged": 3}
    changes = {(c["kind"], c["name"]): c for c in shown["changes"]}
    assert changes[("endpoint", "ops/health")]["action"] == "updated"
    assert changes[("endpoint", "ops/health")]["fields"] == [
        {"name": "baseline_interval", "old": "5m", "new": "30s"}
    ]
    assert changes[("endpoint", "ops/same")] == {
        "kind": "endpoint",
        "name": "ops/same",
        "action": "unchanged",
        "fields": [],
    }
    assert changes[("endpoint", "ops/new")]["action"] == "created"
    assert shown["warnings"] == []


def test_import_json_reports_what_it_wrote(write: Callable[..., Path]) -> None:
    shown = json.loads(run_import(write(document(endpoint_entry("new"))), "--json"))

    assert shown["dry_run"] is False
    assert shown["counts"]["created"] == 3  # the tenant, the job and the endpoint
    assert Endpoint.objects.get(name="new").job.name == "ops"
