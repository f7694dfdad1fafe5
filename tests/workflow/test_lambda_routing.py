"""oberik.local.lambda_routing: moto's Step Functions engine running Lambda tasks as Python callables."""

from __future__ import annotations

import json
import queue
import time
from collections.abc import Callable
from typing import Any

import boto3
import pytest

from oberik.local import lambda_routing

ARN = "arn:aws:lambda:us-east-1:123456789012:function:{}"
ROLE = "arn:aws:iam::123456789012:role/tiny"

# Decide -> Route -> (Park: waitForTaskToken -> Done) | (Explode, caught -> Recovered) | Done
TINY_ASL: dict[str, Any] = {
    "StartAt": "Decide",
    "States": {
        "Decide": {
            "Type": "Task",
            "Resource": "arn:aws:states:::lambda:invoke",
            "Parameters": {"FunctionName": ARN.format("decide"), "Payload.$": "$"},
            "OutputPath": "$.Payload",
            "Next": "Route",
        },
        "Route": {
            "Type": "Choice",
            "Choices": [
                {"Variable": "$.verdict", "StringEquals": "pause", "Next": "Park"},
                {"Variable": "$.verdict", "StringEquals": "explode", "Next": "Explode"},
            ],
            "Default": "Done",
        },
        "Park": {
            "Type": "Task",
            "Resource": "arn:aws:states:::lambda:invoke.waitForTaskToken",
            "Parameters": {"FunctionName": ARN.format("park"), "Payload": {"task_token.$": "$$.Task.Token"}},
            "ResultPath": "$.resume",
            "Next": "Done",
        },
        "Explode": {
            "Type": "Task",
            "Resource": "arn:aws:states:::lambda:invoke",
            "Parameters": {"FunctionName": "explode", "Payload.$": "$"},
            "Catch": [{"ErrorEquals": ["ValueError"], "ResultPath": "$.error", "Next": "Recovered"}],
            "Next": "Done",
        },
        "Recovered": {"Type": "Succeed"},
        "Done": {"Type": "Succeed"},
    },
}


class Functions:
    """The tiny machine's Lambdas as plain callables, recording what they were given."""

    def __init__(self) -> None:
        self.events: dict[str, list[dict[str, Any]]] = {"decide": [], "park": [], "explode": []}
        self.tokens: queue.Queue[str] = queue.Queue()

    def routes(self) -> dict[str, Callable[[dict[str, Any]], Any]]:
        return {"decide": self.decide, ARN.format("park"): self.park, "explode": self.explode}

    def decide(self, event: dict[str, Any]) -> dict[str, Any]:
        self.events["decide"].append(event)
        return {"verdict": event["want"], "decided": True}

    def park(self, event: dict[str, Any]) -> dict[str, Any]:
        self.events["park"].append(event)
        self.tokens.put(event["task_token"])
        return {"parked": True}

    def explode(self, event: dict[str, Any]) -> dict[str, Any]:
        self.events["explode"].append(event)
        raise ValueError("the step blew up")


def wait_for(sfn: Any, execution_arn: str, timeout: float = 10.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        described: dict[str, Any] = sfn.describe_execution(executionArn=execution_arn)
        if described["status"] != "RUNNING" or time.monotonic() > deadline:
            return described
        time.sleep(0.02)


def entered_states(sfn: Any, execution_arn: str) -> list[str]:
    events = sfn.get_execution_history(executionArn=execution_arn)["events"]
    return [e["stateEnteredEventDetails"]["name"] for e in events if "stateEnteredEventDetails" in e]


@pytest.fixture
def tiny(mocked_aws: None) -> tuple[Any, str, Functions]:
    functions = Functions()
    lambda_routing.install(functions.routes())
    sfn = boto3.client("stepfunctions")
    arn = sfn.create_state_machine(name="tiny", definition=json.dumps(TINY_ASL), roleArn=ROLE)["stateMachineArn"]
    return sfn, arn, functions


def test_task_pauses_at_wait_for_task_token_and_resumes_on_task_success(tiny: tuple[Any, str, Functions]) -> None:
    sfn, arn, functions = tiny
    # Given an execution whose first routed task decides to pause
    execution = sfn.start_execution(stateMachineArn=arn, name="pause-1", input=json.dumps({"want": "pause"}))

    # When the parking function receives its task token
    token = functions.tokens.get(timeout=10)

    # Then the execution waits there
    time.sleep(0.1)
    assert sfn.describe_execution(executionArn=execution["executionArn"])["status"] == "RUNNING"
    assert entered_states(sfn, execution["executionArn"]) == ["Decide", "Route", "Park"]
    assert functions.events["decide"] == [{"want": "pause"}]

    # When the token is sent back
    sfn.send_task_success(taskToken=token, output=json.dumps({"answer": 42}))

    # Then it resumes with that output and succeeds
    done = wait_for(sfn, execution["executionArn"])
    assert done["status"] == "SUCCEEDED"
    assert json.loads(done["output"]) == {"verdict": "pause", "decided": True, "resume": {"answer": 42}}
    assert entered_states(sfn, execution["executionArn"]) == ["Decide", "Route", "Park", "Done"]


def test_a_raising_function_is_a_function_error_the_catch_handles(tiny: tuple[Any, str, Functions]) -> None:
    sfn, arn, _ = tiny
    # Given an execution that reaches a function which raises ValueError
    execution = sfn.start_execution(stateMachineArn=arn, name="boom-1", input=json.dumps({"want": "explode"}))

    # When it runs to the end
    done = wait_for(sfn, execution["executionArn"])

    # Then the Catch on ValueError took it to Recovered, with Lambda's error payload as the cause
    assert done["status"] == "SUCCEEDED"
    assert entered_states(sfn, execution["executionArn"]) == ["Decide", "Route", "Explode", "Recovered"]
    error = json.loads(done["output"])["error"]
    assert error["Error"] == "ValueError"
    cause = json.loads(error["Cause"])
    assert cause["errorType"] == "ValueError"
    assert cause["errorMessage"] == "the step blew up"
    assert any("explode" in line for line in cause["stackTrace"])


def test_routing_is_by_function_name_in_any_form(tiny: tuple[Any, str, Functions]) -> None:
    # Given routes installed by bare name ("decide") and by ARN ("park") (the tiny fixture does that)
    client = boto3.client("lambda")

    # When each is invoked by another form of its name (ARN with qualifier, partial ARN, name with qualifier)
    by_arn = client.invoke(FunctionName=ARN.format("decide") + ":live", Payload=json.dumps({"want": "x"}))
    by_partial = client.invoke(FunctionName="123456789012:function:park", Payload=json.dumps({"task_token": "t"}))
    by_qualified = client.invoke(FunctionName="decide:live", Payload=json.dumps({"want": "y"}))

    # Then each reaches its callable and returns its result, with no function error
    assert json.load(by_arn["Payload"]) == {"verdict": "x", "decided": True}
    assert json.load(by_partial["Payload"]) == {"parked": True}
    assert json.load(by_qualified["Payload"]) == {"verdict": "y", "decided": True}
    assert "FunctionError" not in by_arn and "FunctionError" not in by_partial and "FunctionError" not in by_qualified


def test_an_unrouted_function_answers_an_error_naming_it(mocked_aws: None) -> None:
    # Given the router with one route
    lambda_routing.install({"known": lambda event: event})

    # When a function with no route is invoked
    answer = boto3.client("lambda").invoke(FunctionName=ARN.format("nobody"), Payload=b"{}")

    # Then Lambda reports an unhandled error that names the function and the routes there are
    assert answer["FunctionError"] == "Unhandled"
    payload = json.load(answer["Payload"])
    assert payload["errorType"] == "UnroutedFunction"
    assert "'nobody'" in payload["errorMessage"]
    assert "known" in payload["errorMessage"]


def test_a_result_that_is_not_json_is_a_marshal_error(mocked_aws: None) -> None:
    # Given a function returning something JSON cannot encode
    lambda_routing.install({"odd": lambda event: {1, 2}})

    # When it is invoked
    answer = boto3.client("lambda").invoke(FunctionName="odd", Payload=b"{}")

    # Then Lambda's marshalling error comes back, as the real runtime would report it
    assert answer["FunctionError"] == "Unhandled"
    assert json.load(answer["Payload"])["errorType"] == "Runtime.MarshalError"


def test_install_is_idempotent_and_uninstall_gives_moto_its_invoke_back(mocked_aws: None) -> None:
    # Given moto's own invoke, and routes installed twice
    from moto.awslambda_simple.models import LambdaSimpleBackend

    original = LambdaSimpleBackend.invoke
    routes = {"echo": lambda event: {"echo": event}}
    lambda_routing.install(routes)
    lambda_routing.install(routes)
    assert list(lambda_routing.installed()) == ["echo"]
    routed = boto3.client("lambda").invoke(FunctionName="echo", Payload=b'{"a": 1}')
    assert json.load(routed["Payload"]) == {"echo": {"a": 1}}

    # When routing is uninstalled (twice)
    lambda_routing.uninstall()
    lambda_routing.uninstall()

    # Then moto's method is back and the routes are gone
    assert LambdaSimpleBackend.invoke is original
    assert lambda_routing.installed() == {}


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("oberik-step", "oberik-step"),
        ("oberik-step:live", "oberik-step"),
        ("123456789012:function:oberik-step", "oberik-step"),
        ("arn:aws:lambda:us-east-1:123456789012:function:oberik-step", "oberik-step"),
        ("arn:aws:lambda:us-east-1:123456789012:function:oberik-step:7", "oberik-step"),
    ],
)
def test_function_name_of_strips_arn_and_qualifier(given: str, expected: str) -> None:
    # Given / When / Then
    assert lambda_routing.function_name_of(given) == expected


def test_executions_share_one_parse_of_the_definition_but_no_state(
    tiny: tuple[Any, str, Functions], monkeypatch: pytest.MonkeyPatch
) -> None:
    from moto.stepfunctions.parser.asl.parse.asl_parser import AmazonStateLanguageParser

    lambda_routing.lighter_executions()
    sfn, arn, functions = tiny
    parses: list[str] = []
    real_parse = AmazonStateLanguageParser.parse

    def counting(definition: str) -> Any:
        parses.append(definition)
        return real_parse(definition)

    monkeypatch.setattr(AmazonStateLanguageParser, "parse", staticmethod(counting))
    # Given one execution parked at its task token while others run the same definition to other ends
    parked = sfn.start_execution(stateMachineArn=arn, name="share-park", input=json.dumps({"want": "pause"}))
    token = functions.tokens.get(timeout=10)
    boom = sfn.start_execution(stateMachineArn=arn, name="share-boom", input=json.dumps({"want": "explode"}))
    plain = sfn.start_execution(stateMachineArn=arn, name="share-done", input=json.dumps({"want": "done"}))
    assert wait_for(sfn, boom["executionArn"])["status"] == "SUCCEEDED"
    assert wait_for(sfn, plain["executionArn"])["status"] == "SUCCEEDED"
    sfn.send_task_success(taskToken=token, output=json.dumps({"answer": 1}))
    assert wait_for(sfn, parked["executionArn"])["status"] == "SUCCEEDED"

    # Then each took its own path, and the definition was parsed at most once in this test
    assert entered_states(sfn, boom["executionArn"]) == ["Decide", "Route", "Explode", "Recovered"]
    assert entered_states(sfn, plain["executionArn"]) == ["Decide", "Route", "Done"]
    assert entered_states(sfn, parked["executionArn"]) == ["Decide", "Route", "Park", "Done"]
    assert len(parses) <= 1

    # And a changed definition is the one that runs afterwards
    changed = json.loads(json.dumps(TINY_ASL))
    changed["States"]["Decide"]["Next"] = "Done"
    sfn.update_state_machine(stateMachineArn=arn, definition=json.dumps(changed))
    after = sfn.start_execution(stateMachineArn=arn, name="share-after", input=json.dumps({"want": "explode"}))
    assert wait_for(sfn, after["executionArn"])["status"] == "SUCCEEDED"
    assert entered_states(sfn, after["executionArn"]) == ["Decide", "Done"]
