"""EventBridge Scheduler for the embedded stack: the template's schedule groups and Scheduler role on moto,
and the clock that fires due schedules, which moto never does by itself.

`create_resources` makes what template.yaml declares for scheduled tasks (each AWS::Scheduler::ScheduleGroup,
each IAM role the Scheduler assumes) and returns the environment variables the template gives the functions
that refer to them (`!Ref` a group: its name; `!GetAtt` a role or a function `.Arn`: its ARN).

`SchedulerClock` does what the Scheduler service does: it reads every schedule back through the scheduler
API, works out from its expression, time zone and creation (or start) date whether a run is due (with
`oberik.domain.schedules`, the same rules the API validates with), and invokes the schedule's target through
Lambda with the target's input, the Scheduler's context attributes filled in. A failed invocation is tried
again a few times; a one-time schedule whose ActionAfterCompletion is DELETE is deleted once it has run.
Runs missed while the clock was not looking are folded into one, never fired in a burst.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from botocore.exceptions import ClientError

from oberik.domain import schedules
from oberik.domain.errors import Invalid
from oberik.local.template import arn_reference, function_name, properties_of_type
from oberik.observability import logger

GROUP_TYPE = "AWS::Scheduler::ScheduleGroup"
ROLE_TYPE = "AWS::IAM::Role"
FUNCTION_TYPE = "AWS::Serverless::Function"
STACK_NAME = "oberik"  # the stack's name locally (the state machine is oberik-turn)
SCHEDULER_PRINCIPAL = "scheduler.amazonaws.com"

_TRUST_POLICY = {
    "Version": "2012-10-17",
    "Statement": [{"Effect": "Allow", "Principal": {"Service": SCHEDULER_PRINCIPAL}, "Action": "sts:AssumeRole"}],
}


def _local_name(value: Any, logical_id: str) -> str:
    """A resource's Name as the local stack has it: a literal, a `!Sub` of the stack name, or one made up."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and isinstance(value.get("Fn::Sub"), str):
        return str(value["Fn::Sub"]).replace("${AWS::StackName}", STACK_NAME)
    return function_name(logical_id)


def schedule_groups(template: Mapping[str, Any]) -> dict[str, str]:
    """Every schedule group of the template: logical id -> name."""
    return {lid: _local_name(props.get("Name"), lid) for lid, props in properties_of_type(template, GROUP_TYPE).items()}


def scheduler_roles(template: Mapping[str, Any]) -> list[str]:
    """The IAM roles of the template that EventBridge Scheduler may assume."""
    found = []
    for logical_id, props in properties_of_type(template, ROLE_TYPE).items():
        if SCHEDULER_PRINCIPAL in json.dumps(props.get("AssumeRolePolicyDocument") or {}):
            found.append(logical_id)
    return found


def create_resources(
    scheduler: Any, iam: Any, template: Mapping[str, Any], function_arns: Mapping[str, str]
) -> tuple[dict[str, str], dict[str, str]]:
    """Create the template's schedule groups and Scheduler roles. Returns (groups: logical id -> name,
    environment: variable -> value for every function variable that refers to a group, a role or a
    function's ARN)."""
    groups = schedule_groups(template)
    for name in groups.values():
        scheduler.create_schedule_group(Name=name)
    roles: dict[str, str] = {}
    for logical_id in scheduler_roles(template):
        created = iam.create_role(
            RoleName=function_name(logical_id), AssumeRolePolicyDocument=json.dumps(_TRUST_POLICY)
        )
        roles[logical_id] = str(created["Role"]["Arn"])
    values: dict[str, str] = {}
    defaults = ((template.get("Globals") or {}).get("Function") or {}).get("Environment") or {}
    environments = [
        defaults,
        *((p.get("Environment") or {}) for p in properties_of_type(template, FUNCTION_TYPE).values()),
    ]
    for environment in environments:
        for variable, value in (environment.get("Variables") or {}).items():
            if isinstance(value, dict) and list(value) == ["Ref"] and value["Ref"] in groups:
                values[variable] = groups[value["Ref"]]
                continue
            target = arn_reference(value)
            if target is not None and target in roles:
                values[variable] = roles[target]
            elif target is not None and target in function_arns:
                values[variable] = function_arns[target]
    return groups, values


# --- the clock --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Fired:
    """One invocation the clock made."""

    name: str
    group: str
    scheduled_time: str
    attempt: int
    ok: bool
    result: Any


@dataclass
class _Retry:
    due: datetime
    attempt: int
    not_before: datetime


def _code(e: ClientError) -> str:
    return str(e.response.get("Error", {}).get("Code", ""))


class SchedulerClock:
    """Fires the due schedules of `groups`: on its own thread every `interval` seconds once started, or when
    `tick(now)` is called (tests pass a `now` to fire what would be due then)."""

    def __init__(
        self,
        scheduler: Any,
        lambda_client: Any,
        groups: Sequence[str],
        *,
        interval: float = 1.0,
        retry_seconds: float = 10.0,
        max_attempts: int = 3,
    ) -> None:
        self.scheduler = scheduler
        self.lambda_client = lambda_client
        self.groups = list(groups)
        self.interval = interval
        self.retry_seconds = retry_seconds
        self.max_attempts = max_attempts
        self.fired: list[Fired] = []  # everything invoked so far, for `oberik dev`'s log and for tests
        self._last: dict[str, datetime] = {}  # schedule ARN -> the last run it was fired for
        self._retries: dict[str, _Retry] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is None and self.groups:
            self._thread = threading.Thread(target=self._loop, name="scheduler-clock", daemon=True)
            self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        if self._thread is not None and self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.tick()
            except Exception:
                if self._stop.is_set():
                    return
                logger.exception("local scheduler clock failed")

    def tick(self, now: datetime | None = None) -> list[Fired]:
        """Fire every schedule with a run due at `now` (default: the current time); returns what was fired."""
        now = now or datetime.now(UTC)
        fired: list[Fired] = []
        with self._lock:
            for group in self.groups:
                for name in self._names(group):
                    try:
                        schedule = self.scheduler.get_schedule(Name=name, GroupName=group)
                    except ClientError as e:
                        if _code(e) == "ResourceNotFoundException":
                            continue  # deleted since it was listed
                        raise
                    done = self._consider(schedule, group, now)
                    if done is not None:
                        fired.append(done)
            self.fired.extend(fired)
        return fired

    def _names(self, group: str) -> list[str]:
        names: list[str] = []
        for page in self.scheduler.get_paginator("list_schedules").paginate(GroupName=group):
            names.extend(str(s["Name"]) for s in page.get("Schedules", []))
        return names

    def _consider(self, schedule: dict[str, Any], group: str, now: datetime) -> Fired | None:
        if schedule.get("State", "ENABLED") != "ENABLED":
            return None
        arn = str(schedule["Arn"])
        try:
            spec = schedules.from_expression(schedule["ScheduleExpression"], schedule.get("ScheduleExpressionTimezone"))
        except Invalid as e:
            logger.warning("local scheduler cannot read a schedule", schedule=arn, detail=e.detail)
            return None
        anchor = _aware(schedule.get("StartDate") or schedule.get("CreationDate")) or now
        retry = self._retries.get(arn)
        if retry is not None:
            if now < retry.not_before:
                return None
            due, attempt = retry.due, retry.attempt
        else:
            due_or_none = schedules.latest_due(spec, after=self._last.get(arn, anchor), now=now, anchor=anchor)
            end = _aware(schedule.get("EndDate"))
            if due_or_none is None or (end is not None and due_or_none > end):
                return None
            due, attempt = due_or_none, 1
        target = schedule.get("Target") or {}
        payload = self._input(str(target.get("Input") or "{}"), arn, due, attempt)
        ok, result = self._invoke(str(target["Arn"]), payload)
        if ok or attempt >= self.max_attempts:
            self._last[arn] = due
            self._retries.pop(arn, None)
            if not ok:
                logger.warning("local scheduler gave up on a run", schedule=arn, due=schedules.iso(due))
            if spec.one_time and schedule.get("ActionAfterCompletion") == "DELETE":
                self._delete(schedule["Name"], group)
        else:
            self._retries[arn] = _Retry(due, attempt + 1, now + timedelta(seconds=self.retry_seconds))
        logger.info("local scheduler fired", schedule=schedule["Name"], due=schedules.iso(due), attempt=attempt, ok=ok)
        return Fired(str(schedule["Name"]), group, schedules.iso(due), attempt, ok, result)

    @staticmethod
    def _input(raw: str, arn: str, due: datetime, attempt: int) -> str:
        """The target's input with the Scheduler's context attributes filled in, as the service sends it."""
        return (
            raw.replace("<aws.scheduler.scheduled-time>", schedules.iso(due))
            .replace("<aws.scheduler.execution-id>", str(uuid.uuid4()))
            .replace("<aws.scheduler.attempt-number>", str(attempt))
            .replace("<aws.scheduler.schedule-arn>", arn)
        )

    def _invoke(self, function_arn: str, payload: str) -> tuple[bool, Any]:
        try:
            response = self.lambda_client.invoke(
                FunctionName=function_arn, InvocationType="RequestResponse", Payload=payload.encode()
            )
            body = response["Payload"].read()
            result = json.loads(body) if body else None
        except Exception as e:
            logger.exception("local scheduler could not invoke the target", function=function_arn)
            return False, repr(e)
        if response.get("FunctionError"):
            logger.warning("scheduled target failed", function=function_arn, error=result)
            return False, result
        return True, result

    def _delete(self, name: str, group: str) -> None:
        try:
            self.scheduler.delete_schedule(Name=name, GroupName=group)
        except ClientError as e:
            if _code(e) != "ResourceNotFoundException":
                raise


def _aware(value: Any) -> datetime | None:
    if value is None:
        return None
    if isinstance(value, datetime):
        return value if value.tzinfo is not None else value.replace(tzinfo=UTC)
    if isinstance(value, int | float):
        return datetime.fromtimestamp(value, UTC)
    return None
