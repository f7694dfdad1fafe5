"""POST/GET/DELETE /api/projects/{id}/documents: originals in S3, metadata in the table, passages in the vectors."""

from __future__ import annotations

import base64
import time
from typing import Any

import pytest

from oberik.adapters.aws import client
from oberik.adapters.blobs import original_key
from oberik.adapters.vectors import memory_store, retrieval_resources
from oberik.domain.retrieval import index_name
from tests.api_fixtures import Api, Project
from tests.retrieval.conftest import HASHING, upload, uploaded
from tests.retrieval.pdfs import image_only_pdf, pdf

INDEX = index_name("chunks", HASHING, 256)


def _passages(doc_id: str) -> list[Any]:
    from oberik.adapters.embeddings import HashingEmbedder

    try:
        return memory_store().query(INDEX, HashingEmbedder(256).embed(["x"])[0], top_k=1000, filter={"doc_id": doc_id})
    except LookupError:
        return []


def _wait_until_settled(api: Api, project: Project, doc_id: str, timeout: float = 60.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        r = api.client.get(f"/api/projects/{project.id}/documents/{doc_id}", headers=project.headers)
        assert r.status_code == 200, r.text
        if r.json()["status"] != "processing" or time.monotonic() > deadline:
            return dict(r.json())
        time.sleep(0.05)


def test_a_text_document_is_stored_chunked_indexed_and_listed(api: Api, rag_project: Project) -> None:
    body = "\n\n".join(f"Paragraph {i}: the travel policy says rule number {i} applies to trips." for i in range(40))
    doc = uploaded(api, rag_project, title="Travel policy", text=body, tags=["policies", "travel"])
    assert doc["chunks"] > 1
    assert doc["embedding_model"] == HASHING
    assert doc["content_type"] == "text/plain"
    passages = _passages(doc["id"])
    assert len(passages) == doc["chunks"]
    assert all(
        p.metadata["tags"] == ["policies", "travel"] and p.metadata["title"] == "Travel policy" for p in passages
    )
    assert "rule number 0 applies" in " ".join(p.metadata["text"] for p in passages)
    stored = client("s3").get_object(
        Bucket=retrieval_resources().documents_bucket, Key=original_key(rag_project.id, doc["id"])
    )
    assert stored["Body"].read() == body.encode()
    one = api.client.get(f"/api/projects/{rag_project.id}/documents/{doc['id']}", headers=rag_project.headers)
    assert one.status_code == 200 and one.json() == doc
    listing = api.client.get(f"/api/projects/{rag_project.id}/documents", headers=rag_project.headers).json()
    assert [d["id"] for d in listing["items"]] == [doc["id"]]
    assert (
        api.client.get(
            f"/api/projects/{rag_project.id}/documents", params={"tag": "hr"}, headers=rag_project.headers
        ).json()["items"]
        == []
    )


def test_markdown_and_html_are_read_as_their_text(api: Api, rag_project: Project) -> None:
    md = uploaded(api, rag_project, filename="notes.md", text="# Notes\n\nThe launch date is **March 3**.")
    assert md["content_type"] == "text/markdown" and md["title"] == "notes.md"
    html = (
        "<html><head><title>Refunds</title><script>var tracking = 1;</script></head><body>"
        "<nav><a href='/'>Home</a> | <a href='/shop'>Shop</a></nav><article><h1>Refund policy</h1>"
        "<p>Annual plans can be refunded in full within 30 days of purchase. After that, refunds are prorated "
        "by the number of unused months remaining on the plan.</p></article></body></html>"
    )
    doc = uploaded(api, rag_project, title="Refunds", content_type="text/html", text=html)
    text = " ".join(p.metadata["text"] for p in _passages(doc["id"]))
    assert "refunded in full within 30 days" in text
    assert "<p>" not in text and "tracking" not in text


def test_a_pdf_keeps_its_page_numbers(api: Api, rag_project: Project) -> None:
    data = pdf(
        ["Cover page of the annual report.", "Revenue grew by 12 percent in 2025.", "Headcount reached 480 people."]
    )
    doc = uploaded(
        api, rag_project, title="Annual report", content_base64=base64.b64encode(data).decode(), filename="report.pdf"
    )
    assert doc["content_type"] == "application/pdf" and doc["pages"] == 3
    pages = {p.metadata["page"]: p.metadata["text"] for p in _passages(doc["id"])}
    assert "Revenue grew by 12 percent" in pages[2]
    assert "Headcount reached 480" in pages[3]
    # The same file sent as the request body itself, with its media type.
    raw = api.client.post(
        f"/api/projects/{rag_project.id}/documents",
        content=data,
        params={"title": "Annual report (raw)", "tags": "finance,reports"},
        headers={**rag_project.headers, "Content-Type": "application/pdf"},
    )
    assert raw.status_code == 201, raw.text
    assert raw.json()["pages"] == 3 and raw.json()["tags"] == ["finance", "reports"]


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (
            {"content_base64": base64.b64encode(b"%PDF-1.7\nthis is not really a pdf").decode(), "filename": "x.pdf"},
            "could not be read",
        ),
        (
            {"content_base64": base64.b64encode(image_only_pdf()).decode(), "filename": "scan.pdf"},
            "no extractable text",
        ),
        (
            {"content_base64": base64.b64encode(b"\xff\xfe\x00\xd8 broken").decode(), "content_type": "text/plain"},
            "not UTF-8",
        ),
        (
            {"text": "<html><body><script>only()</script></body></html>", "content_type": "text/html"},
            "no readable text",
        ),
        ({"content_base64": base64.b64encode(b"plain words").decode(), "content_type": "application/pdf"}, "not a PDF"),
    ],
)
def test_a_document_that_cannot_be_parsed_says_why(
    api: Api, rag_project: Project, body: dict[str, Any], reason: str
) -> None:
    r = upload(api, rag_project, title="broken", **body)
    assert r.status_code == 201, r.text
    assert r.json()["status"] == "failed"
    assert reason in r.json()["error"]
    assert _passages(r.json()["id"]) == []
    again = api.client.get(f"/api/projects/{rag_project.id}/documents/{r.json()['id']}", headers=rag_project.headers)
    assert again.json()["error"] == r.json()["error"]


def test_a_large_upload_is_processed_in_the_background(
    api: Api, rag_project: Project, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OBERIK_DOCUMENT_SYNC_BYTES", "200")
    data = pdf([f"Page {n} says the code word is alpha{n}." for n in range(1, 6)])
    r = upload(api, rag_project, title="Big", content_base64=base64.b64encode(data).decode(), filename="big.pdf")
    assert r.status_code == 202, r.text
    assert r.json()["status"] == "processing"
    done = _wait_until_settled(api, rag_project, r.json()["id"])
    assert done["status"] == "ready" and done["pages"] == 5
    assert {p.metadata["page"] for p in _passages(done["id"])} == {1, 2, 3, 4, 5}
    bad = upload(
        api,
        rag_project,
        title="Big and broken",
        content_base64=base64.b64encode(image_only_pdf() * 2).decode(),
        filename="scan.pdf",
    )
    assert bad.status_code == 202
    failed = _wait_until_settled(api, rag_project, bad.json()["id"])
    assert failed["status"] == "failed" and "no extractable text" in failed["error"]


def test_delete_removes_the_passages_and_the_original(api: Api, rag_project: Project) -> None:
    keep = uploaded(api, rag_project, title="Keep", text="This one stays.")
    doc = uploaded(
        api, rag_project, title="Go", text="\n\n".join(f"Section {i} of the leaving document." * 5 for i in range(20))
    )
    assert len(_passages(doc["id"])) == doc["chunks"] > 1
    r = api.client.delete(f"/api/projects/{rag_project.id}/documents/{doc['id']}", headers=rag_project.headers)
    assert r.status_code == 204
    assert _passages(doc["id"]) == []
    assert len(_passages(keep["id"])) == 1
    assert (
        api.client.get(f"/api/projects/{rag_project.id}/documents/{doc['id']}", headers=rag_project.headers).status_code
        == 404
    )
    listed = client("s3").list_objects_v2(
        Bucket=retrieval_resources().documents_bucket, Prefix=f"documents/{rag_project.id}/{doc['id']}"
    )
    assert listed.get("KeyCount", 0) == 0
    again = api.client.delete(f"/api/projects/{rag_project.id}/documents/{doc['id']}", headers=rag_project.headers)
    assert again.status_code == 404 and "No document" in again.json()["detail"]


def test_a_retried_upload_with_the_same_document_id_is_applied_once(api: Api, rag_project: Project) -> None:
    doc_id = "d_" + "0" * 12 + "a" * 16
    first = uploaded(api, rag_project, title="Once", text="The same words.", document_id=doc_id)
    second = uploaded(api, rag_project, title="Once", text="The same words.", document_id=doc_id)
    assert first == second and first["id"] == doc_id
    assert len(_passages(doc_id)) == 1
    other = upload(api, rag_project, title="Once", text="Different words.", document_id=doc_id)
    assert other.status_code == 409 and "Delete it first" in other.json()["detail"]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"title": "x"}, "text"),
        ({"text": "a", "content_base64": "YQ=="}, "text"),
        ({"content_base64": "not base64!!"}, "content_base64"),
        ({"content_base64": "YQ==", "content_type": "image/png"}, "content_type"),
        ({"content_base64": "YQ=="}, "content_type"),
        ({"text": "a", "tags": ["-bad"]}, "tags"),
        ({"text": "a", "tags": [f"t{i}" for i in range(21)]}, "tags"),
        ({"text": "a", "document_id": "mine"}, "document_id"),
        ({"text": "a", "unknown": 1}, "unknown"),
        ({"text": ""}, "text"),
    ],
)
def test_uploads_are_validated_with_a_sentence(
    api: Api, rag_project: Project, body: dict[str, Any], field: str
) -> None:
    r = upload(api, rag_project, **body)
    assert r.status_code in (400, 422), r.text
    assert r.json()["field"] == field
    assert len(r.json()["detail"]) > 15


def test_without_an_embedding_model_uploads_are_refused_with_what_to_configure(
    api: Api, scripted_project: Project
) -> None:
    r = upload(api, scripted_project, title="x", text="words")
    assert r.status_code in (400, 422)
    assert "embedding_model" in r.json()["detail"]
    listing = api.client.get(f"/api/projects/{scripted_project.id}/documents", headers=scripted_project.headers)
    assert listing.json()["items"] == []


def test_another_projects_documents_are_not_found(api: Api, rag_project: Project) -> None:
    doc = uploaded(api, rag_project, title="Mine", text="Private words.")
    other = api.create_project("other")
    api.configure(other, embedding_model=HASHING)
    assert api.client.get(f"/api/projects/{other.id}/documents/{doc['id']}", headers=other.headers).status_code == 404
    assert (
        api.client.delete(f"/api/projects/{other.id}/documents/{doc['id']}", headers=other.headers).status_code == 404
    )
    assert api.client.get(f"/api/projects/{rag_project.id}/documents", headers=other.headers).status_code == 404
    assert (
        api.client.get(f"/api/projects/{rag_project.id}/documents/nonsense", headers=rag_project.headers).status_code
        == 404
    )


def test_changing_the_embedding_model_indexes_every_document_again(api: Api, rag_project: Project) -> None:
    from oberik.adapters.embeddings import HashingEmbedder

    # Given two documents indexed with one model
    long = uploaded(
        api, rag_project, title="Policy", text="\n\n".join(f"Rule {i}: trains before planes." * 4 for i in range(15))
    )
    short = uploaded(api, rag_project, title="Note", text="Lisbon office opens at nine.")
    assert long["chunks"] > 1 and len(_passages(long["id"])) == long["chunks"]

    # When the project switches to a model with other vectors
    api.configure(rag_project, embedding_model="offline/hashing-128")

    # Then each is indexed again with it (from the stored original), and the old model's passages are gone
    new_index = index_name("chunks", "offline/hashing-128", 128)
    for doc in (long, short):
        again = _wait_until_settled(api, rag_project, doc["id"])
        assert again["status"] == "ready" and again["embedding_model"] == "offline/hashing-128"
        assert again["chunks"] == doc["chunks"]
        assert _passages(doc["id"]) == []
        found = memory_store().query(
            new_index, HashingEmbedder(128).embed(["x"])[0], top_k=1000, filter={"doc_id": doc["id"]}
        )
        assert len(found) == doc["chunks"]

    # And setting the same model again queues nothing
    settled = {
        d["id"]: d["updated_at"] for d in (_wait_until_settled(api, rag_project, x["id"]) for x in (long, short))
    }
    api.configure(rag_project, embedding_model="offline/hashing-128")
    assert {d: _wait_until_settled(api, rag_project, d)["updated_at"] for d in settled} == settled
    listing = api.client.get(f"/api/projects/{rag_project.id}/documents", headers=rag_project.headers).json()
    assert {d["status"] for d in listing["items"]} == {"ready"}
