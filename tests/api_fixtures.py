"""API fixtures: the real FastAPI app over the embedded moto stack, with a scripted model provider."""

from __future__ import annotations

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
