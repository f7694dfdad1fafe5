"""AsyncClient: the same turns as coroutines, with async handlers."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from oberik.client import AgentStreamError, AsyncClient, Tool
from oberik.local.scripted_provider import Reply


def test_an_async_client_sends_and_streams(live: str, token: str, provider):
    # Given a blocking turn, then a streamed one that calls the clock and a client tool handled by a coroutine
    provider.script(
        Reply(text="Hello."),
        Reply(tool_calls=[{"id": "c1", "name": "current_time", "arguments": {}}]),
        Reply(tool_calls=[{"id": "c2", "name": "greet", "arguments": {"name": "Ana"}}]),
        Reply(reasoning="Nearly there.", text="It is noon, Ana."),
    )

    async def greet(name: str) -> str:
        await asyncio.sleep(0)
        return f"hi {name}"

    async def scenario() -> tuple[Any, Any, list[Any], list[str]]:
        async with AsyncClient(live, token=token, tools=[Tool("greet", "Greet someone.", handler=greet)]) as client:
            sent = await client.chat.send(message="hi")
            tokens: list[Any] = []
            tools: list[str] = []

            async def on_tool_start(name: str, _input: Any) -> None:
                tools.append(name)

            # When the stream is awaited like the handle it is
            handle = client.chat.stream(
                message="time?",
                session_id=sent.session_id,
                on_token=lambda delta, full: tokens.append(full),
                on_tool_start=on_tool_start,
            )
            done = await handle
            assert handle.session_id() == sent.session_id and handle.run_id() == done.run_id
            page = await client.sessions.list()
            assert [s.id for s in page.items] == [sent.session_id]
            return sent, done, tokens, tools

    sent, done, tokens, tools = asyncio.run(scenario())

    # Then both answers arrived, with the handlers called (the async ones awaited) and the tool's result used
    assert sent.content == "Hello."
    assert done.content == "It is noon, Ana." == tokens[-1] and done.reasoning == "Nearly there."
    assert tools == ["current_time"]
    assert provider.requests[-1]["messages"][-1] == {"role": "tool", "tool_call_id": "c2", "content": "hi Ana"}


def test_an_async_stream_can_be_cancelled_and_raises_with_the_text_so_far(live: str, token: str, provider):
    provider.script(Reply(text=" ".join(f"t{i}" for i in range(300)), token_delay=0.01))

    async def scenario() -> AgentStreamError:
        async with AsyncClient(live, token=token) as client:
            first = asyncio.Event()
            handle = client.chat.stream(message="long", on_token=lambda d, f: first.set())
            await asyncio.wait_for(first.wait(), 10)
            assert await handle.cancel() == "cancelled"
            with pytest.raises(AgentStreamError) as raised:
                await handle.done()
            return raised.value

    error = asyncio.run(scenario())
    assert error.code == "stream_cancelled" and error.content.startswith("t0") and error.session_id
