"""The page operations behind the browser tools, shared by every adapter.

`perform(page, state, op, args)` runs one operation on a Playwright page and answers with a JSON-able dict. The
local pool runs it in this process; the browser Lambda runs the very same function on the commands it reads from
its mailbox, so an answer never depends on where the page lives.

Numbering: each observation marks what can be clicked or typed into with a `data-oberik-n` attribute and lists
those elements with their numbers. Marks from an earlier observation are removed first, so after any action the
numbers the agent holds are exactly the ones it was last shown; a number that is no longer on the page (the page
changed on its own, or the agent reused an old one) is refused with a sentence rather than silently missed.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from oberik.browser import guard
from oberik.browser.detect import BOT_CHECK_ADVICE, detect_challenge

if TYPE_CHECKING:
    from playwright.async_api import Locator, Page

TEXT_LIMIT = 8000
HTML_LIMIT = 20000
MAX_ELEMENTS = 150
ACTION_TIMEOUT_MS = 5000
MAX_WAIT_SECONDS = 60
MIN_VIEWPORT, MAX_VIEWPORT = 200, 4000


class ActionError(Exception):
    """Something the agent asked for that cannot be done; the message is a sentence for it."""


# Marks and lists interactive elements in reading order. Hidden inputs, invisible and zero-sized elements are
# skipped: the agent can only act on what a person could.
_NUMBER_JS = r"""
([limit]) => {
  for (const el of document.querySelectorAll('[data-oberik-n]')) el.removeAttribute('data-oberik-n');
  const SEL = 'a[href], button, input, textarea, select, summary, [role=button], [role=link], [role=checkbox], ' +
    '[role=radio], [role=tab], [role=menuitem], [role=option], [role=switch], [role=textbox], [role=combobox], ' +
    '[role=searchbox], [contenteditable=""], [contenteditable=true], [onclick], [tabindex]:not([tabindex="-1"])';
  const shown = (el) => {
    if (el.matches('input[type=hidden]')) return false;
    const r = el.getBoundingClientRect();
    if (r.width < 1 || r.height < 1) return false;
    const st = getComputedStyle(el);
    if (st.visibility === 'hidden' || st.display === 'none' || parseFloat(st.opacity || '1') === 0) return false;
    if (el.closest('[aria-hidden=true], [hidden], [inert]')) return false;
    return true;
  };
  const clean = (s) => (s || '').replace(/\s+/g, ' ').trim().slice(0, 80);
  const labelOf = (el) => {
    const aria = el.getAttribute('aria-label');
    if (aria) return clean(aria);
    const by = el.getAttribute('aria-labelledby');
    if (by) { const t = by.split(/\s+/).map(id => document.getElementById(id)).filter(Boolean).map(e => e.innerText).join(' '); if (clean(t)) return clean(t); }
    if (el.labels && el.labels.length) { const t = clean(el.labels[0].innerText); if (t) return t; }
    if (el.matches('input[type=submit], input[type=button], input[type=reset]')) return clean(el.value);
    const text = clean(el.innerText || el.textContent);
    if (text && !el.matches('select, textarea, input')) return text;
    return clean(el.getAttribute('placeholder') || el.getAttribute('title') || el.getAttribute('alt') ||
      (el.querySelector('img[alt]') || {}).alt || el.getAttribute('name') || '');
  };
  const roleOf = (el) => {
    const role = el.getAttribute('role');
    if (role) return role;
    const tag = el.tagName.toLowerCase();
    if (tag === 'a') return 'link';
    if (tag === 'select') return 'select';
    if (tag === 'textarea') return 'textbox';
    if (tag === 'input') {
      const t = (el.type || 'text').toLowerCase();
      if (['submit', 'button', 'reset', 'image'].includes(t)) return 'button';
      if (['checkbox', 'radio', 'range', 'file', 'color'].includes(t)) return t;
      return 'textbox';
    }
    if (el.isContentEditable) return 'textbox';
    return tag === 'button' || tag === 'summary' ? 'button' : 'clickable';
  };
  const out = [];
  let n = 0, skipped = 0;
  for (const el of document.querySelectorAll(SEL)) {
    if (!shown(el)) continue;
    if (el.parentElement && el.parentElement.closest('[data-oberik-n]') && !el.matches('input, textarea, select')) continue;
    if (n >= limit) { skipped++; continue; }
    n++;
    el.setAttribute('data-oberik-n', String(n));
    const role = roleOf(el);
    const item = {n, role, label: labelOf(el)};
    const tag = el.tagName.toLowerCase();
    if (tag === 'input' || tag === 'textarea' || tag === 'select') {
      if (el.name) item.name = el.name;
      if (tag === 'input' && el.type && el.type !== 'text') item.type = el.type;
      if (el.type === 'checkbox' || el.type === 'radio') item.checked = el.checked;
      else if (el.type === 'password') item.value = el.value ? '(filled)' : '';
      else if (tag === 'select') item.value = clean(el.selectedOptions[0] ? el.selectedOptions[0].innerText : '');
      else item.value = clean(el.value);
    }
    if (tag === 'a') item.href = el.getAttribute('href');
    if (el.disabled) item.disabled = true;
    out.push(item);
  }
  return {elements: out, skipped};
}
"""

_TEXT_JS = r"""
() => {
  const body = document.body;
  const text = body ? body.innerText : (document.documentElement ? document.documentElement.innerText : '');
  return {
    text: (text || '').replace(/[ \t]+\n/g, '\n').replace(/\n{3,}/g, '\n\n').trim(),
    scroll: {y: Math.round(scrollY), height: Math.round(document.documentElement ? document.documentElement.scrollHeight : 0),
             viewport_height: innerHeight, viewport_width: innerWidth},
  };
}
"""


def describe(item: dict[str, Any]) -> str:
    """One line of the numbered list as the agent reads it: `[3] textbox "Email" name=email value=""`."""
    parts = [f"[{item['n']}] {item['role']}"]
    if item.get("label"):
        parts.append(f'"{item["label"]}"')
    for key in ("type", "name"):
        if item.get(key):
            parts.append(f"{key}={item[key]}")
    if "checked" in item:
        parts.append("checked" if item["checked"] else "unchecked")
    if "value" in item:
        parts.append(f'value="{item["value"]}"')
    if item.get("href"):
        parts.append(f"-> {item['href'][:120]}")
    if item.get("disabled"):
        parts.append("(disabled)")
    return " ".join(parts)


async def _settle(page: Page, timeout_ms: int = 3000) -> None:
    """Give a page that started navigating a moment to arrive; never fails."""
    with contextlib.suppress(Exception):
        await page.wait_for_load_state("domcontentloaded", timeout=timeout_ms)
    with contextlib.suppress(Exception):
        await page.wait_for_load_state("load", timeout=min(timeout_ms, 1500))


async def observe(page: Page, state: dict[str, Any]) -> dict[str, Any]:
    """What the agent sees: address, title, text, the renumbered list and any bot check."""
    allow_private = bool(state.get("allow_private"))
    url = page.url
    if url.startswith(("http://", "https://")):
        why = await asyncio.get_running_loop().run_in_executor(
            None, lambda: guard.url_refusal(url.split("#", 1)[0], allow_private=allow_private)
        )
        if why:  # a redirect or script took the page somewhere it may not be: show nothing of it
            await page.goto("about:blank")
            raise ActionError(f"the page went to an address the browser may not visit, so it was cleared: {why}")
    last: Exception | None = None
    for _ in range(3):  # a page navigating under us destroys the evaluation context; look again
        try:
            listing = await page.evaluate(_NUMBER_JS, [MAX_ELEMENTS])
            body = await page.evaluate(_TEXT_JS)
            break
        except Exception as e:
            last = e
            await _settle(page)
    else:
        raise ActionError(f"the page could not be read while it was changing ({type(last).__name__}); try again")
    text: str = body["text"]
    state["numbered"] = len(listing["elements"])
    obs: dict[str, Any] = {
        "url": page.url,
        "title": await _title(page),
        "text": text[:TEXT_LIMIT],
        "elements": [describe(i) for i in listing["elements"]],
        "scroll": body["scroll"],
    }
    if len(text) > TEXT_LIMIT:
        obs["text_truncated"] = (
            f"{len(text) - TEXT_LIMIT} more characters of text are not shown; use browser_html on a part of the page"
        )
    if listing["skipped"]:
        obs["elements_truncated"] = f"{listing['skipped']} more elements are not numbered; act on them by selector"
    bot = await detect_challenge(page)
    obs["bot_check"] = bot
    if bot:
        obs["advice"] = BOT_CHECK_ADVICE.format(reason=bot["reason"])
    return obs


async def _title(page: Page) -> str:
    try:
        return await page.title()
    except Exception:
        return ""


def _target(page: Page, state: dict[str, Any], args: dict[str, Any], verb: str) -> Locator:
    """The element a call names, by number (`n`) or CSS `selector`."""
    n, selector = args.get("n"), args.get("selector")
    if n is None and not selector:
        raise ActionError(f"{verb} needs n (a number from the list) or selector (CSS).")
    if n is not None:
        if isinstance(n, str) and n.strip().isdigit():
            n = int(n)
        if isinstance(n, bool) or not isinstance(n, int):
            raise ActionError(f"n must be a whole number from the last list, not {n!r}.")
        return page.locator(f'[data-oberik-n="{n}"]')
    if not isinstance(selector, str):
        raise ActionError("selector must be a CSS selector as text.")
    return page.locator(selector)


async def _one(page: Page, state: dict[str, Any], args: dict[str, Any], verb: str) -> Locator:
    loc = _target(page, state, args, verb)
    count = await loc.count()
    if count == 0:
        if args.get("n") is not None:
            shown = state.get("numbered", 0)
            raise ActionError(
                f"there is no element number {args['n']} on the page now"
                + (f" (the last list went from 1 to {shown})" if shown else " (nothing was numbered)")
                + "; the page may have changed. Use the numbers from the list in this answer, or a selector."
            )
        raise ActionError(f"the selector {args['selector']!r} matches nothing on the page; read it with browser_html.")
    return loc.first


async def _act(page: Page, fn: Any) -> None:
    try:
        await fn()
    except ActionError:
        raise
    except Exception as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ActionError(f"the action did not complete: {first[:300]}") from e
    await _settle(page)


def _int(args: dict[str, Any], key: str, default: int | None = None) -> int | None:
    v = args.get(key, default)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise ActionError(f"{key} must be a number.")
    return int(v)


async def _viewport(page: Page, args: dict[str, Any]) -> None:
    width, height = _int(args, "width"), _int(args, "height")
    if width is None and height is None:
        return
    current = page.viewport_size or {"width": 1280, "height": 800}
    width, height = width or current["width"], height or current["height"]
    for name, v in (("width", width), ("height", height)):
        if not MIN_VIEWPORT <= v <= MAX_VIEWPORT:
            raise ActionError(f"{name} must be between {MIN_VIEWPORT} and {MAX_VIEWPORT} pixels, not {v}.")
    await page.set_viewport_size({"width": width, "height": height})


async def perform(page: Page, state: dict[str, Any], op: str, args: dict[str, Any]) -> dict[str, Any]:
    """Run one operation; failures the agent should read come back as {"error": sentence, ...observation}."""
    try:
        return await _perform(page, state, op, args)
    except ActionError as e:
        out: dict[str, Any] = {"error": str(e)}
        if op not in ("goto", "state"):
            with contextlib.suppress(Exception):  # the fresh list comes with the error, so the agent can pick again
                out.update(await observe(page, state))
        return out


async def _perform(page: Page, state: dict[str, Any], op: str, args: dict[str, Any]) -> dict[str, Any]:
    if op == "goto":
        url = args.get("url")
        if not isinstance(url, str):
            raise ActionError("url must be an http or https address.")
        allow_private = bool(state.get("allow_private"))
        why = await asyncio.get_running_loop().run_in_executor(
            None, lambda: guard.url_refusal(url, allow_private=allow_private)
        )
        if why:
            raise ActionError(why)
        await _viewport(page, args)
        refused = guard.blocked(page.context)
        refused.clear()
        proxy_log: list[str] = state.get("proxy_refused", [])  # what the egress proxy refused (whole browser)
        seen = len(proxy_log)
        try:
            response = await page.goto(url, wait_until="domcontentloaded", timeout=30000)
        except Exception as e:
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            refused.extend(proxy_log[seen:])
            if refused or "ERR_BLOCKED_BY_CLIENT" in first:
                why = f": {refused[0]}" if refused else "."
                raise ActionError(f"{url} led somewhere the browser may not visit, so it was stopped{why}") from e
            raise ActionError(f"could not open {url}: {first[:300]}") from e
        await _settle(page)
        obs = await observe(page, state)
        if response is not None:
            obs["status"] = response.status
        return obs
    if op == "read":
        return await observe(page, state)
    if op == "html":
        selector = args.get("selector")
        if not isinstance(selector, str) and args.get("n") is None:
            raise ActionError("browser_html needs selector (CSS), e.g. 'form' or '#order-42'.")
        loc = _target(page, state, args, "browser_html")
        count = await loc.count()
        if count == 0:
            await _one(page, state, args, "browser_html")  # raises the right sentence
        parts = [await loc.nth(i).evaluate("e => e.outerHTML") for i in range(min(count, 20))]
        html = "\n".join(p.replace(' data-oberik-n="', ' data-n="') for p in parts)
        out: dict[str, Any] = {"url": page.url, "matches": count, "html": html[:HTML_LIMIT]}
        if len(html) > HTML_LIMIT:
            out["html_truncated"] = f"{len(html) - HTML_LIMIT} more characters; use a narrower selector"
        return out
    if op == "viewport":
        if args.get("width") is None and args.get("height") is None:
            raise ActionError("browser_viewport needs width and/or height in pixels, e.g. 390 x 844 for a phone.")
        await _viewport(page, args)
        await _settle(page, 1000)
        return await observe(page, state)
    if op == "click":
        el = await _one(page, state, args, "browser_click")
        await _act(page, lambda: el.click(timeout=ACTION_TIMEOUT_MS))
        return await observe(page, state)
    if op == "type":
        text = args.get("text")
        if not isinstance(text, str):
            raise ActionError("browser_type needs text.")
        el = await _one(page, state, args, "browser_type")
        tag = await el.evaluate("e => e.tagName.toLowerCase()")
        typed: str = text

        async def fill() -> None:
            if tag == "select":
                try:
                    await el.select_option(label=typed, timeout=ACTION_TIMEOUT_MS)
                except Exception:
                    await el.select_option(value=typed, timeout=ACTION_TIMEOUT_MS)
            else:
                await el.fill(typed, timeout=ACTION_TIMEOUT_MS)
            if args.get("submit"):
                await el.press("Enter", timeout=ACTION_TIMEOUT_MS)

        await _act(page, fill)
        return await observe(page, state)
    if op == "scroll":
        to = args.get("to", args.get("direction", "down"))
        if args.get("n") is not None or args.get("selector"):
            el = await _one(page, state, args, "browser_scroll")
            await _act(page, lambda: el.scroll_into_view_if_needed(timeout=ACTION_TIMEOUT_MS))
        elif to in ("down", "up"):
            sign = 1 if to == "down" else -1
            await page.evaluate(f"() => window.scrollBy(0, {sign} * Math.round(innerHeight * 0.9))")
        elif to in ("top", "bottom"):
            await page.evaluate(
                "() => window.scrollTo(0, 0)" if to == "top" else "() => window.scrollTo(0, document.body.scrollHeight)"
            )
        else:
            raise ActionError("browser_scroll takes to: down, up, top or bottom, or n / selector to bring into view.")
        await asyncio.sleep(0.15)  # let lazy content react to the scroll event before looking
        return await observe(page, state)
    if op == "wait":
        text, selector = args.get("text"), args.get("selector")
        seconds = args.get("timeout", 10)
        if isinstance(seconds, bool) or not isinstance(seconds, int | float) or seconds <= 0:
            raise ActionError("timeout must be a number of seconds.")
        seconds = min(float(seconds), MAX_WAIT_SECONDS)
        if isinstance(selector, str) and selector:
            loc = page.locator(selector).first
            what = f"the selector {selector!r}"
        elif isinstance(text, str) and text:
            loc = page.get_by_text(text).first
            what = f"the text {text!r}"
        else:
            raise ActionError("browser_wait needs text or selector to wait for.")
        try:
            await loc.wait_for(state="visible", timeout=seconds * 1000)
        except Exception:
            obs = await observe(page, state)
            return {"found": False, "error": f"{what} did not appear within {seconds:g} seconds.", **obs}
        obs = await observe(page, state)
        return {"found": True, **obs}
    if op == "screenshot":
        full = bool(args.get("full_page"))
        fmt = "jpeg" if args.get("format") == "jpeg" else "png"
        if fmt == "jpeg":
            png = await page.screenshot(full_page=full, type="jpeg", quality=70, timeout=15000)
        else:
            png = await page.screenshot(full_page=full, type="png", timeout=15000)
        obs = await observe(page, state)
        size: dict[str, Any] = dict(page.viewport_size or {})
        return {
            **obs,
            "image_b64": base64.b64encode(png).decode(),
            "image": {"type": f"image/{fmt}", "bytes": len(png), "width": size.get("width"), "full_page": full},
        }
    if op == "state":  # what a Lambda host hands its successor: the address and the cookies/storage
        return {"url": page.url, "storage_state": await page.context.storage_state()}
    extra = EXTRA_OPS.get(op)
    if extra is not None:
        return await extra(page, state, args)
    raise ActionError(f"unknown browser operation {op!r}")


# Operations other modules add (e.g. the hand-off's frame and input relay), so that they run wherever the page
# lives: in the local pool and in the browser Lambda's command loop alike. Answers must be JSON-able dicts.
EXTRA_OPS: dict[str, Callable[[Page, dict[str, Any], dict[str, Any]], Awaitable[dict[str, Any]]]] = {}


def register_op(name: str, fn: Callable[[Page, dict[str, Any], dict[str, Any]], Awaitable[dict[str, Any]]]) -> None:
    """Make `fn(page, state, args)` available as operation `name` on every Browser adapter."""
    EXTRA_OPS[name] = fn
