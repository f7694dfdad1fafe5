"""The answer's markers are treated while it streams exactly as in the final content, however the model's text is
cut into pieces."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from oberik.domain.models import Turn, TurnPlan
from oberik.engine.citations import StreamedMarkers, attribute
from tests.citations.test_render_property import REGISTER

words = st.text(alphabet="abc xyz.,!?\n-*\"'()0123456789[] ", max_size=25)
groups = st.lists(st.integers(0, 6), min_size=1, max_size=3).map(lambda ns: "[" + ", ".join(map(str, ns)) + "]")
before = st.sampled_from(["", " ", "\n", "  "])
after = st.sampled_from(["", " ", ".", "(", "\n"])


@st.composite
def answers(draw: st.DrawFn) -> str:
    parts = []
    for _ in range(draw(st.integers(0, 6))):
        parts.append(draw(words))
        if draw(st.booleans()):
            parts.append(draw(before) + draw(groups) + draw(after))
    return "".join(parts)


def _turn(mode: str) -> Turn:
    plan = TurnPlan(model="m", citations_markers=mode)  # type: ignore[arg-type]
    return Turn(
        id="t", session_id="s", project_id="p", owner="o", run_id="r", plan=plan, created_at=0, citations=REGISTER
    )


@settings(max_examples=500, deadline=None)
@given(answers(), st.lists(st.integers(1, 7), max_size=40), st.sampled_from(["inline", "stripped"]))
def test_the_streamed_pieces_add_up_to_the_final_content(content: str, cuts: list[int], mode: str):
    # Given an answer cut into arbitrary pieces
    markers = StreamedMarkers(_turn(mode))
    out, at = [], 0
    for size in cuts:
        out.append(markers.feed(content[at : at + size]))
        at += size

    # When every piece has gone through and the stream closes
    out += [markers.feed(content[at:]), markers.close()]

    # Then what was streamed is exactly what the content will be
    assert "".join(out) == attribute(content, REGISTER, mode).content  # type: ignore[arg-type]


def test_text_that_may_be_a_marker_waits_for_the_next_piece():
    markers = StreamedMarkers(_turn("stripped"))
    assert markers.feed("Five free days [") == "Five free days"
    assert markers.feed("2") == ""
    assert markers.feed("]. Next") == ". Next"
    assert markers.close() == ""
