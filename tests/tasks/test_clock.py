"""The local clock, against schedules read back from moto's Scheduler: what is due, with what input, how often."""

from __future__ import annotations

import queue
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from oberik.adapters.aws import client
from oberik.adapters.scheduler import TaskScheduler
from oberik.domain import schedules
from oberik.local import lambda_routing
from oberik.local.stack import LocalStack
from tests.deliveries.conftest import eventually


class Target:
    """Stands in for the scheduled function: records each event, fails the first `failures` calls."""

    def __init__(self) -> None:
        self.events: queue.Queue[dict[str, Any]] = queue.Queue()
        self.failures = 0

    def __call__(self, event: dict[str, Any]) -> dict[str, Any]:
        self.events.put(event)
        if self.failures > 0:
            self.failures -= 1
            raise RuntimeError("the target is down")
        return {"status": "ok"}

    def drain(self) -> list[dict[str, Any]]:
        found = []
        while not self.events.empty():
            found.append(self.events.get_nowait())
        return found


@pytest.fixture
def target(aws: LocalStack) -> Target:
    found = Target()
    lambda_routing.install({"oberik-scheduled": found})  # replaces the real function for these tests
    return found


@pytest.fixture
def scheduler(aws: LocalStack) -> TaskScheduler:
    return TaskScheduler()


def make(scheduler: TaskScheduler, name: str, **kw: str) -> datetime:
    """Create a schedule; returns its creation time as the Scheduler recorded it."""
    now = datetime.now(UTC)
    scheduler.create(name, schedules.parse(now=now, **kw), {"task_id": name, "project_id": "p_x"})
    created = scheduler.get(name)
    assert created is not None
    return created["CreationDate"]  # type: ignore[no-any-return]


def test_the_clocks_own_thread_fires_a_due_one_time_schedule_and_deletes_it(
    aws: LocalStack, scheduler: TaskScheduler, target: Target
):
    # Given a one-time schedule two seconds away, and the clock running on its own
    make(scheduler, "soon", at=(datetime.now(UTC) + timedelta(seconds=2)).replace(tzinfo=None).isoformat())

    # Then the target receives the schedule's input within a few seconds, with the due time filled in
    event = target.events.get(timeout=15)
    assert event["task_id"] == "soon" and event["project_id"] == "p_x"
    assert event["scheduled_time"].endswith("Z") and event["attempt"] == "1"
    # And the schedule is then deleted (ActionAfterCompletion: DELETE), so it never fires again
    eventually(lambda: scheduler.get("soon") is None, 10, "the one-time schedule to be deleted")
    eventually(lambda: [f.name for f in aws.clock.fired] == ["soon"], 10, "the firing to be recorded")  # type: ignore[union-attr]


def test_a_rate_fires_once_per_interval_and_folds_missed_runs(
    aws: LocalStack, scheduler: TaskScheduler, target: Target
):
    assert aws.clock is not None
    aws.clock.stop()
    made = make(scheduler, "every-minute", rate="1 minute")

    assert aws.clock.tick(made + timedelta(seconds=30)) == []
    (first,) = aws.clock.tick(made + timedelta(seconds=61))
    assert aws.clock.tick(made + timedelta(seconds=90)) == []  # the same run is not fired twice
    (later,) = aws.clock.tick(made + timedelta(minutes=10, seconds=5))  # nine runs missed: one firing

    assert first.scheduled_time == schedules.iso(made + timedelta(minutes=1))
    assert later.scheduled_time == schedules.iso(made + timedelta(minutes=10))
    assert [e["scheduled_time"] for e in target.drain()] == [first.scheduled_time, later.scheduled_time]
    assert scheduler.get("every-minute") is not None  # recurring: still there


def test_a_cron_fires_at_its_wall_time_in_its_zone(aws: LocalStack, scheduler: TaskScheduler, target: Target):
    assert aws.clock is not None
    aws.clock.stop()
    made = make(scheduler, "paris-nine", cron="0 9 ? * * *", timezone="Europe/Paris")
    nine = schedules.next_run(schedules.from_expression("cron(0 9 ? * * *)", "Europe/Paris"), after=made, anchor=made)
    assert nine is not None and nine.astimezone(schedules.zone("Europe/Paris")).hour == 9

    assert aws.clock.tick(nine - timedelta(seconds=1)) == []
    (fired,) = aws.clock.tick(nine + timedelta(seconds=1))
    assert fired.scheduled_time == schedules.iso(nine)


def test_a_failing_target_is_retried_then_given_up(aws: LocalStack, scheduler: TaskScheduler, target: Target):
    # Given a target that fails every time, and a one-time schedule
    assert aws.clock is not None
    aws.clock.stop()
    target.failures = 99
    due = datetime.now(UTC) + timedelta(hours=1)
    make(scheduler, "flaky", at=due.replace(tzinfo=None, microsecond=0).isoformat())
    step = timedelta(seconds=aws.clock.retry_seconds)

    # When the clock comes round again and again
    attempts = [aws.clock.tick(due + step * i) for i in range(1, 6)]

    # Then it tried three times (not before each retry was due), then gave up and deleted the schedule
    tried = [f.attempt for batch in attempts for f in batch]
    assert tried == [1, 2, 3] and not any(f.ok for batch in attempts for f in batch)
    assert [e["attempt"] for e in target.drain()] == ["1", "2", "3"]
    assert scheduler.get("flaky") is None


def test_a_disabled_schedule_does_not_fire(aws: LocalStack, scheduler: TaskScheduler, target: Target):
    assert aws.clock is not None
    aws.clock.stop()
    made = make(scheduler, "paused", rate="1 minute")
    current = client("scheduler").get_schedule(Name="paused", GroupName=scheduler.resources.schedule_group)
    client("scheduler").update_schedule(
        Name="paused",
        GroupName=scheduler.resources.schedule_group,
        ScheduleExpression=current["ScheduleExpression"],
        FlexibleTimeWindow={"Mode": "OFF"},
        Target=current["Target"],
        State="DISABLED",
    )
    assert aws.clock.tick(made + timedelta(minutes=5)) == [] and target.drain() == []
