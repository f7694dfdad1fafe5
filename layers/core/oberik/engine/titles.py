"""Naming a conversation: one model call, once, never over a name somebody set."""

from __future__ import annotations

import re
from typing import Any

from oberik.domain.llm import Completion, ModelRequest
from oberik.ports import Model

# The offline model recognises this marker and names the conversation itself.
TITLE_TASK = "[oberik:title]"
MAX_TITLE_CHARS = 80

_INSTRUCTIONS = (
    f"{TITLE_TASK} Name this conversation so its owner can find it again in a list. Answer with the name only: "
    "at most six words, no quotes, no full stop, no emoji. Write it in the language the user wrote in. Keep file "
    "names, identifiers, codes and quoted values exactly as they appear."
)


def title_request(model_id: str, user_text: str, answer: str | None = None) -> ModelRequest:
    exchange = f"The user wrote:\n{user_text[:2000]}"
    if answer:
        exchange += f"\n\nThe assistant answered:\n{answer[:2000]}"
    return ModelRequest(
        model=model_id,
        messages=[{"role": "system", "content": _INSTRUCTIONS}, {"role": "user", "content": exchange}],
        temperature=0.2,
    )


def clean_title(raw: str) -> str | None:
    """The first line of the model's answer, without quotes or a trailing full stop; None if nothing usable."""
    line = next((ln.strip() for ln in raw.splitlines() if ln.strip()), "")
    line = re.sub(r"^(title|name)\s*:\s*", "", line, flags=re.IGNORECASE)
    line = line.strip().strip("\"'`“”‘’*#").strip()
    line = line.rstrip(".。!")
    if len(line) > MAX_TITLE_CHARS:
        line = line[: MAX_TITLE_CHARS - 1].rstrip() + "…"
    return line or None


def generate_title(model: Model, model_id: str, user_text: str, answer: str | None = None) -> str | None:
    completion: Completion | None = None
    for item in model.stream(title_request(model_id, user_text, answer)):
        if isinstance(item, Completion):
            completion = item
    return clean_title(completion.content) if completion else None


def text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
    return ""
