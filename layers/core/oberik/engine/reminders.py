"""The agent's scheduling tools: `schedule_reminder`, `cancel_reminder`, `list_reminders`.

They make, cancel and list the same scheduled tasks as `POST/DELETE/GET /tasks`, for the turn's subject: a
reminder is an `agent` task in the turn's conversation, so when it fires the agent is asked the reminder's
message there, unattended, and the subject hears of it the way they hear of any scheduled turn (turn.stopped
with `scheduled: true`, the events topic). Capability `tasks:write`, flag `enable_scheduling`; `current_time`
and `wait`, the family's other two, are built in.

A reminder's turn runs with no more than the turn that scheduled it had: its capabilities are those of the
tools that turn was handed (plus chat), and it uses the same model.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

from oberik.domain.errors import OberikError
from oberik.domain.models import Project
from oberik.domain.tasks import ActionIn, ScheduleIn, TaskCreate
from oberik.domain.tools import ToolSpec
from oberik.engine.toolbox import ToolContext, spec_for
from oberik.engine.tools import ToolOutcome

FAMILY_NAME = "scheduling"
CAPABILITY = "tasks:write"
MAX_IN_MINUTES = 366 * 24 * 60

SCHEDULE_REMINDER = ToolSpec(
    name="schedule_reminder",
    family=FAMILY_NAME,
    capability=CAPABILITY,
    family_owner=FAMILY_NAME,
    description=(
        "Schedule something for later in this conversation: when it is due you are given `message` as a new "
        "instruction here, with nobody necessarily watching, and the user is notified of your reply. Write "
        "`message` as the instruction you want to receive then (e.g. 'Remind the user to call the dentist'). "
        "Give exactly one of in_minutes (from now), at (a local date and time), cron (repeating, AWS cron: "
        "minutes hours day-of-month month day-of-week year, one of the day fields '?') or rate (repeating, "
        "e.g. '1 day'). Call current_time first when the date matters."
    ),
    parameters={
        "type": "object",
        "properties": {
            "message": {"type": "string", "description": "the instruction you will receive when it fires"},
            "in_minutes": {"type": "integer", "minimum": 1, "description": "fire once, this many minutes from now"},
            "at": {"type": "string", "description": "fire once at this local time, e.g. 2026-12-01T09:00:00"},
            "cron": {"type": "string", "description": "repeat on a calendar rule, e.g. '0 9 ? * MON-FRI *'"},
            "rate": {"type": "string", "description": "repeat every interval, e.g. '30 minutes', '1 day'"},
            "timezone": {"type": "string", "description": "IANA time zone for at and cron; UTC when omitted"},
            "name": {"type": "string", "description": "a short label the user will recognise"},
        },
        "required": ["message"],
        "additionalProperties": False,
    },
)

CANCEL_REMINDER = ToolSpec(
    name="cancel_reminder",
    family=FAMILY_NAME,
    capability=CAPABILITY,
    family_owner=FAMILY_NAME,
    description="Cancel one of the user's scheduled reminders or tasks by its id (list_reminders shows the ids).",
    parameters={
        "type": "object",
        "properties": {"id": {"type": "string", "description": "the task id, task_..."}},
        "required": ["id"],
        "additionalProperties": False,
    },
)

LIST_REMINDERS = ToolSpec(
    name="list_reminders",
    family=FAMILY_NAME,
    capability=CAPABILITY,
    family_owner=FAMILY_NAME,
    description=(
        "List the user's scheduled reminders and tasks: id, what each does, its schedule and when it next runs."
    ),
    parameters={"type": "object", "properties": {}, "additionalProperties": False},
)

_SPECS = (SCHEDULE_REMINDER, CANCEL_REMINDER, LIST_REMINDERS)


def _error(text: str) -> ToolOutcome:
    return ToolOutcome(json.dumps({"error": text}), ok=False)


def _turn_claims(ctx: ToolContext) -> dict[str, Any]:
    """What the reminder's turn may do: the scheduling turn's caller, with the capabilities of its tools."""
    caller = ctx.turn.plan.caller or {}
    capabilities = {"chat"}
    for name in ctx.turn.plan.tools:
        spec = spec_for(name, ctx.turn)
        if spec is not None and spec.capability:
            capabilities.add(spec.capability)
    return {
        "sub": ctx.turn.owner,
        "pid": ctx.turn.project_id,
        "tenant_id": caller.get("tenant_id") or ctx.turn.project_id,
        "scope": caller.get("scope"),
        "roles": list(caller.get("roles") or []),
        "groups": list(caller.get("groups") or []),
        "capabilities": sorted(capabilities),
        "models": [ctx.turn.plan.model],
        "max_effort": ctx.turn.plan.reasoning_effort,
        "user_ref": caller.get("user_ref"),
    }


def _describe(task: Any, session_id: str) -> dict[str, Any]:
    from oberik.engine.tasks import view

    shown = view(task)
    return {
        "id": shown.id,
        "name": shown.name,
        "message": task.action.get("message"),
        "action": task.action.get("type"),
        "schedule": shown.schedule["expression"],
        "timezone": shown.schedule["timezone"],
        "next_run_at": shown.next_run_at,
        "this_conversation": task.session_id == session_id,
    }


class SchedulingFamily:
    name = FAMILY_NAME

    def specs(self, project: Project, store: Any) -> Iterable[ToolSpec]:
        return _SPECS

    def run(self, ctx: ToolContext) -> ToolOutcome:
        from oberik.engine.tasks import Tasks

        try:
            tasks = Tasks(ctx.store)
            if ctx.call.name == "schedule_reminder":
                return self._schedule(ctx, tasks)
            if ctx.call.name == "cancel_reminder":
                task_id = ctx.args.get("id")
                if not isinstance(task_id, str) or not task_id.strip():
                    return _error("id is required: the task id list_reminders shows (task_...)")
                cancelled = tasks.cancel(ctx.turn.project_id, ctx.turn.owner, task_id.strip())
                return ToolOutcome(json.dumps({"cancelled": cancelled.id, "message": cancelled.action.get("message")}))
            if ctx.call.name == "list_reminders":
                found = tasks.list(ctx.turn.project_id, ctx.turn.owner)
                return ToolOutcome(
                    json.dumps({"reminders": [_describe(t, ctx.turn.session_id) for t in found]}, ensure_ascii=False)
                )
        except OberikError as e:
            return _error(e.detail)
        return _error(f"no tool named {ctx.call.name!r} is available on this turn")

    def _schedule(self, ctx: ToolContext, tasks: Any) -> ToolOutcome:
        from oberik.engine.tasks import view

        args = ctx.args
        message = args.get("message")
        if not isinstance(message, str) or not message.strip():
            return _error("message is required: the instruction you want to receive when the reminder fires")
        at, timezone = args.get("at"), args.get("timezone")
        minutes = args.get("in_minutes")
        if minutes is not None:
            if at is not None:
                return _error("give either in_minutes or at, not both")
            if isinstance(minutes, bool) or not isinstance(minutes, int) or not 1 <= minutes <= MAX_IN_MINUTES:
                return _error(f"in_minutes must be a whole number from 1 to {MAX_IN_MINUTES}")
            when = datetime.fromtimestamp(ctx.now, UTC) + timedelta(minutes=minutes)
            at = when.replace(microsecond=0).isoformat()  # with its offset: read in `timezone` (or UTC)
        for key in ("at", "cron", "rate", "timezone", "name"):
            value = at if key == "at" else args.get(key)
            if value is not None and not isinstance(value, str):
                return _error(f"{key} must be a string")
        body = TaskCreate(
            schedule=ScheduleIn(at=at, cron=args.get("cron"), rate=args.get("rate"), timezone=timezone),
            action=ActionIn(type="agent", message=message),
            name=(args.get("name") or None),
            session_id=ctx.turn.session_id,
        )
        project = ctx.store.get_project(ctx.turn.project_id)
        if project is None:
            return _error("this conversation's project no longer exists")
        task, _new = tasks.create(
            project,
            _turn_claims(ctx),
            body,
            source="agent",
            model=ctx.turn.plan.model,
            seed=f"{ctx.turn.id}\x1f{ctx.call.id}",  # a retried step makes the same reminder, not a second
            now=datetime.fromtimestamp(ctx.now, UTC),
        )
        shown = view(task)
        return ToolOutcome(
            json.dumps(
                {
                    "scheduled": task.id,
                    "schedule": shown.schedule["expression"],
                    "timezone": shown.schedule["timezone"],
                    "next_run_at": shown.next_run_at,
                    "repeats": not task.spec.one_time,
                },
                ensure_ascii=False,
            )
        )


FAMILY = SchedulingFamily()
