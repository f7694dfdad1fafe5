"""GET /chat/sessions/{id}/browser/stream: whole-viewport JPEG frames from CDP's screencast, and `clip` events
whenever the crop moves (a challenge overlay opening re-aims it). Read over a real socket from uvicorn."""

from __future__ import annotations

import base64
import time
from typing import Any

import httpx

from oberik.browser.handoff import jpeg_size
from tests.api_fixtures import read_events
from tests.handoff.conftest import Desk, count_frames, stream

REPORT: dict[str, Any] = {}


def test_frames_are_real_jpegs_of_the_viewport_and_the_crop_follows_the_overlay(desk: Desk, live: str):
    # Given a bot-check hand-off cropped to the widget
    desk.open("/widget")
    desk.hand_off(after=None, reason="pass the captcha", selector="#captcha")
    client, ctx = stream(live, desk)
    with client, ctx as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")

        # Then the crop comes first, then whole-viewport frames that say where they were cropped
        first = read_events(r, stop_after=2)
        assert first[0].event == "clip"
        clip = first[0].data
        assert clip["region"] == "selector" and clip["matched"] is True
        widget = desk.evaluate(
            "(() => { const r = document.getElementById('captcha').getBoundingClientRect();"
            " return {x: r.left, y: r.top, w: r.width, h: r.height}; })()"
        )
        assert (
            clip["clip"]["x"] <= widget["x"] and clip["clip"]["x"] + clip["clip"]["width"] >= widget["x"] + widget["w"]
        )
        assert clip["clip"]["height"] < 200  # just the widget
        frame = first[1].data
        assert first[1].event == "frame" and frame["region"] == "selector" and frame["origin"] == clip["origin"]
        raw = base64.b64decode(frame["image"])
        assert raw[:3] == b"\xff\xd8\xff" and jpeg_size(raw) == (frame["width"], frame["height"])
        assert (frame["width"], frame["height"]) == (1280, 800)  # the whole viewport, not the crop

        # When the person ticks the box and the puzzle opens in its overlay
        origin = clip["origin"]
        tick = desk.evaluate(
            "(() => { const r = document.getElementById('tick').getBoundingClientRect();"
            " return {x: r.left + 10, y: r.top + 10}; })()"
        )
        assert (
            desk.input(type="click", x=tick["x"] - origin["x"], y=tick["y"] - origin["y"], origin=origin).status_code
            == 200
        )

        # Then a clip event re-aims the view over the widget and the overlay together, and frames follow it
        moved = None
        deadline = time.monotonic() + 10
        while moved is None and time.monotonic() < deadline:
            for e in read_events(r, stop_after=1):
                if e.event == "clip":
                    moved = e.data
        assert moved is not None
        puzzle = desk.evaluate(
            "(() => { const r = document.getElementById('puzzle').getBoundingClientRect();"
            " return {x: r.left, y: r.top, w: r.width, h: r.height}; })()"
        )
        c = moved["clip"]
        assert c["x"] + c["width"] >= puzzle["x"] + puzzle["w"] and c["y"] <= puzzle["y"]
        assert moved["region"] == "selector" and moved["origin"] == {"x": c["x"], "y": c["y"]}
        after = next(e for e in iter(lambda: read_events(r, stop_after=1)[0], None) if e.event == "frame")
        assert after.data["clip"] == c


def test_a_missing_selector_streams_the_detected_widget_then_the_viewport(desk: Desk, live: str):
    desk.open("/widget")
    desk.hand_off(reason="pass the captcha", mode="open", selector="#gone")
    client, ctx = stream(live, desk)
    with client, ctx as r:
        (clip,) = read_events(r, stop_after=1)
        assert clip.data["region"] == "detected" and clip.data["matched"] is False
    client, ctx = stream(live, desk, selector="#still-gone")
    desk.open("/account")
    with client, ctx as r:
        (clip,) = read_events(r, stop_after=1)
        assert clip.data["region"] == "viewport" and clip.data["clip"] == {"x": 0, "y": 0, "width": 1280, "height": 800}


def test_the_stream_ends_when_the_hand_off_does(desk: Desk, live: str):
    desk.open("/widget")
    desk.hand_off(after=None, reason="pass the captcha")
    client, ctx = stream(live, desk)
    with client, ctx as r:
        read_events(r, stop_after=2)
        from oberik.local.scripted_provider import Reply

        desk.provider.script(Reply("Done, thanks."))
        assert desk.api.chat(desk.token, session_id=desk.sid, handoff_done=True).status_code == 200
        rest = read_events(r)
        assert rest[-1].event == "end" and rest[-1].data["reason"] == "handoff_ended"


def test_only_the_owner_may_watch(desk: Desk, live: str):
    desk.open("/widget")
    desk.hand_off(after=None, reason="pass the captcha")
    other = desk.api.token(desk.project, subject="mallory")
    r = httpx.get(f"{live}{desk.path('browser/stream')}", headers=desk.api.bearer(other), timeout=10)
    assert r.status_code == 404
    r = httpx.get(f"{live}/chat/sessions/s_nope/browser/stream", headers=desk.api.bearer(desk.token), timeout=10)
    assert r.status_code == 404


def test_frame_rate_of_the_screencast(desk: Desk, live: str):
    """Not a speed assertion: counts what a painting page delivers, for the report (at least a few a second)."""
    desk.open("/animated")
    desk.hand_off(reason="watch the animation", mode="open")
    client, ctx = stream(live, desk)
    with client, ctx as r:
        read_events(r, stop_after=3)
        frames, size, elapsed = count_frames(r, 4.0)
    rate = frames / elapsed

    # the same page's screencast read straight off CDP, without the route in between, for comparison
    from oberik.browser.handoff import Screencast

    raw: list[float] = []
    cast = Screencast(lambda params: raw.append(time.monotonic()))
    desk.pool.submit(desk.sid, cast.start, open_if_missing=False)
    time.sleep(4.0)
    desk.pool.submit(desk.sid, lambda page: cast.stop(), open_if_missing=False)
    direct = (len(raw) - 1) / (raw[-1] - raw[0]) if len(raw) > 1 else 0.0
    REPORT["fps"] = rate
    print(
        f"\nscreencast through the route: {frames} frames in {elapsed:.1f} s = {rate:.1f} frames/s, "
        f"{size / max(frames, 1) / 1024:.0f} KiB a frame; straight off CDP: {direct:.1f} frames/s"
    )
    assert rate >= 3 and direct >= 3
