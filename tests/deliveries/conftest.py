"""Fixtures for deliveries: a webhook receiver on loopback, and the switches that let a test reach it quickly."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

import pytest

from oberik.engine import deliveries
from tests.loopback import listening, reply


@dataclass
class Received:
    """One request as it arrived: headers, the exact body bytes, and when."""

    headers: dict[str, str]
    raw: bytes
    at: float
    path: str

    @property
    def body(self) -> dict[str, Any]:
        parsed: dict[str, Any] = json.loads(self.raw)
        return parsed

    def header(self, name: str) -> str:
        return {k.lower(): v for k, v in self.headers.items()}[name.lower()]


@dataclass
class Answer:
    status: int = 200
    sleep: float = 0.0


@dataclass
class Receiver:
    """A webhook receiver on 127.0.0.1. Answers the scripted statuses in order, then `default`."""

    url: str = ""
    requests: list[Received] = field(default_factory=list)
    answers: list[Answer] = field(default_factory=list)
    default: Answer = field(default_factory=Answer)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def script(self, *answers: int | Answer) -> None:
        self.answers = [a if isinstance(a, Answer) else Answer(a) for a in answers]

    def next_answer(self) -> Answer:
        with self.lock:
            return self.answers.pop(0) if self.answers else self.default

    def wait_for(self, count: int, timeout: float = 15.0) -> list[Received]:
        eventually(lambda: len(self.requests) >= count, timeout, f"{count} request(s) at the receiver")
        return list(self.requests)


def eventually(check: Callable[[], Any], timeout: float = 15.0, what: str = "the condition") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.05)


def _answer(receiver: Receiver) -> Callable[[BaseHTTPRequestHandler, bytes], None]:
    def on_post(handler: BaseHTTPRequestHandler, raw: bytes) -> None:
        with receiver.lock:
            receiver.requests.append(Received(dict(handler.headers.items()), raw, time.monotonic(), handler.path))
        answer = receiver.next_answer()
        if answer.sleep:
            time.sleep(answer.sleep)
        reply(handler, answer.status, b"ok")

    return on_post


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    found = Receiver()
    with listening(_answer(found)) as base:
        found.url = f"{base}/hooks/oberik"
        yield found


@pytest.fixture
def quick(monkeypatch: pytest.MonkeyPatch) -> None:
    """Short waits: a one-second grace on interactive pauses, immediate retries, a short attempt timeout."""
    monkeypatch.setattr(deliveries, "PAUSE_GRACE_SECONDS", 1)
    monkeypatch.setattr(deliveries, "RETRY_BASE_SECONDS", 0.0)
    monkeypatch.setattr(deliveries, "DELIVERY_TIMEOUT_SECONDS", 2.0)
