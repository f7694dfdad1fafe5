"""The hand-off when the page lives in the browser Lambda (`browser_backend: lambda`): the tool, the input relay and
the check are commands through the table's mailbox, and the stream reads the screencast frames the host writes into
the table. Run in-process: moto's DynamoDB, and the host's real command loop (the code the browser Lambda runs)
with a real Chromium page on a thread of its own, started the way an asynchronous invoke would start it."""

from __future__ import annotations

import asyncio
import base64
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from oberik.adapters.dynamodb import DynamoStore
from oberik.browser import handoff_rules as rules
from oberik.browser.handoff import jpeg_size
from oberik.browser.handoff_ops import CAST_LEASE_SECONDS
from oberik.browser.local import DEFAULT_EXECUTABLE
from oberik.domain.errors import Invalid
from oberik.local.scripted_provider import Reply, ScriptedProvider
from oberik.settings import get_settings
from tests.api_fixtures import Api, Project, read_events, table_items
from tests.handoff.conftest import CHECKER, Conversation, count_frames, stream
from tests.handoff.pages import PageServer

FPS = 6.0
KEEP = 3


class Hosts:
    """Starts a browser host per invoke, each on a thread (an asynchronous Lambda invoke, in-process)."""

    def __init__(self, store: DynamoStore) -> None:
        self.store = store
        self.threads: list[threading.Thread] = []
        self.outcomes: list[dict[str, Any]] = []

    def invoke(self, session_id: str) -> None:
        from oberik.browser.host import LAMBDA_CHROMIUM_ARGS, HostLimits, serve_event

        limits = HostLimits(poll_seconds=0.02, heartbeat_seconds=0.5, idle_seconds=120.0)

        def run() -> None:
            out = asyncio.run(
                serve_event(
                    {"session_id": session_id},
                    store=self.store,
                    remaining_ms=lambda: 600_000,
                    executable=DEFAULT_EXECUTABLE,
                    limits=limits,
                    allow_private=True,  # the test pages are on loopback
                    launch_args=LAMBDA_CHROMIUM_ARGS,
                )
            )
            self.outcomes.append(out)

        t = threading.Thread(target=run, daemon=True)
        self.threads.append(t)
        t.start()


async def _evaluate(page: Any, state: dict[str, Any], args: dict[str, Any]) -> dict[str, Any]:
    return {"value": await page.evaluate(args["script"])}


async def _open(page: Any, state: dict[str, Any], args: dict[str, Any]) -> dict[str, Any]:
    await page.goto(args["url"], wait_until=args.get("wait_until", "load"))
    if args.get("wait_for"):
        await page.wait_for_selector(args["wait_for"])
    return {"url": page.url}


class MailDesk(Conversation):
    """A conversation whose browser page is in a host reached through the mailbox; the routes as a client uses them."""

    def __init__(self, api: Api, token: str, provider: ScriptedProvider, pages: PageServer, browser: Any) -> None:
        self.pages, self.browser = pages, browser
        super().__init__(api, token, provider)

    def open(self, path: str, **kw: Any) -> None:
        """Put a test page in the conversation's browser (in the host, through the mailbox)."""
        answer = self.browser.run(self.sid, "test_open", {"url": self.pages.url(path), **kw}, timeout=30)
        assert "error" not in answer, answer

    def evaluate(self, script: str) -> Any:
        return self.browser.run(self.sid, "test_evaluate", {"script": script})["value"]

    def centre(self, selector: str) -> dict[str, float]:
        return self.evaluate(
            f"(() => {{ const r = document.querySelector('{selector}').getBoundingClientRect();"
            " return {x: r.left + r.width / 2, y: r.top + r.height / 2}; })()"
        )

    def click(self, selector: str, origin: dict[str, int]) -> None:
        at = self.centre(selector)
        r = self.input(type="click", x=at["x"] - origin["x"], y=at["y"] - origin["y"], origin=origin)
        assert r.status_code == 200, r.text


@pytest.fixture
def mdesk(
    api: Api,
    scripted_project: Project,
    token: str,
    provider: ScriptedProvider,
    pages: PageServer,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[MailDesk]:
    import os

    if not os.path.exists(DEFAULT_EXECUTABLE):
        pytest.skip(f"{DEFAULT_EXECUTABLE} is missing: install Debian's chromium-headless-shell")
    pytest.importorskip("playwright.async_api")
    from oberik.browser.actions import EXTRA_OPS, register_op
    from oberik.browser.remote import MailboxBrowser, set_default_mailbox

    monkeypatch.setenv("OBERIK_BROWSER_BACKEND", "lambda")
    monkeypatch.setenv("OBERIK_BROWSER_HANDOFF_FPS", str(FPS))
    monkeypatch.setenv("OBERIK_BROWSER_HANDOFF_FRAMES_KEPT", str(KEEP))
    get_settings.cache_clear()
    api.configure(scripted_project, handoff_check_model="scripted/vision-small")
    store = DynamoStore()
    hosts = Hosts(store)
    browser = MailboxBrowser(store, hosts.invoke, poll_seconds=0.02)
    earlier = set_default_mailbox(browser)
    register_op("test_evaluate", _evaluate)
    register_op("test_open", _open)
    desk = MailDesk(api, token, provider, pages, browser)
    try:
        yield desk
    finally:
        pages.server.release.set()  # a held-back page lets go, so the host can close it
        try:
            browser.close(desk.sid)
            for t in hosts.threads:
                t.join(30)
            assert [o["stopped"] for o in hosts.outcomes] == ["closed"]  # one host served it all
        finally:
            set_default_mailbox(earlier)
            EXTRA_OPS.pop("test_evaluate", None)
            EXTRA_OPS.pop("test_open", None)
            pages.server.release.clear()


def next_event(r: Any, kind: str, within: float = 10.0) -> Any:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        for e in read_events(r, stop_after=1):
            if e.event == kind:
                return e
    raise AssertionError(f"no {kind} event within {within:g} s")


def test_a_hand_off_streams_real_frames_from_the_host_and_the_crop_follows_the_overlay(mdesk: MailDesk, live: str):
    # Given a blocking bot-check hand-off, cropped to the widget, of a page in the browser host
    mdesk.open("/widget")
    done = mdesk.hand_off(after=None, reason="pass the captcha", selector="#captcha")
    assert done["requires_action"] is True and done["handoff"]["region"] == "selector"

    client, ctx = stream(live, mdesk)
    with client, ctx as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        # Then the crop comes first, then whole-viewport JPEG frames the host cast into the table
        first = read_events(r, stop_after=2)
        assert [e.event for e in first] == ["clip", "frame"]
        clip = first[0].data
        assert clip["region"] == "selector" and clip["matched"] is True and clip["clip"]["height"] < 200
        frame = first[1].data
        raw = base64.b64decode(frame["image"])
        assert raw[:3] == b"\xff\xd8\xff" and jpeg_size(raw) == (frame["width"], frame["height"]) == (1280, 800)
        assert frame["origin"] == clip["origin"] and frame["region"] == "selector"

        # And a still during the stream is the newest cast frame, cropped the same way
        still = mdesk.frame().json()
        assert still["region"] == "selector" and still["origin"] == clip["origin"] and still["width"] == 1280

        # When the person ticks the box, relayed through the mailbox, and the puzzle opens in its overlay
        mdesk.click("#tick", clip["origin"])
        assert mdesk.evaluate("window.__log") == ["opened"]

        # Then a clip event re-aims the view over widget and overlay, and a frame with the new crop follows
        moved = next_event(r, "clip").data
        puzzle = mdesk.evaluate(
            "(() => { const r = document.getElementById('puzzle').getBoundingClientRect();"
            " return {x: r.left, y: r.top, w: r.width, h: r.height}; })()"
        )
        c = moved["clip"]
        assert c["x"] + c["width"] >= puzzle["x"] + puzzle["w"] and c["y"] <= puzzle["y"]
        assert next_event(r, "frame").data["clip"] == c

        # When the person says they are done, the stream ends
        mdesk.provider.script(Reply("Done, thanks."))
        assert mdesk.api.chat(mdesk.token, session_id=mdesk.sid, handoff_done=True).status_code == 200
        assert next_event(r, "end").data["reason"] == "handoff_ended"

    # The table holds only the newest few frames of the whole stream
    ring = [i for i in table_items() if i["sk"]["S"].startswith("BROWSER#CAST#")]
    assert 1 <= len(ring) <= KEEP


def test_typed_text_and_clicks_land_on_the_page_in_the_host(mdesk: MailDesk):
    mdesk.open("/typing")
    mdesk.hand_off(reason="fill in the address", mode="open")
    still = mdesk.frame().json()  # no stream: the host takes a still
    assert still["region"] == "viewport" and jpeg_size(base64.b64decode(still["image"])) == (1280, 800)
    origin = still["origin"]
    mdesk.click("#street", origin)
    r = mdesk.input(type="type", text="Łódź Straße 5 ÅÉ")
    assert r.status_code == 200 and r.json()["focused"] is True
    assert mdesk.evaluate("document.getElementById('street').value") == "Łódź Straße 5 ÅÉ"

    # A gesture the server cannot play is refused with the same sentence as when the page is local
    body = {"type": "click", "y": 3, "origin": origin}
    bad = mdesk.input(**body)
    with pytest.raises(Invalid) as here:
        rules.parse_input(body, {"width": 1280.0, "height": 800.0})
    assert bad.status_code == 400 and bad.json()["detail"] == here.value.detail


def test_check_says_gone_once_the_bot_check_went_away(mdesk: MailDesk):
    mdesk.open("/widget")
    mdesk.hand_off(after=None, reason="pass the captcha", selector="#captcha")
    origin = mdesk.frame().json()["origin"]
    mdesk.click("#tick", origin)
    mdesk.provider.script_when(CHECKER, Reply("unsolved"))
    first = mdesk.check().json()
    assert first["checked"] is True and first["state"] == "unsolved"  # the widget is still there: the model judged
    mdesk.click("#verify", mdesk.frame().json()["origin"])
    mdesk.evaluate(
        "new Promise(r => { const t = () => location.pathname === '/order' ? r(1) : setTimeout(t, 20); t(); })"
    )
    assert mdesk.check().json() == {
        "checked": True,
        "done": True,
        "state": "gone",
        "reason": None,
        "will_check_again": False,
    }
    assert len([r for r in mdesk.provider.requests if CHECKER in str(r.get("messages"))]) == 1


def test_check_says_loading_for_a_blank_or_half_delivered_page(mdesk: MailDesk):
    mdesk.open("/blank")
    mdesk.hand_off(after=None, reason="pass the captcha")
    assert mdesk.check().json()["state"] == "loading"
    mdesk.open("/slow", wait_until="commit", wait_for="text=Loading your")
    assert mdesk.check().json()["state"] == "loading"


def test_frame_rate_through_the_mailbox_is_capped_at_the_setting(mdesk: MailDesk, live: str):
    """For the report: frames a painting page delivers through host -> table -> route, and that the cap holds."""
    mdesk.open("/animated")
    mdesk.hand_off(reason="watch the animation", mode="open")
    client, ctx = stream(live, mdesk)
    with client, ctx as r:
        read_events(r, stop_after=2)
        frames, size, elapsed = count_frames(r, 5.0)
    rate = frames / elapsed
    print(
        f"\nscreencast through the mailbox: {frames} frames in {elapsed:.1f} s = {rate:.1f} frames/s "
        f"(cap {FPS:g}), {size / max(frames, 1) / 1024:.0f} KiB a frame"
    )
    assert frames >= 5  # it streams
    assert frames <= FPS * elapsed + 2  # and no faster than the host may write

    # Once nobody watches, the host stops writing frames (the route told it to), though the page still paints.
    # Sooner than the cast's lease could run out (renewed every third of it), so it is the route's stop that did it.
    store = mdesk.browser.store
    deadline, settled = time.monotonic() + CAST_LEASE_SECONDS * 2 / 3 - 1, False
    while not settled and time.monotonic() < deadline:
        before = store.browser_cast_latest(mdesk.sid)["seq"]
        time.sleep(1.0)
        settled = store.browser_cast_latest(mdesk.sid)["seq"] == before
    assert settled and mdesk.evaluate("document.getElementById('n').textContent") != ""
