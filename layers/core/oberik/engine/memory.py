"""The memory family: what a subject told the agent (remember / recall, per subject), the project's wiki (per
project scope: the token's `scope`), and the subject's own past conversations (search_history).

Remembered facts and wiki passages live in the memories index, past messages in the history index (written by
`oberik.engine.history` from the table's stream). Everything recalled is numbered in the turn's citations
register: a memory as kind `memory` ("you told me this"), a wiki page as kind `wiki`.
"""

from __future__ import annotations

import hashlib
import re
import time
from collections.abc import Iterable
from typing import Any

from oberik.adapters.vectors import vector_store
from oberik.domain.models import Project
from oberik.domain.retrieval import VectorRecord, chunk_pages, index_name
from oberik.domain.tools import ToolSpec
from oberik.engine.retrieval import (
    NO_EMBEDDER,
    best_quote,
    error,
    label,
    project_embedder,
    query_text,
    quote,
    render,
    search,
    top_k,
)
from oberik.engine.tools import ToolOutcome

FAMILY_NAME = "memory"
MAX_FACT_CHARS = 2000
MAX_WIKI_CHARS = 50_000
MAX_WIKI_PASSAGES = 200
DEFAULT_SCOPE = "default"
YOU_TOLD_ME = "You told me this"


def _spec(name: str, description: str, properties: dict[str, Any], required: list[str]) -> ToolSpec:
    return ToolSpec(
        name=name,
        family="memory",
        capability="memory",
        needs="embeddings",
        family_owner=FAMILY_NAME,
        description=description,
        parameters={
            "type": "object",
            "properties": properties,
            "required": required,
            "additionalProperties": False,
        },
    )


_QUERY = {"type": "string", "description": "what to look for"}
_TOP_K = {"type": "integer", "minimum": 1, "maximum": 10}

REMEMBER = _spec(
    "remember",
    "Remember a fact about the user for later conversations (a preference, a detail of their situation, "
    "something they asked you to keep in mind). One self-contained sentence per fact.",
    {"fact": {"type": "string", "description": "the fact, as a sentence that makes sense on its own"}},
    ["fact"],
)
RECALL = _spec(
    "recall",
    "Look up what this user told you in earlier conversations (facts saved with remember). Each result has a "
    "marker such as [3]: end a sentence that relies on it with the marker.",
    {"query": _QUERY, "top_k": _TOP_K},
    ["query"],
)
WIKI_WRITE = _spec(
    "wiki_write",
    "Write (or replace) a page of the shared wiki, which everyone in this workspace can read: durable knowledge "
    "worth keeping, such as a procedure, a decision or a summary.",
    {
        "title": {"type": "string", "description": "the page's title; writing the same title replaces the page"},
        "content": {"type": "string", "description": "the whole page, in markdown"},
    },
    ["title", "content"],
)
WIKI_READ = _spec(
    "wiki_read",
    "Read the shared wiki: give a title to read that page, a query to search the pages by meaning, or neither "
    "to list the pages. Each result has a marker such as [4] to end a sentence that relies on it.",
    {"title": {"type": "string"}, "query": _QUERY, "top_k": _TOP_K},
    [],
)
SEARCH_HISTORY = _spec(
    "search_history",
    "Search this user's own earlier conversations with you (not this one) by meaning, e.g. to find what was "
    "decided or said before. Each result has a marker such as [5] to end a sentence that relies on it.",
    {"query": _QUERY, "top_k": _TOP_K},
    ["query"],
)

TOOLS = (REMEMBER, RECALL, WIKI_WRITE, WIKI_READ, SEARCH_HISTORY)


def _slug(title: str) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")[:80]
    return slug or hashlib.sha256(title.encode()).hexdigest()[:16]


def wiki_key_prefix(project_id: str, scope: str, slug: str) -> str:
    """The keys of a page's passages are this, `#`, and the passage's number: the same page, same keys."""
    return "wiki#" + hashlib.sha256("\0".join((project_id, scope, slug)).encode()).hexdigest()[:32]


def index_wiki_page(
    vectors: Any,
    embedder: Any,
    *,
    project_id: str,
    scope: str,
    slug: str,
    title: str,
    content: str,
    at: float,
    had: int = MAX_WIKI_PASSAGES,
) -> int:
    """Embed a wiki page's passages into the memories index of `embedder`, replacing those of the page written
    there before, and remove the passages past the new end that an earlier, longer version left (it had `had`).
    Returns how many passages the page has."""
    chunks = chunk_pages([(None, f"{title}\n\n{content}")])[:MAX_WIKI_PASSAGES]
    index = index_name("memories", embedder.model, embedder.dimension)
    vectors.ensure_index(index, embedder.dimension)
    prefix = wiki_key_prefix(project_id, scope, slug)
    embedded = embedder.embed([c.text for c in chunks])
    metadata = {"project_id": project_id, "scope": scope, "kind": "wiki", "doc_id": slug, "created_at": at}
    vectors.put(
        index,
        [
            VectorRecord(f"{prefix}#{c.n:04d}", v, {**metadata, "text": c.text, "title": title})
            for c, v in zip(chunks, embedded, strict=True)
        ],
    )
    if had > len(chunks):  # a shorter page: the old tail goes
        vectors.delete(index, [f"{prefix}#{n:04d}" for n in range(len(chunks), had)])
    return len(chunks)


def _scope(ctx: Any) -> str:
    scope = ctx.turn.plan.caller.get("scope")
    return str(scope) if scope else DEFAULT_SCOPE


def _subject(ctx: Any) -> str:
    return str(ctx.turn.plan.caller.get("subject") or ctx.turn.owner)


class MemoryFamily:
    name = FAMILY_NAME

    def specs(self, project: Project, store: Any) -> Iterable[ToolSpec]:
        return TOOLS

    def run(self, ctx: Any) -> ToolOutcome:
        project, embedder = project_embedder(ctx)
        if project is None or embedder is None:
            return error(NO_EMBEDDER)
        handler = {
            "remember": self._remember,
            "recall": self._recall,
            "wiki_write": self._wiki_write,
            "wiki_read": self._wiki_read,
            "search_history": self._search_history,
        }.get(ctx.call.name)
        if handler is None:
            return error(f"no tool named {ctx.call.name!r} in the memory family")
        return handler(ctx, project, embedder)

    # --- per subject ---------------------------------------------------------------------------------

    def _remember(self, ctx: Any, project: Project, embedder: Any) -> ToolOutcome:
        fact = query_text(ctx.args, "fact")
        if fact is None:
            return error("remember needs a non-empty fact")
        if len(fact) > MAX_FACT_CHARS:
            return error(f"a fact is at most {MAX_FACT_CHARS} characters; save the gist, or write a wiki page")
        subject = _subject(ctx)
        # The same fact remembered twice is one memory (a retried step writes the same key).
        digest = hashlib.sha256(f"{project.id}\0{subject}\0{' '.join(fact.lower().split())}".encode()).hexdigest()
        index = index_name("memories", embedder.model, embedder.dimension)
        vectors = vector_store()
        vectors.ensure_index(index, embedder.dimension)
        metadata = {
            "project_id": project.id,
            "subject": subject,
            "kind": "memory",
            "created_at": ctx.now or time.time(),
            "text": fact,
            "title": YOU_TOLD_ME,
        }
        vectors.put(index, [VectorRecord(f"mem#{digest[:40]}", embedder.embed([fact])[0], metadata)])
        return ToolOutcome(f"Remembered: {fact}")

    def _recall(self, ctx: Any, project: Project, embedder: Any) -> ToolOutcome:
        query = query_text(ctx.args)
        if query is None:
            return error("recall needs a non-empty query")
        flt = {"project_id": project.id, "subject": _subject(ctx), "kind": "memory"}
        hits = search(embedder, "memories", query, top_k(ctx.args), flt)
        if not hits:
            return ToolOutcome("Nothing this user told you earlier matches that.")
        blocks = ["What this user told you earlier, closest first:"]
        for hit in hits:
            text = str(hit.metadata.get("text", ""))
            marker = ctx.cite(
                {
                    "kind": "memory",
                    "title": YOU_TOLD_ME,
                    "quote": best_quote(text, query),
                    "score": round(hit.score, 4),
                    "remembered_at": hit.metadata.get("created_at"),
                }
            )
            blocks.append(f"{label(marker)}{text}")
        return ToolOutcome(render(blocks))

    def _search_history(self, ctx: Any, project: Project, embedder: Any) -> ToolOutcome:
        query = query_text(ctx.args)
        if query is None:
            return error("search_history needs a non-empty query")
        flt = {
            "project_id": project.id,
            "subject": _subject(ctx),
            "kind": "message",
            "session_id": {"$ne": ctx.turn.session_id},  # this conversation is already in front of the model
        }
        hits = search(embedder, "history", query, top_k(ctx.args), flt)
        if not hits:
            return ToolOutcome("Nothing in this user's earlier conversations matches that.")
        blocks = ["From this user's earlier conversations, closest first:"]
        for hit in hits:
            text = str(hit.metadata.get("text", ""))
            marker = ctx.cite(
                {
                    "kind": "memory",
                    "title": str(hit.metadata.get("title") or "An earlier conversation"),
                    "quote": best_quote(text, query),
                    "score": round(hit.score, 4),
                    "session_id": hit.metadata.get("session_id"),
                }
            )
            blocks.append(f"{label(marker)}({hit.metadata.get('title', 'earlier')})\n{text}")
        return ToolOutcome(render(blocks))

    # --- per project scope ------------------------------------------------------------------------------

    def _wiki_write(self, ctx: Any, project: Project, embedder: Any) -> ToolOutcome:
        title = query_text(ctx.args, "title")
        content = ctx.args.get("content")
        if title is None or not isinstance(content, str) or not content.strip():
            return error("wiki_write needs a title and the page's content")
        if len(title) > 200 or len(content) > MAX_WIKI_CHARS:
            return error(f"a wiki title is at most 200 characters and a page at most {MAX_WIKI_CHARS}")
        scope, slug = _scope(ctx), _slug(title)
        old = ctx.store.get_wiki_page(project.id, scope, slug)
        now = ctx.now or time.time()
        passages = index_wiki_page(
            vector_store(),
            embedder,
            project_id=project.id,
            scope=scope,
            slug=slug,
            title=title,
            content=content,
            at=now,
            had=int((old or {}).get("passages", 0)),
        )
        ctx.store.put_wiki_page(
            project.id,
            scope,
            slug,
            {
                "title": title,
                "content": content,
                "passages": passages,
                "updated_at": now,
                "updated_by": _subject(ctx),
                "created_at": (old or {}).get("created_at", now),
            },
        )
        return ToolOutcome(f"{'Replaced' if old else 'Wrote'} the wiki page {title!r}.")

    def _wiki_read(self, ctx: Any, project: Project, embedder: Any) -> ToolOutcome:
        scope = _scope(ctx)
        title = query_text(ctx.args, "title")
        query = query_text(ctx.args)
        if title is not None:
            page = ctx.store.get_wiki_page(project.id, scope, _slug(title))
            if page is None:
                titles = [p["title"] for p in ctx.store.list_wiki_pages(project.id, scope)]
                listing = ", ".join(repr(t) for t in titles[:50]) or "none yet"
                return ToolOutcome(f"There is no wiki page titled {title!r}. Pages: {listing}.")
            marker = ctx.cite(
                {"kind": "wiki", "title": page["title"], "quote": quote(page["content"]), "slug": _slug(title)}
            )
            return ToolOutcome(f"{label(marker)}{page['title']}\n\n{page['content']}")
        if query is None:
            pages = ctx.store.list_wiki_pages(project.id, scope)
            if not pages:
                return ToolOutcome("The wiki has no pages yet.")
            return ToolOutcome("Wiki pages: " + "; ".join(p["title"] for p in pages[:200]))
        flt = {"project_id": project.id, "scope": scope, "kind": "wiki"}
        hits = search(embedder, "memories", query, top_k(ctx.args), flt)
        if not hits:
            return ToolOutcome("No wiki page matches that.")
        blocks = ["Passages from the wiki, closest first:"]
        for hit in hits:
            text = str(hit.metadata.get("text", ""))
            marker = ctx.cite(
                {
                    "kind": "wiki",
                    "title": str(hit.metadata.get("title", "Wiki page")),
                    "quote": best_quote(text, query),
                    "score": round(hit.score, 4),
                    "slug": hit.metadata.get("doc_id"),
                }
            )
            blocks.append(f"{label(marker)}{hit.metadata.get('title', 'Wiki page')}\n{text}")
        return ToolOutcome(render(blocks))


FAMILY = MemoryFamily()
