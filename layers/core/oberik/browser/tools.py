"""The browser tool family: a page per conversation that the agent drives across tool calls, and screenshot_url.

Each call becomes one operation on the Browser port (`oberik.browser.port`); which adapter runs it is a setting
(`browser_backend`). The family is offered whole (the gate and tool narrowing never hand out half of it).
Pages the agent reads are added to the turn's citations as `web` sources: what a reader checks is the address,
however the agent got there.
"""

from __future__ import annotations

import json
from typing import Any

from oberik.browser.detect import BOT_CHECK_ADVICE
from oberik.browser.port import Browser, BrowserUnreachable
from oberik.domain.tools import ToolSpec
from oberik.engine.tools import ToolOutcome

NAME = "browser"
QUOTE_CHARS = 300

_TARGET = {
    "n": {"type": "integer", "description": "The element's number from the latest list."},
    "selector": {"type": "string", "description": "A CSS selector, instead of a number."},
}


def _spec(name: str, description: str, properties: dict[str, Any], required: list[str] | None = None) -> ToolSpec:
    params: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        params["required"] = required
    return ToolSpec(
        name=name,
        family="browser",
        capability="browser",
        description=description,
        parameters=params,
        family_owner=NAME,
    )


SPECS: tuple[ToolSpec, ...] = (
    _spec(
        "browser_goto",
        "Open an http(s) address in this conversation's browser page (it stays open across calls). Answers with "
        "the page text and a numbered list of what can be clicked or typed into. Optionally set the window size "
        "(e.g. width 390, height 844 for a phone).",
        {
            "url": {"type": "string", "description": "An absolute http or https address."},
            "width": {"type": "integer", "description": "Window width in pixels."},
            "height": {"type": "integer", "description": "Window height in pixels."},
        },
        ["url"],
    ),
    _spec("browser_read", "Read the current page again: its text and the numbered list of controls.", {}),
    _spec(
        "browser_html",
        "The raw markup of the elements a CSS selector matches: attributes, data- values and hidden fields the "
        "text does not show.",
        {"selector": {"type": "string", "description": "A CSS selector, e.g. 'form' or '#order-42'."}},
        ["selector"],
    ),
    _spec(
        "browser_viewport",
        "Set the window size, e.g. 390 x 844 to see a phone layout.",
        {"width": {"type": "integer"}, "height": {"type": "integer"}},
    ),
    _spec("browser_click", "Click an element, by its number from the latest list or by CSS selector.", dict(_TARGET)),
    _spec(
        "browser_type",
        "Type text into a field (replacing what is there), by number or selector; a select takes the option's "
        "label. submit: press Enter afterwards.",
        {**_TARGET, "text": {"type": "string"}, "submit": {"type": "boolean"}},
        ["text"],
    ),
    _spec(
        "browser_scroll",
        "Scroll the page: to = down | up | top | bottom, or bring an element (n or selector) into view.",
        {**_TARGET, "to": {"type": "string", "enum": ["down", "up", "top", "bottom"]}},
    ),
    _spec(
        "browser_wait",
        "Wait until a text or a selector is visible on the page (returns as soon as it is), up to timeout seconds.",
        {
            "text": {"type": "string"},
            "selector": {"type": "string"},
            "timeout": {"type": "number", "description": "Seconds, at most 60; default 10."},
        },
    ),
    _spec(
        "browser_screenshot",
        "Take a picture of the current window (full_page: the whole page). Sending it to the user is a separate step.",
        {"full_page": {"type": "boolean"}},
    ),
    _spec("browser_close", "Close this conversation's browser page when you are done with it.", {}),
)

SCREENSHOT_URL = ToolSpec(
    name="screenshot_url",
    family="capture",
    capability="web_search",  # it fetches a URL of the model's choosing; output:<kind> is also required
    description="Capture a picture of a web page (http or https) and read its text, in one step.",
    parameters={
        "type": "object",
        "properties": {
            "url": {"type": "string"},
            "width": {"type": "integer"},
            "height": {"type": "integer"},
            "full_page": {"type": "boolean"},
        },
        "required": ["url"],
    },
    family_owner=NAME,
)

_OPS = {
    "browser_goto": "goto",
    "browser_read": "read",
    "browser_html": "html",
    "browser_viewport": "viewport",
    "browser_click": "click",
    "browser_type": "type",
    "browser_scroll": "scroll",
    "browser_wait": "wait",
    "browser_screenshot": "screenshot",
}


def browser() -> Browser:
    """The Browser adapter this deployment uses."""
    from oberik.settings import get_settings

    if get_settings().browser_backend == "lambda":
        from oberik.browser.remote import default_mailbox

        return default_mailbox()
    from oberik.browser.local import LocalBrowser

    return LocalBrowser()


def _args_for(name: str, args: dict[str, Any]) -> dict[str, Any]:
    keep = {"n", "selector", "url", "width", "height", "text", "submit", "to", "timeout", "full_page"}
    return {k: v for k, v in args.items() if k in keep and v is not None}


def _timeout(name: str, args: dict[str, Any]) -> float:
    if name == "browser_wait":
        t = args.get("timeout", 10)
        return min(float(t), 60.0) + 20 if isinstance(t, int | float) and not isinstance(t, bool) else 30
    return 45.0


def render(answer: dict[str, Any], ctx: Any) -> ToolOutcome:
    """The tool message the model reads, with the page cited and any image left out of the text."""
    out = dict(answer)
    image = out.pop("image_b64", None)
    if image is not None:
        out["image"] = {**out.get("image", {}), "note": "the picture was taken; sending it is a separate step"}
    url = out.get("url") or ""
    if url.startswith(("http://", "https://")) and "text" in out and not out.get("error"):
        marker = ctx.cite(
            {"kind": "web", "url": url, "title": out.get("title") or url, "quote": (out["text"] or "")[:QUOTE_CHARS]}
        )
        out = {"source": f"[{marker}]", **out}
    if out.get("bot_check") and ctx.turn.plan.unattended:
        out["advice"] = (
            f"This page is a bot check ({out['bot_check']['reason']}) and nobody is here to pass it: say the page "
            "is gated and stop; do not try to pass it yourself."
        )
    elif out.get("bot_check") and not out.get("advice"):
        out["advice"] = BOT_CHECK_ADVICE.format(reason=out["bot_check"]["reason"])
    return ToolOutcome(json.dumps(out, ensure_ascii=False), ok=not out.get("error"))


class BrowserFamily:
    name = NAME

    def specs(self, project: Any, store: Any) -> tuple[ToolSpec, ...]:
        return (*SPECS, SCREENSHOT_URL)

    def run(self, ctx: Any) -> ToolOutcome:
        name = ctx.call.name
        session_id = ctx.turn.session_id
        port = browser()
        try:
            if name == "browser_close":
                closed = port.close(session_id)
                return ToolOutcome(json.dumps({"closed": closed} | ({} if closed else {"note": "no page was open"})))
            if name == "screenshot_url":
                return self._screenshot_url(ctx, port)
            op = _OPS.get(name)
            if op is None:
                return ToolOutcome(json.dumps({"error": f"{name} is not a browser tool"}), ok=False)
            answer = port.run(session_id, op, _args_for(name, ctx.args), timeout=_timeout(name, ctx.args))
        except BrowserUnreachable as e:
            return ToolOutcome(json.dumps({"error": f"the browser is not available: {e}"}), ok=False)
        return render(answer, ctx)

    def _screenshot_url(self, ctx: Any, port: Browser) -> ToolOutcome:
        # A throwaway page of its own: the conversation's browser page (if any) is left as it was.
        scratch = f"{ctx.turn.session_id}#capture#{ctx.call.id}"
        try:
            answer = port.run(scratch, "goto", _args_for("browser_goto", ctx.args), timeout=45)
            if not answer.get("error"):
                shot = port.run(scratch, "screenshot", {"full_page": bool(ctx.args.get("full_page"))}, timeout=30)
                answer = {**answer, **{k: v for k, v in shot.items() if k in ("image_b64", "image", "error")}}
        finally:
            port.close(scratch)
        answer.pop("elements", None)  # nothing to click: this page is already closed
        return render(answer, ctx)


FAMILY = BrowserFamily()
