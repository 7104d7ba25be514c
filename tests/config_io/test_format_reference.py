"""The format reference the README points to (``endpoints/config_io/__init__.py``): it
shows every key the importer accepts, and it imports as written."""

from __future__ import annotations

import textwrap
from datetime import datetime
from typing import Any

import pytest
import yaml
from django.contrib.auth import get_user_model

from endpoints import config_io
from endpoints.config_io.importing import import_document
from endpoints.config_io.schema import (
    ALERT_KEYS,
    CHANNEL_KEYS,
    ENDPOINT_KEYS,
    JOB_KEYS,
    TENANT_KEYS,
)
from endpoints.models import Endpoint, Job
from notifications.models import AlertRule

# Keys the reader takes besides those of the tables (names, lists, secrets).
STRUCTURE = {
    "": ["version", "tenants"],
    "tenant": ["name", "members", "hmac_secret", "channels", "jobs", *TENANT_KEYS],
    "channel": ["name", *CHANNEL_KEYS],
    "job": ["name", "endpoints", "alerts", *JOB_KEYS],
    "endpoint": ["name", "alerts", *ENDPOINT_KEYS],
    "alerts": list(ALERT_KEYS),
}


def reference() -> str:
    """The example block of the format reference, as a file."""
    doc = config_io.__doc__ or ""
    start = doc.index("    version: 1")
    end = doc.index("\n\n", start)
    return textwrap.dedent(doc[start:end])


@pytest.mark.parametrize("level", list(STRUCTURE))
def test_the_format_reference_shows_every_key_the_importer_accepts(level: str) -> None:
    text = reference()
    # A key as written in the file (``key:``), commented out or not.
    missing = [key for key in STRUCTURE[level] if f"{key}:" not in text]
    assert missing == []


@pytest.mark.django_db
def test_the_format_reference_imports_as_written(now: datetime) -> None:
    get_user_model().objects.create_user("alice")
    environ = {
        "CRONICORN_SECRET_ACME_HMAC": "s3cret",
        "CRONICORN_SECRET_ACME_ONCALL_URL": "https://example.com/oncall",
        "CRONICORN_SECRET_ACME_PAGER": "json://example.com/pager",
        "CRONICORN_SECRET_BILLING_TOKEN": "Bearer s3cret",
    }
    document: Any = yaml.safe_load(reference())

    import_document(document, environ=environ, now=now)

    job = Job.objects.get(name="billing")
    assert job.run_policy["breaker_failed_slots"] == 5
    assert job.run_policy["holidays"] == {"country": "DE", "subdivision": "BY"}
    assert job.run_policy["exclude_dates"] == ["2026-12-24..2026-12-26", "2027-01-01"]
    rule = AlertRule.objects.select_related("escalate_to").get(job=job)
    assert (rule.remind_every_minutes, rule.escalate_after_minutes) == (60, 30)
    assert rule.escalate_to is not None and rule.escalate_to.name == "pager"
    endpoint = Endpoint.objects.get(name="queue")
    assert endpoint.run_policy == {"expected_status": [200], "catchup_window_ms": 60000}
