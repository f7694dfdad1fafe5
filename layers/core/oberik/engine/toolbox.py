"""Tool families beyond the built-in catalog, behind one registry.

A family (webhook tools, scheduling, retrieval, memory, the web, the browser) offers `specs` for a project,
which may depend on what the project has stored (a project's webhook tools), and runs the calls for the
tools it offers. The capability gate, `GET /tools` and every turn see the same catalog through `catalog()`,
so the listing cannot disagree with what a turn is handed.

Registering a family is one line in `_FAMILY_MODULES`: the module exposes `FAMILY`.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cache
from typing import Any, Protocol

from oberik.domain.llm import ToolCall
from oberik.domain.models import Project, Turn
from oberik.domain.tools import BY_NAME, CATALOG, ToolSpec
from oberik.engine.tools import ToolOutcome

# Modules each exposing `FAMILY: ToolFamily`. Order is the order tools are listed in.
_FAMILY_MODULES: tuple[str, ...] = (
    "oberik.engine.retrieval",
    "oberik.engine.memory",
    "oberik.engine.webhook_tools",
    "oberik.browser.tools",
    "oberik.browser.handoff",
    "oberik.engine.web",
    "oberik.engine.action_space",
    "oberik.engine.reminders",
)


@dataclass
class ToolContext:
    """What a running tool may use: the turn (with its plan and the caller's identity), the table, the
    turn's frame writer (for progress frames), and the time the step started."""

    turn: Turn
    call: ToolCall
    args: dict[str, Any]
    store: Any
    writer: Any
    now: float
    extras: dict[str, Any] = field(default_factory=dict)

    def cite(self, entry: dict[str, Any]) -> int:
        """Add something the turn was shown that a reader can check (a passage, a page, a memory, a tool's
        answer) to the turn's one citations register; returns the marker number the model should use.
        `entry` carries `kind` (document | web | memory | wiki | tool | preview | file) and what that kind
        shows: title, quote, url, page, score, path, ... Returns 0 when the register is full (then show the
        content without a marker). Command output is not citable (ValueError)."""
        from oberik.engine.citations import register  # one register per turn, numbered in one sequence

        return register(self.turn, entry, self.writer)


class ToolFamily(Protocol):
    name: str

    def specs(self, project: Project, store: Any) -> Iterable[ToolSpec]:
        """The tools this family offers the project (before any capability gate)."""
        ...

    def run(self, ctx: ToolContext) -> ToolOutcome:
        """Run one call to a tool this family offered. Failures are outcomes with ok=False, not exceptions."""
        ...


@cache
def families() -> tuple[ToolFamily, ...]:
    return tuple(importlib.import_module(m).FAMILY for m in _FAMILY_MODULES)


def catalog(project: Project | None = None, store: Any = None) -> list[ToolSpec]:
    """Every tool this deployment could hand a turn of `project`: the built-ins, then each family's."""
    out: list[ToolSpec] = list(CATALOG)
    seen = set(BY_NAME)
    for fam in families():
        for spec in fam.specs(project, store) if project is not None else ():
            if spec.name not in seen:
                seen.add(spec.name)
                out.append(spec)
    return out


def owner_of(name: str, turn: Turn) -> ToolFamily | None:
    spec = turn.plan.dynamic_tools.get(name)
    family = spec.get("family_owner") if spec else None
    for fam in families():
        if fam.name == family:
            return fam
    return None


def spec_for(name: str, turn: Turn) -> ToolSpec | None:
    if name in BY_NAME:
        return BY_NAME[name]
    raw = turn.plan.dynamic_tools.get(name)
    return ToolSpec.from_dict(raw) if raw else None


def dynamic_specs(tools: Iterable[ToolSpec]) -> dict[str, dict[str, Any]]:
    """What a plan stores of the tools that are not built in, so every step binds the same definitions."""
    return {t.name: t.to_dict() for t in tools if t.name not in BY_NAME}


def run_family_tool(ctx: ToolContext) -> ToolOutcome | None:
    """Run the call with the family that offered the tool; None when no family claims it."""
    fam = owner_of(ctx.call.name, ctx.turn)
    if fam is None:
        return None
    numbered = len(ctx.turn.citations)
    try:
        outcome = fam.run(ctx)
    except Exception as e:  # a tool's bug must reach the model as a failed call, not kill the turn
        from oberik.observability import logger

        logger.exception("tool failed", tool=ctx.call.name, turn_id=ctx.turn.id)
        return ToolOutcome(json.dumps({"error": f"{ctx.call.name} failed: {type(e).__name__}"}), ok=False)
    spec = spec_for(ctx.call.name, ctx.turn)
    if outcome.ok and spec is not None and spec.source != "builtin" and len(ctx.turn.citations) == numbered:
        # An answer from the project's own systems (a webhook tool, an MCP server) is cited like any other source.
        from oberik.engine.citations import cite_tool_result

        content = cite_tool_result(ctx.turn, ctx.call.name, outcome.content, ctx.writer)
        outcome = ToolOutcome(content, ok=True, wait_seconds=outcome.wait_seconds)
    return outcome
