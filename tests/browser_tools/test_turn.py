"""A real turn drives the browser: the scripted model calls browser_goto, browser_click and browser_read, and the
step runs them against Chromium through the tool family."""

from __future__ import annotations

import json

from oberik.browser.local import LocalBrowserPool
from oberik.local.scripted_provider import Reply, ScriptedProvider
from tests.api_fixtures import Api, Project
from tests.browser_tools.conftest import Site


def _call(i: int, name: str, **args: object) -> Reply:
    return Reply(tool_calls=[{"id": f"call_{i}", "name": name, "arguments": json.dumps(args)}])


def _tool_results(provider: ScriptedProvider) -> list[dict]:
    last = provider.requests[-1]["messages"]
    return [json.loads(m["content"]) for m in last if m["role"] == "tool"]


def test_a_turn_goes_to_a_page_clicks_and_reads(
    api: Api, scripted_project: Project, provider: ScriptedProvider, pool: LocalBrowserPool, site: Site
):
    token = api.token(scripted_project)
    provider.script(
        _call(1, "browser_goto", url=site.url("/button")),
        _call(2, "browser_click", n=1),
        _call(3, "browser_read"),
        Reply(text="The counter shows 1 clicks [1]."),
    )
    r = api.chat(token, message="click the button once and tell me the count")
    assert r.status_code == 200, r.text
    offered = [t["function"]["name"] for t in provider.requests[0]["tools"]]
    assert {"browser_goto", "browser_click", "browser_read", "browser_close"} <= set(offered)
    assert "screenshot_url" not in offered  # the browser replaces it
    goto, click, read = _tool_results(provider)
    assert goto["title"] == "Counter" and goto["elements"][0] == '[1] button "Add one"'
    assert "1 clicks" in click["text"] and click["elements"][0].startswith('[1] link "Inserted link"')
    assert "1 clicks" in read["text"]
    body = r.json()
    cited = body.get("citations") or []
    assert any(c["kind"] == "web" and c["url"] == site.url("/button") for c in cited), body
    session_id = body["session_id"]
    assert pool.has_page(session_id)  # the page stays open for the next turn of this conversation


def test_the_listing_withholds_screenshot_url_when_the_browser_is_granted(api: Api, project: Project):
    both = api.token(project, capabilities=["chat", "web_search", "browser", "output:image"])
    listing = api.get("/tools", both).json()
    names = [t["name"] for t in listing["tools"]]
    assert "browser_goto" in names and "screenshot_url" not in names
    [withheld] = [w for w in listing["withheld"] if w["name"] == "screenshot_url"]
    assert "browser" in withheld["unavailable"] and "browser_screenshot" in withheld["unavailable"]

    web_only = api.token(project, capabilities=["chat", "web_search", "output:image"])
    assert "screenshot_url" in [t["name"] for t in api.get("/tools", web_only).json()["tools"]]
    # browser switched off on the request: the browser tools go, screenshot_url comes back
    listing = api.get("/tools", both, enable_browser="false").json()
    names = [t["name"] for t in listing["tools"]]
    assert "screenshot_url" in names and not any(n.startswith("browser_") for n in names)


def test_screenshot_url_needs_web_search_and_an_output_kind(api: Api, project: Project):
    no_web = api.token(project, capabilities=["chat", "output:image", "output:file"])
    assert "screenshot_url" not in [t["name"] for t in api.get("/tools", no_web).json()["tools"]]
    no_output = api.token(project, capabilities=["chat", "web_search"])
    assert "screenshot_url" not in [t["name"] for t in api.get("/tools", no_output).json()["tools"]]


def test_screenshot_url_captures_and_cites_without_touching_the_conversations_page(
    api: Api, scripted_project: Project, provider: ScriptedProvider, pool: LocalBrowserPool, site: Site
):
    token = api.token(scripted_project, capabilities=["chat", "web_search", "output:image"])
    provider.script(_call(1, "screenshot_url", url=site.url("/links")), Reply(text="Here it is [1]."))
    r = api.chat(token, message="capture the articles page")
    assert r.status_code == 200, r.text
    [shot] = _tool_results(provider)
    assert shot["title"] == "Articles" and "First article" in shot["text"]
    assert shot["image"]["type"] == "image/png" and shot["image"]["bytes"] > 1000
    assert "elements" not in shot and "image_b64" not in shot
    assert pool.open_sessions() == []  # its scratch page is closed


def test_the_browser_family_is_not_offered_without_the_capability(api: Api, project: Project):
    token = api.token(project, capabilities=["chat", "tasks:write"])
    names = [t["name"] for t in api.get("/tools", token).json()["tools"]]
    assert not any(n.startswith("browser_") for n in names)
