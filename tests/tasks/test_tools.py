"""The agent's scheduling tools, through scripted turns: they make, list and cancel the subject's tasks."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from oberik.local.scripted_provider import Reply, ScriptedProvider
from oberik.local.stack import LocalStack
from tests.api_fixtures import Api, Project
from tests.integration.test_pauses import call, offered, tool_messages
from tests.tasks.conftest import post_task, schedule_of, task_ids

pytestmark = pytest.mark.usefixtures("stop_clock")

SCHEDULING = ["current_time", "wait", "schedule_reminder", "cancel_reminder", "list_reminders"]


def result_of(provider: ScriptedProvider, request: int, call_id: str) -> dict[str, Any]:
    parsed: dict[str, Any] = json.loads(tool_messages(provider.requests[request])[call_id])
    return parsed


def names(r: Any) -> list[str]:
    assert r.status_code == 200, r.text
    return [t["name"] for t in r.json()["tools"] if t["family"] == "scheduling"]


def test_the_family_is_listed_whole_with_tasks_write_and_switched_off_by_its_flag(api: Api, project: Project):
    token = api.token(project, capabilities=["chat", "tasks:write"])
    assert names(api.get("/tools", token)) == SCHEDULING
    assert names(api.get("/tools", token, enable_scheduling="false")) == []
    assert names(api.get("/tools", api.token(project, capabilities=["chat"]))) == []


def test_schedule_reminder_makes_a_task_for_the_subject_in_this_conversation(
    aws: LocalStack, api: Api, scripted_project: Project, provider: ScriptedProvider
):
    # Given the model asks for a reminder in 30 minutes
    token = api.token(scripted_project, subject="ana")
    provider.script(
        Reply(tool_calls=[call("schedule_reminder", "c1", message="Remind ana to stretch", in_minutes=30)]),
        Reply(text="I'll remind you in 30 minutes."),
    )
    started = datetime.now(UTC)

    # When the turn runs
    done = api.chat(token, message="remind me to stretch in half an hour").json()

    # Then ana has one task from the agent, in this conversation, due in about 30 minutes
    (task,) = api.get("/tasks", token).json()["items"]
    assert task["source"] == "agent" and task["session_id"] == done["session_id"]
    assert task["action"] == {"type": "agent", "message": "Remind ana to stretch"}
    due = datetime.fromisoformat(task["next_run_at"].replace("Z", "+00:00"))
    assert started + timedelta(minutes=29) < due < started + timedelta(minutes=31)
    assert schedule_of(aws, task["id"]) is not None
    # And the model was told what it made
    told = result_of(provider, 1, "c1")
    assert told["scheduled"] == task["id"] and told["repeats"] is False and told["next_run_at"] == task["next_run_at"]
    assert "schedule_reminder" in offered(provider.requests[0])


def test_list_and_cancel_reminders_see_only_the_subjects_own(
    aws: LocalStack, api: Api, scripted_project: Project, provider: ScriptedProvider
):
    # Given ana's repeating task made through the API, and one of bob's
    ana, bob = api.token(scripted_project, subject="ana"), api.token(scripted_project, subject="bob")
    mine = post_task(
        api,
        ana,
        schedule={"cron": "0 9 ? * MON-FRI *", "timezone": "Europe/Paris"},
        action={"type": "agent", "message": "daily digest"},
    ).json()["id"]
    theirs = post_task(api, bob, schedule={"rate": "1 day"}, action={"type": "agent", "message": "bob's"}).json()["id"]
    provider.script(
        Reply(tool_calls=[call("list_reminders", "l1")]),
        Reply(tool_calls=[call("cancel_reminder", "x1", id=theirs), call("cancel_reminder", "x2", id=mine)]),
        Reply(text="Cancelled your daily digest."),
    )

    # When ana's agent lists, then tries to cancel bob's and her own
    api.chat(ana, message="cancel my digest")

    # Then the list held only ana's task
    (listed,) = result_of(provider, 1, "l1")["reminders"]
    assert listed["id"] == mine and listed["message"] == "daily digest"
    assert listed["schedule"] == "cron(0 9 ? * MON-FRI *)" and listed["timezone"] == "Europe/Paris"
    assert listed["this_conversation"] is False and listed["next_run_at"]
    # And bob's could not be touched, while ana's is gone with its schedule
    assert "No scheduled task" in result_of(provider, 2, "x1")["error"]
    assert result_of(provider, 2, "x2") == {"cancelled": mine, "message": "daily digest"}
    assert task_ids(api, ana) == [] and schedule_of(aws, mine) is None
    assert task_ids(api, bob) == [theirs] and schedule_of(aws, theirs) is not None


def test_a_bad_schedule_is_told_to_the_model_and_makes_nothing(
    api: Api, scripted_project: Project, provider: ScriptedProvider
):
    token = api.token(scripted_project)
    provider.script(
        Reply(
            tool_calls=[
                call("schedule_reminder", "b1", message="x", cron="0 9 * * MON"),
                call("schedule_reminder", "b2", message="x", at="2020-01-01T00:00:00"),
                call("schedule_reminder", "b3", message="x", rate="1 day", in_minutes=5),
                call("schedule_reminder", "b4", message=""),
            ]
        ),
        Reply(text="That did not work."),
    )
    api.chat(token, message="schedule things")
    assert "six fields" in result_of(provider, 1, "b1")["error"]
    assert "in the past" in result_of(provider, 1, "b2")["error"]
    assert "exactly one of" in result_of(provider, 1, "b3")["error"]
    assert "message is required" in result_of(provider, 1, "b4")["error"]
    assert task_ids(api, token) == []


def test_a_reminder_fires_in_its_conversation_with_the_model_that_made_it(
    aws: LocalStack, api: Api, scripted_project: Project, provider: ScriptedProvider
):
    # Given a reminder the agent scheduled in ana's conversation
    token = api.token(scripted_project, subject="ana")
    provider.script(
        Reply(tool_calls=[call("schedule_reminder", "c1", message="Tell ana it is time to stretch", rate="1 hour")]),
        Reply(text="Hourly stretch reminders are on."),
        Reply(text="Time to stretch, ana!"),
    )
    session = api.chat(token, message="remind me hourly to stretch").json()["session_id"]

    # When an hour has passed
    (fired,) = aws.clock.tick(datetime.now(UTC) + timedelta(minutes=61))  # type: ignore[union-attr]

    # Then the agent was asked the reminder's message in the same conversation, unattended, and answered there
    assert fired.ok and fired.result["session_id"] == session
    from tests.deliveries.conftest import eventually

    def transcript() -> list[Any]:
        return [m["content"] for m in api.get(f"/chat/sessions/{session}/messages", token).json()["messages"]]

    eventually(lambda: transcript()[-1] == "Time to stretch, ana!", what="the reminder's reply")
    assert "Tell ana it is time to stretch" in transcript()
    assert provider.requests[2]["model"] == "test-model"
    assert "ask_user" not in offered(provider.requests[2])
