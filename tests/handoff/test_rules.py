"""The hand-off's pure rules: what the agent may ask for, what a gesture must look like, how a check decides."""

from __future__ import annotations

import base64

import pytest
from hypothesis import given
from hypothesis import strategies as st

from oberik.browser import handoff_rules as rules
from oberik.browser.handoff import framing, jpeg_size
from oberik.domain import pauses
from oberik.domain.errors import Conflict, Invalid


def test_auto_done_needs_a_reason_that_says_what_done_looks_like():
    assert rules.judgeable("pass the captcha") and rules.judgeable("log in to the bank")
    assert not rules.judgeable("help me") and not rules.judgeable("please do this for me")
    ask = rules.parse_ask({"reason": "help me"}, autodetect=True)
    assert ask.auto_done is False and ask.auto_done_note is None  # not asked for: nothing to explain
    ask = rules.parse_ask({"reason": "help me", "auto_done": True}, autodetect=True)
    assert ask.auto_done is False and "help me" in (ask.auto_done_note or "")


def test_auto_done_is_off_for_open_read_only_or_switched_off_hand_offs():
    assert rules.parse_ask({"reason": "pass the captcha"}, autodetect=True).auto_done is True
    assert rules.parse_ask({"reason": "pass the captcha", "mode": "open"}, autodetect=True).auto_done is False
    assert rules.parse_ask({"reason": "pass the captcha", "interactive": False}, autodetect=True).auto_done is False
    assert rules.parse_ask({"reason": "pass the captcha"}, autodetect=False).auto_done is False


@pytest.mark.parametrize(
    ("args", "words"),
    [
        ({}, "needs `reason`"),
        ({"reason": " "}, "needs `reason`"),
        ({"reason": "x" * 600}, "under 500"),
        ({"reason": "pass it", "mode": "later"}, "`mode`"),
        ({"reason": "pass it", "interactive": "no"}, "`interactive`"),
        ({"reason": "pass it", "auto_done": 1}, "`auto_done`"),
        ({"reason": "pass it", "selector": 3}, "`selector`"),
    ],
)
def test_bad_tool_arguments_are_sentences(args: dict, words: str):
    with pytest.raises(rules.HandoffError, match=words.replace("`", ".")):
        rules.parse_ask(args, autodetect=True)


def test_the_page_decides_before_the_model():
    v = rules.page_verdict
    assert v(challenge_now=True, challenge_seen=True, blank=False, loading=False) is None  # still there: model
    assert v(challenge_now=False, challenge_seen=True, blank=True, loading=False) == "loading"
    assert v(challenge_now=False, challenge_seen=True, blank=False, loading=True) == "loading"
    assert v(challenge_now=False, challenge_seen=True, blank=False, loading=False) == "gone"
    # a login form or consent dialog: nothing recognisable was ever there, so nothing can be `gone`
    assert v(challenge_now=False, challenge_seen=False, blank=False, loading=False) is None


@given(st.text(max_size=40))
def test_the_checker_can_only_ever_answer_one_of_three_words(text: str):
    assert rules.model_word(text) in ("solved", "unsolved", "unclear")


def test_checker_words():
    assert rules.model_word(" Solved. ") == "solved"
    assert rules.model_word("UNSOLVED") == "unsolved"
    assert rules.model_word("solved, the letters were XK4") == "unclear"
    assert rules.model_word("") == "unclear"


def test_gate_order_and_will_check_again():
    h = {"active": True, "auto_done": True, "checks": 0, "last_check_at": 100.0}
    assert rules.gate_check(None, autodetect=True, now=0).reason == "nothing_to_check"  # type: ignore[union-attr]
    assert rules.gate_check(h, autodetect=False, now=200).reason == "autodetect_disabled"  # type: ignore[union-attr]
    assert rules.gate_check({**h, "auto_done": False}, autodetect=True, now=200).reason == "nothing_to_check"  # type: ignore[union-attr]
    assert rules.gate_check({**h, "checks": rules.MAX_CHECKS}, autodetect=True, now=200).reason == "checked_enough"  # type: ignore[union-attr]
    assert rules.gate_check(h, autodetect=True, now=100.5) is None  # the page may always be looked at
    soon = rules.gate_check(h, autodetect=True, now=100.5, model=True)
    assert soon is not None and soon.reason == "too_soon" and soon.will_check_again is True
    assert rules.answer_for("unsolved", rules.MAX_CHECKS).will_check_again is False
    assert rules.answer_for("gone", 0).as_dict() == {
        "checked": True,
        "done": True,
        "state": "gone",
        "reason": None,
        "will_check_again": False,
    }


def test_coordinates_are_image_space_plus_the_origin():
    vp = {"width": 1280.0, "height": 800.0}
    ev = rules.parse_input({"type": "click", "x": 10, "y": 20, "origin": {"x": 400, "y": 300}}, vp)
    assert (ev.x, ev.y) == (410, 320)
    drag = rules.parse_input(
        {"type": "drag", "x": 0, "y": 0, "to": {"x": 300, "y": 5}, "origin": {"x": 100, "y": 200}}, vp
    )
    assert (drag.to_x, drag.to_y, drag.steps) == (400, 205, 20)
    with pytest.raises(Invalid, match="outside"):
        rules.parse_input({"type": "click", "x": 1000, "y": 0, "origin": {"x": 400, "y": 0}}, vp)


def test_keys_become_cdp_key_events():
    down, up = rules.key_params("Enter", ())
    assert down["type"] == "keyDown" and down["text"] == "\r" and down["windowsVirtualKeyCode"] == 13
    down, _ = rules.key_params("a", ("Control",))
    assert down["type"] == "rawKeyDown" and down["modifiers"] == 2 and "text" not in down and down["code"] == "KeyA"
    assert up["type"] == "keyUp"


def test_easing_starts_and_ends_slowly():
    assert rules.ease(0) == 0 and rules.ease(1) == 1
    assert rules.ease(0.1) < 0.1 and rules.ease(0.9) > 0.9


def test_the_crop():
    info = {"box": {"x": 40, "y": 400, "width": 300, "height": 74}, "vw": 1280, "vh": 800}
    overlay = {"x": 420, "y": 120, "width": 320, "height": 340}
    v = framing(info, None, "#captcha")
    assert v["region"] == "selector" and v["clip"] == {"x": 32, "y": 392, "width": 316, "height": 90}
    v = framing(info, {"box": None, "overlays": [overlay]}, "#captcha")
    assert v["clip"] == {"x": 32, "y": 112, "width": 716, "height": 370} and v["origin"] == {"x": 32, "y": 112}
    v = framing({**info, "box": None}, {"box": info["box"], "overlays": []}, "#missing")
    assert v["region"] == "detected" and v["matched"] is False
    v = framing({**info, "box": None}, None, "#missing")
    assert v["region"] == "viewport" and v["clip"] == {"x": 0, "y": 0, "width": 1280, "height": 800}


def test_jpeg_size_reads_the_frame_header():
    # a 2x1 baseline JPEG (SOI, a minimal APP0, SOF0 with height 1 and width 2)
    data = bytes.fromhex("ffd8ffe000104a46494600010100000100010000ffc0000b080001000201011100ffd9")
    assert jpeg_size(data) == (2, 1)
    assert jpeg_size(base64.b64decode("/9j/")) == (0, 0)


def test_a_blocking_hand_off_is_a_pause_resumed_only_by_handoff_done():
    pending = {**pauses.empty(), "handoff": {"id": "h_1", "tool_call_id": "c9", "blocking": True}}
    assert pauses.outstanding(pending) and pauses.reason(pending) == "needs_browser"
    assert "handoff_done" in pauses.waiting_on(pending)
    with pytest.raises(Invalid, match="handoff_done"):
        pauses.resolve(pending, tool_results=None, approval_decisions=None, answers=None)
    out = pauses.resolve(
        pending, tool_results=None, approval_decisions=None, answers=None, handoff_done=True, handoff_result="ok"
    )
    assert out.needs_model and out.messages[0].tool_call_id == "c9" and out.messages[0].content == "ok"
    with pytest.raises(Conflict):
        pauses.resolve(out.pending, tool_results=None, approval_decisions=None, answers=None, handoff_done=True)
    # a client tool call in the same round waits until the person is done
    held = {**pending, "deferred": [{"id": "t1", "name": "x", "args": {}}]}
    assert pauses.announce(held)["tool_calls"] == []
