"""The playground's hand-off viewer end to end, in headless Chromium: the agent (scripted) opens a page with a
bot check and hands it over; the person works the picture in the playground with the real mouse and keyboard;
the viewer ends the hand-off by itself once the check is gone, and the turn carries on."""

from __future__ import annotations

from typing import Any

import pytest

from oberik.local.scripted_provider import Reply, ScriptedProvider
from tests.browser.conftest import Playground, chromium, playground  # noqa: F401  (fixtures)
from tests.handoff.conftest import call
from tests.handoff.pages import PageServer

pytestmark = pytest.mark.browser


def expect(locator: Any) -> Any:
    from playwright.sync_api import expect as playwright_expect

    return playwright_expect(locator)


def on_screen(pg: Playground, pool: Any, sid: str, selector: str) -> tuple[float, float]:
    """Where, in the playground's window, the agent page's `selector` is drawn (its centre)."""
    target = pool.submit(
        sid,
        lambda page: page.evaluate(
            f"(() => {{ const r = document.querySelector('{selector}').getBoundingClientRect();"
            " return {x: r.left + r.width / 2, y: r.top + r.height / 2}; })()"
        ),
        open_if_missing=False,
    )
    shown = pg.page.evaluate(
        """() => { const w = document.querySelector('.handoff-window').getBoundingClientRect();
                   const i = document.querySelector('.handoff-frame');
                   return {x: w.left, y: w.top, left: parseFloat(i.style.left), top: parseFloat(i.style.top),
                           scale: parseFloat(i.style.width) / 1280}; }"""
    )
    s = shown["scale"]
    return shown["x"] + shown["left"] + target["x"] * s, shown["y"] + shown["top"] + target["y"] * s


def session_of(pg: Playground) -> str:
    pg.page.wait_for_function("() => location.hash.includes('session=s_')")
    return str(pg.page.evaluate("() => new URLSearchParams(location.hash.slice(1)).get('session')"))


def test_a_bot_check_is_passed_in_the_playground_and_the_turn_carries_on(
    playground: Playground,  # noqa: F811
    provider: ScriptedProvider,
    pool: Any,
    pages: PageServer,
):
    # Given an agent that opens the order page, finds a bot check and hands the widget over
    provider.script(
        Reply(tool_calls=[call("browser_goto", "g1", url=pages.url("/widget"))]),
        Reply(tool_calls=[call("browser_handoff", "h1", reason="pass the captcha", selector="#captcha")]),
        Reply(text="Your order 1042 shipped on Monday and arrives on Thursday.", token_delay=0.01),
    )
    provider.script_when("You judge whether a person has finished", Reply("unsolved"))
    pg = playground.open()
    pg.send("Where is my order?")

    # Then the viewer shows the widget, live, cropped to what the agent named, with a Done button
    card = pg.page.locator(".handoff")
    expect(card).to_be_visible(timeout=30_000)
    expect(card).to_contain_text("pass the captcha")
    expect(card).to_have_attribute("data-live", "true", timeout=15_000)
    expect(card.locator(".handoff-region")).to_have_text("Showing the part of the page the agent picked.")
    expect(card.get_by_role("button", name="Done")).to_be_visible()
    sid = session_of(pg)
    small = pg.page.locator(".handoff-window").bounding_box()
    pg.shot("handoff-widget")

    # When the person clicks the tick box in the picture
    x, y = on_screen(pg, pool, sid, "#tick")
    pg.page.mouse.click(x, y)

    # Then the page got the click, the puzzle opened, and the view re-aimed to include it
    pool.submit(sid, lambda page: page.wait_for_function("window.__log.includes('opened')"), open_if_missing=False)
    pg.page.wait_for_function(
        "h => document.querySelector('.handoff-window').getBoundingClientRect().height > h + 100", arg=small["height"]
    )
    pg.shot("handoff-puzzle-open")

    # When the person presses Verify inside the puzzle
    x, y = on_screen(pg, pool, sid, "#verify")
    pg.page.mouse.click(x, y)

    # Then the viewer's own check sees the widget gone, closes the view and resumes the turn, which answers
    pg.wait_until_idle()
    expect(pg.page.locator(".handoff")).to_have_count(0)
    expect(pg.page.locator("#transcript .msg.assistant:not(.tool-row) .content").last).to_have_text(
        "Your order 1042 shipped on Monday and arrives on Thursday."
    )
    pg.shot("handoff-finished")
    assert pool.submit(sid, lambda page: page.evaluate("location.pathname"), open_if_missing=False) == "/order"
    assert pg.errors == []


def test_keys_typed_in_the_viewer_reach_the_page_as_typed(
    playground: Playground,  # noqa: F811
    provider: ScriptedProvider,
    pool: Any,
    pages: PageServer,
):
    provider.script(
        Reply(tool_calls=[call("browser_goto", "g1", url=pages.url("/typing"))]),
        Reply(tool_calls=[call("browser_handoff", "h1", reason="fill in the street address", auto_done=False)]),
        Reply(text="Thanks, I have the address.", token_delay=0.01),
    )
    pg = playground.open()
    pg.send("Fill in my address")
    card = pg.page.locator(".handoff")
    expect(card).to_have_attribute("data-live", "true", timeout=30_000)
    expect(card.locator(".handoff-region")).to_have_text("Showing the whole page.")
    sid = session_of(pg)
    expect(card.locator(".handoff-keys")).to_have_text("The page is not taking keys")

    # A reload finds the paused turn and shows the same hand-off again
    pg.page.reload()
    card = pg.page.locator(".handoff")
    expect(card).to_have_attribute("data-live", "true", timeout=30_000)

    # Pointing at the field focuses it; the viewer shows the page now holds the keyboard
    x, y = on_screen(pg, pool, sid, "#street")
    pg.page.mouse.click(x, y)
    expect(card.locator(".handoff-keys")).to_have_text("Keys go to the page")
    # Characters a non-US layout makes (ü, ß, ç; € behind AltGr) arrive as real key events with that key,
    # as Chromium reports them for such a keyboard; ASCII goes through Playwright's own keyboard
    cdp = pg.page.context.new_cdp_session(pg.page)

    def layout_key(ch: str, modifiers: int = 0) -> None:
        cdp.send("Input.dispatchKeyEvent", {"type": "keyDown", "key": ch, "text": ch, "modifiers": modifiers})
        cdp.send("Input.dispatchKeyEvent", {"type": "keyUp", "key": ch, "modifiers": modifiers})

    pg.page.keyboard.type("Gr")
    layout_key("ü")
    layout_key("ß")
    pg.page.keyboard.type("e, ")
    layout_key("ç")
    layout_key("€", modifiers=1 | 2)  # AltGr reports as Ctrl+Alt
    pool.submit(
        sid,
        lambda page: page.wait_for_function("document.getElementById('street').value === 'Grüße, ç€'"),
        open_if_missing=False,
    )
    pg.shot("handoff-typed")

    # Done, pressed right after a few more keys, resumes the turn once those keys have reached the page
    pg.page.keyboard.type("a")
    pg.page.keyboard.press("Backspace")
    pg.page.keyboard.type("!")
    card.get_by_role("button", name="Done").click()
    pg.wait_until_idle()
    expect(pg.page.locator("#transcript .msg.assistant:not(.tool-row) .content").last).to_have_text(
        "Thanks, I have the address."
    )
    street = pool.submit(sid, lambda page: page.input_value("#street"), open_if_missing=False)
    assert street == "Grüße, ç€!"
    assert pg.errors == []
