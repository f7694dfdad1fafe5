"""The hand-off's rules, with no browser and no I/O: what a hand-off is, what the agent may ask for, what a
person's input must look like, and how a finished-check decides.

A hand-off gives the person using the conversation live control of (part of) the agent's browser page. It is
stored per conversation (one at a time) so every process serving the conversation sees the same one: the step
that started it, the stream, the input and the check routes.
"""

from __future__ import annotations

import math
import re
import secrets
import time
from dataclasses import dataclass
from typing import Any, Literal

from oberik.domain.errors import Invalid

Mode = Literal["blocking", "open"]
Region = Literal["selector", "detected", "viewport"]
CheckState = Literal["gone", "loading", "solved", "unsolved", "unclear"]

# One hand-off gets this many model checks; past it the person is left with the Done button.
MAX_CHECKS = 12
# A model check this soon after the previous one is skipped (too_soon): the next gesture's check will land.
CHECK_SPACING_SECONDS = 2.0
MODEL_WORDS: tuple[str, ...] = ("solved", "unsolved", "unclear")

MAX_REASON_CHARS = 500
MAX_SELECTOR_CHARS = 500
MAX_TEXT_CHARS = 2000
MAX_DRAG_STEPS = 200
MAX_HOLD_MS = 5000
MAX_CLICKS = 3
MAX_WHEEL_DELTA = 5000.0
# How far outside the viewport a coordinate may fall (rounding of a scaled picture) before it is refused.
EDGE_SLACK = 2.0

# Words that say nothing about what "finished" would look like: a reason made only of these cannot be judged.
_VAGUE = frozenset(
    [
        "a",
        "an",
        "the",
        "me",
        "us",
        "you",
        "it",
        "this",
        "that",
        "these",
        "those",
        "here",
        "there",
        "please",
        "pls",
        "help",
        "with",
        "for",
        "to",
        "do",
        "can",
        "could",
        "would",
        "just",
        "now",
        "something",
        "anything",
        "stuff",
        "thing",
        "things",
        "page",
        "site",
        "website",
        "browser",
        "look",
        "at",
        "see",
        "check",
        "out",
        "need",
        "i",
        "my",
        "our",
        "your",
        "some",
        "bit",
        "quick",
        "quickly",
        "again",
        "and",
        "or",
        "of",
        "on",
        "in",
    ]
)


class HandoffError(ValueError):
    """What the agent did wrong calling a hand-off tool, as a sentence it can act on."""


# --- what the agent asks for --------------------------------------------------------------------------------


@dataclass(frozen=True)
class HandoffAsk:
    reason: str
    selector: str | None
    mode: Mode
    interactive: bool
    auto_done: bool
    auto_done_note: str | None  # why auto_done is off although the agent asked for it


def judgeable(reason: str) -> bool:
    """Whether a reason says what finished looks like ("pass the captcha"), not only that help is wanted."""
    words = [w for w in re.findall(r"[^\W\d_]+", reason.lower()) if w not in _VAGUE and len(w) >= 3]
    return bool(words)


def parse_ask(args: dict[str, Any], *, autodetect: bool) -> HandoffAsk:
    reason = args.get("reason")
    if not isinstance(reason, str) or not reason.strip():
        raise HandoffError(
            "browser_handoff needs `reason`: what the user should do on the page, e.g. 'pass the captcha'"
        )
    reason = reason.strip()
    if len(reason) > MAX_REASON_CHARS:
        raise HandoffError(f"`reason` is {len(reason)} characters; keep it under {MAX_REASON_CHARS}")
    selector = args.get("selector")
    if selector is not None and (not isinstance(selector, str) or len(selector) > MAX_SELECTOR_CHARS):
        raise HandoffError(f"`selector` must be a CSS selector of at most {MAX_SELECTOR_CHARS} characters")
    selector = selector.strip() if isinstance(selector, str) and selector.strip() else None
    mode = args.get("mode", "blocking")
    if mode not in ("blocking", "open"):
        raise HandoffError("`mode` must be 'blocking' (the turn waits for Done) or 'open' (you carry on)")
    interactive = args.get("interactive", True)
    if not isinstance(interactive, bool):
        raise HandoffError("`interactive` must be true or false")
    asked = args.get("auto_done")
    if asked is not None and not isinstance(asked, bool):
        raise HandoffError("`auto_done` must be true or false")
    auto_done = asked is not False
    note = None
    if auto_done and mode == "open":
        auto_done, note = False, "an open hand-off has no Done button to press, so it never ends itself"
    elif auto_done and not interactive:
        auto_done, note = False, "a read-only hand-off is not one the user can finish"
    elif auto_done and not autodetect:
        auto_done, note = False, "finished-detection is switched off for this project or deployment"
    elif auto_done and not judgeable(reason):
        auto_done, note = (
            False,
            (
                f"the reason {reason!r} does not say what finished looks like (say e.g. 'pass the captcha' or "
                "'log in to the bank')"
            ),
        )
    return HandoffAsk(reason, selector, mode, interactive, auto_done, note if asked else None)


def new_handoff(
    ask: HandoffAsk, *, session_id: str, turn_id: str, tool_call_id: str, now: float | None = None
) -> dict[str, Any]:
    """The stored record of a hand-off that has just begun (what the page showed is filled in by the caller)."""
    return {
        "id": f"h_{int(time.time() * 1000):012x}{secrets.token_hex(8)}",
        "session_id": session_id,
        "turn_id": turn_id,
        "tool_call_id": tool_call_id,
        "reason": ask.reason,
        "selector": ask.selector,
        "mode": ask.mode,
        "interactive": ask.interactive,
        "auto_done": ask.auto_done,
        "active": True,
        "started_at": now if now is not None else time.time(),
        "url": "",
        "region": "viewport",
        "matched": False,
        "challenge_seen": False,
        "checks": 0,
        "last_check_at": 0.0,
    }


def public(h: dict[str, Any]) -> dict[str, Any]:
    """The hand-off as a client sees it (the `browser_handoff` frame and the response's `handoff`)."""
    sid = h["session_id"]
    return {
        "id": h["id"],
        "session_id": sid,
        "tool_call_id": h.get("tool_call_id"),
        "reason": h["reason"],
        "selector": h.get("selector"),
        "mode": h["mode"],
        "blocking": h["mode"] == "blocking",
        "interactive": bool(h["interactive"]),
        "auto_done": bool(h["auto_done"]),
        "active": bool(h["active"]),
        "url": h.get("url") or "",
        "region": h.get("region") or "viewport",
        "matched": bool(h.get("matched")),
        "stream_url": f"/chat/sessions/{sid}/browser/stream",
        "frame_url": f"/chat/sessions/{sid}/browser/frame",
        "input_url": f"/chat/sessions/{sid}/browser/input",
        "check_url": f"/chat/sessions/{sid}/handoff/check",
    }


def region_sentence(region: str, selector: str | None) -> str | None:
    """What the agent is told when its selector missed, or None when it did not."""
    if not selector or region == "selector":
        return None
    instead = (
        "the bot-check widget found on the page"
        if region == "detected"
        else "the whole page (nothing narrower was recognisable)"
    )
    return (
        f"Your selector {selector!r} matched nothing visible on the page, so the user is shown {instead} instead. "
        "If that is not what you meant, read the page's markup (browser_html) and hand it over again with a "
        "selector that exists."
    )


def done_message(h: dict[str, Any] | None) -> str:
    """The result of a blocking browser_handoff call, once the person has finished."""
    text = (
        "The user has finished with the page they were handed. It may not be where you expected: read it now "
        "(browser_read) before doing anything else, and carry on from what it shows."
    )
    note = region_sentence(str(h.get("region")), h.get("selector")) if h else None
    return f"{text}\n\n{note}" if note else text


UNATTENDED = (
    "Nobody is there to hand the page to: this turn runs unattended (a scheduled task, a webhook or a subagent). "
    "Do not try to get past the page yourself. Say in your answer that the page at {url} is gated ({what}) and "
    "needs a person, and stop."
)


# --- the finished-check --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CheckAnswer:
    checked: bool
    done: bool = False
    state: CheckState | None = None
    reason: str | None = None
    will_check_again: bool = True

    def as_dict(self) -> dict[str, Any]:
        return {
            "checked": self.checked,
            "done": self.done,
            "state": self.state,
            "reason": self.reason,
            "will_check_again": self.will_check_again,
        }


def not_checked(reason: str) -> CheckAnswer:
    return CheckAnswer(False, reason=reason, will_check_again=reason == "too_soon")


def gate_check(h: dict[str, Any] | None, *, autodetect: bool, now: float, model: bool = False) -> CheckAnswer | None:
    """Why no check runs now, or None when one may. Looking at the page costs nothing and is always allowed;
    `model=True` also applies the spacing between model calls (the table claim enforces both again)."""
    if h is None or not h.get("active"):
        return not_checked("nothing_to_check")
    if not autodetect:
        return not_checked("autodetect_disabled")
    if not h.get("auto_done"):
        return not_checked("nothing_to_check")
    if int(h.get("checks", 0)) >= MAX_CHECKS:
        return not_checked("checked_enough")
    if model and now - float(h.get("last_check_at") or 0) < CHECK_SPACING_SECONDS:
        return not_checked("too_soon")
    return None


def page_verdict(*, challenge_now: bool, challenge_seen: bool, blank: bool, loading: bool) -> CheckState | None:
    """What the page itself says, before any model is asked; None means only the model can tell.

    A bot check on screen now is for the model (a ticked box still shows the widget). A blank or half-loaded
    page decides nothing. `gone` needs a bot check to have been seen during this hand-off: a login form, a
    consent dialog or a selector that stopped matching is never, alone, evidence that the person is done.
    """
    if challenge_now:
        return None
    if blank or loading:
        return "loading"
    if challenge_seen:
        return "gone"
    return None


def answer_for(state: CheckState, checks_used: int) -> CheckAnswer:
    done = state in ("gone", "solved")
    again = not done and checks_used < MAX_CHECKS
    return CheckAnswer(True, done=done, state=state, will_check_again=again)


def model_word(text: str) -> CheckState:
    """The checker's answer, from a closed vocabulary: anything but one of its three words is `unclear`."""
    word = re.sub(r"[\s.!\"'`*_]+", "", (text or "").strip().lower())
    return word if word in MODEL_WORDS else "unclear"  # type: ignore[return-value]


def checker_messages(reason: str, image_b64: str) -> list[dict[str, Any]]:
    """What the small vision model is sent: the task and the region's picture, and one question."""
    system = (
        "You judge whether a person has finished a task on a web page, from a picture of the part of the page "
        "they were working on. Reply with exactly one word and nothing else: solved (the task is visibly done), "
        "unsolved (it is still waiting on them), or unclear (you cannot tell). Never describe the picture and "
        "never repeat any text, letters or numbers shown in it."
    )
    return [
        {"role": "system", "content": system},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": f"The task the person was given: {reason}\nIs it finished? One word."},
                {"type": "image_url", "image_url": {"url": f"data:image/jpeg;base64,{image_b64}"}},
            ],
        },
    ]


# --- what a person does to the page ---------------------------------------------------------------------------

INPUT_TYPES = ("click", "pointer_down", "pointer_move", "pointer_up", "drag", "wheel", "type", "key", "scroll")
_POINTER = {"click", "pointer_down", "pointer_move", "pointer_up", "drag", "wheel"}
BUTTONS = ("left", "middle", "right")
MODIFIERS = ("Alt", "Control", "Meta", "Shift")
_FIELDS: dict[str, set[str]] = {
    "click": {"x", "y", "origin", "button", "clicks"},
    "pointer_down": {"x", "y", "origin", "button"},
    "pointer_move": {"x", "y", "origin"},
    "pointer_up": {"x", "y", "origin", "button"},
    "drag": {"x", "y", "origin", "to", "steps", "hold_ms", "button"},
    "wheel": {"x", "y", "origin", "delta_x", "delta_y"},
    "type": {"text"},
    "key": {"key", "modifiers"},
    "scroll": {"delta_x", "delta_y"},
}
_COMMON = {"type", "selector", "want_frame"}


def _number(body: dict[str, Any], name: str, where: str = "") -> float:
    v = body.get(name)
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
        raise Invalid(f"{where}{name} must be a number (pixels in the picture you were sent).", field=name)
    return float(v)


def _point(raw: Any, name: str) -> dict[str, float]:
    if not isinstance(raw, dict):
        raise Invalid(f"{name} must be an object {{'x': ..., 'y': ...}}.", field=name)
    extra = set(raw) - {"x", "y"}
    if extra:
        raise Invalid(f"{name} takes only x and y, not {', '.join(sorted(extra))}.", field=name)
    return {"x": _number(raw, "x", f"{name}."), "y": _number(raw, "y", f"{name}.")}


@dataclass(frozen=True)
class InputEvent:
    """A person's gesture, checked, with its coordinates already turned into page (viewport CSS) pixels."""

    type: str
    origin: dict[str, float] | None = None
    x: float = 0.0
    y: float = 0.0
    to_x: float = 0.0
    to_y: float = 0.0
    button: str = "left"
    clicks: int = 1
    steps: int = 20
    hold_ms: int = 0
    delta_x: float = 0.0
    delta_y: float = 0.0
    text: str = ""
    key: str = ""
    modifiers: tuple[str, ...] = ()
    want_frame: bool = False


def parse_input(body: Any, viewport: dict[str, float] | None) -> InputEvent:
    """Check one input request. Coordinates are image space plus the frame's `origin`; the sum is checked
    against the viewport when it is known. Raises Invalid with a sentence for anything wrong."""
    if not isinstance(body, dict):
        raise Invalid("The body must be a JSON object with a `type`.", field="body")
    kind = body.get("type")
    if kind not in INPUT_TYPES:
        raise Invalid(f"type must be one of {', '.join(INPUT_TYPES)}; got {kind!r}.", field="type")
    allowed = _FIELDS[kind] | _COMMON
    extra = set(body) - allowed
    if extra:
        raise Invalid(
            f"A {kind} input does not take {', '.join(sorted(extra))}; it takes {', '.join(sorted(allowed - {'type'}))}.",
            field="body",
        )
    want_frame = body.get("want_frame", False)
    if not isinstance(want_frame, bool):
        raise Invalid("want_frame must be true or false.", field="want_frame")
    if body.get("selector") is not None and not isinstance(body["selector"], str):
        raise Invalid("selector must be the CSS selector the frame was streamed for.", field="selector")
    fields: dict[str, Any] = {"type": kind, "want_frame": want_frame}
    if kind in _POINTER:
        if "origin" not in body:
            raise Invalid(
                "origin is required: echo the origin of the frame the coordinates were taken from "
                "(the server adds it, so a crop that moved cannot displace the gesture).",
                field="origin",
            )
        origin = _point(body["origin"], "origin")
        x, y = origin["x"] + _number(body, "x"), origin["y"] + _number(body, "y")
        _inside(x, y, viewport, "x, y")
        fields |= {"origin": origin, "x": x, "y": y}
        button = body.get("button", "left")
        if button not in BUTTONS:
            raise Invalid(f"button must be one of {', '.join(BUTTONS)}.", field="button")
        fields["button"] = button
    if kind == "click":
        clicks = body.get("clicks", 1)
        if isinstance(clicks, bool) or not isinstance(clicks, int) or not 1 <= clicks <= MAX_CLICKS:
            raise Invalid(
                f"clicks must be a whole number from 1 to {MAX_CLICKS} (2 for a double click).", field="clicks"
            )
        fields["clicks"] = clicks
    if kind == "drag":
        if "to" not in body:
            raise Invalid("A drag needs `to`: where the pointer is released, in the same image space.", field="to")
        to = _point(body["to"], "to")
        tx, ty = fields["origin"]["x"] + to["x"], fields["origin"]["y"] + to["y"]
        _inside(tx, ty, viewport, "to")
        steps = body.get("steps", 20)
        if isinstance(steps, bool) or not isinstance(steps, int) or not 2 <= steps <= MAX_DRAG_STEPS:
            raise Invalid(f"steps must be a whole number from 2 to {MAX_DRAG_STEPS}.", field="steps")
        hold = body.get("hold_ms", 0)
        if isinstance(hold, bool) or not isinstance(hold, int) or not 0 <= hold <= MAX_HOLD_MS:
            raise Invalid(f"hold_ms must be a whole number of milliseconds from 0 to {MAX_HOLD_MS}.", field="hold_ms")
        fields |= {"to_x": tx, "to_y": ty, "steps": steps, "hold_ms": hold}
    if kind in ("wheel", "scroll"):
        for name in ("delta_x", "delta_y"):
            if name in body:
                v = _number(body, name)
                if abs(v) > MAX_WHEEL_DELTA:
                    raise Invalid(f"{name} must be between -{MAX_WHEEL_DELTA:g} and {MAX_WHEEL_DELTA:g}.", field=name)
                fields[name] = v
        if not fields.get("delta_x") and not fields.get("delta_y"):
            raise Invalid(
                f"A {kind} needs delta_x or delta_y (pixels; positive scrolls down or right).", field="delta_y"
            )
    if kind == "type":
        text = body.get("text")
        if not isinstance(text, str) or not text:
            raise Invalid("A type input needs `text`: the characters to insert.", field="text")
        if len(text) > MAX_TEXT_CHARS:
            raise Invalid(f"text is {len(text)} characters; send at most {MAX_TEXT_CHARS} at a time.", field="text")
        fields["text"] = text
    if kind == "key":
        key = body.get("key")
        if not isinstance(key, str) or not key or len(key) > 32:
            raise Invalid(
                "A key input needs `key`: a key name such as Enter, Tab, Backspace, ArrowLeft or a.", field="key"
            )
        mods = body.get("modifiers", [])
        if not isinstance(mods, list) or any(m not in MODIFIERS for m in mods):
            raise Invalid(f"modifiers must be a list drawn from {', '.join(MODIFIERS)}.", field="modifiers")
        if len(key) > 1 and key not in KEYS:
            raise Invalid(
                f"key {key!r} is not a key this relay knows; send printable characters as a type input, "
                f"and named keys from: {', '.join(sorted(KEYS))}.",
                field="key",
            )
        fields |= {"key": key, "modifiers": tuple(dict.fromkeys(mods))}
    return InputEvent(**fields)


def _inside(x: float, y: float, viewport: dict[str, float] | None, what: str) -> None:
    if viewport is None:
        return
    w, h = viewport["width"], viewport["height"]
    if not (-EDGE_SLACK <= x <= w + EDGE_SLACK and -EDGE_SLACK <= y <= h + EDGE_SLACK):
        raise Invalid(
            f"{what} plus origin lands at ({x:g}, {y:g}), outside the page's {w:g}x{h:g} viewport. Send coordinates "
            "in the picture's own pixels together with that frame's origin, unchanged.",
            field="x" if what == "x, y" else "to",
        )


# Named keys: (code, windowsVirtualKeyCode, text the key produces).
KEYS: dict[str, tuple[str, int, str]] = {
    "Enter": ("Enter", 13, "\r"),
    "Tab": ("Tab", 9, ""),
    "Backspace": ("Backspace", 8, ""),
    "Delete": ("Delete", 46, ""),
    "Escape": ("Escape", 27, ""),
    "ArrowLeft": ("ArrowLeft", 37, ""),
    "ArrowUp": ("ArrowUp", 38, ""),
    "ArrowRight": ("ArrowRight", 39, ""),
    "ArrowDown": ("ArrowDown", 40, ""),
    "Home": ("Home", 36, ""),
    "End": ("End", 35, ""),
    "PageUp": ("PageUp", 33, ""),
    "PageDown": ("PageDown", 34, ""),
    "Space": ("Space", 32, " "),
    " ": ("Space", 32, " "),
}
MODIFIER_BITS = {"Alt": 1, "Control": 2, "Meta": 4, "Shift": 8}


def key_params(key: str, modifiers: tuple[str, ...]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The CDP Input.dispatchKeyEvent parameters for pressing and releasing `key` with `modifiers` held."""
    bits = sum(MODIFIER_BITS[m] for m in modifiers)
    if key in KEYS:
        code, vk, text = KEYS[key]
        name = "Space" if key == " " else key
        name = " " if name == "Space" else name
    else:  # one printable character
        ch = key
        upper = ch.upper()
        code = f"Key{upper}" if upper.isascii() and upper.isalpha() else (f"Digit{ch}" if ch.isdigit() else "")
        vk = ord(upper) if upper.isascii() and upper.isalnum() else 0
        text, name = ch, ch
    if bits & (MODIFIER_BITS["Control"] | MODIFIER_BITS["Meta"] | MODIFIER_BITS["Alt"]):
        text = ""  # a shortcut, not a character
    down: dict[str, Any] = {
        "type": "keyDown" if text else "rawKeyDown",
        "key": name,
        "code": code,
        "windowsVirtualKeyCode": vk,
        "nativeVirtualKeyCode": vk,
        "modifiers": bits,
    }
    if text:
        down |= {"text": text, "unmodifiedText": text}
    up = {
        "type": "keyUp",
        "key": name,
        "code": code,
        "windowsVirtualKeyCode": vk,
        "nativeVirtualKeyCode": vk,
        "modifiers": bits,
    }
    return down, up


def ease(t: float) -> float:
    """Smooth start and stop, the way a hand moves a slider."""
    return t * t * (3 - 2 * t)
