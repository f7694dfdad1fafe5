"""Web push, the rules: what a browser's subscription must look like, what a stopped turn says in a notification,
and how a push service's answers are read.

The playground's three pieces (the public VAPID key, storing a subscription, and the hook that turns a
`turn.stopped` delivery into a notification) rest on these. Pure: encryption, signing and HTTP are the
adapter's (`oberik.adapters.webpush`), the table is the store's.
"""

from __future__ import annotations

import base64
import binascii
import email.utils
import hashlib
import hmac
import math
from dataclasses import dataclass
from typing import Any

from cryptography.hazmat.primitives.asymmetric import ec
from pydantic import BaseModel

from oberik.domain import deliveries
from oberik.domain.errors import Invalid

# A subject may keep this many browsers subscribed in one project; subscribing one more forgets the oldest.
MAX_SUBSCRIPTIONS_PER_SUBJECT = 20
# What a notification's text may hold; push services cap a payload at about 4 KB, encrypted.
TITLE_CHARS = 80
BODY_CHARS = 300
# How long a push service keeps a notification for a browser that is offline (the TTL header).
NOTIFICATION_TTL_SECONDS = 24 * 3600

# --- the subscription a browser hands over ----------------------------------------------------------------


def b64url_decode(text: str) -> bytes:
    """URL-safe base64 with or without padding, as browsers and `web-push` write keys. Raises ValueError."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError("empty")
    cleaned = text.strip().replace("+", "-").replace("/", "_").rstrip("=")
    if any(c not in "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_" for c in cleaned):
        raise ValueError("not base64url")
    try:
        return base64.urlsafe_b64decode(cleaned + "=" * (-len(cleaned) % 4))
    except (binascii.Error, ValueError) as e:
        raise ValueError(str(e)) from e


def b64url_encode(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def is_p256_point(raw: bytes) -> bool:
    """An uncompressed P-256 public key (65 bytes, 0x04 first) that lies on the curve."""
    if len(raw) != 65 or raw[0] != 0x04:
        return False
    try:
        ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), raw)
    except ValueError:
        return False
    return True


def endpoint_hash(endpoint: str) -> str:
    """The key a subscription is stored under: one per endpoint, so subscribing twice replaces, never adds."""
    return hashlib.sha256(endpoint.encode("utf-8")).hexdigest()[:40]


@dataclass(frozen=True)
class SubscriptionRequest:
    """A browser's PushSubscription (`subscription.toJSON()`), checked."""

    endpoint: str
    p256dh: str
    auth: str
    expiration_time: float | None  # milliseconds since the epoch, as the browser reports it


def parse_subscription(doc: Any, *, now: float) -> SubscriptionRequest:
    """Check a PushSubscription's shape: `endpoint`, `keys.p256dh` (the browser's P-256 public key) and
    `keys.auth` (its 16-byte secret), both URL-safe base64, and `expirationTime` (null or a future time in
    milliseconds). Raises Invalid naming the field. Where the endpoint may point is the egress guard's call."""
    if not isinstance(doc, dict):
        raise Invalid("The body must be a push subscription object: {endpoint, keys: {p256dh, auth}}.", field="body")
    endpoint = doc.get("endpoint")
    if not isinstance(endpoint, str) or not endpoint.strip():
        raise Invalid(
            "endpoint is required: send the object that the browser's pushManager.subscribe() resolved to "
            "(subscription.toJSON()).",
            field="endpoint",
        )
    keys = doc.get("keys")
    if not isinstance(keys, dict):
        raise Invalid(
            "keys is required: an object with p256dh and auth, as in subscription.toJSON(). A subscription "
            "without keys cannot be sent an encrypted message.",
            field="keys",
        )
    p256dh = keys.get("p256dh")
    if not isinstance(p256dh, str) or not p256dh.strip():
        raise Invalid("keys.p256dh is required: the browser's public key, URL-safe base64.", field="keys.p256dh")
    try:
        point = b64url_decode(p256dh)
    except ValueError:
        raise Invalid("keys.p256dh is not URL-safe base64.", field="keys.p256dh") from None
    if not is_p256_point(point):
        raise Invalid(
            f"keys.p256dh must be an uncompressed P-256 public key (65 bytes starting 0x04, on the curve); "
            f"this one decodes to {len(point)} bytes that are not one.",
            field="keys.p256dh",
        )
    auth = keys.get("auth")
    if not isinstance(auth, str) or not auth.strip():
        raise Invalid("keys.auth is required: the browser's authentication secret, URL-safe base64.", field="keys.auth")
    try:
        secret = b64url_decode(auth)
    except ValueError:
        raise Invalid("keys.auth is not URL-safe base64.", field="keys.auth") from None
    if len(secret) != 16:
        raise Invalid(f"keys.auth must decode to 16 bytes; this one is {len(secret)}.", field="keys.auth")
    expiration = doc.get("expirationTime")
    if expiration is not None:
        if isinstance(expiration, bool) or not isinstance(expiration, int | float) or not math.isfinite(expiration):
            raise Invalid(
                "expirationTime must be null or a time in milliseconds since the epoch.", field="expirationTime"
            )
        if expiration / 1000 <= now:
            raise Invalid(
                "expirationTime has passed: this subscription has expired; subscribe the browser again.",
                field="expirationTime",
            )
    return SubscriptionRequest(
        endpoint=endpoint.strip(),
        p256dh=b64url_encode(point),
        auth=b64url_encode(secret),
        expiration_time=float(expiration) if expiration is not None else None,
    )


class PushSubscription(BaseModel):
    """A stored subscription: whose it is, where to send, and how to encrypt for it."""

    project_id: str
    owner: str
    endpoint: str
    endpoint_hash: str
    p256dh: str
    auth: str
    expiration_time: float | None = None
    created_at: float
    updated_at: float
    # The push service asked us (429 Retry-After) not to send to this endpoint before this time.
    not_before: float = 0.0

    def info(self) -> dict[str, Any]:
        """The subscription the way pywebpush takes it."""
        return {"endpoint": self.endpoint, "keys": {"p256dh": self.p256dh, "auth": self.auth}}


class PushSubscriptionPublic(BaseModel):
    endpoint: str
    expiration_time: float | None
    created_at: float
    updated_at: float


# --- the hook's delivery ----------------------------------------------------------------------------------


def signature_matches(secret: str, raw: bytes, header: str | None) -> bool:
    """Whether `X-Signature` is this body's signature under `secret` (compared in constant time)."""
    if not header:
        return False
    expected = deliveries.signature(secret, raw)
    return hmac.compare_digest(expected.encode("ascii"), header.strip().encode("utf-8", "replace"))


def _clip(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def notification_for(event: dict[str, Any]) -> dict[str, Any]:
    """What the browser shows for a `turn.stopped` event: a title and body made from why the turn stopped,
    plus where a click leads (the conversation in the playground) and the flags a service worker may use.

    Branches on `needs_input` / `complete` first, so a pause kind added later still reads as one."""
    reason = str(event.get("reason") or "")
    session_id = str(event.get("session_id") or "")
    needs_input = bool(event.get("needs_input"))
    approvals = [a for a in event.get("approvals") or [] if isinstance(a, dict)]
    questions = [q for q in event.get("questions") or [] if isinstance(q, dict)]
    tools = [str(t) for t in event.get("tools") or []]
    if needs_input:
        if approvals:
            title = "The agent asks for your approval"
            actions = [str(a.get("action") or "").strip() for a in approvals]
            body = "; ".join(a for a in actions if a) or "An action is waiting for your decision."
            if len(approvals) > 1:
                body = f"{len(approvals)} actions wait for your decision: {body}"
        elif questions:
            title = "The agent has a question for you"
            headers = [str(h) for q in questions for h in q.get("headers") or []]
            body = ", ".join(headers) if headers else "Open the conversation to answer it."
        elif tools:
            title = "The agent is waiting for your app"
            body = f"It called {', '.join(tools)}, which the client that started the turn runs."
        else:
            title = "The agent needs you"
            body = f"The turn paused ({reason or 'waiting for a person'}). Open the conversation to carry on."
    elif event.get("complete"):
        title = "The answer is ready"
        preview = str(event.get("preview") or "").strip()
        body = preview + ("…" if event.get("preview_truncated") and preview else "")
        body = body or "The agent finished."
    elif reason == deliveries.HIT_TOOL_LIMIT:
        title = "The agent stopped short"
        body = "It used every step it was allowed before finishing. Ask it to continue."
    elif reason == deliveries.NO_ANSWER:
        title = "The turn ended without an answer"
        body = "Nothing came back from the model this time; try again."
    else:
        title = "The agent stopped"
        body = f"The turn ended ({reason or 'no reason given'}) and nobody is waiting on it."
    return {
        "title": _clip(title, TITLE_CHARS),
        "body": _clip(body, BODY_CHARS),
        "tag": f"oberik-{session_id}" if session_id else "oberik",
        # Relative to the playground (the service worker resolves it against its scope, the page's folder).
        "url": f"./#session={session_id}" if session_id else "./",
        "session_id": session_id or None,
        "reason": reason,
        "needs_input": needs_input,
    }


def topic_for(session_id: str) -> str:
    """A push `Topic` (at most 32 URL-safe characters): a newer notification about the same conversation
    replaces one the push service still holds for an offline browser."""
    return b64url_encode(hashlib.sha256(session_id.encode("utf-8")).digest())[:32]


# --- what the push service answered -----------------------------------------------------------------------


def retry_after_seconds(value: str | None, *, now: float) -> float | None:
    """A Retry-After header as seconds from `now`: delta-seconds or an HTTP date; None when absent or unreadable."""
    if value is None or not value.strip():
        return None
    text = value.strip()
    if text.isdigit():
        return float(int(text))
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when is None:
        return None
    return max(0.0, when.timestamp() - now)


def gone(status: int | None) -> bool:
    """The push service says the subscription no longer exists (the browser unsubscribed or it expired)."""
    return status in (404, 410)


def worth_retrying(status: int | None) -> bool:
    """A failure that may pass: rate limited, the service's own trouble, or no answer (None)."""
    return status is None or status == 429 or status >= 500
