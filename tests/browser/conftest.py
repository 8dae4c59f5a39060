"""Fixtures of the browser tests: one Chromium per test module, pages that fail the test on a JavaScript error."""

from __future__ import annotations

import os

import pytest

from tests.browser.helpers import CHROMIUM, SHOTS

os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"  # Playwright's sync API runs an event loop in this thread


@pytest.fixture(scope="module")
def browser():
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=[
            "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
            "--disable-sync", "--no-first-run"])
        yield browser
        browser.close()


@pytest.fixture
def new_page(browser):
    """``new_page()``: a page in its own browser context (its own login); JavaScript errors fail the test."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    contexts, errors = [], []

    def make(timeout: float = 15_000):
        context = browser.new_context(viewport={"width": 1440, "height": 900})
        contexts.append(context)
        page = context.new_page()
        page.set_default_timeout(timeout)
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        return page

    yield make
    for context in contexts:
        context.close()
    assert not errors, f"JavaScript errors: {errors}"


@pytest.fixture
def page(new_page):
    """One page (``new_page()`` for a second person)."""
    return new_page(timeout=10_000)
