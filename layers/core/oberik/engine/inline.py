"""The first step of a streamed turn, run where the turn was requested.

Starting an execution and getting its first Lambda running costs a few round trips before the model even
hears the question. For `POST /chat/stream` the process that claimed the conversation starts the first step
itself, at the same moment it starts the execution; when the execution's first Step task arrives it adopts
that step's verdict instead of calling the model again. Everything after the first step (and every step of
a blocking or resumed turn) runs in the state machine as before.

The runner holds a lease on the turn (`inline_until`, epoch milliseconds), renewed by a heartbeat while it
works. If it goes away (the process froze or died), the lease runs out and the Step task takes the step over
with a conditional write; a runner that finds its lease taken stops at once. The step's own writes are the
usual ones (frames conditional on their sequence number, progress on the turn), so a takeover costs at most
a repeated stretch of streamed text, never a lost turn.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

from oberik.domain.models import Message, Run, Turn
from oberik.observability import logger

LEASE_SECONDS = 30.0
HEARTBEAT_SECONDS = 5.0
# How long the requesting process holds back StartExecution for the model to take the request. Starting an
# execution is CPU work in this process on the local stack (and a round trip on AWS); done while the request
# is being sent, it delays what the person waits for. A provider slower than this to answer does not hold
# the execution back any longer.
OPEN_WAIT_SECONDS = 1.0

_running: dict[str, threading.Event] = {}  # run id -> set when this process's inline step is over
_lock = threading.Lock()


class LeaseLost(Exception):
    """The Step task took the step over; this runner must not write anything more."""


def now_ms() -> int:
    return int(time.time() * 1000)


def lease_until(now: float | None = None) -> int:
    return int(((now if now is not None else time.time()) + LEASE_SECONDS) * 1000)


class Lease:
    """This runner's hold on the turn's first step, kept alive by a heartbeat thread."""

    def __init__(self, store: Any, turn_id: str, until: int) -> None:
        self.store = store
        self.turn_id = turn_id
        self.until = until
        self.lost = False
        self.opened = threading.Event()  # set once the model has the request, or the step is over
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._beat, name=f"lease-{turn_id}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _beat(self) -> None:
        while not self._stop.wait(HEARTBEAT_SECONDS):
            with self._lock:
                if self.lost:
                    return
                new = lease_until()
                if self.store.move_inline_lease(self.turn_id, self.until, new):
                    self.until = new
                else:
                    self.lost = True
                    logger.warning("the first step's lease was taken over", turn_id=self.turn_id)
                    return

    def check(self) -> None:
        # Past its own expiry the lease may be taken at any moment, heartbeat or not: stop writing now.
        if self.lost or now_ms() > self.until:
            self.lost = True
            raise LeaseLost(self.turn_id)

    def release(self, result: dict[str, Any]) -> bool:
        """Hand the verdict to the execution; False when the lease was already gone."""
        self._stop.set()
        with self._lock:
            if self.lost:
                return False
            done = bool(self.store.finish_inline(self.turn_id, self.until, result))
            self.lost = not done
            return done


def running(run_id: str) -> threading.Event | None:
    """The event set when this process's inline step for `run_id` ends; None if it runs none."""
    with _lock:
        return _running.get(run_id)


@dataclass(frozen=True)
class Launched:
    thread: threading.Thread
    opened: threading.Event  # the model has the request (or the step ended first): start the execution now


def launch(store: Any, turn: Turn, run: Run, fresh: list[Message] | None = None) -> Launched:
    """Run the turn's first step on a thread of this process. `fresh`: the conversation was created with this
    turn and holds exactly these messages."""
    done = threading.Event()
    with _lock:
        _running[run.id] = done
    lease = Lease(store, turn.id, turn.inline_until)

    def work() -> None:
        from oberik.engine.handlers import engine_for

        try:
            lease.start()
            outcome = engine_for(store, turn, lease=lease).run(turn, run, fresh=fresh)
            result = {
                "run_id": run.id,
                "steps": turn.steps,
                "verdict": outcome.verdict,
                "wait_seconds": outcome.wait_seconds,
            }
            if not lease.release(result):
                logger.warning("first step finished after its lease was taken over", turn_id=turn.id)
        except LeaseLost:
            logger.warning("first step abandoned to the state machine", turn_id=turn.id)
        except Exception as e:
            # The model failed, or something else did: the Step task learns it the same way it would have.
            error = {"type": type(e).__name__, "message": str(e)[:2000]}
            logger.warning("first step failed", turn_id=turn.id, error=error["type"])
            lease.release({"run_id": run.id, "steps": turn.steps, "error": error})
        finally:
            lease.opened.set()
            done.set()
            with _lock:
                _running.pop(run.id, None)

    thread = threading.Thread(target=work, name=f"first-step-{turn.id}", daemon=True)
    thread.start()
    return Launched(thread, lease.opened)


def adopt(store: Any, turn: Turn, run: Run, *, poll: float = 0.1, max_poll: float = 1.0) -> Turn | dict[str, Any]:
    """For the execution's first Step task: wait for the inline runner's verdict and return it, or take the
    step over (return the fresh turn to run it) when the runner's lease has run out. A runner in this process
    is waited on directly (read once when it ends); one elsewhere, by reading the turn now and then."""
    delay = poll
    while True:
        result = turn.inline_result
        if result and result.get("run_id") == run.id and int(result.get("steps", -1)) == turn.steps:
            return result
        if not turn.inline_until:
            return turn  # no runner holds it (never did, or it released without a verdict for this step)
        if now_ms() > turn.inline_until and store.take_inline(turn.id, turn.inline_until):
            logger.warning("taking over the first step from a runner that went away", turn_id=turn.id)
            fresh = store.get_turn(turn.id)
            return fresh if fresh is not None else turn
        here = running(run.id)
        if here is not None:
            # Until it ends, or until its lease could have lapsed (then it is read again, above).
            here.wait(max(0.0, turn.inline_until / 1000 - time.time()) + 0.05)
        else:
            time.sleep(delay)
            delay = min(max_poll, delay * 1.5)
        fresh = store.get_turn(turn.id)
        if fresh is None:
            return turn
        turn = fresh
