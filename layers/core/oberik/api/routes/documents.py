"""Control plane: documents for retrieval (X-API-Key).

POST takes either JSON (`text`, or `content_base64` for a binary file such as a PDF, plus title, tags, ...) or the
file itself as the request body with its media type as Content-Type and the rest as query parameters.
It answers 201 when the document was processed in the request (status `ready`, or `failed` with `error` saying
why), 202 when it is large enough to be processed in the background (status `processing`; poll GET).
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Annotated, Any

from fastapi import APIRouter, Path, Request, Response, status
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.concurrency import run_in_threadpool

from oberik.api.deps import ProjectDep, StoreDep
from oberik.domain.documents import (
    CONTENT_TYPES,
    MAX_DOCUMENT_BYTES,
    MAX_TAGS,
    DocumentPublic,
    content_type_for,
    is_document_id,
    valid_tag,
)
from oberik.domain.errors import Invalid, NotFound
from oberik.engine.documents import Documents, Upload

router = APIRouter(prefix="/api/projects", tags=["documents"])

_SUPPORTED = ", ".join(CONTENT_TYPES)


class DocumentCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    title: str | None = Field(default=None, max_length=300, description="defaults to the file name")
    filename: str | None = Field(default=None, max_length=300)
    content_type: str | None = Field(default=None, description=f"one of {_SUPPORTED}; else from the file name")
    text: str | None = Field(default=None, description="the document as text (text, markdown or HTML)")
    content_base64: str | None = Field(default=None, description="the file's bytes, base64 (e.g. a PDF)")
    tags: list[str] = Field(default_factory=list, description="scope a turn to documents with these tags")
    tenant_id: str | None = Field(
        default=None, max_length=200, description="only turns of tokens with this tenant_id retrieve it; null: all"
    )
    document_id: str | None = Field(default=None, description="your own id (d_...), making a retried upload a no-op")


class DocumentList(BaseModel):
    items: list[DocumentPublic]


def _upload_of(body: DocumentCreate, raw: bytes | None) -> Upload:
    if raw is not None:
        data = raw
    elif (body.text is None) == (body.content_base64 is None):
        raise Invalid("Send the document as exactly one of text or content_base64.", field="text")
    elif body.text is not None:
        data = body.text.encode()
    else:
        try:
            data = base64.b64decode(body.content_base64 or "", validate=True)
        except (binascii.Error, ValueError) as e:
            raise Invalid("content_base64 is not valid base64.", field="content_base64") from e
    if not data:
        raise Invalid("The document is empty.", field="text" if raw is None else "body")
    if len(data) > MAX_DOCUMENT_BYTES:
        raise Invalid(
            f"The document is {len(data)} bytes; the limit is {MAX_DOCUMENT_BYTES} bytes. Split it into parts.",
            field="content_base64" if raw is None else "body",
        )
    kind = content_type_for(body.content_type, body.filename)
    if kind is None and body.content_type is None and body.text is not None:
        kind = "text/plain"
    if kind is None:
        said = body.content_type or (f"the file name {body.filename!r}" if body.filename else "nothing")
        raise Invalid(
            f"Cannot tell what kind of document this is from {said}. Supported: {_SUPPORTED} (or a file name ending "
            "in .txt, .md, .html or .pdf).",
            field="content_type",
        )
    if len(body.tags) > MAX_TAGS:
        raise Invalid(f"A document takes at most {MAX_TAGS} tags.", field="tags")
    bad = [t for t in body.tags if not valid_tag(t)]
    if bad:
        raise Invalid(
            f"Tags must be 1-64 letters, digits, spaces or _.:/- and start with a letter or digit: {bad[0]!r}.",
            field="tags",
        )
    if body.document_id is not None and not is_document_id(body.document_id):
        raise Invalid(
            "document_id must look like d_ followed by 28 hex digits (as this API hands out).", field="document_id"
        )
    title = (body.title or "").strip() or (body.filename or "").strip() or "Untitled document"
    return Upload(
        data=data,
        content_type=kind,
        title=title,
        filename=body.filename,
        tags=list(dict.fromkeys(body.tags)),
        tenant_id=body.tenant_id or None,
        document_id=body.document_id,
    )


_BODY_DOC = {
    "requestBody": {
        "content": {
            "application/json": {"schema": DocumentCreate.model_json_schema()},
            "application/pdf": {"schema": {"type": "string", "format": "binary"}},
            "text/plain": {"schema": {"type": "string"}},
            "text/markdown": {"schema": {"type": "string"}},
            "text/html": {"schema": {"type": "string"}},
        },
        "required": True,
    }
}


@router.post(
    "/{id}/documents",
    status_code=status.HTTP_201_CREATED,
    response_model=DocumentPublic,
    openapi_extra=_BODY_DOC,
    responses={202: {"model": DocumentPublic, "description": "accepted; processing in the background"}},
)
async def upload_document(request: Request, response: Response, project: ProjectDep, store: StoreDep) -> DocumentPublic:
    declared = (request.headers.get("content-type") or "").split(";", 1)[0].strip().lower()
    raw = await request.body()
    if declared in ("application/json", ""):
        try:
            payload: Any = json.loads(raw or b"null")
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise Invalid("The request body is not valid JSON.", field="body") from e
        if not isinstance(payload, dict):
            raise Invalid(
                "The request body must be a JSON object (or the file itself, with its Content-Type).", field="body"
            )
        try:
            body = DocumentCreate.model_validate(payload)
        except ValidationError as e:
            first = e.errors()[0]
            where = ".".join(str(p) for p in first.get("loc", ())) or "body"
            raise Invalid(f"{where}: {first.get('msg', 'invalid')}.", field=where) from e
        upload = _upload_of(body, None)
    else:
        q = request.query_params
        tags = [t.strip() for value in q.getlist("tags") for t in value.split(",") if t.strip()]
        body = DocumentCreate(
            title=q.get("title"),
            filename=q.get("filename"),
            content_type=declared,
            tags=tags,
            tenant_id=q.get("tenant_id"),
            document_id=q.get("document_id"),
        )
        upload = _upload_of(body, raw)
    doc, later = await run_in_threadpool(Documents(store).upload, project, upload)
    if later:
        response.status_code = status.HTTP_202_ACCEPTED
    return DocumentPublic.of(doc)


DocId = Annotated[str, Path(description="the document's id")]


@router.get("/{id}/documents", response_model=DocumentList)
def list_documents(project: ProjectDep, store: StoreDep, tag: str | None = None) -> DocumentList:
    docs = store.list_documents(project.id)
    if tag is not None:
        docs = [d for d in docs if tag in d.tags]
    return DocumentList(items=[DocumentPublic.of(d) for d in sorted(docs, key=lambda d: d.created_at, reverse=True)])


@router.get("/{id}/documents/{doc_id}", response_model=DocumentPublic)
def get_document(doc_id: DocId, project: ProjectDep, store: StoreDep) -> DocumentPublic:
    if not is_document_id(doc_id):
        raise NotFound(f"No document {doc_id} exists in this project.", code="document_not_found")
    return DocumentPublic.of(Documents(store).get(project, doc_id))


@router.delete("/{id}/documents/{doc_id}", status_code=status.HTTP_204_NO_CONTENT)
def delete_document(doc_id: DocId, project: ProjectDep, store: StoreDep) -> Response:
    if not is_document_id(doc_id):
        raise NotFound(f"No document {doc_id} exists in this project.", code="document_not_found")
    Documents(store).delete(project, doc_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
