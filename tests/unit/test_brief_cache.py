"""adapters.brief_cache: values served for a few seconds at most, refreshed in the background before they
lapse, forgotten at once when this process changes them."""

from __future__ import annotations

import threading
import time

from oberik.adapters.brief_cache import BriefCache


class Source:
    def __init__(self) -> None:
        self.value = "v1"
        self.reads = 0
        self.gate: threading.Event | None = None  # when set, a read waits on it (a slow read)

    def read(self) -> str:
        self.reads += 1
        if self.gate is not None:
            self.gate.wait(5)
        return self.value


def wait_until(check, timeout: float = 5.0) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.01)
    return bool(check())


def test_a_value_is_read_once_and_served_until_it_lapses() -> None:
    cache: BriefCache[str] = BriefCache(ttl=0.3, refresh_after=10)  # no early refresh in this test
    src = Source()
    assert cache.get("p", src.read) == "v1"
    src.value = "v2"
    assert cache.get("p", src.read) == "v1" and src.reads == 1
    time.sleep(0.35)
    assert cache.get("p", src.read) == "v2" and src.reads == 2


def test_past_refresh_after_the_value_is_served_and_read_again_in_the_background() -> None:
    cache: BriefCache[str] = BriefCache(ttl=5, refresh_after=0.1, refresh_delay=0.05)
    src = Source()
    cache.get("p", src.read)
    time.sleep(0.15)
    src.value = "v2"
    src.gate = threading.Event()  # the background read is slow ...
    assert cache.get("p", src.read) == "v1"  # ... and the caller does not wait for it
    assert cache.get("p", src.read) == "v1"  # one refresh at a time
    src.gate.set()
    assert wait_until(lambda: cache.get("p", src.read) == "v2")
    assert src.reads == 2


def test_forget_makes_the_next_use_read_and_a_read_racing_it_is_not_kept() -> None:
    cache: BriefCache[str] = BriefCache(ttl=5, refresh_after=10)
    src = Source()
    cache.get("p", src.read)
    cache.forget("p")
    src.value = "v2"
    assert cache.get("p", src.read) == "v2"

    # a read that began before a change and ends after it must not be kept
    src.gate = threading.Event()
    cache.forget("p")
    slow = threading.Thread(target=cache.get, args=("p", src.read))
    slow.start()
    assert wait_until(lambda: src.reads == 3)
    cache.forget("p")  # the change lands while that read is out
    src.value = "v3"
    src.gate.set()
    slow.join(5)
    src.gate = None
    assert cache.get("p", src.read) == "v3"


def test_nothing_found_is_not_kept_and_fresh_reads_now() -> None:
    cache: BriefCache[str] = BriefCache(ttl=5)
    reads = []
    assert cache.get("missing", lambda: reads.append(1)) is None  # type: ignore[func-returns-value]
    assert cache.get("missing", lambda: reads.append(1)) is None  # type: ignore[func-returns-value]
    assert len(reads) == 2
    src = Source()
    cache.get("p", src.read)
    src.value = "v2"
    assert cache.get("p", src.read, fresh=True) == "v2"
    assert cache.get("p", src.read) == "v2"
