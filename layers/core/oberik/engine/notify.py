"""Wake readers of a run's frame log the moment a writer in this process adds to it.

Frames live in DynamoDB, so readers in other processes find them by polling; a reader in the same
process as the writer (the local stack, one Lambda Web Adapter instance) need not wait for its next poll.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections import defaultdict

_lock = threading.Lock()
_waiters: dict[str, set[tuple[asyncio.AbstractEventLoop, asyncio.Event]]] = defaultdict(set)


def notify(run_id: str) -> None:
    with _lock:
        waiters = list(_waiters.get(run_id, ()))
    for loop, event in waiters:
        with contextlib.suppress(RuntimeError):  # the reader's loop has closed
            loop.call_soon_threadsafe(event.set)


async def wait(run_id: str, timeout: float) -> None:
    """Return when a writer in this process notifies `run_id`, or after `timeout` seconds."""
    loop = asyncio.get_running_loop()
    entry = (loop, asyncio.Event())
    with _lock:
        _waiters[run_id].add(entry)
    try:
        await asyncio.wait_for(entry[1].wait(), timeout)
    except TimeoutError:
        pass
    finally:
        with _lock:
            _waiters[run_id].discard(entry)
            if not _waiters[run_id]:
                _waiters.pop(run_id, None)
