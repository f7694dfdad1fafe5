"""The hand-off tools inside real scripted turns: a blocking hand-off pauses the turn and handoff_done resumes it
through the task token; an open one lets the agent carry on; an unattended turn is told the page is gated."""

from __future__ import annotations

import json

import pytest

from oberik.local.scripted_provider import Reply
from tests.handoff.conftest import Desk, call


def tool_messages(request: dict) -> dict[str, str]:
    return {m["tool_call_id"]: m["content"] for m in request["messages"] if m["role"] == "tool"}


def test_a_blocking_hand_off_pauses_the_turn_and_handoff_done_resumes_it(desk: Desk):
    # Given the agent's page is a bot check
    desk.open("/widget")

    # When the agent hands the widget over, blocking
    done = desk.hand_off(after=None, reason="pass the captcha", selector="#captcha")

    # Then the turn stops with the hand-off to render, and nothing for a client to run
    assert done["requires_action"] is True
    assert done["tool_calls"] == [] and done["approvals"] == [] and done["questions"] == []
    h = done["handoff"]
    assert h["blocking"] is True and h["mode"] == "blocking" and h["active"] is True
    assert h["region"] == "selector" and h["matched"] is True
    assert h["auto_done"] is True and h["interactive"] is True
    assert h["url"].endswith("/widget")
    run = desk.api.get(f"/chat/sessions/{desk.sid}/run", desk.token).json()
    assert run["status"] == "idle" and run["waiting"]["handoff"]["id"] == h["id"]  # what a reloaded page shows

    # And a new message is refused while it waits, naming what it waits on
    r = desk.api.chat(desk.token, session_id=desk.sid, message="hello?")
    assert r.status_code == 409 and "handoff_done" in r.json()["detail"]

    # When the person presses Done
    desk.provider.script(Reply("Thanks, the order shipped on Monday."))
    r = desk.api.chat(desk.token, session_id=desk.sid, handoff_done=True)

    # Then the same turn carries on: the agent reads that the person finished, and answers
    assert r.status_code == 200, r.text
    assert r.json()["content"] == "Thanks, the order shipped on Monday."
    assert r.json()["requires_action"] is False and r.json()["handoff"] is None
    last = desk.provider.requests[-1]
    result = tool_messages(last)["hand1"]
    assert "finished" in result and "browser_read" in result

    # And the hand-off is over: the routes say so, and a second Done has nothing to resume
    assert desk.check().json()["reason"] == "nothing_to_check"
    assert desk.frame().status_code == 409
    again = desk.api.chat(desk.token, session_id=desk.sid, handoff_done=True)
    assert again.status_code in (200, 409)
    if again.status_code == 200:  # the same resume sent twice attaches to the run it started
        assert again.json()["run_id"] == r.json()["run_id"]


def test_the_browser_handoff_frame_and_done_are_streamed(desk: Desk):
    desk.open("/widget")
    desk.provider.script(Reply(tool_calls=[call("browser_handoff", "hand1", reason="pass the captcha")]))
    with desk.api.client.stream(
        "POST", "/chat/stream", json={"session_id": desk.sid, "message": "go"}, headers=desk.api.bearer(desk.token)
    ) as r:
        text = "".join(r.iter_text())
    from tests.api_fixtures import parse_sse

    events, _ = parse_sse(text)
    kinds = [e.event for e in events]
    assert "browser_handoff" in kinds and kinds[-1] == "done"
    frame = next(e.data for e in events if e.event == "browser_handoff")
    assert frame["blocking"] is True and frame["region"] == "detected" and frame["matched"] is False
    assert events[-1].data["handoff"]["id"] == frame["id"]
    assert events[-1].data["requires_action"] is True


def test_handoff_done_is_validated(desk: Desk):
    desk.open("/widget")
    desk.hand_off(after=None, reason="pass the captcha")
    r = desk.api.chat(desk.token, session_id=desk.sid, handoff_done=False)
    assert r.status_code == 400 and "handoff_done" in r.json()["detail"]
    for lax in ("maybe", "yes", "true", 1):
        r = desk.api.chat(desk.token, session_id=desk.sid, handoff_done=lax)
        assert r.status_code in (400, 422) and "handoff_done" in r.json()["detail"], lax
    r = desk.api.chat(
        desk.token, session_id=desk.sid, handoff_done=True, tool_results=[{"tool_call_id": "x", "content": "1"}]
    )
    assert r.status_code == 400 and "tool_results" in r.json()["detail"]


def test_handoff_done_on_a_turn_that_waits_on_something_else_is_refused(desk: Desk):
    desk.provider.script(Reply(tool_calls=[call("request_approval", "a1", action="Send the email")]))
    r = desk.api.chat(desk.token, session_id=desk.sid, message="send it")
    assert r.json()["requires_action"] is True and r.json()["handoff"] is None
    r = desk.api.chat(desk.token, session_id=desk.sid, handoff_done=True)
    assert r.status_code == 400 and "approval_decisions" in r.json()["detail"]


def test_an_open_hand_off_lets_the_agent_carry_on_and_it_closes_it_itself(desk: Desk):
    desk.open("/consent")
    done = desk.hand_off(reason="have a look at the consent dialog", mode="open", selector="#consent")

    # The turn finished, and the hand-off it left open is on the response
    assert done["requires_action"] is False and done["content"] == "Carrying on."
    assert done["handoff"]["mode"] == "open" and done["handoff"]["blocking"] is False
    assert done["handoff"]["auto_done"] is False and done["handoff"]["active"] is True
    told = tool_messages(desk.provider.requests[-1])["hand1"]
    assert "browser_handoff_end" in told and "auto_done" not in told

    # An open hand-off never ends itself: nothing to poll
    assert desk.check().json() == {
        "checked": False,
        "done": False,
        "state": None,
        "reason": "nothing_to_check",
        "will_check_again": False,
    }
    assert desk.frame().status_code == 200

    # When the agent closes it
    desk.provider.script(Reply(tool_calls=[call("browser_handoff_end", "end1")]), Reply("Closed it."))
    r = desk.api.chat(desk.token, session_id=desk.sid, message="done looking")
    assert r.status_code == 200 and r.json()["handoff"] is None
    assert "closed" in tool_messages(desk.provider.requests[-1])["end1"]
    assert desk.frame().status_code == 409


def test_a_selector_that_misses_falls_back_and_the_agent_is_told(desk: Desk):
    desk.open("/widget")
    done = desk.hand_off(reason="pass the captcha", mode="open", selector="#no-such-thing")
    assert done["handoff"]["region"] == "detected" and done["handoff"]["matched"] is False
    told = tool_messages(desk.provider.requests[-1])["hand1"]
    assert "'#no-such-thing' matched nothing" in told and "bot-check widget" in told

    desk.open("/account")
    done = desk.hand_off(reason="look at the balance", mode="open", selector="#nope")
    assert done["handoff"]["region"] == "viewport"
    assert "whole page" in tool_messages(desk.provider.requests[-1])["hand1"]


def test_a_vague_reason_cannot_arm_auto_done_and_the_agent_hears_why(desk: Desk):
    desk.open("/login")
    done = desk.hand_off(after=None, reason="help me", auto_done=True)
    assert done["handoff"]["auto_done"] is False
    assert desk.check().json()["reason"] == "nothing_to_check"


def test_bad_arguments_are_a_tool_error_the_agent_reads(desk: Desk):
    desk.open("/widget")
    done = desk.hand_off(reason="pass the captcha", mode="sideways")
    assert done["requires_action"] is False and done["handoff"] is None
    told = json.loads(tool_messages(desk.provider.requests[-1])["hand1"])
    assert "mode" in told["error"]


def test_without_a_page_the_agent_is_told_to_open_one(desk: Desk):
    done = desk.hand_off(reason="pass the captcha")
    assert done["handoff"] is None
    assert "browser_goto" in tool_messages(desk.provider.requests[-1])["hand1"]


def test_an_unattended_turn_is_told_the_page_is_gated_and_nothing_waits(desk: Desk):
    # Given a conversation whose page is a bot check, and a turn nobody is watching (as a scheduled task runs)
    from oberik.adapters.dynamodb import DynamoStore
    from oberik.adapters.stepfunctions import StepFunctionsOrchestrator
    from oberik.domain.chat import ChatRequest
    from oberik.domain.identity import read_token
    from oberik.engine.handlers import response_for
    from oberik.engine.models import resolver_for
    from oberik.engine.turns import TurnStarter, wait_for_run
    from oberik.settings import get_settings

    desk.open("/widget")
    store = DynamoStore()
    project = store.get_project(desk.project.id)
    claims = read_token(desk.token, project.signing_secret.get_secret_value(), 0)
    settings = get_settings()
    starter = TurnStarter(
        store, StepFunctionsOrchestrator(settings), resolver_for(project.settings.providers, settings), "x"
    )
    req = ChatRequest(message="nightly: check the order", session_id=desk.sid)
    plan = starter.plan(req, project, claims, unattended=True)
    assert "browser_handoff" in plan.tools
    session, created = starter.session_for(req, project, claims)
    desk.provider.script(
        Reply(tool_calls=[call("browser_handoff", "hand1", reason="pass the captcha")]),
        Reply("The order page is behind a bot check and needs a person."),
    )
    started = starter._begin(req, project, claims, session, created, plan, blocking=True)
    run = wait_for_run(store, started.run.id, timeout=60, poll=0.02)

    # Then the turn ends on its own, with no hand-off waiting, and the agent was told why
    assert run.status == "completed"
    assert run.result["requires_action"] is False and run.result["handoff"] is None
    told = tool_messages(desk.provider.requests[-1])["hand1"]
    assert "unattended" in told and "gated" in told and "hcaptcha" in told
    assert store.active_handoff(desk.sid) is None
    assert response_for is not None


def test_on_the_lambda_backend_the_tool_looks_for_the_page_in_the_browser_host(
    desk: Desk, monkeypatch: pytest.MonkeyPatch
):
    """A page in this process's pool is not the deployment's page when pages live in the browser Lambda: the tool
    asks the host (through the table), finds none serving this conversation, and says so instead of arming."""
    from oberik.settings import get_settings

    desk.open("/widget")
    monkeypatch.setenv("OBERIK_BROWSER_BACKEND", "lambda")
    get_settings.cache_clear()
    done = desk.hand_off(reason="pass the captcha")
    assert done["handoff"] is None and done["requires_action"] is False
    assert "no browser page is open" in json.loads(tool_messages(desk.provider.requests[-1])["hand1"])["error"]
