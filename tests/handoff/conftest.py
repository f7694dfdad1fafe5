"""Fixtures for the hand-off tests: real Chromium (Debian's headless shell) through the browser pool, the test
pages on loopback, and a conversation whose agent is the scripted model."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from oberik.local.scripted_provider import Reply, ScriptedProvider
from tests.api_fixtures import Api, Project
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


class Desk:
    """One person's conversation with an agent that has a browser page: open a test page in it, have the agent
    hand it over, and use the hand-off routes as a client would."""

    def __init__(
        self, api: Api, project: Project, token: str, provider: ScriptedProvider, pool: Any, pages: PageServer
    ):
        self.api, self.project, self.token, self.provider, self.pool, self.pages = (
            api,
            project,
            token,
            provider,
            pool,
            pages,
        )
        provider.script(Reply("Hello."))
        r = api.chat(token, message="Hi")
        assert r.status_code == 200, r.text
        self.sid: str = r.json()["session_id"]

    def open(self, path: str, *, wait_until: str = "load") -> None:
        """Put a test page in the conversation's browser, as browser_goto would have."""
        url = self.pages.url(path)
        self.pool.submit(self.sid, lambda page: page.goto(url, wait_until=wait_until), timeout=30)

    def evaluate(self, script: str) -> Any:
        return self.pool.submit(self.sid, lambda page: page.evaluate(script), open_if_missing=False)

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


@pytest.fixture
def desk(
    api: Api, scripted_project: Project, token: str, provider: ScriptedProvider, pool: Any, pages: PageServer
) -> Desk:
    api.configure(scripted_project, handoff_check_model="scripted/vision-small")
    return Desk(api, scripted_project, token, provider, pool, pages)
