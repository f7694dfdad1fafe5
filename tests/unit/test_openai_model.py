"""OpenAIModel driven through the real `openai` client against the scripted OpenAI-compatible server."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from oberik.adapters.openai_model import OpenAIModel
from oberik.domain.errors import ModelError
from oberik.domain.llm import Completion, Delta, Effort, ModelRequest
from oberik.local.scripted_provider import Drop, Fail, Hang, RejectParam, Reply, ScriptedProvider

TOOLS = [
    {"type": "function", "function": {"name": "current_time", "parameters": {"type": "object", "properties": {}}}},
    {"type": "function", "function": {"name": "wait", "parameters": {"type": "object", "properties": {}}}},
]


@pytest.fixture(scope="module")
def server() -> Iterator[ScriptedProvider]:
    with ScriptedProvider() as provider:
        yield provider


@pytest.fixture
def provider(server: ScriptedProvider) -> ScriptedProvider:
    server.reset()
    return server


@pytest.fixture
def model(provider: ScriptedProvider) -> Iterator[OpenAIModel]:
    client = OpenAIModel(provider.base_url, "test-key", timeout=5.0)
    yield client
    client.close()


def ask(
    text: str = "Hello?",
    *,
    tools: list[dict[str, Any]] | None = None,
    temperature: float = 0.2,
    reasoning_effort: Effort | None = None,
) -> ModelRequest:
    return ModelRequest(
        model="scripted-model",
        messages=[{"role": "user", "content": text}],
        tools=tools or [],
        temperature=temperature,
        reasoning_effort=reasoning_effort,
    )


def run(model: OpenAIModel, request: ModelRequest) -> tuple[list[Delta], Completion]:
    items = list(model.stream(request))
    assert isinstance(items[-1], Completion)
    assert all(isinstance(item, Delta) for item in items[:-1])
    return [item for item in items[:-1] if isinstance(item, Delta)], items[-1]


def test_text_streams_in_pieces_and_is_assembled(provider: ScriptedProvider, model: OpenAIModel) -> None:
    # Given a provider that streams a sentence word by word
    provider.script(Reply(text="The quick brown fox jumps."))

    # When the model is streamed
    deltas, completion = run(model, ask())

    # Then the content arrives in several deltas that add up to the whole answer
    assert len(deltas) == 5
    assert all(d.channel == "content" for d in deltas)
    assert "".join(d.text for d in deltas) == "The quick brown fox jumps."
    assert completion.content == "The quick brown fox jumps."
    assert completion.finish_reason == "stop"
    assert completion.reasoning == ""
    assert completion.tool_calls == []
    assert completion.warnings == []


def test_reasoning_deltas_arrive_in_order_before_content(provider: ScriptedProvider, model: OpenAIModel) -> None:
    # Given a reasoning model that thinks, then answers
    provider.script(Reply(reasoning="First I consider the question.", text="Forty-two."))

    # When the model is streamed
    deltas, completion = run(model, ask())

    # Then every reasoning delta precedes the first content delta, and neither channel leaks into the other
    channels = [d.channel for d in deltas]
    assert channels.index("content") == len([c for c in channels if c == "reasoning"])
    assert "".join(d.text for d in deltas if d.channel == "reasoning") == "First I consider the question."
    assert completion.reasoning == "First I consider the question."
    assert completion.content == "Forty-two."


def test_reasoning_is_read_from_the_reasoning_field_too(provider: ScriptedProvider, model: OpenAIModel) -> None:
    # Given a provider that sends its thinking in a `reasoning` field rather than `reasoning_content`
    provider.script(Reply(reasoning="Thinking aloud.", text="Done.", reasoning_field="reasoning"))

    # When the model is streamed
    deltas, completion = run(model, ask())

    # Then the thinking still arrives on the reasoning channel
    assert [d.channel for d in deltas] == ["reasoning", "reasoning", "content"]
    assert completion.reasoning == "Thinking aloud."
    assert completion.content == "Done."


def test_two_tool_calls_are_assembled_across_deltas(provider: ScriptedProvider, model: OpenAIModel) -> None:
    # Given a response with two tool calls whose arguments arrive in pieces
    provider.script(
        Reply(
            tool_calls=[
                {"name": "current_time", "arguments": {"timezone": "Europe/Paris"}, "id": "call_a"},
                {"name": "wait", "arguments": {"seconds": 2}, "id": "call_b"},
            ]
        )
    )

    # When the model is streamed with tools offered
    deltas, completion = run(model, ask("time, then wait", tools=TOOLS))

    # Then both calls come back whole, in order, with their ids
    assert deltas == []
    assert completion.finish_reason == "tool_calls"
    assert [(c.id, c.name, c.arguments) for c in completion.tool_calls] == [
        ("call_a", "current_time", '{"timezone": "Europe/Paris"}'),
        ("call_b", "wait", '{"seconds": 2}'),
    ]


def test_usage_is_reported(provider: ScriptedProvider, model: OpenAIModel) -> None:
    # Given a provider that reports usage at the end of the stream
    provider.script(Reply(text="Hi.", usage={"prompt_tokens": 11, "completion_tokens": 3, "total_tokens": 14}))

    # When the model is streamed
    _, completion = run(model, ask())

    # Then the usage is on the completion, and usage was asked for
    assert completion.usage == {"prompt_tokens": 11, "completion_tokens": 3, "total_tokens": 14}
    assert provider.requests[0]["stream_options"] == {"include_usage": True}


def test_request_carries_parameters_and_omits_empty_ones(provider: ScriptedProvider, model: OpenAIModel) -> None:
    # Given two calls: one with tools and an effort, one with neither
    provider.script(Reply(text="a"), Reply(text="b"))

    # When both are made
    run(model, ask(tools=TOOLS, temperature=0.7, reasoning_effort="high"))
    run(model, ask())

    # Then the first carries everything and the second leaves tools and reasoning_effort out
    first, second = provider.requests
    assert first["model"] == "scripted-model"
    assert first["temperature"] == 0.7
    assert first["reasoning_effort"] == "high"
    assert [t["function"]["name"] for t in first["tools"]] == ["current_time", "wait"]
    assert first["stream"] is True
    assert "tools" not in second
    assert "reasoning_effort" not in second
    assert provider.request_headers[0]["authorization"] == "Bearer test-key"


def test_refused_reasoning_effort_is_retried_without_it(provider: ScriptedProvider, model: OpenAIModel) -> None:
    # Given a model that refuses reasoning_effort, then answers a call without it
    provider.script(RejectParam("reasoning_effort"), Reply(text="Answered anyway."))

    # When the model is streamed with an effort
    _, completion = run(model, ask(reasoning_effort="minimal"))

    # Then the turn is answered, a warning says the effort was dropped, and exactly two requests were made
    assert completion.content == "Answered anyway."
    assert len(completion.warnings) == 1
    assert "reasoning_effort=minimal" in completion.warnings[0]
    requests = provider.requests
    assert len(requests) == 2
    assert requests[0]["reasoning_effort"] == "minimal"
    assert "reasoning_effort" not in requests[1]


def test_refused_stream_options_are_retried_without_them(provider: ScriptedProvider, model: OpenAIModel) -> None:
    # Given a provider that refuses stream_options
    provider.script(RejectParam("stream_options"), Reply(text="Fine."))

    # When the model is streamed
    _, completion = run(model, ask())

    # Then the retry leaves stream_options out, the answer arrives, and nothing is worth warning about
    assert completion.content == "Fine."
    assert completion.warnings == []
    assert [("stream_options" in r) for r in provider.requests] == [True, False]


@pytest.mark.parametrize(
    ("status", "code"),
    [
        (429, "rate_limited"),
        (401, "auth"),
        (403, "auth"),
        (500, "provider_error"),
        (503, "provider_error"),
        (404, "bad_request"),
        (400, "bad_request"),
    ],
)
def test_http_failures_map_to_model_error_codes(
    provider: ScriptedProvider, model: OpenAIModel, status: int, code: str
) -> None:
    # Given a provider that fails with this status
    provider.script(Fail(status, "Something specific went wrong."))

    # When the model is streamed
    with pytest.raises(ModelError) as caught:
        run(model, ask())

    # Then the error has the matching code, the status, and a sentence naming both status and provider message
    assert caught.value.code == code
    assert caught.value.status == status
    assert f"HTTP {status}" in caught.value.detail
    assert "Something specific went wrong" in caught.value.detail
    assert len(provider.requests) == 1  # the client never retried by itself


def test_rate_limit_detail_mentions_retry_after(provider: ScriptedProvider, model: OpenAIModel) -> None:
    # Given a 429 with a Retry-After header
    provider.script(Fail(429, "Slow down.", retry_after=7))

    # When the model is streamed
    with pytest.raises(ModelError) as caught:
        run(model, ask())

    # Then the detail tells the reader how long to wait
    assert caught.value.code == "rate_limited"
    assert "7 seconds" in caught.value.detail


def test_connection_dropped_mid_stream_is_a_provider_error(provider: ScriptedProvider, model: OpenAIModel) -> None:
    # Given a provider that dies after three chunks
    provider.script(Drop(after_chunks=3))
    seen: list[Delta | Completion] = []

    # When the model is streamed
    with pytest.raises(ModelError) as caught:
        seen.extend(model.stream(ask()))

    # Then the failure is a provider_error that says the connection broke
    assert caught.value.code == "provider_error"
    assert "mid-answer" in caught.value.detail


def test_a_provider_that_hangs_times_out(provider: ScriptedProvider) -> None:
    # Given a provider that says nothing for longer than the client's timeout
    provider.script(Hang(5.0))
    impatient = OpenAIModel(provider.base_url, "test-key", timeout=0.3)

    # When the model is streamed
    started = time.perf_counter()
    with pytest.raises(ModelError) as caught:
        run(impatient, ask())
    impatient.close()

    # Then it fails as a timeout, promptly
    assert caught.value.code == "timeout"
    assert "0.3 seconds" in caught.value.detail
    assert time.perf_counter() - started < 2.0


def test_an_exhausted_script_is_noticed(provider: ScriptedProvider, model: OpenAIModel) -> None:
    # Given nothing scripted
    # When the model is streamed
    with pytest.raises(ModelError) as caught:
        run(model, ask())

    # Then the call fails loudly and the request is still recorded
    assert "script is exhausted" in caught.value.detail
    assert len(provider.requests) == 1


def test_should_stop_closes_the_stream_early(provider: ScriptedProvider, model: OpenAIModel) -> None:
    # Given a long, slow answer of 200 tokens
    provider.script(Reply(text=" ".join(f"word{i}" for i in range(200)), token_delay=0.005))
    received: list[Delta] = []

    # When the caller asks to stop after three deltas
    completion: Delta | Completion | None = None
    for item in model.stream(ask(), should_stop=lambda: len(received) >= 3):
        if isinstance(item, Delta):
            received.append(item)
        else:
            completion = item
    time.sleep(0.1)  # let the server notice the closed socket

    # Then the completion is cancelled with what arrived, and the provider stopped sending soon after
    assert isinstance(completion, Completion)
    assert completion.finish_reason == "cancelled"
    assert completion.content == "word0 word1 word2 "
    assert provider.tokens_sent < 20


def test_should_stop_before_the_call_makes_no_request(provider: ScriptedProvider, model: OpenAIModel) -> None:
    # Given a caller that has already asked to stop
    # When the model is streamed
    items = list(model.stream(ask(), should_stop=lambda: True))

    # Then nothing is sent and the completion is cancelled
    assert items == [Completion(content="", finish_reason="cancelled")]
    assert provider.requests == []
