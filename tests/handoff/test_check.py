"""POST /chat/sessions/{id}/handoff/check: the page decides first (gone, loading), the small vision model only
when the page cannot (solved | unsolved | unclear, nothing else), and `checked: false` says why no call was made."""

from __future__ import annotations

import time

import pytest

from oberik.browser import handoff_rules as rules
from oberik.local.scripted_provider import Fail, Reply
from tests.handoff.conftest import CHECKER, Desk


def click(desk: Desk, selector: str) -> None:
    """Click an element the way the viewer would: its centre, in the picture's space, with the frame's origin."""
    frame = desk.frame().json()
    box = desk.evaluate(
        f"(() => {{ const r = document.querySelector('{selector}').getBoundingClientRect();"
        " return {x: r.left + r.width / 2, y: r.top + r.height / 2}; })()"
    )
    origin = frame["origin"]
    r = desk.input(type="click", x=box["x"] - origin["x"], y=box["y"] - origin["y"], origin=origin)
    assert r.status_code == 200, r.text


def spaced() -> None:
    """Let the spacing between model checks pass (the check refuses to call the model more often)."""
    time.sleep(rules.CHECK_SPACING_SECONDS + 0.1)


def test_a_bot_check_that_goes_away_is_gone_without_a_model_call(desk: Desk):
    # Given a blocking hand-off of a bot check
    desk.open("/widget")
    desk.hand_off(after=None, reason="pass the captcha", selector="#captcha")

    # When the person ticks the box (the puzzle opens) and the client checks
    click(desk, "#tick")
    assert desk.evaluate("window.__log") == ["opened"]
    desk.provider.script_when(CHECKER, Reply("unsolved"))
    first = desk.check().json()

    # Then the widget is still there: the model is asked, sees a picture, and says it is not done
    assert first == {"checked": True, "done": False, "state": "unsolved", "reason": None, "will_check_again": True}
    (asked,) = desk.checker_requests()
    parts = asked["messages"][-1]["content"]
    assert parts[1]["image_url"]["url"].startswith("data:image/jpeg;base64,")
    assert "pass the captcha" in parts[0]["text"]

    # When the person solves the puzzle and lands on the order page
    click(desk, "#verify")
    desk.pool.submit(desk.sid, lambda page: page.wait_for_url("**/order"), open_if_missing=False)
    again = desk.check().json()

    # Then the page itself says it is over: gone, done, and no second model call
    assert again == {"checked": True, "done": True, "state": "gone", "reason": None, "will_check_again": False}
    assert len(desk.checker_requests()) == 1


@pytest.mark.parametrize(
    ("said", "state", "done"),
    [
        ("solved", "solved", True),
        ("Solved.", "solved", True),
        ("unsolved", "unsolved", False),
        ("unclear", "unclear", False),
        ("The box is ticked and the grid shows three buses", "unclear", False),
        ("solved: the code is 4F7K", "unclear", False),
    ],
)
def test_the_model_answers_in_three_words_only(desk: Desk, said: str, state: str, done: bool):
    desk.open("/login")
    desk.hand_off(after=None, reason="log in to the bank")
    desk.provider.script_when(CHECKER, Reply(said))
    r = desk.check().json()
    assert r["checked"] is True and r["state"] == state and r["done"] is done
    assert set(r) == {"checked", "done", "state", "reason", "will_check_again"}


def test_a_failing_checker_is_unclear_not_an_error(desk: Desk):
    desk.open("/login")
    desk.hand_off(after=None, reason="log in to the bank")
    desk.provider.script_when(CHECKER, Fail(500))
    r = desk.check()
    assert r.status_code == 200 and r.json()["state"] == "unclear" and r.json()["done"] is False


def test_a_blank_page_is_loading_and_costs_no_model_call(desk: Desk):
    desk.open("/blank")
    desk.hand_off(after=None, reason="pass the captcha")
    r = desk.check().json()
    assert r == {"checked": True, "done": False, "state": "loading", "reason": None, "will_check_again": True}
    assert desk.checker_requests() == []


def test_a_page_still_loading_is_loading(desk: Desk):
    desk.open("/widget")
    desk.hand_off(after=None, reason="pass the captcha")
    # the widget was seen; the next page is half-delivered (the server holds the rest back)
    desk.open("/slow", wait_until="commit")
    desk.pool.submit(desk.sid, lambda page: page.wait_for_selector("text=Loading your"), open_if_missing=False)
    assert desk.check().json()["state"] == "loading"
    assert desk.checker_requests() == []


def test_a_login_form_never_ends_the_hand_off_by_itself(desk: Desk):
    # Given a hand-off of a two-step login (no bot check anywhere), auto_done on
    desk.open("/login")
    done = desk.hand_off(after=None, reason="log in to the bank", selector="#login")
    assert done["handoff"]["auto_done"] is True and done["handoff"]["region"] == "selector"

    # When the person clicks into the email field and the client checks on release
    click(desk, "#email")
    desk.provider.script_when(CHECKER, Reply("unsolved"), Reply("unsolved"), Reply("solved"))
    first = desk.check().json()

    # Then nothing recognisable having gone, the model decides, and it is not done
    assert first["state"] == "unsolved" and first["done"] is False

    # When the first step takes the named form away (the password step replaces it)
    assert desk.input(type="type", text="ana@example.com").status_code == 200
    assert desk.input(type="key", key="Enter").status_code == 200
    desk.pool.submit(desk.sid, lambda page: page.wait_for_selector("#password"), open_if_missing=False)
    assert desk.evaluate("document.getElementById('login')") is None
    spaced()
    second = desk.check().json()

    # Then a selector that stopped matching is not an ending either: still the model's call, still not done
    assert second["state"] == "unsolved" and second["done"] is False

    # And only when the person gets through does it end
    click(desk, "#password")
    desk.input(type="type", text="hunter2")
    desk.input(type="key", key="Enter")
    desk.pool.submit(desk.sid, lambda page: page.wait_for_url("**/account"), open_if_missing=False)
    spaced()
    third = desk.check().json()
    assert third["state"] == "solved" and third["done"] is True
    assert len(desk.checker_requests()) == 3


def test_a_consent_dialog_does_not_end_the_hand_off_by_itself(desk: Desk):
    desk.open("/consent")
    desk.hand_off(after=None, reason="accept the cookie dialog", selector="#consent")
    desk.provider.script_when(CHECKER, Reply("unsolved"))
    click(desk, "#accept")
    assert desk.evaluate("window.__log") == ["accepted"]
    r = desk.check().json()
    assert r["state"] == "unsolved" and r["done"] is False  # not `gone`: no bot check was ever on screen
    assert len(desk.checker_requests()) == 1


def test_too_soon_then_checked_enough(desk: Desk, monkeypatch: pytest.MonkeyPatch):
    desk.open("/login")
    desk.hand_off(after=None, reason="log in to the bank")
    monkeypatch.setattr(rules, "MAX_CHECKS", 2)
    monkeypatch.setattr(rules, "CHECK_SPACING_SECONDS", 0.6)
    desk.provider.script_when(CHECKER, Reply("unsolved"), Reply("unsolved"))

    first = desk.check().json()
    assert first["state"] == "unsolved" and first["will_check_again"] is True
    soon = desk.check().json()
    assert soon == {"checked": False, "done": False, "state": None, "reason": "too_soon", "will_check_again": True}

    time.sleep(0.7)
    last = desk.check().json()
    assert last["state"] == "unsolved" and last["will_check_again"] is False  # that was the last one
    time.sleep(0.7)
    enough = desk.check().json()
    assert enough == {
        "checked": False,
        "done": False,
        "state": None,
        "reason": "checked_enough",
        "will_check_again": False,
    }
    assert len(desk.checker_requests()) == 2


def test_autodetect_switched_off_for_the_project(desk: Desk):
    desk.api.configure(desk.project, handoff_autodetect=False)
    desk.open("/widget")
    done = desk.hand_off(after=None, reason="pass the captcha", auto_done=True)
    assert done["handoff"]["auto_done"] is False  # nothing would ever answer a poll
    r = desk.check().json()
    assert r == {
        "checked": False,
        "done": False,
        "state": None,
        "reason": "autodetect_disabled",
        "will_check_again": False,
    }
    assert desk.checker_requests() == []


def test_autodetect_switched_off_for_the_deployment(desk: Desk, monkeypatch: pytest.MonkeyPatch):
    from oberik.settings import get_settings

    desk.open("/widget")
    desk.hand_off(after=None, reason="pass the captcha")
    monkeypatch.setenv("OBERIK_ENABLE_HANDOFF_AUTODETECT", "false")
    get_settings.cache_clear()
    assert desk.check().json()["reason"] == "autodetect_disabled"


def test_nothing_to_check_without_a_hand_off_or_with_auto_done_off(desk: Desk):
    assert desk.check().json()["reason"] == "nothing_to_check"
    desk.open("/widget")
    desk.hand_off(after=None, reason="pass the captcha", auto_done=False)
    r = desk.check().json()
    assert r["reason"] == "nothing_to_check" and r["will_check_again"] is False


def test_only_the_owner_can_check(desk: Desk):
    desk.open("/widget")
    desk.hand_off(after=None, reason="pass the captcha")
    other = desk.api.token(desk.project, subject="mallory")
    r = desk.check(token=other)
    assert r.status_code == 404 and r.json()["code"] == "session_not_found"
