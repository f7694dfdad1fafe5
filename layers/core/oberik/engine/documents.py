"""Documents for retrieval: upload (original to S3, metadata to the table), parse, chunk, embed, index; list;
delete (vectors too). Small uploads are processed in the request; large ones on the document queue by the ingest
function (locally: the same queue, consumed in this process), with `status` telling where each one stands."""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from oberik.adapters.blobs import Blobs, original_key
from oberik.adapters.document_parsing import ParseError, parse
from oberik.adapters.embeddings import embedder_for
from oberik.adapters.vectors import RetrievalResources, retrieval_resources, vector_store
from oberik.domain.documents import Document, new_document_id
from oberik.domain.errors import Conflict, Invalid, NotFound
from oberik.domain.models import Project
from oberik.domain.retrieval import VectorRecord, chunk_pages, index_name
from oberik.observability import logger
from oberik.ports import Embeddings, VectorStore

EMBED_BATCH = 64


@dataclass
class Upload:
    data: bytes
    content_type: str
    title: str
    filename: str | None = None
    tags: list[str] = field(default_factory=list)
    tenant_id: str | None = None
    document_id: str | None = None


def chunk_key(doc_id: str, n: int) -> str:
    return f"{doc_id}#{n:05d}"


NO_EMBEDDINGS = (
    "This project has no embedding model, so documents cannot be indexed for retrieval. Set embedding_model in the "
    "project settings (PATCH /api/projects/{id}/settings), e.g. offline/all-minilm-l6-v2, then upload again."
)


class Documents:
    def __init__(
        self,
        store: Any,
        *,
        vectors: VectorStore | None = None,
        resources: RetrievalResources | None = None,
        embedder: Callable[[Project], Embeddings | None] | None = None,
    ) -> None:
        self.store = store
        self.resources = resources or retrieval_resources()
        self.vectors = vectors or vector_store()
        self._embedder = embedder or (lambda project: embedder_for(project.settings))

    @property
    def blobs(self) -> Blobs:
        return Blobs(self.resources.documents_bucket)

    # --- upload ----------------------------------------------------------------------------------------

    def upload(self, project: Project, upload: Upload) -> tuple[Document, bool]:
        """Store and index a document. Returns it and whether it is still processing (asynchronously)."""
        if self._embedder(project) is None:
            raise Invalid(NO_EMBEDDINGS.replace("{id}", project.id), field="embedding_model")
        digest = hashlib.sha256(upload.data).hexdigest()
        if upload.document_id:
            existing = self.store.get_document(project.id, upload.document_id)
            if existing is not None:
                if existing.sha256 == digest and existing.tags == upload.tags and existing.title == upload.title:
                    return existing, existing.status == "processing"  # the same upload again: nothing to do
                raise Conflict(
                    f"A different document already has the id {upload.document_id}. Delete it first "
                    f"(DELETE /api/projects/{project.id}/documents/{upload.document_id}) or upload without document_id.",
                    code="document_exists",
                )
        now = time.time()
        doc = Document(
            id=upload.document_id or new_document_id(),
            project_id=project.id,
            title=upload.title,
            filename=upload.filename,
            content_type=upload.content_type,
            tags=upload.tags,
            tenant_id=upload.tenant_id,
            status="processing",
            size=len(upload.data),
            sha256=digest,
            created_at=now,
            updated_at=now,
        )
        self.blobs.put(original_key(project.id, doc.id), upload.data, upload.content_type)
        if not self.store.create_document(doc):
            existing = self.store.get_document(project.id, doc.id)
            if existing is not None and existing.sha256 == digest:
                return existing, existing.status == "processing"
            raise Conflict(f"A document with the id {doc.id} was uploaded meanwhile.", code="document_exists")
        if len(upload.data) > self.resources.document_sync_bytes:
            self._later(project.id, doc.id)
            return doc, True
        return self.process(project.id, doc.id) or doc, False

    def _later(self, project_id: str, doc_id: str) -> None:
        self.enqueue(
            {"project_id": project_id, "doc_id": doc_id}, lambda: self.process(project_id, doc_id), f"ingest-{doc_id}"
        )

    def enqueue(self, body: dict[str, Any], work: Callable[[], object], name: str) -> None:
        """Send `body` to the document queue (`handle_sqs` does the work it names), or with no queue do `work`
        on a thread of this process."""
        if self.resources.document_queue_url:
            from oberik.adapters.sqs import DeliveryQueue

            DeliveryQueue(self.resources.document_queue_url).send(json.dumps(body))
            return
        # No queue (a bare process without the stack): the same work on a thread of this process.
        threading.Thread(target=work, name=name, daemon=True).start()

    def reindex(self, project: Project) -> int:
        """After the project's embedding model changed: index every document again, from its stored original,
        with the model now set (each goes back to `processing`, on the queue as a large upload would; its
        passages from the previous model are removed once the new ones are written). Returns how many."""
        embedder = self._embedder(project)
        if embedder is None:
            return 0
        queued = 0
        for doc in self.store.list_documents(project.id):
            if doc.status == "processing" or (doc.status == "ready" and doc.embedding_model == embedder.model):
                continue  # on its way already, or made with this model
            self.store.update_document(project.id, doc.id, status="processing", error=None, updated_at=time.time())
            self._later(project.id, doc.id)
            queued += 1
        if queued:
            logger.info("documents queued for re-indexing", project_id=project.id, documents=queued)
        return queued

    # --- processing --------------------------------------------------------------------------------------

    def process(self, project_id: str, doc_id: str) -> Document | None:
        """Parse, chunk, embed and index one stored document. Idempotent: a document already processed is left
        as it is, and a retry writes the same vector keys again. A failure is recorded on the document."""
        doc = self.store.get_document(project_id, doc_id)
        if doc is None or doc.status != "processing":
            return doc
        previous = (doc.index, doc.chunks)  # passages an earlier indexing wrote (another model's, on a re-index)
        project = self.store.get_project(project_id)
        if project is None:
            return None
        embedder = self._embedder(project)
        if embedder is None:
            return self._fail(doc, NO_EMBEDDINGS.replace("{id}", project_id))
        data = self.blobs.get(original_key(project_id, doc_id))
        if data is None:
            return self._fail(doc, "The uploaded file is missing from storage; upload the document again.")
        try:
            pages = parse(data, doc.content_type)
        except ParseError as e:
            return self._fail(doc, str(e))
        chunks = chunk_pages(pages)
        if not chunks:
            return self._fail(doc, "The document contains no text to index.")
        try:
            index = index_name("chunks", embedder.model, embedder.dimension)
            self.vectors.ensure_index(index, embedder.dimension)
            records: list[VectorRecord] = []
            for start in range(0, len(chunks), EMBED_BATCH):
                batch = chunks[start : start + EMBED_BATCH]
                vectors = embedder.embed([c.text for c in batch])
                for chunk, vector in zip(batch, vectors, strict=True):
                    metadata: dict[str, Any] = {
                        "project_id": project_id,
                        "doc_id": doc.id,
                        "kind": "chunk",
                        "created_at": doc.created_at,
                        "text": chunk.text,
                        "title": doc.title,
                    }
                    if chunk.page is not None:
                        metadata["page"] = chunk.page
                    if doc.tags:
                        metadata["tags"] = list(doc.tags)
                    if doc.tenant_id:
                        metadata["tenant_id"] = doc.tenant_id
                    records.append(VectorRecord(chunk_key(doc.id, chunk.n), vector, metadata))
            self.vectors.put(index, records)
        except Exception as e:
            logger.exception("document indexing failed", doc_id=doc_id, project_id=project_id)
            return self._fail(
                doc,
                f"The document could not be indexed: the embedding model or the vector store failed ({type(e).__name__}: {str(e)[:200]}). Upload it again to retry.",
            )
        page_numbers = [p for p, _ in pages if p is not None]
        done = self.store.update_document(
            project_id,
            doc_id,
            status="ready",
            chunks=len(chunks),
            pages=max(page_numbers) if page_numbers else None,
            embedding_model=embedder.model,
            index=index,
            error=None,
            updated_at=time.time(),
        )
        if not done:  # deleted while it was being indexed: take its passages back out
            self.vectors.delete(index, [r.key for r in records])
            return None
        old_index, old_chunks = previous
        if old_index and old_chunks:
            # Re-indexed: the previous model's passages go (in the same index, only those past the new count).
            first = len(chunks) if old_index == index else 0
            stale = [chunk_key(doc.id, n) for n in range(first, old_chunks)]
            if stale:
                self.vectors.delete(old_index, stale)
        logger.info("document indexed", doc_id=doc_id, chunks=len(chunks))
        return self.store.get_document(project_id, doc_id)

    def _fail(self, doc: Document, reason: str) -> Document | None:
        self.store.update_document(doc.project_id, doc.id, status="failed", error=reason, updated_at=time.time())
        logger.info("document failed", doc_id=doc.id, reason=reason)
        return self.store.get_document(doc.project_id, doc.id)

    # --- reading and deleting ------------------------------------------------------------------------

    def get(self, project: Project, doc_id: str) -> Document:
        doc = self.store.get_document(project.id, doc_id)
        if doc is None:
            raise NotFound(f"No document {doc_id} exists in this project.", code="document_not_found")
        return doc

    def delete(self, project: Project, doc_id: str) -> None:
        doc = self.get(project, doc_id)
        if doc.index and doc.chunks:
            self.vectors.delete(doc.index, [chunk_key(doc.id, n) for n in range(doc.chunks)])
        self.store.delete_document(project.id, doc_id)
        if self.resources.documents_bucket:
            self.blobs.delete(original_key(project.id, doc_id))


def handle_sqs(event: dict[str, Any]) -> dict[str, Any]:
    """The ingest function: process each queued document, or re-embed a project's memories, wiki and history
    (a body of kind "reembed"); report the records to retry."""
    from oberik.adapters.dynamodb import DynamoStore
    from oberik.engine import reembed

    documents = Documents(DynamoStore())
    failures = []
    for record in event.get("Records", []):
        try:
            body = json.loads(record["body"])
            if body.get("kind") == reembed.KIND:
                reembed.reembed(documents.store, str(body["project_id"]), vectors=documents.vectors)
            else:
                documents.process(str(body["project_id"]), str(body["doc_id"]))
        except Exception:
            logger.exception("document ingest failed", message_id=record.get("messageId"))
            failures.append({"itemIdentifier": record.get("messageId")})
    return {"batchItemFailures": failures}
