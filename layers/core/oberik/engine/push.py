"""Web push, the use cases behind `GET /push/key`, `POST /push/subscribe` and `POST /push/hook`.

The hook is where a project's `turn.stopped` deliveries arrive when its `webhook_url` points at this
deployment's own `/push/hook`. It verifies the delivery the way any receiver would (`X-Signature` over the raw
bytes, with the project's webhook secret), looks up who was waiting (the owner of the conversation the event
names), and pushes a notification to each browser that subject subscribed. Per subscription:

- 2xx: sent. A "sent" marker keyed by the delivery id keeps a retried delivery from pushing it twice.
- 404 / 410: the browser dropped the subscription; it is forgotten.
- 429: Retry-After is honoured. A short one (at most INLINE_RETRY_SECONDS) is waited out here and the push
  tried again, at most INLINE_RETRIES times. A longer one (or none given) is remembered on the subscription as
  `not_before`, and the hook answers 503 with a Retry-After: the project's delivery queue retries the delivery
  with its own backoff, and until `not_before` passes a retry still sends nothing to that endpoint.
- 5xx, timeouts, unreachable: the claim is given back and the hook answers 503, so the delivery is retried.
- Anything else (400, 403, 413, a refused address): logged; retrying would not help, so it is not retried.
"""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Literal

from oberik.adapters import http_delivery, webpush
from oberik.adapters.dynamodb import DynamoStore
from oberik.adapters.webpush import VapidKeys, VapidMisconfigured
from oberik.domain import deliveries, push
from oberik.domain.errors import Conflict, Invalid, Unauthorized
from oberik.domain.push import PushSubscription, PushSubscriptionPublic
from oberik.observability import logger
from oberik.settings import Settings

# A Retry-After at most this long is waited out inside the hook's request, then the push is tried again (once):
# the project's delivery gives the hook only a few seconds (engine.deliveries.DELIVERY_TIMEOUT_SECONDS).
INLINE_RETRY_SECONDS = 2.0
INLINE_RETRIES = 1
# A 429 without a readable Retry-After: wait this long before the next try.
DEFAULT_RETRY_AFTER_SECONDS = 60.0
# However long a push service asks for, an endpoint is never put off longer than this.
MAX_RETRY_AFTER_SECONDS = 3600.0
# One push's budget, connecting included.
SEND_TIMEOUT_SECONDS = 3.0
# Pushes to one subject's browsers go out this many at a time.
MAX_PARALLEL_PUSHES = 8


def keys_of(settings: Settings) -> VapidKeys | None:
    """The deployment's VAPID pair, or None when push is off. A pair that cannot be used is logged and counts
    as off, so a broken setting never turns into a 500 on every page load."""
    private = settings.vapid_private_key.get_secret_value() if settings.vapid_private_key else None
    try:
        return webpush.vapid_keys(settings.vapid_public_key, private, settings.vapid_subject)
    except VapidMisconfigured as e:
        logger.error("web push is off: the VAPID settings cannot be used", why=str(e))
        return None


def public_key(settings: Settings) -> str:
    """What a browser subscribes with (applicationServerKey); blank when this deployment has push off."""
    keys = keys_of(settings)
    return keys.public_key if keys else ""


# --- subscribe --------------------------------------------------------------------------------------------


def subscribe(
    store: DynamoStore, settings: Settings, *, project_id: str, owner: str, doc: Any
) -> tuple[PushSubscriptionPublic, bool]:
    """Store a browser's subscription for `owner`. Idempotent per endpoint: a repeat replaces it. Returns the
    stored subscription and whether the endpoint was new."""
    if keys_of(settings) is None:
        raise Conflict(
            "Web push is off on this deployment (it has no VAPID key pair), so there is nothing to subscribe to; "
            "GET /push/key answers blank until VAPID_PUBLIC_KEY and VAPID_PRIVATE_KEY are set.",
            code="push_off",
        )
    now = time.time()
    request = push.parse_subscription(doc, now=now)
    allow_private = settings.allow_private_webhooks
    if not allow_private and not request.endpoint.lower().startswith("https://"):
        raise Invalid("endpoint must be an https:// URL: push services are only reached over TLS.", field="endpoint")
    # The same guard as a webhook URL: checked now, and again (resolved afresh) before every push.
    http_delivery.check(request.endpoint, allow_private=allow_private, field="endpoint")
    sub = PushSubscription(
        project_id=project_id,
        owner=owner,
        endpoint=request.endpoint,
        endpoint_hash=push.endpoint_hash(request.endpoint),
        p256dh=request.p256dh,
        auth=request.auth,
        expiration_time=request.expiration_time,
        created_at=now,
        updated_at=now,
    )
    created = store.save_push_subscription(sub)
    stored = store.get_push_subscription(project_id, sub.endpoint_hash) or sub
    logger.info("push subscription stored", project_id=project_id, endpoint_hash=sub.endpoint_hash, new=created)
    return (
        PushSubscriptionPublic(
            endpoint=stored.endpoint,
            expiration_time=stored.expiration_time,
            created_at=stored.created_at,
            updated_at=stored.updated_at,
        ),
        created,
    )


# --- the hook ---------------------------------------------------------------------------------------------


@dataclass
class HookOutcome:
    """What the hook did with one delivery, per subscription of the subject."""

    event: str = ""
    sent: int = 0
    removed: int = 0
    deferred: int = 0
    failed: int = 0
    duplicates: int = 0
    skipped: str | None = None
    retry_after: float | None = None  # set when the delivery should come again (the hook answers 503)
    errors: list[str] = field(default_factory=list)

    def public(self) -> dict[str, Any]:
        return {
            "event": self.event,
            "sent": self.sent,
            "removed": self.removed,
            "deferred": self.deferred,
            "failed": self.failed,
            "duplicates": self.duplicates,
            "skipped": self.skipped,
            "errors": self.errors,
        }


_FORGED = "X-Signature does not match this body: sign the exact bytes with the project's webhook secret."


def verified_event(store: DynamoStore, raw: bytes, signature: str | None) -> tuple[dict[str, Any], str, str]:
    """The delivery's event, the project it belongs to and the subject waiting on it, once `X-Signature` checks
    out against the webhook secret of the project that owns the conversation the event names. Raises
    Unauthorized for an unsigned or forged delivery (including one naming a conversation that is not here)."""
    if not signature or not signature.strip():
        raise Unauthorized(
            "X-Signature is missing: /push/hook takes only deliveries signed with the project's webhook secret.",
            code="signature_missing",
        )
    try:
        event = json.loads(raw)
    except (UnicodeDecodeError, ValueError):
        raise Unauthorized(_FORGED, code="signature_invalid") from None
    session_id = event.get("session_id") if isinstance(event, dict) else None
    readable = isinstance(session_id, str) and 0 < len(session_id) <= 200
    session = store.get_session(session_id) if readable and isinstance(session_id, str) else None
    secret = store.get_webhook_secret(session.project_id) if session else None
    if session is None or secret is None or not push.signature_matches(secret, raw, signature):
        raise Unauthorized(_FORGED, code="signature_invalid")
    return event, session.project_id, session.owner


def handle_hook(
    store: DynamoStore, settings: Settings, *, raw: bytes, signature: str | None, delivery_id: str | None
) -> HookOutcome:
    event, project_id, owner = verified_event(store, raw, signature)
    outcome = HookOutcome(event=str(event.get("event") or ""))
    if outcome.event != deliveries.TURN_STOPPED:
        outcome.skipped = f"{outcome.event or 'an event without a name'} is not turned into a notification"
        return outcome
    if not delivery_id or not delivery_id.strip() or len(delivery_id) > 200:
        raise Invalid(
            "X-Delivery-Id is required (at most 200 characters): it keeps a retried delivery from notifying twice.",
            field="X-Delivery-Id",
        )
    keys = keys_of(settings)
    if keys is None:
        outcome.skipped = "web push is off on this deployment (no VAPID key pair)"
        return outcome
    subscriptions = store.push_subscriptions(project_id, owner)
    if not subscriptions:
        outcome.skipped = "the subject waiting on this conversation has no browser subscribed"
        return outcome
    note = push.notification_for(event)
    payload = json.dumps(note, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    headers = {"Urgency": "high" if note["needs_input"] else "normal"}
    if note["session_id"]:
        headers["Topic"] = push.topic_for(note["session_id"])

    def one(sub: PushSubscription) -> _Sent:
        return _push_one(store, settings, keys, sub, delivery_id.strip(), payload, headers)

    # In parallel, so one slow push service does not hold up the others (and the whole hook stays within the
    # few seconds a delivery is given).
    with ThreadPoolExecutor(max_workers=min(MAX_PARALLEL_PUSHES, len(subscriptions))) as pool:
        results = list(pool.map(one, subscriptions))
    for result in results:
        setattr(outcome, result.kind, getattr(outcome, result.kind) + 1)
        if result.error:
            outcome.errors.append(result.error)
        if result.again_in is not None:
            outcome.retry_after = max(outcome.retry_after or 0.0, result.again_in)
    logger.info("push hook", project_id=project_id, delivery_id=delivery_id, **outcome.public())
    return outcome


@dataclass(frozen=True)
class _Sent:
    kind: Literal["sent", "removed", "deferred", "failed", "duplicates"]
    again_in: float | None = None  # the delivery should come again after this many seconds
    error: str | None = None


def _push_one(
    store: DynamoStore,
    settings: Settings,
    keys: VapidKeys,
    sub: PushSubscription,
    delivery_id: str,
    payload: bytes,
    headers: dict[str, str],
) -> _Sent:
    now = time.time()
    if sub.not_before > now:
        return _Sent("deferred", again_in=sub.not_before - now)
    if not store.claim_push(delivery_id, sub.endpoint_hash):
        return _Sent("duplicates")  # this delivery already reached this browser (a retried delivery)
    retries = 0
    while True:
        result = webpush.send(
            sub.info(),
            payload,
            keys,
            ttl=push.NOTIFICATION_TTL_SECONDS,
            headers=headers,
            timeout=SEND_TIMEOUT_SECONDS,
            allow_private=settings.allow_private_webhooks,
        )
        wait: float | None = None
        if result.status_code == 429:
            wait = push.retry_after_seconds(result.retry_after, now=time.time())
            if wait is not None and wait <= INLINE_RETRY_SECONDS and retries < INLINE_RETRIES:
                retries += 1
                time.sleep(wait)
                continue
        break
    log: dict[str, Any] = {
        "endpoint_hash": sub.endpoint_hash,
        "status_code": result.status_code,
        "duration_ms": result.duration_ms,
    }
    if result.ok:
        logger.info("push sent", **log)
        return _Sent("sent")
    if push.gone(result.status_code):
        store.delete_push_subscription(sub.project_id, sub.endpoint_hash, endpoint=sub.endpoint)
        logger.info("push subscription gone; forgotten", **log)
        return _Sent("removed")
    error = result.error or f"the push service answered HTTP {result.status_code}"
    if result.status_code == 429:
        delay = min(MAX_RETRY_AFTER_SECONDS, wait if wait is not None else DEFAULT_RETRY_AFTER_SECONDS)
        store.push_not_before(sub.project_id, sub.endpoint_hash, time.time() + delay)
        store.release_push(delivery_id, sub.endpoint_hash)
        logger.warning("push rate limited; deferred", retry_after=delay, **log)
        return _Sent("deferred", again_in=delay, error=error)
    if not result.refused and push.worth_retrying(result.status_code):
        store.release_push(delivery_id, sub.endpoint_hash)
        logger.warning("push failed; the delivery will be retried", error=result.error, **log)
        return _Sent("failed", again_in=0.0, error=error)
    logger.error("push failed; not retried", error=result.error, **log)
    return _Sent("failed", error=error)
