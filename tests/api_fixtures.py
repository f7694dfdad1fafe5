"""API fixtures: the real FastAPI app over the embedded moto stack, with a scripted model provider."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from fastapi.testclient import TestClient

from oberik.local.scripted_provider import ScriptedProvider
from oberik.settings import get_settings

ADMIN_KEY = "test-admin-key-0123456789abcdef"


@pytest.fixture
def provider() -> Iterator[ScriptedProvider]:
    with ScriptedProvider() as p:
        yield p


@dataclass
class Project:
    id: str
    key: str

    @property
    def headers(self) -> dict[str, str]:
        return {"X-API-Key": self.key}


class Api:
    """A TestClient plus the calls most tests need, so each test reads as what it checks."""

    def __init__(self, client: TestClient) -> None:
        self.client = client

    def create_project(self, name: str = "acme") -> Project:
        r = self.client.post("/api/projects", json={"name": name}, headers={"X-Admin-Key": ADMIN_KEY})
        assert r.status_code == 201, r.text
        return Project(r.json()["id"], r.json()["key"])

    def configure(self, project: Project, **settings: Any) -> dict[str, Any]:
        r = self.client.patch(f"/api/projects/{project.id}/settings", json=settings, headers=project.headers)
        assert r.status_code == 200, r.text
        return dict(r.json())

    def token(self, project: Project, subject: str = "ana", **fields: Any) -> str:
        r = self.client.post(
            f"/api/projects/{project.id}/tokens", json={"subject": subject, **fields}, headers=project.headers
        )
        assert r.status_code == 201, r.text
        return str(r.json()["token"])

    @staticmethod
    def bearer(token: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {token}"}

    def chat(self, token: str, **body: Any) -> Any:
        return self.client.post("/chat", json=body, headers=self.bearer(token))

    def get(self, path: str, token: str, **params: Any) -> Any:
        return self.client.get(path, params=params, headers=self.bearer(token))


@pytest.fixture
def api(aws: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[Api]:
    monkeypatch.setenv("OBERIK_ADMIN_KEY", ADMIN_KEY)
    monkeypatch.setenv("OBERIK_POLL_INTERVAL_SECONDS", "0.01")
    monkeypatch.setenv("OBERIK_BLOCKING_TIMEOUT_SECONDS", "60")
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    get_settings.cache_clear()
    from oberik.api.app import create_app

    with TestClient(create_app(), raise_server_exceptions=False) as client:
        yield Api(client)
    get_settings.cache_clear()
    assert "OBERIK_ADMIN_KEY" in os.environ


@pytest.fixture
def allow_private(api: Api, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Let the platform reach servers on loopback (what only tests and `oberik dev` do): webhook receivers,
    tools a test hosts, push services, pages."""
    from oberik.settings import get_settings

    monkeypatch.setenv("OBERIK_ALLOW_PRIVATE_WEBHOOKS", "1")
    get_settings.cache_clear()
    yield
    get_settings.cache_clear()


@pytest.fixture
def project(api: Api) -> Project:
    return api.create_project()


@pytest.fixture
def scripted_project(api: Api, project: Project, provider: ScriptedProvider) -> Project:
    """A project whose default model is the scripted provider."""
    api.configure(
        project,
        providers={"scripted": {"base_url": provider.base_url, "api_key": "sk-test"}},
        default_model="scripted/test-model",
    )
    return project


@pytest.fixture
def token(api: Api, scripted_project: Project) -> str:
    return api.token(scripted_project)


def table_items() -> list[dict[str, Any]]:
    """Every item in the table (the tests' table is small), to prove a refused request wrote nothing."""
    from oberik.adapters.aws import client

    db = client("dynamodb")
    items: list[dict[str, Any]] = []
    kwargs: dict[str, Any] = {"TableName": get_settings().table_name}
    while True:
        r = db.scan(**kwargs)
        items.extend(r["Items"])
        if "LastEvaluatedKey" not in r:
            return items
        kwargs["ExclusiveStartKey"] = r["LastEvaluatedKey"]


# --- a live HTTP server, for clients that stream, drop and reconnect ---------------------------------


@dataclass
class SseEvent:
    id: int | None
    event: str
    data: dict[str, Any]


def parse_sse(text: str) -> tuple[list[SseEvent], list[str]]:
    """Frames and comment lines of an SSE body, in order."""
    events: list[SseEvent] = []
    comments: list[str] = []
    for block in text.replace("\r\n", "\n").split("\n\n"):
        fields: dict[str, str] = {}
        for line in block.split("\n"):
            if line.startswith(":"):
                comments.append(line[1:].strip())
            elif ":" in line:
                key, _, value = line.partition(":")
                fields[key] = value.lstrip(" ")
        if "event" in fields:
            events.append(
                SseEvent(
                    int(fields["id"]) if "id" in fields else None, fields["event"], json.loads(fields.get("data", "{}"))
                )
            )
    return events, comments


def read_events(response: Any, *, stop_after: int | None = None) -> list[SseEvent]:
    """Read an httpx streaming response frame by frame; stop (without closing) after `stop_after` frames."""
    # A response can be iterated once: keep the iterator and unread text on it between calls.
    if not hasattr(response, "_sse_chunks"):
        response._sse_chunks = response.iter_text()
        response._sse_buffer = ""
    events: list[SseEvent] = []
    while True:
        while "\n\n" in response._sse_buffer:
            block, response._sse_buffer = response._sse_buffer.split("\n\n", 1)
            parsed, _ = parse_sse(block + "\n\n")
            events.extend(parsed)
            if stop_after is not None and len(events) >= stop_after:
                return events
        chunk = next(response._sse_chunks, None)
        if chunk is None:
            return events
        response._sse_buffer += chunk


@pytest.fixture
def live(api: Api) -> Iterator[str]:
    """The same app served by uvicorn on a free loopback port; yields its base URL."""
    import socket
    import threading
    import time

    import uvicorn

    from oberik.api.app import create_app

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(create_app(), host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.01)
    assert server.started, "uvicorn did not start"
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(5)
