"""The ingest and history functions, driven by their sample events (events/*.json) through their real Lambda
adapters: the events have the shape the handlers read."""

from __future__ import annotations

import json
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
