"""Headless Chromium for the playground tests: Debian's chromium-headless-shell driven by Playwright.

Playwright's Python wheel brings its own driver; the browser is the Debian package (`make setup` installs it
as root), so nothing is ever downloaded by `playwright install`. Point OBERIK_CHROMIUM at another
headless-shell binary to use that one instead.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = Path(os.environ.get("OBERIK_CHROMIUM", "/usr/lib/chromium/chromium-headless-shell"))
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
]
# The latest run's screenshots, kept outside pytest's tmp dirs so a person can look at them.
SHOTS = Path("/tmp/oberik-playground-shots")
VIEWPORT = {"width": 1280, "height": 820}


@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    if not CHROMIUM.exists():
        pytest.skip(
            f"{CHROMIUM} is missing: install Debian's chromium-headless-shell and fonts-liberation "
            "(`make setup` does when run as root)"
        )
    sync_api = pytest.importorskip(
        "playwright.sync_api", reason="playwright is not installed in .venv: .venv/bin/pip install playwright"
    )
    shutil.rmtree(SHOTS, ignore_errors=True)
    SHOTS.mkdir(parents=True, exist_ok=True)
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


class Playground:
    """One browser tab on the playground, with what a test needs to drive it and record it."""

    def __init__(self, page: Any, base: str, token: str, tmp_path: Path, name: str) -> None:
        self.page = page
        self.base = base
        self.token = token
        self.tmp_path = tmp_path
        self.name = name
        self.errors: list[str] = []
        self._shots = 0
        page.on("console", lambda m: self.errors.append(f"console: {m.text}") if m.type == "error" else None)
        page.on("pageerror", lambda e: self.errors.append(f"uncaught: {e}"))
        # The console says a request failed but not which: the failed response names it.
        page.on(
            "response",
            lambda r: (
                self.errors.append(f"response: {r.request.method} {r.url} -> {r.status}") if r.status >= 400 else None
            ),
        )

    def open(self) -> Playground:
        """Open the page the way `oberik dev` hands it out: the token in the query string."""
        self.page.goto(f"{self.base}/?token={self.token}")
        self.page.wait_for_function("() => !document.getElementById('notify-note').textContent.startsWith('Checking')")
        return self

    def send(self, text: str) -> None:
        self.page.get_by_label("Message", exact=True).fill(text)
        self.page.get_by_role("button", name="Send", exact=True).click()

    def wait_for_text(self, min_chars: int) -> None:
        """Until the answer being written holds at least `min_chars` characters."""
        self.page.wait_for_function(
            "n => (document.querySelector('.msg.live .content')?.textContent || '').length >= n", arg=min_chars
        )

    def wait_until_idle(self) -> None:
        """Until no turn is being followed: the stream has ended and the page has settled."""
        self.page.wait_for_function(
            "() => !document.querySelector('.msg.live') && document.getElementById('steer-form').hidden"
        )

    def record(self) -> None:
        """Keep every value the live answer and the status line take, to prove text arrived in pieces."""
        self.page.evaluate(
            """() => {
              window.__answer = []; window.__status = [];
              new MutationObserver(() => {
                const live = document.querySelector('.msg.live .content');
                if (live) window.__answer.push(live.textContent);
                window.__status.push(document.getElementById('status').textContent);
              }).observe(document.body, {subtree: true, childList: true, characterData: true});
            }"""
        )

    def recorded(self, what: str) -> list[str]:
        return list(self.page.evaluate(f"() => window.__{what}"))

    def shot(self, label: str) -> Path:
        self._shots += 1
        path = self.tmp_path / f"{self._shots:02d}-{label}.png"
        self.page.screenshot(path=str(path))
        shutil.copy(path, SHOTS / f"{self.name}-{self._shots:02d}-{label}.png")
        return path


@pytest.fixture
def playground(
    chromium: Any, live: str, token: str, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[Playground]:
    context = chromium.new_context(viewport=VIEWPORT)
    context.set_default_timeout(15_000)
    page = context.new_page()
    name = request.node.name.removeprefix("test_")[:48]
    try:
        yield Playground(page, live, token, tmp_path, name)
    finally:
        context.close()
