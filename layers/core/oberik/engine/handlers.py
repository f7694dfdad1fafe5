"""The functions the state machine's Lambda tasks call. Each takes the task's payload and returns its result."""

from __future__ import annotations

import json
import time
from typing import Any

from oberik.adapters.dynamodb import DynamoStore
from oberik.adapters.stepfunctions import StepFunctionsOrchestrator
from oberik.domain.chat import ChatResponse
from oberik.domain.errors import NotFound
from oberik.domain.models import Run, Turn
from oberik.engine.frames import FrameWriter
from oberik.engine.models import resolver_for
from oberik.engine.step import StepEngine, _message
from oberik.observability import logger
from oberik.settings import get_settings


def _load(event: dict[str, Any]) -> tuple[DynamoStore, Turn, Run]:
    store = DynamoStore(get_settings())
    turn = store.get_turn(str(event.get("turn_id")))
    if turn is None:
        raise NotFound(f"turn {event.get('turn_id')} does not exist")
    run = store.get_run(turn.run_id)
    if run is None:
        raise NotFound(f"run {turn.run_id} does not exist")
    return store, turn, run


def _model_for(store: DynamoStore, project_id: str) -> Any:
    project = store.get_project(project_id)
    return resolver_for(project.settings.providers if project else {}, get_settings())


def _result(payload: dict[str, Any], turn: Turn, verdict: str, wait_seconds: int = 0) -> dict[str, Any]:
    return {
        "turn_id": turn.id,
        "run_id": turn.run_id,
        "verdict": verdict,
        "wait_seconds": wait_seconds,
        "execution_steps": int(payload.get("execution_steps", 0)) + (1 if verdict in ("step", "wait") else 0),
    }


def step(event: dict[str, Any]) -> dict[str, Any]:
    settings = get_settings()
    store, turn, run = _load(event)
    if turn.status != "running" or run.status != "running":
        return _result(event, turn, "finish")
    if int(event.get("execution_steps", 0)) >= settings.step_budget:
        return _result(event, turn, "continue")
    engine = StepEngine(
        store,
        _model_for(store, turn.project_id),
        max_steps=settings.max_steps,
        max_wait_seconds=settings.max_wait_seconds,
    )
    outcome = engine.run(turn)
    return _result(event, turn, outcome.verdict, outcome.wait_seconds)


def park(event: dict[str, Any]) -> dict[str, Any]:
    """Hold the turn at a pause: keep the task token so a later request can resume the execution."""
    store, turn, run = _load(event)
    store.update_turn(turn.id, task_token=str(event["task_token"]), status="paused")
    response = _response(store, turn, requires_action=True)
    FrameWriter(store, run.id).emit("done", response)
    store.update_run(run.id, status="paused", result=response, ended_at=time.time())
    store.release_session(turn.session_id, run.id)
    logger.info("turn paused", turn_id=turn.id, run_id=run.id)
    return {"parked": True}


def _response(store: DynamoStore, turn: Turn, *, requires_action: bool = False) -> dict[str, Any]:
    session = store.get_session(turn.session_id)
    return ChatResponse(
        session_id=turn.session_id,
        run_id=turn.run_id,
        content=turn.content,
        reasoning=turn.reasoning,
        warnings=turn.warnings,
        finish_reason=turn.finish_reason,
        requires_action=requires_action,
        title=session.title if session else None,
    ).model_dump(mode="json")


def finish(event: dict[str, Any]) -> dict[str, Any]:
    """Persist the answer, write the terminal frame, release the conversation."""
    store, turn, run = _load(event)
    if run.status != "running":
        return {"status": run.status}
    if turn.status == "cancelled":
        return _cancelled(store, turn, run)
    messages = store.list_messages(turn.session_id)
    already = (
        bool(messages)
        and messages[-1].turn_id == turn.id
        and messages[-1].role == "assistant"
        and not messages[-1].tool_calls
    )
    if not already and turn.answer:
        store.append_messages(turn.session_id, [_message(turn, "assistant", turn.answer)])
    store.update_turn(turn.id, status="completed")
    response = _response(store, turn)
    FrameWriter(store, run.id).emit("done", response)
    store.update_run(run.id, status="completed", result=response, ended_at=time.time())
    store.release_session(turn.session_id, run.id)
    logger.info("turn finished", turn_id=turn.id, run_id=run.id, steps=turn.steps)
    return {"status": "completed"}


def _cancelled(store: DynamoStore, turn: Turn, run: Run) -> dict[str, Any]:
    store.mark_turn_abandoned(turn.session_id, turn.id)
    FrameWriter(store, run.id).emit("cancelled", {"run_id": run.id, "session_id": turn.session_id})
    store.update_run(run.id, status="cancelled", ended_at=time.time())
    store.release_session(turn.session_id, run.id)
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
    """End the turn as failed: an error frame, the user's message marked unanswered, the conversation released."""
    store, turn, run = _load(event)
    if run.status != "running":
        return {"status": run.status}
    error = _error_of(turn, event)
    store.update_turn(turn.id, status="failed", error=error)
    store.mark_turn_abandoned(turn.session_id, turn.id)
    FrameWriter(store, run.id).emit(
        "error", {"detail": error["detail"], "code": error["code"], "run_id": run.id, "session_id": turn.session_id}
    )
    store.update_run(run.id, status="failed", error=error, ended_at=time.time())
    store.release_session(turn.session_id, run.id)
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


__all__ = ["continue_turn", "fail", "finish", "park", "step"]
