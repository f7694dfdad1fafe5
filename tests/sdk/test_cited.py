"""render_cited: the answer as segments that a citation pill sits at the end of."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from oberik.client import ChatResponse, Segment, render_cited

REGISTER = [
    {"marker": 1, "kind": "document", "title": "Q3 report", "quote": "revenue rose"},
    {"marker": 2, "kind": "web", "title": "Press release", "quote": "five free days", "url": "https://x.test"},
]


def response(content: str, claims: list[dict[str, Any]], citations: list[dict[str, Any]] = REGISTER) -> ChatResponse:
    return ChatResponse(session_id="s", run_id="r", content=content, claims=claims, citations=citations)


def test_each_claim_is_a_segment_with_its_citations_and_the_rest_is_plain_text():
    # Given an answer with one claim citing [2], and a marker the model invented
    content = "Hello. There are 5 free days at destination [2]. Thanks."
    start = content.index("There")
    end = content.index("Thanks") - 1
    claim = {"text": content[start:end], "start": start, "end": end, "citations": [2, 9]}

    # When it is rendered
    segments = render_cited(response(content, [claim]))

    # Then the claim carries its citation, the invented marker is dropped, and nothing is lost
    assert segments == [
        Segment("Hello. ", []),
        Segment("There are 5 free days at destination [2].", [REGISTER[1]]),
        Segment(" Thanks.", []),
    ]


def test_an_answer_without_claims_is_one_segment_without_citations():
    assert render_cited(response("Just prose.", [])) == [Segment("Just prose.", [])]
    assert render_cited({"content": "", "claims": [], "citations": []}) == [Segment("", [])]


def test_a_claim_without_offsets_is_found_by_its_text():
    content = "Revenue rose in Q3. It fell later."
    segments = render_cited(response(content, [{"text": "Revenue rose in Q3.", "citations": [1]}]))
    assert segments[0] == Segment("Revenue rose in Q3.", [REGISTER[0]])


@st.composite
def answers(draw: st.DrawFn) -> ChatResponse:
    """Any content, with claims whose spans may be valid, overlapping, reversed or out of range, citing markers
    that may or may not exist."""
    content = draw(st.text(max_size=80))
    n = len(content)
    claims = []
    for _ in range(draw(st.integers(0, 6))):
        start = draw(st.integers(-3, n + 3))
        end = draw(st.integers(-3, n + 3))
        claims.append({"start": start, "end": end, "citations": draw(st.lists(st.integers(0, 4), max_size=3))})
    if draw(st.booleans()) and content:
        claims.append({"text": content[: max(1, n // 2)], "citations": [1]})
    return response(content, claims)


@given(answers())
def test_the_segments_always_concatenate_to_the_content_exactly(answer: ChatResponse):
    # Given any answer, however odd its claims
    # When it is rendered
    segments = render_cited(answer)

    # Then the texts give back the content exactly, in order, and every pill points at a real register entry
    assert "".join(s.text for s in segments) == answer.content
    assert all(s.text for s in segments) or segments == [Segment("", [])]
    markers = {c["marker"] for c in answer.citations}
    assert all(c["marker"] in markers for s in segments for c in s.citations)
