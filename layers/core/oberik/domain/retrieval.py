"""Vectors, indexes and chunks: the pure rules retrieval, memory and history share."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Literal

# The three indexes every embedding model gets: document chunks, memories (remember / wiki) and past messages.
IndexKind = Literal["chunks", "memories", "history"]
INDEX_KINDS: tuple[IndexKind, ...] = ("chunks", "memories", "history")

# Metadata the stores can filter on. Everything else (the passage's text, its title) is only returned.
FILTERABLE = ("project_id", "tenant_id", "subject", "doc_id", "tags", "kind", "page", "created_at", "session_id")
NON_FILTERABLE = ("text", "title")


@dataclass(frozen=True)
class VectorRecord:
    key: str
    vector: list[float]
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class VectorHit:
    key: str
    score: float  # cosine similarity, 1.0 = same direction
    metadata: dict[str, Any] = field(default_factory=dict)


def index_name(kind: IndexKind, model: str, dimension: int) -> str:
    """`chunks-offline-all-minilm-l6-v2-384`: names carry the model and dimension, so vectors made by one model are
    never compared with another's. S3 Vectors allows 3-63 characters of lowercase letters, digits, '-' and '.'."""
    slug = re.sub(r"[^a-z0-9]+", "-", model.lower()).strip("-")
    tail = f"-{int(dimension)}"
    room = 63 - len(kind) - 1 - len(tail)
    if len(slug) > room:
        import hashlib

        digest = hashlib.sha256(model.encode()).hexdigest()[:8]
        slug = slug[: room - 9].rstrip("-") + "-" + digest
    return f"{kind}-{slug}{tail}"


# --- chunking ------------------------------------------------------------------------------------------

CHUNK_CHARS = 900
CHUNK_OVERLAP = 150


@dataclass(frozen=True)
class Chunk:
    n: int
    text: str
    page: int | None


def chunk_pages(
    pages: list[tuple[int | None, str]], *, size: int = CHUNK_CHARS, overlap: int = CHUNK_OVERLAP
) -> list[Chunk]:
    """Split each page's text into passages of about `size` characters, cut at paragraph, then sentence, then word
    boundaries, with `overlap` characters carried over so an answer spanning a cut is still found whole. A chunk
    never spans two pages, so its page number is exact."""
    chunks: list[Chunk] = []
    for page, text in pages:
        for piece in _split(_normalise(text), size, overlap):
            chunks.append(Chunk(len(chunks), piece, page))
    return chunks


def _normalise(text: str) -> str:
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    text = re.sub(r"[ \t\f\v]+", " ", text)
    text = re.sub(r"\n\s*\n+", "\n\n", text)
    return text.strip()


_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def _units(text: str, size: int) -> list[tuple[str, str]]:
    """Paragraphs, with any paragraph longer than `size` broken into sentences, and any sentence into words; each
    with the separator that stood before it (a blank line between paragraphs, a space inside one)."""
    out: list[tuple[str, str]] = []
    for para in text.split("\n\n"):
        para = para.strip()
        if not para:
            continue
        if len(para) <= size:
            out.append((para, "\n\n"))
            continue
        sep = "\n\n"
        for sentence in _SENTENCE_END.split(para):
            if len(sentence) <= size:
                out.append((sentence, sep))
                sep = " "
                continue
            line = ""
            for word in sentence.split(" "):
                if line and len(line) + 1 + len(word) > size:
                    out.append((line, sep))
                    sep = " "
                    line = word
                else:
                    line = f"{line} {word}" if line else word
            if line:
                out.append((line, sep))
                sep = " "
    return out


def _join(units: list[tuple[str, str]]) -> str:
    return "".join((sep if i else "") + text for i, (text, sep) in enumerate(units))


def _split(text: str, size: int, overlap: int) -> list[str]:
    if not text:
        return []
    pieces: list[str] = []
    current: list[tuple[str, str]] = []
    for unit in _units(text, size):
        if current and len(_join([*current, unit])) > size:
            pieces.append(_join(current))
            # Carry the tail of what was just cut into the next chunk.
            carried: list[tuple[str, str]] = []
            for prev in reversed(current):
                if len(_join([prev, *carried])) > overlap:
                    break
                carried.insert(0, prev)
            current = carried
        current.append(unit)
    if current:
        pieces.append(_join(current))
    return pieces
