"""Data plane: running turns."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from oberik.api.deps import CallerDep, OrchestratorDep, SettingsDep, StoreDep
from oberik.domain.chat import ChatRequest, ChatResponse
from oberik.domain.errors import ModelError, OberikError
from oberik.engine.models import resolver_for
from oberik.engine.turns import TurnStarter, wait_for_run

router = APIRouter(tags=["chat"])


def starter(store: Any, orchestrator: Any, caller: Any, settings: Any) -> TurnStarter:
    return TurnStarter(
        store, orchestrator, resolver_for(caller.project.settings.providers, settings), settings.default_model
    )


@router.post("/chat", response_model=ChatResponse, response_model_exclude_none=False)
def chat(
    body: ChatRequest, caller: CallerDep, store: StoreDep, orchestrator: OrchestratorDep, settings: SettingsDep
) -> dict[str, Any]:
    """Run a whole turn and answer when it has finished or paused."""
    started = starter(store, orchestrator, caller, settings).start(body, caller.project, caller.claims, blocking=True)
    run = wait_for_run(
        store, started.run.id, timeout=settings.blocking_timeout_seconds, poll=settings.poll_interval_seconds
    )
    if run.status == "failed":
        error = run.error or {}
        code = str(error.get("code") or "internal")
        detail = str(error.get("detail") or "The turn failed.")
        if code in ("rate_limited", "provider_error", "timeout", "auth", "bad_request"):
            raise ModelError(f"{detail} (session {run.session_id}, run {run.id})", code=code)
        raise OberikError(f"{detail} (session {run.session_id}, run {run.id})", code=code)
    if run.status == "cancelled":
        return ChatResponse(session_id=run.session_id, run_id=run.id, finish_reason="cancelled").model_dump()
    return run.result or ChatResponse(session_id=run.session_id, run_id=run.id).model_dump()
