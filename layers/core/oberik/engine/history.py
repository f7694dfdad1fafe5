"""Past conversations as vectors, for search_history: each new user or assistant message is embedded into the
history index with its subject, so a subject searches only their own conversations.

On AWS the table's stream feeds HistoryFunction (message inserts only); locally the stack polls the same stream
in this process. Either way the work happens after the message is stored, never in the turn's path.
"""

from __future__ import annotations

from typing import Any

from oberik.adapters.embeddings import embedder_for
from oberik.adapters.keys import MESSAGE_PREFIX
from oberik.adapters.vectors import vector_store
from oberik.domain.retrieval import VectorRecord, chunk_pages, index_name
from oberik.engine import projects
from oberik.observability import logger

MAX_PASSAGES_PER_MESSAGE = 4
# A conversation's project never changes: remembered, so messages of projects that index nothing (most) cost
# no read at all. Its title does change, so a project that indexes reads the conversation for it.
_project_of: dict[str, str] = {}
_REMEMBERED = 20_000


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # multimodal parts: the text ones
        return "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict) and p.get("type") == "text")
    return ""


def index_messages(store: Any, messages: list[dict[str, Any]], vectors: Any = None) -> int:
    """Embed the user and assistant messages among `messages` (stored message items); returns how many passages
    were written. Messages of projects without an embedding model, or without the memory capability, are skipped."""
    vectors = vectors or vector_store()
    sessions: dict[str, Any] = {}
    by_index: dict[tuple[str, int], tuple[Any, list[tuple[str, str, dict[str, Any]]]]] = {}
    for item in messages:
        if item.get("role") not in ("user", "assistant") or item.get("abandoned"):
            continue
        text = _text(item.get("content")).strip()
        session_id = str(item.get("session_id") or "")
        if not text or not session_id:
            continue
        project_id = _project_of.get(session_id)
        if project_id is None:
            sessions[session_id] = found = store.get_session(session_id)
            if found is None:
                continue
            project_id = found.project_id
            if len(_project_of) >= _REMEMBERED:
                _project_of.clear()
            _project_of[session_id] = project_id
        project = projects.load(store, project_id)
        if project is None or "memory" not in project.settings.capabilities:
            continue
        embedder = embedder_for(project.settings)
        if embedder is None:
            continue
        if session_id not in sessions:
            sessions[session_id] = store.get_session(session_id)
        session = sessions[session_id]
        if session is None:
            continue
        key = (embedder.model, embedder.dimension)
        entry = by_index.setdefault(key, (embedder, []))
        seq = int(item.get("seq") or 0)
        for chunk in chunk_pages([(None, text)])[:MAX_PASSAGES_PER_MESSAGE]:
            metadata = {
                "project_id": session.project_id,
                "subject": session.owner,
                "session_id": session_id,
                "kind": "message",
                "created_at": float(item.get("created_at") or 0.0),
                "text": chunk.text,
                "title": f"{item['role']} in {session.title or 'an earlier conversation'}",
            }
            entry[1].append((f"{session_id}#{seq:08d}#{chunk.n}", chunk.text, metadata))
    written = 0
    for (model, dimension), (embedder, rows) in by_index.items():
        index = index_name("history", model, dimension)
        vectors.ensure_index(index, dimension)
        for start in range(0, len(rows), 64):
            batch = rows[start : start + 64]
            embedded = embedder.embed([text for _, text, _ in batch])
            vectors.put(index, [VectorRecord(k, v, meta) for (k, _, meta), v in zip(batch, embedded, strict=True)])
            written += len(batch)
    return written


def handle_stream(event: dict[str, Any]) -> dict[str, Any]:
    """HistoryFunction: the stream records of new message items."""
    from oberik.adapters.dynamodb import DynamoStore, deserialize

    items = []
    for record in event.get("Records", []):
        if record.get("eventName") != "INSERT":
            continue
        image = (record.get("dynamodb") or {}).get("NewImage") or {}
        item = deserialize(image) if image else {}
        if str(item.get("sk", "")).startswith(MESSAGE_PREFIX):
            items.append(item)
    written = index_messages(DynamoStore(), items) if items else 0
    if written:
        logger.info("history indexed", passages=written)
    return {"indexed": written}
