"""POST /tasks, GET /tasks, DELETE /tasks/{id}: shapes, validation sentences, ownership, idempotency."""

from __future__ import annotations

import json

import pytest

from oberik.local.stack import LocalStack
from tests.api_fixtures import Api, Project, table_items
from tests.deliveries.conftest import Receiver
from tests.tasks.conftest import later, post_task, schedule_of, task_ids

pytestmark = pytest.mark.usefixtures("stop_clock")


def agent_task(message: str = "Summarise my open tickets", **extra: object) -> dict[str, object]:
    return {"schedule": {"rate": "1 day"}, "action": {"type": "agent", "message": message}, **extra}


def test_an_agent_task_is_scheduled_and_listed_for_its_subject(aws: LocalStack, api: Api, project: Project):
    # Given a user who may schedule
    token = api.token(project, subject="ana")

    # When they schedule a weekday task in their time zone
    r = post_task(
        api,
        token,
        name="morning digest",
        schedule={"cron": "0 9 ? * MON-FRI *", "timezone": "Europe/Paris"},
        action={"type": "agent", "message": "Summarise my open tickets"},
    )

    # Then it is made, with when it next runs, and a schedule of the same name exists on the Scheduler
    assert r.status_code == 201, r.text
    task = r.json()
    assert task["id"].startswith("task_") and task["name"] == "morning digest" and task["source"] == "api"
    assert task["schedule"] == {"kind": "cron", "expression": "cron(0 9 ? * MON-FRI *)", "timezone": "Europe/Paris"}
    assert task["action"] == {"type": "agent", "message": "Summarise my open tickets"}
    assert task["next_run_at"].endswith("Z") and task["fired"] == 0
    schedule = schedule_of(aws, task["id"])
    assert schedule is not None and schedule["ScheduleExpression"] == "cron(0 9 ? * MON-FRI *)"
    # And it is listed, and readable by id
    listed = api.get("/tasks", token).json()["items"]
    assert [t["id"] for t in listed] == [task["id"]] and listed[0] == task
    assert api.get(f"/tasks/{task['id']}", token).json() == task


def test_a_webhook_task_keeps_its_url(api: Api, project: Project, receiver: Receiver, allow_private: None):
    token = api.token(project)
    r = post_task(
        api,
        token,
        schedule={"at": later(30)},
        action={"type": "webhook", "url": receiver.url, "message": "invoice run"},
    )
    assert r.status_code == 201, r.text
    assert r.json()["action"] == {"type": "webhook", "url": receiver.url, "message": "invoice run"}
    assert r.json()["schedule"]["kind"] == "at"


def test_another_subjects_task_is_not_found_and_cannot_be_cancelled(aws: LocalStack, api: Api, project: Project):
    # Given ana's task
    ana, bob = api.token(project, subject="ana"), api.token(project, subject="bob")
    task_id = post_task(api, ana, **agent_task()).json()["id"]

    # When bob looks for it or tries to cancel it
    seen = api.get(f"/tasks/{task_id}", bob)
    cancelled = api.client.delete(f"/tasks/{task_id}", headers=api.bearer(bob))

    # Then both are 404, bob's list is empty, and ana's task and schedule are untouched
    assert seen.status_code == 404 and cancelled.status_code == 404
    assert cancelled.json()["code"] == "task_not_found" and task_id in cancelled.json()["detail"]
    assert task_ids(api, bob) == []
    assert task_ids(api, ana) == [task_id] and schedule_of(aws, task_id) is not None


def test_a_task_of_another_project_is_not_found(api: Api, project: Project):
    other = api.create_project("other")
    mine = post_task(api, api.token(project, subject="ana"), **agent_task()).json()["id"]
    assert api.get(f"/tasks/{mine}", api.token(other, subject="ana")).status_code == 404


def test_cancelling_deletes_the_schedule_and_the_task(aws: LocalStack, api: Api, project: Project):
    token = api.token(project)
    task_id = post_task(api, token, **agent_task()).json()["id"]

    r = api.client.delete(f"/tasks/{task_id}", headers=api.bearer(token))

    assert r.status_code == 204
    assert schedule_of(aws, task_id) is None and task_ids(api, token) == []
    again = api.client.delete(f"/tasks/{task_id}", headers=api.bearer(token))
    assert again.status_code == 404


def test_the_same_idempotency_key_makes_one_task(aws: LocalStack, api: Api, project: Project):
    token = api.token(project)
    first = post_task(api, token, **agent_task(idempotency_key="digest-1"))
    second = post_task(api, token, **agent_task(idempotency_key="digest-1"))
    assert first.status_code == 201 and second.status_code == 200
    assert first.json() == second.json() and task_ids(api, token) == [first.json()["id"]]
    # And another subject's same key is their own task
    other = post_task(api, api.token(project, subject="bob"), **agent_task(idempotency_key="digest-1"))
    assert other.status_code == 201 and other.json()["id"] != first.json()["id"]


@pytest.mark.parametrize(
    ("body", "field", "words"),
    [
        ({"schedule": {"at": "2020-01-01T00:00:00"}}, "schedule.at", "is in the past"),
        ({"schedule": {"cron": "0 9 * * MON"}}, "schedule.cron", "six fields"),
        ({"schedule": {"cron": "0 9 * * ? *", "timezone": "Europe/Nowhere"}}, "schedule.timezone", "time zone"),
        ({"schedule": {"rate": "3 fortnights"}}, "schedule.rate", "is not a rate"),
        ({"schedule": {}}, "schedule", "exactly one of at"),
        ({"action": {"type": "agent"}}, "action.message", "required for an agent task"),
        ({"action": {"type": "agent", "message": "  "}}, "action.message", "empty"),
        ({"action": {"type": "webhook", "message": "x"}}, "action.url", "required for a webhook task"),
        ({"action": {"type": "webhook", "url": "ftp://example.com/x"}}, "action.url", "https://"),
        ({"action": {"type": "webhook", "url": "http://127.0.0.1:9/x"}}, "action.url", "loopback"),
        ({"action": {"type": "webhook", "url": "http://169.254.169.254/latest"}}, "action.url", "metadata"),
        (
            {"action": {"type": "agent", "message": "x", "callback_url": "http://10.0.0.7/hook"}},
            "action.callback_url",
            "private",
        ),
        ({"action": {"type": "agent", "message": "x", "url": "https://example.com"}}, "action.url", "callback_url"),
        ({"action": {"type": "agent", "message": "x" * 20_001}}, "action.message", "longer than"),
    ],
)
def test_invalid_tasks_are_refused_with_a_sentence_and_nothing_is_made(
    aws: LocalStack, api: Api, project: Project, body: dict[str, object], field: str, words: str
):
    token = api.token(project)
    before = len(table_items())
    full = {**agent_task(), **body}

    r = post_task(api, token, **full)

    assert r.status_code == 400, r.text
    assert r.json()["field"] == field and words in r.json()["detail"], r.json()
    assert r.json()["detail"].endswith(".")
    assert len(table_items()) == before and task_ids(api, token) == []


def test_malformed_bodies_are_refused_by_field(api: Api, project: Project):
    token = api.token(project)
    r = post_task(api, token, schedule={"rate": "1 hour"}, action={"type": "email", "message": "x"})
    assert r.status_code == 422 and "action.type" in r.json()["detail"]
    r = post_task(api, token, **agent_task(), when="soon")
    assert r.status_code == 422 and "when is not a field" in r.json()["detail"]
    r = api.client.post("/tasks", content=b"{nope", headers={**api.bearer(token), "Content-Type": "application/json"})
    assert r.status_code == 422 and "not valid JSON" in r.json()["detail"]


def test_a_session_of_another_subject_is_not_found(api: Api, scripted_project: Project, provider):
    from oberik.local.scripted_provider import Reply

    ana, bob = api.token(scripted_project, subject="ana"), api.token(scripted_project, subject="bob")
    provider.script(Reply(text="hi"))
    session = api.chat(ana, message="hello").json()["session_id"]
    r = post_task(api, bob, **agent_task(session_id=session))
    assert r.status_code == 404 and r.json()["code"] == "session_not_found"
    assert post_task(api, ana, **agent_task(session_id=session)).status_code == 201


def test_scheduling_needs_tasks_write_but_listing_and_cancelling_do_not(api: Api, project: Project):
    token = api.token(project, capabilities=["chat"])
    r = post_task(api, token, **agent_task())
    assert r.status_code == 403 and "tasks:write" in r.json()["detail"]
    assert api.get("/tasks", token).status_code == 200
    # And an agent task needs a token that may start turns
    no_chat = api.token(project, capabilities=["tasks:write"])
    r = post_task(api, no_chat, **agent_task())
    assert r.status_code == 403 and "chat" in r.json()["detail"]


def test_tasks_need_a_token(api: Api):
    assert api.client.get("/tasks").status_code == 401
    assert api.client.post("/tasks", json=agent_task()).status_code == 401


def test_the_schedule_targets_the_scheduled_function_with_the_task(aws: LocalStack, api: Api, project: Project):
    token = api.token(project)
    task_id = post_task(api, token, **agent_task()).json()["id"]
    schedule = schedule_of(aws, task_id)
    assert schedule is not None
    assert schedule["Target"]["Arn"] == aws.function_arns["oberik-scheduled"]
    assert json.loads(schedule["Target"]["Input"])["task_id"] == task_id
