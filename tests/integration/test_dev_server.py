"""The local stack as a server (what `oberik dev` runs), and `oberik dev` itself."""

from __future__ import annotations

import json
import os
import queue
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import httpx
import pytest

from oberik.local import lambda_routing
from oberik.local.stack import LocalStack
from oberik.settings import get_settings

ROLE = "arn:aws:iam::123456789012:role/tiny"
# Decide -> Route -> (Park: waitForTaskToken -> Done) | (Explode, caught -> Recovered)
TINY_ASL: dict[str, Any] = {
    "StartAt": "Decide",
    "States": {
        "Decide": {
            "Type": "Task",
            "Resource": "arn:aws:states:::lambda:invoke",
            "Parameters": {"FunctionName": "decide", "Payload.$": "$"},
            "OutputPath": "$.Payload",
            "Next": "Route",
        },
        "Route": {
            "Type": "Choice",
            "Choices": [{"Variable": "$.verdict", "StringEquals": "pause", "Next": "Park"}],
            "Default": "Explode",
        },
        "Park": {
            "Type": "Task",
            "Resource": "arn:aws:states:::lambda:invoke.waitForTaskToken",
            "Parameters": {"FunctionName": "park", "Payload": {"task_token.$": "$$.Task.Token"}},
            "ResultPath": "$.resume",
            "Next": "Done",
        },
        "Explode": {
            "Type": "Task",
            "Resource": "arn:aws:states:::lambda:invoke",
            "Parameters": {"FunctionName": "explode", "Payload.$": "$"},
            "Catch": [{"ErrorEquals": ["States.ALL"], "ResultPath": "$.error", "Next": "Recovered"}],
            "Next": "Done",
        },
        "Recovered": {"Type": "Succeed"},
        "Done": {"Type": "Succeed"},
    },
}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def stand_in(event: dict[str, Any]) -> dict[str, Any]:
    return {}


@pytest.fixture
def server(aws_env: None) -> Iterator[LocalStack]:
    # The turn's functions are stand-ins here: these tests are about the server, not the engine.
    overrides = dict.fromkeys(("StepFunction", "ParkFunction", "FinishFunction", "FailFunction"), stand_in)
    stack = LocalStack.server(port=0, overrides=overrides)
    try:
        yield stack
    finally:
        stack.stop()


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


def test_server_listens_on_a_free_loopback_port_and_settings_point_at_it(server: LocalStack) -> None:
    # Given a server started on port 0
    assert server.endpoint_url is not None
    port = int(server.endpoint_url.rsplit(":", 1)[1])

    # When settings and the environment are read
    settings = get_settings()

    # Then everything in this process, including moto's own Step Functions engine, targets that port
    assert server.endpoint_url == f"http://127.0.0.1:{port}" and port > 0
    assert settings.endpoint_url == server.endpoint_url
    assert os.environ["AWS_ENDPOINT_URL"] == server.endpoint_url
    assert os.environ["MOTO_PORT"] == str(port)
    assert settings.state_machine_arn == server.state_machine_arn


def test_server_table_takes_items_over_http(server: LocalStack) -> None:
    # Given the server's table, reached like any client would, through boto3 and the endpoint
    dynamodb = boto3.client("dynamodb", endpoint_url=server.endpoint_url)

    # When an item is written and read back
    dynamodb.put_item(TableName=server.table_name, Item={"pk": {"S": "PROJECT#p"}, "sk": {"S": "META"}})
    got = dynamodb.get_item(TableName=server.table_name, Key={"pk": {"S": "PROJECT#p"}, "sk": {"S": "META"}})

    # Then it is there, in a table with the template's TTL
    assert got["Item"] == {"pk": {"S": "PROJECT#p"}, "sk": {"S": "META"}}
    ttl = dynamodb.describe_time_to_live(TableName=server.table_name)["TimeToLiveDescription"]
    assert ttl["AttributeName"] == "expires_at"


def test_server_runs_a_state_machine_with_routed_lambdas(server: LocalStack) -> None:
    # Given a tiny state machine on the server whose Lambdas are routed to callables in this process
    tokens: queue.Queue[str] = queue.Queue()

    def park(event: dict[str, Any]) -> dict[str, Any]:
        tokens.put(event["task_token"])
        return {}

    def explode(event: dict[str, Any]) -> dict[str, Any]:
        raise ValueError("no such tool")

    lambda_routing.install({"decide": lambda event: {"verdict": event["want"]}, "park": park, "explode": explode})
    sfn = boto3.client("stepfunctions", endpoint_url=server.endpoint_url)
    arn = sfn.create_state_machine(name="tiny", definition=json.dumps(TINY_ASL), roleArn=ROLE)["stateMachineArn"]

    # When one execution pauses and is resumed, and another reaches the raising function
    paused = sfn.start_execution(stateMachineArn=arn, name="pause", input=json.dumps({"want": "pause"}))
    sfn.send_task_success(taskToken=tokens.get(timeout=10), output=json.dumps({"ok": True}))
    failing = sfn.start_execution(stateMachineArn=arn, name="boom", input=json.dumps({"want": "boom"}))

    # Then the first waits at Park and finishes with the resume output
    done = wait_for(sfn, paused["executionArn"])
    assert done["status"] == "SUCCEEDED"
    assert json.loads(done["output"])["resume"] == {"ok": True}
    assert entered_states(sfn, paused["executionArn"]) == ["Decide", "Route", "Park", "Done"]
    # And the second's function error is caught, named after the exception
    caught = wait_for(sfn, failing["executionArn"])
    assert caught["status"] == "SUCCEEDED"
    assert entered_states(sfn, failing["executionArn"]) == ["Decide", "Route", "Explode", "Recovered"]
    assert json.loads(caught["output"])["error"]["Error"] == "ValueError"


def test_stop_closes_the_port_and_restores_the_environment(aws_env: None) -> None:
    # Given the environment before, and a running server
    before = dict(os.environ)
    stack = LocalStack.server(port=0, overrides=dict.fromkeys(("StepFunction", "ParkFunction"), stand_in))
    assert stack.endpoint_url is not None
    port = int(stack.endpoint_url.rsplit(":", 1)[1])

    # When it is stopped
    stack.stop()

    # Then nothing listens on its port any more and the environment is as it was
    with socket.socket() as probe, pytest.raises(ConnectionRefusedError):
        probe.connect(("127.0.0.1", port))
    assert dict(os.environ) == before
    assert lambda_routing.installed() == {}


def test_server_refuses_a_port_in_use(aws_env: None) -> None:
    # Given a port something already listens on
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]

        # When / Then the server says so instead of hanging
        with pytest.raises(OSError, match=f"127.0.0.1:{port}"):
            LocalStack.server(port=port)


def start_dev(tmp_path: Path, port: int | None = None) -> tuple[subprocess.Popen[str], dict[str, Any]]:
    """`python -m oberik dev` in `tmp_path` with no provider configured, once it has written .oberik/dev.json."""
    port = port or free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "OBERIK_ADMIN_KEY")}
    process = subprocess.Popen(
        [sys.executable, "-m", "oberik", "dev", "--port", str(port)],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    dev_file = tmp_path / ".oberik" / "dev.json"
    deadline = time.monotonic() + 60
    while not dev_file.exists():
        assert process.poll() is None, f"oberik dev exited early:\n{process.communicate()[0]}"
        assert time.monotonic() < deadline, "oberik dev did not write .oberik/dev.json within 60 s"
        time.sleep(0.1)
    return process, json.loads(dev_file.read_text())


def test_oberik_dev_serves_a_turn(tmp_path: Path) -> None:
    # Given `python -m oberik dev` started in an empty directory, with no model provider configured
    # When it has written .oberik/dev.json
    port = free_port()
    process, info = start_dev(tmp_path, port)
    try:
        # Then the file names the server, the dev project and a working token
        assert info["url"] == f"http://127.0.0.1:{port}"
        assert info["project_id"] and info["project_key"]
        tools = httpx.get(f"{info['url']}/tools", headers={"Authorization": f"Bearer {info['token']}"}, timeout=10)
        assert tools.status_code == 200, tools.text
        # and the project embeds with the offline model, so searching by meaning is offered, not withheld
        assert info["embedding_model"] == "offline/all-minilm-l6-v2"
        assert "rag_search" in [t["name"] for t in tools.json()["tools"]]
        assert "rag_search" not in [w["name"] for w in tools.json()["withheld"]]
        # And a turn runs end to end (API, state machine, routed handlers, offline model)
        chat = httpx.post(
            f"{info['url']}/chat",
            json={"message": "hello"},
            headers={"Authorization": f"Bearer {info['token']}"},
            timeout=60,
        )
        assert chat.status_code == 200, chat.text
        assert chat.json()["session_id"] and chat.json()["content"]

        # When it is interrupted
        process.send_signal(signal.SIGINT)

        # Then it shuts down cleanly within 10 s
        assert process.wait(timeout=10) == 0, process.communicate()[0]
    finally:
        if process.poll() is None:
            process.kill()
        process.communicate()
