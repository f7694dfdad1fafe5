"""Values kept in memory for a few seconds (a project, its webhook tools), refreshed before they lapse.

Every request and every step needs them and they change rarely. A value is served for at most `ttl` seconds
after it was read; once it is older than `refresh_after`, the next use schedules a read in the background,
so a value in steady use is never read on a request's own time. The read waits `refresh_delay` first: in one
process (the local stack, a Lambda instance) threads share the interpreter, and a read running beside the
request that prompted it slowed that request almost as much as reading in line did (measured: ~9 ms of a
~25 ms path). A change made through this process forgets the value at once (and a read that raced the change
is not kept); one made elsewhere shows within `ttl`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Generic, TypeVar

from oberik.observability import logger

V = TypeVar("V")


class BriefCache(Generic[V]):
    def __init__(
        self, ttl: float, refresh_after: float | None = None, refresh_delay: float = 0.25, name: str = "cache"
    ) -> None:
        self.ttl = ttl
        self.refresh_after = refresh_after if refresh_after is not None else ttl / 2
        self.refresh_delay = refresh_delay
        self.name = name
        self._values: dict[str, tuple[float, V]] = {}
        self._changes: dict[str, int] = {}  # key -> forgets so far, so a read racing one is not kept
        self._refreshing: set[str] = set()
        self._lock = threading.Lock()

    def get(self, key: str, read: Callable[[], V | None], *, fresh: bool = False) -> V | None:
        """The kept value, or `read()` (kept unless None). `fresh`: read now whatever is kept."""
        now = time.monotonic()
        with self._lock:
            hit = self._values.get(key)
            refresh = (
                hit is not None
                and not fresh
                and self.refresh_after <= now - hit[0] < self.ttl
                and key not in self._refreshing
            )
            if refresh:
                self._refreshing.add(key)
        if hit is not None and not fresh and now - hit[0] < self.ttl:
            if refresh:
                timer = threading.Timer(self.refresh_delay, self._refresh, args=(key, read))
                timer.name, timer.daemon = f"{self.name}-refresh", True
                timer.start()
            return hit[1]
        return self._read(key, read)

    def forget(self, key: str) -> None:
        with self._lock:
            self._values.pop(key, None)
            self._changes[key] = self._changes.get(key, 0) + 1

    def _read(self, key: str, read: Callable[[], V | None]) -> V | None:
        with self._lock:
            before = self._changes.get(key, 0)
        started = time.monotonic()
        value = read()
        with self._lock:
            if value is not None and self._changes.get(key, 0) == before:
                self._values[key] = (started, value)
        return value

    def _refresh(self, key: str, read: Callable[[], V | None]) -> None:
        try:
            self._read(key, read)
        except Exception:
            logger.exception("background refresh failed; the next use reads again", cache=self.name, key=key)
        finally:
            with self._lock:
                self._refreshing.discard(key)
