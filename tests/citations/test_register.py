"""The citations register and how an answer is read against it (no AWS: the rules themselves)."""

from __future__ import annotations

from typing import Any

import pytest

from oberik.domain.models import Turn, TurnPlan
from oberik.engine.citations import MAX_QUOTE_CHARS, attribute, cite_tool_result, register


class Frames:
    """Collects what the register emits, as a FrameWriter would write it."""

    def __init__(self) -> None:
        self.frames: list[tuple[str, dict[str, Any]]] = []

    def emit(self, event: str, data: dict[str, Any]) -> int:
        self.frames.append((event, data))
        return len(self.frames)


def _turn() -> Turn:
    return Turn(id="t", session_id="s", project_id="p", owner="o", run_id="r", plan=TurnPlan(model="m"), created_at=0)


def _seven_kinds(turn: Turn, writer: Frames) -> list[int]:
    return [
        register(
            turn,
            {"kind": "document", "title": "Q3 report", "quote": "Revenue rose 12%.", "page": 3, "score": 0.8},
            writer,
        ),
        register(
            turn, {"kind": "web", "title": "Press", "url": "https://example.com/a", "quote": "Five free days."}, writer
        ),
        register(turn, {"kind": "memory", "quote": "The user prefers window seats."}, writer),
        register(turn, {"kind": "wiki", "title": "Onboarding", "quote": "Badges are at reception."}, writer),
        register(turn, {"kind": "tool", "tool": "crm_contact", "quote": '{"phone": "555"}'}, writer),
        register(
            turn, {"kind": "preview", "title": "Port 3000", "url": "https://preview.example/x", "quote": "OK"}, writer
        ),
        register(turn, {"kind": "file", "path": "/workspace/fact.txt", "quote": "42"}, writer),
    ]


def test_every_kind_is_numbered_in_one_sequence_and_each_addition_streams_the_register():
    # Given a turn
    turn, writer = _turn(), Frames()

    # When seven sources of seven kinds are registered
    markers = _seven_kinds(turn, writer)

    # Then they are numbered 1..7 in the order they were shown, each with the base fields and its kind's extras
    assert markers == [1, 2, 3, 4, 5, 6, 7]
    assert [c["kind"] for c in turn.citations] == ["document", "web", "memory", "wiki", "tool", "preview", "file"]
    for c in turn.citations:
        assert {"marker", "kind", "title", "quote", "url", "used"} <= set(c)
        assert c["title"] and c["used"] is False
    assert turn.citations[0]["page"] == 3 and turn.citations[0]["score"] == 0.8
    assert turn.citations[1]["url"] == "https://example.com/a"
    assert turn.citations[4]["tool"] == "crm_contact" and "crm_contact" in turn.citations[4]["title"]
    assert turn.citations[6]["path"] == "/workspace/fact.txt" and turn.citations[6]["title"] == "/workspace/fact.txt"
    # and every addition sent the whole register so far as a citations frame
    assert [e for e, _ in writer.frames] == ["citations"] * 7
    assert [len(d["citations"]) for _, d in writer.frames] == [1, 2, 3, 4, 5, 6, 7]


def test_the_same_source_shown_twice_keeps_its_number_and_sends_no_frame():
    turn, writer = _turn(), Frames()
    first = register(turn, {"kind": "web", "url": "https://a.example/", "quote": "x"}, writer)
    again = register(turn, {"kind": "web", "url": "https://a.example/", "quote": "x"}, writer)
    other = register(turn, {"kind": "web", "url": "https://b.example/", "quote": "x"}, writer)
    assert (first, again, other) == (1, 1, 2)
    assert len(writer.frames) == 2


def test_command_output_is_not_citable_and_unknown_kinds_are_refused():
    turn = _turn()
    with pytest.raises(ValueError, match="not citable"):
        register(turn, {"kind": "command", "quote": "exit 0"}, None)
    with pytest.raises(ValueError, match="not a kind"):
        register(turn, {"kind": "rumour", "quote": "x"}, None)
    assert turn.citations == []


def test_quotes_are_short_single_lines():
    turn = _turn()
    register(turn, {"kind": "document", "title": "Long", "quote": "word\n\n " * 500}, None)
    quote = turn.citations[0]["quote"]
    assert len(quote) <= MAX_QUOTE_CHARS and "\n" not in quote and quote.endswith("…")


def test_a_tool_answer_is_cited_with_the_tools_name_and_its_marker_put_in_front():
    turn = _turn()
    shown = cite_tool_result(turn, "crm_contact", '{"phone": "555"}', None)
    assert shown == '[1] {"phone": "555"}'
    assert turn.citations[0]["kind"] == "tool" and turn.citations[0]["tool"] == "crm_contact"


REGISTER = [
    {"marker": 1, "kind": "document", "title": "Q3", "quote": "q", "url": None, "used": False, "page": 3},
    {"marker": 2, "kind": "web", "title": "Press", "quote": "q", "url": "https://x.example", "used": False},
    {"marker": 3, "kind": "memory", "title": "m", "quote": "q", "url": None, "used": False},
]


def test_sentences_ending_in_markers_become_claims_and_invented_markers_are_dropped():
    # Given an answer citing [2] and [1], with [9] made up and [3] never cited
    content = "There are 5 free days at destination [2]. Revenue rose [1][9]. Nothing backs this. Made up [9]!"

    # When it is read against the register
    out = attribute(content, REGISTER)

    # Then the invented marker is gone from the content, and each marked sentence is a claim over that content
    assert out.content == "There are 5 free days at destination [2]. Revenue rose [1]. Nothing backs this. Made up!"
    assert [(c["text"], c["citations"]) for c in out.claims] == [
        ("There are 5 free days at destination [2].", [2]),
        ("Revenue rose [1].", [1]),
    ]
    for c in out.claims:
        assert out.content[c["start"] : c["end"]] == c["text"]
    assert out.attribution == "per-claim"
    # and `used` says which entries the answer rests on
    assert [c["used"] for c in out.citations] == [True, True, False]
    assert out.citations[0]["page"] == 3


def test_a_group_keeps_its_real_markers_only():
    out = attribute("Both say so [1, 7, 2].", REGISTER)
    assert out.content == "Both say so [1, 2]."
    assert out.claims[0]["citations"] == [1, 2]


def test_stripped_markers_leave_clean_prose_and_claims_point_into_it():
    content = "Revenue rose 12% [1]. Five free days. [2]\n- Window seats preferred [3]\nUnsourced line [8]."
    out = attribute(content, REGISTER, "stripped")
    assert out.content == "Revenue rose 12%. Five free days.\n- Window seats preferred\nUnsourced line."
    assert [(c["text"], c["citations"]) for c in out.claims] == [
        ("Revenue rose 12%.", [1]),
        ("Five free days.", [2]),
        ("- Window seats preferred", [3]),
    ]
    for c in out.claims:
        assert out.content[c["start"] : c["end"]] == c["text"]
    assert all(c["used"] for c in out.citations)


def test_markers_in_code_are_left_alone():
    out = attribute("Use `items[1]` here [2].\n```\nx = a[3]\n```", REGISTER)
    assert out.content == "Use `items[1]` here [2].\n```\nx = a[3]\n```"
    assert [c["citations"] for c in out.claims] == [[2]]
    assert [c["used"] for c in out.citations] == [False, True, False]


def test_attribution_says_how_the_answer_is_grounded():
    assert attribute("Grounded [1].", REGISTER).attribution == "per-claim"
    assert attribute("Looked, cited nothing.", REGISTER).attribution == "retrieval-only"
    assert attribute("Nothing was shown [1].", []).attribution == "none"
    assert attribute("Nothing was shown [1].", []).content == "Nothing was shown."


def test_decimals_and_abbreviations_do_not_end_a_claim_early():
    out = attribute("It grew 3.5 percent in Q3 [1]. Then it fell.", REGISTER)
    assert [c["text"] for c in out.claims] == ["It grew 3.5 percent in Q3 [1]."]
