"""The run policy, headers and body edited with fields in Debian's Chromium: a person
clicks and types retries and a business-hours window, sees the preview move runs into
the window and a wrong active period named beside its field, saves, and finds the same
JSON stored as a person typing it would have; without JavaScript the JSON text areas are
the form, as before. Screenshots go to tests/screenshots/ (git-ignored).

The ORM is used only before the browser starts and after it closes (see
test_admin_browser.py: Playwright's sync API runs an event loop in this thread).
"""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth import get_user_model
from playwright.sync_api import Locator, Page, expect

from endpoints.models import Endpoint, Job, Tenant
from endpoints.secrets import MASK
from tests.console.browser import PASSWORD, SCREENSHOTS, chromium_page, sign_in

pytestmark = pytest.mark.browser

BUSINESS_HOURS = {"start": "09:00", "end": "17:00", "days": ["mon", "tue", "wed", "thu", "fri"]}


@pytest.fixture
def endpoint(transactional_db: None) -> Endpoint:
    user = get_user_model().objects.create_user("alice", password=PASSWORD, is_staff=True)
    tenant = Tenant.objects.create(name="Acme")
    tenant.members.add(user)
    job = Job.objects.create(tenant=tenant, name="ops")
    return Endpoint.objects.create(
        job=job,
        name="reports",
        url="https://example.com/reports",
        baseline_interval_ms=3_600_000,
        timezone="Europe/Berlin",
        headers={"Authorization": "Bearer s3cr3t-token", "X-Team": "ops"},
    )


def shot(locator: Locator, name: str) -> None:
    """The part of the page that matters, into tests/screenshots/ to be looked at."""
    locator.screenshot(path=str(SCREENSHOTS / f"{name}.png"))


def key(page: Page, name: str) -> Locator:
    return page.locator(f".field-run_policy .cc-key[data-key={name}]")


def open_group(page: Page, title: str) -> None:
    page.locator(".field-run_policy .cc-group > summary", has_text=title).click()


def fill_retries_and_business_hours(page: Page) -> None:
    open_group(page, "Retries")
    open_group(page, "Windows")
    key(page, "retry_attempts").locator("input.cc-value").press_sequentially("3")
    delay = key(page, "retry_delay_ms")
    delay.locator("input.cc-value").press_sequentially("10")
    delay.locator("select.cc-unit").select_option(label="s")
    allowed = key(page, "allowed")
    allowed.get_by_role("button", name="Add a window").click()
    window = allowed.locator(".cc-window").first
    for day in ("Mon", "Tue", "Wed", "Thu", "Fri"):
        window.get_by_label(day).check()
    window.locator("input.cc-start").fill("09:00")
    window.locator("input.cc-end").fill("17:00")
    blackouts = key(page, "blackout")  # a row added by mistake, and removed
    blackouts.get_by_role("button", name="Add a window").click()
    blackouts.locator(".cc-window input.cc-start").fill("12:00")
    blackouts.get_by_role("button", name="Remove").click()
    expect(blackouts.locator(".cc-window")).to_have_count(0)


def set_active_period(page: Page, start: str, end: str) -> None:
    for name, moment in (("active_from", start), ("active_until", end)):
        key(page, name).locator("input.cc-value").fill(moment)
        key(page, name).locator("input.cc-offset").fill("Z" if moment else "")


def test_a_person_fills_a_run_policy_with_fields_and_saves_it(
    live_server: Any, endpoint: Endpoint
) -> None:
    base = live_server.url
    page_url = f"{base}/admin/endpoints/endpoint/{endpoint.pk}/change/"
    policy = ".field-run_policy"

    with chromium_page() as page:
        sign_in(page, base)
        page.goto(page_url)
        preview = page.locator("#cc-run-preview")
        expect(preview.locator("tbody tr")).to_have_count(10)
        expect(page.locator(f"{policy} textarea")).to_be_hidden()  # the fields stand in
        expect(page.locator(f"{policy} details[open]")).to_have_count(0)  # nothing set yet
        expect(page.locator(f"{policy} .cc-editor-note")).to_have_text(
            "No key set here: the job's policy and the defaults apply. Open a group to set one."
        )
        shot(page.locator(policy), "policy-1-empty")

        fill_retries_and_business_hours(page)
        # Hourly runs cannot all fit in eight hours a day: the preview moves some into
        # the window as soon as it is typed.
        expect(preview.locator("tbody tr[data-source=window]").first).to_be_visible()
        expect(preview.locator(".cc-preview-errors")).to_have_count(0)
        shot(page.locator(policy), "policy-2-filled")

        open_group(page, "Active period")
        set_active_period(page, "2027-01-02T00:00:00", "2027-01-01T00:00:00")
        errors = key(page, "active_until").locator(".cc-key-errors")
        expect(errors).to_contain_text("is not after active_from")  # from the preview
        page.click("input[name=_continue]")
        expect(page.locator(".errornote")).to_be_visible()
        # After the save the fields show what was typed, the message beside its field.
        expect(key(page, "retry_attempts").locator("input.cc-value")).to_have_value("3")
        expect(errors).to_contain_text("2027-01-01T00:00:00Z is not after active_from")
        shot(page.locator(policy), "policy-3-error")
        shot(page.locator("details.cc-group:has([data-key=active_until])"), "policy-3-error-close")

        set_active_period(page, "", "")
        page.get_by_role("button", name="Edit as JSON").first.click()
        expect(page.locator(f"{policy} textarea")).to_have_value(
            '{"retry_attempts":3,"retry_delay_ms":10000,"allowed":[{"start":"09:00",'
            '"end":"17:00","days":["mon","tue","wed","thu","fri"]}]}'
        )
        page.get_by_role("button", name="Edit with fields").first.click()
        page.click("input[name=_continue]")
        expect(page.locator(".messagelist")).to_contain_text("was changed successfully")
        in_effect = page.locator(f"{policy} .cc-in-effect")
        expect(in_effect).to_contain_text(
            "Allowed hours: 09:00-17:00 mon,tue,wed,thu,fri (Europe/Berlin)"
        )
        expect(in_effect).to_contain_text("Attempts per slot: 3")
        expect(key(page, "retry_delay_ms").locator("input.cc-value")).to_have_value("10")
        expect(key(page, "allowed").locator("input.cc-start")).to_have_value("09:00")
        shot(page.locator(policy), "policy-4-saved")
        expect(preview.locator("tbody tr[data-source=window]").first).to_be_visible()
        shot(preview, "policy-5-saved-preview")

    endpoint.refresh_from_db()
    assert endpoint.run_policy == {
        "retry_attempts": 3,
        "retry_delay_ms": 10_000,
        "allowed": [BUSINESS_HOURS],
    }
    assert endpoint.headers == {"Authorization": "Bearer s3cr3t-token", "X-Team": "ops"}


def test_headers_are_rows_whose_secrets_stay_masked_and_kept(
    live_server: Any, endpoint: Endpoint
) -> None:
    base = live_server.url
    with chromium_page() as page:
        sign_in(page, base)
        page.goto(f"{base}/admin/endpoints/endpoint/{endpoint.pk}/change/")
        headers = page.locator(".field-headers .cc-header")
        expect(headers).to_have_count(2)
        names = headers.locator(".cc-name").evaluate_all("inputs => inputs.map(i => i.value)")
        assert sorted(names) == ["Authorization", "X-Team"]  # in the stored order
        secret = headers.nth(names.index("Authorization"))
        team = headers.nth(names.index("X-Team"))
        expect(secret.locator(".cc-value")).to_have_value(MASK)
        expect(secret.locator(".cc-value")).to_have_attribute("type", "password")
        expect(secret.locator(".cc-secret")).to_be_disabled()  # its name says it is secret
        expect(page.locator(".field-secret_header_names")).to_be_hidden()
        assert "s3cr3t-token" not in page.content()

        team.locator(".cc-value").fill("platform")
        page.get_by_role("button", name="Add a header").click()
        added = headers.nth(2)
        added.locator(".cc-name").press_sequentially("X-Partner")
        added.locator(".cc-value").press_sequentially("p4rtner")
        added.locator(".cc-secret").check()
        expect(added.locator(".cc-value")).to_have_attribute("type", "password")

        body = page.locator("#id_body")
        body.fill('{"report": "daily"')
        expect(page.locator(".field-body .cc-json-status")).to_contain_text("Not valid JSON")
        body.fill('{"report": "daily"}')
        expect(page.locator(".field-body .cc-json-status")).to_have_text("Valid JSON.")
        shot(page.locator("fieldset:has(.field-headers)"), "headers-rows")
        page.click("input[name=_continue]")
        expect(page.locator(".messagelist")).to_contain_text("was changed successfully")
        expect(page.locator(".field-headers .cc-header").nth(2).locator(".cc-value")).to_have_value(
            MASK
        )

    endpoint.refresh_from_db()
    assert endpoint.headers == {
        "Authorization": "Bearer s3cr3t-token",
        "X-Team": "platform",
        "X-Partner": "p4rtner",
    }
    assert endpoint.secret_header_names == ["X-Partner"]
    assert endpoint.body == {"report": "daily"}


def test_without_javascript_the_json_text_areas_are_the_form(
    live_server: Any, endpoint: Endpoint
) -> None:
    base = live_server.url
    with chromium_page(javascript=False) as page:
        sign_in(page, base)
        page.goto(f"{base}/admin/endpoints/endpoint/{endpoint.pk}/change/")
        expect(page.locator(".field-run_policy .cc-editor")).to_be_hidden()
        page.fill("#id_run_policy", '{"jitter_ms": 30000}')
        page.click("input[name=_continue]")
        expect(page.locator(".messagelist")).to_contain_text("was changed successfully")
        in_effect = page.locator(".field-run_policy .cc-in-effect")
        expect(in_effect).to_contain_text("Jitter: 30 seconds")

    endpoint.refresh_from_db()
    assert endpoint.run_policy == {"jitter_ms": 30_000}
    assert endpoint.headers["Authorization"] == "Bearer s3cr3t-token"


def test_a_job_policy_is_edited_with_the_same_fields(live_server: Any, endpoint: Endpoint) -> None:
    base = live_server.url
    job = endpoint.job
    with chromium_page() as page:
        sign_in(page, base)
        page.goto(f"{base}/admin/endpoints/job/{job.pk}/change/")
        open_group(page, "Backoff and breaker")
        breaker = key(page, "breaker_failed_slots")
        breaker.locator("input.cc-value").press_sequentially("5")
        cooldown = key(page, "breaker_cooldown_ms")
        cooldown.locator("input.cc-value").press_sequentially("15")
        cooldown.locator("select.cc-unit").select_option(label="min")
        key(page, "backoff_cap_ms").get_by_label("no cap").check()
        page.click("input[name=_continue]")
        expect(page.locator(".messagelist")).to_contain_text("was changed successfully")
        expect(page.locator(".field-run_policy .cc-in-effect")).to_contain_text(
            "Pause after failed slots: 5"
        )
        shot(page.locator(".field-run_policy"), "policy-6-job")

    job.refresh_from_db()
    assert job.run_policy == {
        "breaker_failed_slots": 5,
        "breaker_cooldown_ms": 900_000,
        "backoff_cap_ms": None,
    }


def test_a_stored_value_the_fields_cannot_show_is_kept_as_it_is(
    live_server: Any, endpoint: Endpoint
) -> None:
    base = live_server.url
    kept = {"active_until": "2030-01-01T00:00:00.250+00:00", "jitter_ms": 5_000}
    Endpoint.objects.filter(pk=endpoint.pk).update(run_policy=kept)
    with chromium_page() as page:
        sign_in(page, base)
        page.goto(f"{base}/admin/endpoints/endpoint/{endpoint.pk}/change/")
        until = key(page, "active_until")
        expect(until.locator(".cc-key-note")).to_contain_text("which these fields cannot show")
        expect(until.locator("input.cc-value")).to_be_disabled()
        jitter = key(page, "jitter_ms")
        expect(jitter.locator("input.cc-value")).to_have_value("5")
        jitter.locator("input.cc-value").fill("7")
        page.click("input[name=_continue]")
        expect(page.locator(".messagelist")).to_contain_text("was changed successfully")

    endpoint.refresh_from_db()
    assert endpoint.run_policy == {**kept, "jitter_ms": 7_000}


def test_an_overlap_allowance_is_chosen_with_its_count_and_a_wrong_count_is_named_beside_it(
    live_server: Any, endpoint: Endpoint
) -> None:
    """Issue 34: "allow" shows the count of calls at once; 11 is refused beside the field
    by the one validation path, 3 is stored as ``{"allow": 3}``."""
    base = live_server.url
    with chromium_page() as page:
        sign_in(page, base)
        page.goto(f"{base}/admin/endpoints/endpoint/{endpoint.pk}/change/")
        open_group(page, "Overlap")
        overlap = key(page, "overlap")
        count = overlap.locator("input.cc-allow")
        expect(count).to_be_hidden()
        overlap.locator("select.cc-value").select_option("allow")
        expect(count).to_be_visible()
        count.fill("11")
        page.click("input[name=_continue]")
        expect(page.locator(".errornote")).to_be_visible()
        expect(overlap.locator(".cc-key-errors")).to_contain_text(
            "allow is how many calls of the endpoint may be in flight at once"
        )
        expect(count).to_have_value("11")  # what was typed, shown again beside the message
        count.fill("3")
        page.click("input[name=_continue]")
        expect(page.locator(".messagelist")).to_contain_text("was changed successfully")
        expect(page.locator(".field-run_policy .cc-in-effect")).to_contain_text(
            "A slot due while a call is in flight: allow, up to 3 calls at once"
        )
        expect(overlap.locator("select.cc-value")).to_have_value("allow")
        expect(count).to_have_value("3")
        overlap.locator("select.cc-value").select_option("skip")
        expect(count).to_be_hidden()

    endpoint.refresh_from_db()
    assert endpoint.run_policy == {"overlap": {"allow": 3}}
