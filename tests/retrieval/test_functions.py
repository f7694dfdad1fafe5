"""The ingest and history functions, driven by their sample events (events/*.json) through their real Lambda
adapters: the events have the shape the handlers read."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

from oberik.adapters.blobs import Blobs, original_key
from oberik.adapters.dynamodb import DynamoStore
from oberik.adapters.embeddings import HashingEmbedder
from oberik.adapters.vectors import memory_store, retrieval_resources
from oberik.domain.documents import Document, new_document_id
from oberik.domain.retrieval import index_name
from oberik.local.scripted_provider import Reply, ScriptedProvider
from oberik.local.stack import FakeLambdaContext, load_handler
from tests.api_fixtures import Api, Project
from tests.retrieval.conftest import HASHING
from tests.retrieval.pdfs import pdf

ROOT = Path(__file__).resolve().parents[2]


def _handler(name: str) -> Any:
    return load_handler(ROOT / "functions" / name / "app.py", f"oberik_fn_{name}_sample")


def _context(name: str) -> FakeLambdaContext:
    return FakeLambdaContext(name, f"arn:aws:lambda:us-east-1:123456789012:function:{name}", 1024, 300)


def test_the_sample_ingest_event_indexes_a_stored_document(api: Api, rag_project: Project) -> None:
    doc_id = new_document_id()
    data = pdf(["First page.", "The second page names the winner: Ada."])
    Blobs(retrieval_resources().documents_bucket).put(original_key(rag_project.id, doc_id), data, "application/pdf")
    now = time.time()
    DynamoStore().create_document(
        Document(
            id=doc_id,
            project_id=rag_project.id,
            title="Results",
            content_type="application/pdf",
            size=len(data),
            created_at=now,
            updated_at=now,
        )
    )
    event = json.loads((ROOT / "events" / "ingest.json").read_text())
    event["Records"][0]["body"] = json.dumps({"project_id": rag_project.id, "doc_id": doc_id})
    assert _handler("ingest")(event, _context("oberik-ingest")) == {"batchItemFailures": []}
    done = api.client.get(f"/api/projects/{rag_project.id}/documents/{doc_id}", headers=rag_project.headers).json()
    assert done["status"] == "ready" and done["pages"] == 2
    # The same message delivered again changes nothing.
    assert _handler("ingest")(event, _context("oberik-ingest")) == {"batchItemFailures": []}
    broken = dict(event["Records"][0], body="not json")
    assert _handler("ingest")({"Records": [broken]}, _context("oberik-ingest"))["batchItemFailures"] == [
        {"itemIdentifier": broken["messageId"]}
    ]


def test_the_sample_history_event_indexes_a_message_for_its_subject(
    api: Api, rag_project: Project, provider: ScriptedProvider
) -> None:
    token = api.token(rag_project, subject="ana")
    provider.script(Reply(text="Hello."))
    session_id = api.chat(token, message="hi").json()["session_id"]
    event = json.loads((ROOT / "events" / "history.json").read_text())
    image = event["Records"][0]["dynamodb"]["NewImage"]
    image["pk"] = {"S": f"SESSION#{session_id}"}
    image["session_id"] = {"S": session_id}
    image["seq"] = {"N": "99"}
    assert _handler("history")(event, _context("oberik-history"))["indexed"] == 1
    index = index_name("history", HASHING, 256)
    hits = memory_store().query(
        index,
        HashingEmbedder(256).embed(["flight to Lisbon gate 12"])[0],
        top_k=1,
        filter={"subject": "ana", "session_id": session_id},
    )
    assert hits and "gate 12" in hits[0].metadata["text"] and hits[0].metadata["project_id"] == rag_project.id


def test_history_reads_nothing_for_a_project_that_indexes_nothing_and_names_the_current_title(
    api: Api, scripted_project: Project, provider: ScriptedProvider, monkeypatch: Any
) -> None:
    from oberik.engine import history

    store = DynamoStore()
    token = api.token(scripted_project, subject="ana")
    provider.script(Reply(text="Hello."))
    session_id = api.chat(token, message="hi").json()["session_id"]
    item = {"role": "user", "session_id": session_id, "seq": 1, "content": "flight to Lisbon gate 12"}
    reads: list[str] = []
    me = threading.get_ident()  # this test's own calls (the local stream poller indexes in its own thread)

    def counted(name: str) -> Any:
        real = getattr(DynamoStore, name)

        def read(self: Any, key: str) -> Any:
            if threading.get_ident() == me:
                reads.append(name)
            return real(self, key)

        return read

    for name in ("get_session", "get_project"):
        monkeypatch.setattr(DynamoStore, name, counted(name))

    # A project without an embedding model: its conversation is looked up once, then never again
    assert history.index_messages(store, [item]) == 0
    assert history.index_messages(store, [item, {**item, "seq": 2}]) == 0
    assert reads.count("get_session") <= 1

    # Once the project indexes, the message is indexed under the conversation's title as it is now
    api.configure(scripted_project, embedding_model=HASHING)  # through the API: this process forgets the project
    api.client.patch(f"/chat/sessions/{session_id}", json={"title": "Trip"}, headers=api.bearer(token))
    assert history.index_messages(store, [{**item, "seq": 3}]) == 1
    index = index_name("history", HASHING, 256)
    hits = memory_store().query(
        index, HashingEmbedder(256).embed(["flight to Lisbon gate 12"])[0], top_k=1, filter={"session_id": session_id}
    )
    assert hits and hits[0].metadata["title"] == "user in Trip"
