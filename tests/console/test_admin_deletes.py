"""Deleting a tenant, job or endpoint with history through the admin.

The records (runs, hints, sessions, alerts, deliveries) are read-only in their own
admins, yet go with the object a superuser deletes; the confirmation page counts them
per kind instead of listing each one.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.admin import helpers
from django.db import connection
from django.db.models import Model
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from endpoints import operations
from endpoints.models import Endpoint, HintHistory, Job, Run, RunStatus, Tenant
from notifications.models import Alert, Channel, Delivery
from planner.models import AnalysisSession
from tests.world import TenantWorld, World


@pytest.fixture
def with_history(world: World) -> World:
    """The common world, with an alert channel, an alert and a delivery on each side."""
    now = timezone.now()
    for side in (world.a, world.b):
        side.channel = Channel.objects.create(
            tenant=side.tenant, name="oncall", kind="webhook", target="http://127.0.0.1:9/hook"
        )
        alert = Alert.objects.create(
            tenant=side.tenant, job=side.job, endpoint=side.endpoint, kind="failing",
            created_at=now,
        )  # fmt: skip
        delivery = Delivery.objects.create(
            channel=side.channel, subject="s", body="b", payload={}, next_attempt_at=now,
            created_at=now,
        )  # fmt: skip
        delivery.alerts.add(alert)
    return world


PARENTS: dict[str, Callable[[TenantWorld], Model]] = {
    "tenant": lambda side: side.tenant,
    "job": lambda side: side.job,
    "endpoint": lambda side: side.endpoint,
}


def _history_of(side: TenantWorld) -> dict[str, int]:
    endpoint = side.endpoint
    return {
        "runs": Run.objects.filter(endpoint=endpoint).count(),
        "hints": HintHistory.objects.filter(endpoint=endpoint).count(),
        "sessions": AnalysisSession.objects.filter(endpoint=endpoint).count(),
        "alerts": Alert.objects.filter(endpoint=endpoint).count(),
    }


def _delete_url(obj: Model) -> str:
    return reverse(f"admin:{obj._meta.app_label}_{obj._meta.model_name}_delete", args=[obj.pk])


def _changelist(obj: Model) -> str:
    return reverse(f"admin:{obj._meta.app_label}_{obj._meta.model_name}_changelist")


@pytest.mark.parametrize("kind", sorted(PARENTS))
def test_a_superuser_deletes_a_parent_with_history_from_its_delete_page(
    with_history: World, kind: str
) -> None:
    client = with_history.client_for(with_history.root)
    parent = PARENTS[kind](with_history.a)

    page = client.get(_delete_url(parent))
    assert page.status_code == 200
    text = page.content.decode()
    assert "Runs: 1" in text and "Hint history: 1" in text and "Analysis sessions: 1" in text
    assert "Alerts: 1" in text
    assert "permission to delete" not in text

    response = client.post(_delete_url(parent), {"post": "yes"})

    assert response.status_code == 302
    assert not type(parent).objects.filter(pk=parent.pk).exists()
    assert _history_of(with_history.a) == {"runs": 0, "hints": 0, "sessions": 0, "alerts": 0}
    assert _history_of(with_history.b) == {"runs": 1, "hints": 1, "sessions": 1, "alerts": 1}


@pytest.mark.parametrize("kind", sorted(PARENTS))
def test_a_superuser_deletes_parents_with_history_by_the_delete_selected_action(
    with_history: World, kind: str
) -> None:
    client = with_history.client_for(with_history.root)
    parent = PARENTS[kind](with_history.a)
    form = {"action": "delete_selected", helpers.ACTION_CHECKBOX_NAME: [parent.pk]}

    page = client.post(_changelist(parent), form)
    assert page.status_code == 200
    text = page.content.decode()
    assert "Runs: 1" in text and "Hint history: 1" in text
    assert "Cannot delete" not in text

    response = client.post(_changelist(parent), {**form, "post": "yes"})

    assert response.status_code == 302
    assert not type(parent).objects.filter(pk=parent.pk).exists()
    assert _history_of(with_history.a) == {"runs": 0, "hints": 0, "sessions": 0, "alerts": 0}
    assert _history_of(with_history.b) == {"runs": 1, "hints": 1, "sessions": 1, "alerts": 1}


def test_a_superuser_deletes_a_channel_with_its_deliveries(with_history: World) -> None:
    client = with_history.client_for(with_history.root)
    channel = with_history.a.channel

    assert "Deliveries: 1" in client.get(_delete_url(channel)).content.decode()
    assert client.post(_delete_url(channel), {"post": "yes"}).status_code == 302

    assert not Channel.objects.filter(pk=channel.pk).exists()
    assert list(Delivery.objects.values_list("channel", flat=True)) == [with_history.b.channel.pk]
    assert _history_of(with_history.a)["alerts"] == 1  # the endpoint's alerts stay with it


def test_the_counts_of_a_tenants_delete_cover_everything_of_its_and_nothing_else(
    with_history: World,
) -> None:
    client = with_history.client_for(with_history.root)
    with_history.add_endpoint(with_history.a.job, "second")
    Job.objects.create(tenant=with_history.a.tenant, name="empty-job")

    text = client.get(_delete_url(with_history.a.tenant)).content.decode()

    for line in ("Tenants: 1", "Jobs: 2", "Endpoints: 2", "Runs: 1", "Channels: 1"):
        assert line in text
    assert "Deliveries: 1" in text and "Alerts: 1" in text
    assert "beta-secret" not in text


def test_a_staff_member_deletes_nothing_and_never_another_tenants_objects(
    with_history: World,
) -> None:
    client = with_history.client_for(with_history.alice)

    for own in (with_history.a.job, with_history.a.endpoint):
        assert client.post(_delete_url(own), {"post": "yes"}).status_code == 403
        form = {"action": "delete_selected", helpers.ACTION_CHECKBOX_NAME: [own.pk], "post": "yes"}
        client.post(_changelist(own), form)
        assert type(own).objects.filter(pk=own.pk).exists()
    for other in (with_history.b.job, with_history.b.endpoint):
        assert client.post(_delete_url(other), {"post": "yes"}).status_code == 404
    assert client.post(_delete_url(with_history.b.tenant), {"post": "yes"}).status_code == 403
    assert _history_of(with_history.a)["runs"] == 1 and _history_of(with_history.b)["runs"] == 1
    assert Tenant.objects.count() == 2


@pytest.mark.parametrize(
    "record", ["run", "hint", "session"], ids=["run", "hint history", "analysis session"]
)
def test_a_single_record_still_cannot_be_deleted_on_its_own(
    with_history: World, record: str
) -> None:
    client = with_history.client_for(with_history.root)
    obj: Any = getattr(with_history.a, record)
    url = reverse(f"admin:{obj._meta.app_label}_{obj._meta.model_name}_delete", args=[obj.pk])

    assert client.post(url, {"post": "yes"}).status_code == 403
    assert type(obj).objects.filter(pk=obj.pk).exists()


RUNS = 5_000
MAX_QUERIES = 20  # measured: 14 for the delete page, 18 for the action (one COUNT a kind)


def test_the_delete_page_of_an_endpoint_with_many_runs_counts_them_without_listing_them(
    with_history: World, django_assert_max_num_queries: Any
) -> None:
    endpoint: Endpoint = with_history.a.endpoint
    started = timezone.now() - timedelta(days=3)
    Run.objects.bulk_create(
        Run(
            endpoint=endpoint,
            trigger="scheduled",
            source="baseline-interval",
            scheduled_for=started + timedelta(seconds=i),
            started_at=started + timedelta(seconds=i),
            status=RunStatus.SUCCESS,
        )
        for i in range(RUNS)
    )
    client = with_history.client_for(with_history.root)
    run_pages = re.compile(reverse("admin:endpoints_run_changelist") + r"\d+/")

    for url, form in (
        (_delete_url(endpoint), None),
        (
            _changelist(endpoint),
            {"action": "delete_selected", helpers.ACTION_CHECKBOX_NAME: [endpoint.pk]},
        ),
    ):
        with django_assert_max_num_queries(MAX_QUERIES):
            page = client.get(url) if form is None else client.post(url, form)
        text = page.content.decode()
        assert f"Runs: {RUNS + 1}" in text
        assert not run_pages.search(text)
        assert len(text) < 20_000

    assert client.post(_delete_url(endpoint), {"post": "yes"}).status_code == 302
    assert not Run.objects.filter(endpoint_id=endpoint.pk).exists()


def _add_history(endpoint: Endpoint, count: int) -> tuple[list[Run], list[AnalysisSession]]:
    """``count`` runs (one retried) and a tenth as many analysis sessions, each with a hint."""
    started = timezone.now() - timedelta(days=3)
    sessions = AnalysisSession.objects.bulk_create(
        AnalysisSession(endpoint=endpoint, backend="rules", started_at=started)
        for _ in range(max(count // 10, 1))
    )
    HintHistory.objects.bulk_create(
        HintHistory(endpoint=endpoint, kind="clear", created_at=started, session=session)
        for session in sessions
    )
    runs = Run.objects.bulk_create(
        Run(
            endpoint=endpoint,
            trigger="scheduled",
            source="baseline-interval",
            scheduled_for=started + timedelta(seconds=i),
            started_at=started + timedelta(seconds=i),
            status=RunStatus.FAILURE,
        )
        for i in range(count)
    )
    first = runs[0]
    Run.objects.create(
        endpoint=endpoint, trigger="retry", source="retry", scheduled_for=first.scheduled_for,
        started_at=first.started_at + timedelta(seconds=1), attempt=2, retry_of=first,
    )  # fmt: skip
    return runs, sessions


def test_deleting_an_endpoint_takes_as_many_statements_for_many_runs_as_for_few(
    with_history: World,
) -> None:
    """The history goes set-based (one month of a run a second is 2.6 million runs):
    Django's own delete reads each run's and session's id and deletes them 100 at a time."""
    few, many = with_history.a.endpoint, with_history.b.endpoint
    _add_history(few, 3)
    many_runs, many_sessions = _add_history(many, 1_000)
    # Rows of another endpoint naming rows that go keep theirs, unlinked (SET_NULL).
    other = Endpoint.objects.create(
        job=with_history.b.job, name="other", url="http://127.0.0.1:9/", baseline_interval_ms=60_000
    )
    survivor = Run.objects.create(
        endpoint=other, scheduled_for=timezone.now(), started_at=timezone.now(),
        retry_of=many_runs[5],
    )  # fmt: skip
    hint = HintHistory.objects.create(
        endpoint=other, kind="clear", created_at=timezone.now(), session=many_sessions[5]
    )
    statements = []
    for endpoint in (few, many):
        with CaptureQueriesContext(connection) as queries:
            assert operations.delete_for_good(Endpoint.objects.filter(pk=endpoint.pk)) == 1
        statements.append(len(queries))
        assert not Run.objects.filter(endpoint_id=endpoint.pk).exists()
        assert not AnalysisSession.objects.filter(endpoint_id=endpoint.pk).exists()
        assert not HintHistory.objects.filter(endpoint_id=endpoint.pk).exists()

    assert statements[0] == statements[1], statements
    survivor.refresh_from_db()
    hint.refresh_from_db()
    assert (survivor.retry_of_id, hint.session_id) == (None, None)
