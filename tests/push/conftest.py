"""Fixtures for web push: a VAPID pair for the deployment, and a push service on loopback that does what a
browser's push service and the browser do together: it checks the VAPID JWT against the public key and
decrypts each message (RFC 8291, aes128gcm) with the private key of the "browser" it was sent to."""

from __future__ import annotations

import base64
import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

import http_ece
import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from oberik.settings import get_settings
from tests.api_fixtures import Api, Project
from tests.deliveries.conftest import eventually
from tests.loopback import listening, reply


def b64url(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def unb64url(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def point(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.public_key().public_bytes(serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint)


@dataclass
class VapidPair:
    public: str
    private: str
    subject: str


def new_vapid_pair(subject: str = "mailto:ops@acme.example") -> VapidPair:
    """A pair written the way `web-push generate-vapid-keys` writes one: the public point and the raw private
    scalar, both URL-safe base64 without padding."""
    key = ec.generate_private_key(ec.SECP256R1())
    scalar = key.private_numbers().private_value.to_bytes(32, "big")
    return VapidPair(public=b64url(point(key)), private=b64url(scalar), subject=subject)


def use_vapid(monkeypatch: pytest.MonkeyPatch, pair: VapidPair | None) -> None:
    for name in ("VAPID_PUBLIC_KEY", "VAPID_PRIVATE_KEY", "VAPID_SUBJECT"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(f"OBERIK_{name}", raising=False)
    if pair is not None:
        monkeypatch.setenv("VAPID_PUBLIC_KEY", pair.public)
        monkeypatch.setenv("VAPID_PRIVATE_KEY", pair.private)
        monkeypatch.setenv("VAPID_SUBJECT", pair.subject)
    get_settings.cache_clear()


@pytest.fixture
def no_vapid(api: Api, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    use_vapid(monkeypatch, None)
    yield
    get_settings.cache_clear()


@pytest.fixture
def vapid(api: Api, monkeypatch: pytest.MonkeyPatch) -> Iterator[VapidPair]:
    pair = new_vapid_pair()
    use_vapid(monkeypatch, pair)
    yield pair
    get_settings.cache_clear()


# --- the push service ------------------------------------------------------------------------------------


@dataclass
class Browser:
    """One subscribed browser: its P-256 key pair and auth secret, and the endpoint the push service gave it."""

    name: str
    endpoint: str
    key: ec.EllipticCurvePrivateKey
    auth: bytes

    def subscription(self) -> dict[str, Any]:
        """What `subscription.toJSON()` gives in a browser."""
        return {
            "endpoint": self.endpoint,
            "expirationTime": None,
            "keys": {"p256dh": b64url(point(self.key)), "auth": b64url(self.auth)},
        }


@dataclass
class Push:
    """One request that reached the push service, decrypted and with its VAPID token checked."""

    browser: str
    headers: dict[str, str]
    raw: bytes
    at: float
    plaintext: bytes | None
    claims: dict[str, Any] | None
    vapid_key: str | None
    problem: str | None  # why it could not be decrypted or its token did not verify

    @property
    def message(self) -> dict[str, Any]:
        assert self.plaintext is not None, self.problem
        parsed: dict[str, Any] = json.loads(self.plaintext)
        return parsed

    def header(self, name: str) -> str | None:
        return {k.lower(): v for k, v in self.headers.items()}.get(name.lower())


@dataclass
class Answer:
    status: int = 201
    retry_after: str | None = None


@dataclass
class PushService:
    url: str = ""
    browsers: dict[str, Browser] = field(default_factory=dict)
    received: list[Push] = field(default_factory=list)
    answers: dict[str, list[Answer]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def browser(self, name: str) -> Browser:
        found = Browser(
            name=name,
            endpoint=f"{self.url}/wpush/v2/{name}-{os.urandom(6).hex()}",
            key=ec.generate_private_key(ec.SECP256R1()),
            auth=os.urandom(16),
        )
        self.browsers[found.endpoint.rsplit("/", 1)[1]] = found
        return found

    def script(self, browser: Browser, *answers: int | Answer) -> None:
        """Answer the next pushes to `browser` with these statuses in order, then 201."""
        self.answers[browser.name] = [a if isinstance(a, Answer) else Answer(a) for a in answers]

    def to(self, browser: Browser) -> list[Push]:
        with self.lock:
            return [p for p in self.received if p.browser == browser.name]

    def wait_for(self, browser: Browser, count: int = 1, timeout: float = 20.0) -> list[Push]:
        eventually(lambda: len(self.to(browser)) >= count, timeout, f"{count} push(es) to {browser.name}")
        return self.to(browser)

    def _next(self, browser: str) -> Answer:
        with self.lock:
            queue = self.answers.get(browser) or []
            return queue.pop(0) if queue else Answer()

    def _open(self, browser: Browser, headers: dict[str, str], raw: bytes) -> Push:
        lowered = {k.lower(): v for k, v in headers.items()}
        plaintext = claims = vapid_key = problem = None
        try:
            scheme, _, params = lowered.get("authorization", "").partition(" ")
            assert scheme.lower() == "vapid", f"Authorization scheme is {scheme!r}, not vapid"
            parts = dict(p.split("=", 1) for p in params.split(","))
            vapid_key = parts["k"]
            verifier = ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), unb64url(vapid_key))
            origin = browser.endpoint.split("/wpush/")[0]
            claims = jwt.decode(parts["t"], verifier, algorithms=["ES256"], audience=origin)
            assert lowered.get("content-encoding") == "aes128gcm", lowered.get("content-encoding")
            plaintext = http_ece.decrypt(raw, private_key=browser.key, auth_secret=browser.auth, version="aes128gcm")
        except Exception as e:
            problem = f"{type(e).__name__}: {e}"
        return Push(browser.name, headers, raw, time.monotonic(), plaintext, claims, vapid_key, problem)


def _answer(service: PushService) -> Callable[[BaseHTTPRequestHandler, bytes], None]:
    def on_post(handler: BaseHTTPRequestHandler, raw: bytes) -> None:
        token = handler.path.rsplit("/", 1)[-1]
        browser = service.browsers.get(token)
        if browser is None:
            reply(handler, 404)
            return
        got = service._open(browser, dict(handler.headers.items()), raw)
        with service.lock:
            service.received.append(got)
        answer = service._next(browser.name)
        headers = {}
        if answer.retry_after is not None:
            headers["Retry-After"] = answer.retry_after
        if answer.status == 201:
            headers["Location"] = f"{service.url}/wpush/message/{os.urandom(4).hex()}"
        reply(handler, answer.status, b"", headers)

    return on_post


@pytest.fixture
def push_service() -> Iterator[PushService]:
    service = PushService()
    with listening(_answer(service)) as base:
        service.url = base
        yield service


# --- helpers ---------------------------------------------------------------------------------------------


def subscribe(api: Api, token: str, browser: Browser) -> Any:
    return api.client.post("/push/subscribe", json=browser.subscription(), headers=api.bearer(token))


def webhook_secret(api: Api, project: Project) -> str:
    r = api.client.get(f"/api/projects/{project.id}/webhook-secret", headers=project.headers)
    assert r.status_code == 200, r.text
    return str(r.json()["secret"])
