"""Fixtures for scheduled tasks: the deliveries' loopback receiver and switches, and helpers to read tasks."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from oberik.local.stack import LocalStack
from tests.api_fixtures import Api, Project
from tests.deliveries.conftest import quick, receiver
from tests.deliveries.test_node_verifier import node_receiver

# Fixtures of the deliveries tests, used here by name.
__all__ = ["node_receiver", "quick", "receiver"]


def later(minutes: float = 60, tz: str | None = None) -> str:
    """A local wall time `minutes` from now, as `at` takes it (UTC unless `tz` is given)."""
    from zoneinfo import ZoneInfo

    when = datetime.now(UTC) + timedelta(minutes=minutes)
    if tz:
        when = when.astimezone(ZoneInfo(tz))
    return when.replace(tzinfo=None, microsecond=0).isoformat()


def post_task(api: Api, token: str, **body: Any) -> Any:
    return api.client.post("/tasks", json=body, headers=api.bearer(token))


def task_ids(api: Api, token: str) -> list[str]:
    r = api.get("/tasks", token)
    assert r.status_code == 200, r.text
    return [t["id"] for t in r.json()["items"]]


def secret_of(api: Api, project: Project) -> str:
    r = api.client.get(f"/api/projects/{project.id}/webhook-secret", headers=project.headers)
    assert r.status_code == 200, r.text
    return str(r.json()["secret"])


def schedule_of(stack: LocalStack, task_id: str) -> dict[str, Any] | None:
    from botocore.exceptions import ClientError

    from oberik.adapters.aws import client

    try:
        found: dict[str, Any] = client("scheduler").get_schedule(
            Name=task_id, GroupName=next(iter(stack.schedule_groups.values()))
        )
        return found
    except ClientError as e:
        if e.response["Error"]["Code"] == "ResourceNotFoundException":
            return None
        raise


@pytest.fixture
def stop_clock(aws: LocalStack) -> LocalStack:
    """The stack with its clock's thread stopped: the test fires schedules itself with `aws.clock.tick(now)`."""
    assert aws.clock is not None
    aws.clock.stop()
    return aws
