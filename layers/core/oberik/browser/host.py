"""The browser host: one conversation's page kept alive in a Lambda for as long as it is used.

The step writes commands into the conversation's mailbox in the table (`adapters/dynamodb_browser.py`); the host
holds a lease on the conversation, runs each command with the same `actions.perform` the local pool uses and
writes the answer back. It stops

- when the page has been idle for `browser_idle_seconds` or open for `browser_max_age_seconds` (it leaves a note,
  so the next host opens a blank page and the agent is told why),
- when it nears Lambda's 15-minute limit: it saves the page's address and storage state (cookies, local storage)
  and a fresh host restores them, so the agent does not notice the change,
- on `close`, or when another host has taken the lease.

One browser context per host: Chromium runs with `--single-process`, where a second context is not reliable.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from oberik.adapters.dynamodb_browser import STARTING
from oberik.browser import guard
from oberik.browser import handoff_ops as _handoff_ops  # noqa: F401 - registers the hand-off's operations
from oberik.browser.actions import perform
from oberik.browser.egress_proxy import EgressProxy
from oberik.browser.local import DEFAULT_VIEWPORT, Reaped, _minutes, _reap_sentence

if TYPE_CHECKING:
    from playwright.async_api import Browser as PwBrowser

# How Chromium is started inside the Lambda container: no sandbox and no zygote (no namespaces to make there),
# one process (Lambda's memory is small and its /dev/shm tiny).
LAMBDA_CHROMIUM_ARGS = (
    "--single-process",
    "--no-zygote",
    "--no-sandbox",
    "--disable-dev-shm-usage",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-extensions",
    "--mute-audio",
)
# An answer must fit in one DynamoDB item (400 KB) with room to spare.
MAX_ANSWER_CHARS = 350_000


@dataclass(frozen=True)
class HostLimits:
    idle_seconds: float = 600.0
    max_age_seconds: float = 3600.0
    handover_margin_seconds: float = 90.0  # stop and hand over this long before Lambda's limit
    poll_seconds: float = 0.1
    heartbeat_seconds: float = 5.0
    stale_after_seconds: float = 20.0  # a lease not renewed for this long is free to take
    command_timeout_seconds: float = 90.0


def _fit(result: dict[str, Any]) -> dict[str, Any]:
    """Keep an answer within one item: drop the picture first, then shorten the text."""
    import json

    if len(json.dumps(result)) <= MAX_ANSWER_CHARS:
        return result
    out = dict(result)
    if out.pop("image_b64", None) is not None:
        out["image"] = {**out.get("image", {}), "note": "the picture was too large to pass back; take a smaller one"}
    for key in ("html", "text"):
        if len(json.dumps(out)) > MAX_ANSWER_CHARS and isinstance(out.get(key), str):
            out[key] = out[key][: MAX_ANSWER_CHARS // 2]
    return out


class PageHost:
    """Serves one conversation's mailbox with one page until a limit, a hand-over or a close."""

    def __init__(
        self,
        store: Any,
        session_id: str,
        *,
        limits: HostLimits,
        remaining_ms: Callable[[], int],
        allow_private: bool = False,
        clock: Callable[[], float] = time.time,
        host_id: str | None = None,
    ):
        self.store = store
        self.session_id = session_id
        self.limits = limits
        self.remaining_ms = remaining_ms
        self.allow_private = allow_private
        self.clock = clock
        self.host_id = host_id or f"host-{uuid.uuid4().hex[:12]}"
        self.served = 0
        self.refused: list[str] = []  # what the egress proxy refused, oldest first

    async def _db(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return await asyncio.to_thread(fn, *args, **kwargs)

    async def serve(self, browser: PwBrowser) -> str:
        """Run until the page is no longer this host's to keep; returns why it stopped: already_hosted | idle |
        age | handover | closed | displaced."""
        sid, store, lim = self.session_id, self.store, self.limits
        took = await self._db(
            store.browser_take_lease, sid, self.host_id, self.clock(), lim.stale_after_seconds, over=STARTING
        )
        if not took:
            return "already_hosted"
        saved = await self._db(store.browser_load_state, sid) or {}
        notice: str | None = None
        if saved.get("reaped"):
            notice = _reap_sentence(Reaped(saved["reaped"], saved.get("url", ""), 0))
            await self._db(store.browser_clear_state, sid)
            saved = {}
        viewport = saved.get("viewport") or dict(DEFAULT_VIEWPORT)
        context = await browser.new_context(
            viewport=viewport,  # type: ignore[arg-type]
            storage_state=saved.get("storage_state"),
        )
        # The page's state for the operations; the hand-off's screencast also writes its frames to the table.
        state: dict[str, Any] = {
            "allow_private": self.allow_private,
            "proxy_refused": self.refused,
            "store": store,
            "session_id": sid,
        }
        try:
            await guard.install(context, allow_private=self.allow_private)
            page = await context.new_page()
            url = saved.get("url") or ""
            if url.startswith(("http://", "https://")):
                try:
                    await page.goto(url, wait_until="domcontentloaded", timeout=30000)
                except Exception:
                    notice = f"The browser page was moved to a fresh host and {url} did not load again; go to it again."
            opened_at = float(saved.get("opened_at") or self.clock())
            last_used = self.clock()
            last_beat = self.clock()
            while True:
                now = self.clock()
                if self.remaining_ms() < lim.handover_margin_seconds * 1000:
                    await self._db(
                        store.browser_save_state,
                        sid,
                        {
                            "url": page.url,
                            "storage_state": await context.storage_state(),
                            "opened_at": opened_at,
                            "viewport": page.viewport_size,
                        },
                    )
                    # The lease passes to the successor about to be started, so no caller starts another.
                    await self._db(
                        store.browser_take_lease,
                        sid,
                        STARTING,
                        self.clock(),
                        lim.stale_after_seconds,
                        over=self.host_id,
                    )
                    return "handover"
                reason = None
                if now - opened_at >= lim.max_age_seconds:
                    reason = (
                        "age",
                        f"it had been open for {_minutes(lim.max_age_seconds)}, the longest a page is kept",
                    )
                elif now - last_used >= lim.idle_seconds:
                    reason = ("idle", f"it had not been used for {_minutes(lim.idle_seconds)}")
                if reason is not None:
                    await self._db(store.browser_save_state, sid, {"reaped": reason[1], "url": page.url})
                    await self._db(store.browser_release, sid, self.host_id)
                    return reason[0]
                if now - last_beat >= lim.heartbeat_seconds:
                    if not await self._db(store.browser_heartbeat, sid, self.host_id, now):
                        return "displaced"
                    last_beat = now
                commands = await self._db(store.browser_commands, sid)
                for cmd in commands:
                    if cmd["op"] == "close":
                        await self._db(store.browser_clear_state, sid)
                        await self._db(store.browser_answer, sid, cmd["id"], {"closed": True})
                        await self._db(store.browser_release, sid, self.host_id)
                        return "closed"
                    try:
                        result = await asyncio.wait_for(
                            perform(page, state, cmd["op"], cmd["args"]), lim.command_timeout_seconds
                        )
                    except TimeoutError:
                        result = {"error": f"the browser did not finish within {lim.command_timeout_seconds:g}s"}
                    if notice:
                        result["notice"], notice = notice, None
                    await self._db(store.browser_answer, sid, cmd["id"], _fit(result))
                    self.served += 1
                    last_used = self.clock()
                if not commands:  # quick while the agent is working, slower once it has gone quiet
                    quiet = self.clock() - last_used
                    await asyncio.sleep(lim.poll_seconds if quiet < 5 else max(lim.poll_seconds, 0.5))
        finally:
            cast = state.get("handoff_cast")
            if cast is not None:  # a hand-off was being watched: stop writing its frames
                with contextlib.suppress(Exception):
                    await cast.stop()
            with contextlib.suppress(Exception):
                await context.close()


async def serve_event(
    event: dict[str, Any],
    *,
    store: Any,
    remaining_ms: Callable[[], int],
    executable: str,
    limits: HostLimits,
    allow_private: bool = False,
    launch_args: tuple[str, ...] = LAMBDA_CHROMIUM_ARGS,
    host_id: str | None = None,
    successor: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """What the browser Lambda does with one invocation: start Chromium, host the conversation, report why it
    stopped. On `handover` it calls `successor(event)` (the Lambda invokes itself) once the page is saved."""
    session_id = event.get("session_id")
    if not isinstance(session_id, str) or not session_id:
        return {"stopped": "invalid", "error": "the event names no session_id"}
    from playwright.async_api import async_playwright

    host = PageHost(
        store, session_id, limits=limits, remaining_ms=remaining_ms, allow_private=allow_private, host_id=host_id
    )
    proxy = EgressProxy(allow_private=allow_private, on_refused=host.refused.append)
    await proxy.start()
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(
            executable_path=executable,
            headless=True,
            args=list(launch_args),
            proxy={"server": proxy.url, "bypass": "<-loopback>"},
        )
        try:
            stopped = await host.serve(browser)
            if stopped == "handover" and successor is not None:
                successor(event)
        finally:
            await browser.close()
            await proxy.stop()
    return {"stopped": stopped, "session_id": session_id, "host_id": host.host_id, "served": host.served}


def serve_lambda(event: dict[str, Any], function_name: str, remaining_ms: Callable[[], int]) -> dict[str, Any]:
    """The browser Lambda's work: serve `event` with this deployment's settings; a host nearly out of time
    invokes `function_name` again with the saved page, so a fresh host restores it."""
    from oberik.adapters.aws import client
    from oberik.adapters.dynamodb import DynamoStore
    from oberik.settings import get_settings

    s = get_settings()

    def successor(ev: dict[str, Any]) -> None:
        client("lambda").invoke(FunctionName=function_name, InvocationType="Event", Payload=json.dumps(ev))

    return asyncio.run(
        serve_event(
            event,
            store=DynamoStore(s),
            remaining_ms=remaining_ms,
            executable=s.browser_executable,
            limits=HostLimits(idle_seconds=s.browser_idle_seconds, max_age_seconds=s.browser_max_age_seconds),
            allow_private=s.allow_private_webhooks,
            successor=successor,
        )
    )
