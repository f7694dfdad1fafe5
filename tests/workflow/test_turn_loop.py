"""The real statemachines/turn.asl.json on moto's Step Functions engine, with Lambda tasks run in-process."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from oberik.adapters.aws import client
from oberik.adapters.dynamodb import DynamoStore
from oberik.local.scripted_provider import Reply, ScriptedProvider
from oberik.settings import get_settings
from tests.api_fixtures import Api


def _states_entered(execution_arn: str) -> list[str]:
    sfn = client("stepfunctions")
    events: list[dict[str, Any]] = []
    kwargs: dict[str, Any] = {"executionArn": execution_arn}
    while True:
        r = sfn.get_execution_history(**kwargs)
        events.extend(r["events"])
        if not r.get("nextToken"):
            break
        kwargs["nextToken"] = r["nextToken"]
    return [e["stateEnteredEventDetails"]["name"] for e in events if "stateEnteredEventDetails" in e]


def _executions(turn_id: str) -> list[dict[str, Any]]:
    """The turn's executions, once they have all ended (a response is released a moment before its
    execution reaches its final state)."""
    sfn = client("stepfunctions")
    mine: list[dict[str, Any]] = []
    for _ in range(250):
        found = sfn.list_executions(stateMachineArn=get_settings().state_machine_arn)["executions"]
        mine = sorted((e for e in found if e["name"].startswith(turn_id)), key=lambda e: e["name"])
        if mine and all(e["status"] != "RUNNING" for e in mine):
            break
        time.sleep(0.02)
    return mine


def _turn_of(run_id: str) -> str:
    run = DynamoStore().get_run(run_id)
    assert run is not None
    return run.turn_id


def test_a_three_step_turn_calls_current_time_then_wait_then_answers(api: Api, token: str, provider: ScriptedProvider):
    # Given a model that asks for the time, then to wait a second, then answers
    provider.script(
        Reply(tool_calls=[{"name": "current_time", "arguments": {"timezone": "Europe/Paris"}}]),
        Reply(tool_calls=[{"name": "wait", "arguments": {"seconds": 1}}]),
        Reply(text="It is morning in Paris, and I waited a second as asked."),
    )

    # When the turn runs
    r = api.chat(token, message="What time is it in Paris? Then wait a second.")

    # Then the answer comes back after three model calls and the machine walked Step -> Step -> Wait -> Step
    assert r.status_code == 200, r.text
    assert r.json()["content"] == "It is morning in Paris, and I waited a second as asked."
    assert len(provider.requests) == 3
    (execution,) = _executions(_turn_of(r.json()["run_id"]))
    assert execution["status"] == "SUCCEEDED"
    assert _states_entered(execution["executionArn"]) == [
        "Step",
        "Route",
        "Step",
        "Route",
        "WaitForTool",
        "Step",
        "Route",
        "Finish",
        "Finished",
        "Done",
    ]
    # And each model call saw the previous tool results
    second_call = provider.requests[1]["messages"]
    tool_result = json.loads(second_call[-1]["content"])
    assert second_call[-1]["role"] == "tool" and tool_result["timezone"] == "Europe/Paris"
    third_call = provider.requests[2]["messages"]
    assert json.loads(third_call[-1]["content"])["waited_seconds"] == 1
    # And the transcript keeps the tool calls paired with their results
    msgs = api.get(f"/chat/sessions/{r.json()['session_id']}/messages", token).json()["messages"]
    assert [m["role"] for m in msgs] == ["user", "assistant", "tool", "assistant", "tool", "assistant"]
    assert msgs[1]["tool_calls"][0]["function"]["name"] == "current_time"
    assert msgs[2]["tool_call_id"] == msgs[1]["tool_calls"][0]["id"]


def test_the_frames_of_a_turn_record_tools_and_end_with_done(api: Api, token: str, provider: ScriptedProvider):
    provider.script(Reply(tool_calls=[{"name": "current_time", "arguments": {}}]), Reply(text="Noon."))
    r = api.chat(token, message="time?")
    # (the done frame is written just after the run is marked ended, which is what releases this response)
    frames: list = []
    for _ in range(100):
        frames = DynamoStore().frames_after(r.json()["run_id"], 0)
        if frames and frames[-1]["event"] == "done":
            break
        time.sleep(0.02)
    events = [f["event"] for f in frames]
    assert events[:2] == ["run", "start"]
    assert events[-1] == "done"
    assert "tool_start" in events and "tool_end" in events
    assert [f["seq"] for f in frames] == list(range(1, len(frames) + 1))
    assert frames[-1]["data"]["content"] == "Noon."
    assert frames[1]["data"]["session_id"] == r.json()["session_id"]


def test_past_the_step_budget_the_turn_continues_as_a_new_execution(
    api: Api, token: str, provider: ScriptedProvider, monkeypatch: pytest.MonkeyPatch
):
    # Given a step budget of one step per execution
    monkeypatch.setenv("OBERIK_STEP_BUDGET", "1")
    get_settings.cache_clear()
    provider.script(
        Reply(tool_calls=[{"name": "current_time", "arguments": {}}]),
        Reply(tool_calls=[{"name": "current_time", "arguments": {"timezone": "Asia/Tokyo"}}]),
        Reply(text="Done after two lookups."),
    )

    # When a turn takes three steps
    r = api.chat(token, message="time here and in Tokyo?")

    # Then it ran across three executions, each handing over to the next, and answered once
    assert r.status_code == 200, r.text
    assert r.json()["content"] == "Done after two lookups."
    executions = _executions(_turn_of(r.json()["run_id"]))
    assert [e["status"] for e in executions] == ["SUCCEEDED", "SUCCEEDED", "SUCCEEDED"]
    assert _states_entered(executions[0]["executionArn"]) == [
        "Step",
        "Route",
        "Step",
        "Route",
        "ContinueAsNew",
        "Continued",
    ]
    assert _states_entered(executions[-1]["executionArn"])[-3:] == ["Finish", "Finished", "Done"]


def test_a_failing_step_is_caught_and_the_turn_ends_failed(api: Api, token: str, provider: ScriptedProvider):
    # Given a provider with nothing scripted (it answers 500)
    # When a turn runs
    r = api.chat(token, message="hello?")

    # Then the Catch routes to Fail, the execution ends failed, and the caller hears a provider error
    assert r.status_code == 502
    assert r.json()["code"] == "provider_error"
    (execution,) = _executions(_turn_of(r.json()["detail"].split("run ")[-1].rstrip(")")))
    assert execution["status"] == "FAILED"
    assert _states_entered(execution["executionArn"]) == ["Step", "Fail", "Failed"]


def test_too_many_steps_end_the_turn_with_hit_tool_limit(
    api: Api, token: str, provider: ScriptedProvider, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv("OBERIK_MAX_STEPS", "2")
    get_settings.cache_clear()
    provider.script(*[Reply(tool_calls=[{"name": "current_time", "arguments": {}}]) for _ in range(2)])
    r = api.chat(token, message="loop forever")
    assert r.status_code == 200, r.text
    assert r.json()["finish_reason"] == "hit_tool_limit"
    assert r.json()["warnings"]
    assert len(provider.requests) == 2


def test_an_empty_reply_is_asked_again_once_then_reported_as_no_answer(api: Api, token: str, provider):
    # Given a provider that drops the reply twice
    provider.script(Reply(text=""), Reply(text=""))

    # When a turn runs
    r = api.chat(token, message="hello?")

    # Then it asked twice and says honestly that there is no answer
    assert r.status_code == 200, r.text
    assert len(provider.requests) == 2
    assert r.json()["finish_reason"] == "no_answer" and r.json()["content"] == ""
    assert any("no answer" in w for w in r.json()["warnings"])


def test_an_empty_reply_followed_by_a_real_one_is_a_normal_answer(api: Api, token: str, provider):
    provider.script(Reply(text=""), Reply(text="Here it is."))
    r = api.chat(token, message="hello?")
    assert r.json()["content"] == "Here it is." and r.json()["finish_reason"] is None
