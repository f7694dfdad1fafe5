"""The SDK's side of a hand-off, against the live stack: `on_browser_handoff` fires, `sessions.handoff()` paints
frames and relays gestures with the right origin, ends the hand-off itself once the page shows the person is
done, and `chat.handoff_done()` resumes the turn (sync and async)."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from oberik.client import AsyncClient, Client
from oberik.local.scripted_provider import Reply
from tests.handoff.conftest import CHECKER, Desk, call


def point(desk: Desk, element_id: str, inset: int) -> dict[str, float]:
    """A point `inset` pixels into the element, in page pixels."""
    found: dict[str, float] = desk.evaluate(
        f"(() => {{ const r = document.getElementById('{element_id}').getBoundingClientRect();"
        f" return {{x: r.left + {inset}, y: r.top + {inset}}}; }})()"
    )
    return found


def test_the_sdk_watches_works_and_ends_a_blocking_hand_off(desk: Desk, live: str):
    desk.open("/widget")
    client = Client(live, desk.token)
    announced: list[dict[str, Any]] = []
    desk.provider.script(
        Reply(tool_calls=[call("browser_handoff", "hand1", reason="pass the captcha", selector="#captcha")])
    )
    handle = client.chat.stream(session_id=desk.sid, message="check my order", on_browser_handoff=announced.append)
    paused = handle.done(timeout=60)
    assert paused.requires_action and paused.handoff and paused.handoff["blocking"]
    assert announced and announced[0]["id"] == paused.handoff["id"]

    views: list[dict[str, Any]] = []
    ended: list[dict[str, Any]] = []
    painted, finished = threading.Event(), threading.Event()

    def on_view(view: dict[str, Any]) -> None:
        views.append(view)
        if view["frame"]:
            painted.set()

    def on_ended(info: dict[str, Any]) -> None:
        ended.append(info)
        finished.set()

    view = client.sessions.handoff(desk.sid, paused.handoff, on_view=on_view, on_ended=on_ended)
    try:
        assert painted.wait(20), "no frame arrived"
        assert view.view["region"] == "selector" and view.view["live"] is True

        # the person ticks the box (coordinates in the crop), the puzzle opens, they press Verify
        origin = view.view["origin"]
        tick = point(desk, "tick", 5)
        desk.provider.script_when(CHECKER, Reply("unsolved"))
        answer = view.click(tick["x"] - origin["x"], tick["y"] - origin["y"])
        assert answer["origin"] == origin
        assert desk.evaluate("window.__log") == ["opened"]
        desk.pool.submit(desk.sid, lambda p: p.wait_for_timeout(1500), open_if_missing=False)
        verify = point(desk, "verify", 10)
        origin = view.view["origin"]
        view.click(verify["x"] - origin["x"], verify["y"] - origin["y"])

        # the controller's own check after the release sees the widget gone, and ends it for a resume
        assert finished.wait(20), "the hand-off did not end itself"
        assert ended == [{"resume": True, "reason": "done"}]
    finally:
        view.close()

    desk.provider.script(Reply("Your order shipped on Monday."))
    resumed = client.chat.handoff_done(desk.sid)
    assert resumed.content == "Your order shipped on Monday." and not resumed.requires_action
    assert any(v["checking"] for v in views)
    client.close()


def test_the_async_client_reads_frames_checks_and_resumes(desk: Desk, live: str):
    desk.open("/login")
    paused = desk.hand_off(after=None, reason="log in to the bank", interactive=True)
    assert paused["handoff"]["blocking"]

    async def main() -> tuple[list[str], dict[str, Any], dict[str, Any], str]:
        async with AsyncClient(live, desk.token) as client:
            seen: list[str] = []
            async for event, data in client.sessions.browser_stream(desk.sid):
                seen.append(event)
                if event == "frame":
                    assert data["image"]
                    break
            frame = await client.sessions.browser_frame(desk.sid)
            typed = await client.sessions.browser_input(desk.sid, {"type": "type", "text": "é"})
            desk.provider.script_when(CHECKER, Reply("unsolved"))
            checked = await client.sessions.handoff_check(desk.sid)
            desk.provider.script(Reply("Signed in."))
            resumed = await client.chat.handoff_done(desk.sid)
            assert typed["ok"] is True and frame["region"] == "viewport"
            return seen, frame, checked, resumed.content

    seen, _frame, checked, content = asyncio.run(main())
    assert seen[0] == "clip" and "frame" in seen
    assert checked["state"] == "unsolved"
    assert content == "Signed in."


def test_the_async_controller_watches_works_and_ends_a_blocking_hand_off(desk: Desk, live: str):
    desk.open("/widget")
    paused = desk.hand_off(after=None, reason="pass the captcha", selector="#captcha")
    assert paused["requires_action"] and paused["handoff"]["blocking"]

    async def main() -> tuple[list[dict[str, Any]], list[dict[str, Any]], str]:
        views: list[dict[str, Any]] = []
        ended: list[dict[str, Any]] = []
        painted, finished = asyncio.Event(), asyncio.Event()

        async def on_view(view: dict[str, Any]) -> None:  # a coroutine callback is awaited
            views.append(view)
            if view["frame"]:
                painted.set()

        def on_ended(info: dict[str, Any]) -> None:  # a plain one is called
            ended.append(info)
            finished.set()

        async with AsyncClient(live, desk.token) as client:
            view = await client.sessions.handoff(desk.sid, paused["handoff"], on_view=on_view, on_ended=on_ended)
            try:
                await asyncio.wait_for(painted.wait(), 20)
                assert view.view["region"] == "selector" and view.view["live"] is True

                # the person ticks the box (coordinates in the crop): the gesture carries the crop's origin
                origin = view.view["origin"]
                tick = point(desk, "tick", 5)
                desk.provider.script_when(CHECKER, Reply("unsolved"))
                answer = await view.click(tick["x"] - origin["x"], tick["y"] - origin["y"])
                assert answer["origin"] == origin
                assert desk.evaluate("window.__log") == ["opened"]
                await asyncio.sleep(1.5)  # the puzzle opens
                verify = point(desk, "verify", 10)
                origin = view.view["origin"]
                await view.click(verify["x"] - origin["x"], verify["y"] - origin["y"])

                # its own check after the release sees the widget gone and ends the hand-off for a resume
                await asyncio.wait_for(finished.wait(), 20)
            finally:
                await view.close()
            desk.provider.script(Reply("Your order shipped on Monday."))
            resumed = await client.chat.handoff_done(desk.sid)
            return views, ended, resumed.content

    views, ended, content = asyncio.run(main())
    assert ended == [{"resume": True, "reason": "done"}]
    assert any(v["checking"] for v in views) and views[-1]["live"] is False
    assert content == "Your order shipped on Monday."
