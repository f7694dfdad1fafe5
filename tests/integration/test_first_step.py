"""A streamed turn's first step runs where the turn was requested, and the state machine adopts its verdict;
when that runner goes away, the execution's own Step takes the step over."""

from __future__ import annotations

import threading
from typing import Any

import httpx
import pytest

from oberik.adapters.dynamodb import DynamoStore
from oberik.adapters.stepfunctions import StepFunctionsOrchestrator
from oberik.engine import inline, runs
from oberik.local.scripted_provider import Fail, Reply, ScriptedProvider
from oberik.settings import get_settings
from tests.api_fixtures import parse_sse


def _stream(live: str, token: str, message: str) -> list[Any]:
    r = httpx.post(
        f"{live}/chat/stream", json={"message": message}, headers={"Authorization": f"Bearer {token}"}, timeout=60
    )
    assert r.status_code == 200
    events, _ = parse_sse(r.text)
    return events


def _tokens(events: list[Any]) -> str:
    return "".join(e.data["delta"] for e in events if e.event == "token")


@pytest.fixture
def launches(monkeypatch: pytest.MonkeyPatch) -> list[threading.Thread]:
    started: list[threading.Thread] = []
    real = inline.launch

    def counting(store: Any, turn: Any, run: Any, fresh: Any = None) -> inline.Launched:
        launched = real(store, turn, run, fresh)
        started.append(launched.thread)
        return launched

    monkeypatch.setattr(inline, "launch", counting)
    return started


def test_the_first_step_runs_once_where_the_turn_was_requested(
    live: str, token: str, provider: ScriptedProvider, launches: list[threading.Thread]
):
    # Given a model that calls a tool, then answers
    provider.script(Reply(tool_calls=[{"name": "current_time", "arguments": {}}]), Reply(text="It is noon."))

    # When the turn is streamed
    events = _stream(live, token, "time?")

    # Then the request's process ran the first step, the execution adopted it (the model was asked once per
    # step, not twice for the first), and the rest of the turn ran in the state machine as usual
    assert len(launches) == 1
    assert len(provider.requests) == 2
    assert events[-1].event == "done" and events[-1].data["content"] == "It is noon."
    assert [e.id for e in events] == list(range(1, len(events) + 1))
    turn = DynamoStore().get_turn(_turn_of(events))
    assert turn is not None and turn.inline_until == 0 and turn.inline_result is None and turn.steps == 2


def _turn_of(events: list[Any]) -> str:
    store = DynamoStore()
    run = store.get_run(events[0].data["run_id"])
    assert run is not None
    return run.turn_id


def test_a_blocking_turn_runs_every_step_in_the_state_machine(
    api: Any, token: str, provider: ScriptedProvider, launches: list[threading.Thread]
):
    provider.script(Reply(text="hello"))
    r = api.chat(token, message="hi")
    assert r.status_code == 200 and r.json()["content"] == "hello"
    assert launches == []


def test_the_switch_turns_it_off(
    live: str, token: str, provider: ScriptedProvider, launches: list[threading.Thread], monkeypatch, request
):
    monkeypatch.setenv("OBERIK_INLINE_FIRST_STEP", "false")
    get_settings.cache_clear()
    request.addfinalizer(get_settings.cache_clear)
    provider.script(Reply(text="from the state machine"))
    events = _stream(live, token, "hi")
    assert launches == []
    assert events[-1].data["content"] == "from the state machine"


def test_a_runner_that_never_ran_is_taken_over_when_its_lease_runs_out(
    live: str, token: str, provider: ScriptedProvider, monkeypatch: pytest.MonkeyPatch
):
    # Given a process that claims the conversation and then goes away before its first step starts
    # (it never tells the request that the model has the question: the execution starts after the short wait)
    monkeypatch.setattr(inline, "LEASE_SECONDS", 1.0)
    monkeypatch.setattr(inline, "OPEN_WAIT_SECONDS", 0.2)
    monkeypatch.setattr(inline, "launch", lambda *args: inline.Launched(threading.Thread(), threading.Event()))
    provider.script(Reply(text="answered by the state machine"))

    # When the turn is streamed
    events = _stream(live, token, "hi")

    # Then the execution's Step waits out the lease, takes the step and answers: exactly one model call
    assert events[-1].event == "done" and events[-1].data["content"] == "answered by the state machine"
    assert _tokens(events) == "answered by the state machine"
    assert len(provider.requests) == 1


def test_a_runner_past_its_lease_stops_and_the_state_machine_answers(
    live: str, token: str, provider: ScriptedProvider, monkeypatch: pytest.MonkeyPatch
):
    # Given a runner whose lease lapses while it waits for a slow provider (no heartbeat in time)
    monkeypatch.setattr(inline, "LEASE_SECONDS", 1.0)
    monkeypatch.setattr(inline, "HEARTBEAT_SECONDS", 30.0)
    provider.script(Reply(text="slow first try", ttft=2.5), Reply(text="second try"))

    # When the turn is streamed
    events = _stream(live, token, "hi")

    # Then the runner writes nothing to the turn once its lease is gone, and the Step's own call answers.
    # At most the runner's first streamed chunk may appear before the takeover's text (a repeated stretch).
    done = events[-1]
    assert done.event == "done" and done.data["content"] == "second try"
    assert _tokens(events).endswith("second try")
    assert len(provider.requests) == 2


def test_a_first_step_that_fails_at_the_provider_ends_the_turn_with_an_error_frame(
    live: str, token: str, provider: ScriptedProvider
):
    # Given a provider that refuses the first call
    provider.script(Fail(500))

    # When the turn is streamed
    events = _stream(live, token, "hi")

    # Then the failure travels through the state machine's Fail state as any step's would
    assert events[-1].event == "error"
    assert events[-1].data["code"] == "provider_error"
    # and the conversation is free for the next turn
    provider.script(Reply(text="fine now"))
    again = _stream(live, token, "again")
    assert again[-1].event == "done"


def test_a_disconnect_during_the_first_step_does_not_stop_it(live: str, token: str, provider: ScriptedProvider):
    provider.script(Reply(text=" ".join(f"w{i}" for i in range(30)), token_delay=0.02))
    with httpx.stream(
        "POST", f"{live}/chat/stream", json={"message": "hi"}, headers={"Authorization": f"Bearer {token}"}
    ) as r:
        run_id = r.headers["X-Run-Id"]
        for line in r.iter_lines():
            if line.startswith("event: token"):
                break  # leave mid-answer
    store = DynamoStore()
    import time

    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        run = store.get_run(run_id)
        if run is not None and run.status == "completed":
            break
        time.sleep(0.05)
    assert run is not None and run.status == "completed"
    assert run.result is not None and run.result["content"] == " ".join(f"w{i}" for i in range(30))


def test_the_execution_starts_once_the_model_has_the_question(
    live: str, token: str, provider: ScriptedProvider, monkeypatch: pytest.MonkeyPatch
):
    # Starting the execution costs work in the requesting process; it waits until the request is on its way.
    seen_at_start: list[int] = []
    real_start = StepFunctionsOrchestrator.start

    def start(self: Any, name: str, payload: dict[str, Any]) -> str:
        seen_at_start.append(len(provider.requests))
        return real_start(self, name, payload)

    monkeypatch.setattr(StepFunctionsOrchestrator, "start", start)
    provider.script(Reply(text="hello", ttft=0.5))
    events = _stream(live, token, "hi")
    assert seen_at_start == [1]  # the provider had the request when the execution was started
    assert events[-1].event == "done" and events[-1].data["content"] == "hello"


def test_a_turn_whose_execution_never_started_is_lost_and_frees_its_conversation(
    live: str, token: str, provider: ScriptedProvider
):
    import time

    headers = {"Authorization": f"Bearer {token}"}
    store = DynamoStore()
    with pytest.MonkeyPatch.context() as gone:
        # Given a process that claims the conversation and goes away before the first step or the execution
        gone.setattr(runs, "NEVER_STARTED_SECONDS", 1.0)
        gone.setattr(inline, "OPEN_WAIT_SECONDS", 0.0)
        gone.setattr(inline, "launch", lambda *args: inline.Launched(threading.Thread(), threading.Event()))
        gone.setattr(StepFunctionsOrchestrator, "start", lambda self, name, payload: self.execution_arn(name))
        with httpx.stream("POST", f"{live}/chat/stream", json={"message": "hi"}, headers=headers, timeout=10) as r:
            run_id = r.headers["X-Run-Id"]
        run = store.get_run(run_id)
        assert run is not None
        sid = run.session_id

        # Then, briefly, it still counts as starting (its execution may be on its way) ...
        assert httpx.get(f"{live}/chat/sessions/{sid}/run", headers=headers).json()["status"] == "running"
        # ... and once that cannot be so any more it is lost, and says why
        time.sleep(1.1)
        assert httpx.get(f"{live}/chat/sessions/{sid}/run", headers=headers).json()["status"] == "lost"
    ended = store.get_run(run_id)
    assert ended is not None and "never started" in (ended.error or {}).get("detail", "")

    # and the conversation takes a new turn
    provider.script(Reply(text="fresh start"))
    r = httpx.post(f"{live}/chat/stream", json={"message": "again", "session_id": sid}, headers=headers, timeout=60)
    assert r.status_code == 200, r.text
    assert parse_sse(r.text)[0][-1].data["content"] == "fresh start"


def test_the_execution_waits_for_a_first_step_in_its_own_process_without_polling_the_turn(
    live: str, token: str, provider: ScriptedProvider, monkeypatch: pytest.MonkeyPatch
):
    # While the first step streams a long answer, the Step task waiting to adopt it reads the turn only when
    # that step is over (or its lease could have lapsed), not every fraction of a second.
    reads: list[float] = []
    real_adopt, real_get_turn = inline.adopt, DynamoStore.get_turn
    adopting = threading.local()

    def get_turn(self: Any, turn_id: str) -> Any:
        if getattr(adopting, "on", False):
            reads.append(1.0)
        return real_get_turn(self, turn_id)

    def adopt(*args: Any, **kwargs: Any) -> Any:
        adopting.on = True
        try:
            return real_adopt(*args, **kwargs)
        finally:
            adopting.on = False

    monkeypatch.setattr(DynamoStore, "get_turn", get_turn)
    monkeypatch.setattr(inline, "adopt", adopt)
    provider.script(Reply(text=" ".join(f"w{i}" for i in range(40)), ttft=0.3, token_delay=0.03))  # ~1.5 s
    events = _stream(live, token, "a long one")
    assert events[-1].event == "done"
    assert 1 <= len(reads) <= 2  # polling every 0.1-1 s would have read it five or more times
