"""Server-Sent Events over a run's frame log. The endpoint reads the log; it never generates anything."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from typing import Any

import anyio
from starlette.requests import Request

from oberik.adapters.frame_cache import FRAMES
from oberik.domain.models import Run
from oberik.engine import inline, notify
from oberik.engine.frames import TERMINAL_EVENTS
from oberik.engine.runs import mark_lost_if_dead
from oberik.settings import Settings

# How long after a run is marked ended its terminal frame may still be on its way. The finishing task writes
# the frame right after ending the run, but on a loaded machine "right after" was measured at over 5 s (20
# concurrent turns on the 2-core local stack), and a reader that gives up early reports a failure that is not one.
TERMINAL_GRACE_SECONDS = 30.0
# Frames read per query: the first of a long replay goes out without waiting for the whole log, and while a
# reader is catching up each read takes more (every query sorts through the run's frames locally, and on AWS
# every read is a round trip), up to MAX_REPLAY_PAGE.
REPLAY_PAGE = 500
MAX_REPLAY_PAGE = 4000
# How often a reader looks at the table while this process itself writes the run's frames.
LOCAL_WRITER_POLL_SECONDS = 1.0


def encode(seq: int | None, event: str, data: dict[str, Any]) -> bytes:
    head = f"id: {seq}\n" if seq is not None else ""
    return f"{head}event: {event}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


def expired(run: Run, settings: Settings, now: float | None = None) -> bool:
    return run.ended_at is not None and (now or time.time()) - run.ended_at > settings.replay_window_seconds


def expired_frame(run: Run) -> bytes:
    return encode(
        None,
        "error",
        {
            "detail": f"This turn has finished and its stream is no longer kept; the answer is in conversation "
            f"{run.session_id} (GET /chat/sessions/{run.session_id}/messages).",
            "code": "stream_expired",
            "run_id": run.id,
            "session_id": run.session_id,
        },
    )


async def stream_run(
    request: Request, store: Any, orchestrator: Any, run: Run, after: int, settings: Settings
) -> AsyncIterator[bytes]:
    """Send the run's frames after `after`, following live until a terminal frame (or the window closes)."""
    if run.status != "running" and expired(run, settings):
        yield expired_frame(run)
        return
    last = after
    started = last_sent = last_liveness = time.monotonic()
    page = REPLAY_PAGE
    while True:
        # Frames this process wrote come from memory, on the loop; only the table is read on a worker thread.
        frames = FRAMES.after(run.id, last, page) or await anyio.to_thread.run_sync(
            store.frames_after, run.id, last, page
        )
        for frame in frames:
            last = frame["seq"]
            yield encode(frame["seq"], frame["event"], frame["data"])
            last_sent = time.monotonic()
            if frame["event"] in TERMINAL_EVENTS:
                return
        if await request.is_disconnected():
            # A first step this process runs for the turn goes on without the client; on a Lambda, ending the
            # response would freeze it, so the response ends when that step does.
            first = inline.running(run.id)
            if first is not None:
                await anyio.to_thread.run_sync(first.wait)
            return
        if len(frames) >= page:
            page = min(page * 4, MAX_REPLAY_PAGE)
            continue  # more is already written: read on without waiting
        page = REPLAY_PAGE
        now = time.monotonic()
        if settings.sse_window_seconds and now - started >= settings.sse_window_seconds:
            # Buffered deployments: end this response; the client reconnects with Last-Event-ID.
            yield b"retry: 1000\n\n"
            return
        if now - last_liveness >= settings.liveness_check_seconds:
            last_liveness = now
            current = await anyio.to_thread.run_sync(store.get_run, run.id)
            if current is not None and current.status == "running":
                await anyio.to_thread.run_sync(mark_lost_if_dead, store, orchestrator, current)
            elif current is not None and not frames:
                # Ended: its terminal frame is written just after the run is marked ended, so give it a moment;
                # a run that ended long ago with no terminal frame will never get one.
                tail = await anyio.to_thread.run_sync(store.frames_after, run.id, last)
                if not tail and time.time() - (current.ended_at or 0) > TERMINAL_GRACE_SECONDS:
                    yield encode(
                        None,
                        "error",
                        {
                            "detail": f"The turn ended ({current.status}) without a final frame; read the conversation "
                            f"{run.session_id} for what was stored.",
                            "code": f"stream_{current.status}"
                            if current.status in ("cancelled", "failed")
                            else "stream_failed",
                            "run_id": run.id,
                            "session_id": run.session_id,
                        },
                    )
                    return
        if now - last_sent >= settings.keepalive_seconds:
            yield b": keepalive\n\n"
            last_sent = now
        # While this process runs the step that writes the frames (the first step of a streamed turn), its
        # writer wakes this reader itself; the table is only looked at now and then, for a frame written
        # elsewhere (a cancel, a takeover).
        here = inline.running(run.id) is not None
        poll = max(settings.stream_poll_seconds, LOCAL_WRITER_POLL_SECONDS) if here else settings.stream_poll_seconds
        # ... but never past the next keepalive or liveness check.
        due = min(last_sent + settings.keepalive_seconds, last_liveness + settings.liveness_check_seconds)
        await notify.wait(run.id, max(0.01, min(poll, due - time.monotonic())))
