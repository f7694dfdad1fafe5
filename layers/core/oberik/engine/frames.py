"""The one writer of a run's frame log.

Token deltas are batched (about 50 ms or 2 KB a frame) so a fast model does not cost one write per token,
but the first delta of a stretch goes out at once (time to first token matters more than write count).
Writing happens on a flusher thread, so a slow write makes the next frame bigger rather than holding up
the model's stream.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

from oberik.adapters.frame_cache import FRAMES
from oberik.domain.models import FRAME_RETENTION_SECONDS
from oberik.engine import notify

TERMINAL_EVENTS = frozenset({"done", "cancelled", "error"})


class FrameStore(Protocol):
    def last_frame_seq(self, run_id: str) -> int: ...

    def put_frame(
        self, run_id: str, seq: int, event: str, data: dict[str, Any], expires_at: int | None = None
    ) -> bool: ...


class FrameWriter:
    """Writes one run's frames in order. `delta` only queues text, so reading the model's stream never waits
    on a write; a flusher thread turns the queue into frames. `emit` writes a frame at once, after whatever
    text is queued, so frames keep the order things happened in."""

    def __init__(
        self,
        store: FrameStore,
        run_id: str,
        *,
        batch_seconds: float = 0.05,
        batch_bytes: int = 2048,
        clock: Callable[[], float] = time.monotonic,
        on_write: Callable[[int], None] | None = None,
        start_seq: int | None = None,
    ) -> None:
        self.store = store
        self.run_id = run_id
        # `start_seq`: the caller knows the log's last frame. Too low is safe (a taken number is skipped past),
        # which is why the last frame this process wrote to the log will do as well as reading it back.
        if start_seq is None:
            start_seq = FRAMES.last_seq(run_id)
        self.seq = start_seq if start_seq is not None else store.last_frame_seq(run_id)
        self.batch_seconds = batch_seconds
        self.batch_bytes = batch_bytes
        self.clock = clock
        self.on_write = on_write
        self._queue_lock = threading.Lock()  # guards the queued text; never held while writing
        self._write_lock = threading.RLock()  # one write at a time, in sequence order
        self._queued: list[tuple[str, str]] = []  # (channel, text), in arrival order
        self._queued_size = 0
        self._since = 0.0  # when the oldest queued text arrived
        self._urgent = False  # queued text that should go out now (the first after a quiet spell)
        self._last_write = float("-inf")  # the very first delta is always sent at once
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._flusher: threading.Thread | None = None

    # --- frames -------------------------------------------------------------------------------

    def emit(self, event: str, data: dict[str, Any]) -> int:
        with self._write_lock:
            self._write_queued(force=True)
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
        now = self.clock()
        with self._queue_lock:
            if not self._queued:
                self._since = now
                self._urgent = now - self._last_write >= self.batch_seconds
            self._queued.append((channel, text))
            self._queued_size += len(text.encode())
            due = self._urgent or self._queued_size >= self.batch_bytes
        self._ensure_flusher()
        if due:
            self._wake.set()

    def flush(self) -> None:
        with self._write_lock:
            self._write_queued(force=True)

    def _write_queued(self, *, force: bool) -> None:
        """Write queued text as frames (one per run of the same channel) if it is due, or always with force."""
        with self._queue_lock:
            if not self._queued:
                return
            due = self._urgent or self._queued_size >= self.batch_bytes
            if not (force or due or self.clock() - self._since >= self.batch_seconds):
                return
            taken, self._queued, self._queued_size, self._urgent = self._queued, [], 0, False
        merged: list[tuple[str, list[str]]] = []
        for channel, text in taken:
            if merged and merged[-1][0] == channel:
                merged[-1][1].append(text)
            else:
                merged.append((channel, [text]))
        for channel, parts in merged:
            self._write(channel, {"delta": "".join(parts)})

    def _ensure_flusher(self) -> None:
        if self._flusher is None:
            with self._queue_lock:
                if self._flusher is None:
                    self._flusher = threading.Thread(target=self._flush_loop, name=f"frames-{self.run_id}", daemon=True)
                    self._flusher.start()

    def _flush_loop(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self.batch_seconds / 2)
            self._wake.clear()
            with self._write_lock:
                self._write_queued(force=False)

    def close(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._flusher is not None:
            self._flusher.join(timeout=5)
            self._flusher = None
        self.flush()
