"""Data plane: a subject's conversations. Anything another subject owns is answered 404."""

from __future__ import annotations

import time
from typing import Annotated, Any

from fastapi import APIRouter, Query, Response, status
from pydantic import BaseModel, ConfigDict, Field

from oberik.api.deps import CallerDep, OrchestratorDep, SettingsDep, StoreDep
from oberik.domain.errors import Invalid, NotFound
from oberik.domain.ids import new_id
from oberik.domain.models import MessagePublic, Session, SessionPublic
from oberik.engine import aside
from oberik.engine.runs import mark_lost_if_dead

router = APIRouter(prefix="/chat/sessions", tags=["sessions"])

DEFAULT_LIMIT = 100
MAX_LIMIT = 500


def owned_session(store: Any, caller: Any, session_id: str) -> Session:
    session = store.get_session(session_id)
    if session is None or session.project_id != caller.project.id or session.owner != caller.claims.sub:
        raise NotFound(f"No conversation {session_id} exists for this user.", code="session_not_found")
    return session


def public(s: Session) -> SessionPublic:
    return SessionPublic(
        id=s.id,
        title=s.title,
        user_ref=s.user_ref,
        created_at=s.created_at,
        updated_at=s.updated_at,
        forked_from=s.forked_from,
    )


class SessionPage(BaseModel):
    items: list[SessionPublic]
    has_more: bool
    next_offset: int | None


@router.get("", response_model=SessionPage)
def list_sessions(
    caller: CallerDep,
    store: StoreDep,
    user_ref: str | None = None,
    limit: Annotated[int, Query(ge=1, description="page size; values above 500 are treated as 500")] = DEFAULT_LIMIT,
    offset: Annotated[int, Query(ge=0)] = 0,
) -> SessionPage:
    limit = min(limit, MAX_LIMIT)
    items, has_more = store.list_sessions(
        caller.project.id, caller.claims.sub, user_ref=user_ref, limit=limit, offset=offset
    )
    return SessionPage(
        items=[public(s) for s in items], has_more=has_more, next_offset=offset + len(items) if has_more else None
    )


class Transcript(BaseModel):
    session_id: str
    messages: list[MessagePublic]


@router.get("/{session_id}/messages", response_model=Transcript)
def messages(session_id: str, caller: CallerDep, store: StoreDep) -> Transcript:
    owned_session(store, caller, session_id)
    items = [
        MessagePublic.model_validate(m.model_dump(exclude={"abandoned", "seq", "session_id"}))
        for m in store.list_messages(session_id)
    ]
    return Transcript(session_id=session_id, messages=items)


class Rename(BaseModel):
    model_config = ConfigDict(extra="forbid")
    title: str | None = Field(max_length=200, description="the new name; null clears it")


@router.patch("/{session_id}", response_model=SessionPublic)
def rename(session_id: str, body: Rename, caller: CallerDep, store: StoreDep) -> SessionPublic:
    session = owned_session(store, caller, session_id)
    title = body.title.strip() if body.title is not None else None
    if title == "":
        raise Invalid("title is blank; send a name, or null to clear it.", field="title")
    store.set_title(session_id, title)
    return public(session.model_copy(update={"title": title}))


@router.delete("/{session_id}", status_code=status.HTTP_204_NO_CONTENT)
def delete(session_id: str, caller: CallerDep, store: StoreDep) -> Response:
    owned_session(store, caller, session_id)
    store.delete_session(session_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


class Fork(BaseModel):
    model_config = ConfigDict(extra="forbid")
    up_to_message_id: str = Field(min_length=1, description="the last message the new conversation keeps")


@router.post("/{session_id}/fork", response_model=SessionPublic, status_code=status.HTTP_201_CREATED)
def fork(session_id: str, body: Fork, caller: CallerDep, store: StoreDep) -> SessionPublic:
    source = owned_session(store, caller, session_id)
    history = store.list_messages(session_id)
    ids = [m.id for m in history]
    if body.up_to_message_id not in ids:
        raise Invalid(
            f"up_to_message_id {body.up_to_message_id} is not a message of conversation {session_id}.",
            field="up_to_message_id",
        )
    kept = history[: ids.index(body.up_to_message_id) + 1]
    now = time.time()
    copy = Session(
        id=new_id("s"),
        project_id=source.project_id,
        owner=source.owner,
        user_ref=source.user_ref,
        title=source.title,
        created_at=now,
        updated_at=now,
        msg_seq=len(kept),
        forked_from=source.id,
    )
    copied = [m.model_copy(update={"id": new_id("m"), "session_id": copy.id, "seq": i + 1}) for i, m in enumerate(kept)]
    store.create_session_with_messages(copy, copied)
    return public(copy)


class Waiting(BaseModel):
    """A paused turn's outstanding requests: answer them with POST /chat (session_id plus the matching field)."""

    run_id: str
    requires_action: bool = True
    tool_calls: list[dict[str, Any]]
    approvals: list[dict[str, Any]]
    questions: list[dict[str, Any]]
    handoff: dict[str, Any] | None = None  # a blocking browser hand-off: answer with handoff_done: true


class ActiveRun(BaseModel):
    run_id: str | None
    last_event_id: int | None
    status: str
    authoritative: bool = True
    waiting: Waiting | None = None


@router.get("/{session_id}/run", response_model=ActiveRun)
def active_run(session_id: str, caller: CallerDep, store: StoreDep, orchestrator: OrchestratorDep) -> ActiveRun:
    """What is running on the conversation.

    Runs live in the table, not in one process's memory, so every worker answers for every run and
    `authoritative` is always true. It answers from the same record a new turn is refused by: `idle` here
    means a POST will not be refused.
    """
    session = owned_session(store, caller, session_id)
    if session.active_run:
        run = store.get_run(session.active_run)
        if run is not None:
            run = mark_lost_if_dead(store, orchestrator, run)
        if run is not None and run.status == "running":
            return ActiveRun(run_id=run.id, last_event_id=store.last_frame_seq(run.id), status="running")
        session = owned_session(store, caller, session_id)
    if session.paused_turn:
        turn = store.get_turn(session.paused_turn)
        if turn is not None and turn.status == "paused":
            p = turn.pending
            waiting = Waiting(
                run_id=turn.run_id,
                tool_calls=p.get("tool_calls", []),
                approvals=p.get("approvals", []),
                questions=p.get("questions", []),
                handoff=p.get("handoff"),
            )
            return ActiveRun(run_id=None, last_event_id=None, status="idle", waiting=waiting)
    if session.last_run:
        last = store.get_run(session.last_run)
        if last is not None and last.status == "lost":
            return ActiveRun(run_id=None, last_event_id=None, status="lost")
    return ActiveRun(run_id=None, last_event_id=None, status="idle")


class Todos(BaseModel):
    session_id: str
    todos: list[dict[str, Any]]


@router.get("/{session_id}/todos", response_model=Todos)
def todos(session_id: str, caller: CallerDep, store: StoreDep) -> Todos:
    """The agent's plan for this conversation: numbered steps with their status."""
    owned_session(store, caller, session_id)
    return Todos(session_id=session_id, todos=store.list_todos(session_id))


class FollowupsAsk(BaseModel):
    model_config = ConfigDict(extra="forbid")
    n: int = Field(default=3, ge=1, le=aside.MAX_SUGGESTIONS, description="how many suggestions to ask for")


class Followups(BaseModel):
    suggestions: list[str]


@router.post("/{session_id}/followups", response_model=Followups)
def followups(
    session_id: str, caller: CallerDep, store: StoreDep, settings: SettingsDep, body: FollowupsAsk | None = None
) -> Followups:
    """Suggested next messages in the user's voice, for buttons. Not stored, never shown to the agent.

    One model call with a deadline: a failure or a late answer is an empty list, not an error.
    """
    owned_session(store, caller, session_id)
    n = (body or FollowupsAsk()).n
    return Followups(suggestions=aside.followups(caller.project, settings, store.list_messages(session_id), n))


class Recap(BaseModel):
    recap: str


@router.post("/{session_id}/recap", response_model=Recap)
def recap(session_id: str, caller: CallerDep, store: StoreDep, settings: SettingsDep) -> Recap:
    """One line for someone coming back to the conversation. Not stored, never shown to the agent.

    One model call with a deadline: a failure or a late answer is an empty string, not an error.
    """
    owned_session(store, caller, session_id)
    return Recap(recap=aside.recap(caller.project, settings, store.list_messages(session_id)))
