"""oberik.local.stack in process: template.yaml's table, Lambdas and turn state machine on mock_aws."""

from __future__ import annotations

import json
import os
import queue
import time
from typing import Any

import pytest

from oberik.adapters.aws import client
from oberik.local import lambda_routing
from oberik.local.stack import STATE_MACHINE_NAME, LambdaAdapter, LocalStack
from oberik.settings import get_settings


class ScriptedTurn:
    """Stand-ins for the turn's Lambdas: the step answers the verdicts it is given, in order."""

    def __init__(self, *verdicts: str) -> None:
        self.verdicts = list(verdicts)
        self.calls: list[str] = []
        self.tokens: queue.Queue[str] = queue.Queue()

    def overrides(self) -> dict[str, lambda_routing.Route]:
        return {
            "StepFunction": self.step,
            "ParkFunction": self.park,
            "FinishFunction": self.finish,
            "oberik-fail": self.fail,
        }

    def step(self, event: dict[str, Any]) -> dict[str, Any]:
        self.calls.append("step")
        verdict = self.verdicts.pop(0)
        if verdict == "raise":
            raise RuntimeError("model provider unreachable")
        steps = int(event.get("execution_steps", 0)) + 1
        return {"turn_id": "t1", "run_id": "r1", "verdict": verdict, "wait_seconds": 0, "execution_steps": steps}

    def park(self, event: dict[str, Any]) -> dict[str, Any]:
        self.calls.append("park")
        self.tokens.put(event["task_token"])
        return {}

    def finish(self, event: dict[str, Any]) -> dict[str, Any]:
        self.calls.append("finish")
        return {"status": "completed"}

    def fail(self, event: dict[str, Any]) -> dict[str, Any]:
        self.calls.append(f"fail:{event['error']['Error']}")
        return {}


def run(stack: LocalStack, name: str) -> str:
    started = client("stepfunctions").start_execution(
        stateMachineArn=stack.state_machine_arn, name=name, input=json.dumps({"turn_id": "t1", "run_id": "r1"})
    )
    return str(started["executionArn"])


def wait_for(execution_arn: str, timeout: float = 10.0) -> dict[str, Any]:
    sfn = client("stepfunctions")
    deadline = time.monotonic() + timeout
    while True:
        described: dict[str, Any] = sfn.describe_execution(executionArn=execution_arn)
        if described["status"] != "RUNNING" or time.monotonic() > deadline:
            return described
        time.sleep(0.02)


def entered_states(execution_arn: str) -> list[str]:
    events = client("stepfunctions").get_execution_history(executionArn=execution_arn)["events"]
    return [e["stateEnteredEventDetails"]["name"] for e in events if "stateEnteredEventDetails" in e]


def test_stack_builds_the_template_resources_and_points_settings_at_them(mocked_aws: None) -> None:
    # Given an empty moto

    # When the stack is built (with stand-ins for the turn functions)
    with LocalStack.in_process(overrides=ScriptedTurn().overrides()) as stack:
        # Then settings name the table and the state machine it created
        settings = get_settings()
        assert settings.environment == "local"
        assert settings.table_name == stack.table_name
        assert settings.state_machine_arn == stack.state_machine_arn
        assert stack.state_machine_arn.endswith(f":stateMachine:{STATE_MACHINE_NAME}")
        # And the table has the template's keys and TTL
        table = client("dynamodb").describe_table(TableName=stack.table_name)["Table"]
        assert [k["AttributeName"] for k in table["KeySchema"]] == ["pk", "sk"]
        assert [i["IndexName"] for i in table["GlobalSecondaryIndexes"]] == ["GSI1"]
        ttl = client("dynamodb").describe_time_to_live(TableName=stack.table_name)["TimeToLiveDescription"]
        assert ttl == {"TimeToLiveStatus": "ENABLED", "AttributeName": "expires_at"}
        # And every non-HTTP function exists in moto and is routed, the API function is neither
        names = {f["FunctionName"] for f in client("lambda").list_functions()["Functions"]}
        assert {"oberik-step", "oberik-park", "oberik-finish", "oberik-fail"} <= names
        assert "oberik-api" not in names
        assert set(lambda_routing.installed()) == names
        definition = client("stepfunctions").describe_state_machine(stateMachineArn=stack.state_machine_arn)
        assert "${" not in definition["definition"]
        assert stack.function_arns["oberik-step"] in definition["definition"]


def test_real_turn_machine_pauses_and_resumes_through_routed_functions(mocked_aws: None) -> None:
    # Given the real turn state machine whose step pauses once, then finishes
    turn = ScriptedTurn("pause", "finish")
    with LocalStack.in_process(overrides=turn.overrides()) as stack:
        execution = run(stack, "t1")

        # When the park function hands out its token and the token comes back
        token = turn.tokens.get(timeout=10)
        client("stepfunctions").send_task_success(taskToken=token, output=json.dumps({"answers": []}))

        # Then the turn steps again and finishes
        done = wait_for(execution)
        assert done["status"] == "SUCCEEDED"
        assert entered_states(execution) == ["Step", "Route", "Park", "Step", "Route", "Finish", "Finished", "Done"]
        assert turn.calls == ["step", "park", "step", "finish"]


def test_a_raising_step_is_caught_and_ends_the_turn_through_fail(mocked_aws: None) -> None:
    # Given the real turn state machine whose step raises
    turn = ScriptedTurn("raise")
    with LocalStack.in_process(overrides=turn.overrides()) as stack:
        # When a turn runs
        execution = run(stack, "t2")
        done = wait_for(execution)

        # Then the Catch sends it through Fail, which learns the error, and the execution fails
        assert done["status"] == "FAILED"
        assert done["error"] == "TurnFailed"
        assert entered_states(execution) == ["Step", "Fail", "Failed"]
        assert turn.calls == ["step", "fail:RuntimeError"]


def test_stop_restores_the_environment_and_removes_the_routes(mocked_aws: None) -> None:
    # Given the environment before the stack
    before = dict(os.environ)

    # When a stack is built and stopped
    stack = LocalStack.in_process(overrides=ScriptedTurn().overrides())
    assert os.environ["OBERIK_STATE_MACHINE_ARN"] == stack.state_machine_arn
    stack.stop()
    stack.stop()

    # Then the environment is as it was and nothing is routed
    assert dict(os.environ) == before
    assert lambda_routing.installed() == {}


def test_in_process_needs_an_active_mock(aws_env: None) -> None:
    # Given no mock_aws

    # When / Then building in process refuses rather than touching real AWS
    with pytest.raises(RuntimeError, match="mock_aws"):
        LocalStack.in_process()


def test_aws_fixture_routes_the_turn_functions_to_their_real_adapters(aws: LocalStack) -> None:
    # Given the aws fixture (no overrides)

    # When the routes are inspected
    routes = lambda_routing.installed()

    # Then each turn function runs its functions/<name>/app.py handler
    for name in ("oberik-step", "oberik-park", "oberik-finish", "oberik-fail"):
        route = routes[name]
        assert isinstance(route, LambdaAdapter), name
        assert route.handler.__module__.startswith("oberik_fn_"), name
        assert route.arn == aws.function_arns[name]
