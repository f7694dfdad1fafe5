"""Gated calls to tools the platform runs itself (a project's webhook tools, any family tool with
`requires_approval`): the call pauses the turn in `approvals`, and once a person approves it the platform makes
the call at the start of the next step, so nothing reaches the client's `tool_calls`. A refusal is told to the
model by `pauses.resolve` like any other.

The pause records the call's id in `pending["hosted"]`; `pauses.resolve` moves an approved one to
`pending["approved"]`, which `run_approved` empties. Unattended turns pause the same way and are decided later
with `approval_decisions`.
"""

from __future__ import annotations

import json
import time
from typing import Any

from oberik.domain import pauses
from oberik.domain.llm import ToolCall
from oberik.domain.models import Turn
from oberik.domain.tools import BY_NAME
from oberik.engine import toolbox
from oberik.engine.tools import ToolOutcome


def is_gated(name: str, turn: Turn) -> bool:
    """A tool of the turn's plan that a family runs and that never runs before somebody approves the call."""
    if name in BY_NAME or name not in turn.plan.tools:
        return False
    spec = toolbox.spec_for(name, turn)
    return spec is not None and spec.requires_approval and spec.family_owner is not None


def hold(turn: Turn, call: ToolCall, args: dict[str, Any] | None, pending: dict[str, Any]) -> ToolOutcome | None:
    """Put the call in `approvals` (None: nothing to tell the model yet), or a result when it cannot be held."""
    spec = toolbox.spec_for(call.name, turn)
    if spec is None or args is None:
        return ToolOutcome(json.dumps({"error": f"the arguments for {call.name} are not a JSON object"}), ok=False)
    tool = pauses.DeclaredTool(spec.name, spec.description, spec.parameters, requires_approval=True)
    pending["approvals"].append(pauses.gated_call(call.id, tool, args))
    pending["hosted"] = [*pending.get("hosted", []), call.id]
    return None


def run_approved(store: Any, turn: Turn, writer: Any) -> bool:
    """Make the approved calls the turn holds, each result a tool message the model reads next. True when the
    turn's pending record changed (the caller saves it)."""
    from oberik.engine.step import _message  # the step's own message shape; imported late (step imports us)

    approved = list(turn.pending.get("approved") or [])
    if not approved:
        return False
    # A step that is run again after the calls were made finds their results already kept: no second call.
    kept = {m.tool_call_id for m in store.list_messages(turn.session_id) if m.role == "tool" and m.tool_call_id}
    for item in approved:
        if item["id"] in kept:
            continue
        args = item.get("args") or {}
        call = ToolCall(id=item["id"], name=item["name"], arguments=json.dumps(args))
        writer.emit("tool_start", {"name": call.name, "input": args})
        ctx = toolbox.ToolContext(turn, call, args, store, writer, time.time())
        outcome = toolbox.run_family_tool(ctx) or ToolOutcome(
            f"'{call.name}' was not called: no tool of that name is available any more.", ok=False
        )
        content = outcome.content
        if item.get("note"):
            content += f"\n\n(The user approved this call and noted: {item['note']})"
        writer.emit("tool_end", {"name": call.name, "output": content})
        store.append_messages(turn.session_id, [_message(turn, "tool", content, tool_call_id=call.id, name=call.name)])
    turn.pending = {**turn.pending, "approved": [], "hosted": []}
    return True
