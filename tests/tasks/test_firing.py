"""Tasks firing on the in-process stack: the local clock invokes the scheduled function through Lambda, the
turn runs unattended on the real state machine, and scheduled_task.fired travels the real SQS delivery path."""

from __future__ import annotations

import hashlib
import hmac
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from oberik.adapters.aws import client
from oberik.local.scripted_provider import Reply, ScriptedProvider
from oberik.local.stack import LocalStack
from tests.api_fixtures import Api, Project
from tests.deliveries.conftest import Receiver, eventually
from tests.deliveries.test_turn_stopped import queue_depth
from tests.integration.test_pauses import QUESTION, call
from tests.tasks.conftest import later, post_task, schedule_of, secret_of, task_ids

pytestmark = pytest.mark.usefixtures("allow_private", "quick", "stop_clock")


def signed_by(secret: str, raw: bytes) -> str:
    return "sha256=" + hmac.new(secret.encode(), raw, hashlib.sha256).hexdigest()


def due_after(minutes: float) -> datetime:
    return datetime.now(UTC) + timedelta(minutes=minutes)


def inbox(stack: LocalStack) -> tuple[Any, str]:
    """An SQS queue subscribed to the events topic, as an AWS-native consumer would have."""
    sqs, sns = client("sqs"), client("sns")
    url = sqs.create_queue(QueueName="events-inbox")["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    sns.subscribe(TopicArn=stack.topics["EventsTopic"], Protocol="sqs", Endpoint=arn)
    return sqs, url


def published(sqs: Any, url: str, event: str) -> list[dict[str, Any]]:
    """Every message of `event` the inbox holds so far (each: body and message attributes)."""
    found = []
    for m in sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", []):
        envelope = json.loads(m["Body"])
        attributes = {k: v["Value"] for k, v in envelope["MessageAttributes"].items()}
        if attributes.get("event") == event:
            found.append({"body": json.loads(envelope["Message"]), "attributes": attributes})
    return found


def test_an_agent_task_runs_unattended_and_its_reply_reaches_the_callback_signed(
    aws: LocalStack, api: Api, scripted_project: Project, provider: ScriptedProvider, receiver: Receiver
):
    # Given a token for a tenant, and a one-time agent task in an hour with a callback on loopback
    token = api.token(scripted_project, subject="ana", tenant_id="acme-eu")
    task = post_task(
        api,
        token,
        schedule={"at": later(60, "Europe/Paris"), "timezone": "Europe/Paris"},
        action={"type": "agent", "message": "Check the overnight orders", "callback_url": receiver.url},
    ).json()
    provider.script(Reply(text="Twelve orders came in overnight; none need attention."))

    # When the clock reaches the hour
    (fired,) = aws.clock.tick(datetime.now(UTC) + timedelta(minutes=61))  # type: ignore[union-attr]

    # Then the scheduled function started a turn, and the callback gets scheduled_task.fired with the reply
    assert fired.ok and fired.name == task["id"] and fired.result["status"] == "started"
    (got,) = receiver.wait_for(1)
    assert got.header("X-Signature") == signed_by(secret_of(api, scripted_project), got.raw)
    assert got.header("X-Delivery-Id").startswith("dlv_")
    assert got.body == {
        "event": "scheduled_task.fired",
        "task_id": task["id"],
        "tenant_id": "acme-eu",
        "session_id": fired.result["session_id"],
        "message": "Twelve orders came in overnight; none need attention.",
    }
    assert got.raw == json.dumps(got.body, sort_keys=True, separators=(",", ":")).encode()
    # And the turn was unattended: the model was never offered ask_user, though the token carries it
    offered = [t["function"]["name"] for t in provider.requests[0].get("tools", [])]
    assert "ask_user" not in offered and "current_time" in offered
    # And the conversation holds the task's message and the reply, as ana's
    messages = api.get(f"/chat/sessions/{fired.result['session_id']}/messages", token).json()
    assert [m["content"] for m in messages["messages"]] == [
        "Check the overnight orders",
        "Twelve orders came in overnight; none need attention.",
    ]
    # And a one-time task is gone afterwards, with its schedule
    assert task_ids(api, token) == [] and schedule_of(aws, task["id"]) is None


def test_the_project_webhook_hears_a_scheduled_turn_with_the_tokens_tenant(
    aws: LocalStack, api: Api, scripted_project: Project, provider: ScriptedProvider, receiver: Receiver
):
    # Given a project webhook (turn.stopped) and an agent task without a callback
    api.configure(scripted_project, webhook_url=receiver.url)
    token = api.token(scripted_project, tenant_id="acme-eu", user_ref="customer-7")
    post_task(api, token, schedule={"rate": "1 hour"}, action={"type": "agent", "message": "ping"})
    provider.script(Reply(text="pong"))

    # When it fires
    (fired,) = aws.clock.tick(due_after(61))  # type: ignore[union-attr]

    # Then turn.stopped says the run was scheduled, for the token's tenant
    (got,) = receiver.wait_for(1)
    assert got.body["event"] == "turn.stopped" and got.body["scheduled"] is True
    assert got.body["tenant_id"] == "acme-eu" and got.body["user_ref"] == "customer-7"
    assert got.body["session_id"] == fired.result["session_id"] and got.body["preview"] == "pong"


def test_a_webhook_task_posts_scheduled_task_fired_to_its_url(
    aws: LocalStack, api: Api, project: Project, receiver: Receiver
):
    token = api.token(project, tenant_id="acme-us")
    task = post_task(
        api, token, schedule={"rate": "5 minutes"}, action={"type": "webhook", "url": receiver.url, "message": "sync"}
    ).json()

    (fired,) = aws.clock.tick(due_after(5.5))  # type: ignore[union-attr]

    (got,) = receiver.wait_for(1)
    assert fired.ok and got.path == "/hooks/oberik"
    assert got.header("X-Signature") == signed_by(secret_of(api, project), got.raw)
    assert got.body == {
        "event": "scheduled_task.fired",
        "task_id": task["id"],
        "tenant_id": "acme-us",
        "session_id": None,
        "message": "sync",
    }
    # And a recurring task stays, counting its runs
    (listed,) = api.get("/tasks", token).json()["items"]
    assert listed["fired"] == 1 and listed["last_fired_at"] is not None and schedule_of(aws, task["id"]) is not None


def test_a_run_delivered_twice_is_one_turn_and_one_notification(
    aws: LocalStack, api: Api, scripted_project: Project, provider: ScriptedProvider, receiver: Receiver
):
    # Given a recurring agent task that fired once
    token = api.token(scripted_project)
    task = post_task(
        api,
        token,
        schedule={"rate": "1 hour"},
        action={"type": "agent", "message": "status?", "callback_url": receiver.url},
    ).json()
    provider.script(Reply(text="all good"))
    (fired,) = aws.clock.tick(due_after(61))  # type: ignore[union-attr]
    receiver.wait_for(1)

    # When the Scheduler delivers the same run again (it retries; Lambda retries)
    again = client("lambda").invoke(
        FunctionName=aws.function_arns["oberik-scheduled"],
        Payload=json.dumps(
            {"task_id": task["id"], "project_id": scripted_project.id, "scheduled_time": fired.scheduled_time}
        ).encode(),
    )

    # Then it attaches to the turn already started, and nothing more is delivered
    result = json.loads(again["Payload"].read())
    assert result["status"] == "started" and result["attached"] is True
    assert result["turn_id"] == fired.result["turn_id"]
    assert len(provider.requests) == 1
    eventually(lambda: queue_depth(aws, "DeliveryQueue") == 0, what="the delivery queue to drain")
    assert len(receiver.requests) == 1


def test_a_cancelled_task_does_not_fire(aws: LocalStack, api: Api, project: Project, receiver: Receiver):
    token = api.token(project)
    task = post_task(api, token, schedule={"rate": "1 minute"}, action={"type": "webhook", "url": receiver.url}).json()
    assert api.client.delete(f"/tasks/{task['id']}", headers=api.bearer(token)).status_code == 204
    assert aws.clock.tick(due_after(2)) == []  # type: ignore[union-attr]
    # And a run already on its way when it was cancelled finds nothing to do
    r = client("lambda").invoke(
        FunctionName=aws.function_arns["oberik-scheduled"],
        Payload=json.dumps({"task_id": task["id"], "project_id": project.id}).encode(),
    )
    assert json.loads(r["Payload"].read())["status"] == "gone" and receiver.requests == []


def test_every_firing_is_published_to_the_events_topic_with_its_attributes(
    aws: LocalStack, api: Api, scripted_project: Project, provider: ScriptedProvider, receiver: Receiver
):
    # Given an SQS queue subscribed to the events topic, an agent task and a webhook task
    sqs, url = inbox(aws)
    token = api.token(scripted_project, tenant_id="acme-eu")
    agent = post_task(api, token, schedule={"rate": "1 hour"}, action={"type": "agent", "message": "go"}).json()
    hook = post_task(
        api, token, schedule={"rate": "1 hour"}, action={"type": "webhook", "url": receiver.url, "message": "m"}
    ).json()
    provider.script(Reply(text="went"))

    # When both fire
    assert len(aws.clock.tick(due_after(61))) == 2  # type: ignore[union-attr]

    # Then each scheduled_task.fired reached the queue with event, reason and tenant_id as attributes
    seen: list[dict[str, Any]] = []
    eventually(lambda: seen.extend(published(sqs, url, "scheduled_task.fired")) or len(seen) >= 2, what="2 events")
    by_task = {m["body"]["task_id"]: m for m in seen}
    assert by_task[agent["id"]]["attributes"] == {
        "event": "scheduled_task.fired",
        "reason": "completed",
        "tenant_id": "acme-eu",
    }
    assert by_task[agent["id"]]["body"]["message"] == "went"
    assert by_task[hook["id"]]["attributes"] == {
        "event": "scheduled_task.fired",
        "reason": "webhook",
        "tenant_id": "acme-eu",
    }


def test_a_busy_conversation_is_retried_rather_than_interrupted(
    aws: LocalStack, api: Api, scripted_project: Project, provider: ScriptedProvider, receiver: Receiver
):
    # Given a conversation paused on a question, and a task that continues it
    token = api.token(scripted_project)
    provider.script(
        Reply(tool_calls=[call("ask_user", "q1", questions=[QUESTION])]),
        Reply(text="Migrating both."),
        Reply(text="Migration report: done."),
    )
    paused = api.chat(token, message="start").json()
    assert paused["requires_action"] is True
    post_task(
        api,
        token,
        session_id=paused["session_id"],
        schedule={"rate": "1 hour"},
        action={"type": "agent", "message": "report on the migration", "callback_url": receiver.url},
    )
    due = datetime.now(UTC) + timedelta(minutes=61)

    # When it comes due
    (first,) = aws.clock.tick(due)  # type: ignore[union-attr]

    # Then the run fails (so it is tried again later) and the paused turn is left as it was
    assert first.ok is False and first.result["errorType"] == "Conflict" and "paused" in first.result["errorMessage"]
    assert receiver.requests == [] and len(provider.requests) == 1

    # When the question is answered, and the retry comes round
    answered = api.chat(
        token,
        session_id=paused["session_id"],
        answers={"tool_call_id": "q1", "answers": [{"question_id": "Scope", "selected": ["box-* too"]}]},
    )
    assert answered.status_code == 200, answered.text
    (retry,) = aws.clock.tick(due + timedelta(seconds=aws.clock.retry_seconds))  # type: ignore[union-attr]

    # Then the same run goes through, in the conversation, and its reply reaches the callback
    assert retry.ok and retry.attempt == 2 and retry.scheduled_time == first.scheduled_time
    (got,) = receiver.wait_for(1)
    assert got.body["session_id"] == paused["session_id"] and got.body["message"] == "Migration report: done."


def test_an_interactive_turn_stopped_carries_the_tokens_tenant_and_is_not_scheduled(
    api: Api, scripted_project: Project, provider: ScriptedProvider, receiver: Receiver
):
    api.configure(scripted_project, webhook_url=receiver.url)
    token = api.token(scripted_project, tenant_id="tenant-42")
    provider.script(Reply(text="hello"))
    api.chat(token, message="hi")
    (got,) = receiver.wait_for(1)
    assert got.body["tenant_id"] == "tenant-42" and got.body["scheduled"] is False


def test_the_sample_scheduler_event_drives_the_real_function_adapter(
    aws: LocalStack, api: Api, project: Project, receiver: Receiver
):
    # Given the sample input (events/scheduled.json, what the Scheduler sends), re-pointed at a real task
    from pathlib import Path

    from oberik.local.stack import FakeLambdaContext, load_handler

    root = Path(__file__).resolve().parents[2]
    token = api.token(project)
    task = post_task(api, token, schedule={"rate": "1 day"}, action={"type": "webhook", "url": receiver.url}).json()
    sample = json.loads((root / "events" / "scheduled.json").read_text())
    assert set(sample) == {"task_id", "project_id", "scheduled_time", "attempt"}
    handler = load_handler(root / "functions" / "scheduled" / "app.py", "oberik_fn_scheduled_sample")
    context = FakeLambdaContext("oberik-scheduled", aws.function_arns["oberik-scheduled"], 512, 30)

    # When the function's adapter handles it, and then an event naming a task that does not exist
    sent = handler(sample | {"task_id": task["id"], "project_id": project.id}, context)
    gone = handler(sample, context)

    # Then the first task's notification arrives, and the second is nothing to do
    assert sent == {"status": "sent", "task_id": task["id"]}
    assert gone["status"] == "gone"
    (got,) = receiver.wait_for(1)
    assert got.body["task_id"] == task["id"] and got.body["message"] == ""


def test_a_failing_receiver_gets_the_same_notification_again_until_it_accepts(
    aws: LocalStack, api: Api, project: Project, receiver: Receiver
):
    # Given a receiver that answers 500 twice, then 200
    receiver.script(500, 500, 200)
    token = api.token(project)
    post_task(api, token, schedule={"rate": "1 hour"}, action={"type": "webhook", "url": receiver.url, "message": "m"})

    # When the task fires once
    aws.clock.tick(due_after(61))  # type: ignore[union-attr]

    # Then the queue retried the one notification: three attempts, one delivery id, the same bytes
    got = receiver.wait_for(3)
    assert len({r.header("X-Delivery-Id") for r in got}) == 1 and len({r.raw for r in got}) == 1
    eventually(lambda: queue_depth(aws, "DeliveryQueue") == 0, what="the delivery queue to drain")
    assert len(receiver.requests) == 3
