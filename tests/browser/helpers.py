"""Plain helpers of the browser tests (the fixtures are in conftest.py)."""

from __future__ import annotations

import re
from pathlib import Path

CHROMIUM = Path("/usr/bin/chromium")
SHOTS = Path("/tmp/fleet-shots")  # noqa: S108 - where the brief wants the screenshots
PASSWORD = "pw-for-tests-only"  # noqa: S105 - the conftest's test password


def shot(page, name: str) -> None:
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


def login(page, base: str, username: str, next_path: str) -> None:
    page.goto(f"{base}{next_path}")
    assert "/login/" in page.url  # every page needs a login
    shot(page, "01-login")
    page.fill("#id_username", username)
    page.fill("#id_password", PASSWORD)
    page.click("button:has-text('Log in')")
    page.wait_for_url(re.compile(re.escape(next_path) + "$"))
