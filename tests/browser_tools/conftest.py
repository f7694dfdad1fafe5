"""Pages served on loopback for the browser tests, a real Chromium pool, and a way to call the tools."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from oberik.browser import local
from oberik.browser.local import LocalBrowserPool
from oberik.domain.llm import ToolCall
from oberik.domain.models import Turn, TurnPlan
from oberik.engine.toolbox import ToolContext
from oberik.engine.tools import ToolOutcome
from tests.loopback import HTML, reply

PAGES: dict[str, str] = {
    "/form": """<!doctype html><title>Sign in</title><h1>Sign in to Acme</h1>
<form action="/signed-in" method="get">
  <label for="email">Email</label> <input id="email" name="email" type="email">
  <label for="pw">Password</label> <input id="pw" name="password" type="password">
  <input type="hidden" name="csrf" value="tok-123">
  <label for="plan">Plan</label>
  <select id="plan" name="plan"><option value="free">Free</option><option value="pro">Pro</option></select>
  <button type="submit">Sign in</button>
</form>""",
    "/button": """<!doctype html><title>Counter</title><h1>Counter</h1><p id="count">0 clicks</p>
<div id="top"></div>
<button id="add" onclick="
  const n = parseInt(document.getElementById('count').innerText) + 1;
  document.getElementById('count').innerText = n + ' clicks';
  if (n === 1) { const a = document.createElement('a'); a.href = '/links'; a.innerText = 'Inserted link';
                 document.getElementById('top').appendChild(a); }">Add one</button>
<a href="/links">All links</a>""",
    "/links": """<!doctype html><title>Articles</title><h1>Articles</h1><ul>
<li><a href="/article/1">First article</a></li><li><a href="/article/2">Second article</a></li>
<li><a href="/article/3">Third article</a></li></ul>
<a href="/secret" style="display:none">Hidden link</a>
<a href="/tiny" style="position:absolute;width:0;height:0;overflow:hidden"></a>
<div aria-hidden="true"><a href="/aria">Aria hidden link</a></div>""",
    "/late": """<!doctype html><title>Loading</title><p id="msg">Loading your orders...</p>
<script>setTimeout(() => { document.getElementById('msg').innerText = 'Your orders are ready';
  const b = document.createElement('button'); b.id = 'late-btn'; b.innerText = 'Open order';
  document.body.appendChild(b); }, 400);</script>""",
    "/botcheck": """<!doctype html><title>Just a moment...</title><h2>Verify you are human</h2>
<p>We need to make sure you are not a robot before you continue.</p>
<div class="g-recaptcha" data-sitekey="6Lc-test" style="width:304px;height:78px;border:1px solid #ccc"></div>""",
    "/interstitial": """<!doctype html><title>Just a moment...</title>
<p>Checking your browser before accessing the site.</p>""",
    "/long": "<!doctype html><title>Long</title>"
    + "".join(f"<p>Paragraph {i} of a long page.</p>" for i in range(200))
    + '<button id="end">The end</button>',
}


def _article(path: str) -> str:
    n = path.rsplit("/", 1)[-1]
    return f"<!doctype html><title>Article {n}</title><h1>Article {n}</h1><p>The body of article number {n}.</p>"


class _Handler(BaseHTTPRequestHandler):
    hits: list[str] = []  # noqa: RUF012 - shared on purpose: every request the pages served

    def log_message(self, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        parts = urlsplit(self.path)
        _Handler.hits.append(parts.path)
        q = {k: v[0] for k, v in parse_qs(parts.query).items()}
        if parts.path == "/redirect":
            self.send_response(302)
            self.send_header("Location", q["to"])
            self.end_headers()
            return
        if parts.path == "/set-cookie":
            data = b"<!doctype html><title>Cookie set</title><p>A cookie was set.</p>"
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Set-Cookie", "visit=42; Path=/; Max-Age=3600")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        if parts.path == "/show-cookie":
            body = f"<!doctype html><title>Cookie</title><p>Cookie header: {self.headers.get('Cookie') or 'none'}</p>"
        elif parts.path == "/signed-in":
            body = f"<!doctype html><title>Welcome</title><h1>Welcome {q.get('email', '')}</h1><p>Plan: {q.get('plan')}</p>"
        elif parts.path.startswith("/article/"):
            body = _article(parts.path)
        elif parts.path in PAGES:
            body = PAGES[parts.path]
        else:
            self.send_response(404)
            self.end_headers()
            self.wfile.write(b"not found")
            return
        reply(self, 200, body.encode(), HTML)


@dataclass
class Site:
    base: str
    hits: list[str]

    def url(self, path: str) -> str:
        return self.base + path


@pytest.fixture(scope="session")
def site() -> Iterator[Site]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield Site(f"http://127.0.0.1:{server.server_address[1]}", _Handler.hits)
    finally:
        server.shutdown()


@pytest.fixture(scope="session")
def shared_pool() -> Iterator[LocalBrowserPool]:
    """One Chromium for the directory, with loopback allowed (the pages are served on it)."""
    pool = LocalBrowserPool(allow_private=True, idle_seconds=600, max_age_seconds=3600, max_pages=8)
    try:
        yield pool
    finally:
        pool.stop()


@pytest.fixture
def pool(shared_pool: LocalBrowserPool) -> Iterator[LocalBrowserPool]:
    """The shared pool as the process-wide one, with no page left over from another test."""
    old = local.set_pool(shared_pool)
    for sid in shared_pool.open_sessions():
        shared_pool.close_page(sid)
    try:
        yield shared_pool
    finally:
        local.set_pool(old)


def make_turn(session_id: str = "ses-1", *, unattended: bool = False) -> Turn:
    return Turn(
        id="turn-1",
        session_id=session_id,
        project_id="prj-1",
        owner="ana",
        run_id="run-1",
        plan=TurnPlan(model="scripted/test", unattended=unattended),
        created_at=0.0,
    )


@dataclass
class Agent:
    """Calls browser tools the way the step does (through the family), keeping one turn's citations."""

    turn: Turn = field(default_factory=make_turn)
    calls: int = 0

    def outcome(self, name: str, **args: Any) -> ToolOutcome:
        from oberik.browser.tools import FAMILY

        self.calls += 1
        call = ToolCall(id=f"c{self.calls}", name=name, arguments=json.dumps(args))
        ctx = ToolContext(turn=self.turn, call=call, args=args, store=None, writer=None, now=0.0)
        return FAMILY.run(ctx)

    def __call__(self, name: str, **args: Any) -> dict[str, Any]:
        return json.loads(self.outcome(name, **args).content)


@pytest.fixture
def agent(pool: LocalBrowserPool) -> Agent:
    return Agent()


def number_of(answer: dict[str, Any], label: str) -> int:
    """The number the answer's list gives the element whose line mentions `label`."""
    for line in answer["elements"]:
        if f'"{label}"' in line:
            return int(line[1 : line.index("]")])
    raise AssertionError(f"{label!r} is not in the list: {answer['elements']}")
