"""Pauses for a person and for the client, through the real state machine with the scripted provider."""

from __future__ import annotations

import json
from typing import Any

import pytest

from oberik.domain import pauses
from oberik.local.scripted_provider import Reply
from tests.api_fixtures import Api, Project, table_items

LOOKUP = {
    "type": "function",
    "function": {
        "name": "lookup_order",
        "description": "Look up one of the signed-in customer's orders.",
        "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]},
    },
}
CANCEL = {
    "type": "function",
    "function": {
        "name": "cancel_booking",
        "description": "Cancel a booking. Irreversible: the slot is released to the market immediately.",
        "parameters": {"type": "object", "properties": {"booking_id": {"type": "string"}}},
    },
    "requires_approval": True,
}


def call(name: str, call_id: str, **arguments: Any) -> dict[str, Any]:
    return {"id": call_id, "name": name, "arguments": arguments}


def tool_messages(request: dict[str, Any]) -> dict[str, str]:
    return {m["tool_call_id"]: m["content"] for m in request["messages"] if m["role"] == "tool"}


def offered(request: dict[str, Any]) -> list[str]:
    return [t["function"]["name"] for t in request.get("tools", [])]


# --- client tools -----------------------------------------------------------------------------------


def test_a_client_tool_call_pauses_the_turn_and_its_result_continues_it(api: Api, token: str, provider):
    # Given a model that calls the client's tool, then answers from its result
    provider.script(Reply(tool_calls=[call("lookup_order", "c1", order_id="o_7")]), Reply(text="It shipped."))

    # When the turn runs
    paused = api.chat(token, message="Where is order o_7?", client_tools=[LOOKUP])

    # Then it comes back waiting on the client, with the call to run
    assert paused.status_code == 200, paused.text
    body = paused.json()
    assert body["requires_action"] is True
    assert body["tool_calls"] == [{"id": "c1", "name": "lookup_order", "args": {"order_id": "o_7"}}]
    assert body["approvals"] == [] and body["questions"] == []

    # And the result sent back continues the same turn
    done = api.chat(
        token,
        session_id=body["session_id"],
        client_tools=[LOOKUP],
        tool_results=[{"tool_call_id": "c1", "content": {"status": "shipped"}}],
    )
    assert done.status_code == 200, done.text
    assert done.json()["content"] == "It shipped." and done.json()["requires_action"] is False
    assert json.loads(tool_messages(provider.requests[-1])["c1"]) == {"status": "shipped"}


def test_client_tools_are_bound_whatever_allowed_tools_says(api: Api, token: str, provider):
    provider.script(Reply(text="ok"))
    api.chat(token, message="hi", client_tools=[LOOKUP], allowed_tools=[])
    assert offered(provider.requests[0]) == ["lookup_order"]


def test_several_calls_in_one_step_come_back_together(api: Api, token: str, provider):
    provider.script(
        Reply(tool_calls=[call("lookup_order", "a", order_id="1"), call("lookup_order", "b", order_id="2")]),
        Reply(text="Both found."),
    )
    body = api.chat(token, message="orders 1 and 2?", client_tools=[LOOKUP]).json()
    assert [c["id"] for c in body["tool_calls"]] == ["a", "b"]
    done = api.chat(
        token,
        session_id=body["session_id"],
        tool_results=[{"tool_call_id": "a", "content": "one"}, {"tool_call_id": "b", "content": "two"}],
    )
    assert done.json()["content"] == "Both found."
    assert tool_messages(provider.requests[-1]) == {"a": "one", "b": "two"}


def test_a_bad_resume_is_refused_clearly_and_changes_nothing(api: Api, token: str, provider):
    # Given a turn waiting on two results
    provider.script(
        Reply(tool_calls=[call("lookup_order", "a", order_id="1"), call("lookup_order", "b", order_id="2")]),
        Reply(text="Done."),
    )
    sid = api.chat(token, message="two orders", client_tools=[LOOKUP]).json()["session_id"]
    before = len(table_items())

    # When results are missing, unknown, or not a resume at all, it is refused and nothing is written
    missing = api.chat(token, session_id=sid, tool_results=[{"tool_call_id": "a", "content": "x"}])
    assert missing.status_code == 400 and "missing results for b" in missing.json()["detail"]
    unknown = api.chat(
        token,
        session_id=sid,
        tool_results=[{"tool_call_id": "a", "content": "x"}, {"tool_call_id": "zzz", "content": "y"}],
    )
    assert unknown.status_code == 400 and "zzz" in unknown.json()["detail"]
    new_message = api.chat(token, session_id=sid, message="never mind")
    assert new_message.status_code == 409 and "tool_results for a, b" in new_message.json()["detail"]
    wrong_kind = api.chat(token, session_id=sid, approval_decisions=[{"approved": True}])
    assert wrong_kind.status_code == 400
    assert len(table_items()) == before
    assert len(provider.requests) == 1

    # And the right resume, sent twice (a retry), is applied once
    good = [{"tool_call_id": "a", "content": "x"}, {"tool_call_id": "b", "content": "y"}]
    first = api.chat(token, session_id=sid, tool_results=good)
    again = api.chat(token, session_id=sid, tool_results=good)
    assert first.json()["run_id"] == again.json()["run_id"] and again.json()["content"] == "Done."
    assert len(provider.requests) == 2

    # And a result that was already applied is a 409
    repeat = api.chat(token, session_id=sid, tool_results=[{"tool_call_id": "a", "content": "other"}])
    assert repeat.status_code == 409


def test_declared_tools_are_checked(api: Api, token: str):
    bad_name = {"type": "function", "function": {"name": "has space"}}
    clash = {"type": "function", "function": {"name": "current_time"}}
    bad_flag = {"type": "function", "function": {"name": "x"}, "requires_approval": "yes"}
    for tools in ([bad_name], [clash], [LOOKUP, LOOKUP], [bad_flag]):
        r = api.chat(token, message="hi", client_tools=tools)
        assert r.status_code == 400 and "client_tools" in r.json()["detail"], r.text


# --- approvals --------------------------------------------------------------------------------------


def test_a_gated_client_tool_comes_back_as_an_approval_then_as_the_identical_call(api: Api, token: str, provider):
    # Given a gated tool the model calls
    provider.script(Reply(tool_calls=[call("cancel_booking", "g1", booking_id="NW-3009")]), Reply(text="Cancelled."))
    body = api.chat(token, message="cancel NW-3009", client_tools=[CANCEL]).json()

    # Then the call is held back as an approval, carrying the call itself, and tool_calls is empty
    assert body["requires_action"] is True and body["tool_calls"] == []
    assert body["approvals"] == [
        {
            "tool_call_id": "g1",
            "action": "Cancel a booking. Irreversible: the slot is released to the market immediately.",
            "detail": "booking_id: NW-3009",
            "tool": "cancel_booking",
            "arguments": {"booking_id": "NW-3009"},
        }
    ]

    # When it is approved, the identical call is handed over on the next round, with no model call between
    approved = api.chat(token, session_id=body["session_id"], approval_decisions=[{"approved": True}]).json()
    assert approved["requires_action"] is True and approved["approvals"] == []
    assert approved["tool_calls"] == [{"id": "g1", "name": "cancel_booking", "args": {"booking_id": "NW-3009"}}]
    assert len(provider.requests) == 1

    # And its result continues the turn
    done = api.chat(token, session_id=body["session_id"], tool_results=[{"tool_call_id": "g1", "content": "ok"}])
    assert done.json()["content"] == "Cancelled."


def test_refusing_a_gated_tool_tells_the_model_in_the_same_words_as_any_refusal(api: Api, token: str, provider):
    provider.script(Reply(tool_calls=[call("cancel_booking", "g1", booking_id="NW-1")]), Reply(text="Stopped."))
    sid = api.chat(token, message="cancel it", client_tools=[CANCEL]).json()["session_id"]
    done = api.chat(token, session_id=sid, approval_decisions=[{"approved": False, "tool_call_id": "g1"}])
    assert done.json()["content"] == "Stopped." and done.json()["tool_calls"] == []
    assert tool_messages(provider.requests[-1])["g1"] == pauses.REFUSAL


def test_the_model_asks_for_approval_and_a_refusal_with_a_note_stops_the_work(api: Api, token: str, provider):
    # Given a model that asks before sending mail
    provider.script(
        Reply(
            tool_calls=[
                call(
                    "request_approval",
                    "r1",
                    action="Email the Q3 numbers to finance",
                    detail="To: finance@acme.com",
                    consequence="It cannot be unsent",
                )
            ]
        ),
        Reply(text="Understood, I did not send it. Where should it go?"),
    )
    body = api.chat(token, message="email the Q3 numbers to finance").json()

    # Then the approval names what would happen, with tool null
    assert body["tool_calls"] == []
    assert body["approvals"] == [
        {
            "tool_call_id": "r1",
            "action": "Email the Q3 numbers to finance",
            "detail": "To: finance@acme.com",
            "consequence": "It cannot be unsent",
            "tool": None,
            "arguments": None,
        }
    ]

    # When it is refused with a note (one outstanding: no id needed)
    done = api.chat(
        token,
        session_id=body["session_id"],
        approval_decisions=[{"approved": False, "note": "use finance@acme.eu instead"}],
    )

    # Then the model is told to stop, with the note, and asks what to do instead
    told = tool_messages(provider.requests[-1])["r1"]
    assert told.startswith(pauses.REFUSAL) and "use finance@acme.eu instead" in told
    assert done.json()["content"].endswith("Where should it go?")


def test_an_undecided_approval_stays_outstanding_and_is_announced_again(api: Api, token: str, provider):
    provider.script(
        Reply(
            tool_calls=[
                call("request_approval", "r1", action="Send mail A"),
                call("request_approval", "r2", action="Send mail B"),
            ]
        ),
        Reply(text="Sent A, not B."),
    )
    sid = api.chat(token, message="send both").json()["session_id"]
    ambiguous = api.chat(token, session_id=sid, approval_decisions=[{"approved": True}])
    assert ambiguous.status_code == 400 and "tool_call_id" in ambiguous.json()["detail"]

    partial = api.chat(token, session_id=sid, approval_decisions=[{"approved": True, "tool_call_id": "r1"}]).json()
    assert partial["requires_action"] is True
    assert [a["tool_call_id"] for a in partial["approvals"]] == ["r2"]
    assert len(provider.requests) == 1  # silence is neither yes nor no: the model waits

    done = api.chat(token, session_id=sid, approval_decisions=[{"approved": False, "tool_call_id": "r2"}]).json()
    assert done["content"] == "Sent A, not B."
    told = tool_messages(provider.requests[-1])
    assert told["r1"].startswith(pauses.APPROVED) and told["r2"].startswith(pauses.REFUSAL)


def test_approvals_without_the_capability_or_switched_off_are_not_offered(api: Api, scripted_project, provider):
    provider.script(Reply(text="a"), Reply(text="b"))
    token = api.token(scripted_project)
    api.chat(token, message="x", enable_approvals=False)
    api.chat(api.token(scripted_project, capabilities=["chat"]), message="y")
    assert "request_approval" not in offered(provider.requests[0])
    assert offered(provider.requests[1]) == []


# --- questions --------------------------------------------------------------------------------------

QUESTION = {
    "header": "Scope",
    "question": "Which fetchers?",
    "options": ["forfaits-* only", "box-* too"],
    "multi_select": False,
}


def test_the_model_asks_a_question_and_the_answer_reaches_it(api: Api, token: str, provider):
    provider.script(Reply(tool_calls=[call("ask_user", "q1", questions=[QUESTION])]), Reply(text="Migrating both."))
    body = api.chat(token, message="migrate the fetchers").json()
    assert body["requires_action"] is True and body["tool_calls"] == []
    (batch,) = body["questions"]
    assert batch["tool_call_id"] == "q1"
    assert batch["questions"][0] == {
        "id": "Scope",
        "header": "Scope",
        "question": "Which fetchers?",
        "options": [{"label": "forfaits-* only"}, {"label": "box-* too"}],
        "multi_select": False,
        "allow_other": True,
    }
    done = api.chat(
        token,
        session_id=body["session_id"],
        answers={
            "tool_call_id": "q1",
            "answers": [{"question_id": "Scope", "selected": ["box-* too"], "text": "and archived"}],
        },
    )
    assert done.json()["content"] == "Migrating both."
    answer = json.loads(tool_messages(provider.requests[-1])["q1"])
    assert answer["answers"][0]["selected"] == ["box-* too"] and answer["answers"][0]["text"] == "and archived"


def test_chat_instead_drops_the_question(api: Api, token: str, provider):
    provider.script(Reply(tool_calls=[call("ask_user", "q1", questions=[QUESTION])]), Reply(text="Fine, both."))
    sid = api.chat(token, message="migrate").json()["session_id"]
    api.chat(token, session_id=sid, answers={"tool_call_id": "q1", "chat_instead": True})
    assert tool_messages(provider.requests[-1])["q1"] == pauses.CHAT_INSTEAD


def test_an_answer_that_picks_an_option_not_offered_is_a_400(api: Api, token: str, provider):
    provider.script(Reply(tool_calls=[call("ask_user", "q1", questions=[QUESTION])]))
    sid = api.chat(token, message="migrate").json()["session_id"]
    r = api.chat(
        token,
        session_id=sid,
        answers={"tool_call_id": "q1", "answers": [{"question_id": "Scope", "selected": ["everything"]}]},
    )
    assert r.status_code == 400 and "everything" in r.json()["detail"]
    r = api.chat(
        token, session_id=sid, answers={"tool_call_id": "q1", "answers": [{"question_id": "Nope", "text": "x"}]}
    )
    assert r.status_code == 400 and "Nope" in r.json()["detail"]


def test_ask_user_is_not_offered_when_switched_off(api: Api, token: str, provider):
    provider.script(Reply(text="ok"))
    api.chat(token, message="x", enable_ask_user=False)
    assert "ask_user" not in offered(provider.requests[0])


# --- three pauses in one turn ----------------------------------------------------------------------------


def test_a_turn_that_pauses_three_times_then_completes_in_one_execution(api: Api, token: str, provider):
    from tests.workflow.test_turn_loop import _executions, _states_entered, _turn_of

    provider.script(
        Reply(tool_calls=[call("lookup_order", "c1", order_id="o_1")]),
        Reply(tool_calls=[call("request_approval", "r1", action="Refund order o_1")]),
        Reply(
            tool_calls=[
                call(
                    "ask_user",
                    "q1",
                    questions=[{"header": "Method", "question": "Refund how?", "options": ["card", "credit"]}],
                )
            ]
        ),
        Reply(text="Refunded to card."),
    )
    first = api.chat(token, message="refund o_1", client_tools=[LOOKUP]).json()
    sid = first["session_id"]
    second = api.chat(token, session_id=sid, tool_results=[{"tool_call_id": "c1", "content": "paid by card"}]).json()
    third = api.chat(token, session_id=sid, approval_decisions=[{"approved": True}]).json()
    done = api.chat(
        token,
        session_id=sid,
        answers={"tool_call_id": "q1", "answers": [{"question_id": "Method", "selected": ["card"]}]},
    ).json()
    assert [
        first["tool_calls"][0]["id"],
        second["approvals"][0]["tool_call_id"],
        third["questions"][0]["tool_call_id"],
    ] == ["c1", "r1", "q1"]
    assert done["content"] == "Refunded to card." and done["requires_action"] is False
    (execution,) = _executions(_turn_of(done["run_id"]))
    assert execution["status"] == "SUCCEEDED"
    assert _states_entered(execution["executionArn"]) == [
        "Step",
        "Route",
        "Park",
        "Step",
        "Route",
        "Park",
        "Step",
        "Route",
        "Park",
        "Step",
        "Route",
        "Finish",
        "Finished",
        "Done",
    ]


# --- plans -------------------------------------------------------------------------------------------


def test_plan_items_keep_their_numbers_after_deletions(api: Api, token: str, provider):
    # Given a model that writes a plan, removes step 1, adds one and ticks step 3 off
    provider.script(
        Reply(tool_calls=[call("todo_write", "t1", items=["read the fetchers", "migrate forfaits", "migrate box"])]),
        Reply(tool_calls=[call("todo_remove", "t2", n=1), call("todo_write", "t3", items=["run the tests"])]),
        Reply(tool_calls=[call("todo_update", "t4", n=3, status="done")]),
        Reply(text="Planned."),
        Reply(text="Carrying on."),
    )
    r = api.chat(token, message="migrate every fetcher")
    body = r.json()

    # Then numbers are never reused and the final state comes back on the turn and the route
    expected = [
        {"n": 2, "text": "migrate forfaits", "status": "pending"},
        {"n": 3, "text": "migrate box", "status": "done"},
        {"n": 4, "text": "run the tests", "status": "pending"},
    ]
    assert body["todos"] == expected
    assert api.get(f"/chat/sessions/{body['session_id']}/todos", token).json()["todos"] == expected
    assert json.loads(tool_messages(provider.requests[2])["t3"])["todos"][-1]["n"] == 4

    # And the plan is in the model's context on the next turn, without a call to read it
    api.chat(token, message="continue", session_id=body["session_id"])
    system = provider.requests[-1]["messages"][0]["content"]
    assert "3. [x] migrate box" in system and "4. [ ] run the tests" in system
    assert "genuinely multi-step" in system


def test_a_plan_step_that_does_not_exist_is_an_error_to_the_model(api: Api, token: str, provider):
    provider.script(Reply(tool_calls=[call("todo_update", "t1", n=99, status="done")]), Reply(text="ok"))
    api.chat(token, message="x")
    assert "no step 99" in tool_messages(provider.requests[-1])["t1"]


# --- UI components -----------------------------------------------------------------------------------

CHART = {
    "type": "function",
    "function": {"name": "show_chart", "description": "Draw a chart.", "parameters": {"type": "object"}},
}


def test_a_ui_component_draws_without_pausing_and_the_model_is_told(api: Api, token: str, provider):
    provider.script(
        Reply(
            tool_calls=[
                call("show_chart", "u1", title="Q3", points=[1, 2, 3]),
                call("show_chart", "u2", title="Q4", points=[4]),
            ]
        ),
        Reply(text="Here is how that trended."),
    )
    body = api.chat(token, message="chart Q3 and Q4", ui_tools=[CHART]).json()
    assert body["requires_action"] is False and body["content"] == "Here is how that trended."
    assert body["ui"] == [
        {"tool_call_id": "u1", "name": "show_chart", "props": {"title": "Q3", "points": [1, 2, 3]}},
        {"tool_call_id": "u2", "name": "show_chart", "props": {"title": "Q4", "points": [4]}},
    ]
    told = tool_messages(provider.requests[-1])
    assert "instead of repeating" in told["u1"]


def test_ui_payloads_are_capped_and_a_turn_draws_at_most_40(api: Api, token: str, provider):
    many = [call("show_chart", f"u{i}", i=i) for i in range(41)]
    big = call("show_chart", "big", blob="x" * 20_000)
    provider.script(Reply(tool_calls=[*many, big]), Reply(text="Drawn."))
    body = api.chat(token, message="draw a lot", ui_tools=[CHART]).json()
    assert len(body["ui"]) == 40
    told = tool_messages(provider.requests[-1])
    assert "at most 40" in told["u40"]
    assert "at most 40" in told["big"] or "bytes" in told["big"]


# --- unattended turns -----------------------------------------------------------------------------------


def test_an_unattended_turn_is_never_offered_ask_user_but_approvals_still_pause(api: Api, project: Project):
    from oberik.adapters.dynamodb import DynamoStore
    from oberik.api.deps import load_project
    from oberik.domain.chat import ChatRequest
    from oberik.domain.identity import TokenClaims
    from oberik.engine.turns import TurnStarter

    stored = load_project(DynamoStore(), project.id)
    assert stored is not None
    claims = TokenClaims(
        sub="cron",
        pid=project.id,
        tenant_id=project.id,
        capabilities=list(stored.settings.capabilities),
        iat=0,
        exp=2**40,
        jti="x",
    )
    starter = TurnStarter(DynamoStore(), None, lambda name: (None, name), "offline/x")
    plan = starter.plan(ChatRequest(message="nightly report"), stored, claims, unattended=True)
    assert "ask_user" not in plan.tools and "request_approval" in plan.tools
    assert plan.unattended is True


@pytest.mark.parametrize("field", ["tool_results", "approval_decisions"])
def test_resuming_a_conversation_with_nothing_paused_is_a_409(api: Api, token: str, provider, field: str):
    provider.script(Reply(text="done"))
    sid = api.chat(token, message="hi").json()["session_id"]
    r = api.chat(token, session_id=sid, **{field: []})
    assert r.status_code == 409 and r.json()["code"] == "nothing_to_resume"
