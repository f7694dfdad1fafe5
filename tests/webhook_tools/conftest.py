"""Fixtures for webhook tools: an endpoint on loopback that answers what a test scripts, and the switch that
lets the platform reach loopback at all (only tests and `oberik dev` set it)."""

from __future__ import annotations

import hashlib
import hmac
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

import pytest

from tests.api_fixtures import Api, Project
from tests.deliveries.conftest import Received, quick, receiver  # noqa: F401 - the turn.stopped receiver, short waits
from tests.loopback import listening, reply


@dataclass
class Answer:
    status: int = 200
    body: str | bytes = '{"ok": true}'
    content_type: str = "application/json"
    sleep: float = 0.0


@dataclass
class Endpoint:
    """The application's side: answers the scripted answers in order, then `default`."""

    url: str = ""
    calls: list[Received] = field(default_factory=list)
    answers: list[Answer] = field(default_factory=list)
    default: Answer = field(default_factory=Answer)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def script(self, *answers: Answer) -> None:
        self.answers = list(answers)

    def next_answer(self) -> Answer:
        with self.lock:
            return self.answers.pop(0) if self.answers else self.default


def _answer(endpoint: Endpoint) -> Callable[[BaseHTTPRequestHandler, bytes], None]:
    def on_post(handler: BaseHTTPRequestHandler, raw: bytes) -> None:
        with endpoint.lock:
            endpoint.calls.append(Received(dict(handler.headers.items()), raw, time.monotonic(), handler.path))
        answer = endpoint.next_answer()
        if answer.sleep:
            time.sleep(answer.sleep)
        payload = answer.body.encode() if isinstance(answer.body, str) else answer.body
        reply(handler, answer.status, payload, {"Content-Type": answer.content_type})

    return on_post


@pytest.fixture
def endpoint() -> Iterator[Endpoint]:
    found = Endpoint()
    with listening(_answer(found)) as base:
        found.url = f"{base}/agent/orders"
        yield found


def closed_port_url() -> str:
    """A loopback URL nothing listens on (the port was free a moment ago)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/nobody-home"


def signed(secret: str, raw: bytes) -> str:
    """What a receiver computes: sha256=<hex HMAC-SHA256 of the exact bytes>."""
    return "sha256=" + hmac.new(secret.encode(), raw, hashlib.sha256).hexdigest()


ORDER_PARAMETERS = {
    "type": "object",
    "properties": {"order_id": {"type": "string"}},
    "required": ["order_id"],
}


def create_tool(api: Api, project: Project, url: str, **fields: Any) -> dict[str, Any]:
    body = {
        "name": "cancel_order",
        "description": "Cancel an order belonging to the signed-in customer.",
        "url": url,
        "parameters": ORDER_PARAMETERS,
        **fields,
    }
    r = api.client.post(f"/api/projects/{project.id}/webhook-tools", json=body, headers=project.headers)
    assert r.status_code == 201, r.text
    created: dict[str, Any] = r.json()
    return created
