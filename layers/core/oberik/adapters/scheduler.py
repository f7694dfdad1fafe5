"""Scheduled tasks on EventBridge Scheduler: one schedule per task, in the stack's schedule group.

Each schedule targets the scheduled function with the task's id as its input, through the role the stack
made for the Scheduler to assume. A one-time `at(...)` schedule deletes itself once it has run
(`ActionAfterCompletion: DELETE`); `cron(...)` and `rate(...)` schedules run until the task is cancelled.
The input carries `<aws.scheduler.scheduled-time>`, which the Scheduler replaces with the time the run was
due: the function makes every retry of one run the same run with it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from botocore.exceptions import ClientError
from pydantic_settings import BaseSettings, SettingsConfigDict

from oberik.adapters.aws import client
from oberik.domain.schedules import ScheduleSpec
from oberik.settings import Settings, get_settings

# Context attributes the Scheduler fills in when it sends the input.
SCHEDULED_TIME = "<aws.scheduler.scheduled-time>"
EXECUTION_ID = "<aws.scheduler.execution-id>"
ATTEMPT_NUMBER = "<aws.scheduler.attempt-number>"
# A run the Scheduler could not hand to Lambda is tried again for up to an hour (an error inside the function is
# retried by Lambda's asynchronous invocation); the function is idempotent per run, so retries never double up.
RETRY_POLICY = {"MaximumRetryAttempts": 10, "MaximumEventAgeInSeconds": 3600}


class SchedulerResources(BaseSettings):
    """Where the stack's schedule group, target function and Scheduler role are, as template.yaml tells the
    functions that make schedules. Empty when the function was not given them."""

    model_config = SettingsConfigDict(env_prefix="OBERIK_", extra="ignore")

    schedule_group: str = ""
    scheduler_role_arn: str = ""
    scheduled_function_arn: str = ""

    @property
    def configured(self) -> bool:
        return bool(self.schedule_group and self.scheduler_role_arn and self.scheduled_function_arn)


def scheduler_resources() -> SchedulerResources:
    return SchedulerResources()


def _code(e: ClientError) -> str:
    return str(e.response.get("Error", {}).get("Code", ""))


class TaskScheduler:
    def __init__(self, resources: SchedulerResources | None = None, settings: Settings | None = None) -> None:
        self.resources = resources or scheduler_resources()
        self.settings = settings or get_settings()

    @property
    def configured(self) -> bool:
        return self.resources.configured

    @property
    def api(self) -> Any:
        return client("scheduler", self.settings)

    def create(self, name: str, spec: ScheduleSpec, payload: dict[str, Any], *, description: str = "") -> str:
        """Make the schedule `name` (idempotent: one that already exists is left as it is); returns its ARN."""
        target_input = {**payload, "scheduled_time": SCHEDULED_TIME, "attempt": ATTEMPT_NUMBER}
        kwargs: dict[str, Any] = {
            "Name": name,
            "GroupName": self.resources.schedule_group,
            "ScheduleExpression": spec.expression,
            "ScheduleExpressionTimezone": spec.timezone,
            "FlexibleTimeWindow": {"Mode": "OFF"},
            "State": "ENABLED",
            "Description": description[:512],
            "ClientToken": name[:64],
            "Target": {
                "Arn": self.resources.scheduled_function_arn,
                "RoleArn": self.resources.scheduler_role_arn,
                "Input": json.dumps(target_input, separators=(",", ":")),
                "RetryPolicy": dict(RETRY_POLICY),
            },
        }
        if spec.one_time:
            kwargs["ActionAfterCompletion"] = "DELETE"
        try:
            return str(self.api.create_schedule(**kwargs)["ScheduleArn"])
        except ClientError as e:
            if _code(e) != "ConflictException":
                raise
            existing = self.get(name)
            if existing is None:
                raise
            return str(existing["Arn"])

    def delete(self, name: str) -> bool:
        """Remove the schedule; False when there was none (a one-time schedule that ran deletes itself)."""
        try:
            self.api.delete_schedule(Name=name, GroupName=self.resources.schedule_group)
            return True
        except ClientError as e:
            if _code(e) == "ResourceNotFoundException":
                return False
            raise

    def get(self, name: str) -> dict[str, Any] | None:
        try:
            found: dict[str, Any] = self.api.get_schedule(Name=name, GroupName=self.resources.schedule_group)
            return found
        except ClientError as e:
            if _code(e) == "ResourceNotFoundException":
                return None
            raise

    def names(self) -> Iterator[str]:
        """Every schedule in the group."""
        for page in self.api.get_paginator("list_schedules").paginate(GroupName=self.resources.schedule_group):
            for summary in page.get("Schedules", []):
                yield str(summary["Name"])
