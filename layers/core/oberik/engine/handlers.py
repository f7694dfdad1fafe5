"""The functions the state machine's Lambda tasks call. Each takes the task's payload and returns its result.

Order matters wherever a turn stops: the conversation is freed (or parked) before the run is marked ended,
and the terminal frame is written last, so a client that sees the turn end can act on it at once.
"""

from __future__ import annotations

import json
import time
from typing import Any

from oberik.adapters.dynamodb import DynamoStore
from oberik.adapters.stepfunctions import StepFunctionsOrchestrator
from oberik.domain import pauses
from oberik.domain.chat import ChatResponse
from oberik.domain.errors import NotFound
from oberik.domain.models import Run, Session, Turn
from oberik.engine import citations, deliveries, inline, projects
from oberik.engine.frames import FrameWriter
from oberik.engine.models import resolver_for
from oberik.engine.step import StepEngine, _message
from oberik.observability import logger
from oberik.settings import get_settings


def _load(event: dict[str, Any]) -> tuple[DynamoStore, Turn, Run]:
    store = DynamoStore(get_settings())
    turn_id, run_id = str(event.get("turn_id")), event.get("run_id")
    if run_id:
        turn, run = store.get_turn_and_run(turn_id, str(run_id))
        if turn is not None and turn.run_id != run_id:  # a stale event for an earlier run of this turn
            run = store.get_run(turn.run_id)
    else:
        turn = store.get_turn(turn_id)
        run = store.get_run(turn.run_id) if turn is not None else None
    if turn is None:
        raise NotFound(f"turn {event.get('turn_id')} does not exist")
    if run is None:
        raise NotFound(f"run {turn.run_id} does not exist")
    return store, turn, run


def _model_for(store: DynamoStore, project_id: str) -> Any:
    project = projects.load(store, project_id)
    return resolver_for(project.settings.providers if project else {}, get_settings())


def _result(payload: dict[str, Any], turn: Turn, verdict: str, wait_seconds: int = 0) -> dict[str, Any]:
    return {
        "turn_id": turn.id,
        "run_id": turn.run_id,
        "verdict": verdict,
        "wait_seconds": wait_seconds,
        "execution_steps": int(payload.get("execution_steps", 0)) + (1 if verdict in ("step", "wait") else 0),
    }


class FirstStepFailed(Exception):
    """The first step, run where the turn was requested, failed; the turn's error says how."""


def engine_for(store: DynamoStore, turn: Turn, *, lease: Any = None) -> StepEngine:
    settings = get_settings()
    return StepEngine(
        store,
        _model_for(store, turn.project_id),
        max_steps=settings.max_steps,
        max_wait_seconds=settings.max_wait_seconds,
        lease=lease,
    )


def step(event: dict[str, Any]) -> dict[str, Any]:
    settings = get_settings()
    store, turn, run = _load(event)
    if int(event.get("execution_steps", 0)) == 0 and (turn.inline_until or turn.inline_result):
        # The first step may be running (or done) where the turn was requested: take its verdict.
        adopted = inline.adopt(store, turn, run)
        if isinstance(adopted, dict):
            store.update_turn(turn.id, inline_result=None)  # adopted once: a later step of this turn runs itself
            if adopted.get("error"):
                raise FirstStepFailed(str(adopted["error"].get("message") or adopted["error"].get("type")))
            return _result(event, turn, str(adopted["verdict"]), int(adopted.get("wait_seconds", 0)))
        turn = adopted
        run = store.get_run(run.id) or run
    if turn.status != "running" or run.status != "running":
        return _result(event, turn, "finish")
    if int(event.get("execution_steps", 0)) >= settings.step_budget:
        return _result(event, turn, "continue")
    outcome = engine_for(store, turn).run(turn, run)
    return _result(event, turn, outcome.verdict, outcome.wait_seconds)


def response_for(
    store: DynamoStore, turn: Turn, *, pending: dict[str, Any] | None = None, session: Session | None = None
) -> dict[str, Any]:
    """The terminal payload: the blocking response and the `done` frame are the same document."""
    session = session or store.get_session(turn.session_id)
    pending = pending or {}
    attributed = citations.finalize(turn)
    return ChatResponse(
        session_id=turn.session_id,
        run_id=turn.run_id,
        content=attributed.content,
        citations=attributed.citations,
        claims=attributed.claims,
        attribution=attributed.attribution,
        reasoning=turn.reasoning,
        warnings=turn.warnings,
        finish_reason=turn.finish_reason,
        requires_action=pauses.outstanding(pending),
        tool_calls=pending.get("tool_calls", []),
        approvals=pending.get("approvals", []),
        questions=pending.get("questions", []),
        handoff=pending.get("handoff") or _open_handoff(store, turn.session_id),
        ui=turn.ui,
        todos=store.list_todos(turn.session_id) if turn.todos_changed else [],
        steered=turn.steered,
        context=turn.context,
        guard_flags=turn.guard_flags,
        title=session.title if session else None,
    ).model_dump(mode="json")


def _open_handoff(store: DynamoStore, session_id: str) -> dict[str, Any] | None:
    """The conversation's hand-off still open when the turn stops (an open one the agent left showing)."""
    from oberik.browser.handoff_rules import public

    h = store.active_handoff(session_id)
    return public(h) if h else None


def announce_pause(store: DynamoStore, turn: Turn, run_id: str, pending: dict[str, Any]) -> dict[str, Any]:
    """Write what a paused run waits on: questions / approvals frames, then `done` with requires_action."""
    response = response_for(store, turn, pending=pending)
    writer = FrameWriter(store, run_id)
    if writer.seq == 0:
        writer.emit("run", {"run_id": run_id})
        writer.emit("start", {"session_id": turn.session_id, "run_id": run_id})
    if pending.get("questions"):
        writer.emit("questions", {"questions": pending["questions"]})
    if pending.get("approvals"):
        writer.emit("approvals", {"approvals": pending["approvals"]})
    if pending.get("handoff"):
        writer.emit("browser_handoff", pending["handoff"])
    deliveries.turn_stopped(store, turn.id)  # park, and a resume that leaves the turn paused, both come here
    return response


def park(event: dict[str, Any]) -> dict[str, Any]:
    """Hold the turn at a pause: keep the task token so a later request can resume the execution."""
    store, turn, run = _load(event)
    store.update_turn(turn.id, task_token=str(event["task_token"]), status="paused", pause_seq=turn.pause_seq + 1)
    response = announce_pause(store, turn, run.id, turn.pending)
    store.end_run(
        run.id, turn.session_id, {"status": "paused", "result": response, "ended_at": time.time()}, park_turn=turn.id
    )
    FrameWriter(store, run.id).emit("done", response)
    logger.info("turn paused", turn_id=turn.id, run_id=run.id, reason=pauses.reason(turn.pending))
    return {"parked": True}


def finish(event: dict[str, Any]) -> dict[str, Any]:
    """Persist the answer, free the conversation, write the terminal frame.

    Finishing is conditional on every steered message having been taken in: one that arrived while the
    answer was being written sends the turn round once more (status "steered") instead of being dropped.
    """
    store, turn, run = _load(event)
    if run.status != "running":
        return {"status": run.status}
    if turn.status == "cancelled":
        return _cancelled(store, turn, run)
    if run.steer_count > run.steer_taken:
        return {"status": "steered"}
    messages = store.list_messages(turn.session_id)
    last = messages[-1] if messages else None
    already = last is not None and last.turn_id == turn.id and last.role == "assistant" and not last.tool_calls
    if not already and turn.answer:
        answer = citations.clean_answer(turn, turn.answer)  # stored as the content shows it
        store.append_messages(turn.session_id, [_message(turn, "assistant", answer)])
    session = store.get_session(turn.session_id)
    response = response_for(store, turn, session=session)
    store.update_turn(turn.id, status="completed", pending={})
    turn.status, turn.pending = "completed", {}
    done = store.end_run(
        run.id, turn.session_id, {"status": "completed", "result": response, "ended_at": time.time()}, guard_steers=True
    )
    if not done:
        fresh = store.get_run(run.id)
        if fresh is not None and fresh.status == "running":
            store.update_turn(turn.id, status="running")
            return {"status": "steered"}  # a steer landed after the check above
        return {"status": fresh.status if fresh else "gone"}
    FrameWriter(store, run.id).emit("done", response)
    deliveries.turn_stopped(store, turn.id, turn=turn, session=session)
    logger.info("turn finished", turn_id=turn.id, run_id=run.id, steps=turn.steps)
    return {"status": "completed"}


def _cancelled(store: DynamoStore, turn: Turn, run: Run) -> dict[str, Any]:
    # No turn.stopped here or in fail(): neither is a reason in the spec's table, and no reply was saved.
    store.mark_turn_abandoned(turn.session_id, turn.id)
    if store.end_run(run.id, turn.session_id, {"status": "cancelled", "ended_at": time.time()}):
        FrameWriter(store, run.id).emit("cancelled", {"run_id": run.id, "session_id": turn.session_id})
    return {"status": "cancelled"}


def _error_of(turn: Turn, event: dict[str, Any]) -> dict[str, Any]:
    if turn.error:
        return dict(turn.error)
    raw = event.get("error") or {}
    cause = raw.get("Cause") if isinstance(raw, dict) else None
    detail = "The turn failed inside the platform."
    try:
        parsed = json.loads(cause) if isinstance(cause, str) else None
        if isinstance(parsed, dict) and parsed.get("errorMessage"):
            detail = f"The turn failed inside the platform: {parsed['errorMessage']}"
    except json.JSONDecodeError:
        pass
    return {"code": "internal", "detail": detail, "status": None}


def fail(event: dict[str, Any]) -> dict[str, Any]:
    """End the turn as failed: the user's message marked unanswered, the conversation freed, an error frame."""
    store, turn, run = _load(event)
    if run.status != "running":
        return {"status": run.status}
    error = _error_of(turn, event)
    store.update_turn(turn.id, status="failed", error=error)
    store.mark_turn_abandoned(turn.session_id, turn.id)
    if not store.end_run(run.id, turn.session_id, {"status": "failed", "error": error, "ended_at": time.time()}):
        return {"status": "ended"}
    FrameWriter(store, run.id).emit(
        "error", {"detail": error["detail"], "code": error["code"], "run_id": run.id, "session_id": turn.session_id}
    )
    logger.warning("turn failed", turn_id=turn.id, run_id=run.id, code=error["code"])
    return {"status": "failed"}


def continue_turn(event: dict[str, Any]) -> dict[str, Any]:
    """Carry the turn on in a fresh execution so no execution's history grows without bound."""
    store, turn, _run = _load(event)
    executions = turn.executions + 1
    name = f"{turn.id}-{executions}"
    orchestrator = StepFunctionsOrchestrator(get_settings(), state_machine_arn=event.get("state_machine_arn"))
    arn = orchestrator.start(name, {"turn_id": turn.id, "run_id": turn.run_id, "execution_steps": 0})
    store.update_turn(turn.id, executions=executions, execution_arn=arn)
    logger.info("turn continued as a new execution", turn_id=turn.id, execution=name)
    return {"execution_arn": arn}


__all__ = ["announce_pause", "continue_turn", "fail", "finish", "park", "response_for", "step"]
