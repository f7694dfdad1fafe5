"""What happens to a run from outside its turn: cancel, and noticing that whatever ran it went away."""

from __future__ import annotations

import time
from typing import Any

from oberik.domain.errors import Conflict
from oberik.domain.models import TERMINAL_RUN, Run
from oberik.engine.frames import FrameWriter
from oberik.observability import logger

ALIVE_EXECUTION = "RUNNING"
# A turn's execution starts moments after the turn is written (engine.inline holds it back at most a second,
# and StartExecution is retried for a few more). A turn this old with no execution at all never got one: the
# process that claimed it went away in between.
NEVER_STARTED_SECONDS = 120.0


def _end(store: Any, run: Run, status: str, event: str, data: dict[str, Any], **fields: Any) -> bool:
    """Move a running run to `status` exactly once, freeing its conversation, then write its terminal frame."""
    # Cancelled and lost turns send no turn.stopped: the spec gives them no reason, and nothing was answered.
    if not store.end_run(run.id, run.session_id, {"status": status, "ended_at": time.time(), **fields}):
        return False
    store.update_turn(run.turn_id, status="cancelled" if status == "cancelled" else "failed")
    store.mark_turn_abandoned(run.session_id, run.turn_id)
    FrameWriter(store, run.id).emit(event, data)
    return True


def cancel(store: Any, orchestrator: Any, run: Run) -> Run:
    """Stop a streaming run. Spend stops at the step's next look at the flag; the turn is never resumed."""
    if run.blocking:
        raise Conflict(
            f"Run {run.id} belongs to a blocking POST /chat, which holds no resumable run to cancel, and closing "
            "that request does not stop it either. Start turns a user may want to stop with POST /chat/stream.",
            code="blocking_turn",
        )
    if run.status in TERMINAL_RUN:
        return run
    store.update_run(run.id, cancel_requested=True)
    if _end(store, run, "cancelled", "cancelled", {"run_id": run.id, "session_id": run.session_id}):
        turn = store.get_turn(run.turn_id)
        if turn is not None and turn.execution_arn:
            orchestrator.stop(turn.execution_arn, "cancelled by the user")
        logger.info("run cancelled", run_id=run.id, session_id=run.session_id)
    return store.get_run(run.id) or run


def mark_lost_if_dead(store: Any, orchestrator: Any, run: Run) -> Run:
    """A run still marked running whose execution has ended was lost: nothing will ever finish it."""
    if run.status != "running":
        return run
    turn = store.get_turn(run.turn_id)
    if turn is None or not turn.execution_arn:
        return run
    status = orchestrator.status(turn.execution_arn)
    if status == ALIVE_EXECUTION or (status is None and time.time() - turn.created_at < NEVER_STARTED_SECONDS):
        return run
    fresh = store.get_run(run.id)
    if fresh is None or fresh.status != "running":
        return fresh or run
    why = f"its execution is {status.lower()}" if status else "its execution never started"
    detail = (
        f"The turn stopped before it finished: whatever was running it went away ({why}). "
        "Nothing was answered; send the message again."
    )
    if _end(
        store,
        fresh,
        "lost",
        "error",
        {"detail": detail, "code": "stream_lost", "run_id": run.id, "session_id": run.session_id},
        error={"code": "stream_lost", "detail": detail},
    ):
        logger.warning("run lost", run_id=run.id, execution_status=status)
    return store.get_run(run.id) or fresh
