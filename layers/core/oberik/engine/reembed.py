"""After a project's embedding model changed: its remembered facts, its wiki and its past conversations are
embedded again with the new model, so recall, wiki_read and search_history keep finding what was saved before.

Vectors are kept in one index per kind, model and dimension. The project's records in the OTHER models' indexes
say what there is to carry over:

- a remembered fact (memories index, kind "memory") holds its text in its metadata: embedded again from it,
  under the same key and with the same metadata;
- a wiki passage (memories index, kind "wiki") names its page (scope and slug): the page is embedded again from
  its text of record in the table, exactly as wiki_write embeds it;
- a past message (history index, kind "message") names its conversation: the conversation's messages are read
  from the table and indexed again by `history.index_messages`.

Only after the new records are written are the project's records removed from the other models' indexes, as a
re-indexed document's old passages are. A retry (the queue hands a failed message out again) repeats the same
work and writes the same keys; switching models back and forth never leaves a stale passage behind. It runs on
the document queue (`Documents.enqueue`), or on a thread where there is no queue.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any

from oberik.adapters.embeddings import embedder_for
from oberik.adapters.vectors import vector_store
from oberik.domain.errors import Invalid
from oberik.domain.retrieval import IndexKind, VectorRecord, index_name
from oberik.engine import projects
from oberik.engine.history import index_messages
from oberik.engine.memory import DEFAULT_SCOPE, index_wiki_page
from oberik.observability import logger
from oberik.ports import Embeddings, VectorStore

KIND = "reembed"  # the `kind` of a document-queue message asking for this
EMBED_BATCH = 64
MESSAGE_BATCH = 256  # messages handed to index_messages at a time (it embeds them in batches itself)


@dataclass
class Reembedded:
    """What one run carried over into the current model's indexes, and how many old records it removed."""

    facts: int = 0
    wiki_pages: int = 0
    conversations: int = 0
    message_passages: int = 0
    removed: int = 0


def reembed_later(documents: Any, project_id: str) -> None:
    """Queue the re-embedding of a project (`documents`: the `Documents` whose queue carries it)."""

    def work() -> None:
        try:
            reembed(documents.store, project_id, vectors=documents.vectors)
        except Exception:
            logger.exception("re-embedding failed", project_id=project_id)

    documents.enqueue({"kind": KIND, "project_id": project_id}, work, f"reembed-{project_id}")


def reembed(store: Any, project_id: str, *, vectors: VectorStore | None = None) -> Reembedded:
    """Carry the project's memories, wiki and history over into the indexes of its current embedding model.
    Nothing to do for a project that is gone or has no embedding model."""
    done = Reembedded()
    # Fresh: the history indexer reads the project through the same short-lived cache.
    project = projects.load(store, project_id, fresh=True)
    if project is None:
        return done
    try:
        embedder = embedder_for(project.settings)
    except Invalid as e:  # a model that cannot be resolved any more; a retry would not change that
        logger.warning("re-embedding skipped", project_id=project_id, reason=e.detail)
        return done
    if embedder is None:
        return done
    vectors = vectors or vector_store()
    _memories(store, project.id, embedder, vectors, done)
    if "memory" in project.settings.capabilities:
        _history(store, project.id, embedder, vectors, done)
    else:
        # index_messages indexes nothing for such a project: its old passages are kept for when it is back.
        logger.info("history not re-embedded: the project lacks the memory capability", project_id=project_id)
    logger.info("project re-embedded", project_id=project_id, model=embedder.model, **asdict(done))
    return done


def _others(vectors: VectorStore, kind: IndexKind, embedder: Embeddings) -> tuple[str, list[str]]:
    """The current model's index of `kind` and the other models' indexes of that kind."""
    current = index_name(kind, embedder.model, embedder.dimension)
    return current, [i for i in vectors.list_indexes(f"{kind}-") if i != current]


def _memories(store: Any, project_id: str, embedder: Embeddings, vectors: VectorStore, done: Reembedded) -> None:
    current, others = _others(vectors, "memories", embedder)
    facts: dict[str, dict[str, Any]] = {}
    pages: set[tuple[str, str]] = set()
    stale: dict[str, list[str]] = {}
    wanted = {"project_id": project_id, "kind": {"$in": ["memory", "wiki"]}}
    for index in others:
        for record in vectors.scan(index, filter=wanted):
            meta = record.metadata
            if meta["kind"] == "memory":
                seen = facts.get(record.key)
                if seen is None or float(meta.get("created_at") or 0) > float(seen.get("created_at") or 0):
                    facts[record.key] = meta
            elif meta.get("doc_id"):
                pages.add((str(meta.get("scope") or DEFAULT_SCOPE), str(meta["doc_id"])))
            stale.setdefault(index, []).append(record.key)
    if not stale:
        return
    vectors.ensure_index(current, embedder.dimension)
    # A fact remembered again since the switch is already in the current index, with its newer metadata.
    present = {r.key for r in vectors.get(current, list(facts))} if facts else set()
    todo = [(key, meta) for key, meta in sorted(facts.items()) if key not in present]
    for start in range(0, len(todo), EMBED_BATCH):
        batch = todo[start : start + EMBED_BATCH]
        embedded = embedder.embed([str(meta.get("text", "")) for _, meta in batch])
        vectors.put(current, [VectorRecord(k, v, meta) for (k, meta), v in zip(batch, embedded, strict=True)])
        done.facts += len(batch)
    for scope, slug in sorted(pages):
        page = store.get_wiki_page(project_id, scope, slug)
        if page is None:
            continue  # no longer in the wiki: only its old passages go
        index_wiki_page(
            vectors,
            embedder,
            project_id=project_id,
            scope=scope,
            slug=slug,
            title=str(page["title"]),
            content=str(page["content"]),
            at=float(page.get("updated_at") or time.time()),
        )
        done.wiki_pages += 1
    _remove(vectors, stale, done)


def _history(store: Any, project_id: str, embedder: Embeddings, vectors: VectorStore, done: Reembedded) -> None:
    _, others = _others(vectors, "history", embedder)
    sessions: set[str] = set()
    stale: dict[str, list[str]] = {}
    for index in others:
        for record in vectors.scan(index, filter={"project_id": project_id, "kind": "message"}):
            if record.metadata.get("session_id"):
                sessions.add(str(record.metadata["session_id"]))
            stale.setdefault(index, []).append(record.key)
    if not stale:
        return
    pending: list[dict[str, Any]] = []
    for session_id in sorted(sessions):
        # A conversation deleted since has no messages left: nothing is written, its old passages go.
        messages = store.list_messages(session_id)
        if messages:
            done.conversations += 1
        pending.extend(m.model_dump() for m in messages)
        if len(pending) >= MESSAGE_BATCH:
            done.message_passages += index_messages(store, pending, vectors)
            pending = []
    if pending:
        done.message_passages += index_messages(store, pending, vectors)
    _remove(vectors, stale, done)


def _remove(vectors: VectorStore, stale: dict[str, list[str]], done: Reembedded) -> None:
    for index, keys in stale.items():
        vectors.delete(index, keys)
        done.removed += len(keys)
