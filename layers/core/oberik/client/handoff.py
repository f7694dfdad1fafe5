"""Browser hand-offs from Python: the live stream of the agent's page, the person's input, the finished-check,
and `HandoffController`, which ties them together the way the playground's viewer does.

The controller has no display of its own: it keeps the newest frame and crop (`view`), turns coordinates in the
picture into gestures with the right origin, checks after each release whether the person is done, and says so
through `on_view` and `on_ended`. A GUI (or a test) paints `view["frame"]` and calls the gesture methods.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from oberik.client import _endpoints as ep
from oberik.client.sse import SseDecoder

if TYPE_CHECKING:
    from oberik.client.sync import Client

# A pointermove handler fires far more often than any network carries: moves are sent at most this often.
MOVE_INTERVAL = 1 / 60
# After a release, the page gets this long to settle before it is asked whether the person is done.
SETTLE_SECONDS = 0.6


def browser_frame(session_id: str, selector: str | None) -> ep.Req:
    params = {"selector": selector} if selector is not None else {}
    return ep.Req("GET", f"/chat/sessions/{ep._id(session_id)}/browser/frame", dict, params=params)


def browser_input(session_id: str, event: Mapping[str, Any]) -> ep.Req:
    return ep.Req("POST", f"/chat/sessions/{ep._id(session_id)}/browser/input", dict, json=dict(event))


def handoff_check(session_id: str) -> ep.Req:
    return ep.Req("POST", f"/chat/sessions/{ep._id(session_id)}/handoff/check", dict)


def stream_path(session_id: str, selector: str | None) -> str:
    from urllib.parse import urlencode

    tail = f"?{urlencode({'selector': selector})}" if selector is not None else ""
    return f"/chat/sessions/{ep._id(session_id)}/browser/stream{tail}"


PICTURE_FIELDS = ("clip", "origin", "region", "matched", "focused", "url")


def initial_view(handoff: Mapping[str, Any]) -> dict[str, Any]:
    """A controller's `view` before the first frame (see HandoffController)."""
    return {
        "handoff": dict(handoff),
        "frame": None,
        "clip": None,
        "origin": {"x": 0, "y": 0},
        "region": handoff.get("region", "viewport"),
        "matched": bool(handoff.get("matched")),
        "focused": False,
        "live": False,
        "checking": False,
        "auto_done": bool(handoff.get("auto_done")),
        "url": handoff.get("url", ""),
    }


def clip_fields(clip: Mapping[str, Any]) -> dict[str, Any]:
    return {k: clip[k] for k in PICTURE_FIELDS if k in clip}


def frame_fields(frame: Mapping[str, Any]) -> dict[str, Any]:
    return {"frame": frame["image"], "live": True, **clip_fields(frame)}


def gesture(kind: str, x: float, y: float, **fields: Any) -> dict[str, Any]:
    return {"type": kind, "x": x, "y": y, **fields}


class BrowserStream:
    """The page's live frames on a background thread: `on_frame(frame)` for every picture (the whole viewport),
    `on_clip(clip)` when the crop moves, `on_end(info)` when the hand-off or the page goes away. `close()` stops."""

    def __init__(
        self,
        client: Client,
        session_id: str,
        *,
        on_frame: Callable[[dict[str, Any]], Any] | None = None,
        on_clip: Callable[[dict[str, Any]], Any] | None = None,
        on_end: Callable[[dict[str, Any]], Any] | None = None,
        on_error: Callable[[Exception], Any] | None = None,
        selector: str | None = None,
    ) -> None:
        self._client = client
        self.session_id = session_id
        self.selector = selector
        self.on_frame, self.on_clip, self.on_end, self.on_error = on_frame, on_clip, on_end, on_error
        self.frames = 0
        self._closed = threading.Event()
        self._response: Any = None
        self.ended = threading.Event()
        self._thread = threading.Thread(target=self._main, name="oberik-browser-stream", daemon=True)
        self._thread.start()

    def _main(self) -> None:
        try:
            self._response = self._client._open_stream("GET", stream_path(self.session_id, self.selector))
            decoder = SseDecoder()
            for line in self._response.iter_lines():
                if self._closed.is_set():
                    break
                frame = decoder.feed(line)
                if frame is None:
                    continue
                if frame.event == "frame":
                    self.frames += 1
                    if self.on_frame:
                        self.on_frame(frame.data)
                elif frame.event == "clip":
                    if self.on_clip:
                        self.on_clip(frame.data)
                elif frame.event == "end":
                    if self.on_end:
                        self.on_end(frame.data)
                    break
        except Exception as exc:  # the connection dropped, or the route refused
            if not self._closed.is_set() and self.on_error:
                self.on_error(exc)
        finally:
            self.ended.set()
            if self._response is not None:
                self._response.close()

    def close(self) -> None:
        self._closed.set()
        if self._response is not None:
            self._response.close()
        self._thread.join(5)


class HandoffController:
    """One hand-off, watched and worked: `view` holds everything needed to render it.

    `view` keys: `handoff` (as announced), `frame` (the newest picture, base64 JPEG, whole viewport), `clip`,
    `origin`, `region` (selector | detected | viewport), `matched`, `focused` (the page holds the keyboard),
    `live` (frames are arriving), `checking` (a finished-check is in flight) and `auto_done` (checks are still
    worth asking for). Coordinates given to the gesture methods are pixels of the crop, in page pixels.
    """

    def __init__(
        self,
        client: Client,
        session_id: str,
        handoff: Mapping[str, Any],
        *,
        on_view: Callable[[dict[str, Any]], Any] | None = None,
        on_ended: Callable[[dict[str, Any]], Any] | None = None,
    ) -> None:
        self._client = client
        self.session_id = session_id
        self.on_view, self.on_ended = on_view, on_ended
        self._lock = threading.Lock()
        self._last_move = 0.0
        self._ended = False
        self.view: dict[str, Any] = initial_view(handoff)
        self._stream: BrowserStream | None = None
        self._open_stream(handoff.get("selector"))

    # --- the picture ---------------------------------------------------------------------------------------

    def _open_stream(self, selector: str | None) -> None:
        if self._stream is not None:
            self._stream.close()
        self._stream = BrowserStream(
            self._client,
            self.session_id,
            on_frame=self._frame,
            on_clip=self._clip,
            on_end=lambda info: self._end(resume=False, reason=str(info.get("reason"))),
            on_error=lambda exc: self._changed(live=False, error=str(exc)),
            selector=selector,
        )

    def _changed(self, **fields: Any) -> None:
        with self._lock:
            self.view.update(fields)
            snapshot = dict(self.view)
        if self.on_view:
            self.on_view(snapshot)

    def _clip(self, clip: Mapping[str, Any]) -> None:
        self._changed(**clip_fields(clip))

    def _frame(self, frame: Mapping[str, Any]) -> None:
        self._changed(**frame_fields(frame))

    def update(self, handoff: Mapping[str, Any]) -> None:
        """The agent re-announced its hand-off (same stream kept, picture kept) or closed it."""
        if not handoff.get("active", True):
            self._end(resume=False, reason="closed_by_agent")
            return
        same = handoff.get("selector") == self.view["handoff"].get("selector")
        self._changed(handoff=dict(handoff), auto_done=bool(handoff.get("auto_done")))
        if not same:
            self._open_stream(handoff.get("selector"))

    # --- what the person does ------------------------------------------------------------------------------

    def _send(self, event: dict[str, Any]) -> dict[str, Any]:
        if "x" in event:
            event.setdefault("origin", dict(self.view["origin"]))
        answer: dict[str, Any] = self._client._do(browser_input(self.session_id, event))
        if "focused" in answer:
            self._changed(focused=bool(answer["focused"]))
        return answer

    def click(self, x: float, y: float, *, button: str = "left", clicks: int = 1) -> dict[str, Any]:
        answer = self._send(gesture("click", x, y, button=button, clicks=clicks))
        self._after_release()
        return answer

    def press(self, x: float, y: float) -> dict[str, Any]:
        return self._send(gesture("pointer_down", x, y))

    def move(self, x: float, y: float) -> dict[str, Any] | None:
        """Relay a pointer move, dropping ones that come faster than ~60 a second."""
        now = time.monotonic()
        if now - self._last_move < MOVE_INTERVAL:
            return None
        self._last_move = now
        return self._send(gesture("pointer_move", x, y))

    def release(self, x: float, y: float) -> dict[str, Any]:
        answer = self._send(gesture("pointer_up", x, y))
        self._after_release()
        return answer

    def wheel(self, x: float, y: float, delta_y: float, delta_x: float = 0.0) -> dict[str, Any]:
        return self._send(gesture("wheel", x, y, delta_x=delta_x, delta_y=delta_y))

    def type(self, text: str) -> dict[str, Any]:
        """Printable text (a paste, an accent, anything behind AltGr) goes in as text, exactly as typed."""
        return self._send({"type": "type", "text": text})

    def key(self, key: str, modifiers: list[str] | None = None) -> dict[str, Any]:
        return self._send({"type": "key", "key": key, "modifiers": modifiers or []})

    # --- ending ------------------------------------------------------------------------------------------

    def _after_release(self) -> None:
        if self.view["auto_done"] and not self._ended:
            threading.Thread(target=self._check_later, daemon=True).start()

    def _check_later(self) -> None:
        time.sleep(SETTLE_SECONDS)
        self.check()

    def check(self) -> dict[str, Any]:
        """Ask whether the person has finished; ends the hand-off (resuming a blocking turn) when they have."""
        self._changed(checking=True)
        try:
            answer: dict[str, Any] = self._client._do(handoff_check(self.session_id))
        finally:
            self._changed(checking=False)
        if answer.get("done"):
            self.done()
        elif not answer.get("will_check_again"):
            self._changed(auto_done=False)  # the Done button is the way out now
        return answer

    def done(self) -> None:
        """The person is finished (the Done button): the viewer closes and a blocking turn may resume."""
        self._end(resume=bool(self.view["handoff"].get("blocking")), reason="done")

    def _end(self, *, resume: bool, reason: str) -> None:
        with self._lock:
            if self._ended:
                return
            self._ended = True
        if self._stream is not None and threading.current_thread() is not self._stream._thread:
            self._stream.close()
        self._changed(live=False)
        if self.on_ended:
            self.on_ended({"resume": resume, "reason": reason})

    def close(self) -> None:
        """Stop watching without ending anything."""
        with self._lock:
            self._ended = True
        if self._stream is not None:
            self._stream.close()
