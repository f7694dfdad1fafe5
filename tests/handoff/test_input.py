"""POST /chat/sessions/{id}/browser/input: a person's gestures and keys, relayed with CDP input events, arrive in
the page as what they did (the page records it), in page pixels = picture pixels + the frame's origin."""

from __future__ import annotations

import itertools
from typing import Any

from tests.handoff.conftest import Desk


def centre(desk: Desk, selector: str) -> dict[str, float]:
    return desk.evaluate(
        f"(() => {{ const r = document.querySelector('{selector}').getBoundingClientRect();"
        " return {x: r.left + r.width / 2, y: r.top + r.height / 2}; })()"
    )


def test_a_drag_arrives_as_a_path_the_slider_records(desk: Desk):
    # Given a slider hand-off, cropped to the track
    desk.open("/slider")
    desk.hand_off(after=None, reason="slide the slider to the end", selector="#track")
    frame = desk.frame().json()
    assert frame["region"] == "selector" and frame["matched"] is True
    origin = frame["origin"]
    knob = centre(desk, "#knob")

    # When the agent-style one-call drag is sent in image space with the frame's origin
    start = {"x": knob["x"] - origin["x"], "y": knob["y"] - origin["y"]}
    r = desk.input(
        type="drag", **start, to={"x": start["x"] + 380, "y": start["y"] + 3}, steps=25, hold_ms=50, origin=origin
    )

    # Then the server added the origin, and the page heard a press, a path of moves with the button held, a release
    assert r.status_code == 200, r.text
    assert r.json()["origin"] == origin and r.json()["at"] == {"x": knob["x"], "y": knob["y"]}
    log: list[Any] = desk.evaluate("window.__log")
    assert log[0][0] == "down" and log[-1][0] == "up"
    moves = [e for e in log if e[0] == "move"]
    assert len(moves) >= 20 and all(m[3] == 1 for m in moves)
    xs = [m[1] for m in moves]
    assert xs == sorted(xs) and len(set(xs)) >= 20  # interpolated, not a teleport
    steps = [b - a for a, b in itertools.pairwise(xs)]
    assert max(steps) > 2 * min(s for s in steps if s > 0)  # eased: slow at the ends, faster in the middle
    assert round(log[0][1]) == round(knob["x"]) and round(log[-1][1]) == round(knob["x"] + 380)
    assert desk.evaluate("document.getElementById('status').textContent") == "Verified"


def test_pointer_down_move_up_is_the_gesture_the_person_made(desk: Desk):
    desk.open("/slider")
    desk.hand_off(after=None, reason="slide the slider to the end", selector="#track")
    origin = desk.frame().json()["origin"]
    knob = centre(desk, "#knob")
    x, y = knob["x"] - origin["x"], knob["y"] - origin["y"]
    path = [(x + d, y + (d % 7) - 3) for d in range(0, 390, 30)]
    assert desk.input(type="pointer_down", x=x, y=y, origin=origin).status_code == 200
    for px, py in path:
        assert desk.input(type="pointer_move", x=px, y=py, origin=origin).status_code == 200
    assert desk.input(type="pointer_up", x=path[-1][0], y=path[-1][1], origin=origin).status_code == 200
    log = desk.evaluate("window.__log")
    moves = [(round(e[1]), round(e[2])) for e in log if e[0] == "move"]
    assert moves == [(round(px + origin["x"]), round(py + origin["y"])) for px, py in path]
    assert desk.evaluate("document.getElementById('status').textContent") == "Verified"


def test_typed_text_arrives_as_typed_accents_and_altgr_characters_included(desk: Desk):
    desk.open("/typing")
    desk.hand_off(after=None, reason="fill in the street address", selector="#street")
    origin = desk.frame().json()["origin"]
    field = centre(desk, "#street")
    r = desk.input(type="click", x=field["x"] - origin["x"], y=field["y"] - origin["y"], origin=origin)
    assert r.json()["focused"] is True  # the page holds the keyboard now

    text = "Żółć façade 12 — ıİ ß € @ ~ ñ"
    assert desk.input(type="type", text=text).status_code == 200
    assert desk.evaluate("document.getElementById('street').value") == text

    # Select-all and retype goes to the page; Backspace and the arrows are keys
    assert desk.input(type="key", key="a", modifiers=["Control"]).status_code == 200
    assert desk.input(type="type", text="Rue de l’Église 3").status_code == 200
    assert desk.evaluate("document.getElementById('street').value") == "Rue de l’Église 3"
    desk.input(type="key", key="Backspace")
    desk.input(type="key", key="ArrowLeft")
    desk.input(type="type", text="X")
    # Backspace takes the 3, the left arrow steps back over the space, and X lands before it
    assert desk.evaluate("document.getElementById('street').value") == "Rue de l’ÉgliseX "
    keys = [e for e in desk.evaluate("window.__log") if e[0] == "key"]
    assert ["key", "a", True] in keys and ["key", "Backspace", False] in keys


def test_tab_moves_focus_and_wheel_scrolls_a_pane(desk: Desk):
    desk.open("/typing")
    desk.hand_off(after=None, reason="fill in the street address")
    origin = desk.frame().json()["origin"]
    field = centre(desk, "#street")
    desk.input(type="click", x=field["x"], y=field["y"], origin=origin)
    desk.input(type="key", key="Tab")
    assert desk.evaluate("document.activeElement.id") == "city"
    pane = centre(desk, "#pane")
    desk.input(type="wheel", x=pane["x"], y=pane["y"], delta_y=300, origin=origin)
    desk.pool.submit(
        desk.sid, lambda p: p.wait_for_function("document.getElementById('pane').scrollTop > 0"), open_if_missing=False
    )
    assert desk.evaluate("window.scrollY") == 0
    assert desk.input(type="scroll", delta_y=200).status_code == 200


BAD: list[tuple[dict[str, Any], str]] = [
    ({"type": "teleport"}, "type must be one of"),
    ({"type": "click", "x": 1, "y": 1}, "origin is required"),
    ({"type": "click", "x": "1", "y": 1, "origin": {"x": 0, "y": 0}}, "x must be a number"),
    ({"type": "click", "x": 5000, "y": 1, "origin": {"x": 0, "y": 0}}, "outside the page"),
    ({"type": "click", "x": 1, "y": 1, "origin": {"x": 0}}, "origin.y must be a number"),
    ({"type": "click", "x": 1, "y": 1, "origin": {"x": 0, "y": 0}, "clicks": 9}, "clicks must be"),
    ({"type": "click", "x": 1, "y": 1, "origin": {"x": 0, "y": 0}, "button": "thumb"}, "button must be"),
    ({"type": "drag", "x": 1, "y": 1, "origin": {"x": 0, "y": 0}}, "needs `to`"),
    ({"type": "drag", "x": 1, "y": 1, "origin": {"x": 0, "y": 0}, "to": {"x": 2, "y": 2}, "steps": 1}, "steps"),
    ({"type": "drag", "x": 1, "y": 1, "origin": {"x": 0, "y": 0}, "to": {"x": 2, "y": 2}, "hold_ms": -1}, "hold_ms"),
    ({"type": "type", "text": ""}, "needs `text`"),
    ({"type": "type", "text": "x" * 3000}, "at most"),
    ({"type": "key", "key": "F13"}, "not a key this relay knows"),
    ({"type": "key", "key": "a", "modifiers": ["Hyper"]}, "modifiers"),
    ({"type": "wheel", "x": 1, "y": 1, "origin": {"x": 0, "y": 0}}, "delta_x or delta_y"),
    ({"type": "scroll", "delta_y": 1e9}, "delta_y must be between"),
    ({"type": "type", "text": "hi", "x": 3}, "does not take x"),
]


def test_bad_input_is_refused_with_a_sentence_and_nothing_reaches_the_page(desk: Desk):
    desk.open("/typing")
    desk.hand_off(after=None, reason="fill in the street address")
    for body, words in BAD:
        r = desk.input(**body)
        assert r.status_code == 400, (body, r.text)
        assert words in r.json()["detail"], (body, r.json()["detail"])
    assert desk.evaluate("window.__log") == []
    r = desk.api.client.post(
        desk.path("browser/input"),
        content=b"[1, 2]",
        headers={**desk.api.bearer(desk.token), "Content-Type": "application/json"},
    )
    assert r.status_code == 422 and r.json()["detail"]


def test_a_read_only_hand_off_refuses_input_on_the_server(desk: Desk):
    desk.open("/typing")
    desk.hand_off(after=None, reason="look at the form", interactive=False)
    assert desk.frame().status_code == 200  # it can be watched
    r = desk.input(type="type", text="sneaky")
    assert r.status_code == 403 and r.json()["code"] == "handoff_read_only"
    assert desk.evaluate("document.getElementById('street').value") == ""


def test_input_without_a_hand_off_or_for_someone_else_is_refused(desk: Desk):
    desk.open("/typing")
    r = desk.input(type="type", text="x")
    assert r.status_code == 409 and r.json()["code"] == "no_handoff"
    desk.hand_off(after=None, reason="fill in the street address")
    other = desk.api.token(desk.project, subject="mallory")
    r = desk.input(token=other, type="type", text="x")
    assert r.status_code == 404
    assert desk.evaluate("document.getElementById('street').value") == ""
    r = desk.api.client.get(desk.path("browser/frame"), headers=desk.api.bearer(other))
    assert r.status_code == 404
