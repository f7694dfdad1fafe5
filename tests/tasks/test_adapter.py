"""The EventBridge Scheduler adapter's real calls, read back from moto; and what the local stack builds for it."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime

import pytest

from oberik.adapters.aws import client
from oberik.adapters.scheduler import RETRY_POLICY, SCHEDULED_TIME, TaskScheduler, scheduler_resources
from oberik.domain import schedules
from oberik.local.stack import LocalStack
from oberik.local.template import load_template

NOW = datetime.now(UTC)


@pytest.fixture
def scheduler(aws: LocalStack) -> TaskScheduler:
    assert aws.clock is not None
    aws.clock.stop()  # nothing fires behind these tests' backs
    return TaskScheduler()


def read(name: str) -> dict[str, object]:
    found: dict[str, object] = client("scheduler").get_schedule(
        Name=name, GroupName=os.environ["OBERIK_SCHEDULE_GROUP"]
    )
    return found


def test_the_local_stack_makes_the_templates_group_and_role_and_names_them(aws: LocalStack):
    # Then the group of template.yaml exists, and the functions are told where it, the role and the target are
    groups = client("scheduler").list_schedule_groups()["ScheduleGroups"]
    assert "oberik-tasks" in {g["Name"] for g in groups}
    assert aws.schedule_groups == {"ScheduleGroup": "oberik-tasks"}
    resources = scheduler_resources()
    assert resources.configured and resources.schedule_group == "oberik-tasks"
    assert resources.scheduled_function_arn == aws.function_arns["oberik-scheduled"]
    role = client("iam").get_role(RoleName="oberik-scheduler-role")["Role"]
    assert resources.scheduler_role_arn == role["Arn"]
    assert "scheduler.amazonaws.com" in json.dumps(role["AssumeRolePolicyDocument"])


def test_the_template_declares_group_role_and_target_the_way_the_adapter_uses_them():
    resources = load_template()["Resources"]
    assert resources["ScheduleGroup"]["Type"] == "AWS::Scheduler::ScheduleGroup"
    role = resources["SchedulerRole"]["Properties"]
    assert role["AssumeRolePolicyDocument"]["Statement"][0]["Principal"]["Service"] == "scheduler.amazonaws.com"
    invoke = role["Policies"][0]["PolicyDocument"]["Statement"][0]
    assert invoke["Action"] == "lambda:InvokeFunction"
    assert {"Fn::GetAtt": ["ScheduledFunction", "Arn"]} in invoke["Resource"]
    assert resources["ScheduledFunction"]["Properties"]["CodeUri"] == "functions/scheduled"
    for name in ("ApiFunction", "StepFunction"):
        env = resources[name]["Properties"]["Environment"]["Variables"]
        assert env["OBERIK_SCHEDULE_GROUP"] == {"Ref": "ScheduleGroup"}
        assert env["OBERIK_SCHEDULER_ROLE_ARN"] == {"Fn::GetAtt": ["SchedulerRole", "Arn"]}
        assert env["OBERIK_SCHEDULED_FUNCTION_ARN"] == {"Fn::GetAtt": ["ScheduledFunction", "Arn"]}


def test_a_one_time_schedule_has_its_time_zone_and_deletes_itself_after_running(scheduler: TaskScheduler):
    spec = schedules.parse(at="2031-05-04T09:30:00", timezone="America/New_York", now=NOW)

    arn = scheduler.create("task_one", spec, {"task_id": "task_one", "project_id": "p_1"})

    got = read("task_one")
    assert got["Arn"] == arn
    assert got["ScheduleExpression"] == "at(2031-05-04T09:30:00)"
    assert got["ScheduleExpressionTimezone"] == "America/New_York"
    assert got["ActionAfterCompletion"] == "DELETE"
    assert got["FlexibleTimeWindow"] == {"Mode": "OFF"} and got["State"] == "ENABLED"
    target = got["Target"]
    assert isinstance(target, dict)
    assert target["Arn"] == scheduler.resources.scheduled_function_arn
    assert target["RoleArn"] == scheduler.resources.scheduler_role_arn
    assert target["RetryPolicy"] == RETRY_POLICY
    assert json.loads(target["Input"]) == {
        "task_id": "task_one",
        "project_id": "p_1",
        "scheduled_time": SCHEDULED_TIME,
        "attempt": "<aws.scheduler.attempt-number>",
    }


@pytest.mark.parametrize(
    ("kw", "expression"),
    [
        ({"cron": "0 9 ? * MON-FRI *", "timezone": "Europe/Paris"}, "cron(0 9 ? * MON-FRI *)"),
        ({"rate": "1 hour"}, "rate(1 hour)"),
    ],
)
def test_recurring_schedules_stay_after_running(scheduler: TaskScheduler, kw: dict[str, str], expression: str):
    spec = schedules.parse(now=NOW, **kw)
    scheduler.create("task_again", spec, {"task_id": "task_again", "project_id": "p_1"})
    got = read("task_again")
    assert got["ScheduleExpression"] == expression
    assert got["ScheduleExpressionTimezone"] == kw.get("timezone", "UTC")
    assert got.get("ActionAfterCompletion") in (None, "NONE")


def test_making_a_schedule_twice_and_deleting_it_twice_are_both_safe(scheduler: TaskScheduler):
    spec = schedules.parse(rate="5 minutes", now=NOW)
    first = scheduler.create("task_twice", spec, {"task_id": "task_twice"})
    assert scheduler.create("task_twice", spec, {"task_id": "task_twice"}) == first
    assert list(scheduler.names()) == ["task_twice"]
    assert scheduler.delete("task_twice") is True
    assert scheduler.delete("task_twice") is False
    assert scheduler.get("task_twice") is None and list(scheduler.names()) == []
