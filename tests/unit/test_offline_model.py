"""The built-in offline model: deterministic tool calls and honest prose, without a network."""

from __future__ import annotations

import json
from typing import Any

from oberik.domain.llm import Completion, Delta, ModelRequest
from oberik.local.offline_model import OfflineModel

TOOLS = [
    {"type": "function", "function": {"name": "current_time", "parameters": {"type": "object", "properties": {}}}},
    {"type": "function", "function": {"name": "wait", "parameters": {"type": "object", "properties": {}}}},
]


def run(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None) -> tuple[list[Delta], Completion]:
    items = list(OfflineModel().stream(ModelRequest(model="oberik-offline", messages=messages, tools=tools or [])))
    last = items[-1]
    assert isinstance(last, Completion)
    deltas = [item for item in items[:-1] if isinstance(item, Delta)]
    assert len(deltas) == len(items) - 1
    return deltas, last


def answer_tool(messages: list[dict[str, Any]], completion: Completion, result: dict[str, Any]) -> None:
    """Append the assistant's tool call and its result, as the engine would."""
    (call,) = completion.tool_calls
    messages.append(
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": call.arguments}}
            ],
        }
    )
    messages.append({"role": "tool", "tool_call_id": call.id, "content": json.dumps(result)})


def test_a_time_question_calls_current_time() -> None:
    # Given a user asking the time, with current_time offered
    messages = [{"role": "user", "content": "Hey, what time is it?"}]

    # When the offline model answers
    deltas, completion = run(messages, TOOLS)

    # Then it calls current_time with no arguments and says nothing
    assert deltas == []
    assert completion.content == ""
    assert completion.finish_reason == "tool_calls"
    assert [(c.name, json.loads(c.arguments)) for c in completion.tool_calls] == [("current_time", {})]
    assert completion.tool_calls[0].id.startswith("call_offline_")
    assert completion.usage is not None


def test_a_named_timezone_is_passed_on() -> None:
    # Given a user asking the time in a named IANA zone
    messages = [{"role": "user", "content": "What is the current time in Europe/Paris?"}]

    # When the offline model answers
    _, completion = run(messages, TOOLS)

    # Then the zone is the tool's argument
    assert json.loads(completion.tool_calls[0].arguments) == {"timezone": "Europe/Paris"}


def test_time_then_wait_runs_both_tools_in_order_then_reports() -> None:
    # Given a user asking for the time and then a pause
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are helpful."},
        {"role": "user", "content": "What time is it, then wait 2 seconds"},
    ]

    # When the model is called three times, each fed the previous tool result
    _, first = run(messages, TOOLS)
    answer_tool(messages, first, {"now": "2026-11-30T08:30:00+00:00", "timezone": "UTC", "weekday": "Monday"})
    _, second = run(messages, TOOLS)
    answer_tool(messages, second, {"waited_seconds": 2, "note": "waited 2 seconds"})
    deltas, third = run(messages, TOOLS)

    # Then it asked for the time, then waited, then reported both in plain words, streamed word by word
    assert [c.name for c in first.tool_calls] == ["current_time"]
    assert [(c.name, json.loads(c.arguments)) for c in second.tool_calls] == [("wait", {"seconds": 2})]
    assert first.tool_calls[0].id != second.tool_calls[0].id
    assert third.tool_calls == []
    assert third.finish_reason == "stop"
    assert third.content == "It is 2026-11-30T08:30:00+00:00 (UTC). I waited 2 seconds."
    assert len(deltas) > 3
    assert "".join(d.text for d in deltas) == third.content


def test_intents_follow_the_order_they_were_mentioned() -> None:
    # Given a user asking to pause first and for the time afterwards
    messages = [{"role": "user", "content": "Pause for 3 seconds and then tell me the current time."}]

    # When the offline model answers
    _, completion = run(messages, TOOLS)

    # Then the pause comes first
    assert [(c.name, json.loads(c.arguments)) for c in completion.tool_calls] == [("wait", {"seconds": 3})]


def test_without_tools_it_answers_in_prose_and_says_what_it_is() -> None:
    # Given a time question but no tools offered
    messages = [{"role": "user", "content": "What time is it?"}]

    # When the offline model answers
    deltas, completion = run(messages)

    # Then it replies in prose: it names itself, quotes the user, and says how to configure a provider
    assert completion.tool_calls == []
    assert completion.finish_reason == "stop"
    assert "offline model" in completion.content
    assert '"What time is it?"' in completion.content
    assert "OPENAI_API_KEY" in completion.content
    assert "".join(d.text for d in deltas) == completion.content
    assert all(d.channel == "content" for d in deltas)
    assert completion.usage is not None
    assert completion.usage["completion_tokens"] == len(deltas)


def test_system_messages_do_not_drive_behaviour() -> None:
    # Given a system message that mentions the time, and a user who does not
    messages = [
        {"role": "system", "content": "If asked what time it is, use current_time."},
        {"role": "user", "content": "Hello there"},
    ]

    # When the offline model answers
    _, completion = run(messages, TOOLS)

    # Then no tool is called
    assert completion.tool_calls == []
    assert '"Hello there"' in completion.content


def test_answers_are_deterministic() -> None:
    # Given the same conversation twice
    messages = [{"role": "user", "content": "Please wait 5 seconds, then tell me what day it is."}]

    # When it is answered twice
    first = run(messages, TOOLS)
    second = run(messages, TOOLS)

    # Then the answers are identical, tool call ids included
    assert first == second


def test_should_stop_cancels_the_prose() -> None:
    # Given a caller that stops after two words
    request = ModelRequest(model="oberik-offline", messages=[{"role": "user", "content": "Tell me a story"}])
    seen: list[Delta] = []

    # When the offline model streams
    completion = None
    for item in OfflineModel().stream(request, should_stop=lambda: len(seen) >= 2):
        if isinstance(item, Delta):
            seen.append(item)
        else:
            completion = item

    # Then it stops with what it had said
    assert isinstance(completion, Completion)
    assert completion.finish_reason == "cancelled"
    assert completion.content == "".join(d.text for d in seen)
    assert len(seen) == 2


def test_tell_me_the_time_after_a_wait_runs_wait_then_current_time() -> None:
    # Given a request that mentions the wait first and the time second
    messages = [{"role": "user", "content": "Now wait 2 seconds, then tell me the time again."}]

    # When the model is called twice, fed the first result
    _, first = run(messages, TOOLS)
    answer_tool(messages, first, {"waited_seconds": 2})
    _, second = run(messages, TOOLS)

    # Then it waits first, then asks the time
    assert [c.name for c in first.tool_calls] == ["wait"]
    assert [c.name for c in second.tool_calls] == ["current_time"]


def test_asking_for_approval_pauses_then_reports_the_decision() -> None:
    # Given a message that wants to be asked first, with request_approval offered
    tools = [*TOOLS, {"type": "function", "function": {"name": "request_approval", "parameters": {}}}]
    messages = [{"role": "user", "content": "Email the Q3 numbers to finance, but ask me first"}]

    # When the model is called, then fed an approval
    _, first = run(messages, tools)
    answer_tool(messages, first, {})
    messages[-1]["content"] = "The user approved this. Go ahead."
    _, second = run(messages, tools)

    # Then it asked with the action named, and reports the approval honestly
    (call,) = first.tool_calls
    assert call.name == "request_approval"
    assert json.loads(call.arguments)["action"] == "Email the Q3 numbers to finance"
    assert second.content.startswith("You approved: Email the Q3 numbers to finance.")
