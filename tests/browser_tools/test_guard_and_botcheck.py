"""The egress guard on every address the page loads, and bot checks reported instead of misread."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from oberik.browser import guard, local
from oberik.browser.local import LocalBrowserPool
from tests.browser_tools.conftest import Agent, Site, make_turn


@pytest.fixture(scope="module")
def strict_pool() -> Iterator[LocalBrowserPool]:
    """A pool as deployed: loopback and private addresses refused."""
    pool = LocalBrowserPool(allow_private=False)
    try:
        yield pool
    finally:
        pool.stop()


@pytest.fixture
def strict(strict_pool: LocalBrowserPool) -> Iterator[Agent]:
    old = local.set_pool(strict_pool)
    try:
        yield Agent(turn=make_turn("ses-strict"))
    finally:
        local.set_pool(old)


def _loopback_name() -> str:
    for name in (socket.gethostname(), "vm", "runsc"):
        try:
            if any(a.startswith("127.") for a in guard.resolve(name, 80)):
                return name
        except OSError:
            continue
    pytest.skip("no host name on this machine resolves to loopback")


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("http://127.0.0.1:9/", "loopback"),
        ("http://localhost:9/", "loopback"),
        ("http://169.254.169.254/latest/meta-data/", "cloud metadata"),
        ("http://10.1.2.3/", "private"),
        ("http://[::1]/", "loopback"),
        ("file:///etc/passwd", "http"),
    ],
)
def test_addresses_inside_the_deployment_are_refused(strict: Agent, site: Site, url: str, why: str):
    before = len(site.hits)
    out = strict.outcome("browser_goto", url=url)
    assert not out.ok and why in out.content
    assert len(site.hits) == before


def test_a_host_name_that_resolves_to_loopback_is_refused(strict: Agent, site: Site):
    port = site.base.rsplit(":", 1)[1]
    name = _loopback_name()
    before = len(site.hits)
    a = strict("browser_goto", url=f"http://{name}:{port}/form")
    assert "resolves to 127." in a["error"] and "loopback" in a["error"]
    assert len(site.hits) == before  # the page was never requested


def test_the_guard_is_on_every_request_the_page_makes(strict_pool: LocalBrowserPool, site: Site):
    """A page that got in anyway (here: set directly) cannot load loopback resources or navigate there."""
    before = len(site.hits)

    async def embed(page):
        await page.set_content(f'<img src="{site.url("/links")}"><iframe src="{site.url("/form")}"></iframe>')
        await page.wait_for_timeout(300)
        return page.url

    strict_pool.submit("ses-embed", embed)
    assert site.hits[before:] == []
    strict_pool.close_page("ses-embed")


def test_metadata_stays_refused_where_private_targets_are_allowed(agent: Agent, site: Site):
    a = agent("browser_goto", url="http://169.254.169.254/latest/meta-data/")
    assert "cloud metadata" in a["error"]
    # and a public-looking page that redirects there shows nothing of it
    a = agent("browser_goto", url=site.url("/redirect?to=http://169.254.169.254/latest/meta-data/"))
    assert "error" in a and "169.254.169.254" in a["error"]
    assert agent("browser_read")["url"] in ("about:blank", "chrome-error://chromewebdata/")


@pytest.fixture
def forbidden_server(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, list[str]]]:
    """A server on 127.0.0.2 that the guard treats as a metadata address (refused even with private allowed)."""
    import ipaddress
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from oberik.domain import egress

    hits: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            hits.append(self.path)
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"<title>secret</title>credentials")

    server = ThreadingHTTPServer(("127.0.0.2", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setattr(egress, "METADATA_ADDRESSES", egress.METADATA_ADDRESSES | {ipaddress.ip_address("127.0.0.2")})
    try:
        yield f"http://127.0.0.2:{server.server_address[1]}", hits
    finally:
        server.shutdown()


def test_a_redirect_to_a_refused_address_is_stopped_before_any_request_goes_there(
    agent: Agent, site: Site, forbidden_server: tuple[str, list[str]]
):
    forbidden, hits = forbidden_server
    a = agent("browser_goto", url=site.url(f"/redirect?to={forbidden}/latest/meta-data/"))
    assert "may not visit" in a["error"]
    # two hops: allowed, then refused
    hop = site.url(f"/redirect?to={forbidden}/two")
    a = agent("browser_goto", url=site.url(f"/redirect?to={hop}"))
    assert "may not visit" in a["error"]
    # a frame or an image pointing there is not loaded either
    from oberik.browser import local as local_module

    async def embed(page):
        await page.set_content(
            f'<iframe src="{site.url(f"/redirect?to={forbidden}/frame")}"></iframe><img src="{forbidden}/img">'
        )
        await page.wait_for_timeout(300)

    local_module.get_pool().submit("ses-embed-redirect", embed)
    assert hits == []
    # and an allowed redirect is followed as usual
    assert agent("browser_goto", url=site.url("/redirect?to=/links"))["title"] == "Articles"


def test_a_bot_check_is_reported_not_misread(agent: Agent, site: Site):
    a = agent("browser_goto", url=site.url("/botcheck"))
    bot = a["bot_check"]
    assert bot["kind"] == "recaptcha" and bot["selector"] == ".g-recaptcha"
    assert bot["box"]["width"] == 306 and bot["box"]["height"] == 80  # with its border
    assert "this page is a bot check" in a["advice"].lower() and "hand it to the user" in a["advice"]


def test_an_interstitial_is_recognised_by_its_wording(agent: Agent, site: Site):
    a = agent("browser_goto", url=site.url("/interstitial"))
    assert a["bot_check"]["kind"] == "interstitial"
    assert "checking your browser" in a["bot_check"]["reason"].lower()


def test_an_unattended_turn_is_told_to_stop(pool: LocalBrowserPool, site: Site):
    robot = Agent(turn=make_turn("ses-night", unattended=True))
    a = robot("browser_goto", url=site.url("/botcheck"))
    assert "nobody is here" in a["advice"] and "gated" in a["advice"]


def test_an_ordinary_page_is_not_a_bot_check(agent: Agent, site: Site):
    for path in ("/form", "/links", "/button", "/long"):
        assert agent("browser_goto", url=site.url(path))["bot_check"] is None
