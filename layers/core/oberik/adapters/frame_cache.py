"""Frames this process wrote, kept in memory so a reader in the same process need not read them back.

The frame log in DynamoDB stays the only source of truth: a frame is cached only after its conditional
write succeeded, so cached frame `n` is exactly the log's frame `n`. A reader takes frames from here only
while they run on without a gap from where it is; anything else (frames another process wrote, a run this
process never wrote) is read from the table. On AWS the writer (the step function) and the reader (the
stream function) are different processes, so this only saves work where they share one: `oberik dev`,
the tests, a single-process deployment.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any


class FrameCache:
    def __init__(self, max_frames: int = 200_000) -> None:
        self.max_frames = max_frames
        self._runs: OrderedDict[str, dict[int, dict[str, Any]]] = OrderedDict()
        self._count = 0
        self._lock = threading.Lock()

    def add(self, run_id: str, frame: dict[str, Any]) -> None:
        with self._lock:
            frames = self._runs.get(run_id)
            if frames is None:
                frames = self._runs[run_id] = {}
            else:
                self._runs.move_to_end(run_id)
            if frame["seq"] not in frames:
                self._count += 1
            frames[frame["seq"]] = frame
            while self._count > self.max_frames and len(self._runs) > 1:
                _, evicted = self._runs.popitem(last=False)
                self._count -= len(evicted)

    def after(self, run_id: str, after_seq: int, limit: int | None = None) -> list[dict[str, Any]]:
        """Frames after `after_seq` with no gap, as far as this process has them (maybe none)."""
        out: list[dict[str, Any]] = []
        with self._lock:
            frames = self._runs.get(run_id)
            if not frames:
                return out
            seq = after_seq + 1
            while seq in frames and (limit is None or len(out) < limit):
                out.append(frames[seq])
                seq += 1
        return out

    def last_seq(self, run_id: str) -> int | None:
        """The highest frame number this process wrote for the run (the log may hold later ones), or None."""
        with self._lock:
            frames = self._runs.get(run_id)
            return max(frames) if frames else None

    def forget(self, run_id: str) -> None:
        with self._lock:
            evicted = self._runs.pop(run_id, None)
            if evicted:
                self._count -= len(evicted)


FRAMES = FrameCache()
