"""`AsyncHandoffController`: the asyncio twin of `oberik.client.handoff.HandoffController`, for an AsyncClient.

The page's frames are read by a task of the running loop; the gesture methods, `check`, `done` and `close` are
coroutines. `on_view` and `on_ended` may be plain functions or coroutine functions.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from oberik.client.handoff import (
    MOVE_INTERVAL,
    SETTLE_SECONDS,
    browser_input,
    clip_fields,
    frame_fields,
    gesture,
    handoff_check,
    initial_view,
)

if TYPE_CHECKING:
    from oberik.client.aio import AsyncClient


class AsyncHandoffController:
    """One hand-off, watched and worked, without threads: `view` as in HandoffController. Start it with
    `await client.sessions.handoff(...)` (or `start()`); `close()` stops watching without ending anything."""

    def __init__(
        self,
        client: AsyncClient,
        session_id: str,
        handoff: Mapping[str, Any],
        *,
        on_view: Callable[[dict[str, Any]], Any] | None = None,
        on_ended: Callable[[dict[str, Any]], Any] | None = None,
    ) -> None:
        self._client = client
        self.session_id = session_id
        self.on_view, self.on_ended = on_view, on_ended
        self.view: dict[str, Any] = initial_view(handoff)
        self._last_move = 0.0
        self._ended = False
        self._watcher: asyncio.Task[None] | None = None
        self._later: set[asyncio.Task[Any]] = set()

    async def start(self) -> AsyncHandoffController:
        self._watch_from(self.view["handoff"].get("selector"))
        return self

    # --- the picture ---------------------------------------------------------------------------------------

    def _watch_from(self, selector: str | None) -> None:
        if self._watcher is not None:
            self._watcher.cancel()
        self._watcher = asyncio.get_running_loop().create_task(self._watch(selector))

    async def _watch(self, selector: str | None) -> None:
        try:
            async for event, data in self._client.sessions.browser_stream(self.session_id, selector):
                if event == "frame":
                    await self._changed(**frame_fields(data))
                elif event == "clip":
                    await self._changed(**clip_fields(data))
                elif event == "end":
                    await self._end(resume=False, reason=str(data.get("reason")))
                    return
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the connection dropped, or the route refused
            await self._changed(live=False, error=str(exc))

    async def _changed(self, **fields: Any) -> None:
        self.view.update(fields)
        await _call(self.on_view, dict(self.view))

    async def update(self, handoff: Mapping[str, Any]) -> None:
        """The agent re-announced its hand-off (same stream kept, picture kept) or closed it."""
        if not handoff.get("active", True):
            await self._end(resume=False, reason="closed_by_agent")
            return
        same = handoff.get("selector") == self.view["handoff"].get("selector")
        await self._changed(handoff=dict(handoff), auto_done=bool(handoff.get("auto_done")))
        if not same:
            self._watch_from(handoff.get("selector"))

    # --- what the person does ------------------------------------------------------------------------------

    async def _send(self, event: dict[str, Any]) -> dict[str, Any]:
        if "x" in event:
            event.setdefault("origin", dict(self.view["origin"]))
        answer: dict[str, Any] = await self._client._do(browser_input(self.session_id, event))
        if "focused" in answer:
            await self._changed(focused=bool(answer["focused"]))
        return answer

    async def click(self, x: float, y: float, *, button: str = "left", clicks: int = 1) -> dict[str, Any]:
        answer = await self._send(gesture("click", x, y, button=button, clicks=clicks))
        self._after_release()
        return answer

    async def press(self, x: float, y: float) -> dict[str, Any]:
        return await self._send(gesture("pointer_down", x, y))

    async def move(self, x: float, y: float) -> dict[str, Any] | None:
        """Relay a pointer move, dropping ones that come faster than ~60 a second."""
        now = time.monotonic()
        if now - self._last_move < MOVE_INTERVAL:
            return None
        self._last_move = now
        return await self._send(gesture("pointer_move", x, y))

    async def release(self, x: float, y: float) -> dict[str, Any]:
        answer = await self._send(gesture("pointer_up", x, y))
        self._after_release()
        return answer

    async def wheel(self, x: float, y: float, delta_y: float, delta_x: float = 0.0) -> dict[str, Any]:
        return await self._send(gesture("wheel", x, y, delta_x=delta_x, delta_y=delta_y))

    async def type(self, text: str) -> dict[str, Any]:
        """Printable text (a paste, an accent, anything behind AltGr) goes in as text, exactly as typed."""
        return await self._send({"type": "type", "text": text})

    async def key(self, key: str, modifiers: list[str] | None = None) -> dict[str, Any]:
        return await self._send({"type": "key", "key": key, "modifiers": modifiers or []})

    # --- ending ------------------------------------------------------------------------------------------

    def _after_release(self) -> None:
        if self.view["auto_done"] and not self._ended:
            task = asyncio.get_running_loop().create_task(self._check_later())
            self._later.add(task)
            task.add_done_callback(self._later.discard)

    async def _check_later(self) -> None:
        await asyncio.sleep(SETTLE_SECONDS)
        if not self._ended:
            await self.check()

    async def check(self) -> dict[str, Any]:
        """Ask whether the person has finished; ends the hand-off (resuming a blocking turn) when they have."""
        await self._changed(checking=True)
        try:
            answer: dict[str, Any] = await self._client._do(handoff_check(self.session_id))
        finally:
            await self._changed(checking=False)
        if answer.get("done"):
            await self.done()
        elif not answer.get("will_check_again"):
            await self._changed(auto_done=False)  # the Done button is the way out now
        return answer

    async def done(self) -> None:
        """The person is finished (the Done button): the viewer closes and a blocking turn may resume."""
        await self._end(resume=bool(self.view["handoff"].get("blocking")), reason="done")

    async def _end(self, *, resume: bool, reason: str) -> None:
        if self._ended:
            return
        self._ended = True
        await self._stop_watching()
        await self._changed(live=False)
        await _call(self.on_ended, {"resume": resume, "reason": reason})

    async def _stop_watching(self) -> None:
        watcher, self._watcher = self._watcher, None
        if watcher is not None and watcher is not asyncio.current_task():
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await watcher

    async def close(self) -> None:
        """Stop watching without ending anything."""
        self._ended = True
        await self._stop_watching()
        for task in list(self._later):
            task.cancel()


async def _call(callback: Callable[[dict[str, Any]], Any] | None, payload: dict[str, Any]) -> None:
    if callback is None:
        return
    result = callback(payload)
    if inspect.isawaitable(result):
        await result
