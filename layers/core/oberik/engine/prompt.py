"""What the model is shown: the system prompts, then the conversation as it stands."""

from __future__ import annotations

from typing import Any

from oberik.domain.models import Message, TurnPlan

PLATFORM_PREAMBLE = (
    "You are an assistant working inside an application. Use the tools you are given when the answer depends on "
    "them (for example the current time), and answer plainly once you have what you need."
)


def _todo_line(item: dict[str, Any]) -> str:
    mark = {"done": "x", "in_progress": "~"}.get(item["status"], " ")
    return f"{item['n']}. [{mark}] {item['text']}"


def system_messages(
    plan: TurnPlan, *, todos: list[dict[str, Any]] | None = None, ui: bool = False
) -> list[dict[str, Any]]:
    parts = [PLATFORM_PREAMBLE]
    if plan.system_prompt:
        parts.append("## Project instructions (authoritative)\n" + plan.system_prompt.strip())
    if plan.extra_system_prompt:
        parts.append(
            "## Additional instructions for this request\n"
            "These come from the caller and add to the project instructions above. "
            "Where the two conflict, the project instructions win.\n\n" + plan.extra_system_prompt.strip()
        )
    if "todo_write" in plan.tools:
        plan_text = "\n".join(_todo_line(t) for t in todos or []) or "(no plan yet)"
        parts.append(
            "## Your plan for this conversation\n"
            "Keep a plan only for genuinely multi-step work; a question you can answer or a one-step change needs "
            "none. Numbers are stable: step 3 stays step 3 after step 1 is removed. The current plan, always up "
            "to date (do not call a tool to read it):\n" + plan_text
        )
    if ui:
        parts.append(
            "## Components you can draw\n"
            "Some tools draw something in the user's interface and return at once. After drawing, refer to what "
            "you drew rather than repeating its content in prose."
        )
    return [{"role": "system", "content": "\n\n".join(parts)}]


def history(messages: list[Message]) -> list[dict[str, Any]]:
    """The stored conversation in OpenAI form: abandoned turns left out, tool calls kept paired with results."""
    # A turn that produced no answer is left out whole, including anything written after it was abandoned
    # (a tool result that landed while the turn was being cancelled).
    dropped = {m.turn_id for m in messages if m.abandoned or m.extra.get("turn_abandoned")}
    kept = [m for m in messages if not m.abandoned and (m.turn_id is None or m.turn_id not in dropped)]
    answered = {m.tool_call_id for m in kept if m.role == "tool" and m.tool_call_id}
    out: list[dict[str, Any]] = []
    for m in kept:
        if m.role == "user":
            out.append({"role": "user", "content": m.content})
        elif m.role == "assistant":
            calls = [c for c in (m.tool_calls or []) if c.get("id") in answered]
            entry: dict[str, Any] = {"role": "assistant", "content": m.content or ""}
            if calls:
                entry["tool_calls"] = calls
            elif not m.content:
                continue
            out.append(entry)
        elif m.role == "tool":
            out.append({"role": "tool", "tool_call_id": m.tool_call_id, "content": m.content or ""})
    return out
