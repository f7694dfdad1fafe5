"""Fixtures for the retrieval tests: a fresh in-process vector store per test, projects with an embedding model,
and helpers to upload documents and run a turn that calls a tool."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from oberik.adapters.vectors import memory_store
from oberik.local.scripted_provider import Reply, ScriptedProvider
from tests.api_fixtures import Api, Project

HASHING = "offline/hashing-256"
MINILM = "offline/all-minilm-l6-v2"


@pytest.fixture(autouse=True)
def fresh_vectors() -> Iterator[None]:
    memory_store().reset()
    yield
    memory_store().reset()


@pytest.fixture
def rag_project(api: Api, scripted_project: Project) -> Project:
    """A scripted project whose embedding model is the deterministic hashing one."""
    api.configure(scripted_project, embedding_model=HASHING)
    return scripted_project


def upload(api: Api, project: Project, **body: Any) -> Any:
    return api.client.post(f"/api/projects/{project.id}/documents", json=body, headers=project.headers)


def uploaded(api: Api, project: Project, **body: Any) -> dict[str, Any]:
    r = upload(api, project, **body)
    assert r.status_code == 201, r.text
    assert r.json()["status"] == "ready", r.json()
    return dict(r.json())


def call_tool(
    api: Api, provider: ScriptedProvider, token: str, name: str, arguments: dict[str, Any], **request: Any
) -> tuple[str, dict[str, Any]]:
    """Run a turn in which the model calls one tool and then answers; returns what the tool told the model and
    the turn's response."""
    before = len(provider.requests)
    provider.script(
        Reply(tool_calls=[{"id": "c1", "name": name, "arguments": json.dumps(arguments)}]),
        Reply(text="Done [1]."),
    )
    r = api.chat(token, message=request.pop("message", "go"), **request)
    assert r.status_code == 200, r.text
    follow_up = provider.requests[before + 1]["messages"]
    tool_messages = [m for m in follow_up if m.get("role") == "tool"]
    assert tool_messages, follow_up
    return str(tool_messages[-1]["content"]), dict(r.json())


def offered_tools(provider: ScriptedProvider, index: int = -1) -> list[str]:
    return [t["function"]["name"] for t in provider.requests[index].get("tools", [])]
