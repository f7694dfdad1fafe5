"""Each browser tool against real Chromium and pages served on loopback."""

from __future__ import annotations

import base64
import json

from oberik.browser.local import LocalBrowser, LocalBrowserPool
from tests.browser_tools.conftest import Agent, Site, number_of


def test_goto_answers_with_the_text_and_a_numbered_list_without_hidden_inputs(agent: Agent, site: Site):
    a = agent("browser_goto", url=site.url("/form"))
    assert a["status"] == 200 and a["title"] == "Sign in"
    assert "Sign in to Acme" in a["text"]
    assert a["elements"][0].startswith('[1] textbox "Email"') and "name=email" in a["elements"][0]
    assert any('"Password"' in e and "type=password" in e for e in a["elements"])
    assert any(e.startswith("[") and "select" in e and 'value="Free"' in e for e in a["elements"])
    assert not any("csrf" in e for e in a["elements"])  # a hidden input is not something a person can act on
    assert len(a["elements"]) == 4
    assert a["bot_check"] is None


def test_the_page_is_cited_as_web(agent: Agent, site: Site):
    a = agent("browser_goto", url=site.url("/links"))
    assert a["source"] == "[1]"
    [entry] = agent.turn.citations
    assert entry["kind"] == "web" and entry["url"] == site.url("/links") and entry["title"] == "Articles"
    assert "First article" in entry["quote"]
    assert agent("browser_read")["source"] == "[1]"  # the same page seen again keeps its number


def test_hidden_and_zero_size_links_are_not_numbered(agent: Agent, site: Site):
    a = agent("browser_goto", url=site.url("/links"))
    assert [e.split('"')[1] for e in a["elements"]] == ["First article", "Second article", "Third article"]
    assert "-> /article/2" in a["elements"][1]


def test_type_by_number_and_selector_then_submit(agent: Agent, site: Site):
    a = agent("browser_goto", url=site.url("/form"))
    a = agent("browser_type", n=number_of(a, "Email"), text="ana@example.com")
    assert 'value="ana@example.com"' in a["elements"][0]
    a = agent("browser_type", selector="#pw", text="hunter2")
    assert any('"Password"' in e and 'value="(filled)"' in e for e in a["elements"])  # never echoed
    a = agent("browser_type", selector="#plan", text="Pro")
    a = agent("browser_type", selector="#pw", text="hunter2", submit=True)
    assert a["title"] == "Welcome"
    assert "Welcome ana@example.com" in a["text"] and "Plan: pro" in a["text"]


def test_click_renumbers_and_the_list_follows_the_page(agent: Agent, site: Site):
    a = agent("browser_goto", url=site.url("/button"))
    assert a["elements"] == ['[1] button "Add one"', '[2] link "All links" -> /links']
    a = agent("browser_click", n=1)
    assert "1 clicks" in a["text"]
    # The new link sits before the button in the page, so everything after it moved down one.
    assert a["elements"] == [
        '[1] link "Inserted link" -> /links',
        '[2] button "Add one"',
        '[3] link "All links" -> /links',
    ]
    a = agent("browser_click", n=2)
    assert "2 clicks" in a["text"]
    a = agent("browser_click", selector="text=All links")
    assert a["title"] == "Articles"


def test_a_number_that_is_no_longer_on_the_page_is_an_error_with_the_fresh_list(
    agent: Agent, site: Site, pool: LocalBrowserPool
):
    a = agent("browser_goto", url=site.url("/button"))
    assert number_of(a, "All links") == 2

    async def rebuild(page):  # the page changes on its own, without any action of the agent's
        await page.evaluate("document.body.innerHTML = '<p>Rebuilt</p><button>Only one</button>'")

    pool.submit(agent.turn.session_id, rebuild)
    out = agent.outcome("browser_click", n=2)
    assert not out.ok
    a = json.loads(out.content)
    assert "no element number 2" in a["error"]
    assert a["elements"] == ['[1] button "Only one"']  # the list that is true now comes with the error
    a = agent("browser_click", n=7)
    assert "no element number 7" in a["error"] and "1 to 1" in a["error"]


def test_a_selector_that_matches_nothing_says_so(agent: Agent, site: Site):
    agent("browser_goto", url=site.url("/form"))
    a = agent("browser_click", selector="#nope")
    assert "matches nothing" in a["error"]


def test_html_shows_attributes_and_hidden_fields(agent: Agent, site: Site):
    agent("browser_goto", url=site.url("/form"))
    a = agent("browser_html", selector="form")
    assert a["matches"] == 1
    assert 'name="csrf" value="tok-123"' in a["html"]
    assert "data-oberik-n" not in a["html"]
    assert "matches nothing" in agent("browser_html", selector=".missing")["error"]


def test_viewport_and_goto_sizes(agent: Agent, site: Site, pool: LocalBrowserPool):
    a = agent("browser_goto", url=site.url("/links"), width=390, height=844)
    assert a["scroll"]["viewport_width"] == 390 and a["scroll"]["viewport_height"] == 844
    a = agent("browser_viewport", width=1024, height=700)
    assert a["scroll"]["viewport_width"] == 1024
    assert "between" in agent("browser_viewport", width=5)["error"]


def test_scroll_moves_the_window(agent: Agent, site: Site):
    a = agent("browser_goto", url=site.url("/long"))
    assert a["scroll"]["y"] == 0
    down = agent("browser_scroll", to="down")
    assert down["scroll"]["y"] > 0
    bottom = agent("browser_scroll", to="bottom")
    assert bottom["scroll"]["y"] + bottom["scroll"]["viewport_height"] >= bottom["scroll"]["height"] - 2
    assert agent("browser_scroll", to="top")["scroll"]["y"] == 0
    into = agent("browser_scroll", selector="#end")
    assert into["scroll"]["y"] > 0
    assert "down, up, top or bottom" in agent("browser_scroll", to="sideways")["error"]


def test_wait_returns_when_the_text_appears_and_says_when_it_did_not(agent: Agent, site: Site):
    a = agent("browser_goto", url=site.url("/late"))
    assert "Loading your orders" in a["text"]
    a = agent("browser_wait", text="Your orders are ready", timeout=10)
    assert a["found"] is True and "Your orders are ready" in a["text"]
    assert any('"Open order"' in e for e in a["elements"])
    assert agent("browser_wait", selector="#late-btn", timeout=5)["found"] is True
    a = agent("browser_wait", text="Never shown", timeout=0.3)
    assert a["found"] is False and "did not appear within 0.3 seconds" in a["error"]


def test_screenshot_takes_a_png_and_keeps_it_out_of_the_text(agent: Agent, site: Site, pool: LocalBrowserPool):
    agent("browser_goto", url=site.url("/links"))
    out = agent.outcome("browser_screenshot")
    assert out.ok and "image_b64" not in out.content
    a = json.loads(out.content)
    assert a["image"]["type"] == "image/png" and a["image"]["bytes"] > 1000
    raw = LocalBrowser(pool).run(agent.turn.session_id, "screenshot", {})  # what the adapter hands the tool
    assert base64.b64decode(raw["image_b64"])[:8] == b"\x89PNG\r\n\x1a\n"


def test_close_closes_and_the_next_call_opens_blank_without_a_notice(agent: Agent, site: Site, pool):
    agent("browser_goto", url=site.url("/links"))
    assert pool.has_page(agent.turn.session_id)
    assert agent("browser_close") == {"closed": True}
    assert not pool.has_page(agent.turn.session_id)
    assert agent("browser_close")["closed"] is False
    a = agent("browser_read")
    assert a["url"] == "about:blank" and "notice" not in a  # closing on purpose is not news


def test_each_conversation_has_its_own_page(pool: LocalBrowserPool, site: Site):
    from tests.browser_tools.conftest import make_turn

    one, two = Agent(turn=make_turn("ses-a")), Agent(turn=make_turn("ses-b"))
    one("browser_goto", url=site.url("/form"))
    two("browser_goto", url=site.url("/links"))
    assert one("browser_read")["title"] == "Sign in"
    assert two("browser_read")["title"] == "Articles"
