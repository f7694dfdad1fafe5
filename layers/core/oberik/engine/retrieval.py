"""rag_search: passages from the project's documents, scoped by the request's tags or document_ids and by the
caller's tenant, each one numbered in the turn's citations register so the answer can point at it."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

from oberik.adapters.embeddings import embedder_for
from oberik.adapters.vectors import vector_store
from oberik.domain.chat import ChatRequest
from oberik.domain.documents import is_document_id, valid_tag
from oberik.domain.errors import Invalid
from oberik.domain.models import Project
from oberik.domain.retrieval import VectorHit, index_name
from oberik.domain.tools import ToolSpec
from oberik.engine.tools import ToolOutcome
from oberik.ports import Embeddings

MAX_SCOPE = 100
QUOTE_CHARS = 280
DEFAULT_TOP_K = 5
MAX_TOP_K = 10

FAMILY_NAME = "retrieval"

RAG_SEARCH = ToolSpec(
    name="rag_search",
    family="retrieval",
    capability="documents:read",
    needs="embeddings",
    family_owner=FAMILY_NAME,
    description=(
        "Search the documents uploaded to this project (policies, manuals, reports, ...) by meaning, and get back "
        "the most relevant passages with their titles and page numbers. Use it before answering anything the "
        "documents may cover. Each passage comes with a marker such as [2]: end every sentence that relies on a "
        "passage with its marker."
    ),
    parameters={
        "type": "object",
        "properties": {
            "query": {"type": "string", "description": "what to look for, in words the documents would use"},
            "top_k": {"type": "integer", "minimum": 1, "maximum": MAX_TOP_K, "description": "how many passages"},
        },
        "required": ["query"],
        "additionalProperties": False,
    },
)


# --- the request's scope --------------------------------------------------------------------------------


def retrieval_scope(req: ChatRequest, project: Project, store: Any) -> dict[str, list[str]]:
    """The request's `tags` / `document_ids`, checked: every document named must exist in the project."""
    tags = list(dict.fromkeys(t.strip() for t in req.tags))
    ids = list(dict.fromkeys(d.strip() for d in req.document_ids))
    if len(tags) > MAX_SCOPE or len(ids) > MAX_SCOPE:
        raise Invalid(
            f"Name at most {MAX_SCOPE} tags and {MAX_SCOPE} document_ids.",
            field="tags" if len(tags) > MAX_SCOPE else "document_ids",
        )
    bad = [t for t in tags if not valid_tag(t)]
    if bad:
        raise Invalid(f"tags holds a value that cannot be a tag: {bad[0]!r}.", field="tags")
    malformed = [d for d in ids if not is_document_id(d)]
    if malformed:
        raise Invalid(f"document_ids holds {malformed[0]!r}, which is not a document id (d_...).", field="document_ids")
    missing = [d for d in ids if store.get_document(project.id, d) is None]
    if missing:
        raise Invalid(
            f"document_ids names documents that do not exist in this project: {', '.join(missing)}. "
            f"GET /api/projects/{project.id}/documents lists them.",
            field="document_ids",
        )
    scope: dict[str, list[str]] = {}
    if tags:
        scope["tags"] = tags
    if ids:
        scope["document_ids"] = ids
    return scope


def document_filter(project_id: str, caller: dict[str, Any], scope: dict[str, list[str]]) -> dict[str, Any]:
    """Passages of this project that the caller's tenant may read, within the turn's scope. A document uploaded
    with a tenant_id is read only by tokens of that tenant; one without is read by every tenant of the project.
    With both tags and document_ids, a passage qualifies through either."""
    parts: list[dict[str, Any]] = [{"project_id": project_id}, {"kind": "chunk"}]
    tenant = caller.get("tenant_id")
    if tenant:
        parts.append({"$or": [{"tenant_id": tenant}, {"tenant_id": {"$exists": False}}]})
    else:
        parts.append({"tenant_id": {"$exists": False}})
    wanted = []
    if scope.get("tags"):
        wanted.append({"tags": {"$in": scope["tags"]}})
    if scope.get("document_ids"):
        wanted.append({"doc_id": {"$in": scope["document_ids"]}})
    if len(wanted) == 1:
        parts.append(wanted[0])
    elif wanted:
        parts.append({"$or": wanted})
    return {"$and": parts}


# --- shared by the vector-backed tools ---------------------------------------------------------------------


def error(text: str) -> ToolOutcome:
    return ToolOutcome(json.dumps({"error": text}), ok=False)


def project_embedder(ctx: Any) -> tuple[Project | None, Embeddings | None]:
    project = ctx.store.get_project(ctx.turn.project_id)
    if project is None:
        return None, None
    return project, embedder_for(project.settings)


NO_EMBEDDER = (
    "this project has no embedding model any more, so nothing can be searched by meaning; the project's owner can "
    "set embedding_model in the project settings"
)


def query_text(args: dict[str, Any], name: str = "query") -> str | None:
    value = args.get(name)
    return value.strip() if isinstance(value, str) and value.strip() else None


def top_k(args: dict[str, Any]) -> int:
    value = args.get("top_k", DEFAULT_TOP_K)
    if isinstance(value, bool) or not isinstance(value, int):
        return DEFAULT_TOP_K
    return max(1, min(MAX_TOP_K, value))


def search(embedder: Embeddings, kind: str, query: str, k: int, flt: dict[str, Any]) -> list[VectorHit]:
    vectors = vector_store()
    index = index_name(kind, embedder.model, embedder.dimension)  # type: ignore[arg-type]
    vector = embedder.embed([query])[0]
    return vectors.query(index, vector, top_k=k, filter=flt)


def quote(text: str, limit: int = QUOTE_CHARS) -> str:
    """The passage as a reader's pill shows it: whole when short, else cut at a word with an ellipsis."""
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    cut = text[:limit].rsplit(" ", 1)[0]
    return cut + "…"


_WORDS = re.compile(r"[a-z0-9]+")
_SENTENCES = re.compile(r"(?<=[.!?])\s+|\n+")
_STOP = frozenset(
    [
        "the",
        "a",
        "an",
        "and",
        "or",
        "of",
        "to",
        "in",
        "on",
        "for",
        "per",
        "is",
        "are",
        "was",
        "were",
        "be",
        "by",
        "with",
        "at",
        "as",
        "it",
        "this",
        "that",
        "what",
        "how",
        "who",
        "when",
        "where",
        "which",
        "do",
        "does",
        "did",
        "can",
        "i",
        "my",
        "we",
        "our",
        "you",
        "your",
        "their",
        "they",
        "from",
        "after",
        "before",
        "into",
    ]
)


def best_quote(text: str, query: str, limit: int = QUOTE_CHARS) -> str:
    """The part of a passage a reader should check: the sentence sharing the most words with the query, widened
    with its neighbours while it fits `limit` (the start of the passage when nothing is shared)."""
    sentences = [x.strip() for x in _SENTENCES.split(text) if x.strip()]
    if len(sentences) <= 1:
        return quote(text, limit)
    wanted = {w for w in _WORDS.findall(query.lower()) if w not in _STOP and len(w) > 1}

    def score(sentence: str) -> int:
        return len(wanted & set(_WORDS.findall(sentence.lower())))

    best = max(range(len(sentences)), key=lambda i: (score(sentences[i]), -i))
    if score(sentences[best]) == 0:
        return quote(text, limit)
    lo = hi = best
    picked = sentences[best]
    while True:
        grown = False
        if hi + 1 < len(sentences) and len(picked) + 1 + len(sentences[hi + 1]) <= limit:
            hi += 1
            picked = f"{picked} {sentences[hi]}"
            grown = True
        if lo > 0 and len(picked) + 1 + len(sentences[lo - 1]) <= limit:
            lo -= 1
            picked = f"{sentences[lo]} {picked}"
            grown = True
        if not grown:
            break
    return quote(picked, limit)


def label(marker: int) -> str:
    """`[3] ` in front of a cited passage; nothing when the register is full (marker 0) and the passage has none."""
    return f"[{marker}] " if marker else ""


def render(lines: Iterable[str]) -> str:
    return "\n\n".join(lines)


# --- the family -----------------------------------------------------------------------------------------


class RetrievalFamily:
    name = FAMILY_NAME

    def specs(self, project: Project, store: Any) -> Iterable[ToolSpec]:
        return (RAG_SEARCH,)

    def run(self, ctx: Any) -> ToolOutcome:
        query = query_text(ctx.args)
        if query is None:
            return error("rag_search needs a non-empty query: the words to look for in the documents")
        project, embedder = project_embedder(ctx)
        if project is None or embedder is None:
            return error(NO_EMBEDDER)
        scope = ctx.turn.plan.retrieval
        hits = search(
            embedder, "chunks", query, top_k(ctx.args), document_filter(project.id, ctx.turn.plan.caller, scope)
        )
        if not hits:
            where = (
                " within the documents this request is scoped to ("
                + ", ".join(f"{k}: {', '.join(v)}" for k, v in scope.items())
                + ")"
                if scope
                else ""
            )
            return ToolOutcome(
                f"No passage in the project's documents matches {query!r}{where}. Say so rather than answering "
                "from memory, or try other words."
            )
        blocks = [
            "Passages from the project's documents, best match first. End each sentence that relies on one with "
            "its marker, e.g. [1]."
        ]
        for hit in hits:
            meta = hit.metadata
            text = str(meta.get("text", ""))
            page = meta.get("page")
            entry: dict[str, Any] = {
                "kind": "document",
                "title": str(meta.get("title") or "Untitled document"),
                "quote": best_quote(text, query),
                "page": int(page) if isinstance(page, int | float) else None,
                "score": round(hit.score, 4),
                "doc_id": meta.get("doc_id"),
                "chunk": hit.key.rsplit("#", 1)[-1],
            }
            marker = ctx.cite(entry)
            where = f", page {entry['page']}" if entry["page"] is not None else ""
            blocks.append(f"{label(marker)}{entry['title']}{where} (relevance {hit.score:.2f})\n{text}")
        return ToolOutcome(render(blocks))


FAMILY = RetrievalFamily()
