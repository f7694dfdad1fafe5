"""The SDK's streaming handle against the live local stack: handlers, pauses, cancel, disconnect and attach."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import httpx
import pytest

from oberik.client import AgentStreamError, Client, Conflict, Tool, Ui
from oberik.domain import pauses
from oberik.local.scripted_provider import Fail, Reply, ScriptedProvider
from tests.api_fixtures import parse_sse

LONG_TEXT = " ".join(f"word{i}" for i in range(30))
CHART = Ui("show_chart", "Draw a chart.", {"type": "object", "properties": {"title": {"type": "string"}}})


def call(name: str, call_id: str, **arguments: Any) -> dict[str, Any]:
    return {"id": call_id, "name": name, "arguments": arguments}


def tool_messages(request: dict[str, Any]) -> dict[str, str]:
    return {m["tool_call_id"]: m["content"] for m in request["messages"] if m["role"] == "tool"}


def replay(live: str, token: str, run_id: str) -> list[tuple[str, dict[str, Any]]]:
    """Every frame of a run as the server stores it, read without the SDK."""
    r = httpx.get(f"{live}/chat/stream/{run_id}", headers={"Authorization": f"Bearer {token}"}, timeout=30)
    return [(e.event, e.data) for e in parse_sse(r.text)[0]]


def test_every_handler_fires_for_the_frame_it_handles(live: str, token: str, provider: ScriptedProvider):
    # Given a turn that writes a plan, asks the clock, draws a chart, then thinks and answers
    provider.script(
        Reply(tool_calls=[call("todo_write", "t1", items=["look", "answer"]), call("current_time", "c1")]),
        Reply(tool_calls=[call("show_chart", "u1", title="Q3")]),
        Reply(reasoning="Thinking it through.", text="It is noon, and the chart is above."),
    )
    seen: dict[str, list[Any]] = {}
    rendered: list[dict[str, Any]] = []

    def record(name: str) -> Any:
        return lambda *args: seen.setdefault(name, []).append(args)

    client = Client(live, token=token, ui=[Ui(CHART.name, CHART.description, CHART.parameters, rendered.append)])
    run_ids: list[str | None] = []

    # When it is streamed with a handler for everything
    handle = client.chat.stream(
        message="plan, check the time and chart Q3",
        on_token=record("token"),
        on_reasoning=record("reasoning"),
        on_tool_start=record("tool_start"),
        on_tool_end=record("tool_end"),
        on_todos=record("todos"),
        on_ui=record("ui"),
        on_event=lambda event, data: (seen.setdefault("event", []).append(event), run_ids.append(handle.run_id())),
    )
    done = handle.done(timeout=20)

    # Then each handler got its frames, with the running text where it takes one
    assert done.content == "It is noon, and the chart is above."
    assert seen["token"][-1][1] == done.content and "".join(d for d, _ in seen["token"]) == done.content
    assert seen["reasoning"][-1][1] == "Thinking it through." == done.reasoning
    assert [name for name, _ in seen["tool_start"]] == ["todo_write", "current_time"]
    assert [name for name, _ in seen["tool_end"]] == ["todo_write", "current_time"]
    assert seen["todos"][0][0] == [
        {"n": 1, "text": "look", "status": "pending"},
        {"n": 2, "text": "answer", "status": "pending"},
    ]
    assert seen["ui"] == [({"tool_call_id": "u1", "name": "show_chart", "props": {"title": "Q3"}},)]
    assert rendered == [{"title": "Q3"}]
    # And on_event saw every frame the server stored, in order
    assert seen["event"] == [event for event, _ in replay(live, token, done.run_id)]
    # And the run id was known from the first frame on, the conversation from the start frame
    assert run_ids[0] == done.run_id and handle.session_id() == done.session_id


def test_a_question_is_answered_by_on_question_and_the_turn_resumes(live: str, token: str, provider):
    # Given a model that asks which fetchers to migrate, then answers
    question = {"header": "Scope", "question": "Which fetchers?", "options": ["forfaits-* only", "box-* too"]}
    provider.script(Reply(tool_calls=[call("ask_user", "q1", questions=[question])]), Reply(text="Migrating both."))
    shown: list[Any] = []
    asked: list[dict[str, Any]] = []

    def on_question(batch: dict[str, Any]) -> dict[str, str]:
        asked.append(batch)
        return {"Scope": "box-* too"}

    # When the stream has on_questions and on_question
    handle = Client(live, token=token).chat.stream(
        message="migrate the fetchers", on_questions=shown.append, on_question=on_question
    )
    done = handle.done(timeout=20)

    # Then the questions were shown, answered, and done() resolved only once the turn had finished
    assert shown[0][0]["tool_call_id"] == "q1" and asked[0]["tool_call_id"] == "q1"
    assert done.content == "Migrating both." and done.requires_action is False
    answer = json.loads(tool_messages(provider.requests[-1])["q1"])
    assert answer["answers"][0]["selected"] == ["box-* too"]
    assert handle.run_id() == done.run_id  # the resumed run


def test_an_approval_is_decided_by_on_approval_with_a_note(live: str, token: str, provider):
    # Given a model that asks before sending mail
    provider.script(
        Reply(tool_calls=[call("request_approval", "r1", action="Email the Q3 numbers to finance")]),
        Reply(text="I did not send it. Where should it go?"),
    )
    requests: list[dict[str, Any]] = []

    def on_approval(request: dict[str, Any]) -> dict[str, Any]:
        requests.append(request)
        return {"approved": False, "note": "use finance@acme.eu instead"}

    # When on_approval refuses it with a note
    done = Client(live, token=token).chat.stream(message="email Q3", on_approval=on_approval).done(timeout=20)

    # Then the model was told to stop, with the note, and the turn finished
    assert requests[0]["action"] == "Email the Q3 numbers to finance"
    told = tool_messages(provider.requests[-1])["r1"]
    assert told.startswith(pauses.REFUSAL) and "use finance@acme.eu instead" in told
    assert done.content.endswith("Where should it go?") and not done.requires_action


def test_without_a_handler_a_pause_ends_the_stream_requiring_action(live: str, token: str, provider):
    # Given a model that asks for approval, and a stream with no on_approval
    provider.script(Reply(tool_calls=[call("request_approval", "r1", action="Delete the archive")]))

    # When it is streamed
    done = Client(live, token=token).chat.stream(message="clean up").done(timeout=20)

    # Then done() carries the pause for the caller to decide
    assert done.requires_action is True and done.tool_calls == []
    assert [a["tool_call_id"] for a in done.approvals] == ["r1"]


def test_a_stream_runs_registered_tools_and_carries_on(live: str, token: str, provider):
    # Given a client tool registered on the client, and a model that calls it
    provider.script(Reply(tool_calls=[call("lookup_order", "c1", order_id="o_7")]), Reply(text="It shipped."))
    lookup = Tool(
        "lookup_order",
        "Look up an order.",
        {"type": "object", "properties": {"order_id": {"type": "string"}}},
        handler=lambda order_id: {"order": order_id, "status": "shipped"},
    )

    # When the turn is streamed by this client
    done = Client(live, token=token, tools=[lookup]).chat.stream(message="where is o_7?").done(timeout=20)

    # Then the handler ran and its result reached the model
    assert done.content == "It shipped."
    assert json.loads(tool_messages(provider.requests[-1])["c1"]) == {"order": "o_7", "status": "shipped"}


def test_cancel_raises_agent_stream_error_with_the_text_so_far(live: str, token: str, provider: ScriptedProvider):
    # Given a long answer being streamed
    provider.script(Reply(text=" ".join(f"t{i}" for i in range(300)), token_delay=0.01))
    first = threading.Event()
    handle = Client(live, token=token).chat.stream(message="long", on_token=lambda d, f: first.set())
    assert first.wait(10)

    # When the user cancels
    status = handle.cancel()

    # Then done() raises with the code, the conversation and what had streamed
    with pytest.raises(AgentStreamError) as raised:
        handle.done(timeout=10)
    error = raised.value
    assert status == "cancelled" and error.code == "stream_cancelled"
    assert error.session_id == handle.session_id() and error.run_id == handle.run_id()
    assert error.content and "t0" in error.content and error.content == handle.content


def test_a_provider_failure_raises_with_the_providers_code(live: str, token: str, provider):
    provider.script(Fail(500, "upstream exploded"))
    handle = Client(live, token=token).chat.stream(message="hi")
    with pytest.raises(AgentStreamError) as raised:
        handle.done(timeout=20)
    assert raised.value.code == "provider_error" and raised.value.session_id == handle.session_id()


def test_steering_a_running_turn_lands(live: str, token: str, provider):
    # Given a slow answer in progress
    provider.script(Reply(text=LONG_TEXT, token_delay=0.02), Reply(text="Only the forfaits ones, then."))
    first = threading.Event()
    handle = Client(live, token=token).chat.stream(message="migrate", on_token=lambda d, f: first.set())
    assert first.wait(10)

    # When a correction is steered in
    landed = handle.steer("only the forfaits-* ones")

    # Then it landed and the agent read it before the turn ended
    done = handle.done(timeout=20)
    assert landed is True and done.steered == ["only the forfaits-* ones"]
    assert done.content.endswith("Only the forfaits ones, then.")


def test_disconnect_stops_listening_and_attach_replays_the_whole_turn(live: str, token: str, provider):
    # Given a slow answer, and a listener that goes away after the first words
    provider.script(Reply(text=LONG_TEXT, token_delay=0.02))
    client = Client(live, token=token)
    first = threading.Event()
    handle = client.chat.stream(message="long", on_token=lambda d, f: first.set())
    assert first.wait(10)
    handle.disconnect()
    with pytest.raises(AgentStreamError) as raised:
        handle.done(timeout=10)
    assert raised.value.code == "disconnected"
    run_id, session_id = handle.run_id(), handle.session_id()
    assert run_id and session_id

    # When another handle attaches to the run (as a reloaded page would, finding it through active_run)
    assert client.sessions.active_run(session_id).run_id in (run_id, None)
    texts: list[str] = []
    again = client.chat.attach(run_id, on_token=lambda d, full: texts.append(full))
    done = again.done(timeout=20)

    # Then it replays from the start: the whole answer, once
    assert done.content == LONG_TEXT == texts[-1]
    assert again.session_id() == session_id

    # And with last_event_id it gets only what comes after
    events: list[str] = []
    tail = client.chat.attach(
        run_id, last_event_id=done_id(live, token, run_id) - 1, on_event=lambda e, d: events.append(e)
    )
    assert tail.done(timeout=10).content == LONG_TEXT and events == ["done"]


def done_id(live: str, token: str, run_id: str) -> int:
    r = httpx.get(f"{live}/chat/stream/{run_id}", headers={"Authorization": f"Bearer {token}"}, timeout=30)
    return int(parse_sse(r.text)[0][-1].id or 0)


def test_starting_a_second_turn_on_a_busy_conversation_is_a_conflict(live: str, token: str, provider):
    # Given a turn running on a conversation
    provider.script(Reply(text="first"), Reply(text="second", ttft=2.0))
    client = Client(live, token=token)
    sid = client.chat.send(message="start").session_id
    running = client.chat.stream(message="slow", session_id=sid)
    while running.run_id() is None:
        time.sleep(0.01)

    # When a second one is started there
    second = client.chat.stream(message="again", session_id=sid)

    # Then its done() raises Conflict naming the running run, with status, code and detail
    with pytest.raises(Conflict) as raised:
        second.done(timeout=10)
    assert raised.value.status == 409 and raised.value.code == "turn_running"
    assert running.run_id() in raised.value.detail
    running.done(timeout=20)
