"""Streaming turns over real HTTP: frames, replay, reconnects, cancel, one turn at a time, lost runs."""

from __future__ import annotations

import threading
import time
from typing import Any

import httpx
import pytest

from oberik.adapters.aws import client
from oberik.adapters.dynamodb import DynamoStore
from oberik.local.scripted_provider import Fail, Reply, ScriptedProvider
from oberik.settings import get_settings
from tests.api_fixtures import Api, Project, SseEvent, parse_sse, read_events

LONG_TEXT = " ".join(f"word{i}" for i in range(60))


def _post_stream(live: str, token: str, **body: Any) -> httpx.Response:
    return httpx.post(f"{live}/chat/stream", json=body, headers={"Authorization": f"Bearer {token}"}, timeout=30)


def _attach(live: str, token: str, run_id: str, last: int | str | None = None, **params: Any) -> httpx.Response:
    headers = {"Authorization": f"Bearer {token}"}
    if last is not None:
        headers["Last-Event-ID"] = str(last)
    return httpx.get(f"{live}/chat/stream/{run_id}", headers=headers, params=params, timeout=30)


def _text(events: list[SseEvent], kind: str = "token") -> str:
    return "".join(e.data["delta"] for e in events if e.event == kind)


def _wait_for(predicate: Any, timeout: float = 10.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError("condition not met in time")


def test_a_streamed_turn_sends_every_frame_with_an_id_and_the_run_header(live: str, token: str, provider):
    # Given a model that uses a tool, then answers
    provider.script(Reply(tool_calls=[{"name": "current_time", "arguments": {}}]), Reply(text="It is noon."))

    # When the turn is streamed
    r = _post_stream(live, token, message="time?")

    # Then every frame has an id, run and start come before any token, and done carries the whole turn
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    events, _ = parse_sse(r.text)
    names = [e.event for e in events]
    assert names[:2] == ["run", "start"]
    assert names.index("start") < names.index("token")
    assert {"tool_start", "tool_end"} <= set(names)
    assert names[-1] == "done"
    assert [e.id for e in events] == list(range(1, len(events) + 1))
    assert events[0].data["run_id"] == r.headers["X-Run-Id"]
    assert events[1].data["session_id"] == events[-1].data["session_id"]
    assert _text(events) == "It is noon." == events[-1].data["content"]
    tool_start = next(e for e in events if e.event == "tool_start")
    assert tool_start.data == {"name": "current_time", "input": {}}


def test_reasoning_streams_on_its_own_channel_before_the_answer(live: str, token: str, provider):
    provider.script(Reply(reasoning="Thinking it through.", text="Forty-two."))
    events, _ = parse_sse(_post_stream(live, token, message="q").text)
    names = [e.event for e in events]
    assert names.index("reasoning") < names.index("token")
    assert _text(events, "reasoning") == "Thinking it through."
    assert events[-1].data["reasoning"] == "Thinking it through."
    assert "Thinking" not in events[-1].data["content"]


def test_a_dropped_connection_resumes_from_last_event_id_without_losing_or_repeating(
    live: str, token: str, provider: ScriptedProvider
):
    # Given a slow answer
    provider.script(Reply(text=LONG_TEXT, token_delay=0.03))
    headers = {"Authorization": f"Bearer {token}"}

    # When the client reads a few frames and drops the connection
    with httpx.stream("POST", f"{live}/chat/stream", json={"message": "long"}, headers=headers, timeout=30) as r:
        run_id = r.headers["X-Run-Id"]
        first = read_events(r, stop_after=4)
    seen = first[-1].id
    time.sleep(0.5)  # generation goes on while nobody listens

    # And reconnects with the last id it saw
    rest, _ = parse_sse(_attach(live, token, run_id, last=seen).text)

    # Then it gets exactly what it missed, and the whole answer is there once
    ids = [e.id for e in first + rest]
    assert ids == list(range(1, len(ids) + 1))
    assert _text(first + rest) == LONG_TEXT
    assert rest[-1].event == "done"


def test_attaching_without_an_id_replays_from_the_start_and_the_query_form_works(live: str, token: str, provider):
    provider.script(Reply(text="short answer"))
    r = _post_stream(live, token, message="hi")
    run_id = r.headers["X-Run-Id"]
    whole, _ = parse_sse(_attach(live, token, run_id).text)
    assert [e.event for e in whole] == [e.event for e in parse_sse(r.text)[0]]
    tail, _ = parse_sse(_attach(live, token, run_id, last_event_id=whole[-2].id).text)
    assert [e.event for e in tail] == ["done"]


def test_a_finished_runs_frames_expire_into_one_stream_expired_frame(
    live: str, token: str, provider, monkeypatch: pytest.MonkeyPatch
):
    # Given a replay window of half a second
    monkeypatch.setenv("OBERIK_REPLAY_WINDOW_SECONDS", "0.5")
    get_settings.cache_clear()
    provider.script(Reply(text="done quickly"))
    r = _post_stream(live, token, message="hi")
    session_id = parse_sse(r.text)[0][1].data["session_id"]
    time.sleep(0.8)

    # When a client attaches after the window
    late = _attach(live, token, r.headers["X-Run-Id"])

    # Then it gets 200 and one error frame naming the conversation, not a 404
    events, _ = parse_sse(late.text)
    assert late.status_code == 200
    assert [(e.event, e.data["code"]) for e in events] == [("error", "stream_expired")]
    assert events[0].data["session_id"] == session_id
    assert session_id in events[0].data["detail"]


def test_an_unknown_run_and_another_subjects_run_are_the_same_404(
    live: str, api: Api, scripted_project: Project, provider
):
    provider.script(Reply(text="mine"))
    ana, bob = api.token(scripted_project, "ana"), api.token(scripted_project, "bob")
    run_id = _post_stream(live, ana, message="hi").headers["X-Run-Id"]
    unknown = "r_" + "0" * 28
    theirs, nobody = _attach(live, bob, run_id), _attach(live, bob, unknown)
    assert theirs.status_code == nobody.status_code == 404
    assert theirs.json()["code"] == nobody.json()["code"] == "run_not_found"
    assert theirs.json()["detail"].replace(run_id, "X") == nobody.json()["detail"].replace(unknown, "X")
    cancel = httpx.post(f"{live}/chat/stream/{run_id}/cancel", headers={"Authorization": f"Bearer {bob}"})
    assert cancel.status_code == 404


@pytest.mark.parametrize(("value", "words"), [("abc", "whole number"), ("-1", "negative"), ("9999", "past the last")])
def test_a_bad_last_event_id_is_a_clear_400(live: str, token: str, provider, value: str, words: str):
    provider.script(Reply(text="x"))
    run_id = _post_stream(live, token, message="hi").headers["X-Run-Id"]
    r = _attach(live, token, run_id, last=value)
    assert r.status_code == 400 and words in r.json()["detail"]


def test_a_run_id_that_is_not_an_id_is_a_clear_400(live: str, token: str):
    r = _attach(live, token, "not-a-run")
    assert r.status_code == 400 and "run id" in r.json()["detail"]


def test_cancel_stops_generation_and_spend_and_the_message_is_never_answered(
    live: str, token: str, provider: ScriptedProvider
):
    # Given a long answer being streamed
    tokens_in_script = 300
    provider.script(
        Reply(text=" ".join(f"t{i}" for i in range(tokens_in_script)), token_delay=0.01),
        Reply(text="It is 12:00."),
    )
    headers = {"Authorization": f"Bearer {token}"}
    with httpx.stream(
        "POST", f"{live}/chat/stream", json={"message": "close every berth for July"}, headers=headers, timeout=30
    ) as r:
        run_id = r.headers["X-Run-Id"]
        seen = read_events(r, stop_after=4)

        # When the user cancels
        cancelled = httpx.post(f"{live}/chat/stream/{run_id}/cancel", headers=headers)
        rest = read_events(r)

    # Then the stream ends with a cancelled frame, and the provider stopped being read
    assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"
    assert rest[-1].event == "cancelled" and rest[-1].data["run_id"] == run_id
    session_id = seen[1].data["session_id"]
    time.sleep(0.6)
    assert provider.tokens_sent < tokens_in_script / 2

    # And the next turn answers only what was asked now
    nxt = _post_stream(live, token, message="what time is it?", session_id=session_id)
    assert parse_sse(nxt.text)[0][-1].data["content"] == "It is 12:00."
    asked = [m["content"] for m in provider.requests[-1]["messages"] if m["role"] == "user"]
    assert asked == ["what time is it?"]
    transcript = httpx.get(f"{live}/chat/sessions/{session_id}/messages", headers=headers).json()["messages"]
    cancelled_msg = next(m for m in transcript if m["content"] == "close every berth for July")
    assert cancelled_msg["extra"]["turn_abandoned"] is True


def test_cancelling_a_finished_run_reports_how_it_ended(live: str, token: str, provider):
    provider.script(Reply(text="all done"))
    run_id = _post_stream(live, token, message="hi").headers["X-Run-Id"]
    r = httpx.post(f"{live}/chat/stream/{run_id}/cancel", headers={"Authorization": f"Bearer {token}"})
    assert r.status_code == 200 and r.json()["status"] == "completed"


def test_a_blocking_turn_cannot_be_cancelled(live: str, api: Api, token: str, provider):
    provider.script(Reply(text="first")), provider.script(Reply(text="slow", ttft=2.0))
    sid = api.chat(token, message="one").json()["session_id"]
    runner = threading.Thread(target=lambda: api.chat(token, message="two", session_id=sid))
    runner.start()
    run_id = _wait_for(lambda: api.get(f"/chat/sessions/{sid}/run", token).json()["run_id"])
    r = httpx.post(f"{live}/chat/stream/{run_id}/cancel", headers={"Authorization": f"Bearer {token}"})
    runner.join(15)
    assert r.status_code == 409 and "blocking" in r.json()["detail"]


def test_twenty_simultaneous_turns_on_one_conversation_start_exactly_one(live: str, api: Api, token: str, provider):
    # Given a conversation, and a model slow enough that all twenty requests overlap
    provider.script(Reply(text="first"), Reply(text="the one answer", ttft=1.0))
    sid = api.chat(token, message="start").json()["session_id"]
    barrier = threading.Barrier(20)
    results: list[httpx.Response] = []
    lock = threading.Lock()

    def send() -> None:
        barrier.wait()
        r = _post_stream(live, token, message="again", session_id=sid)
        with lock:
            results.append(r)

    # When twenty turns are sent at once
    threads = [threading.Thread(target=send) for _ in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)

    # Then one runs, nineteen are told which run to attach to, and the model was asked once
    ok = [r for r in results if r.status_code == 200]
    refused = [r for r in results if r.status_code == 409]
    assert len(ok) == 1 and len(refused) == 19
    run_id = ok[0].headers["X-Run-Id"]
    assert all(run_id in r.json()["detail"] for r in refused)
    assert len(provider.requests) == 2
    users = [
        m
        for m in httpx.get(f"{live}/chat/sessions/{sid}/messages", headers={"Authorization": f"Bearer {token}"}).json()[
            "messages"
        ]
        if m["role"] == "user"
    ]
    assert len(users) == 2


def test_a_provider_failure_ends_with_an_error_frame_and_frees_the_conversation(live: str, token: str, provider):
    provider.script(Reply(text="fine"), Fail(500, "upstream exploded"), Reply(text="fine again"))
    first = _post_stream(live, token, message="one")
    sid = parse_sse(first.text)[0][1].data["session_id"]
    failed, _ = parse_sse(_post_stream(live, token, message="two", session_id=sid).text)
    assert failed[-1].event == "error"
    assert failed[-1].data["code"] == "provider_error"
    assert failed[-1].data["session_id"] == sid and failed[-1].data["run_id"]
    status = httpx.get(f"{live}/chat/sessions/{sid}/run", headers={"Authorization": f"Bearer {token}"}).json()
    assert status["status"] == "idle"
    third, _ = parse_sse(_post_stream(live, token, message="three", session_id=sid).text)
    assert third[-1].event == "done"


def test_the_active_run_is_reported_while_running_then_idle(live: str, token: str, provider):
    provider.script(Reply(text=LONG_TEXT, token_delay=0.02))
    headers = {"Authorization": f"Bearer {token}"}
    with httpx.stream("POST", f"{live}/chat/stream", json={"message": "go"}, headers=headers, timeout=30) as r:
        run_id = r.headers["X-Run-Id"]
        events = read_events(r, stop_after=3)
        sid = events[1].data["session_id"]
        during = httpx.get(f"{live}/chat/sessions/{sid}/run", headers=headers).json()
        read_events(r)
    after = httpx.get(f"{live}/chat/sessions/{sid}/run", headers=headers).json()
    assert during["run_id"] == run_id and during["status"] == "running" and during["authoritative"] is True
    assert during["last_event_id"] >= 3
    assert after == {"run_id": None, "last_event_id": None, "status": "idle", "authoritative": True, "waiting": None}


def test_a_run_whose_execution_died_is_lost_not_running(
    live: str, token: str, provider: ScriptedProvider, monkeypatch: pytest.MonkeyPatch
):
    # Given a turn parked in a long wait, and readers that check liveness often
    monkeypatch.setenv("OBERIK_LIVENESS_CHECK_SECONDS", "0.2")
    get_settings.cache_clear()
    provider.script(Reply(tool_calls=[{"name": "wait", "arguments": {"seconds": 60}}]), Reply(text="after"))
    headers = {"Authorization": f"Bearer {token}"}
    with httpx.stream(
        "POST", f"{live}/chat/stream", json={"message": "wait a minute"}, headers=headers, timeout=30
    ) as r:
        run_id = r.headers["X-Run-Id"]
        events = read_events(r, stop_after=2)
    sid = events[1].data["session_id"]
    store = DynamoStore()
    turn = store.get_turn(store.get_run(run_id).turn_id)  # type: ignore[union-attr]
    _wait_for(lambda: any(f["event"] == "tool_end" for f in store.frames_after(run_id, 0)))

    # When its execution goes away (as when whatever ran it is gone)
    sfn = client("stepfunctions")
    sfn.stop_execution(executionArn=turn.execution_arn)  # type: ignore[union-attr]
    _wait_for(lambda: sfn.describe_execution(executionArn=turn.execution_arn)["status"] == "ABORTED")  # type: ignore[union-attr]

    # Then the conversation reports lost, a reader gets stream_lost, and a new turn is accepted
    assert httpx.get(f"{live}/chat/sessions/{sid}/run", headers=headers).json()["status"] == "lost"
    replay, _ = parse_sse(_attach(live, token, run_id).text)
    assert replay[-1].event == "error" and replay[-1].data["code"] == "stream_lost"
    provider.reset()
    provider.script(Reply(text="fresh start"))
    nxt, _ = parse_sse(_post_stream(live, token, message="again", session_id=sid).text)
    assert nxt[-1].event == "done" and nxt[-1].data["content"] == "fresh start"


def test_keepalives_are_sent_while_the_model_is_silent(live: str, token: str, provider, monkeypatch):
    monkeypatch.setenv("OBERIK_KEEPALIVE_SECONDS", "0.2")
    get_settings.cache_clear()
    # The model stays silent for 3 s: long enough that the stream has begun (the request waits up to 1 s for
    # the provider to take the question) well before the first token, even on a loaded machine.
    provider.script(Reply(text="finally", ttft=3.0))
    text = _post_stream(live, token, message="think").text
    before_first_token = text.split("event: token", 1)[0]
    assert before_first_token.count(": keepalive") >= 2
    events, _ = parse_sse(text)
    assert events[-1].event == "done" and events[-1].data["content"] == "finally"


def test_the_same_idempotency_key_attaches_to_the_same_run(live: str, api: Api, token: str, provider):
    provider.script(Reply(text="only once", ttft=0.3))
    first = _post_stream(live, token, message="pay the invoice", idempotency_key="inv-77")
    again = _post_stream(live, token, message="pay the invoice", idempotency_key="inv-77")
    blocking = api.chat(token, message="pay the invoice", idempotency_key="inv-77")
    assert first.headers["X-Run-Id"] == again.headers["X-Run-Id"] == blocking.json()["run_id"]
    assert parse_sse(again.text)[0][-1].data["content"] == "only once"
    assert len(provider.requests) == 1


def test_where_responses_are_buffered_the_stream_ends_with_retry_and_resumes(
    live: str, token: str, provider, monkeypatch
):
    # Given a deployment that cannot hold a response open (long-poll SSE)
    monkeypatch.setenv("OBERIK_SSE_WINDOW_SECONDS", "0.3")
    get_settings.cache_clear()
    provider.script(Reply(text=LONG_TEXT, token_delay=0.02))

    # When a client follows the retry hints with Last-Event-ID
    r = _post_stream(live, token, message="long")
    run_id = r.headers["X-Run-Id"]
    events, _ = parse_sse(r.text)
    assert "retry: 1000" in r.text
    rounds = 1
    while not events or events[-1].event != "done":  # a window may close before the first frame
        more = _attach(live, token, run_id, last=events[-1].id if events else 0).text
        events += parse_sse(more)[0]
        rounds += 1
        assert rounds < 40

    # Then the whole answer arrives across several responses, every frame once
    assert rounds > 1
    assert [e.id for e in events] == list(range(1, len(events) + 1))
    assert _text(events) == LONG_TEXT


def test_a_replay_read_from_the_table_in_growing_pages_sends_every_frame_once_in_order(
    live: str, token: str, provider: ScriptedProvider, monkeypatch: pytest.MonkeyPatch
):
    from oberik.adapters.frame_cache import FRAMES
    from oberik.api import sse

    # Given a finished run of a few dozen frames, forgotten by this process (a reader elsewhere reads the table)
    provider.script(Reply(text=" ".join(f"w{i}" for i in range(60)), token_delay=0.06))
    first = _post_stream(live, token, message="long")
    run_id = first.headers["X-Run-Id"]
    written = [e.id for e in parse_sse(first.text)[0]]
    assert len(written) > 20
    FRAMES.forget(run_id)

    # When it is replayed with tiny pages that grow while the reader catches up
    monkeypatch.setattr(sse, "REPLAY_PAGE", 2)
    monkeypatch.setattr(sse, "MAX_REPLAY_PAGE", 8)
    reads: list[int] = []
    real = DynamoStore.frames_after

    def counting(self: Any, run: str, after: int, limit: int | None = None, **kw: Any) -> Any:
        reads.append(limit or 0)
        return real(self, run, after, limit, **kw)

    monkeypatch.setattr(DynamoStore, "frames_after", counting)
    replay = parse_sse(_attach(live, token, run_id, last=0).text)[0]

    # Then every frame came once, in order, and the pages grew 2, 8, 8 ...
    assert [e.id for e in replay] == written
    assert reads[:3] == [2, 8, 8]
