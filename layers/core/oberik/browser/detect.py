"""Recognising a bot check on a page, so the agent is told instead of concluding the site is broken.

One evaluation in the page looks for the widgets the common CAPTCHA services embed (their iframes by address,
their container elements by class or attribute) and for the wording of interstitial "checking your browser" pages.
What it finds comes back with the widget's box in viewport CSS pixels and the boxes of any puzzle overlays that
are currently visible (the part a person has to solve, which appears after the checkbox is clicked), so a viewer
can aim at them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from playwright.async_api import Page

# Runs in the page. Returns null or {kind, reason, selector, box, overlays}.
_DETECT_JS = r"""
() => {
  const visible = (el) => {
    if (!el || !el.getBoundingClientRect) return null;
    const r = el.getBoundingClientRect();
    if (r.width < 2 || r.height < 2) return null;
    const st = getComputedStyle(el);
    if (st.display === 'none' || st.visibility === 'hidden' || parseFloat(st.opacity || '1') === 0) return null;
    if (r.bottom < 0 || r.right < 0 || r.top > innerHeight || r.left > innerWidth) return null;
    return {x: Math.round(r.left), y: Math.round(r.top), width: Math.round(r.width), height: Math.round(r.height)};
  };
  const FRAMES = [
    ['recaptcha', /(google\.com|recaptcha\.net)\/recaptcha\/.*(anchor)/i, /(google\.com|recaptcha\.net)\/recaptcha\/.*bframe/i],
    ['hcaptcha', /hcaptcha\.com\/.*(checkbox|#frame=checkbox)/i, /hcaptcha\.com\/.*(challenge|#frame=challenge)/i],
    ['turnstile', /challenges\.cloudflare\.com\//i, null],
    ['arkose', /(arkoselabs\.com|funcaptcha\.com)\//i, /(arkoselabs\.com|funcaptcha\.com)\/.*(game|enforcement)/i],
    ['datadome', /captcha-delivery\.com\//i, null],
    ['geetest', /geetest\.com\//i, null],
  ];
  const CONTAINERS = [
    ['recaptcha', '.g-recaptcha, #recaptcha, [data-recaptcha]'],
    ['hcaptcha', '.h-captcha, [data-hcaptcha-widget-id]'],
    ['turnstile', '.cf-turnstile, #cf-turnstile, #challenge-stage, #challenge-form, #cf-challenge-running'],
    ['perimeterx', '#px-captcha'],
    ['geetest', '.geetest_holder, .geetest_panel'],
    ['captcha', '[data-sitekey], [data-captcha], .captcha, #captcha, [class*="captcha-widget"], [data-challenge]'],
  ];
  const WORDING = /(verify (that )?you are (a )?human|are you a robot|i'?m not a robot|checking (if the site connection is secure|your browser)|press (&|and) hold|complete the security check|prove you('| a)re (not a robot|human)|human verification|unusual traffic from your (computer )?network|one more step)/i;
  let found = null;
  const overlays = [];
  for (const f of document.querySelectorAll('iframe')) {
    const src = f.src || f.getAttribute('data-src') || '';
    for (const [kind, widget, puzzle] of FRAMES) {
      if (puzzle && puzzle.test(src)) { const b = visible(f); if (b) overlays.push(b); continue; }
      if (widget.test(src) && !found) {
        const b = visible(f);
        found = {kind, reason: `a ${kind} frame`, selector: f.id ? '#' + CSS.escape(f.id) : `iframe[src*="${new URL(src, location.href).hostname}"]`, box: b};
      }
    }
    const title = (f.title || '').toLowerCase();
    if (/challenge|captcha/.test(title) && !/widget|checkbox/.test(title)) { const b = visible(f); if (b && b.width > 150 && b.height > 150) overlays.push(b); }
  }
  for (const el of document.querySelectorAll('[data-challenge-overlay], .captcha-overlay, [role="dialog"][aria-label*="challenge" i]')) {
    const b = visible(el); if (b) overlays.push(b);
  }
  if (!found) {
    for (const [kind, sel] of CONTAINERS) {
      const el = document.querySelector(sel);
      if (el) {
        const b = visible(el);
        found = {kind, reason: `a ${kind} widget`, selector: el.id ? '#' + CSS.escape(el.id) : sel.split(',')[0].trim(), box: b};
        break;
      }
    }
  }
  if (!found) {
    const text = ((document.title || '') + '\n' + (document.body ? document.body.innerText : '')).slice(0, 20000);
    const m = text.match(WORDING);
    if (m && text.length < 6000) found = {kind: 'interstitial', reason: `the page says "${m[0]}"`, selector: null, box: null};
  }
  if (!found && !overlays.length) return null;
  if (!found) found = {kind: 'captcha', reason: 'a challenge overlay', selector: null, box: null};
  found.overlays = overlays;
  return found;
}
"""


async def detect_challenge(page: Page) -> dict[str, Any] | None:
    """What bot check is on the page, or None.

    The answer: `kind` (recaptcha | hcaptcha | turnstile | arkose | datadome | geetest | perimeterx | captcha |
    interstitial), `reason` (what gave it away), `selector` (a CSS selector for the widget, when it has one),
    `box` (the widget's visible box {x, y, width, height} in viewport CSS pixels, or None when it is not on
    screen) and `overlays` (boxes of visible puzzle overlays). Never raises: a page mid-navigation answers None.
    """
    try:
        found = await page.evaluate(_DETECT_JS)
    except Exception:
        return None
    return found if isinstance(found, dict) else None


def union_box(*boxes: dict[str, Any] | None) -> dict[str, int] | None:
    """The smallest box holding every given box (None ones skipped); None when there are none."""
    real = [b for b in boxes if b]
    if not real:
        return None
    x0 = min(b["x"] for b in real)
    y0 = min(b["y"] for b in real)
    x1 = max(b["x"] + b["width"] for b in real)
    y1 = max(b["y"] + b["height"] for b in real)
    return {"x": x0, "y": y0, "width": x1 - x0, "height": y1 - y0}


BOT_CHECK_ADVICE = (
    "This page is a bot check ({reason}); hand it to the user (browser_handoff) rather than trying to pass it "
    "yourself, and do not conclude the site is broken. With nobody to hand it to, say the page is gated and stop."
)
