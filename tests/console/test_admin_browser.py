"""A person's first session in the admin, in Debian's Chromium driven by Playwright.

Signs in, creates an endpoint (a bad cron first, then a 5m interval), pauses and
resumes it, sends a test request, opens the run and the dashboard; and watches the add
form preview the next runs as a cron is typed. Screenshots go to
tests/screenshots/ (git-ignored) to be looked at. Chromium comes from
scripts/install-browser; Playwright never downloads a browser here.

The ORM is used only before the browser starts and after it closes: Playwright's sync
API runs an event loop in this thread, and Django refuses ORM calls next to one.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth import get_user_model
from playwright.sync_api import Page, expect

from endpoints.models import Endpoint, HintHistory, Job, Run, RunTrigger, Tenant
from tests.console.browser import PASSWORD, chromium_page, shot, sign_in

pytestmark = pytest.mark.browser


@pytest.fixture
def target(httpserver: Any) -> str:
    httpserver.expect_request("/queue").respond_with_json(
        {"status": "healthy", "queue_depth": 7, "workers": ["a", "b"]}
    )
    return str(httpserver.url_for("/queue"))


@pytest.fixture
def job(transactional_db: None, settings: Any) -> Job:
    # The target is on 127.0.0.1: allow it for the live server thread too.
    settings.CRONICORN_ALLOW_PRIVATE_ADDRESSES = True
    user = get_user_model().objects.create_user("alice", password=PASSWORD, is_staff=True)
    tenant = Tenant.objects.create(name="Acme")
    tenant.members.add(user)
    return Job.objects.create(tenant=tenant, name="ops")


def create_endpoint(page: Page, base: str, job: Job, target: str) -> None:
    page.goto(f"{base}/admin/endpoints/endpoint/add/?job={job.pk}")
    page.fill("#id_name", "queue")
    page.fill("#id_url", target)
    page.fill("#id_baseline_cron", "61 * * * *")
    page.fill("#id_description", "Order queue depth; check more often while it grows.")
    page.click("input[name=_save]")
    error = page.locator(".field-baseline_cron .errorlist")
    expect(error).to_contain_text("not a valid cron expression")
    shot(page, "01-bad-cron")

    page.fill("#id_baseline_cron", "")
    page.fill("#id_baseline_interval_ms", "5m")
    page.click("input[name=_continue]")
    expect(page.locator(".messagelist")).to_contain_text("was added successfully")
    expect(page.locator(".field-next_run_explained")).to_contain_text("in 5 minutes")
    # The change form previews the stored values at once, before anything is typed.
    expect(page.locator("#cc-run-preview tbody tr")).to_have_count(10)
    shot(page, "02-created")


def pause_and_resume(page: Page) -> None:
    page.click("input[name=op-pause_1h]")
    expect(page.locator(".messagelist")).to_contain_text("Paused ops/queue until")
    expect(page.locator(".field-pause_state")).to_contain_text("Until")
    shot(page, "03-paused")
    page.click("input[name=op-resume]")
    expect(page.locator(".messagelist")).to_contain_text("Resumed ops/queue.")
    expect(page.locator(".field-pause_state")).to_contain_text("No.")


def send_a_test_and_open_the_run(page: Page) -> None:
    page.click("input[name=op-test]")
    expect(page.locator(".messagelist")).to_contain_text(
        "Test request to ops/queue: success (HTTP 200"
    )
    shot(page, "04-tested")
    page.click(".messagelist a:has-text('See the run')")
    expect(page.locator(".field-response_pretty pre")).to_contain_text('"queue_depth": 7')
    expect(page.locator(".field-request_made")).to_contain_text("GET http://")
    shot(page, "05-run")


def test_a_person_sets_up_and_steers_an_endpoint_in_the_browser(
    live_server: Any, job: Job, target: str
) -> None:
    base = live_server.url

    with chromium_page() as page:
        sign_in(page, base)
        create_endpoint(page, base, job, target)
        pause_and_resume(page)
        send_a_test_and_open_the_run(page)
        page.goto(f"{base}/admin/endpoints/endpoint/")
        expect(page.locator("#result_list")).to_contain_text("every 5 minutes")
        shot(page, "06-endpoints")
        page.goto(f"{base}/admin/")
        expect(page.locator("#cc-runs-hour .cc-value")).to_have_text("1")
        shot(page, "07-dashboard")

    endpoint = Endpoint.objects.get(name="queue")
    assert endpoint.baseline_interval_ms == 300_000 and endpoint.baseline_cron == ""
    assert not endpoint.is_paused(endpoint.updated_at)
    kinds = list(HintHistory.objects.filter(endpoint=endpoint).values_list("kind", flat=True))
    assert sorted(kinds) == ["pause", "resume"]
    assert Run.objects.filter(endpoint=endpoint, trigger=RunTrigger.TEST).count() == 1


def test_the_add_form_previews_the_next_runs_as_a_cron_is_typed(live_server: Any, job: Job) -> None:
    base = live_server.url
    blackout = {"start": "08:30", "end": "09:30"}
    Job.objects.create(tenant=job.tenant, name="nightly", run_policy={"blackout": [blackout]})

    with chromium_page() as page:
        sign_in(page, base)
        page.goto(f"{base}/admin/endpoints/endpoint/add/?job={job.pk}")
        preview = page.locator("#cc-run-preview")
        expect(preview).to_contain_text("Type a cron expression or an interval")
        page.fill("#id_timezone", "Asia/Tokyo")  # no DST: the same words all year
        page.locator("#id_baseline_cron").press_sequentially("0 9 * * *")
        runs = preview.locator("tbody tr")
        expect(runs).to_have_count(10)
        expect(runs.first).to_contain_text("09:00:00 JST (UTC+09:00)")
        expect(runs.first).to_contain_text("00:00:00 UTC")
        expect(runs.first).to_contain_text("the cron schedule")
        shot(page, "08-preview")

        page.fill("#id_baseline_cron", "61 * * * *")
        expect(preview.locator(".cc-preview-errors")).to_contain_text(
            "Cron: '61 * * * *' is not a valid cron expression"
        )
        expect(preview.locator("table")).to_have_count(0)
        shot(page, "09-preview-error")

        page.fill("#id_baseline_cron", "0 9 * * *")
        page.press("#id_baseline_cron", "Tab")  # its change event now, not on a later click
        expect(preview).to_have_attribute("aria-busy", "false")
        expect(runs.first).to_contain_text("the cron schedule")
        # Choosing another job (the autocomplete) brings its run policy's blackout in.
        page.click(".field-job .select2-selection")
        page.fill(".select2-search__field", "nightly")
        page.click(".select2-results__option:has-text('nightly')")
        expect(runs.first).to_contain_text("09:30:00 JST (UTC+09:00)")
        expect(runs.first).to_contain_text(
            "a time window (blackout, allowed hours or active period)"
        )
        shot(page, "10-preview-job-policy")

    assert not Endpoint.objects.exists()
