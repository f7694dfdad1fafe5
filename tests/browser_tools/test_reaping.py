"""Pages are closed when idle, when old and when too many are open; a reaped page comes back blank, and the
agent is told."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator

import pytest

from oberik.browser import local
from oberik.browser.local import LocalBrowserPool, NoPage
from tests.browser_tools.conftest import Agent, Site, make_turn


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def small(clock: Clock) -> Iterator[LocalBrowserPool]:
    pool = LocalBrowserPool(
        allow_private=True, idle_seconds=60, max_age_seconds=300, max_pages=2, sweep_seconds=3600, clock=clock
    )
    old = local.set_pool(pool)
    try:
        yield pool
    finally:
        local.set_pool(old)
        pool.stop()


def test_an_idle_page_is_reaped_and_reopens_blank_with_the_agent_told(small, clock, site: Site):
    agent = Agent(turn=make_turn("ses-idle"))
    agent("browser_goto", url=site.url("/form"))
    clock.now += 59
    assert small.reap() == []
    clock.now += 2
    assert small.reap() == ["ses-idle"]
    assert not small.has_page("ses-idle")
    a = agent("browser_read")
    assert a["url"] == "about:blank"
    assert "had not been used for 60 seconds" in a["notice"] and "new blank page" in a["notice"]
    assert site.url("/form") in a["notice"]
    assert "notice" not in agent("browser_read")  # told once


def test_a_page_in_use_is_still_reaped_at_its_age(small, clock, site: Site):
    agent = Agent(turn=make_turn("ses-old"))
    agent("browser_goto", url=site.url("/links"))
    for _ in range(6):  # used every 50 seconds: never idle
        clock.now += 50
        agent("browser_read")
        small.reap()
    assert not small.has_page("ses-old")
    a = agent("browser_read")
    assert "open for 5 minutes" in a["notice"]


def test_too_many_pages_closes_the_least_recently_used(small, clock, site: Site):
    a, b, c = (Agent(turn=make_turn(f"ses-{x}")) for x in "abc")
    a("browser_goto", url=site.url("/links"))
    clock.now += 1
    b("browser_goto", url=site.url("/form"))
    clock.now += 1
    a("browser_read")  # a is now the more recently used
    clock.now += 1
    c("browser_goto", url=site.url("/button"))
    assert sorted(small.open_sessions()) == ["ses-a", "ses-c"]
    assert "more than 2 pages were open" in b("browser_read")["notice"]


def test_a_page_busy_with_a_call_is_not_reaped_under_it(small, clock):
    started, release = threading.Event(), None

    async def hold(page):
        nonlocal release
        release = asyncio.Event()
        started.set()
        await release.wait()
        return page.url

    result: list[str] = []
    worker = threading.Thread(target=lambda: result.append(small.submit("ses-busy", hold)))
    worker.start()
    assert started.wait(30)
    clock.now += 10_000
    assert small.reap() == []
    small.loop.call_soon_threadsafe(release.set)
    worker.join(30)
    assert result == ["about:blank"]
    clock.now += 61
    assert small.reap() == ["ses-busy"]


def test_no_page_is_opened_when_the_caller_says_not_to(small):
    async def url(page):
        return page.url

    with pytest.raises(NoPage):
        small.submit("ses-none", url, open_if_missing=False)
    assert not small.has_page("ses-none")


def test_the_sweeper_reaps_on_its_own(site: Site):
    pool = LocalBrowserPool(allow_private=True, idle_seconds=0.3, sweep_seconds=0.1)
    try:

        async def go(page):
            await page.goto(site.url("/links"))

        pool.submit("ses-sweep", go)
        deadline = time.monotonic() + 10
        while pool.has_page("ses-sweep") and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not pool.has_page("ses-sweep")
    finally:
        pool.stop()
