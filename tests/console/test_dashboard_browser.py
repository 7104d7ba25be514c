"""The dashboard and the endpoint page in Chromium: durations in words, lateness of
scheduled runs apart from catch-up runs, headers that read as words, failing alert
channels, and the adaptation chart. Screenshots go to tests/screenshots/ to be looked at.

The ORM is used only before the browser starts (see test_admin_browser.py for why)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone
from playwright.sync_api import expect

from endpoints.models import (
    Endpoint,
    HintHistory,
    HintKind,
    Job,
    Run,
    RunStatus,
    Slot,
    Source,
    Tenant,
)
from notifications.models import Channel, ChannelKind
from tests.console.browser import PASSWORD, chromium_page, shot, sign_in

pytestmark = pytest.mark.browser


@pytest.fixture
def endpoint(transactional_db: None) -> Endpoint:
    user = get_user_model().objects.create_user("alice", password=PASSWORD, is_staff=True)
    tenant = Tenant.objects.create(name="Acme")
    tenant.members.add(user)
    job = Job.objects.create(tenant=tenant, name="ops")
    endpoint = Endpoint(
        job=job, name="queue", url="https://example.com/q", baseline_interval_ms=60_000
    )
    endpoint.save()
    adapt(endpoint)
    Channel.objects.create(
        tenant=tenant,
        name="pager",
        kind=ChannelKind.WEBHOOK,
        target="https://hooks.example.com/secret-path",
        failing_since=timezone.now() - timedelta(minutes=20),
        consecutive_failures=4,
        last_error="webhook: HTTP 503 Service Unavailable",
    )
    return endpoint


def adapt(endpoint: Endpoint) -> None:
    """Fifty minutes of runs: every minute, then every 15 s while a hint was active, a
    ten-minute pause, every minute again; a catch-up run 5.6 min late; failures at the end."""
    now = timezone.now()
    at = now - timedelta(minutes=50)
    hint_from, hint_to = now - timedelta(minutes=38), now - timedelta(minutes=30)
    pause_from, pause_to = now - timedelta(minutes=25), now - timedelta(minutes=15)
    HintHistory.objects.create(
        endpoint=endpoint, kind=HintKind.INTERVAL, interval_ms=15_000, created_at=hint_from,
        expires_at=hint_to, reason="queue growing",
    )  # fmt: skip
    HintHistory.objects.create(
        endpoint=endpoint, kind=HintKind.PAUSE, paused_until=pause_to, created_at=pause_from,
        reason="maintenance window",
    )  # fmt: skip
    runs = []
    while at < now - timedelta(seconds=30):
        if pause_from <= at < pause_to:
            at = pause_to
        failing = at > now - timedelta(minutes=4)
        runs.append(
            Run(
                endpoint=endpoint, scheduled_for=at, started_at=at + timedelta(milliseconds=340),
                finished_at=at + timedelta(seconds=2), duration_ms=1_500 if not failing else 30_000,
                status=RunStatus.FAILURE if failing else RunStatus.SUCCESS,
                status_code=503 if failing else 200, source="baseline-interval",
            )
        )  # fmt: skip
        at += timedelta(seconds=15) if hint_from <= at < hint_to else timedelta(minutes=1)
    late = runs[-8]
    late.started_at = late.scheduled_for + timedelta(minutes=5.6)
    Run.objects.bulk_create(runs)
    Endpoint.objects.filter(pk=endpoint.pk).update(failure_count=3)
    Slot.objects.filter(pk=endpoint.pk).update(last_run_at=runs[-1].started_at)
    Slot.objects.filter(pk=endpoint.pk).update(
        next_run_at=runs[-1].started_at + timedelta(minutes=8),
        next_run_source=Source.BASELINE_INTERVAL,
    )


def test_the_dashboard_and_the_adaptation_chart_read_in_words(
    live_server: Any, endpoint: Endpoint
) -> None:
    base = live_server.url
    with chromium_page() as page:
        sign_in(page, base)
        expect(page.locator("#cc-lateness .cc-value")).to_have_text("340 ms")
        expect(page.locator("#cc-catchup .cc-value")).to_have_text("1")
        expect(page.locator("#cc-catchup")).to_contain_text("up to 5 minutes 36 seconds late")
        expect(page.locator("#cc-channels")).to_contain_text("Acme/pager")
        expect(page.locator("#cc-channels")).to_contain_text("HTTP 503")
        header = page.locator("#cc-failing th", has_text="Failures")
        line_height = page.locator("#cc-failing td").first.bounding_box()
        box = header.bounding_box()
        assert box is not None and line_height is not None
        assert box["width"] > 50, "the header wraps a letter per line"
        shot(page, "11-dashboard-units")
        page.goto(f"{base}/admin/endpoints/endpoint/{endpoint.pk}/change/")
        chart = page.locator("#cc-adaptation")
        expect(chart).to_be_visible()
        expect(page.locator("#cc-adaptation-panel")).to_contain_text("planner hint active")
        assert chart.locator("rect[fill='#b2ebf2']").count() == 1  # the hint period
        assert chart.locator("rect[fill='#cfd8dc']").count() == 1  # the pause
        assert "15 seconds" in chart.inner_html() and "1 minute" in chart.inner_html()
        expect(page.locator(".field-waiting")).to_contain_text("Backing off after 3 failures")
        chart.scroll_into_view_if_needed()
        shot(page, "12-endpoint-adaptation")
        page.locator("#cc-adaptation-panel").screenshot(path=str(shot_path("13-adaptation-chart")))


def shot_path(name: str) -> Any:
    from tests.console.browser import SCREENSHOTS

    return SCREENSHOTS / f"{name}.png"
