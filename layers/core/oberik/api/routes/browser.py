"""Data plane: the agent's browser page while it is handed to the user — watch it, work it, ask if it is done.

Only the conversation's owner gets anywhere (404 for anyone else), and only while a hand-off is active (409).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from typing import Annotated, Any, TypeVar

import anyio
from fastapi import APIRouter, Body, Query
from starlette.requests import Request
from starlette.responses import StreamingResponse

from oberik.adapters.dynamodb_browser import cast_channel
from oberik.api.deps import CallerDep, StoreDep
from oberik.api.routes.sessions import owned_session
from oberik.api.sse import encode
from oberik.browser import handoff
from oberik.browser.handoff_ops import CAST_LEASE_SECONDS
from oberik.browser.handoff_ops import pages as pages_for_handoff
from oberik.domain.errors import Conflict
from oberik.engine import notify

router = APIRouter(prefix="/chat/sessions", tags=["browser"])

T = TypeVar("T")
# How often the stream looks at the page again for where to crop (a challenge overlay appearing, a scroll).
LOOK_SECONDS = 0.25
# How often the stream checks that its hand-off is still the active one.
STATE_SECONDS = 1.0
KEEPALIVE_SECONDS = 15.0

Selector = Annotated[
    str | None,
    Query(max_length=500, description="CSS selector to crop to; defaults to the one the agent handed over"),
]


def _page_call(fn: Callable[[], T]) -> T:
    """Run a call that drives the page, turning a page that went away or hung into a sentence."""
    from oberik.browser.local import BrowserUnavailable, NoPage
    from oberik.browser.port import BrowserUnreachable

    try:
        return fn()
    except BrowserUnreachable as e:
        raise Conflict(f"The browser host did not answer ({e}); try again.", code="browser_busy") from e
    except NoPage as e:
        raise Conflict(
            "The agent's browser page for this conversation closed meanwhile; the agent opens it again with "
            "browser_goto.",
            code="no_page",
        ) from e
    except TimeoutError as e:
        raise Conflict(f"The browser page did not answer in time ({e}); try again.", code="browser_busy") from e
    except BrowserUnavailable as e:
        raise Conflict(f"The browser is not available on this deployment: {e}", code="browser_unavailable") from e


@router.get("/{session_id}/browser/frame")
def browser_frame(session_id: str, caller: CallerDep, store: StoreDep, selector: Selector = None) -> dict[str, Any]:
    """One still of the whole viewport (JPEG, base64) with where to crop it. Slow next to the stream."""
    owned_session(store, caller, session_id)
    return _page_call(lambda: handoff.still_frame(store, session_id, selector))


@router.post("/{session_id}/browser/input")
def browser_input(
    session_id: str, caller: CallerDep, store: StoreDep, body: Annotated[dict[str, Any], Body()]
) -> dict[str, Any]:
    """Play one gesture into the page. Coordinates are the picture's pixels plus the frame's `origin`."""
    owned_session(store, caller, session_id)
    return _page_call(lambda: handoff.relay_input(store, session_id, body))


@router.post("/{session_id}/handoff/check")
def handoff_check(session_id: str, caller: CallerDep, store: StoreDep) -> dict[str, Any]:
    """Whether the person has finished: `{checked, done, state, reason, will_check_again}`."""
    owned_session(store, caller, session_id)
    return _page_call(lambda: handoff.check(store, caller.project, session_id))


@router.get("/{session_id}/browser/stream")
async def browser_stream(
    session_id: str, request: Request, caller: CallerDep, store: StoreDep, selector: Selector = None
) -> StreamingResponse:
    """Server-Sent Events: `clip` (where to crop, sent first and whenever it moves), `frame` (the whole
    viewport as JPEG, with region/matched/origin) and `end` when the hand-off or the page goes away."""
    await anyio.to_thread.run_sync(owned_session, store, caller, session_id)
    h = await anyio.to_thread.run_sync(handoff.current, store, session_id)
    pages = await anyio.to_thread.run_sync(pages_for_handoff)
    if pages.kind == "mailbox":  # the page is in the browser Lambda: start its screencast into the table
        sel = selector if selector is not None else h.get("selector")
        args = _cast_args(sel)
        started = await anyio.to_thread.run_sync(
            lambda: _page_call(lambda: pages.run(session_id, "handoff_cast", args))
        )
        body = _stream_cast(request, store, pages, session_id, h, args, int(started["from_seq"]))
    else:
        body = _stream(request, store, session_id, h, selector)
    return StreamingResponse(
        body,
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


async def _stream(
    request: Request, store: Any, session_id: str, h: dict[str, Any], selector: str | None
) -> AsyncIterator[bytes]:
    from oberik.browser.local import NoPage, get_pool

    pool = get_pool()
    loop = asyncio.get_running_loop()
    latest: dict[str, Any] = {}
    wake = asyncio.Event()

    def arrived(params: dict[str, Any]) -> None:  # on the browser's loop
        def put() -> None:
            latest["params"] = params  # a slow reader skips to the newest frame rather than falling behind
            wake.set()

        loop.call_soon_threadsafe(put)

    cast = handoff.Screencast(arrived)
    sel = selector if selector is not None else h.get("selector")

    def look() -> dict[str, Any]:
        return pool.submit(session_id, lambda page: handoff.look(page, sel), open_if_missing=False, timeout=20)

    try:
        await anyio.to_thread.run_sync(lambda: pool.submit(session_id, cast.start, open_if_missing=False))
        view = await anyio.to_thread.run_sync(look)
        yield encode(None, "clip", handoff.clip_event(view))
        shown = handoff.clip_event(view)
        seq = 0
        now = time.monotonic()
        next_look, next_state, last_sent = now + LOOK_SECONDS, now + STATE_SECONDS, now
        while True:
            if await request.is_disconnected():
                return
            now = time.monotonic()
            if now >= next_look:
                view = await anyio.to_thread.run_sync(look)
                await anyio.to_thread.run_sync(handoff.note_challenge, store, h, view)
                moved = handoff.clip_event(view)
                if moved != shown:
                    shown = moved
                    yield encode(None, "clip", moved)
                    last_sent = now
                    if "params" in latest:  # the last picture again, cropped anew: a static page paints no more
                        seq += 1
                        yield encode(seq, "frame", handoff.frame_event(seq, latest["params"], view))
                next_look = now + LOOK_SECONDS
            if now >= next_state:
                active = await anyio.to_thread.run_sync(store.active_handoff, session_id)
                if active is None or active["id"] != h["id"]:
                    yield encode(None, "end", {"reason": "handoff_ended", "handoff_id": h["id"]})
                    return
                pool.touch(session_id)  # someone is watching: the page is in use
                next_state = now + STATE_SECONDS
            try:
                await asyncio.wait_for(wake.wait(), timeout=LOOK_SECONDS)
            except TimeoutError:
                if now - last_sent >= KEEPALIVE_SECONDS:
                    last_sent = now
                    yield b": keepalive\n\n"
                continue
            wake.clear()
            seq += 1
            last_sent = time.monotonic()
            yield encode(seq, "frame", handoff.frame_event(seq, latest["params"], view))
    except NoPage:
        yield encode(None, "end", {"reason": "page_closed", "handoff_id": h["id"]})
    finally:
        with contextlib.suppress(Exception):  # the page is already gone, and its screencast with it
            await anyio.to_thread.run_sync(
                lambda: pool.submit(session_id, lambda page: cast.stop(), open_if_missing=False, timeout=5)
            )


# --- the page in the browser Lambda: read the frames its host writes into the table ----------------------------


def _cast_args(selector: str | None) -> dict[str, Any]:
    from oberik.settings import get_settings

    s = get_settings()
    return {
        "selector": selector,
        "fps": s.browser_handoff_fps,
        "keep": s.browser_handoff_frames_kept,
        "lease_seconds": CAST_LEASE_SECONDS,
    }


async def _stream_cast(
    request: Request, store: Any, pages: Any, session_id: str, h: dict[str, Any], args: dict[str, Any], from_seq: int
) -> AsyncIterator[bytes]:
    """The same events as `_stream`, read from the frame ring the host writes: a poll at the frame rate (a wake-up
    when the host is in this process), renewing the host's screencast while the viewer stays."""
    last = from_seq - 1
    shown: dict[str, Any] | None = None
    seq = 0
    poll = 1.0 / max(0.5, float(args["fps"]))
    channel = cast_channel(session_id)
    renewing: asyncio.Future[Any] | None = None
    now = time.monotonic()
    next_state, next_renew, last_sent = now + STATE_SECONDS, now + CAST_LEASE_SECONDS / 3, now

    def renew() -> None:
        with contextlib.suppress(Exception):  # a missed renewal is retried; the lease outlasts two of them
            pages.run(session_id, "handoff_cast", args)

    try:
        while True:
            if await request.is_disconnected():
                return
            item = await anyio.to_thread.run_sync(store.browser_cast_latest, session_id)
            if item is not None and item["seq"] > last:
                last = item["seq"]
                view = item["view"]
                if view.get("challenge"):
                    await anyio.to_thread.run_sync(handoff.note_challenge, store, h, view)
                moved = handoff.clip_event(view)
                if moved != shown:
                    shown = moved
                    yield encode(None, "clip", moved)
                seq += 1
                params = {"data": item["image"], "metadata": item.get("metadata") or {}}
                yield encode(seq, "frame", handoff.frame_event(seq, params, view))
                last_sent = time.monotonic()
            now = time.monotonic()
            if now >= next_state:
                active = await anyio.to_thread.run_sync(store.active_handoff, session_id)
                if active is None or active["id"] != h["id"]:
                    yield encode(None, "end", {"reason": "handoff_ended", "handoff_id": h["id"]})
                    return
                if not await anyio.to_thread.run_sync(pages.has_page, session_id):
                    yield encode(None, "end", {"reason": "page_closed", "handoff_id": h["id"]})
                    return
                next_state = now + STATE_SECONDS
            if now >= next_renew and (renewing is None or renewing.done()):
                renewing = asyncio.ensure_future(anyio.to_thread.run_sync(renew))
                next_renew = now + CAST_LEASE_SECONDS / 3
            if now - last_sent >= KEEPALIVE_SECONDS:
                last_sent = now
                yield b": keepalive\n\n"
            await notify.wait(channel, poll)
    finally:
        # Nobody watches this stream now (another viewer's renewal starts it again). Shielded: a client that
        # went away cancels this generator, and the host must still be told, or it casts until its lease ends.
        with anyio.CancelScope(shield=True), contextlib.suppress(Exception):
            await anyio.to_thread.run_sync(pages.stop_cast, session_id)
