"""Debian's Chromium driven by Playwright for the admin's browser tests: a headless page, a
signed-in session, screenshots to tests/screenshots/ (git-ignored) to be looked at."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect, sync_playwright

CHROMIUM = Path("/usr/bin/chromium")


SCREENSHOTS = Path(__file__).parents[1] / "screenshots"


CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


PASSWORD = "a-long-browser-test-password"


@contextmanager
def chromium_page(*, javascript: bool = True) -> Iterator[Page]:
    if not CHROMIUM.exists():
        pytest.fail("Chromium is missing: run scripts/install-browser (apt-get chromium).")
    SCREENSHOTS.mkdir(exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        context = browser.new_context(
            viewport={"width": 1280, "height": 900}, java_script_enabled=javascript
        )
        context.set_default_timeout(15_000)
        yield context.new_page()
        browser.close()


def shot(page: Page, name: str) -> None:
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)


def sign_in(page: Page, base: str) -> None:
    page.goto(f"{base}/admin/")
    page.fill("#id_username", "alice")
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    expect(page.locator("#cc-dashboard")).to_be_visible()
