"""Compacting a conversation that would outgrow the model's window, before the turn produces anything."""

from __future__ import annotations

import time
from typing import Any

from oberik.domain.context import ContextSettings, chars_per_token, estimate_tokens, fold_boundary
from oberik.domain.llm import Completion, ModelRequest
from oberik.domain.models import Message, Turn
from oberik.engine.frames import FrameWriter
from oberik.engine.prompt import history
from oberik.ports import Model

COMPACT_TASK = "[oberik:compact]"

_INSTRUCTIONS = (
    f"{COMPACT_TASK} Summarise the conversation below for the assistant that will continue it. Keep every fact, "
    "decision, number, name, file path and open question it may need; drop pleasantries. Write in the "
    "conversation's language, as compact notes. Earlier summary, if any, comes first: fold it in."
)


def summary_block(summary: dict[str, Any] | None) -> list[dict[str, Any]]:
    if not summary:
        return []
    return [
        {
            "role": "system",
            "content": "## Earlier in this conversation (a summary; the full transcript is kept elsewhere)\n"
            + summary["text"],
        }
    ]


def _render(messages: list[dict[str, Any]]) -> str:
    lines = []
    for m in messages:
        content = m.get("content")
        text = content if isinstance(content, str) else str(content)
        if m.get("tool_calls"):
            names = ", ".join(c["function"]["name"] for c in m["tool_calls"])
            text = (text + f" [called {names}]").strip()
        lines.append(f"{m['role']}: {text}")
    return "\n".join(lines)


def compact_if_needed(
    store: Any,
    model: Model,
    model_id: str,
    turn: Turn,
    settings: ContextSettings,
    system: list[dict[str, Any]],
    messages: list[Message],
    writer: FrameWriter,
) -> dict[str, Any] | None:
    """Fold older turns into the session's summary when the next request would outgrow the window.

    Returns the summary to use (new or kept), or None when there is none.
    """
    summary = store.get_summary(turn.session_id)
    after = int(summary["up_to_seq"]) if summary else 0
    request = system + summary_block(summary) + history([m for m in messages if m.seq > after])
    per_token = chars_per_token(store.prompt_measure(turn.session_id))  # the provider's own counts, when known
    before = estimate_tokens(request, per_token)
    window = settings.window_for(turn.plan.model)
    if before <= settings.threshold * window:
        return summary
    boundary = fold_boundary(messages, turn.id, settings.keep_recent_turns, after)
    if boundary <= after:
        return summary  # everything left is recent: nothing may be folded
    folded = [m for m in messages if after < m.seq <= boundary]
    writer.emit("context", {"phase": "compacting", "tokens": before, "window": window, "messages": len(folded)})
    previous = f"Earlier summary:\n{summary['text']}\n\n" if summary else ""
    ask = ModelRequest(
        model=model_id,
        messages=[
            {"role": "system", "content": _INSTRUCTIONS},
            {"role": "user", "content": previous + "Conversation:\n" + _render(history(folded))},
        ],
        temperature=0.0,
    )
    completion: Completion | None = None
    for item in model.stream(ask):
        if isinstance(item, Completion):
            completion = item
    text = (completion.content if completion else "").strip()
    if not text:
        writer.emit("context", {"phase": "skipped", "reason": "the summary came back empty"})
        return summary
    new = {"up_to_seq": boundary, "text": text, "created_at": time.time()}
    store.save_summary(turn.session_id, new)
    after_request = system + summary_block(new) + history([m for m in messages if m.seq > boundary])
    report = {
        "phase": "compacted",
        "tokens_before": before,
        "tokens_after": estimate_tokens(after_request, per_token),
        "messages_folded": len(folded),
        "window": window,
    }
    writer.emit("context", report)
    turn.context = report
    return new
