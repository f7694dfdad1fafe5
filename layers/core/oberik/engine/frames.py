"""The one writer of a run's frame log.

Token deltas are batched (about 50 ms or 2 KB a frame) so a fast model does not cost one write per token,
but the first delta of a stretch goes out at once (time to first token matters more than write count),
and a background flush makes sure no text waits longer than the batch window for the next delta.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

from oberik.engine import notify

# Frames are physically removed a day after they are written; a finished run's frames stop being
# served 10 minutes after it ended (readers check that themselves, since TTL deletion is lazy).
FRAME_RETENTION_SECONDS = 24 * 3600
TERMINAL_EVENTS = frozenset({"done", "cancelled", "error"})


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
        on_write: Callable[[int], None] | None = None,
    ) -> None:
        self.store = store
        self.run_id = run_id
        self.seq = store.last_frame_seq(run_id)
        self.batch_seconds = batch_seconds
        self.batch_bytes = batch_bytes
        self.clock = clock
        self.on_write = on_write
        self._lock = threading.RLock()
        self._channel: str | None = None
        self._pending: list[str] = []
        self._pending_size = 0
        self._since = 0.0
        self._last_write = float("-inf")  # the very first delta is always sent at once
        self._stop = threading.Event()
        self._flusher: threading.Thread | None = None

    # --- frames -------------------------------------------------------------------------------

    def emit(self, event: str, data: dict[str, Any]) -> int:
        with self._lock:
            self._flush_locked()
            return self._write(event, data)

    def _write(self, event: str, data: dict[str, Any]) -> int:
        expires = int(time.time()) + FRAME_RETENTION_SECONDS
        while True:
            self.seq += 1
            if self.store.put_frame(self.run_id, self.seq, event, data, expires_at=expires):
                break
            # Someone (a retried writer, a cancel) already holds this number: move past whatever is there.
            self.seq = max(self.seq, self.store.last_frame_seq(self.run_id))
        self._last_write = self.clock()
        notify.notify(self.run_id)
        if self.on_write is not None:
            self.on_write(self.seq)
        return self.seq

    # --- streamed text ------------------------------------------------------------------------

    def delta(self, channel: str, text: str) -> None:
        """Queue streamed text; `channel` is the frame event ("token" or "reasoning")."""
        if not text:
            return
        with self._lock:
            if self._channel is not None and channel != self._channel:
                self._flush_locked()
            now = self.clock()
            if not self._pending:
                self._since = now
            self._channel = channel
            self._pending.append(text)
            self._pending_size += len(text.encode())
            quiet = now - self._last_write >= self.batch_seconds  # the first delta after a pause goes at once
            if quiet or self._pending_size >= self.batch_bytes or now - self._since >= self.batch_seconds:
                self._flush_locked()
        self._ensure_flusher()

    def flush(self) -> None:
        with self._lock:
            self._flush_locked()

    def _flush_locked(self) -> None:
        if self._pending and self._channel:
            text = "".join(self._pending)
            self._pending, self._pending_size = [], 0
            self._write(self._channel, {"delta": text})

    def _ensure_flusher(self) -> None:
        if self._flusher is None:
            self._flusher = threading.Thread(target=self._flush_loop, name=f"frames-{self.run_id}", daemon=True)
            self._flusher.start()

    def _flush_loop(self) -> None:
        while not self._stop.wait(self.batch_seconds / 2):
            with self._lock:
                if self._pending and self.clock() - self._since >= self.batch_seconds:
                    self._flush_locked()

    def close(self) -> None:
        self._stop.set()
        if self._flusher is not None:
            self._flusher.join(timeout=2)
            self._flusher = None
        self.flush()
