"""The Orchestrator port on AWS Step Functions (Standard): one execution per turn segment."""

from __future__ import annotations

import json
from typing import Any

from botocore.exceptions import ClientError

from oberik.adapters.aws import client
from oberik.domain.errors import Conflict
from oberik.settings import Settings, get_settings


class StepFunctionsOrchestrator:
    def __init__(self, settings: Settings | None = None, state_machine_arn: str | None = None) -> None:
        self.settings = settings or get_settings()
        self.state_machine_arn = state_machine_arn or self.settings.state_machine_arn

    @property
    def sfn(self) -> Any:
        return client("stepfunctions", self.settings)

    def execution_arn(self, name: str) -> str:
        """The ARN an execution named `name` of this state machine has (known before it starts)."""
        return self.state_machine_arn.replace(":stateMachine:", ":execution:", 1) + f":{name}"

    def start(self, name: str, payload: dict[str, Any]) -> str:
        try:
            r = self.sfn.start_execution(stateMachineArn=self.state_machine_arn, name=name, input=json.dumps(payload))
        except ClientError as e:
            if e.response.get("Error", {}).get("Code") == "ExecutionAlreadyExists":
                raise Conflict(f"An execution named {name} already exists.", code="execution_exists") from e
            raise
        return str(r["executionArn"])

    def resume(self, task_token: str, payload: dict[str, Any]) -> None:
        self.sfn.send_task_success(taskToken=task_token, output=json.dumps(payload))

    def status(self, execution_arn: str) -> str | None:
        """RUNNING, SUCCEEDED, FAILED, TIMED_OUT, ABORTED...; None when Step Functions has no such execution."""
        try:
            return str(self.sfn.describe_execution(executionArn=execution_arn)["status"])
        except ClientError as e:
            if e.response.get("Error", {}).get("Code") in ("ExecutionDoesNotExist", "ExecutionNotFound"):
                return None
            raise

    def stop(self, execution_arn: str, cause: str) -> None:
        try:
            self.sfn.stop_execution(executionArn=execution_arn, cause=cause[:32000])
        except ClientError as e:
            if e.response.get("Error", {}).get("Code") not in ("ExecutionDoesNotExist", "ExecutionNotFound"):
                raise
