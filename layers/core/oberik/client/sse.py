"""A Server-Sent Events decoder that is fed one line at a time and does no I/O of its own."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Frame:
    """One event: `id` is the frame's sequence number within its run (None on a few server-made frames)."""

    event: str
    data: dict[str, Any]
    id: int | None = None


class SseDecoder:
    """Collects field lines until a blank line, then hands back the event.

    Comment lines (`: keepalive`) are counted and dropped. A block that never got its blank line (the
    connection broke in the middle of it) is simply never returned, so a reader that reconnects from the last
    returned id neither loses nor repeats a frame. `retry` keeps the last reconnection hint, in milliseconds.
    """

    def __init__(self) -> None:
        self._event: str | None = None
        self._data: list[str] = []
        self._id: str | None = None
        self.retry: int | None = None
        self.comments = 0

    def feed(self, line: str) -> Frame | None:
        line = line.rstrip("\r\n")
        if line == "":
            return self._dispatch()
        if line.startswith(":"):
            self.comments += 1
            return None
        name, sep, value = line.partition(":")
        if sep and value.startswith(" "):
            value = value[1:]
        if name == "event":
            self._event = value
        elif name == "data":
            self._data.append(value)
        elif name == "id":
            self._id = value
        elif name == "retry" and value.strip().isdigit():
            self.retry = int(value.strip())
        return None

    def _dispatch(self) -> Frame | None:
        event, data, raw_id = self._event, self._data, self._id
        self._event, self._data, self._id = None, [], None
        if event is None and not data:
            return None
        try:
            payload = json.loads("\n".join(data)) if data else {}
        except ValueError:
            payload = {"raw": "\n".join(data)}
        if not isinstance(payload, dict):
            payload = {"value": payload}
        frame_id = int(raw_id) if raw_id is not None and raw_id.strip().isdigit() else None
        return Frame(event or "message", payload, frame_id)
