"""turn.stopped, from both ends of the queue.

`turn_stopped` runs where a turn stops (the Park and Finish tasks, and a resume that leaves the turn paused):
it works out the notification, publishes it to the events topic and, when the project has a webhook, queues
it. It only queues: a turn never waits on a receiver. `handle_sqs` is the deliver function's handler: for each
queued notification it looks again (a held pause that was answered meanwhile is not sent), signs the body with
the project's current webhook secret, POSTs it through the egress guard and logs the attempt. A failure is
reported back to SQS (partial batch failure) after pushing the message's next visibility out, so SQS retries
with backoff and, after the queue's maxReceiveCount, moves it to the dead-letter queue.
"""

from __future__ import annotations

import secrets
import time
from typing import Any

from oberik.adapters import http_delivery
from oberik.adapters.dynamodb import DynamoStore
from oberik.adapters.sns import EventsTopic
from oberik.adapters.sqs import DeliveryQueue, stack_resources
from oberik.domain import deliveries
from oberik.domain.deliveries import DeliveryAttempt, Notification
from oberik.domain.models import Session, Turn
from oberik.engine import projects
from oberik.observability import logger
from oberik.settings import get_settings

# How long a pause notification on an interactive turn is held back (SQS DelaySeconds) before the consumer
# looks whether the connected client has answered it. Scheduled turns are never held.
PAUSE_GRACE_SECONDS = 5
# One attempt's budget, connecting included.
DELIVERY_TIMEOUT_SECONDS = 5.0
# After a failed attempt n, the message stays hidden RETRY_BASE_SECONDS * 4**(n-1) seconds, at most the cap.
RETRY_BASE_SECONDS = 10.0
RETRY_CAP_SECONDS = 900
# How long the deliveries log keeps an attempt.
LOG_KEEP_SECONDS = 14 * 24 * 3600


# --- the turn's side -------------------------------------------------------------------------------------


def turn_stopped(
    store: DynamoStore, turn_id: str, *, turn: Turn | None = None, session: Session | None = None
) -> Notification | None:
    """Publish and queue the turn.stopped notification of a turn that has just stopped. `turn`, `session`: the
    caller's copies as they now stand, when it has them (else they are read).

    Never raises: the reply is saved by now, and a notification that cannot be queued costs a notification,
    not the turn.
    """
    try:
        return _turn_stopped(store, turn_id, turn, session)
    except Exception:
        logger.exception("turn.stopped was not queued", turn_id=turn_id)
        return None


def _turn_stopped(store: DynamoStore, turn_id: str, turn: Turn | None, session: Session | None) -> Notification | None:
    turn = turn or store.get_turn(turn_id)
    if turn is None:
        return None
    session = session or store.get_session(turn.session_id)
    # The token's tenant, as the plan recorded it (a turn planned before it did so: the project).
    tenant_id = str(turn.plan.caller.get("tenant_id") or turn.project_id)
    note = deliveries.notification_for(turn, tenant_id=tenant_id, user_ref=session.user_ref if session else None)
    if note is None:
        return None
    resources = stack_resources()
    project = projects.load(store, turn.project_id)
    if project is not None and project.settings.webhook_url and resources.delivery_queue_url:
        DeliveryQueue(resources.delivery_queue_url).send(
            note.to_message(),
            delay_seconds=PAUSE_GRACE_SECONDS if note.hold else 0,
            attributes={"event": note.event, "delivery_id": note.delivery_id},
        )
        logger.info(
            "turn.stopped queued", turn_id=turn.id, delivery_id=note.delivery_id, reason=note.reason, held=note.hold
        )
    if resources.events_topic_arn:
        try:
            EventsTopic(resources.events_topic_arn).publish(
                note.body, {"event": note.event, "reason": note.reason, "tenant_id": tenant_id}
            )
        except Exception:
            logger.exception("turn.stopped was not published", turn_id=turn.id)
    if turn.plan.scheduled_task:  # a scheduled task's turn: its reply is the task's scheduled_task.fired
        from oberik.engine import tasks

        tasks.agent_turn_stopped(store, turn, tenant_id=tenant_id)
    return note


# --- the consumer's side ---------------------------------------------------------------------------------


def handle_sqs(event: dict[str, Any]) -> dict[str, Any]:
    """The deliver function: one attempt per record; the ones to retry come back as batchItemFailures."""
    store = DynamoStore(get_settings())
    failures: list[dict[str, str]] = []
    for record in event.get("Records") or []:
        try:
            done = deliver(store, record)
        except Exception:
            logger.exception("delivery attempt crashed", message_id=record.get("messageId"))
            done = False
        if not done:
            failures.append({"itemIdentifier": str(record.get("messageId"))})
    return {"batchItemFailures": failures}


def deliver(store: DynamoStore, record: dict[str, Any]) -> bool:
    """Make one attempt at the notification in an SQS record. True when SQS may forget it (sent, or not to be
    sent); False to have it retried."""
    try:
        note = Notification.from_message(str(record["body"]))
    except (KeyError, TypeError, ValueError):
        # Retried until the queue gives it to the dead-letter queue, where somebody can look at it.
        logger.error("unreadable delivery message", message_id=record.get("messageId"))
        return False
    attempt = int((record.get("attributes") or {}).get("ApproximateReceiveCount") or 1)
    if any(a.outcome == "delivered" for a in store.delivery_attempts(note.delivery_id)):
        logger.info("delivery already made", delivery_id=note.delivery_id)  # SQS handed the message out twice
        return True
    project = store.get_project(note.project_id)
    url = note.url or (project.settings.webhook_url if project is not None else None)
    skip = deliveries.moved_on(note, store.get_turn(note.turn_id)) if note.hold else None
    if skip is None and not url:
        skip = "the project has no webhook_url any more"
    if skip is not None or not url:
        _log(store, note, url, attempt, "skipped", error=skip)
        logger.info("delivery skipped", delivery_id=note.delivery_id, why=skip)
        return True
    secret = store.get_webhook_secret(note.project_id) or store.create_webhook_secret(
        note.project_id, deliveries.new_webhook_secret()
    )
    raw = note.body.encode("utf-8")
    result = http_delivery.post(
        url,
        raw,
        deliveries.headers(secret, raw, note.delivery_id),
        timeout=DELIVERY_TIMEOUT_SECONDS,
        allow_private=get_settings().allow_private_webhooks,
    )
    outcome: deliveries.Outcome = "delivered" if result.ok else ("refused" if result.refused else "failed")
    _log(
        store,
        note,
        url,
        attempt,
        outcome,
        status_code=result.status_code,
        duration_ms=result.duration_ms,
        error=result.error,
    )
    logger.info(
        "delivery attempt",
        delivery_id=note.delivery_id,
        attempt=attempt,
        outcome=outcome,
        status_code=result.status_code,
        duration_ms=result.duration_ms,
    )
    if result.ok or result.refused:
        return True  # a refused target is refused again on every retry
    _back_off(record, attempt)
    return False


def _back_off(record: dict[str, Any], attempt: int) -> None:
    """Hide the message for longer after each failure, so retries spread out instead of hammering the receiver."""
    receipt = record.get("receiptHandle")
    queue_url = stack_resources().delivery_queue_url
    if not receipt or not queue_url:
        return  # the queue's own visibility timeout decides
    delay = deliveries.retry_delay(attempt, base_seconds=RETRY_BASE_SECONDS, cap_seconds=RETRY_CAP_SECONDS)
    try:
        DeliveryQueue(queue_url).retry_later(str(receipt), delay)
    except Exception:
        logger.warning("could not postpone the retry; the queue's visibility timeout applies", attempt=attempt)


def _log(
    store: DynamoStore,
    note: Notification,
    url: str | None,
    attempt: int,
    outcome: deliveries.Outcome,
    *,
    status_code: int | None = None,
    duration_ms: int = 0,
    error: str | None = None,
) -> None:
    store.record_delivery_attempt(
        DeliveryAttempt(
            delivery_id=note.delivery_id,
            project_id=note.project_id,
            event=note.event,
            url=url,
            attempt=attempt,
            outcome=outcome,
            status_code=status_code,
            duration_ms=duration_ms,
            error=error,
            delivered_at=time.time(),
            turn_id=note.turn_id,
            session_id=note.session_id,
            reason=note.reason,
        ),
        secrets.token_hex(4),
        keep_seconds=LOG_KEEP_SECONDS,
    )
