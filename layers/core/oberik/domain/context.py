"""Context management: when a conversation outgrows the model's window, older turns are folded into a summary.

Pure rules only: estimating tokens, and choosing what to fold. The stored transcript is never changed; the
summary is kept beside it and reused until the conversation outgrows the window again.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

if TYPE_CHECKING:
    from oberik.domain.models import Message

# Without a measurement from the provider, count a token for every 3 characters: more than most tokenizers
# produce for prose, so the estimate errs towards compacting early rather than overflowing.
CHARS_PER_TOKEN = 3.0
PER_MESSAGE_TOKENS = 4


class ContextSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    # Window sizes by `provider/model`; anything not listed gets default_window_tokens.
    window_tokens: dict[str, int] = Field(default_factory=dict)
    default_window_tokens: int = Field(default=128_000, ge=256)
    # Compact when a request would use more than this share of the window.
    threshold: float = Field(default=0.8, gt=0.0, le=1.0)
    # This many of the latest turns always stay word for word.
    keep_recent_turns: int = Field(default=4, ge=1, le=100)

    def window_for(self, model: str) -> int:
        return self.window_tokens.get(model, self.default_window_tokens)


def size_of(messages: list[dict[str, Any]]) -> int:
    """The characters of a request, measured the same way every time so provider counts can calibrate it."""
    return sum(len(json.dumps(m.get("content") or "")) + len(json.dumps(m.get("tool_calls") or "")) for m in messages)


def chars_per_token(measured: tuple[int, int] | None) -> float:
    """From the provider's own count of a past request (characters, prompt tokens), a little on the safe side;
    without one, the conservative default."""
    if not measured or measured[0] <= 0 or measured[1] <= 0:
        return CHARS_PER_TOKEN
    return max(0.5, 0.9 * measured[0] / measured[1])


def estimate_tokens(messages: list[dict[str, Any]], per_token: float = CHARS_PER_TOKEN) -> int:
    return int(size_of(messages) / per_token) + PER_MESSAGE_TOKENS * len(messages)


def fold_boundary(messages: list[Message], current_turn: str, keep_recent_turns: int, after_seq: int) -> int:
    """The sequence number up to which messages may be folded: everything before the latest
    `keep_recent_turns` turns (the current one included), never splitting a turn. 0: nothing to fold."""
    turns: list[str] = []
    first_seq: dict[str, int] = {}
    for m in messages:
        if m.seq <= after_seq or m.turn_id is None:
            continue
        if m.turn_id not in first_seq:
            first_seq[m.turn_id] = m.seq
            turns.append(m.turn_id)
    if current_turn not in first_seq:
        turns.append(current_turn)
    kept = turns[-keep_recent_turns:]
    if len(kept) == len(turns):
        return 0
    return first_seq[kept[0]] - 1
