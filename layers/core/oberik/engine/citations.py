"""The turn's citations register: everything a reader can check, numbered in one sequence per turn."""

from __future__ import annotations

from typing import Any

from oberik.domain.models import Turn


def register(turn: Turn, entry: dict[str, Any], writer: Any) -> int:
    """Number `entry` in the turn's register (the same source shown twice keeps its first number)."""
    key = (entry.get("kind"), entry.get("url"), entry.get("doc_id"), entry.get("page"), entry.get("quote"))
    for existing in turn.citations:
        if (
            existing.get("kind"),
            existing.get("url"),
            existing.get("doc_id"),
            existing.get("page"),
            existing.get("quote"),
        ) == key:
            return int(existing["marker"])
    marker = len(turn.citations) + 1
    turn.citations.append({**entry, "marker": marker})
    return marker
