"""Deliveries we send: the turn.stopped notification, how it is signed, and when it is no longer worth sending.

A turn that stops (it finished, or it waits on somebody) becomes one `Notification`: a delivery id made once,
the body serialized once (keys sorted), and what the consumer needs to look again before sending. Everything
here is pure; queues, HTTP and the table are the engine's and the adapters' business.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import time
from dataclasses import asdict, dataclass
from typing import Any, Literal

from pydantic import BaseModel

from oberik.domain import pauses
from oberik.domain.models import Turn

TURN_STOPPED = "turn.stopped"
PREVIEW_CHARS = 280
SIGNATURE_HEADER = "X-Signature"
DELIVERY_ID_HEADER = "X-Delivery-Id"

# Why a finished turn stopped. Pauses report `pauses.reason(pending)` (needs_answer, needs_approval,
# needs_client_tool, and any pause added later).
COMPLETED = "completed"
HIT_TOOL_LIMIT = "hit_tool_limit"
NO_ANSWER = "no_answer"


def new_delivery_id() -> str:
    """Unique per notification, time-ordered; made once, when the notification is queued."""
    return f"dlv_{int(time.time() * 1000):012x}{secrets.token_hex(8)}"


def new_webhook_secret() -> str:
    return "whsec_" + secrets.token_urlsafe(32)


# --- the body --------------------------------------------------------------------------------------------


def stop_reason(turn: Turn) -> str | None:
    """The turn.stopped reason for the turn as it stands, or None when it is not a stop we report.

    Failed and cancelled turns are not turn.stopped reasons (the spec's table has none for them): the client
    that asked saw the error or asked for the stop itself, and the reply was not saved.
    """
    if turn.status in ("failed", "cancelled", "running"):
        return None
    if turn.status == "paused" or pauses.outstanding(turn.pending):
        return pauses.reason(turn.pending)
    if turn.finish_reason in (HIT_TOOL_LIMIT, NO_ANSWER):
        return turn.finish_reason
    if not turn.content.strip() and not turn.ui:
        return NO_ANSWER
    return COMPLETED


def needs_input(turn: Turn) -> bool:
    """Somebody is expected to act: read from the turn's own state, so a pause kind added later still says so."""
    return turn.status == "paused" or pauses.outstanding(turn.pending)


def complete(turn: Turn, reason: str) -> bool:
    """The turn finished the work it was given: it ended, nothing is outstanding, and it is not short."""
    return turn.status == "completed" and not pauses.outstanding(turn.pending) and reason == COMPLETED


def preview(content: str, reason: str) -> tuple[str | None, bool]:
    """The opening of a completed turn's answer (at most PREVIEW_CHARS characters) and whether more follows."""
    if reason != COMPLETED or not content.strip():
        return None, False
    return content[:PREVIEW_CHARS], len(content) > PREVIEW_CHARS


def _unique(names: list[str]) -> list[str]:
    return list(dict.fromkeys(names))


def turn_stopped_body(
    turn: Turn, *, reason: str, tenant_id: str, user_ref: str | None, scheduled: bool
) -> dict[str, Any]:
    """Every field of the spec's turn.stopped payload, always present (empty lists / null when not the cause)."""
    pending = turn.pending or {}
    text, truncated = preview(turn.content, reason)
    return {
        "event": TURN_STOPPED,
        "reason": reason,
        "needs_input": needs_input(turn),
        "complete": complete(turn, reason),
        "scheduled": scheduled,
        "tenant_id": tenant_id,
        "session_id": turn.session_id,
        "user_ref": user_ref,
        "preview": text,
        "preview_truncated": truncated,
        "content_chars": len(turn.content),
        "tools": _unique([c["name"] for c in pending.get("tool_calls", [])]) if reason == "needs_client_tool" else [],
        "questions": [
            {"tool_call_id": batch["tool_call_id"], "headers": [q["header"] for q in batch.get("questions", [])]}
            for batch in pending.get("questions", [])
        ],
        "approvals": [
            {"tool_call_id": a["tool_call_id"], "action": a.get("action", "")} for a in pending.get("approvals", [])
        ],
    }


# --- signing ----------------------------------------------------------------------------------------------


def encode(body: dict[str, Any]) -> str:
    """The one serialization of a body: compact JSON, keys sorted. Signed and sent as these exact bytes (UTF-8)."""
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def signature(secret: str, raw: bytes) -> str:
    """`sha256=<hex HMAC-SHA256 of the raw body>`: what a receiver recomputes over the bytes it was sent."""
    return "sha256=" + hmac.new(secret.encode(), raw, hashlib.sha256).hexdigest()


def headers(secret: str, raw: bytes, delivery_id: str) -> dict[str, str]:
    return {
        "Content-Type": "application/json",
        "User-Agent": "oberik-webhooks/1",
        SIGNATURE_HEADER: signature(secret, raw),
        DELIVERY_ID_HEADER: delivery_id,
    }


# --- the queued notification ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Notification:
    """One queued delivery. `body` is the serialized payload, sent unchanged on every attempt."""

    delivery_id: str
    event: str
    project_id: str
    turn_id: str
    session_id: str
    reason: str
    pause_seq: int
    # An interactive pause: the connected client usually answers within moments, so the consumer looks again
    # and sends nothing if it has.
    hold: bool
    body: str
    # Where it goes when not to the project's webhook_url (a scheduled task's callback_url or webhook url).
    url: str | None = None

    def to_message(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def from_message(cls, text: str) -> Notification:
        doc = json.loads(text)
        return cls(**{k: doc[k] for k in cls.__dataclass_fields__ if k in doc or k != "url"})


def notification_for(turn: Turn, *, tenant_id: str, user_ref: str | None) -> Notification | None:
    """The turn.stopped notification for a turn that has just stopped, or None when it is not one we send."""
    reason = stop_reason(turn)
    if reason is None:
        return None
    scheduled = turn.plan.unattended
    body = turn_stopped_body(turn, reason=reason, tenant_id=tenant_id, user_ref=user_ref, scheduled=scheduled)
    return Notification(
        delivery_id=new_delivery_id(),
        event=TURN_STOPPED,
        project_id=turn.project_id,
        turn_id=turn.id,
        session_id=turn.session_id,
        reason=reason,
        pause_seq=turn.pause_seq,
        hold=bool(body["needs_input"]) and not scheduled,
        body=encode(body),
    )


def moved_on(notification: Notification, turn: Turn | None) -> str | None:
    """Why a held pause notification is no longer worth sending (its pause was answered), or None to send it."""
    if not notification.hold:
        return None
    if turn is None:
        return "the turn no longer exists"
    if turn.status != "paused" or turn.pause_seq != notification.pause_seq:
        return "the pause was answered before the notification was due"
    return None


def retry_delay(attempt: int, *, base_seconds: float, cap_seconds: int) -> int:
    """Seconds before attempt `attempt + 1`: base, 4x base, 16x base, ..., at most `cap_seconds`."""
    return int(min(cap_seconds, base_seconds * 4 ** max(0, attempt - 1)))


# --- the log ----------------------------------------------------------------------------------------------

Outcome = Literal["delivered", "failed", "refused", "skipped"]


class DeliveryAttempt(BaseModel):
    """One attempt at one delivery, as the deliveries log keeps it."""

    delivery_id: str
    project_id: str
    event: str
    url: str | None
    attempt: int
    outcome: Outcome
    status_code: int | None = None
    duration_ms: int = 0
    error: str | None = None
    delivered_at: float
    turn_id: str | None = None
    session_id: str | None = None
    reason: str | None = None


class DeliveryAttemptPublic(BaseModel):
    delivery_id: str
    event: str
    url: str | None
    attempt: int
    outcome: Outcome
    status_code: int | None
    duration_ms: int
    error: str | None
    delivered_at: float
    session_id: str | None
    reason: str | None
