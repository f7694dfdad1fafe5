"""Documents for retrieval: what is stored about one, and what a caller sees."""

from __future__ import annotations

import re
import secrets
import time
from typing import Literal

from pydantic import BaseModel, Field

DocumentStatus = Literal["processing", "ready", "failed"]

# What can be uploaded, by media type, and the file extensions that imply each.
CONTENT_TYPES: dict[str, tuple[str, ...]] = {
    "text/plain": (".txt", ".text", ".log", ".csv"),
    "text/markdown": (".md", ".markdown"),
    "text/html": (".html", ".htm"),
    "application/pdf": (".pdf",),
}
MAX_DOCUMENT_BYTES = 10 * 1024 * 1024
MAX_TAGS = 20
_TAG = re.compile(r"^[A-Za-z0-9][A-Za-z0-9 _.:/-]{0,63}$")
_DOC_ID = re.compile(r"^d_[0-9a-f]{28}$")


def new_document_id() -> str:
    return f"d_{int(time.time() * 1000):012x}{secrets.token_hex(8)}"


def is_document_id(value: str) -> bool:
    return bool(_DOC_ID.match(value or ""))


def valid_tag(tag: str) -> bool:
    return bool(_TAG.match(tag))


def content_type_for(content_type: str | None, filename: str | None) -> str | None:
    """The supported media type a declared type or a file name stands for; None when neither says."""
    if content_type:
        base = content_type.split(";", 1)[0].strip().lower()
        aliases = {
            "text/x-markdown": "text/markdown",
            "application/xhtml+xml": "text/html",
            "application/x-pdf": "application/pdf",
        }
        base = aliases.get(base, base)
        if base in CONTENT_TYPES:
            return base
        if base not in ("application/octet-stream", "binary/octet-stream", ""):
            return None
    if filename:
        lower = filename.lower()
        for kind, extensions in CONTENT_TYPES.items():
            if lower.endswith(extensions):
                return kind
    return None


class Document(BaseModel):
    id: str
    project_id: str
    title: str
    filename: str | None = None
    content_type: str
    tags: list[str] = Field(default_factory=list)
    tenant_id: str | None = None  # None: every tenant of the project may retrieve it
    status: DocumentStatus = "processing"
    error: str | None = None  # why it could not be parsed or indexed, when status is "failed"
    size: int = 0
    sha256: str = ""
    pages: int | None = None
    chunks: int = 0
    embedding_model: str | None = None
    index: str | None = None  # the vector index its passages were written to
    created_at: float
    updated_at: float


class DocumentPublic(BaseModel):
    id: str
    title: str
    filename: str | None
    content_type: str
    tags: list[str]
    tenant_id: str | None
    status: DocumentStatus
    error: str | None
    size: int
    pages: int | None
    chunks: int
    embedding_model: str | None
    created_at: float
    updated_at: float

    @classmethod
    def of(cls, doc: Document) -> DocumentPublic:
        return cls.model_validate(doc.model_dump(exclude={"project_id", "sha256", "index"}))
