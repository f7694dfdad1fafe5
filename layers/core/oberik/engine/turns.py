"""Starting a turn: every check first, then one transaction that claims the conversation, then the execution."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from oberik.domain import pauses
from oberik.domain.capabilities import Gate, Infrastructure, resolve_toolset
from oberik.domain.chat import ChatRequest
from oberik.domain.errors import Conflict, Contended, Forbidden, Invalid, NotFound
from oberik.domain.identity import TokenClaims
from oberik.domain.ids import new_id
from oberik.domain.llm import EFFORTS, Effort
from oberik.domain.models import Message, Project, Run, Session, Turn, TurnPlan
from oberik.domain.tools import BY_NAME
from oberik.engine import inline as first_step
from oberik.engine import toolbox
from oberik.engine.retrieval import retrieval_scope
from oberik.observability import logger

IDEMPOTENCY_SECONDS = 24 * 3600

# Request fields whose features this deployment does not run yet: refused by name rather than ignored.
_NOT_YET = {
    "mcp_servers": "request-time MCP servers",
}


def gate_for(
    project: Project,
    claims: TokenClaims,
    *,
    flags: dict[str, bool] | None = None,
    request_allowed: list[str] | None = None,
) -> Gate:
    ps = project.settings
    return Gate(
        ceiling=frozenset(ps.capabilities),
        token=frozenset(claims.capabilities),
        flags=flags or {},
        project_allowed=frozenset(ps.allowed_tools) if ps.allowed_tools is not None else None,
        request_allowed=frozenset(request_allowed) if request_allowed is not None else None,
        infra=Infrastructure(embedding_model=bool(ps.embedding_model), search_provider=ps.web_search is not None),
    )


def caller_of(claims: TokenClaims) -> dict[str, Any]:
    """The identity a turn acts for, as the verified token states it."""
    return {
        "subject": claims.sub,
        "tenant_id": claims.tenant_id,
        "scope": claims.scope,
        "roles": list(claims.roles),
        "groups": list(claims.groups),
        "user_ref": claims.user_ref,
    }


def clamp_effort(asked: Effort | None, ceiling: Effort | None) -> Effort | None:
    if asked is None or ceiling is None:
        return asked
    return asked if EFFORTS.index(asked) <= EFFORTS.index(ceiling) else ceiling


def conflict_message(run_id: str) -> str:
    return (
        f"A turn is already running on this conversation (run {run_id}). Starting another now would put two "
        "answers into the transcript with nothing recording which answer belongs to which message. "
        f"Attach to the running turn with GET /chat/stream/{run_id}, or add to it with "
        f"POST /chat/stream/{run_id}/steer."
    )


@dataclass
class Started:
    run: Run
    attached: bool = False  # an idempotent retry: the run was started by an earlier request


class TurnStarter:
    def __init__(self, store: Any, orchestrator: Any, resolve_model: Any, default_model: str) -> None:
        self.store = store
        self.orchestrator = orchestrator
        self.resolve_model = resolve_model  # (name) -> (Model, id); raises Invalid for unknown providers
        self.default_model = default_model

    def plan(self, req: ChatRequest, project: Project, claims: TokenClaims, *, unattended: bool = False) -> TurnPlan:
        if "chat" not in claims.capabilities or "chat" not in project.settings.capabilities:
            raise Forbidden("This token may not start turns: it does not carry the chat capability.")
        for name, what in _NOT_YET.items():
            if getattr(req, name):
                raise Invalid(f"{name} is not accepted yet: {what} are not available on this deployment.", field=name)
        if req.system_prompt is not None and not (
            "system_prompt" in claims.capabilities and "system_prompt" in project.settings.capabilities
        ):
            raise Forbidden(
                "This token may not set a system prompt: it lacks the system_prompt capability. "
                "Send the user's message without system_prompt, or mint a token that carries it."
            )
        model = req.model or project.settings.default_model or self.default_model
        if req.model is not None and claims.models is not None and req.model not in claims.models:
            allowed = ", ".join(claims.models) or "none"
            raise Forbidden(
                f"This token may not use model {req.model}. Models it may use: {allowed}.", code="model_not_allowed"
            )
        self.resolve_model(model)  # unknown provider -> Invalid, before anything is written
        catalog = toolbox.catalog(project, self.store)
        if req.allowed_tools is not None:
            unknown = sorted(set(req.allowed_tools) - {t.name for t in catalog})
            if unknown:
                raise Invalid(
                    f"allowed_tools names tools that do not exist: {', '.join(unknown)}. "
                    "GET /tools lists the ones this token can be given.",
                    field="allowed_tools",
                )
        if req.enable_auto_title and not (
            "auto_title" in claims.capabilities and "auto_title" in project.settings.capabilities
        ):
            raise Forbidden(
                "This token may not have conversations named for it: it lacks the auto_title capability. "
                "Set title yourself, or mint a token that carries auto_title."
            )
        platform_names = {t.name for t in catalog}  # a declared tool may not shadow one the platform runs
        client = pauses.parse_declared(req.client_tools, "client_tools", reserved=platform_names)
        pauses.parse_declared(req.ui_tools, "ui_tools", reserved=platform_names | {t.name for t in client})
        toolset = resolve_toolset(
            gate_for(project, claims, flags=req.flags(), request_allowed=req.allowed_tools), catalog
        )
        names = toolset.names
        if unattended:
            names = [n for n in names if n != "ask_user"]  # nobody is there to answer
        retrieval = retrieval_scope(req, project, self.store)
        if retrieval:  # naming the project's own data keeps the turn on it: nothing from the web this turn
            names = [t.name for t in toolset.tools if t.name in names and t.capability != "web_search"]
        return TurnPlan(
            model=model,
            temperature=0.2 if req.temperature is None else req.temperature,
            reasoning_effort=clamp_effort(req.reasoning_effort, claims.max_effort),
            system_prompt=project.settings.system_prompt,
            extra_system_prompt=req.system_prompt,
            tools=names,
            dynamic_tools=toolbox.dynamic_specs(t for t in toolset.tools if t.name in names),
            caller=caller_of(claims),
            client_tools=req.client_tools,
            ui_tools=req.ui_tools,
            unattended=unattended,
            auto_title=req.title_from if req.enable_auto_title and req.title is None else None,
            context=project.settings.context,
            guardrails=project.settings.guardrails,
            warnings=self._degraded(req, project, claims),
            retrieval=retrieval,
            citations_markers=project.settings.citations_markers,
        )

    @staticmethod
    def _degraded(req: ChatRequest, project: Project, claims: TokenClaims) -> list[str]:
        """Say so when a capability the request switched on degrades to everything rather than to nothing."""
        granted = "action_space" in claims.capabilities and "action_space" in project.settings.capabilities
        asked = "enable_action_space" in req.model_fields_set and req.enable_action_space
        if asked and granted and not project.settings.embedding_model:
            return [
                "This project has no embedding model, so enable_action_space could not narrow anything: every "
                "tool is bound on every turn instead of the relevant few, which is the cost this capability "
                "exists to avoid. Configure embedding_model in the project settings."
            ]
        return []

    def session_for(self, req: ChatRequest, project: Project, claims: TokenClaims) -> tuple[Session, bool]:
        now = time.time()
        if req.session_id is None:
            return Session(
                id=new_id("s"),
                project_id=project.id,
                owner=claims.sub,
                user_ref=req.user_ref or claims.user_ref,
                title=req.title,
                created_at=now,
                updated_at=now,
            ), True
        session = self.store.get_session(req.session_id)
        if session is None or session.project_id != project.id or session.owner != claims.sub:
            raise NotFound(f"No conversation {req.session_id} exists for this user.", code="session_not_found")
        if req.title is not None:
            raise Invalid(
                "title names a new conversation only; rename this one with PATCH /chat/sessions/{id}.", field="title"
            )
        if req.user_ref is not None and req.user_ref != session.user_ref:
            raise Invalid("user_ref is set when a conversation is created and cannot change.", field="user_ref")
        if session.active_run:
            session = self._reclaim_if_lost(session)
        if session.paused_turn:
            turn = self.store.get_turn(session.paused_turn)
            if turn is not None and turn.status == "paused":
                raise Conflict(
                    "This conversation's last turn is paused, waiting on "
                    f"{pauses.waiting_on(turn.pending)}. Answer it first (POST /chat with session_id and those "
                    "fields); a new message now would leave that turn's request unanswered.",
                    code="turn_paused",
                )
        return session, False

    def _reclaim_if_lost(self, session: Session) -> Session:
        """A conversation held by a live run is busy (409); one held by a run whose execution died is not."""
        from oberik.engine.runs import mark_lost_if_dead

        held_by = session.active_run or ""
        run = self.store.get_run(held_by)
        if run is not None:
            run = mark_lost_if_dead(self.store, self.orchestrator, run)
        if run is not None and run.status == "running":
            raise Conflict(conflict_message(held_by), code="turn_running")
        self.store.release_session(session.id, held_by)
        fresh = self.store.get_session(session.id)
        if fresh is None:
            raise NotFound(f"No conversation {session.id} exists for this user.", code="session_not_found")
        if fresh.active_run:
            raise Conflict(conflict_message(fresh.active_run), code="turn_running")
        return fresh

    def start(
        self,
        req: ChatRequest,
        project: Project,
        claims: TokenClaims,
        *,
        blocking: bool,
        plan: TurnPlan | None = None,
        inline: bool = False,
    ) -> Started:
        """Start (or, for a resume, continue) a turn. `plan`: one the caller made with `plan()` and adjusted (a
        scheduled task's unattended turn); by default the request's own. `inline`: run the first step on a thread
        of this process while the execution starts (engine.inline), for a streamed request where time to the
        first token matters."""
        if req.resuming:
            return Resumer(self.store, self.orchestrator).resume(req, project, claims, blocking=blocking)
        if req.idempotency_key:
            seen = self.store.get_idempotent(project.id, claims.sub, req.idempotency_key)
            if seen:
                run = self.store.get_run(seen["run_id"])
                if run is not None:
                    return Started(run, attached=True)
        plan = plan or self.plan(req, project, claims)
        for _attempt in range(3):
            session, created = self.session_for(req, project, claims)
            try:
                return self._begin(req, project, claims, session, created, plan, blocking, inline)
            except Contended as e:
                current = self.store.get_session(session.id)
                if current is not None and current.active_run:
                    raise Conflict(conflict_message(current.active_run), code="turn_running") from e
                if req.idempotency_key:
                    seen = self.store.get_idempotent(project.id, claims.sub, req.idempotency_key)
                    if seen and (run := self.store.get_run(seen["run_id"])) is not None:
                        return Started(run, attached=True)
                if created:
                    raise
        raise Conflict(
            "The conversation kept changing while this turn was being started; send it again.", code="session_busy"
        )

    def _begin(
        self,
        req: ChatRequest,
        project: Project,
        claims: TokenClaims,
        session: Session,
        created: bool,
        plan: TurnPlan,
        blocking: bool,
        inline: bool = False,
    ) -> Started:
        now = time.time()
        turn_id, run_id = new_id("t"), new_id("r")
        texts: list[Any] = [req.message, *req.messages]
        expected = session.msg_seq
        messages = [
            Message(
                id=new_id("m"),
                session_id=session.id,
                seq=expected + i + 1,
                role="user",
                content=text,
                turn_id=turn_id,
                created_at=now,
            )
            for i, text in enumerate(texts)
        ]
        claimed = session.model_copy(
            update={
                "msg_seq": expected + len(messages),
                "active_run": run_id,
                "active_turn": turn_id,
                "last_run": run_id,
                "updated_at": now,
            }
        )
        turn = Turn(
            id=turn_id,
            session_id=session.id,
            project_id=project.id,
            owner=claims.sub,
            run_id=run_id,
            plan=plan,
            created_at=now,
            execution_arn=self.orchestrator.execution_arn(turn_id),
            warnings=list(plan.warnings),
            inline_until=first_step.lease_until(now) if inline else 0,
        )
        run = Run(
            id=run_id,
            turn_id=turn_id,
            session_id=session.id,
            project_id=project.id,
            owner=claims.sub,
            blocking=blocking,
            created_at=now,
        )
        self.store.begin_turn(
            claimed,
            created=created,
            expected_seq=expected,
            messages=messages,
            turn=turn,
            run=run,
            idempotency_key=req.idempotency_key,
            idempotency_seconds=IDEMPOTENCY_SECONDS,
        )
        if inline:
            # The model hears the question first; the execution starts once the request is on its way.
            launched = first_step.launch(self.store, turn, run, messages if created else None)
            launched.opened.wait(first_step.OPEN_WAIT_SECONDS)
        try:
            arn = self.orchestrator.start(turn_id, {"turn_id": turn_id, "run_id": run_id, "execution_steps": 0})
        except Exception:
            logger.exception("could not start the turn's execution", turn_id=turn_id)
            self.store.update_run(
                run_id,
                status="failed",
                ended_at=time.time(),
                error={"code": "internal", "detail": "The turn could not be started."},
            )
            self.store.mark_turn_abandoned(session.id, turn_id)
            self.store.release_session(session.id, run_id)
            raise
        if arn != turn.execution_arn:
            self.store.update_turn(turn_id, execution_arn=arn)
        logger.info("turn started", turn_id=turn_id, run_id=run_id, session_id=session.id)
        return Started(run)


def wait_for_run(store: Any, run_id: str, *, timeout: float, poll: float) -> Run:
    """Block until the run reaches a terminal status (completed, paused, failed, cancelled) or `timeout`."""
    from oberik.domain.models import TERMINAL_RUN

    deadline = time.monotonic() + timeout
    delay = poll
    while True:
        run = store.get_run(run_id)
        if run is not None and run.status in TERMINAL_RUN:
            return run
        if time.monotonic() >= deadline:
            raise Conflict(
                f"The turn (run {run_id}) is still running after {int(timeout)} s; it carries on. "
                f"Attach with GET /chat/stream/{run_id} or read the conversation later.",
                code="turn_still_running",
            )
        time.sleep(delay)
        delay = min(delay * 1.5, 0.25)


def _handoff_result(store: Any, session_id: str, pending: dict[str, Any] | None) -> str:
    """What the agent reads when the person finishes a blocking hand-off (including a selector that missed)."""
    if not pending:
        return ""
    from oberik.browser.handoff_rules import done_message

    stored = store.get_handoff(session_id)
    return done_message(stored if stored and stored.get("id") == pending.get("id") else pending)


class Resumer:
    """Applies a resume (tool results, decisions, answers) to a paused turn, as one new run."""

    def __init__(self, store: Any, orchestrator: Any) -> None:
        self.store = store
        self.orchestrator = orchestrator

    def resume(self, req: ChatRequest, project: Project, claims: TokenClaims, *, blocking: bool) -> Started:
        if req.session_id is None:
            raise Invalid("session_id is required to resume a paused turn.", field="session_id")
        session = self.store.get_session(req.session_id)
        if session is None or session.project_id != project.id or session.owner != claims.sub:
            raise NotFound(f"No conversation {req.session_id} exists for this user.", code="session_not_found")
        payload: dict[str, Any] = {
            "tool_results": req.tool_results,
            "approval_decisions": req.approval_decisions,
            "answers": req.answers,
        }
        if req.handoff_done is not None:
            payload["handoff_done"] = req.handoff_done
        fingerprint = pauses.digest(payload)
        turn_id = session.paused_turn or session.active_turn
        if turn_id is None and session.last_run:
            last = self.store.get_run(session.last_run)
            turn_id = last.turn_id if last else None
        turn = self.store.get_turn(turn_id) if turn_id else None
        if turn is not None and turn.last_resume and turn.last_resume.get("digest") == fingerprint:
            run = self.store.get_run(turn.last_resume["run_id"])
            if run is not None:
                return Started(run, attached=True)  # the same resume, sent again: applied once
        if session.active_run:
            raise Conflict(conflict_message(session.active_run), code="turn_running")
        if turn is None or turn.status != "paused" or not session.paused_turn:
            raise Conflict(
                "Nothing on this conversation is waiting for tool results, decisions or answers; "
                "send a message to start a turn.",
                code="nothing_to_resume",
            )
        if req.message is not None or req.messages:
            raise Invalid(
                "A resume carries tool_results, approval_decisions, answers or handoff_done, not a new message.",
                field="message",
            )
        handoff = turn.pending.get("handoff") if req.handoff_done else None
        resolution = pauses.resolve(
            turn.pending,
            tool_results=req.tool_results,
            approval_decisions=req.approval_decisions,
            answers=req.answers,
            handoff_done=req.handoff_done,
            handoff_result=_handoff_result(self.store, session.id, handoff),
        )
        plan = turn.plan
        if req.client_tools:
            platform_names = set(BY_NAME) | set(plan.dynamic_tools)
            client = pauses.parse_declared(req.client_tools, "client_tools", reserved=platform_names)
            pauses.parse_declared(plan.ui_tools, "ui_tools", reserved=platform_names | {t.name for t in client})
            plan = plan.model_copy(update={"client_tools": req.client_tools})
        now = time.time()
        run_id = new_id("r")
        messages = [
            Message(
                id=new_id("m"),
                session_id=session.id,
                seq=session.msg_seq + i + 1,
                role="tool",
                content=m.content,
                tool_call_id=m.tool_call_id,
                name=m.name,
                turn_id=turn.id,
                created_at=now,
            )
            for i, m in enumerate(resolution.messages)
        ]
        generating = resolution.needs_model
        turn_sets: dict[str, Any] = {
            "run_id": run_id,
            "pending": resolution.pending,
            "last_resume": {"digest": fingerprint, "run_id": run_id},
            "plan": plan.model_dump(mode="json"),
        }
        if generating:
            turn_sets |= {
                "status": "running",
                "task_token": None,
                "content": "",
                "reasoning": "",
                "answer": "",
                "ui": [],
                "steered": [],
                "todos_changed": False,
            }
        else:
            turn_sets |= {"pause_seq": turn.pause_seq + 1}
        run = Run(
            id=run_id,
            turn_id=turn.id,
            session_id=session.id,
            project_id=project.id,
            owner=claims.sub,
            blocking=blocking,
            created_at=now,
            status="running" if generating else "paused",
            ended_at=None if generating else now,
        )
        try:
            self.store.begin_resume(
                session,
                expected_seq=session.msg_seq,
                turn_id=turn.id,
                expected_pause=turn.pause_seq,
                turn_sets=turn_sets,
                messages=messages,
                run=run,
                generating=generating,
            )
        except Contended as e:
            fresh = self.store.get_turn(turn.id)
            if fresh is not None and fresh.last_resume and fresh.last_resume.get("digest") == fingerprint:
                again = self.store.get_run(fresh.last_resume["run_id"])
                if again is not None:
                    return Started(again, attached=True)
            raise Conflict(
                "This paused turn was answered by another request meanwhile; reload the conversation "
                "(GET /chat/sessions/{id}/run) to see where it stands.",
                code="resume_conflict",
            ) from e
        resumed = self.store.get_turn(turn.id) or turn
        if handoff:
            self.store.end_handoff(session.id, handoff.get("id"))  # the person is done: the viewer closes
        if generating:
            self.orchestrator.resume(turn.task_token or "", {"run_id": run_id})
            logger.info("turn resumed", turn_id=turn.id, run_id=run_id)
            return Started(self.store.get_run(run_id) or run)
        # Something is still outstanding (an approved call now handed over, an undecided approval): the turn
        # stays parked on the same task token and this run announces what it waits on now.
        from oberik.engine.handlers import announce_pause

        response = announce_pause(self.store, resumed, run_id, resolution.pending)
        self.store.update_run(run_id, result=response)
        from oberik.engine.frames import FrameWriter

        FrameWriter(self.store, run_id).emit("done", response)
        logger.info("turn still paused", turn_id=turn.id, run_id=run_id, reason=pauses.reason(resolution.pending))
        return Started(self.store.get_run(run_id) or run)
