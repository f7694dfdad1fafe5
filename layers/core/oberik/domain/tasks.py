"""Scheduled tasks: what a subject asked to happen later, and the `scheduled_task.fired` notification.

A task belongs to the subject whose token made it (or whose turn's agent made it with `schedule_reminder`):
nobody else can see or cancel it. Its action is `agent` (a turn runs unattended with the task's message, as
that subject, and its reply is POSTed to `callback_url`) or `webhook` (the notification is POSTed to `url`).
Either way the body is signed with the project's webhook secret exactly as turn.stopped is, so one verifier
handles both. Pure: the engine stores, schedules and delivers.
"""

from __future__ import annotations

import hashlib
import secrets
import time
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from oberik.domain.deliveries import Notification, encode
from oberik.domain.schedules import ScheduleSpec

SCHEDULED_TASK_FIRED = "scheduled_task.fired"
MAX_MESSAGE_CHARS = 20_000
MAX_TASKS_PER_SUBJECT = 100
# The SNS `reason` of a webhook task's notification; an agent task's is its turn's stop reason.
WEBHOOK_FIRED = "webhook"

ActionType = Literal["agent", "webhook"]
Source = Literal["api", "agent"]


def new_task_id(seed: str | None = None) -> str:
    """`task_` and 28 hex digits. With a seed (an idempotency key, a tool call) the same seed gives the same id,
    so a retried request finds the task it already made instead of making a second one."""
    if seed is None:
        return f"task_{int(time.time() * 1000):012x}{secrets.token_hex(8)}"
    return "task_" + hashlib.sha256(seed.encode()).hexdigest()[:28]


def stable_delivery_id(*parts: str) -> str:
    """A delivery id made from what identifies the notification, so every retry of the same firing (the
    Scheduler's, Lambda's, SQS's) carries the same id and the receiver can deduplicate on it."""
    return "dlv_" + hashlib.sha256("\x1f".join(parts).encode()).hexdigest()[:28]


# --- requests ---------------------------------------------------------------------------------------------


class ScheduleIn(BaseModel):
    """When: exactly one of at / cron / rate, and the time zone at and cron are read in."""

    model_config = ConfigDict(extra="forbid")

    at: str | None = Field(default=None, description="2026-12-01T09:00:00 in `timezone`, or with an offset")
    cron: str | None = Field(default=None, description="AWS cron: minutes hours day-of-month month day-of-week year")
    rate: str | None = Field(default=None, description="'5 minutes', '1 hour', '2 days'")
    timezone: str | None = Field(default=None, description="IANA name; UTC when omitted")


class ActionIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    type: ActionType
    message: str | None = Field(default=None, description="agent: what the agent is asked; webhook: carried along")
    callback_url: str | None = Field(default=None, description="agent: where the reply is POSTed")
    url: str | None = Field(default=None, description="webhook: where the notification is POSTed")


class TaskCreate(BaseModel):
    """POST /tasks."""

    model_config = ConfigDict(extra="forbid")

    schedule: ScheduleIn
    action: ActionIn
    name: str | None = Field(default=None, max_length=200)
    session_id: str | None = Field(default=None, description="agent: the conversation the turn continues")
    idempotency_key: str | None = Field(default=None, min_length=1, max_length=200)


# --- the stored task --------------------------------------------------------------------------------------


class Task(BaseModel):
    id: str
    project_id: str
    owner: str  # the subject
    tenant_id: str
    name: str | None = None
    session_id: str | None = None
    schedule: dict[str, str]  # ScheduleSpec.to_dict()
    action: dict[str, Any]  # {"type", "message", "callback_url" | "url"}
    # What the subject's token allowed when the task was made: an agent task's turn runs with no more.
    claims: dict[str, Any] = Field(default_factory=dict)
    model: str | None = None  # the model an agent task's turn uses (None: the project's default)
    source: Source = "api"
    created_at: float
    last_fired_at: float | None = None
    fired: int = 0

    @property
    def spec(self) -> ScheduleSpec:
        return ScheduleSpec(
            self.schedule["kind"],  # type: ignore[arg-type]
            self.schedule["expression"],
            self.schedule.get("timezone") or "UTC",
        )


class TaskPublic(BaseModel):
    id: str
    name: str | None
    session_id: str | None
    schedule: dict[str, str]
    action: dict[str, Any]
    next_run_at: str | None = Field(description="UTC, ISO 8601; null when it will not run again")
    created_at: float
    last_fired_at: float | None
    fired: int
    source: Source


def public(task: Task, next_run: datetime | None) -> TaskPublic:
    return TaskPublic(
        id=task.id,
        name=task.name,
        session_id=task.session_id,
        schedule=dict(task.schedule),
        action={k: v for k, v in task.action.items() if v is not None},
        next_run_at=next_run.astimezone(UTC).isoformat(timespec="seconds").replace("+00:00", "Z") if next_run else None,
        created_at=task.created_at,
        last_fired_at=task.last_fired_at,
        fired=task.fired,
        source=task.source,
    )


# --- the notification -------------------------------------------------------------------------------------


def fired_body(*, task_id: str, tenant_id: str, session_id: str | None, message: str) -> dict[str, Any]:
    """The spec's scheduled_task.fired payload, every field always present."""
    return {
        "event": SCHEDULED_TASK_FIRED,
        "task_id": task_id,
        "tenant_id": tenant_id,
        "session_id": session_id,
        "message": message,
    }


def fired_notification(
    *,
    delivery_id: str,
    project_id: str,
    body: dict[str, Any],
    reason: str,
    url: str | None,
    turn_id: str = "",
    pause_seq: int = 0,
) -> Notification:
    """The queued delivery of one firing: sent at once (nobody is watching a scheduled task) to `url`."""
    return Notification(
        delivery_id=delivery_id,
        event=SCHEDULED_TASK_FIRED,
        project_id=project_id,
        turn_id=turn_id,
        session_id=str(body.get("session_id") or ""),
        reason=reason,
        pause_seq=pause_seq,
        hold=False,
        body=encode(body),
        url=url,
    )
