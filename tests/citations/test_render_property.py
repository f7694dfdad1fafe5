"""Whatever the model writes, the claims the server derives render into segments that give back the content
exactly, with markers inline or stripped, and no pill ever points at something the register does not hold."""

from __future__ import annotations

import re
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from oberik.client import render_cited
from oberik.engine.citations import attribute

REGISTER: list[dict[str, Any]] = [
    {"marker": n, "kind": "web", "title": f"t{n}", "quote": "q", "url": f"https://e.example/{n}", "used": False}
    for n in (1, 2, 3)
]
MARKER = re.compile(r"\[(\d{1,4}(?:\s*,\s*\d{1,4})*)\](?!\()")

words = st.text(alphabet="abc xyz.,!?\n`-*\"'()0123456789", min_size=0, max_size=25)
markers = st.lists(st.integers(0, 6), min_size=1, max_size=3).map(lambda ns: "[" + ", ".join(map(str, ns)) + "]")
ends = st.sampled_from(["", ".", "!", "?", ". ", ".\n", "\n", "  ", "...", ".)"])


@st.composite
def answers(draw: st.DrawFn) -> str:
    """Prose with marker groups in odd places: before and after full stops, at line starts, next to code ticks,
    numbers that exist and numbers that do not."""
    parts = []
    for _ in range(draw(st.integers(0, 6))):
        parts.append(draw(words))
        if draw(st.booleans()):
            parts.append(draw(st.sampled_from(["", " "])) + draw(markers))
        parts.append(draw(ends))
    return "".join(parts)


def _check(content: str, mode: str) -> None:
    out = attribute(content, REGISTER, mode)  # type: ignore[arg-type]
    body = {"content": out.content, "citations": out.citations, "claims": out.claims}
    segments = render_cited(body)

    # the segments give back the content exactly, in order
    assert "".join(s.text for s in segments) == out.content
    # every claim is a real, ordered, non-overlapping stretch of the content, and renders as its own segment
    cursor = 0
    for claim in out.claims:
        assert cursor <= claim["start"] < claim["end"] <= len(out.content)
        assert out.content[claim["start"] : claim["end"]] == claim["text"] == claim["text"].strip()
        assert claim["citations"] and set(claim["citations"]) <= {1, 2, 3}
        cursor = claim["end"]
    attributed = [s for s in segments if s.citations]
    assert [s.text for s in attributed] == [c["text"] for c in out.claims]
    # no pill points outside the register, and no invented number is left in the content
    assert all(c["marker"] in (1, 2, 3) for s in segments for c in s.citations)
    left = [int(n) for m in MARKER.finditer(out.content) for n in re.findall(r"\d+", m.group(1))]
    if mode == "stripped":
        assert not [m for m in MARKER.finditer(out.content) if not _in_code(out.content, m.start())]
    else:
        assert all(n in (1, 2, 3) for n in left) or "`" in out.content
    # `used` is exactly what the claims cite (plus markers outside any sentence)
    cited = {n for c in out.claims for n in c["citations"]}
    assert {c["marker"] for c in out.citations if c["used"]} >= cited


def _in_code(text: str, at: int) -> bool:
    return any(m.start() <= at < m.end() for m in re.finditer(r"```.*?(?:```|\Z)|`[^`\n]*`", text, re.DOTALL))


@settings(max_examples=300, deadline=None)
@given(answers())
def test_inline_markers_render_back_to_the_content(content: str):
    _check(content, "inline")


@settings(max_examples=300, deadline=None)
@given(answers())
def test_stripped_markers_render_back_to_the_content(content: str):
    _check(content, "stripped")


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=60))
def test_any_text_at_all_renders_back_to_itself_in_both_modes(content: str):
    _check(content, "inline")
    _check(content, "stripped")
