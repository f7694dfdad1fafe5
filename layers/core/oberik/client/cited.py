"""Splitting an answer into the stretches a citation pill sits at the end of."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from oberik.domain.chat import ChatResponse


@dataclass(frozen=True)
class Segment:
    """A stretch of the answer and the citations that back it (empty for unattributed text)."""

    text: str
    citations: list[dict[str, Any]] = field(default_factory=list)


def _span(claim: Mapping[str, Any], content: str) -> tuple[int, int] | None:
    start, end = claim.get("start"), claim.get("end")
    if isinstance(start, int) and isinstance(end, int) and not isinstance(start, bool) and not isinstance(end, bool):
        return (start, end) if 0 <= start < end <= len(content) else None
    text = claim.get("text")
    if isinstance(text, str) and text:
        at = content.find(text)
        return (at, at + len(text)) if at >= 0 else None
    return None


def render_cited(response: ChatResponse | Mapping[str, Any]) -> list[Segment]:
    """The answer as segments, in order: concatenating their `text` gives back `content` exactly.

    Each claim (`start`, `end`, and the `citations` markers it rests on) becomes its own segment carrying the
    register entries those markers name; the text between claims comes back as segments without citations.
    A marker nothing in the register answers to is dropped rather than shown as a pill that leads nowhere, and
    a claim whose span is missing, out of range or overlaps the one before is treated as unattributed text.
    An answer without claims is a single segment with no citations.

    Both marker modes render the same way: with markers inline a claim's text ends with its `[n]`; with markers
    stripped the claim offsets point into the prose without them, and the pills are all there is of the numbers.
    """
    data = response.model_dump() if isinstance(response, ChatResponse) else response
    content = str(data.get("content") or "")
    register: dict[Any, dict[str, Any]] = {}
    for entry in data.get("citations") or []:
        if isinstance(entry, Mapping) and entry.get("marker") is not None:
            register.setdefault(entry["marker"], dict(entry))

    spans: list[tuple[int, int, list[dict[str, Any]]]] = []
    cursor = 0
    claims = [c for c in data.get("claims") or [] if isinstance(c, Mapping)]
    located = [(span, c) for c in claims if (span := _span(c, content)) is not None]
    for (start, end), claim in sorted(located, key=lambda item: item[0]):
        if start < cursor:
            continue  # overlaps the claim before it
        markers = claim.get("citations") or []
        cited: list[dict[str, Any]] = []
        for marker in markers if isinstance(markers, list) else []:
            entry = register.get(marker)
            if entry is not None and entry not in cited:
                cited.append(entry)
        spans.append((start, end, cited))
        cursor = end

    if not spans:
        return [Segment(content, [])]
    segments: list[Segment] = []
    cursor = 0
    for start, end, cited in spans:
        if start > cursor:
            segments.append(Segment(content[cursor:start], []))
        segments.append(Segment(content[start:end], cited))
        cursor = end
    if cursor < len(content):
        segments.append(Segment(content[cursor:], []))
    return segments
