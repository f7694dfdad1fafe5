"""Handing the agent's browser page to a person: the two tools, and what the hand-off routes do to the page.

The tools (`browser_handoff`, `browser_handoff_end`, capability `browser_handoff`) are a tool family. A blocking
hand-off stops the turn (the step puts it in `turn.pending["handoff"]`; `handoff_done: true` resumes it); an
open one lets the agent carry on. The routes (`api/routes/browser.py`) stream the page with CDP's screencast,
relay a person's pointer and keys with CDP input events, and ask whether the person has finished.

Everything that touches the page is an operation of `oberik.browser.handoff_ops`: on the local pool's loop, or as a
command to the browser Lambda through the table when the deployment keeps its pages there (the stream then reads
the frames that host writes into the table). Nothing here imports Playwright at module level, so the family can be
registered where no browser is installed.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from oberik.browser import handoff_rules as rules
from oberik.browser.detect import detect_challenge, union_box
from oberik.domain.errors import Conflict, Forbidden
from oberik.domain.tools import ToolSpec
from oberik.engine.tools import ToolOutcome

if TYPE_CHECKING:
    from playwright.async_api import Page

    from oberik.engine.toolbox import ToolContext

# A little room around the crop so a widget's border and shadow are not cut off.
PAD = 8
DEFAULT_VIEWPORT = {"width": 1280, "height": 800}
JPEG_QUALITY = 70

# --- looking at the page --------------------------------------------------------------------------------------

# Runs in the page: the selector's visible box, the viewport, whether the page holds the keyboard, and whether
# it has rendered anything yet.
_LOOK_JS = r"""
(sel) => {
  const visible = (el) => {
    if (!el || !el.getBoundingClientRect) return null;
    const r = el.getBoundingClientRect();
    if (r.width < 2 || r.height < 2) return null;
    const st = getComputedStyle(el);
    if (st.display === 'none' || st.visibility === 'hidden' || parseFloat(st.opacity || '1') === 0) return null;
    if (r.bottom < 0 || r.right < 0 || r.top > innerHeight || r.left > innerWidth) return null;
    return {x: r.left, y: r.top, width: r.width, height: r.height};
  };
  let box = null, bad = false;
  if (sel) { try { box = visible(document.querySelector(sel)); } catch (e) { bad = true; } }
  const a = document.activeElement;
  const typeable = !!a && a !== document.body && (
    a.isContentEditable || a.tagName === 'TEXTAREA' || a.tagName === 'SELECT' || a.tagName === 'IFRAME' ||
    (a.tagName === 'INPUT' && !/^(button|submit|reset|checkbox|radio|range|color|file|image|hidden)$/i.test(a.type)));
  const body = document.body;
  const shown = !!body && ((body.innerText || '').trim().length > 0 ||
    !!body.querySelector('img,canvas,svg,iframe,video,input,button,select,textarea,object,embed'));
  return {box, bad, vw: innerWidth, vh: innerHeight, focused: typeable, blank: !shown,
          loading: document.readyState === 'loading', url: location.href};
}
"""


def framing(info: dict[str, Any], challenge: dict[str, Any] | None, selector: str | None) -> dict[str, Any]:
    """Where to crop: the selector's box with any visible challenge overlay; else a recognised bot-check
    widget; else the whole viewport. The clip is padded, kept inside the viewport and rounded."""
    vw, vh = float(info.get("vw") or DEFAULT_VIEWPORT["width"]), float(info.get("vh") or DEFAULT_VIEWPORT["height"])
    overlays = list((challenge or {}).get("overlays") or [])
    box = info.get("box")
    if selector and box:
        region, area = "selector", union_box(box, *overlays)
    elif challenge and (challenge.get("box") or overlays):
        region, area = "detected", union_box(challenge.get("box"), *overlays)
    else:
        region, area = "viewport", None
    if area is None:
        clip = {"x": 0, "y": 0, "width": int(vw), "height": int(vh)}
    else:
        x0 = max(0.0, area["x"] - PAD)
        y0 = max(0.0, area["y"] - PAD)
        x1 = min(vw, area["x"] + area["width"] + PAD)
        y1 = min(vh, area["y"] + area["height"] + PAD)
        clip = {"x": int(x0), "y": int(y0), "width": max(1, round(x1 - int(x0))), "height": max(1, round(y1 - int(y0)))}
    return {
        "region": region,
        "matched": region == "selector",
        "clip": clip,
        "origin": {"x": clip["x"], "y": clip["y"]},
        "viewport": {"width": int(vw), "height": int(vh)},
        "focused": bool(info.get("focused")),
        "blank": bool(info.get("blank")),
        "loading": bool(info.get("loading")),
        "url": info.get("url") or "",
        "challenge": challenge,
        "bad_selector": bool(info.get("bad")),
    }


async def look(page: Page, selector: str | None) -> dict[str, Any]:
    """The page as a viewer needs it now; a page mid-navigation answers as loading, never raises."""
    try:
        info = await page.evaluate(_LOOK_JS, selector)
    except Exception:
        vp = page.viewport_size or DEFAULT_VIEWPORT
        info = {"box": None, "vw": vp["width"], "vh": vp["height"], "blank": True, "loading": True, "url": page.url}
    challenge = await detect_challenge(page)
    return framing(info, challenge, selector)


async def _shot(page: Page, clip: dict[str, Any] | None = None) -> str:
    kwargs: dict[str, Any] = {"type": "jpeg", "quality": JPEG_QUALITY}
    if clip is not None:
        kwargs["clip"] = {k: float(v) for k, v in clip.items()}
    return base64.b64encode(await page.screenshot(**kwargs)).decode()


def jpeg_size(data: bytes) -> tuple[int, int]:
    """Width and height of a JPEG from its frame header (0, 0 when it has none)."""
    i = 2
    while i + 9 < len(data):
        if data[i] != 0xFF:
            i += 1
            continue
        marker = data[i + 1]
        if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7:
            i += 2
            continue
        length = int.from_bytes(data[i + 2 : i + 4], "big")
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
            return int.from_bytes(data[i + 7 : i + 9], "big"), int.from_bytes(data[i + 5 : i + 7], "big")
        i += 2 + length
    return 0, 0


# --- the tools -------------------------------------------------------------------------------------------------

HANDOFF = ToolSpec(
    name="browser_handoff",
    family="browser",
    capability="browser_handoff",
    family_owner="browser_handoff",
    description=(
        "Give the user live control of your browser page, or of the part that matters, when only a person can get "
        "past it: a bot check or CAPTCHA (never try to pass one yourself), a login you have no credentials for, a "
        "consent dialog, a two-factor prompt. mode 'blocking' (the default) stops your turn until the user is "
        "finished: do not ask them anything about it, finishing is their answer; when you resume, read the page "
        "first, it may have moved on. mode 'open' lets you carry on while they look; close it with "
        "browser_handoff_end. selector narrows the view to one element (any challenge overlay that appears is "
        "added to it). interactive: false shows the page without letting them touch it. auto_done (default true) "
        "lets the hand-off end by itself once the page shows they are done; it needs a reason that says what done "
        "looks like, e.g. 'pass the captcha'."
    ),
    parameters={
        "type": "object",
        "properties": {
            "reason": {"type": "string", "description": "what the user should do, e.g. 'log in to your bank'"},
            "selector": {"type": "string", "description": "CSS selector of the part to show; omit for the page"},
            "mode": {"type": "string", "enum": ["blocking", "open"]},
            "interactive": {"type": "boolean", "description": "false: show it without letting them touch it"},
            "auto_done": {"type": "boolean", "description": "end by itself once the page shows they are done"},
        },
        "required": ["reason"],
        "additionalProperties": False,
    },
)

HANDOFF_END = ToolSpec(
    name="browser_handoff_end",
    family="browser",
    capability="browser_handoff",
    family_owner="browser_handoff",
    description="Close an open hand-off: the user stops seeing your browser page.",
    parameters={"type": "object", "properties": {}, "additionalProperties": False},
)


def _error(text: str) -> ToolOutcome:
    return ToolOutcome(json.dumps({"error": text}), ok=False)


def autodetect_on(project: Any) -> bool:
    from oberik.settings import get_settings

    return bool(get_settings().enable_handoff_autodetect and (project is None or project.settings.handoff_autodetect))


def _pages() -> Any:
    """The conversation pages of this deployment: the local pool, or the browser Lambda through the mailbox
    (`oberik.browser.handoff_ops`)."""
    from oberik.browser.handoff_ops import pages

    return pages()


class HandoffFamily:
    name = "browser_handoff"

    def specs(self, project: Any, store: Any) -> tuple[ToolSpec, ...]:
        return (HANDOFF, HANDOFF_END)

    def run(self, ctx: ToolContext) -> ToolOutcome:
        if ctx.call.name == HANDOFF.name:
            return self._start(ctx)
        if ctx.call.name == HANDOFF_END.name:
            return self._end(ctx)
        return _error(f"no tool named {ctx.call.name!r} in the hand-off family")

    @staticmethod
    def _start(ctx: ToolContext) -> ToolOutcome:
        turn, store = ctx.turn, ctx.store
        sid = turn.session_id
        pages = _pages()
        selector = ctx.args.get("selector") if isinstance(ctx.args.get("selector"), str) else None
        has_page = pages.has_page(sid)
        if turn.plan.unattended:  # nobody to hand it to: say so, and what is in the way
            view = pages.run(sid, "handoff_look", {"selector": None}) if has_page else {}
            challenge = view.get("challenge")
            what = f"a bot check: {challenge['reason']}" if challenge else "only a person can get past it"
            return ToolOutcome(rules.UNATTENDED.format(url=view.get("url") or "the current address", what=what))
        if not has_page:
            return _error(
                "no browser page is open in this conversation: open it with browser_goto first, then hand it over"
            )
        view = pages.run(sid, "handoff_look", {"selector": selector or None})
        project = store.get_project(turn.project_id)
        try:
            ask = rules.parse_ask(ctx.args, autodetect=autodetect_on(project))
        except rules.HandoffError as e:
            return _error(str(e))
        h = rules.new_handoff(ask, session_id=sid, turn_id=turn.id, tool_call_id=ctx.call.id, now=ctx.now)
        h |= {
            "url": view["url"],
            "region": view["region"],
            "matched": view["matched"],
            "challenge_seen": bool(view.get("challenge")),
        }
        earlier = store.active_handoff(sid)
        store.put_handoff(h)  # one hand-off at a time: this one replaces any still showing
        if earlier and earlier["id"] != h["id"] and earlier["mode"] == "open":
            ctx.writer.emit("browser_handoff", rules.public({**earlier, "active": False}))
        shown = rules.public(h)
        notes = [n for n in (rules.region_sentence(view["region"], ask.selector), ask.auto_done_note) if n]
        if view.get("bad_selector"):
            notes.insert(0, f"{ask.selector!r} is not a valid CSS selector.")
        if ask.mode == "blocking":
            ctx.extras["pause"] = shown
            return ToolOutcome(
                json.dumps({"handoff": shown["id"], "status": "waiting for the user to finish", "notes": notes})
            )
        ctx.writer.emit("browser_handoff", shown)
        can = "act on" if ask.interactive else "watch (not touch)"
        text = (
            f"The user can now {can} {'the element you named' if view['matched'] else 'the page'} live. Carry on "
            "with your work; call browser_handoff_end when you no longer need them looking."
        )
        return ToolOutcome("\n\n".join([text, *notes]))

    @staticmethod
    def _end(ctx: ToolContext) -> ToolOutcome:
        ended = ctx.store.end_handoff(ctx.turn.session_id)
        if ended is None:
            return ToolOutcome("No hand-off was open, so there was nothing to close.")
        ctx.writer.emit("browser_handoff", rules.public({**ended, "active": False}))
        return ToolOutcome("The hand-off is closed: the user no longer sees your browser page.")


FAMILY = HandoffFamily()


# --- what the routes do ----------------------------------------------------------------------------------------


def current(store: Any, session_id: str) -> dict[str, Any]:
    """The conversation's active hand-off and its open page, or a 409 saying which is missing."""
    h = store.active_handoff(session_id)
    if h is None:
        raise Conflict(
            "Nothing on this conversation's browser page is handed to the user right now; the agent starts a "
            "hand-off with browser_handoff.",
            code="no_handoff",
        )
    if not _pages().has_page(session_id):
        raise Conflict(
            "The agent's browser page for this conversation is closed (pages close after a while unused), so there "
            "is nothing to show; the agent opens it again with browser_goto.",
            code="no_page",
        )
    return h


def note_challenge(store: Any, h: dict[str, Any], view: dict[str, Any]) -> None:
    """Remember that a bot check was on screen during this hand-off (what `gone` needs)."""
    if view.get("challenge") and not h.get("challenge_seen"):
        store.update_handoff(h["session_id"], h["id"], challenge_seen=True)
        h["challenge_seen"] = True


def still_frame(store: Any, session_id: str, selector: str | None) -> dict[str, Any]:
    h = current(store, session_id)
    sel = selector if selector is not None else h.get("selector")
    pages = _pages()
    out = cast_still(store, session_id, sel) if pages.kind == "mailbox" else None
    if out is None:
        out = pages.run(session_id, "handoff_still", {"selector": sel})
    pages.touch(session_id)
    note_challenge(store, h, out)
    out.pop("challenge", None)
    out.pop("bad_selector", None)
    return {**out, "handoff_id": h["id"], "scale": out["width"] / max(1, out["viewport"]["width"])}


# A frame the host cast this recently is as good as a fresh still (and costs no command).
STILL_FRESH_SECONDS = 2.0


def cast_still(store: Any, session_id: str, selector: str | None) -> dict[str, Any] | None:
    """The newest screencast frame the host wrote into the table, as a still, when one is fresh and cropped for
    the same selector; None otherwise (the caller then asks the host for a still)."""
    item = store.browser_cast_latest(session_id)
    if item is None or time.time() - item["at"] > STILL_FRESH_SECONDS or item.get("selector") != selector:
        return None
    raw = base64.b64decode(item["image"])
    w, hgt = jpeg_size(raw)
    view = dict(item["view"])
    view["challenge"] = view.get("challenge") or None
    return view | {"image": item["image"], "format": "jpeg", "width": w, "height": hgt}


# Mouse buttons as CDP names them, and the bit each sets in `buttons`.
_BUTTON_BIT = {"left": 1, "right": 2, "middle": 4}


def relay_input(store: Any, session_id: str, body: Any) -> dict[str, Any]:
    """Check a person's gesture and play it into the page with CDP input events."""
    h = current(store, session_id)
    if not h.get("interactive"):
        raise Forbidden(
            "This hand-off is read-only: the agent shared the page to be looked at, not touched, so input is refused.",
            code="handoff_read_only",
        )

    pages = _pages()
    answer = pages.run(session_id, "handoff_input", {"body": body}, timeout=30)
    pages.touch(session_id)
    return dict(answer)


async def _mouse(cdp: Any, kind: str, x: float, y: float, **extra: Any) -> None:
    await cdp.send("Input.dispatchMouseEvent", {"type": kind, "x": x, "y": y, **extra})


async def _dispatch(cdp: Any, state: dict[str, Any], ev: rules.InputEvent, page: Page) -> None:
    held: int = state.get("handoff_buttons", 0)
    bit = _BUTTON_BIT[ev.button]
    if ev.type == "click":
        await _mouse(cdp, "mouseMoved", ev.x, ev.y, buttons=held)
        for n in range(1, ev.clicks + 1):
            await _mouse(cdp, "mousePressed", ev.x, ev.y, button=ev.button, buttons=held | bit, clickCount=n)
            await _mouse(cdp, "mouseReleased", ev.x, ev.y, button=ev.button, buttons=held, clickCount=n)
    elif ev.type == "pointer_down":
        await _mouse(cdp, "mouseMoved", ev.x, ev.y, buttons=held)
        state["handoff_buttons"] = held | bit
        await _mouse(cdp, "mousePressed", ev.x, ev.y, button=ev.button, buttons=held | bit, clickCount=1)
    elif ev.type == "pointer_move":
        pressed = "left" if held & 1 else "right" if held & 2 else "middle" if held & 4 else "none"
        await _mouse(cdp, "mouseMoved", ev.x, ev.y, button=pressed, buttons=held)
    elif ev.type == "pointer_up":
        state["handoff_buttons"] = held & ~bit
        await _mouse(cdp, "mouseReleased", ev.x, ev.y, button=ev.button, buttons=held & ~bit, clickCount=1)
    elif ev.type == "drag":
        await _mouse(cdp, "mouseMoved", ev.x, ev.y, buttons=0)
        await _mouse(cdp, "mousePressed", ev.x, ev.y, button=ev.button, buttons=bit, clickCount=1)
        if ev.hold_ms:
            await asyncio.sleep(ev.hold_ms / 1000)
        for i in range(1, ev.steps + 1):
            t = rules.ease(i / ev.steps)
            px, py = ev.x + (ev.to_x - ev.x) * t, ev.y + (ev.to_y - ev.y) * t
            await _mouse(cdp, "mouseMoved", px, py, button=ev.button, buttons=bit)
            await asyncio.sleep(0.012)
        await _mouse(cdp, "mouseReleased", ev.to_x, ev.to_y, button=ev.button, buttons=0, clickCount=1)
        state["handoff_buttons"] = 0
    elif ev.type == "wheel":
        await _mouse(cdp, "mouseWheel", ev.x, ev.y, deltaX=ev.delta_x, deltaY=ev.delta_y)
    elif ev.type == "scroll":
        await page.evaluate("([dx, dy]) => window.scrollBy(dx, dy)", [ev.delta_x, ev.delta_y])
    elif ev.type == "type":
        await cdp.send("Input.insertText", {"text": ev.text})
    elif ev.type == "key":
        down, up = rules.key_params(ev.key, ev.modifiers)
        await cdp.send("Input.dispatchKeyEvent", down)
        await cdp.send("Input.dispatchKeyEvent", up)


# --- has the person finished? ---------------------------------------------------------------------------------


def check(store: Any, project: Any, session_id: str, *, now: float | None = None) -> dict[str, Any]:
    """Ask the page, then (only if the page cannot tell) the small vision model, whether the hand-off is done."""
    now = time.time() if now is None else now
    h = store.active_handoff(session_id)
    refused = rules.gate_check(h, autodetect=autodetect_on(project), now=now)
    if refused is not None:
        return refused.as_dict()
    assert h is not None
    pages = _pages()
    if not pages.has_page(session_id):
        return rules.not_checked("nothing_to_check").as_dict()
    view = pages.run(session_id, "handoff_look", {"selector": h.get("selector")})
    note_challenge(store, h, view)
    verdict = rules.page_verdict(
        challenge_now=bool(view.get("challenge")),
        challenge_seen=bool(h.get("challenge_seen")),
        blank=view["blank"],
        loading=view["loading"],
    )
    if verdict is not None:
        return rules.answer_for(verdict, int(h.get("checks", 0))).as_dict()
    refused = rules.gate_check(h, autodetect=True, now=now, model=True)
    if refused is not None:
        return refused.as_dict()
    used = store.claim_handoff_check(
        session_id, h["id"], now=now, spacing=rules.CHECK_SPACING_SECONDS, max_checks=rules.MAX_CHECKS
    )
    if used is None:  # another check got there first, or this hand-off changed meanwhile
        again = rules.gate_check(store.active_handoff(session_id), autodetect=True, now=now, model=True)
        return (again or rules.not_checked("too_soon")).as_dict()
    image = pages.run(session_id, "handoff_shot", {"clip": view["clip"]})["image"]
    return rules.answer_for(ask_checker(project, h["reason"], image), used).as_dict()


def ask_checker(project: Any, reason: str, image_b64: str) -> rules.CheckState:
    """One call to the small vision model; its answer is one of three words, and a failure is `unclear`."""
    from oberik.domain.errors import ModelError, OberikError
    from oberik.domain.llm import Completion, ModelRequest
    from oberik.engine.models import resolver_for
    from oberik.observability import logger
    from oberik.settings import get_settings

    settings = get_settings()
    ps = project.settings
    name = ps.handoff_check_model or settings.handoff_check_model or ps.default_model or settings.default_model
    try:
        model, model_id = resolver_for(ps.providers, settings)(name)
        completion: Completion | None = None
        request = ModelRequest(model=model_id, messages=rules.checker_messages(reason, image_b64), temperature=0.0)
        for item in model.stream(request):
            if isinstance(item, Completion):
                completion = item
    except (ModelError, OberikError):
        logger.warning("the hand-off checker failed", model=name)
        return "unclear"
    return rules.model_word(completion.content if completion else "")


# --- the live stream -------------------------------------------------------------------------------------------


class Screencast:
    """CDP `Page.startScreencast` on one page: every frame Chromium paints is acknowledged at once (so the next
    one comes) and handed to `sink` on the browser loop."""

    def __init__(self, sink: Callable[[dict[str, Any]], None]) -> None:
        self.sink = sink
        self.cdp: Any = None
        self._acks: set[asyncio.Future[None]] = set()

    async def start(self, page: Page, *, quality: int = 60) -> None:
        vp = page.viewport_size or DEFAULT_VIEWPORT
        self.cdp = await page.context.new_cdp_session(page)
        cdp = self.cdp

        def on_frame(params: dict[str, Any]) -> None:
            ack = asyncio.ensure_future(_ack(cdp, params.get("sessionId")))
            self._acks.add(ack)
            ack.add_done_callback(self._acks.discard)
            self.sink(params)

        cdp.on("Page.screencastFrame", on_frame)
        await cdp.send(
            "Page.startScreencast",
            {"format": "jpeg", "quality": quality, "maxWidth": vp["width"], "maxHeight": vp["height"]},
        )

    async def stop(self) -> None:
        if self.cdp is None:
            return
        try:
            await self.cdp.send("Page.stopScreencast")
            await self.cdp.detach()
        except Exception:  # the page closed first
            pass
        self.cdp = None


async def _ack(cdp: Any, session: Any) -> None:
    with contextlib.suppress(Exception):
        await cdp.send("Page.screencastFrameAck", {"sessionId": session})


def frame_event(seq: int, params: dict[str, Any], view: dict[str, Any]) -> dict[str, Any]:
    """A screencast frame as the stream sends it: the whole viewport, with where to crop it."""
    data = params.get("data") or ""
    w, h = jpeg_size(base64.b64decode(data[:4096] + "=" * (-len(data[:4096]) % 4))) if data else (0, 0)
    meta = params.get("metadata") or {}
    vw = view["viewport"]["width"]
    return {
        "seq": seq,
        "image": data,
        "format": "jpeg",
        "width": w,
        "height": h,
        "scale": (w / vw) if vw and w else 1.0,
        "viewport": view["viewport"],
        "region": view["region"],
        "matched": view["matched"],
        "clip": view["clip"],
        "origin": view["origin"],
        "focused": view["focused"],
        "url": view["url"],
        "at": meta.get("timestamp") or time.time(),
    }


def clip_event(view: dict[str, Any]) -> dict[str, Any]:
    return {k: view[k] for k in ("clip", "origin", "region", "matched", "viewport", "focused", "url")}
