"""Scheduled tasks: making, listing and cancelling them, and what happens when one fires.

`Tasks` is what `POST/GET/DELETE /tasks` and the agent's `schedule_reminder` / `cancel_reminder` /
`list_reminders` share: the task is stored first, then its schedule made on EventBridge Scheduler (undone if
that fails), and cancelling deletes both.

`fire` is the scheduled function's handler. It loads the task the schedule names and

- for an `agent` task starts a turn with the task's message, as the task's subject and with no more than
  their token allowed, unattended (`ask_user` is not offered, turn.stopped says `scheduled: true`). The turn
  carries the task on its plan; when it ends, `agent_turn_stopped` (called where every turn.stopped is made)
  queues `scheduled_task.fired` with the reply to the task's `callback_url` and publishes it to the events
  topic.
- for a `webhook` task queues `scheduled_task.fired` to the task's `url` at once, and publishes it.

Every firing is keyed by the task and the time the run was due, so a retried invocation (the Scheduler
retries, Lambda retries) starts one turn and sends one notification: the turn through the chat idempotency
key, the notification through a delivery id made from that key (the deliver function sends a delivery id
once). A one-time task is forgotten once it has fired, as its schedule is.
"""

from __future__ import annotations

import json
import secrets
import time
from datetime import UTC, datetime
from typing import Any

from oberik.adapters.dynamodb import DynamoStore
from oberik.adapters.scheduler import SCHEDULED_TIME, TaskScheduler
from oberik.adapters.sns import EventsTopic
from oberik.adapters.sqs import DeliveryQueue, stack_resources
from oberik.domain import deliveries, schedules
from oberik.domain.chat import ChatRequest
from oberik.domain.deliveries import Notification
from oberik.domain.errors import Conflict, Forbidden, Invalid, NotFound, OberikError
from oberik.domain.identity import TokenClaims
from oberik.domain.models import Project, Turn
from oberik.domain.tasks import (
    MAX_MESSAGE_CHARS,
    MAX_TASKS_PER_SUBJECT,
    SCHEDULED_TASK_FIRED,
    WEBHOOK_FIRED,
    Task,
    TaskCreate,
    TaskPublic,
    fired_body,
    fired_notification,
    new_task_id,
    public,
    stable_delivery_id,
)
from oberik.observability import logger
from oberik.settings import Settings, get_settings

# The claims of a token that a task keeps, so its turns run with what the subject was allowed then.
_KEPT_CLAIMS = (
    "sub",
    "pid",
    "tenant_id",
    "scope",
    "roles",
    "groups",
    "capabilities",
    "models",
    "max_effort",
    "user_ref",
)
# How long the token an agent task's turn runs under is valid (it is never handed to anyone).
_FIRING_TOKEN_SECONDS = 3600


def kept_claims(claims: TokenClaims) -> dict[str, Any]:
    doc = claims.model_dump(mode="json")
    return {k: doc.get(k) for k in _KEPT_CLAIMS}


def _now() -> datetime:
    return datetime.now(UTC)


class Tasks:
    def __init__(self, store: Any, scheduler: TaskScheduler | None = None, settings: Settings | None = None) -> None:
        self.store = store
        self.settings = settings or get_settings()
        self.scheduler = scheduler or TaskScheduler(settings=self.settings)

    # --- making ------------------------------------------------------------------------------------------

    def create(
        self,
        project: Project,
        claims: dict[str, Any],
        body: TaskCreate,
        *,
        source: str = "api",
        model: str | None = None,
        seed: str | None = None,
        now: datetime | None = None,
    ) -> tuple[Task, bool]:
        """Check everything, store the task, make its schedule. Returns the task and whether it is new (False:
        the same idempotency key made it before, and that task is returned as it is)."""
        now = now or _now()
        owner = str(claims["sub"])
        if not self.scheduler.configured:
            raise Forbidden(
                "Scheduled tasks are not available on this deployment: it has no schedule group configured.",
                code="scheduling_unavailable",
            )
        if body.idempotency_key is not None:
            seed = f"{project.id}\x1f{owner}\x1f{body.idempotency_key}"
        task_id = new_task_id(seed)
        if seed is not None:
            existing = self.store.get_task(task_id)
            if existing is not None and existing.project_id == project.id and existing.owner == owner:
                return existing, False
        s = body.schedule
        spec = schedules.parse(at=s.at, cron=s.cron, rate=s.rate, timezone=s.timezone, now=now)
        action = self._action(body, claims)
        session_id = body.session_id
        if session_id is not None:
            if action["type"] != "agent":
                raise Invalid(
                    "session_id belongs to agent tasks (the conversation their turn continues); a webhook task "
                    "has none. Remove session_id.",
                    field="session_id",
                )
            session = self.store.get_session(session_id)
            if session is None or session.project_id != project.id or session.owner != owner:
                raise NotFound(f"No conversation {session_id} exists for this user.", code="session_not_found")
        if len(self.store.list_tasks(project.id, owner)) >= MAX_TASKS_PER_SUBJECT:
            raise Conflict(
                f"This user already has {MAX_TASKS_PER_SUBJECT} scheduled tasks, the most one user may have. "
                "Cancel some (DELETE /tasks/{id}) before making more.",
                code="too_many_tasks",
            )
        task = Task(
            id=task_id,
            project_id=project.id,
            owner=owner,
            tenant_id=str(claims.get("tenant_id") or project.id),
            name=body.name,
            session_id=session_id,
            schedule=spec.to_dict(),
            action=action,
            claims=claims,
            model=model,
            source="agent" if source == "agent" else "api",
            created_at=now.timestamp(),
        )
        if not self.store.put_task(task):
            existing = self.store.get_task(task_id)
            if existing is not None and existing.project_id == project.id and existing.owner == owner:
                return existing, False
            raise Conflict("A task with this idempotency key is being made right now; send it again.")
        try:
            self.scheduler.create(
                task.id,
                spec,
                {"task_id": task.id, "project_id": project.id},
                description=f"oberik task {task.id} of project {project.id}",
            )
        except Exception:
            self.store.delete_task(task.id)
            raise
        logger.info("task scheduled", task_id=task.id, kind=spec.kind, action=action["type"], source=task.source)
        return task, True

    def _action(self, body: TaskCreate, claims: dict[str, Any]) -> dict[str, Any]:
        a = body.action
        message = a.message
        if message is not None:
            if not message.strip():
                raise Invalid("action.message is empty; say what the task is for.", field="action.message")
            if len(message) > MAX_MESSAGE_CHARS:
                raise Invalid(
                    f"action.message is longer than {MAX_MESSAGE_CHARS} characters; shorten it.",
                    field="action.message",
                )
        if a.type == "agent":
            if message is None:
                raise Invalid(
                    "action.message is required for an agent task: it is what the agent is asked when the task fires.",
                    field="action.message",
                )
            if a.url is not None:
                raise Invalid(
                    "action.url belongs to webhook tasks; an agent task sends its reply to action.callback_url.",
                    field="action.url",
                )
            if "chat" not in (claims.get("capabilities") or []):
                raise Forbidden(
                    "This token may not start turns (it lacks the chat capability), so it cannot schedule an agent "
                    "task either."
                )
            callback = self._check_url(a.callback_url, "action.callback_url") if a.callback_url is not None else None
            return {"type": "agent", "message": message, "callback_url": callback}
        if a.callback_url is not None:
            raise Invalid(
                "action.callback_url belongs to agent tasks; a webhook task POSTs to action.url.",
                field="action.callback_url",
            )
        if a.url is None:
            raise Invalid("action.url is required for a webhook task: it is where the task POSTs.", field="action.url")
        return {"type": "webhook", "message": message, "url": self._check_url(a.url, "action.url")}

    def _check_url(self, url: str, field: str) -> str:
        from oberik.adapters import http_delivery

        http_delivery.check(url, allow_private=self.settings.allow_private_webhooks, field=field)
        return url

    # --- reading and cancelling --------------------------------------------------------------------------

    def list(self, project_id: str, owner: str) -> list[Task]:
        return [t for t in self.store.list_tasks(project_id, owner) if t.project_id == project_id]

    def get(self, project_id: str, owner: str, task_id: str) -> Task:
        task = self.store.get_task(task_id) if isinstance(task_id, str) and len(task_id) <= 100 else None
        if task is None or task.project_id != project_id or task.owner != owner:
            raise NotFound(f"No scheduled task {task_id} exists for this user.", code="task_not_found")
        return task

    def cancel(self, project_id: str, owner: str, task_id: str) -> Task:
        """Delete the schedule, then the task. A task that is not this subject's is NotFound, as is one gone."""
        task = self.get(project_id, owner, task_id)
        self.scheduler.delete(task.id)
        self.store.delete_task(task.id)
        logger.info("task cancelled", task_id=task.id)
        return task


def view(task: Task, now: datetime | None = None) -> TaskPublic:
    """What a listing shows, with the next run worked out from the schedule."""
    now = now or _now()
    anchor = datetime.fromtimestamp(task.created_at, UTC)
    try:
        upcoming = schedules.next_run(task.spec, after=now, anchor=anchor)
    except Invalid:
        upcoming = None
    return public(task, upcoming)


# --- firing -----------------------------------------------------------------------------------------------


def fire(event: dict[str, Any]) -> dict[str, Any]:
    """The scheduled function: run the task the schedule names, once per due time."""
    settings = get_settings()
    store = DynamoStore(settings)
    task_id = str(event.get("task_id") or "")
    due = str(event.get("scheduled_time") or "")
    if not due or due == SCHEDULED_TIME:  # invoked by hand, not by the Scheduler
        due = schedules.iso(_now())
    task = store.get_task(task_id) if task_id else None
    if task is None or task.project_id != event.get("project_id"):
        logger.info("scheduled task is gone; nothing to do", task_id=task_id)
        _forget_schedule(task_id, settings)
        return {"status": "gone", "task_id": task_id}
    project = store.get_project(task.project_id)
    if project is None:
        logger.warning("scheduled task's project is gone", task_id=task.id, project_id=task.project_id)
        return {"status": "gone", "task_id": task.id}
    if task.action.get("type") == "agent":
        result = _start_agent_turn(store, project, task, due, settings)
    else:
        _queue_webhook(store, task, due)
        result = {"status": "sent", "task_id": task.id}
    if task.spec.one_time:
        store.delete_task(task.id)  # its schedule deletes itself (ActionAfterCompletion)
    else:
        store.note_task_fired(task.id, time.time())
    logger.info("scheduled task fired", task_id=task.id, due=due, **{k: v for k, v in result.items() if k != "task_id"})
    return result


def _forget_schedule(task_id: str, settings: Settings) -> None:
    """A schedule whose task was cancelled between its firing and now: make sure it does not fire again."""
    if not task_id:
        return
    try:
        scheduler = TaskScheduler(settings=settings)
        if scheduler.resources.schedule_group:
            scheduler.delete(task_id)
    except Exception:
        logger.warning("could not delete the schedule of a task that is gone", task_id=task_id)


def _claims_of(task: Task) -> TokenClaims:
    now = int(time.time())
    return TokenClaims.model_validate(
        {
            **task.claims,
            "sub": task.owner,
            "pid": task.project_id,
            "tenant_id": task.tenant_id,
            "iat": now,
            "exp": now + _FIRING_TOKEN_SECONDS,
            "jti": secrets.token_hex(8),
        }
    )


def _start_agent_turn(store: Any, project: Project, task: Task, due: str, settings: Settings) -> dict[str, Any]:
    from oberik.adapters.stepfunctions import StepFunctionsOrchestrator
    from oberik.engine.models import resolver_for
    from oberik.engine.turns import TurnStarter

    claims = _claims_of(task)
    starter = TurnStarter(
        store,
        StepFunctionsOrchestrator(settings),
        resolver_for(project.settings.providers, settings),
        settings.default_model,
    )

    def request(session_id: str | None) -> ChatRequest:
        return ChatRequest(
            message=str(task.action["message"]),
            session_id=session_id,
            model=task.model,
            enable_ask_user=False,
            idempotency_key=f"task:{task.id}:{due}",
        )

    req = request(task.session_id)
    try:
        plan = starter.plan(req, project, claims, unattended=True)
    except (Forbidden, Invalid) as e:
        # What the task was allowed no longer holds (a narrowed ceiling, a model gone): retrying cannot help.
        logger.warning("scheduled task refused", task_id=task.id, code=e.code, detail=e.detail)
        return {"status": "refused", "task_id": task.id, "detail": e.detail}
    plan = plan.model_copy(
        update={"scheduled_task": {"task_id": task.id, "callback_url": task.action.get("callback_url")}}
    )
    try:
        started = starter.start(req, project, claims, blocking=False, plan=plan)
    except NotFound:
        # The conversation was deleted since: the task goes on in a new one.
        logger.info("scheduled task's conversation is gone; starting a new one", task_id=task.id)
        started = starter.start(request(None), project, claims, blocking=False, plan=plan)
    except Conflict:
        # The conversation is busy (a turn running or paused). Raising has the invocation retried later.
        logger.info("scheduled task's conversation is busy; the run will be retried", task_id=task.id)
        raise
    return {
        "status": "started",
        "task_id": task.id,
        "session_id": started.run.session_id,
        "turn_id": started.run.turn_id,
        "attached": started.attached,
    }


def _dispatch(note: Notification, tenant_id: str) -> None:
    """Queue the notification (when it has somewhere to go) and publish it to the events topic."""
    resources = stack_resources()
    if note.url and resources.delivery_queue_url:
        DeliveryQueue(resources.delivery_queue_url).send(
            note.to_message(), attributes={"event": note.event, "delivery_id": note.delivery_id}
        )
        logger.info("scheduled_task.fired queued", delivery_id=note.delivery_id, reason=note.reason)
    if resources.events_topic_arn:
        try:
            EventsTopic(resources.events_topic_arn).publish(
                note.body, {"event": note.event, "reason": note.reason, "tenant_id": tenant_id}
            )
        except Exception:
            logger.exception("scheduled_task.fired was not published", delivery_id=note.delivery_id)


def _queue_webhook(store: Any, task: Task, due: str) -> None:
    body = fired_body(
        task_id=task.id, tenant_id=task.tenant_id, session_id=task.session_id, message=task.action.get("message") or ""
    )
    note = fired_notification(
        delivery_id=stable_delivery_id(SCHEDULED_TASK_FIRED, task.id, due),
        project_id=task.project_id,
        body=body,
        reason=WEBHOOK_FIRED,
        url=task.action.get("url"),
    )
    _dispatch(note, task.tenant_id)


def agent_turn_stopped(store: Any, turn: Turn, *, tenant_id: str) -> None:
    """An agent task's turn stopped: once it has ended (not paused), its reply is the task's notification.

    Never raises (it runs where turn.stopped is made, after the reply is saved)."""
    try:
        info = turn.plan.scheduled_task or {}
        if turn.status != "completed" or deliveries.needs_input(turn):
            return  # paused (an approval nobody has given yet): the notification waits for the end
        reason = deliveries.stop_reason(turn) or deliveries.COMPLETED
        note = fired_notification(
            delivery_id=stable_delivery_id(SCHEDULED_TASK_FIRED, turn.id),
            project_id=turn.project_id,
            body=fired_body(
                task_id=str(info.get("task_id") or ""),
                tenant_id=tenant_id,
                session_id=turn.session_id,
                message=turn.content,
            ),
            reason=reason,
            url=info.get("callback_url"),
            turn_id=turn.id,
            pause_seq=turn.pause_seq,
        )
        _dispatch(note, tenant_id)
    except Exception:
        logger.exception("scheduled_task.fired was not queued", turn_id=turn.id)


def handle(event: dict[str, Any]) -> dict[str, Any]:
    """The function's entry: an event from the Scheduler (or the local clock) is the target's input."""
    if isinstance(event, str):  # an Input that was not JSON reaches a Lambda as a string
        event = json.loads(event)
    try:
        return fire(event)
    except OberikError as e:
        if isinstance(e, Conflict):
            raise
        logger.warning("scheduled task could not run", code=e.code, detail=e.detail)
        return {"status": "refused", "detail": e.detail}
