"""Fixtures for the hand-off tests: real Chromium (Debian's headless shell) through the browser pool, the test
pages on loopback, and a conversation whose agent is the scripted model."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from oberik.local.scripted_provider import Reply, ScriptedProvider
from tests.api_fixtures import Api, Project, read_events
from tests.handoff.pages import PageServer

CHECKER = "You judge whether a person has finished"  # the checker's system prompt starts with this


@pytest.fixture(scope="session")
def pages() -> Iterator[PageServer]:
    with PageServer() as server:
        yield server


@pytest.fixture(scope="session")
def pool() -> Iterator[Any]:
    from oberik.browser import local

    if not local.os.path.exists(local.DEFAULT_EXECUTABLE):
        pytest.skip(f"{local.DEFAULT_EXECUTABLE} is missing: install Debian's chromium-headless-shell")
    pytest.importorskip("playwright.async_api")
    mine = local.LocalBrowserPool(max_pages=16, allow_private=True)  # the test pages are on loopback
    earlier = local.set_pool(mine)
    try:
        yield mine
    finally:
        local.set_pool(earlier)
        mine.stop()


def call(name: str, call_id: str, **arguments: Any) -> dict[str, Any]:
    return {"id": call_id, "name": name, "arguments": arguments}


class Conversation:
    """One person's conversation with an agent, and the hand-off routes used on it as a client would."""

    def __init__(self, api: Api, token: str, provider: ScriptedProvider) -> None:
        self.api, self.token, self.provider = api, token, provider
        provider.script(Reply("Hello."))
        r = api.chat(token, message="Hi")
        assert r.status_code == 200, r.text
        self.sid: str = r.json()["session_id"]

    def hand_off(self, *, after: str | None = "Carrying on.", **arguments: Any) -> dict[str, Any]:
        """A turn whose agent calls browser_handoff with `arguments`; returns the /chat response."""
        steps = [Reply(tool_calls=[call("browser_handoff", "hand1", **arguments)])]
        if after is not None:
            steps.append(Reply(after))
        self.provider.script(*steps)
        r = self.api.chat(self.token, session_id=self.sid, message="Go on")
        assert r.status_code == 200, r.text
        return dict(r.json())

    def path(self, tail: str) -> str:
        return f"/chat/sessions/{self.sid}/{tail}"

    def check(self, token: str | None = None) -> Any:
        return self.api.client.post(self.path("handoff/check"), headers=self.api.bearer(token or self.token))

    def frame(self, **params: Any) -> Any:
        return self.api.client.get(self.path("browser/frame"), params=params, headers=self.api.bearer(self.token))

    def input(self, token: str | None = None, **body: Any) -> Any:
        return self.api.client.post(self.path("browser/input"), json=body, headers=self.api.bearer(token or self.token))

    def checker_requests(self) -> list[dict[str, Any]]:
        return [r for r in self.provider.requests if CHECKER in json.dumps(r.get("messages", []))]


class Desk(Conversation):
    """A conversation whose agent has a browser page in this process's pool: open a test page in it, have the
    agent hand it over, and use the hand-off routes."""

    def __init__(
        self, api: Api, project: Project, token: str, provider: ScriptedProvider, pool: Any, pages: PageServer
    ):
        self.project, self.pool, self.pages = project, pool, pages
        super().__init__(api, token, provider)

    def open(self, path: str, *, wait_until: str = "load") -> None:
        """Put a test page in the conversation's browser, as browser_goto would have."""
        url = self.pages.url(path)
        self.pool.submit(self.sid, lambda page: page.goto(url, wait_until=wait_until), timeout=30)

    def evaluate(self, script: str) -> Any:
        return self.pool.submit(self.sid, lambda page: page.evaluate(script), open_if_missing=False)


@pytest.fixture
def desk(
    api: Api, scripted_project: Project, token: str, provider: ScriptedProvider, pool: Any, pages: PageServer
) -> Desk:
    api.configure(scripted_project, handoff_check_model="scripted/vision-small")
    return Desk(api, scripted_project, token, provider, pool, pages)


def stream(live: str, desk: Any, **params: Any) -> Any:
    """An HTTP client and the opened `browser/stream` of `desk`'s conversation (a Desk or a MailDesk)."""
    client = httpx.Client(base_url=live, timeout=httpx.Timeout(30.0))
    return client, client.stream("GET", desk.path("browser/stream"), params=params, headers=desk.api.bearer(desk.token))


def count_frames(response: Any, seconds: float) -> tuple[int, int, float]:
    """Frames read off an open stream for `seconds`: (how many, their JPEG bytes, the time it took)."""
    start, frames, size = time.monotonic(), 0, 0
    while time.monotonic() - start < seconds:
        for e in read_events(response, stop_after=1):
            if e.event == "frame":
                frames += 1
                size += len(e.data["image"]) * 3 // 4
    return frames, size, time.monotonic() - start
