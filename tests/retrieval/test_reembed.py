"""Changing a project's embedding model carries its remembered facts, wiki pages and past conversations over to
the new model's indexes (on the document queue), so recall, wiki_read and search_history still find them; the
old model's indexes keep nothing of the project, and other projects' vectors stay where they are."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from oberik.adapters.aws import client
from oberik.adapters.vectors import memory_store, retrieval_resources
from oberik.domain.retrieval import index_name
from oberik.local import retrieval_sources
from oberik.local.scripted_provider import Reply, ScriptedProvider
from tests.api_fixtures import Api, Project
from tests.retrieval.conftest import call_tool

MEMORY = ["chat", "memory"]
SMALL, LARGE = "offline/hashing-64", "offline/hashing-96"
BUCKET = "oberik-vectors-test"
FACT = "My favourite colour is teal."
PAGE = "To deploy, run make release, then watch the canary dashboard for ten minutes."
FLIGHT = "My flight to Lisbon leaves on May 4 from gate 12."


def _index(kind: str, model: str) -> str:
    return index_name(kind, model, int(model.rsplit("-", 1)[1]))  # type: ignore[arg-type]


@pytest.fixture(params=["memory", "s3vectors"])
def backend(request: pytest.FixtureRequest, aws: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Each test runs on the in-process store and, as on AWS, on S3 Vectors (moto)."""
    if request.param == "s3vectors":
        from oberik.local import s3vectors_query

        monkeypatch.setenv("OBERIK_VECTOR_BUCKET", BUCKET)
        s3v = client("s3vectors")
        s3v.create_vector_bucket(vectorBucketName=BUCKET)
        s3vectors_query.install(s3v)
    yield str(request.param)


def _held(backend: str, index: str, project_id: str) -> dict[str, dict[str, Any]]:
    """The records of a project in an index, read straight from the store: key -> metadata."""
    if backend == "s3vectors":
        s3v = client("s3vectors")
        names = [i["indexName"] for i in s3v.list_indexes(vectorBucketName=BUCKET)["indexes"]]
        if index not in names:
            return {}
        listed = s3v.list_vectors(vectorBucketName=BUCKET, indexName=index, returnMetadata=True)["vectors"]
        return {v["key"]: v["metadata"] for v in listed if v["metadata"].get("project_id") == project_id}
    try:
        hits = memory_store().query(
            index, [1.0] * int(index.rsplit("-", 1)[1]), top_k=100_000, filter={"project_id": project_id}
        )
    except LookupError:
        return {}
    return {h.key: h.metadata for h in hits}


def _kinds(records: dict[str, dict[str, Any]]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for meta in records.values():
        counts[meta["kind"]] = counts.get(meta["kind"], 0) + 1
    return counts


def _switch(api: Api, project: Project, model: str | None, timeout: float = 60.0) -> None:
    """Change the model, then wait until the document queue has handled everything sent to it."""
    retrieval_sources.drain()  # messages written so far are indexed with the model they were written under
    api.configure(project, embedding_model=model)
    sqs = client("sqs")
    url = retrieval_resources().document_queue_url
    assert url
    deadline = time.monotonic() + timeout
    while True:
        attributes = sqs.get_queue_attributes(
            QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]
        )["Attributes"]
        if attributes == {"ApproximateNumberOfMessages": "0", "ApproximateNumberOfMessagesNotVisible": "0"}:
            return
        assert time.monotonic() < deadline, f"the document queue did not settle: {attributes}"
        time.sleep(0.05)


def _memory_project(api: Api, provider: ScriptedProvider, name: str, model: str | None = SMALL) -> Project:
    project = api.create_project(name)
    api.configure(
        project,
        providers={"scripted": {"base_url": provider.base_url, "api_key": "sk-test"}},
        default_model="scripted/test-model",
        embedding_model=model,
    )
    return project


def _save_everything(api: Api, provider: ScriptedProvider, project: Project) -> tuple[str, str]:
    """A remembered fact, a wiki page and a conversation; returns the subject's token and that conversation."""
    ana = api.token(project, subject="ana", scope="team-a", capabilities=MEMORY)
    said, _ = call_tool(api, provider, ana, "remember", {"fact": FACT})
    assert "Remembered" in said
    said, _ = call_tool(api, provider, ana, "wiki_write", {"title": "Deploy procedure", "content": PAGE})
    assert "Wrote the wiki page" in said
    provider.script(Reply(text="Noted, have a good trip."))
    chat = api.chat(ana, message=FLIGHT)
    assert chat.status_code == 200, chat.text
    retrieval_sources.drain()
    return ana, str(chat.json()["session_id"])


def _everything_is_found(api: Api, provider: ScriptedProvider, ana: str, session_id: str) -> None:
    recalled, response = call_tool(api, provider, ana, "recall", {"query": "favourite colour", "top_k": 10})
    assert recalled.count("favourite colour is teal") == 1, recalled
    assert response["citations"][0]["kind"] == "memory"
    found, response = call_tool(api, provider, ana, "wiki_read", {"query": "how do we deploy a release", "top_k": 10})
    assert found.count("canary dashboard") == 1, found
    assert response["citations"][0]["kind"] == "wiki" and response["citations"][0]["slug"] == "deploy-procedure"
    history, response = call_tool(
        api, provider, ana, "search_history", {"query": "when does my flight to Lisbon leave", "top_k": 10}
    )
    assert "May 4 from gate 12" in history, history
    assert response["citations"][0]["session_id"] == session_id


def test_memories_wiki_and_history_follow_the_model_back_and_forth(
    api: Api, provider: ScriptedProvider, backend: str
) -> None:
    # Given a project that remembered a fact, wrote a wiki page and had a conversation with one model, and another
    # project that uses the same model
    project = _memory_project(api, provider, "acme")
    other = _memory_project(api, provider, "globex")
    ana, session_id = _save_everything(api, provider, project)
    other_ana = api.token(other, subject="ana", capabilities=MEMORY)
    call_tool(api, provider, other_ana, "remember", {"fact": "I take the night train to Vienna."})
    retrieval_sources.drain()
    before = {kind: _held(backend, _index(kind, SMALL), project.id) for kind in ("memories", "history")}
    assert _kinds(before["memories"]) == {"memory": 1, "wiki": 1}
    assert before["history"]  # the conversation, and the turns that called the tools
    others_before = {kind: _held(backend, _index(kind, SMALL), other.id) for kind in ("memories", "history")}
    assert others_before["memories"] and others_before["history"]

    # When the project switches to a model with vectors of another size
    _switch(api, project, LARGE)

    # Then recall, wiki_read and search_history find what was saved before, through the new model's indexes
    _everything_is_found(api, provider, ana, session_id)
    moved = _held(backend, _index("memories", LARGE), project.id)
    assert set(moved) == set(before["memories"])  # the same keys
    for key, meta in before["memories"].items():
        assert {k: v for k, v in moved[key].items() if k != "created_at"} == {
            k: v for k, v in meta.items() if k != "created_at"
        }
        assert moved[key]["created_at"] == pytest.approx(meta["created_at"])
    assert set(before["history"]) <= set(_held(backend, _index("history", LARGE), project.id))
    # And the old model's indexes hold nothing of the project, while the other project's vectors are untouched
    assert _held(backend, _index("memories", SMALL), project.id) == {}
    assert _held(backend, _index("history", SMALL), project.id) == {}
    for kind in ("memories", "history"):
        assert _held(backend, _index(kind, SMALL), other.id) == others_before[kind]
        assert _held(backend, _index(kind, LARGE), other.id) == {}

    # When it switches back
    retrieval_sources.drain()
    history_large = set(_held(backend, _index("history", LARGE), project.id))
    _switch(api, project, SMALL)

    # Then everything is found again, once, and the model it left holds nothing of the project
    _everything_is_found(api, provider, ana, session_id)
    assert set(_held(backend, _index("memories", SMALL), project.id)) == set(before["memories"])
    assert _kinds(_held(backend, _index("memories", SMALL), project.id)) == {"memory": 1, "wiki": 1}
    assert history_large <= set(_held(backend, _index("history", SMALL), project.id))
    assert _held(backend, _index("memories", LARGE), project.id) == {}
    assert _held(backend, _index("history", LARGE), project.id) == {}
    assert _held(backend, _index("memories", SMALL), other.id) == others_before["memories"]


def test_a_page_made_shorter_under_another_model_leaves_no_stale_passage_when_switching_back(
    api: Api, provider: ScriptedProvider, backend: str
) -> None:
    from oberik.adapters.dynamodb import DynamoStore
    from oberik.engine.reembed import Reembedded, reembed

    # Given a long wiki page indexed with one model, and stale records of it from before this feature existed:
    # the page rewritten shorter under another model, with the first model's long version still in its index
    project = _memory_project(api, provider, "acme")
    ana = api.token(project, subject="ana", scope="team-a", capabilities=MEMORY)
    long = "\n\n".join(f"Step {i}: check the canary dashboard and the error budget before going on." for i in range(60))
    call_tool(api, provider, ana, "wiki_write", {"title": "Runbook", "content": long})
    passages = len(_held(backend, _index("memories", SMALL), project.id))
    assert passages > 3
    api.configure(project, embedding_model=None)  # no model: nothing queued, nothing moved
    assert len(_held(backend, _index("memories", SMALL), project.id)) == passages
    _switch(api, project, LARGE)
    call_tool(api, provider, ana, "wiki_write", {"title": "Runbook", "content": "Deploys are frozen until Monday."})
    assert len(_held(backend, _index("memories", LARGE), project.id)) == 1
    assert _held(backend, _index("memories", SMALL), project.id) == {}
    # (the long version's passages in the first model's index, as a store without this feature would have left)
    from oberik.adapters.embeddings import HashingEmbedder
    from oberik.adapters.vectors import vector_store
    from oberik.domain.retrieval import VectorRecord
    from oberik.engine.memory import index_wiki_page

    index_wiki_page(
        vector_store(),
        HashingEmbedder(64),
        project_id=project.id,
        scope="team-a",
        slug="runbook",
        title="Runbook",
        content=long,
        at=1.0,
    )
    vector_store().put(
        _index("memories", LARGE),
        [VectorRecord("wiki#orphan#0000", [1.0] * 96, {"project_id": project.id, "kind": "note", "text": "x"})],
    )

    # When it switches back to the first model
    _switch(api, project, SMALL)

    # Then the page is the short one only, and a record of a kind it does not know stays where it was
    held = _held(backend, _index("memories", SMALL), project.id)
    assert [m["text"] for m in held.values()] == ["Runbook\n\nDeploys are frozen until Monday."]
    found, _ = call_tool(api, provider, ana, "wiki_read", {"query": "canary dashboard error budget", "top_k": 10})
    assert "frozen" in found and "canary" not in found
    assert set(_held(backend, _index("memories", LARGE), project.id)) == {"wiki#orphan#0000"}
    # And running it again (a retried message) changes nothing
    assert reembed(DynamoStore(), project.id) == Reembedded()
    assert _held(backend, _index("memories", SMALL), project.id) == held


def test_without_an_embedding_model_there_is_nothing_to_do_until_one_is_set(
    api: Api, provider: ScriptedProvider, backend: str
) -> None:
    from oberik.adapters.dynamodb import DynamoStore
    from oberik.engine.reembed import Reembedded, reembed

    # Given a project that saved everything with one model, then dropped its embedding model
    project = _memory_project(api, provider, "acme")
    ana, session_id = _save_everything(api, provider, project)
    before = {kind: _held(backend, _index(kind, SMALL), project.id) for kind in ("memories", "history")}
    _switch(api, project, None)

    # Then nothing was moved or removed, and running it by hand does nothing either
    assert reembed(DynamoStore(), project.id) == Reembedded()
    assert {kind: _held(backend, _index(kind, SMALL), project.id) for kind in ("memories", "history")} == before
    assert reembed(DynamoStore(), "p_does_not_exist") == Reembedded()

    # And when a model is set again, what was saved is carried over to it
    _switch(api, project, LARGE)
    _everything_is_found(api, provider, ana, session_id)
    assert _held(backend, _index("memories", SMALL), project.id) == {}


def test_old_queue_messages_for_documents_are_still_understood(api: Api, provider: ScriptedProvider) -> None:
    """The body of a queued document names no kind: it is processed as before."""
    import json

    from oberik.adapters.dynamodb import DynamoStore
    from oberik.engine.documents import handle_sqs

    project = _memory_project(api, provider, "acme")
    r = api.client.post(
        f"/api/projects/{project.id}/documents",
        json={"title": "Note", "text": "Lisbon office opens at nine."},
        headers=project.headers,
    )
    assert r.status_code == 201, r.text
    doc_id = r.json()["id"]
    assert DynamoStore().update_document(project.id, doc_id, status="processing", chunks=0)
    body = json.dumps({"project_id": project.id, "doc_id": doc_id})
    assert handle_sqs({"Records": [{"messageId": "m1", "body": body}]}) == {"batchItemFailures": []}
    again = api.client.get(f"/api/projects/{project.id}/documents/{doc_id}", headers=project.headers).json()
    assert again["status"] == "ready" and again["chunks"] == 1
    bad = handle_sqs({"Records": [{"messageId": "m2", "body": json.dumps({"kind": "reembed"})}]})
    assert bad == {"batchItemFailures": [{"itemIdentifier": "m2"}]}


def test_without_a_queue_the_carrying_over_runs_in_this_process(
    api: Api, provider: ScriptedProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a project that saved everything with one model, in a process that has no document queue
    project = _memory_project(api, provider, "acme")
    ana, session_id = _save_everything(api, provider, project)
    monkeypatch.setenv("OBERIK_DOCUMENT_QUEUE_URL", "")

    # When its model changes
    api.configure(project, embedding_model=LARGE)

    # Then a thread of this process carries everything over, and the old model's indexes are emptied of it
    deadline = time.monotonic() + 30
    while any(_held("memory", _index(kind, SMALL), project.id) for kind in ("memories", "history")):
        assert time.monotonic() < deadline, "the old model's indexes still hold the project's records"
        time.sleep(0.05)
    _everything_is_found(api, provider, ana, session_id)
