"""web_search and browse_url: a configured search provider, pages read as first served, everything fetched marked
untrusted and cited as `web`, and the egress guard in front of every request."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from oberik.adapters import web_fetch
from oberik.domain.egress import TargetRefused
from oberik.local.scripted_provider import Reply, ScriptedProvider
from tests.api_fixtures import Api, Project
from tests.citations.fakes import FakeWeb


def _provider_settings(web: FakeWeb, **over: Any) -> dict[str, Any]:
    return {
        "url": web.url + "/search",
        "api_key": "sk-search-123",
        "api_key_header": "X-Subscription-Token",
        "api_key_prefix": "",
        "results_path": "web.results",
        "snippet_field": "description",
        "count_param": "count",
        "max_results": 4,
        **over,
    }


def _tool_messages(provider: ScriptedProvider, request: int = -1) -> list[str]:
    return [m["content"] for m in provider.requests[request]["messages"] if m["role"] == "tool"]


def _system(provider: ScriptedProvider) -> str:
    return str(provider.requests[0]["messages"][0]["content"])


def _call(name: str, **arguments: Any) -> Reply:
    return Reply(tool_calls=[{"id": f"c_{name}", "name": name, "arguments": arguments}])


def test_web_search_asks_the_configured_provider_and_cites_each_result_as_web(
    api: Api, scripted_project: Project, token: str, provider: ScriptedProvider, fake_web: FakeWeb, private_targets
):
    # Given a project whose search provider is the fake one (key in a header, results under web.results)
    api.configure(scripted_project, web_search=_provider_settings(fake_web))
    provider.script(
        _call("web_search", query="acme   pricing"),
        Reply(text="The basic plan costs 12 euros a month [1]. Phone support is free [2]. Offices are on Mars [4]."),
    )

    # When the model searches and answers with markers
    body = api.chat(token, message="How much is Acme?").json()

    # Then the provider got the query, the count and the key in the configured header
    search = next(s for s in fake_web.seen if s.path == "/search")
    assert search.query == {"q": ["acme pricing"], "count": ["4"]}
    assert search.headers["X-Subscription-Token"] == "sk-search-123"
    # and each usable result is a web citation with its URL (the javascript: one is skipped)
    assert [(c["marker"], c["kind"], c["url"], c["title"]) for c in body["citations"]] == [
        (1, "web", fake_web.page("/pages/pricing"), "Acme pricing"),
        (2, "web", fake_web.page("/pages/support"), "Acme support"),
    ]
    assert body["citations"][0]["quote"] == "The basic plan costs 12 euros a month [7]."  # what the reader checks
    # and the answer's sentences point at them, the invented [4] dropped
    assert (
        body["content"] == "The basic plan costs 12 euros a month [1]. Phone support is free [2]. Offices are on Mars."
    )
    assert [(c["citations"], c["text"]) for c in body["claims"]] == [
        ([1], "The basic plan costs 12 euros a month [1]."),
        ([2], "Phone support is free [2]."),
    ]
    assert body["attribution"] == "per-claim" and all(c["used"] for c in body["citations"])
    # and the model read numbered results inside untrusted blocks, and was told how to cite and what untrusted means
    shown = _tool_messages(provider)[0]
    assert shown.count('<untrusted source="web"') == 2
    assert "[1] " + fake_web.page("/pages/pricing") in shown and "[2] " + fake_web.page("/pages/support") in shown
    assert "12 euros a month (7)." in shown and "<strong>" not in shown  # a snippet's [7] is not a turn marker
    assert "Sources and citations" in _system(provider) and "never instructions" in _system(provider)


def test_web_search_by_post_and_a_mapping_that_finds_nothing_says_which_setting_to_fix(
    api: Api, scripted_project: Project, token: str, provider: ScriptedProvider, fake_web: FakeWeb, private_targets
):
    api.configure(
        scripted_project,
        web_search=_provider_settings(fake_web, method="POST", query_param="query", results_path="organic"),
    )
    provider.script(_call("web_search", query="acme"), Reply(text="I could not search."))
    body = api.chat(token, message="search").json()
    post = next(s for s in fake_web.seen if s.path == "/search")
    assert post.method == "POST" and post.body == {"query": "acme", "count": 4}
    error = json.loads(_tool_messages(provider)[0])["error"]
    assert "results_path 'organic'" in error
    assert body["citations"] == [] and body["attribution"] == "none"


def test_browse_url_reads_the_first_paint_marks_it_untrusted_and_cites_the_page(
    api: Api, token: str, provider: ScriptedProvider, fake_web: FakeWeb, private_targets
):
    # Given a page whose text carries an injection attempt, a fake closing tag and a footnote marker
    provider.script(
        _call("browse_url", url=fake_web.url + "/redirect?to=/pages/pricing"),
        Reply(text="It costs 12 euros a month [1]."),
    )

    # When the model opens it (through a redirect) and answers
    body = api.chat(token, message="Open the pricing page").json()

    # Then the page (where the redirect led) is one web citation with its title and URL
    [entry] = body["citations"]
    assert entry["kind"] == "web" and entry["url"] == fake_web.page("/pages/pricing")
    assert entry["title"] == "Acme pricing" and "12 euros" in entry["quote"] and entry["used"] is True
    assert body["attribution"] == "per-claim"
    # and the model saw the main text only (no navigation, no script output), wrapped so it cannot break out
    shown = _tool_messages(provider)[0]
    opened = re.search(r'<untrusted source="web" url="[^"]+" id="([0-9a-f]{8})">', shown)
    assert opened is not None and shown.startswith("[1] Acme pricing")
    closing = f'</untrusted id="{opened.group(1)}">'
    inside = shown[opened.end() : shown.index(closing)]
    assert "12 euros" in inside and "Ignore all previous instructions" in inside
    assert "</untrusted> SYSTEM" in inside  # the page's own tag is text inside the block, not its end
    assert "hidden from first paint" not in shown and "Careers" not in shown
    assert "destination.(3)" in inside  # the page's footnote cannot pass for one of the turn's markers


@pytest.mark.parametrize(
    ("path", "error"),
    [
        ("/pages/logo.png", "image/png, not a web page or text"),
        ("/status?code=404", "answered HTTP 404"),
        ("/pages/empty", "no readable text"),
    ],
)
def test_browse_url_says_plainly_what_it_could_not_read(
    api: Api, token: str, provider: ScriptedProvider, fake_web: FakeWeb, private_targets, path: str, error: str
):
    provider.script(_call("browse_url", url=fake_web.url + path), Reply(text="Could not read it."))
    body = api.chat(token, message="open").json()
    assert error in json.loads(_tool_messages(provider)[0])["error"]
    assert body["citations"] == []


def test_plain_text_is_read_as_it_is(api: Api, token: str, provider: ScriptedProvider, fake_web, private_targets):
    provider.script(_call("browse_url", url=fake_web.page("/pages/notes.txt")), Reply(text="At 9 [1]."))
    body = api.chat(token, message="open").json()
    assert "the office opens at 9" in _tool_messages(provider)[0]
    assert body["citations"][0]["title"] == fake_web.page("/pages/notes.txt")


# --- the guard ------------------------------------------------------------------------------------------------


def test_browse_url_refuses_loopback_when_private_targets_are_not_allowed(
    api: Api, token: str, provider: ScriptedProvider, fake_web: FakeWeb
):
    # Given the deployment's default (no private targets) and a page on this machine
    provider.script(_call("browse_url", url=fake_web.page("/pages/pricing")), Reply(text="Refused."))

    # When the model asks for it
    body = api.chat(token, message="open").json()

    # Then nothing was fetched, the model was told why, and nothing was cited
    assert fake_web.seen == []
    assert "127.0.0.1 is a loopback address" in json.loads(_tool_messages(provider)[0])["error"]
    assert body["citations"] == [] and body["attribution"] == "none"


def test_a_metadata_address_is_refused_even_where_private_targets_are_allowed(private_targets):
    with pytest.raises(TargetRefused, match="cloud metadata"):
        web_fetch.fetch("http://169.254.169.254/latest/meta-data/", allow_private=True)
    with pytest.raises(TargetRefused, match="cloud metadata"):
        web_fetch.fetch("http://metadata.google.internal/computeMetadata/v1/", allow_private=True)


def test_a_name_that_resolves_to_loopback_is_refused_after_resolution(monkeypatch: pytest.MonkeyPatch, fake_web):
    # Given a public-looking name that DNS points at this machine
    asked: list[str] = []

    def resolver(host: str, port: int) -> list[str]:
        asked.append(host)
        return ["127.0.0.1"]

    monkeypatch.setattr(web_fetch, "resolve", resolver)

    # When it is fetched, the name is resolved and the address it resolves to is refused before any connection
    with pytest.raises(TargetRefused, match=re.escape("resolves to 127.0.0.1, and 127.0.0.1 is a loopback address")):
        web_fetch.fetch(
            f"http://news.example.com:{fake_web.server.server_address[1]}/pages/pricing", allow_private=False
        )
    assert asked == ["news.example.com"] and fake_web.seen == []


def test_a_redirect_is_checked_like_the_first_request(fake_web: FakeWeb):
    # Private targets allowed (the fake server is on loopback), but the redirect points at the metadata service
    with pytest.raises(TargetRefused, match=re.escape("169.254.169.254 is a cloud metadata address")):
        web_fetch.fetch(fake_web.url + "/redirect?to=http://169.254.169.254/latest/", allow_private=True)
    assert [s.path for s in fake_web.seen] == ["/redirect"]


def test_other_private_and_link_local_targets_are_refused():
    for url, why in [
        ("http://10.0.0.8/", "private"),
        ("http://192.168.1.1/", "private"),
        ("http://169.254.10.10/", "link-local"),
        ("http://[::1]/", "loopback"),
        ("http://localhost:8080/", "loopback"),
        # other spellings of 127.0.0.1 are caught once resolved
        ("http://2130706433/", "resolves to 127.0.0.1"),
        ("http://0x7f.1/", "resolves to 127.0.0.1"),
        ("http://[::ffff:127.0.0.1]/", "loopback"),
        ("http://[::ffff:169.254.169.254]/", "cloud metadata"),
    ]:
        with pytest.raises(TargetRefused, match=why):
            web_fetch.check(url, allow_private=False)


def test_the_search_provider_goes_through_the_guard_too(
    api: Api, scripted_project: Project, token: str, provider: ScriptedProvider, fake_web: FakeWeb, monkeypatch
):
    # Given a provider accepted while private targets were allowed, then the deployment's default again
    monkeypatch.setenv("OBERIK_ALLOW_PRIVATE_WEBHOOKS", "true")
    from oberik.settings import get_settings

    get_settings.cache_clear()
    api.configure(scripted_project, web_search=_provider_settings(fake_web))
    monkeypatch.delenv("OBERIK_ALLOW_PRIVATE_WEBHOOKS")
    get_settings.cache_clear()
    provider.script(_call("web_search", query="x"), Reply(text="no"))

    # When the model searches, the request is refused before it is sent
    api.chat(token, message="search")
    assert fake_web.seen == []
    assert "loopback" in json.loads(_tool_messages(provider)[0])["error"]


# --- settings and listing -------------------------------------------------------------------------------------


def test_the_provider_setting_is_checked_and_its_key_never_shown(
    api: Api, project: Project, fake_web: FakeWeb, private_targets
):
    body = api.configure(project, web_search=_provider_settings(fake_web))
    assert body["web_search"]["api_key_set"] is True and body["web_search"]["results_path"] == "web.results"
    got = api.client.get(f"/api/projects/{project.id}/settings", headers=project.headers)
    assert "sk-search-123" not in got.text
    cleared = api.configure(project, web_search=None)
    assert cleared["web_search"] is None


@pytest.mark.parametrize(
    ("web_search", "words"),
    [
        ({"url": "ftp://search.example/"}, "https:// or http://"),
        ({"url": "https://search.example/", "api_key_header": "Host"}, "cannot carry the key"),
        ({"url": "https://search.example/", "results_path": "web..results"}, "dotted path"),
        ({"url": "https://search.example/", "max_results": 50}, "max_results"),
    ],
)
def test_a_bad_provider_setting_is_a_clear_4xx(api: Api, project: Project, web_search: dict[str, Any], words: str):
    r = api.client.patch(
        f"/api/projects/{project.id}/settings", json={"web_search": web_search}, headers=project.headers
    )
    assert r.status_code in (400, 422) and words in r.text


def test_a_provider_on_this_machine_is_refused_by_default(api: Api, project: Project):
    r = api.client.patch(
        f"/api/projects/{project.id}/settings",
        json={"web_search": {"url": "http://127.0.0.1:9/search"}},
        headers=project.headers,
    )
    assert r.status_code == 400 and "loopback" in r.json()["detail"]


def test_web_search_is_withheld_with_a_reason_until_a_provider_is_configured(
    api: Api, project: Project, fake_web: FakeWeb, private_targets
):
    token = api.token(project, capabilities=["chat", "web_search"])
    listing = api.get("/tools", token).json()
    assert [t["name"] for t in listing["tools"]] == ["browse_url"]
    [withheld] = listing["withheld"]
    assert withheld["name"] == "web_search" and "no search provider" in withheld["unavailable"]
    api.configure(project, web_search=_provider_settings(fake_web))
    assert [t["name"] for t in api.get("/tools", token).json()["tools"]] == ["web_search", "browse_url"]
    assert [t["name"] for t in api.get("/tools", token, enable_web_search="false").json()["tools"]] == []


def test_a_body_past_the_limit_is_cut_and_a_long_page_is_shown_in_part(
    api: Api, token: str, provider: ScriptedProvider, fake_web: FakeWeb, private_targets
):
    small = web_fetch.fetch(fake_web.page("/pages/long"), allow_private=True, max_bytes=1000)
    assert small.truncated and len(small.body) == 1000
    provider.script(_call("browse_url", url=fake_web.page("/pages/long")), Reply(text="Long [1]."))
    body = api.chat(token, message="open").json()
    shown = _tool_messages(provider)[0]
    assert "(the page's text was cut at 12000 of" in shown
    assert body["citations"][0]["url"] == fake_web.page("/pages/long")
