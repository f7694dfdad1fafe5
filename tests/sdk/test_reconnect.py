"""Connections that end early: the handle re-attaches from the last frame it saw, losing and repeating nothing."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from oberik.client import AgentStreamError, Client
from oberik.local.scripted_provider import Reply
from oberik.settings import get_settings
from tests.api_fixtures import parse_sse
from tests.sdk.proxy import CuttingProxy

TEXT = " ".join(f"word{i}" for i in range(40))


def stored_frames(live: str, token: str, run_id: str) -> list[tuple[str, dict[str, Any]]]:
    r = httpx.get(f"{live}/chat/stream/{run_id}", headers={"Authorization": f"Bearer {token}"}, timeout=30)
    return [(e.event, e.data) for e in parse_sse(r.text)[0]]


def test_a_connection_cut_mid_stream_is_survived_with_every_frame_once(live: str, token: str, provider):
    # Given a slow answer, reached through a proxy that cuts the first connection part-way through a frame
    provider.script(Reply(text=TEXT, token_delay=0.02))
    frames: list[tuple[str, dict[str, Any]]] = []
    reconnects: list[int] = []
    with CuttingProxy(live, cut_after=900) as proxy:
        client = Client(proxy.url, token=token)

        # When the turn is streamed through it
        handle = client.chat.stream(
            message="long", on_event=lambda event, data: frames.append((event, data)), on_reconnect=reconnects.append
        )
        done = handle.done(timeout=20)

    # Then the cut happened, the handle re-attached, and it saw exactly the frames the server stored
    assert proxy.cut.is_set() and proxy.connections >= 2
    assert reconnects == [1]
    assert frames == stored_frames(live, token, done.run_id)
    assert done.content == TEXT == handle.content


def test_a_long_poll_deployment_is_followed_across_responses(live: str, token: str, provider, monkeypatch):
    # Given a deployment that ends every response after 0.3 s with `retry:` (as behind a buffering proxy)
    monkeypatch.setenv("OBERIK_SSE_WINDOW_SECONDS", "0.3")
    get_settings.cache_clear()
    provider.script(Reply(text=TEXT, token_delay=0.03))
    frames: list[tuple[str, dict[str, Any]]] = []
    reconnects: list[int] = []

    # When a turn is streamed
    handle = Client(live, token=token).chat.stream(
        message="long", on_event=lambda event, data: frames.append((event, data)), on_reconnect=reconnects.append
    )
    done = handle.done(timeout=30)

    # Then it took more than one response, and every frame arrived once, in order
    assert len(reconnects) >= 1
    assert frames == stored_frames(live, token, done.run_id)
    assert done.content == TEXT


def test_when_every_reconnect_fails_done_raises_with_what_it_knows(live: str, token: str, provider):
    # Given a connection that is cut, and a server that cannot be reached again
    provider.script(Reply(text=TEXT, token_delay=0.02))
    with CuttingProxy(live, cut_after=900, refuse_after_first=True) as proxy:
        handle = Client(proxy.url, token=token).chat.stream(message="long", max_retries=2)

        # When the handle has used its retries
        with pytest.raises(AgentStreamError) as raised:
            handle.done(timeout=20)

    # Then the error says so, and names the conversation and run, with the text that had arrived
    error = raised.value
    assert error.code == "stream_unreachable"
    assert error.session_id and error.run_id == handle.run_id()
    assert TEXT.startswith(error.content)
    assert proxy.connections == 1 + 2
