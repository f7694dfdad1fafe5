"""`chat.run`: client tools dispatched until the turn is done, and approvals never dispatched by accident."""

from __future__ import annotations

import json
from typing import Any

from oberik.client import Client, Tool
from oberik.domain import pauses
from oberik.local.scripted_provider import Reply, ScriptedProvider


def call(name: str, call_id: str, **arguments: Any) -> dict[str, Any]:
    return {"id": call_id, "name": name, "arguments": arguments}


def tool_messages(request: dict[str, Any]) -> dict[str, str]:
    return {m["tool_call_id"]: m["content"] for m in request["messages"] if m["role"] == "tool"}


def offered(request: dict[str, Any]) -> list[str]:
    return [t["function"]["name"] for t in request.get("tools", [])]


class Booking:
    """Two client tools over a tiny booking system, and a log of what actually ran."""

    def __init__(self) -> None:
        self.log: list[str] = []

    def lookup(self, booking_id: str) -> dict[str, str]:
        self.log.append(f"lookup {booking_id}")
        return {"booking_id": booking_id, "status": "confirmed"}

    def cancel(self, booking_id: str) -> str:
        self.log.append(f"cancel {booking_id}")
        return "cancelled"

    def tools(self) -> list[Tool]:
        schema = {"type": "object", "properties": {"booking_id": {"type": "string"}}, "required": ["booking_id"]}
        return [
            Tool("lookup_booking", "Look up one of the user's bookings.", schema, self.lookup),
            Tool(
                "cancel_booking",
                "Cancel a booking. Irreversible: the slot is released to the market immediately.",
                schema,
                self.cancel,
                requires_approval=True,
            ),
        ]


def test_run_goes_through_two_client_tools_and_an_approval(live: str, token: str, provider: ScriptedProvider):
    # Given a model that looks a booking up, then cancels it (a tool that needs approval), then answers
    provider.script(
        Reply(tool_calls=[call("lookup_booking", "c1", booking_id="NW-3009")]),
        Reply(tool_calls=[call("cancel_booking", "c2", booking_id="NW-3009")]),
        Reply(text="NW-3009 is cancelled."),
    )
    booking = Booking()
    approvals: list[dict[str, Any]] = []

    def on_approval(request: dict[str, Any]) -> bool:
        booking.log.append(f"asked {request['tool']}")
        approvals.append(request)
        return True

    # When the turn is run with both tools and an approval handler
    done = Client(live, token=token, tools=booking.tools()).chat.run(
        message="cancel NW-3009 if it is confirmed", on_approval=on_approval
    )

    # Then both tools ran, the gated one only after it was approved, and the turn finished
    assert done.content == "NW-3009 is cancelled." and done.requires_action is False
    assert booking.log == ["lookup NW-3009", "asked cancel_booking", "cancel NW-3009"]
    assert approvals[0]["arguments"] == {"booking_id": "NW-3009"}
    assert approvals[0]["action"].startswith("Cancel a booking. Irreversible")
    # And the results reached the model, with both tools declared on every model call
    assert json.loads(tool_messages(provider.requests[1])["c1"])["status"] == "confirmed"
    assert tool_messages(provider.requests[2])["c2"] == "cancelled"
    assert all({"lookup_booking", "cancel_booking"} <= set(offered(r)) for r in provider.requests)


def test_without_on_approval_run_returns_the_approval_and_never_runs_the_gated_tool(live: str, token: str, provider):
    # Given a model that goes straight for the gated tool
    provider.script(Reply(tool_calls=[call("cancel_booking", "c1", booking_id="NW-1")]), Reply(text="Stopped."))
    booking = Booking()
    client = Client(live, token=token, tools=booking.tools())

    # When it is run with no approval handler
    paused = client.chat.run(message="cancel NW-1")

    # Then the response waits on a decision, and the handler was never reached
    assert paused.requires_action is True and paused.tool_calls == []
    assert [a["tool"] for a in paused.approvals] == ["cancel_booking"]
    assert booking.log == []

    # And deciding it (no) finishes the turn without running it
    done = client.chat.decide(paused.session_id, False, note="keep it")
    assert done.content == "Stopped." and booking.log == []
    assert tool_messages(provider.requests[-1])["c1"].startswith(pauses.REFUSAL)


def test_a_tool_that_raises_is_reported_to_the_model_not_to_the_caller(live: str, token: str, provider):
    # Given a tool whose handler fails
    provider.script(Reply(tool_calls=[call("flaky", "c1")]), Reply(text="The lookup failed, sorry."))

    def flaky() -> str:
        raise RuntimeError("database is down")

    # When it is run
    done = Client(live, token=token).chat.run(
        message="try it", tools=[Tool("flaky", "Sometimes fails.", handler=flaky)]
    )

    # Then the model was told what went wrong and the turn finished normally
    assert done.content == "The lookup failed, sorry."
    assert json.loads(tool_messages(provider.requests[-1])["c1"]) == {"error": "RuntimeError: database is down"}


def test_answering_a_question_by_hand_resumes_the_turn(live: str, token: str, provider):
    # Given a blocking turn that pauses on a question
    question = {"header": "Method", "question": "Refund how?", "options": ["card", "credit"]}
    provider.script(Reply(tool_calls=[call("ask_user", "q1", questions=[question])]), Reply(text="Refunded to card."))
    client = Client(live, token=token)
    paused = client.chat.send(message="refund o_1")
    batch = paused.questions[0]

    # When the question is answered with chat.answer
    done = client.chat.answer(
        paused.session_id, tool_call_id=batch["tool_call_id"], answers=[{"question_id": "Method", "selected": ["card"]}]
    )

    # Then the turn carries on to its answer
    assert done.content == "Refunded to card."
