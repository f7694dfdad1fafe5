"""Data plane: streaming turns, attaching to runs, cancelling them."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Header, Query, Request
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, ConfigDict, Field

from oberik.api.deps import Caller, CallerDep, OrchestratorDep, SettingsDep, StoreDep
from oberik.api.routes.chat import starter
from oberik.api.sse import stream_run
from oberik.domain.chat import ChatRequest
from oberik.domain.errors import Conflict, Forbidden, Invalid, NotFound
from oberik.domain.ids import is_id
from oberik.domain.models import Run
from oberik.engine import runs

router = APIRouter(tags=["chat"])

SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


def readable_run(store: Any, caller: Caller, run_id: str) -> Run:
    """The run, if this caller may read its conversation; the same 404 whether it exists or not."""
    if not is_id(run_id, "r"):
        raise Invalid(f"{run_id!r} is not a run id; run ids look like r_ followed by 28 hex digits.", field="run_id")
    run = store.get_run(run_id)
    if run is None or run.project_id != caller.project.id or run.owner != caller.claims.sub:
        raise NotFound(f"No run {run_id} is known for this user.", code="run_not_found")
    return run


def writable_run(store: Any, caller: Caller, run_id: str) -> Run:
    """Steering and cancelling interrupt a turn: only whoever may write to the conversation may do either."""
    return readable_run(store, caller, run_id)


def _sse(request: Request, store: Any, orchestrator: Any, run: Run, after: int, settings: Any) -> StreamingResponse:
    return StreamingResponse(
        stream_run(request, store, orchestrator, run, after, settings),
        media_type="text/event-stream",
        headers={**SSE_HEADERS, "X-Run-Id": run.id},
    )


@router.post(
    "/chat/stream",
    response_class=StreamingResponse,
    responses={200: {"content": {"text/event-stream": {}}, "description": "the turn's frames"}},
)
def chat_stream(
    request: Request,
    body: ChatRequest,
    caller: CallerDep,
    store: StoreDep,
    orchestrator: OrchestratorDep,
    settings: SettingsDep,
) -> StreamingResponse:
    """Start a turn and stream it as Server-Sent Events; the run goes on if the client goes away."""
    started = starter(store, orchestrator, caller, settings).start(
        body, caller.project, caller.claims, blocking=False, inline=settings.inline_first_step
    )
    return _sse(request, store, orchestrator, started.run, 0, settings)


def _last_event_id(raw: str | None, source: str) -> int:
    if raw is None or raw.strip() == "":
        return 0
    try:
        value = int(raw.strip())
    except ValueError:
        raise Invalid(
            f"{source} must be the id of a frame you received (a whole number), not {raw!r}.", field=source
        ) from None
    if value < 0:
        raise Invalid(f"{source} cannot be negative; send 0 (or nothing) to replay from the start.", field=source)
    return value


@router.get(
    "/chat/stream/{run_id}",
    response_class=StreamingResponse,
    responses={200: {"content": {"text/event-stream": {}}, "description": "the run's frames"}},
)
def attach(
    run_id: str,
    request: Request,
    caller: CallerDep,
    store: StoreDep,
    orchestrator: OrchestratorDep,
    settings: SettingsDep,
    last_event_id_header: Annotated[str | None, Header(alias="Last-Event-ID")] = None,
    last_event_id: Annotated[str | None, Query()] = None,
) -> StreamingResponse:
    """Replay a run from after Last-Event-ID (from the start without one), then follow it live."""
    run = readable_run(store, caller, run_id)
    if last_event_id_header is not None:
        after = _last_event_id(last_event_id_header, "Last-Event-ID")
    else:
        after = _last_event_id(last_event_id, "last_event_id")
    if after:
        newest = store.last_frame_seq(run.id)
        if after > newest and not (run.status != "running" and newest == 0):
            raise Invalid(
                f"Last-Event-ID {after} is past the last frame of run {run.id} ({newest}).", field="Last-Event-ID"
            )
    return _sse(request, store, orchestrator, run, after, settings)


class CancelResult(BaseModel):
    run_id: str
    session_id: str
    status: str


@router.post("/chat/stream/{run_id}/cancel", response_model=CancelResult)
def cancel(run_id: str, caller: CallerDep, store: StoreDep, orchestrator: OrchestratorDep) -> CancelResult:
    """Stop generation. A run that already ended answers 200 with how it ended."""
    run = runs.cancel(store, orchestrator, writable_run(store, caller, run_id))
    return CancelResult(run_id=run.id, session_id=run.session_id, status=run.status)


class Steer(BaseModel):
    model_config = ConfigDict(extra="forbid")
    message: str = Field(min_length=1, max_length=20_000)


class SteerResult(BaseModel):
    landed: bool


@router.post("/chat/stream/{run_id}/steer", response_model=SteerResult)
def steer(run_id: str, body: Steer, caller: CallerDep, store: StoreDep) -> SteerResult:
    """Send a message into a running turn. `landed: true`: the agent reads it before this turn ends."""
    if not body.message.strip():
        raise Invalid("message is empty: send what the user typed.", field="message")
    if "steer" not in caller.claims.capabilities or "steer" not in caller.project.settings.capabilities:
        raise Forbidden("This token may not steer turns: it lacks the steer capability.")
    run = writable_run(store, caller, run_id)
    if run.blocking:
        raise Conflict(
            f"Run {run.id} belongs to a blocking POST /chat, which cannot be steered; start turns a user may "
            "want to correct with POST /chat/stream, or send this as the next message.",
            code="blocking_turn",
        )
    return SteerResult(landed=store.add_steer(run.id, body.message.strip()))
