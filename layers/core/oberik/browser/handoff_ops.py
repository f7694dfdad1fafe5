"""The hand-off's page work as browser operations, so it runs wherever the conversation's page lives.

Each operation is `fn(page, state, args) -> dict` and is registered with `actions.register_op`, so the browser
Lambda's command loop runs it like any browser tool's operation. The routes and the tool reach the page through
`Pages` (see `pages()`): `PoolPages` calls the same functions on the local pool's loop, `MailboxPages` sends them as
commands through the table to the host. An operation that refuses (a gesture that is not valid, say) raises a
domain error locally; through the mailbox the host answers with the error's kind and sentence and `MailboxPages`
raises the same error again, so a route answers the same status either way.

On the host, `handoff_cast` runs CDP's screencast while somebody watches and writes the frames into the table
(`CastWriter`): at most `fps` a second, each carrying where to crop it, into a ring of the newest few. A frame is
also written when the crop moves on a page that paints nothing new, so the viewer re-aims at once. The cast
stops by itself unless the watching route renews it, so a viewer that vanished costs a few seconds of writes.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol

from oberik.browser import handoff as ho
from oberik.browser import handoff_rules as rules
from oberik.browser.actions import register_op
from oberik.domain.errors import Conflict, Forbidden, Invalid, NotFound, OberikError

if TYPE_CHECKING:
    from playwright.async_api import Page

    from oberik.browser.remote import MailboxBrowser

OpFn = Callable[["Page", dict[str, Any], dict[str, Any]], Awaitable[dict[str, Any]]]

# How often the host looks at the page again for where to crop while it casts (as the local stream does).
LOOK_SECONDS = 0.25
# A screencast nobody renews stops after this long; the stream renews it every third of it.
CAST_LEASE_SECONDS = 15.0
# A frame must fit in one item (400 KB) with its crop and keys: larger ones are dropped and the quality lowered.
MAX_FRAME_CHARS = 300_000
CAST_QUALITY = 60
MIN_QUALITY = 20


# --- the operations ----------------------------------------------------------------------------------------------


async def op_look(page: Page, state: dict[str, Any], args: dict[str, Any]) -> dict[str, Any]:
    """Where to crop and what is on screen (`handoff.look`)."""
    return await ho.look(page, args.get("selector"))


async def op_still(page: Page, state: dict[str, Any], args: dict[str, Any]) -> dict[str, Any]:
    """One whole-viewport JPEG with the view."""
    view = await ho.look(page, args.get("selector"))
    raw = await page.screenshot(type="jpeg", quality=ho.JPEG_QUALITY)
    w, h = ho.jpeg_size(raw)
    return view | {"image": base64.b64encode(raw).decode(), "format": "jpeg", "width": w, "height": h}


async def op_shot(page: Page, state: dict[str, Any], args: dict[str, Any]) -> dict[str, Any]:
    """A JPEG of `clip` (what the checker model is shown)."""
    return {"image": await ho._shot(page, args.get("clip"))}


async def op_input(page: Page, state: dict[str, Any], args: dict[str, Any]) -> dict[str, Any]:
    """Play one checked gesture (`args["body"]`, as the input route received it) into the page."""
    body = args.get("body")
    vp = page.viewport_size or ho.DEFAULT_VIEWPORT
    ev = rules.parse_input(body, {"width": float(vp["width"]), "height": float(vp["height"])})
    cdp = state.get("handoff_cdp")
    if cdp is None:
        cdp = state["handoff_cdp"] = await page.context.new_cdp_session(page)
    await ho._dispatch(cdp, state, ev, page)
    out: dict[str, Any] = {"ok": True, "type": ev.type}
    if ev.origin is not None and isinstance(body, dict):
        out["origin"] = body.get("origin")
        out["at"] = {"x": ev.x, "y": ev.y}
    try:
        out["focused"] = bool((await page.evaluate(ho._LOOK_JS, None))["focused"])
    except Exception:
        out["focused"] = False
    if ev.want_frame:
        out["frame"] = {"image": await ho._shot(page), "format": "jpeg"}
    return out


async def op_cast(page: Page, state: dict[str, Any], args: dict[str, Any]) -> dict[str, Any]:
    """Start, renew (`selector`, `fps`, `keep`, `lease_seconds`) or `stop` the screencast into the table."""
    writer: CastWriter | None = state.get("handoff_cast")
    if args.get("stop"):
        if writer is not None:
            state.pop("handoff_cast", None)
            await writer.stop()
        return {"casting": False}
    store, session_id = state.get("store"), state.get("session_id")
    if store is None or not session_id:
        raise Conflict("Streaming through the table needs the browser host; this page lives in the server process.")
    settings = _cast_settings(args)
    if writer is None or writer.finished:
        latest = await asyncio.to_thread(store.browser_cast_latest, session_id)
        writer = CastWriter(store, session_id, page, seq=int(latest["seq"]) if latest else 0, **settings)
        state["handoff_cast"] = writer
        await writer.start()
    else:
        writer.renew(**settings)
    return {"casting": True, "from_seq": writer.first_seq, "fps": writer.fps, "keep": writer.keep}


def _cast_settings(args: dict[str, Any]) -> dict[str, Any]:
    def num(key: str, default: float, lo: float, hi: float) -> float:
        v = args.get(key, default)
        if isinstance(v, bool) or not isinstance(v, int | float):
            v = default
        return min(hi, max(lo, float(v)))

    selector = args.get("selector")
    return {
        "selector": selector if isinstance(selector, str) and selector else None,
        "fps": num("fps", 6.0, 0.5, 30.0),
        "keep": int(num("keep", 4, 1, 16)),
        "lease_seconds": num("lease_seconds", CAST_LEASE_SECONDS, 1.0, 120.0),
    }


RAW_OPS: dict[str, OpFn] = {
    "handoff_look": op_look,
    "handoff_still": op_still,
    "handoff_shot": op_shot,
    "handoff_input": op_input,
    "handoff_cast": op_cast,
}

_ERRORS: dict[str, type[OberikError]] = {
    "Invalid": Invalid,
    "Forbidden": Forbidden,
    "Conflict": Conflict,
    "NotFound": NotFound,
}


def _answering(fn: OpFn) -> OpFn:
    """The registered form: a refusal or a page that broke mid-way becomes an answer, never an exception that
    would end the host's command loop."""

    async def run(page: Page, state: dict[str, Any], args: dict[str, Any]) -> dict[str, Any]:
        try:
            return await fn(page, state, args)
        except OberikError as e:
            kind = next((k for k, cls in _ERRORS.items() if isinstance(e, cls)), "Conflict")
            return {"error": e.detail, "error_kind": kind, "code": e.code, "field": getattr(e, "field", None)}
        except Exception as e:
            first = (str(e).strip().splitlines() or [type(e).__name__])[0][:300]
            return {
                "error": f"the page could not do that right now ({first}); try again",
                "error_kind": "Conflict",
                "code": "browser_busy",
            }

    return run


for _name, _fn in RAW_OPS.items():
    register_op(_name, _answering(_fn))


# --- the screencast into the table (runs on the host) --------------------------------------------------------------


def _slim(view: dict[str, Any]) -> dict[str, Any]:
    """A view as stored with a frame: whether a bot check was showing, not the whole finding."""
    out = {k: v for k, v in view.items() if k not in ("challenge", "bad_selector")}
    out["challenge"] = bool(view.get("challenge"))
    return out


class CastWriter:
    """CDP's screencast of one page written into the conversation's frame ring, capped at `fps` frames a second."""

    def __init__(
        self,
        store: Any,
        session_id: str,
        page: Page,
        *,
        seq: int,
        selector: str | None,
        fps: float,
        keep: int,
        lease_seconds: float,
    ) -> None:
        self.store, self.session_id, self.page = store, session_id, page
        self.seq = seq
        self.first_seq = seq + 1
        self.selector, self.fps, self.keep = selector, fps, keep
        self.until = time.monotonic() + lease_seconds
        self.quality = CAST_QUALITY
        self.latest: dict[str, Any] | None = None  # the newest painted frame not yet written
        self.last: dict[str, Any] | None = None  # the last frame written (re-sent when only the crop moves)
        self.wake = asyncio.Event()
        self.cast = ho.Screencast(self._arrived)
        self.task: asyncio.Task[None] | None = None
        self.written = 0
        self.dropped = 0
        self._relook = False

    @property
    def finished(self) -> bool:
        return self.task is None or self.task.done()

    def _arrived(self, params: dict[str, Any]) -> None:  # on the host's loop: only the newest frame matters
        self.latest = params
        self.wake.set()

    async def start(self) -> None:
        await self.cast.start(self.page, quality=self.quality)
        self.task = asyncio.create_task(self._run())

    def renew(self, *, selector: str | None, fps: float, keep: int, lease_seconds: float) -> None:
        if selector != self.selector:
            self.selector, self._relook = selector, True
        self.fps, self.keep = fps, keep
        self.until = time.monotonic() + lease_seconds
        self.wake.set()

    async def stop(self) -> None:
        if self.task is not None and not self.task.done():
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self.task
        await self.cast.stop()

    async def _run(self) -> None:
        try:
            view = await ho.look(self.page, self.selector)
            shown = ho.clip_event(view)
            moved = False
            now = time.monotonic()
            next_look, next_write = now + LOOK_SECONDS, now
            while now < self.until:
                pending = self.latest is not None or (moved and self.last is not None)
                wait = (min(next_look, next_write) if pending else next_look) - now
                if wait > 0:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self.wake.wait(), wait)
                    self.wake.clear()
                now = time.monotonic()
                if now >= next_look or self._relook:
                    self._relook = False
                    view = await ho.look(self.page, self.selector)
                    if ho.clip_event(view) != shown:
                        shown, moved = ho.clip_event(view), True
                    next_look = now + LOOK_SECONDS
                if now >= next_write:
                    params = self.latest or (self.last if moved else None)
                    if params is not None:
                        kind = "frame" if self.latest is not None else "clip"
                        self.latest = None
                        moved = False
                        await self._write(kind, params, view)
                        next_write = now + 1.0 / self.fps
                now = time.monotonic()
        except asyncio.CancelledError:
            raise
        except Exception:  # the page closed or the host is stopping: the cast just ends
            pass
        finally:
            with contextlib.suppress(Exception):
                await self.cast.stop()

    async def _write(self, kind: str, params: dict[str, Any], view: dict[str, Any]) -> None:
        data = params.get("data") or ""
        if len(data) > MAX_FRAME_CHARS:  # too big for an item: skip it and ask Chromium for smaller pictures
            self.dropped += 1
            if self.quality > MIN_QUALITY:
                self.quality = max(MIN_QUALITY, self.quality - 20)
                await self.cast.stop()
                await self.cast.start(self.page, quality=self.quality)
            return
        self.last = params
        frame = {
            "kind": kind,
            "image": data,
            "metadata": params.get("metadata") or {},
            "view": _slim(view),
            "selector": self.selector,
        }
        self.seq += 1
        ok = await asyncio.to_thread(self.store.browser_cast_put, self.session_id, self.seq, frame, keep=self.keep)
        if ok:
            self.written += 1
        else:  # another writer got further (a host before this one): carry on after it
            latest = await asyncio.to_thread(self.store.browser_cast_latest, self.session_id)
            self.seq = max(self.seq, int(latest["seq"]) if latest else 0)


# --- where the routes and the tool reach the page ----------------------------------------------------------------


class Pages(Protocol):
    kind: str

    def has_page(self, session_id: str) -> bool: ...

    def run(self, session_id: str, op: str, args: dict[str, Any], *, timeout: float = 20) -> dict[str, Any]: ...

    def touch(self, session_id: str) -> None: ...


class PoolPages:
    """The page is in this process's pool: the operations run on its loop with the page's own state."""

    kind = "local"

    def __init__(self, pool: Any) -> None:
        self.pool = pool

    def has_page(self, session_id: str) -> bool:
        return bool(self.pool.has_page(session_id))

    def run(self, session_id: str, op: str, args: dict[str, Any], *, timeout: float = 20) -> dict[str, Any]:
        fn = RAW_OPS[op]
        return dict(
            self.pool.submit_slot(
                session_id, lambda slot: fn(slot.page, slot.extras, args), open_if_missing=False, timeout=timeout
            )
        )

    def touch(self, session_id: str) -> None:
        self.pool.touch(session_id)


class MailboxPages:
    """The page is in the browser Lambda: every operation is a command through the table."""

    kind = "mailbox"

    def __init__(self, browser: MailboxBrowser) -> None:
        self.browser = browser

    def has_page(self, session_id: str) -> bool:
        return self.browser.is_open(session_id)

    def run(self, session_id: str, op: str, args: dict[str, Any], *, timeout: float = 20) -> dict[str, Any]:
        answer = self.browser.run(session_id, op, args, timeout=timeout)
        if "error" in answer and op in RAW_OPS:
            cls = _ERRORS.get(str(answer.get("error_kind")), Conflict)
            if cls is Invalid:
                raise Invalid(answer["error"], field=answer.get("field"), code=answer.get("code"))
            if "error_kind" not in answer:  # a host that does not know this operation (an older image)
                raise Conflict(
                    f"The browser host could not do this: {answer['error']}. Deploy the current browser image.",
                    code="browser_unavailable",
                )
            raise cls(answer["error"], code=answer.get("code"))
        return answer

    def touch(self, session_id: str) -> None:
        """Nothing to do: every command the host serves counts as use, and a watched page is renewed by the cast."""

    def stop_cast(self, session_id: str) -> None:
        """Ask the host to stop casting, without waiting for it (and without starting a host for it)."""
        import uuid

        if self.has_page(session_id):
            command_id = f"{time.time_ns():020d}-{uuid.uuid4().hex[:8]}"
            self.browser.store.browser_post(session_id, command_id, "handoff_cast", {"stop": True})


def pages() -> Pages:
    """Where this deployment's conversation pages are, for the hand-off."""
    from oberik.settings import get_settings

    if get_settings().browser_backend == "lambda":
        from oberik.browser.tools import browser

        remote = browser()
        return MailboxPages(remote)  # type: ignore[arg-type]
    from oberik.browser.local import get_pool

    return PoolPages(get_pool())
