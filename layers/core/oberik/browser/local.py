"""The local browser: one headless Chromium in this process, one page per conversation.

Playwright's async API runs on an asyncio loop of its own in one daemon thread, so synchronous callers (a tool
running inside a step, a FastAPI route in a worker thread) hand it coroutines with `submit` and block for the
answer. Each conversation (session id) gets its own browser context and page, so cookies and logins never leak
between conversations. Pages are closed when idle, when old and when too many are open; a conversation whose
page was closed gets a fresh blank one on its next call, and `take_notice` says what happened so the agent can be
told instead of finding an empty page.

Chromium is the system's `chromium-headless-shell` (Debian package); nothing is downloaded.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from oberik.browser import guard
from oberik.browser.actions import perform
from oberik.browser.egress_proxy import EgressProxy
from oberik.browser.port import BrowserUnreachable

if TYPE_CHECKING:  # playwright is only imported where a browser actually starts
    from playwright.async_api import Browser as PwBrowser
    from playwright.async_api import BrowserContext, Page, Playwright

T = TypeVar("T")

DEFAULT_EXECUTABLE = "/usr/lib/chromium/chromium-headless-shell"
DEFAULT_VIEWPORT = {"width": 1280, "height": 800}
# Flags that keep a headless Chromium small and quiet wherever it runs (a container, a CI box, a laptop).
CHROMIUM_ARGS = (
    "--disable-dev-shm-usage",
    "--disable-gpu",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-extensions",
    "--mute-audio",
)


class BrowserUnavailable(RuntimeError):
    """Chromium could not be started (not installed, or it crashed on launch)."""


class NoPage(LookupError):
    """The conversation has no open page and the caller asked not to open one."""

    def __init__(self, session_id: str):
        super().__init__(f"conversation {session_id} has no open browser page")
        self.session_id = session_id


@dataclass
class Slot:
    """One conversation's context and page, with the times the reaper judges it by."""

    session_id: str
    context: BrowserContext
    page: Page
    opened_at: float
    last_used: float
    busy: int = 0  # calls in flight; a page in use is never reaped under them
    notice: str | None = None  # said once to the agent (e.g. "this page was reopened blank because ...")
    extras: dict[str, Any] = field(default_factory=dict)  # per-page state owned by callers (numbering, hand-off)


@dataclass
class Reaped:
    reason: str
    url: str
    at: float


def _reap_sentence(reaped: Reaped) -> str:
    where = f" It was on {reaped.url}." if reaped.url and reaped.url != "about:blank" else ""
    return (
        f"The browser page for this conversation was closed ({reaped.reason}) and a new blank page was opened.{where} "
        "Anything typed or logged into is gone; go to the address again with browser_goto."
    )


class LocalBrowserPool:
    """One Chromium, one context and page per conversation, driven from one background asyncio loop."""

    def __init__(
        self,
        *,
        executable: str | None = None,
        idle_seconds: float = 600.0,
        max_age_seconds: float = 3600.0,
        max_pages: int = 8,
        allow_private: bool = False,
        sweep_seconds: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.executable = executable or DEFAULT_EXECUTABLE
        self.idle_seconds = idle_seconds
        self.max_age_seconds = max_age_seconds
        self.max_pages = max(1, max_pages)
        # Whether pages may load loopback and private addresses (tests, `oberik dev`); metadata never.
        self.allow_private = allow_private
        self.sweep_seconds = sweep_seconds if sweep_seconds is not None else max(1.0, min(60.0, idle_seconds / 4))
        self.clock = clock
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run_loop, name="oberik-browser", daemon=True)
        self._thread.start()
        self._pw: Playwright | None = None
        self._browser: PwBrowser | None = None
        self._slots: dict[str, Slot] = {}
        self._reaped: dict[str, Reaped] = {}
        self._open_locks: dict[str, asyncio.Lock] = {}
        self._start_lock: asyncio.Lock | None = None
        self._closed = False
        self._proxy: EgressProxy | None = None
        self.refused: list[str] = []  # what the egress proxy refused, oldest first (for logs and tests)
        self._sweeper: asyncio.Task[None] | None = None
        self.loop.call_soon_threadsafe(self._start_sweeper)

    # --- the loop thread -------------------------------------------------------------------------------------

    def _run_loop(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def _call(self, coro: Awaitable[T], timeout: float | None) -> T:
        if threading.current_thread() is self._thread:
            raise RuntimeError("LocalBrowserPool.submit was called from the browser loop itself; await instead")
        fut = asyncio.run_coroutine_threadsafe(_as_coroutine(coro), self.loop)
        try:
            return fut.result(timeout)
        except FutureTimeout:
            fut.cancel()
            raise TimeoutError(f"the browser did not answer within {timeout:g} seconds") from None

    async def _ensure_browser(self) -> PwBrowser:
        if self._start_lock is None:
            self._start_lock = asyncio.Lock()
        async with self._start_lock:
            if self._browser is not None and self._browser.is_connected():
                return self._browser
            if self._browser is not None:  # it crashed: every page it held is gone
                for sid in list(self._slots):
                    self._forget(sid, "the browser process stopped")
            if not os.path.exists(self.executable):
                raise BrowserUnavailable(
                    f"no Chromium at {self.executable}; install Debian's chromium-headless-shell "
                    "(apt-get install chromium-headless-shell fonts-liberation) or set OBERIK_BROWSER_EXECUTABLE"
                )
            try:
                from playwright.async_api import async_playwright
            except ImportError as e:  # pragma: no cover - the local extra brings it
                raise BrowserUnavailable("the playwright package is not installed (pip install 'oberik[local]')") from e
            if self._pw is None:
                self._pw = await async_playwright().start()
            if self._proxy is None:
                self._proxy = EgressProxy(allow_private=self.allow_private, on_refused=self.refused.append)
                await self._proxy.start()
            try:
                self._browser = await self._pw.chromium.launch(
                    executable_path=self.executable,
                    headless=True,
                    args=list(CHROMIUM_ARGS),
                    proxy={"server": self._proxy.url, "bypass": "<-loopback>"},
                )
            except Exception as e:
                raise BrowserUnavailable(f"Chromium at {self.executable} did not start: {e}") from e
            return self._browser

    def _forget(self, session_id: str, reason: str) -> Slot | None:
        slot = self._slots.pop(session_id, None)
        if slot is not None:
            url = ""
            try:
                url = slot.page.url
            except Exception:
                url = ""
            self._reaped[session_id] = Reaped(reason, url, self.clock())
        return slot

    async def _open(self, session_id: str) -> Slot:
        lock = self._open_locks.setdefault(session_id, asyncio.Lock())
        async with lock:
            slot = self._slots.get(session_id)
            if slot is not None and not slot.page.is_closed():
                return slot
            if slot is not None:  # closed underneath us (crash of the renderer)
                self._forget(session_id, "the page crashed")
            await self._make_room()
            browser = await self._ensure_browser()
            context = await browser.new_context(viewport=dict(DEFAULT_VIEWPORT))  # type: ignore[arg-type]
            await guard.install(context, allow_private=self.allow_private)
            page = await context.new_page()
            now = self.clock()
            slot = Slot(session_id, context, page, opened_at=now, last_used=now)
            reaped = self._reaped.pop(session_id, None)
            if reaped is not None:
                slot.notice = _reap_sentence(reaped)
            self._slots[session_id] = slot
            return slot

    async def _make_room(self) -> None:
        while len(self._slots) >= self.max_pages:
            idle = [s for s in self._slots.values() if s.busy == 0] or list(self._slots.values())
            victim = min(idle, key=lambda s: s.last_used)
            await self._close_slot(victim.session_id, f"more than {self.max_pages} pages were open")

    async def _close_slot(self, session_id: str, reason: str | None) -> bool:
        slot = self._forget(session_id, reason or "") if reason else self._slots.pop(session_id, None)
        if slot is None:
            return False
        if reason is None:
            self._reaped.pop(session_id, None)
        with contextlib.suppress(Exception):  # already gone with a crashed browser
            await slot.context.close()
        return True

    async def _run(
        self, session_id: str, fn: Callable[[Page], Awaitable[T]], open_if_missing: bool, slot_fn: bool
    ) -> T:
        slot = self._slots.get(session_id)
        if slot is None or slot.page.is_closed():
            if not open_if_missing:
                raise NoPage(session_id)
            slot = await self._open(session_id)
        slot.busy += 1
        slot.last_used = self.clock()
        try:
            return await (fn(slot) if slot_fn else fn(slot.page))  # type: ignore[arg-type]
        finally:
            slot.busy -= 1
            slot.last_used = self.clock()

    async def _reap(self) -> list[str]:
        now = self.clock()
        closed: list[str] = []
        for slot in list(self._slots.values()):
            if slot.busy:
                continue
            if now - slot.opened_at >= self.max_age_seconds:
                reason = f"it had been open for {_minutes(self.max_age_seconds)}, the longest a page is kept"
            elif now - slot.last_used >= self.idle_seconds:
                reason = f"it had not been used for {_minutes(self.idle_seconds)}"
            elif slot.page.is_closed():
                reason = "the page crashed"
            else:
                continue
            if await self._close_slot(slot.session_id, reason):
                closed.append(slot.session_id)
        return closed

    def _start_sweeper(self) -> None:
        self._sweeper = self.loop.create_task(self._sweep_forever())

    async def _sweep_forever(self) -> None:
        while not self._closed:
            await asyncio.sleep(self.sweep_seconds)
            try:
                await self._reap()
            except Exception:  # pragma: no cover - a sweep must never kill the loop
                from oberik.observability import logger

                logger.exception("browser reaper failed")

    # --- the API callers use (from any thread but the loop's) -----------------------------------------------

    def submit(
        self,
        session_id: str,
        fn: Callable[[Page], Awaitable[T]],
        *,
        open_if_missing: bool = True,
        timeout: float = 30,
    ) -> T:
        """Run `fn(page)` on the browser loop with this conversation's page and wait for its result.

        Opens a page when the conversation has none (a reaped one comes back blank, with a notice for the agent)
        unless `open_if_missing` is False, which raises NoPage instead. Raises TimeoutError after `timeout`
        seconds and BrowserUnavailable when Chromium cannot start."""
        return self._call(self._run(session_id, fn, open_if_missing, slot_fn=False), timeout)

    def submit_slot(
        self,
        session_id: str,
        fn: Callable[[Slot], Awaitable[T]],
        *,
        open_if_missing: bool = True,
        timeout: float = 30,
    ) -> T:
        """Like `submit`, with the whole Slot (the page, its context and per-page state in `extras`)."""
        return self._call(self._run(session_id, fn, open_if_missing, slot_fn=True), timeout)  # type: ignore[arg-type]

    def has_page(self, session_id: str) -> bool:
        slot = self._slots.get(session_id)
        return slot is not None and not slot.page.is_closed()

    def touch(self, session_id: str) -> None:
        """Count the page as used now (e.g. while a person is watching or working it)."""
        slot = self._slots.get(session_id)
        if slot is not None:
            slot.last_used = self.clock()

    def take_notice(self, session_id: str) -> str | None:
        """What the agent should be told about its page that it could not otherwise know, said once."""
        slot = self._slots.get(session_id)
        if slot is None:
            return None
        notice, slot.notice = slot.notice, None
        return notice

    def close_page(self, session_id: str, timeout: float = 30) -> bool:
        """Close the conversation's page on purpose (no notice next time). True when one was open."""
        return self._call(self._close_slot(session_id, None), timeout)

    def reap(self, timeout: float = 60) -> list[str]:
        """Close pages idle or old past their limits now; returns the conversations whose page was closed."""
        return self._call(self._reap(), timeout)

    def open_sessions(self) -> list[str]:
        return list(self._slots)

    def stop(self, timeout: float = 30) -> None:
        """Close every page and the browser and end the loop thread."""
        if self._closed:
            return
        self._closed = True

        async def shutdown() -> None:
            if self._sweeper is not None:
                self._sweeper.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await self._sweeper
            for sid in list(self._slots):
                await self._close_slot(sid, None)
            if self._browser is not None:
                with contextlib.suppress(Exception):
                    await self._browser.close()
            if self._pw is not None:
                await self._pw.stop()
            if self._proxy is not None:
                await self._proxy.stop()

        try:
            self._call(shutdown(), timeout)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(timeout)


def _minutes(seconds: float) -> str:
    if seconds >= 120:
        return f"{seconds / 60:g} minutes"
    return f"{seconds:g} seconds"


async def _as_coroutine(aw: Awaitable[T]) -> T:
    return await aw


_pool: LocalBrowserPool | None = None
_pool_lock = threading.Lock()


def get_pool() -> LocalBrowserPool:
    """The process-wide pool, started on first use with the deployment's settings."""
    global _pool
    with _pool_lock:
        if _pool is None or _pool._closed:
            from oberik.settings import get_settings

            s = get_settings()
            _pool = LocalBrowserPool(
                executable=s.browser_executable,
                idle_seconds=s.browser_idle_seconds,
                max_age_seconds=s.browser_max_age_seconds,
                max_pages=s.browser_max_pages,
                allow_private=s.allow_private_webhooks,
            )
        return _pool


def set_pool(pool: LocalBrowserPool | None) -> LocalBrowserPool | None:
    """Replace the process-wide pool (tests with small timings); returns the one it replaced."""
    global _pool
    with _pool_lock:
        old, _pool = _pool, pool
        return old


class LocalBrowser:
    """The Browser port on the local pool: each operation runs `actions.perform` on the conversation's page."""

    def __init__(self, pool: LocalBrowserPool | None = None):
        self._pool = pool

    @property
    def pool(self) -> LocalBrowserPool:
        return self._pool or get_pool()

    def run(self, session_id: str, op: str, args: dict[str, Any], *, timeout: float = 30) -> dict[str, Any]:
        pool = self.pool

        async def go(slot: Slot) -> dict[str, Any]:
            state = slot.extras.setdefault("actions", {})
            state["allow_private"] = pool.allow_private
            state["proxy_refused"] = pool.refused
            return await perform(slot.page, state, op, args)

        try:
            out = pool.submit_slot(session_id, go, timeout=timeout)
        except (BrowserUnavailable, TimeoutError) as e:
            raise BrowserUnreachable(str(e)) from e
        notice = pool.take_notice(session_id)
        if notice:
            out["notice"] = notice
        return out

    def close(self, session_id: str) -> bool:
        return self.pool.close_page(session_id)

    def is_open(self, session_id: str) -> bool:
        return self.pool.has_page(session_id)
