"""Sending one web push message: pywebpush encrypts the payload (aes128gcm, RFC 8291) and signs the VAPID JWT
(RFC 8292); the request itself leaves through the same egress guard as webhooks.

pywebpush posts with `requests`. It is handed `GuardedSession`, whose `post` resolves the endpoint's host,
refuses it unless every address is allowed (`http_delivery.check`), and connects to one of exactly those
addresses, keeping the host name in the Host header and TLS SNI. No redirects, no proxies from the environment.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx
import requests
from py_vapid import Vapid
from pywebpush import WebPushException, webpush
from requests.structures import CaseInsensitiveDict

from oberik.adapters import http_delivery
from oberik.domain.egress import TargetRefused
from oberik.domain.errors import Invalid
from oberik.domain.push import b64url_decode, b64url_encode, is_p256_point

# A push service's error text is kept this long in the log.
ERROR_BODY_CHARS = 300
# Used as the VAPID `sub` claim when the deployment names no contact (VAPID_SUBJECT); push services accept it,
# but a real address lets them reach the sender about a problem.
FALLBACK_SUBJECT = "mailto:webpush@oberik.invalid"


class VapidMisconfigured(Exception):
    """The deployment's VAPID settings cannot be used (not a key pair, or not the same pair)."""


@dataclass(frozen=True)
class VapidKeys:
    public_key: str  # URL-safe base64 of the 65-byte uncompressed point: what a browser subscribes with
    signer: Vapid
    subject: str


def vapid_keys(public_key: str | None, private_key: str | None, subject: str | None) -> VapidKeys | None:
    """The deployment's VAPID pair, or None when push is off (either half unset). Raises VapidMisconfigured
    when the two halves are set but do not make one P-256 key pair."""
    if not (public_key or "").strip() or not (private_key or "").strip():
        return None
    try:
        public_raw = b64url_decode(str(public_key))
    except ValueError:
        raise VapidMisconfigured("VAPID_PUBLIC_KEY is not URL-safe base64.") from None
    if not is_p256_point(public_raw):
        raise VapidMisconfigured("VAPID_PUBLIC_KEY is not an uncompressed P-256 public key (65 bytes, 0x04 first).")
    try:
        signer = Vapid.from_string(private_key=str(private_key).strip())
    except Exception as e:
        raise VapidMisconfigured(
            f"VAPID_PRIVATE_KEY could not be read as a P-256 private key (raw URL-safe base64 or DER): {e}"
        ) from None
    from cryptography.hazmat.primitives import serialization

    derived = signer.public_key.public_bytes(serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint)
    if derived != public_raw:
        raise VapidMisconfigured("VAPID_PUBLIC_KEY is not the public half of VAPID_PRIVATE_KEY.")
    sub = (subject or "").strip() or FALLBACK_SUBJECT
    if not (sub.startswith("mailto:") or sub.startswith("https://")):
        raise VapidMisconfigured("VAPID_SUBJECT must be a mailto: or https:// URL that reaches the sender.")
    return VapidKeys(public_key=b64url_encode(public_raw), signer=signer, subject=sub)


@dataclass(frozen=True)
class PushResult:
    status_code: int | None  # None: no answer (refused, unreachable, timed out)
    retry_after: str | None = None
    error: str | None = None
    refused: bool = False  # the egress guard refused the endpoint
    duration_ms: int = 0

    @property
    def ok(self) -> bool:
        return self.status_code is not None and 200 <= self.status_code < 300


class _Refused(Exception):
    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


class GuardedSession(requests.Session):
    """A requests session whose `post` goes through the egress guard; all pywebpush ever calls is `post`."""

    def __init__(self, *, allow_private: bool) -> None:
        super().__init__()
        self.allow_private = allow_private
        self.trust_env = False

    def post(self, url: str | bytes, data: Any = None, json: Any = None, **kwargs: Any) -> requests.Response:
        target_url = url.decode() if isinstance(url, bytes) else str(url)
        headers = {str(k): str(v) for k, v in dict(kwargs.get("headers") or {}).items()}
        timeout = float(kwargs.get("timeout") or 10.0)
        content = data if isinstance(data, bytes) else (str(data).encode() if data is not None else b"")
        try:
            target, addresses = http_delivery.check(target_url, allow_private=self.allow_private, field="endpoint")
        except TargetRefused as e:
            raise _Refused(e.detail) from None
        except Invalid as e:
            raise requests.ConnectionError(e.detail) from None
        original = httpx.URL(target_url)
        send_headers = {**headers, "Host": original.netloc.decode("ascii")}
        extensions = {"sni_hostname": target.host} if target.scheme == "https" and not target.literal else {}
        error = "no address to connect to"
        with httpx.Client(
            timeout=httpx.Timeout(timeout, connect=min(timeout, http_delivery.CONNECT_TIMEOUT_SECONDS)),
            follow_redirects=False,
            trust_env=False,
        ) as client:
            for address in addresses:  # each was checked; the next is tried only when this one is unreachable
                request = client.build_request(
                    "POST",
                    original.copy_with(host=address),
                    content=content,
                    headers=send_headers,
                    extensions=extensions,
                )
                try:
                    answer = client.send(request)
                except httpx.ConnectError as e:
                    error = f"could not connect to {target.host} ({address}): {e}"
                    continue
                except httpx.TimeoutException:
                    raise requests.Timeout(f"no answer from {target.host} within {timeout:g} s") from None
                except httpx.HTTPError as e:
                    raise requests.ConnectionError(f"the request to {target.host} failed: {e}") from None
                return _as_requests_response(answer, target_url)
        raise requests.ConnectionError(error)


def _header(response: Any, name: str) -> str | None:
    value = getattr(response, "headers", {}).get(name) if response is not None else None
    return str(value) if value is not None else None


def _as_requests_response(answer: httpx.Response, url: str) -> requests.Response:
    response = requests.Response()
    response.status_code = answer.status_code
    response.headers = CaseInsensitiveDict(dict(answer.headers.items()))
    response._content = answer.content[:4096]
    response.reason = answer.reason_phrase
    response.url = url
    response.encoding = "utf-8"
    return response


def send(
    subscription: dict[str, Any],
    payload: bytes,
    keys: VapidKeys,
    *,
    ttl: int,
    headers: dict[str, str] | None = None,
    timeout: float,
    allow_private: bool,
) -> PushResult:
    """Encrypt `payload` for one subscription and POST it to its push service. Never raises for the service's or
    the network's failures: they come back in the result."""
    started = time.monotonic()

    def took() -> int:
        return int((time.monotonic() - started) * 1000)

    parts = urlsplit(str(subscription.get("endpoint") or ""))
    claims: dict[str, str | int] = {
        "sub": keys.subject,
        "aud": f"{parts.scheme}://{parts.netloc}",
        "exp": int(time.time()) + 12 * 3600,
    }
    session = GuardedSession(allow_private=allow_private)
    try:
        response = webpush(
            subscription,
            data=payload.decode("utf-8"),
            vapid_private_key=keys.signer,
            vapid_claims=claims,
            content_encoding="aes128gcm",
            timeout=timeout,
            ttl=ttl,
            headers=dict(headers or {}),
            requests_session=session,
        )
    except _Refused as e:
        return PushResult(None, error=e.detail, refused=True, duration_ms=took())
    except WebPushException as e:
        status = e.status_code
        if status is None:
            return PushResult(None, error=f"the push could not be prepared: {e.message}", duration_ms=took())
        body = ""
        if e.response is not None:
            body = " ".join(str(getattr(e.response, "text", "") or "").split())[:ERROR_BODY_CHARS]
        return PushResult(
            status,
            retry_after=_header(e.response, "Retry-After"),
            error=f"the push service answered HTTP {status}" + (f": {body}" if body else ""),
            duration_ms=took(),
        )
    except requests.RequestException as e:
        return PushResult(None, error=str(e), duration_ms=took())
    finally:
        session.close()
    status = getattr(response, "status_code", None)
    return PushResult(int(status) if status is not None else None, duration_ms=took())
