"""The action space: with many tools, bind only the ones relevant to the message, and let the agent find the rest.

When a turn holds `action_space` (granted, switched on with `enable_action_space`, and the project has an
embedding model, which is what puts `tool_search` into the plan) and it could be handed more than `THRESHOLD`
server-side tools, each step binds:

* the `KEEP` tools whose descriptions are closest to the turn's message (cosine over embeddings; the tools'
  vectors are computed once per process and kept, so a step embeds only the message);
* the project's pinned tools (settings: `pinned_tools`);
* anything already called this turn, and anything `tool_search` found this turn (`Turn.found_tools`);
* a whole family whenever any of its tools is bound, for families that only work whole (the plan, scheduling,
  the browser), and the plan's tools while the conversation's plan has unfinished steps;
* `tool_search`, which finds tools by what they do and makes them callable for the rest of the turn.

At `THRESHOLD` tools or fewer nothing is narrowed and `tool_search` is not bound: it would describe more tools
than exist. A request whose `allowed_tools` leaves `tool_search` out is not narrowed either: narrowing the agent
could not undo would hide tools from it for good. Client tools and UI components the request declared are always bound; they are not counted.
Without an embedding model `tool_search` is withheld, so nothing here applies and every tool is bound (the turn's
`warnings` say so when the request asked for narrowing: `TurnStarter._degraded`).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable, Sequence
from typing import Any

from oberik.domain.models import Message, Project, Turn
from oberik.domain.tools import ToolSpec
from oberik.engine import toolbox
from oberik.engine.titles import text_of
from oberik.engine.tools import ToolOutcome
from oberik.observability import logger
from oberik.ports import Embeddings

NAME = "action_space"
THRESHOLD = 8  # at or below this many tools, nothing is narrowed
KEEP = 6  # roughly this many of the most relevant are bound past it
FOUND_PER_SEARCH = 5
WHOLE_FAMILIES = frozenset({"todo", "scheduling", "browser"})
_OPEN_PLAN = frozenset({"pending", "in_progress"})

TOOL_SEARCH = ToolSpec(
    name="tool_search",
    family="action_space",
    capability="action_space",
    description=(
        "There are more tools than the ones you can see right now. Describe what you need to do and this finds the "
        "tools that can do it; the ones it returns become callable for the rest of this turn."
    ),
    parameters={
        "type": "object",
        "properties": {"query": {"type": "string", "description": "what you need a tool for, in a few words"}},
        "required": ["query"],
        "additionalProperties": False,
    },
    needs="embeddings",
    family_owner=NAME,
)


# --- tool vectors, kept per process --------------------------------------------------------------------------

_vectors: dict[tuple[str, str], list[float]] = {}
_vectors_lock = threading.Lock()
_MAX_CACHED = 4096


def tool_text(spec: ToolSpec) -> str:
    """What a tool is ranked by: its name in words and its description."""
    return f"{spec.name.replace('_', ' ')}: {spec.description}"


def _tool_vectors(embedder: Embeddings, specs: Sequence[ToolSpec]) -> list[list[float]]:
    return _cached_vectors(embedder, [tool_text(s) for s in specs])


def _cached_vectors(embedder: Embeddings, texts: list[str]) -> list[list[float]]:
    """Vectors of `texts`, embedding only those this process has not seen with this model (a turn's message is
    ranked again on every step; tool descriptions on every turn)."""
    with _vectors_lock:
        known = {t: v for t in texts if (v := _vectors.get((embedder.model, t))) is not None}
    missing = [t for t in dict.fromkeys(texts) if t not in known]
    if missing:
        made = embedder.embed(missing)
        known.update(zip(missing, made, strict=True))
        with _vectors_lock:
            if len(_vectors) + len(missing) > _MAX_CACHED:
                _vectors.clear()
            _vectors.update({(embedder.model, t): known[t] for t in missing})
    return [known[t] for t in texts]


def rank(embedder: Embeddings, query: str, specs: Sequence[ToolSpec]) -> list[tuple[ToolSpec, float]]:
    """`specs` from most to least relevant to `query`, with their cosine similarity."""
    from oberik.adapters.embeddings import cosine_scores

    if not specs:
        return []
    query_vector = _cached_vectors(embedder, [query])[0]
    scores = cosine_scores(query_vector, _tool_vectors(embedder, specs))
    order = sorted(range(len(specs)), key=lambda i: (-scores[i], i))
    return [(specs[i], scores[i]) for i in order]


def embedder_of(project: Project | None) -> Embeddings | None:
    from oberik.adapters.embeddings import embedder_for

    return embedder_for(project.settings) if project is not None else None


# --- what a step binds ---------------------------------------------------------------------------------------


def _asked(turn: Turn, stored: Iterable[Message]) -> str:
    """The words of this turn's user messages (steered ones included): what relevance is measured against."""
    return "\n".join(text_of(m.content) for m in stored if m.turn_id == turn.id and m.role == "user").strip()


def _called(turn: Turn, stored: Iterable[Message]) -> set[str]:
    names: set[str] = set()
    for m in stored:
        if m.turn_id == turn.id and m.role == "assistant":
            for call in m.tool_calls or []:
                name = (call.get("function") or {}).get("name")
                if isinstance(name, str):
                    names.add(name)
    return names


def bind(
    store: Any, turn: Turn, stored: Sequence[Message], todos: Sequence[dict[str, Any]] = ()
) -> tuple[list[str], str | None]:
    """The server-side tools this step binds, in the plan's order, and a warning when narrowing failed."""
    plan_tools = list(turn.plan.tools)
    if TOOL_SEARCH.name not in plan_tools:
        return plan_tools, None  # the turn does not hold action_space
    others = [n for n in plan_tools if n != TOOL_SEARCH.name]
    if len(others) <= THRESHOLD:
        return others, None
    specs = [s for n in others if (s := toolbox.spec_for(n, turn)) is not None]
    project = store.get_project(turn.project_id)
    try:
        embedder = embedder_of(project)
        if embedder is None:
            return others, None
        ranked = rank(embedder, _asked(turn, stored) or "help", specs)
    except Exception as e:  # an embedding provider failing costs the narrowing, never the turn
        logger.warning("tool narrowing failed; binding every tool", turn_id=turn.id, error=str(e))
        return others, (
            "Tool narrowing (action_space) could not rank the tools this step because the embedding model failed "
            f"({type(e).__name__}), so every tool was bound."
        )
    chosen = {spec.name for spec, _score in ranked[:KEEP]}
    pinned = set(project.settings.pinned_tools) if project is not None else set()
    chosen |= pinned | _called(turn, stored) | set(turn.found_tools)
    if any(t.get("status") in _OPEN_PLAN for t in todos):
        chosen |= {s.name for s in specs if s.family == "todo"}
    whole = {s.family for s in specs if s.name in chosen and s.family in WHOLE_FAMILIES}
    chosen |= {s.name for s in specs if s.family in whole}
    return [n for n in others if n in chosen] + [TOOL_SEARCH.name], None


# --- the tool_search tool ------------------------------------------------------------------------------------


def _error(text: str) -> ToolOutcome:
    return ToolOutcome(json.dumps({"error": text}), ok=False)


class ActionSpaceFamily:
    name = NAME

    def specs(self, project: Project, store: Any) -> Iterable[ToolSpec]:
        return (TOOL_SEARCH,)

    def run(self, ctx: toolbox.ToolContext) -> ToolOutcome:
        query = ctx.args.get("query")
        if not isinstance(query, str) or not query.strip():
            return _error("tool_search needs `query`: what you need a tool for")
        turn = ctx.turn
        specs = [s for n in turn.plan.tools if n != TOOL_SEARCH.name and (s := toolbox.spec_for(n, turn)) is not None]
        embedder = embedder_of(ctx.store.get_project(turn.project_id))
        if embedder is None:
            return _error("tool_search needs an embedding model, and this project has none configured")
        found = [spec for spec, _score in rank(embedder, query.strip(), specs)[:FOUND_PER_SEARCH]]
        families = {s.family for s in found if s.family in WHOLE_FAMILIES}
        found += [s for s in specs if s.family in families and s not in found]
        for spec in found:
            if spec.name not in turn.found_tools:
                turn.found_tools.append(spec.name)
        return ToolOutcome(
            json.dumps(
                {
                    "found": [{"name": s.name, "description": s.description} for s in found],
                    "note": "These tools are callable from your next step until the end of this turn.",
                }
            )
        )


FAMILY = ActionSpaceFamily()
