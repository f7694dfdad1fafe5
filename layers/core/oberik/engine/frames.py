"""The one writer of a run's frame log. Token deltas are batched (about 50 ms or 2 KB a frame)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Protocol

# Frames are physically removed a day after they are written; a finished run's frames stop being
# served 10 minutes after it ended (readers check that themselves, since TTL deletion is lazy).
FRAME_RETENTION_SECONDS = 24 * 3600
REPLAY_WINDOW_SECONDS = 600


class FrameStore(Protocol):
    def last_frame_seq(self, run_id: str) -> int: ...

    def put_frame(
        self, run_id: str, seq: int, event: str, data: dict[str, Any], expires_at: int | None = None
    ) -> bool: ...


class FrameWriter:
    def __init__(
        self,
        store: FrameStore,
        run_id: str,
        *,
        batch_seconds: float = 0.05,
        batch_bytes: int = 2048,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self.run_id = run_id
        self.seq = store.last_frame_seq(run_id)
        self.batch_seconds = batch_seconds
        self.batch_bytes = batch_bytes
        self.clock = clock
        self._channel: str | None = None
        self._pending: list[str] = []
        self._pending_size = 0
        self._since = 0.0

    def emit(self, event: str, data: dict[str, Any]) -> int:
        self.flush()
        return self._write(event, data)

    def _write(self, event: str, data: dict[str, Any]) -> int:
        expires = int(time.time()) + FRAME_RETENTION_SECONDS
        while True:
            self.seq += 1
            if self.store.put_frame(self.run_id, self.seq, event, data, expires_at=expires):
                return self.seq
            # Someone (a retried writer) already holds this number: move past whatever is there.
            self.seq = max(self.seq, self.store.last_frame_seq(self.run_id))

    def delta(self, channel: str, text: str) -> None:
        """Queue streamed text; `channel` is the frame event ("token" or "reasoning")."""
        if not text:
            return
        if self._channel is not None and channel != self._channel:
            self.flush()
        if not self._pending:
            self._since = self.clock()
        self._channel = channel
        self._pending.append(text)
        self._pending_size += len(text.encode())
        if self._pending_size >= self.batch_bytes or self.clock() - self._since >= self.batch_seconds:
            self.flush()

    def flush(self) -> None:
        if self._pending and self._channel:
            text = "".join(self._pending)
            self._pending, self._pending_size = [], 0
            self._write(self._channel, {"delta": text})
