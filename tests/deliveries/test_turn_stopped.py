"""turn.stopped end to end: the real turn loop on moto, the real SQS queue and poller, a receiver on loopback."""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from typing import Any

import pytest

from oberik.adapters.aws import client
from oberik.adapters.dynamodb import DynamoStore
from oberik.engine import deliveries
from oberik.local.scripted_provider import Fail, Reply, ScriptedProvider
from oberik.local.stack import LocalStack
from tests.api_fixtures import Api, Project
from tests.deliveries.conftest import Answer, Receiver, eventually
from tests.integration.test_pauses import LOOKUP, QUESTION, call

pytestmark = pytest.mark.usefixtures("allow_private", "quick")


def hook(api: Api, project: Project, receiver: Receiver) -> None:
    api.configure(project, webhook_url=receiver.url)


def secret_of(api: Api, project: Project) -> str:
    r = api.client.get(f"/api/projects/{project.id}/webhook-secret", headers=project.headers)
    assert r.status_code == 200, r.text
    return str(r.json()["secret"])


def attempts(api: Api, project: Project, **params: Any) -> list[dict[str, Any]]:
    r = api.client.get(f"/api/projects/{project.id}/webhook-deliveries", params=params, headers=project.headers)
    assert r.status_code == 200, r.text
    items: list[dict[str, Any]] = r.json()["items"]
    return items


def signed_by(secret: str, raw: bytes) -> str:
    return "sha256=" + hmac.new(secret.encode(), raw, hashlib.sha256).hexdigest()


def queue_depth(stack: LocalStack, logical_id: str) -> int:
    url = stack.queues[logical_id][0]
    attributes = client("sqs").get_queue_attributes(
        QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]
    )["Attributes"]
    return int(attributes["ApproximateNumberOfMessages"]) + int(attributes["ApproximateNumberOfMessagesNotVisible"])


# --- what arrives --------------------------------------------------------------------------------------


def test_a_finished_turn_is_delivered_signed_with_the_projects_key(
    api: Api, scripted_project: Project, provider: ScriptedProvider, receiver: Receiver
):
    # Given a project with a webhook, and a user whose token carries a user_ref
    hook(api, scripted_project, receiver)
    token = api.token(scripted_project, user_ref="customer-42")
    provider.script(Reply(text="Here you go. The Q3 numbers are in."))

    # When a turn finishes
    done = api.chat(token, message="Q3 numbers?").json()

    # Then one turn.stopped arrives, signed over its exact bytes with the project's webhook secret
    (got,) = receiver.wait_for(1)
    assert got.header("X-Signature") == signed_by(secret_of(api, scripted_project), got.raw)
    assert got.header("X-Delivery-Id").startswith("dlv_")
    assert got.header("Content-Type") == "application/json"
    assert got.body == {
        "event": "turn.stopped",
        "reason": "completed",
        "needs_input": False,
        "complete": True,
        "scheduled": False,
        "tenant_id": scripted_project.id,
        "session_id": done["session_id"],
        "user_ref": "customer-42",
        "preview": "Here you go. The Q3 numbers are in.",
        "preview_truncated": False,
        "content_chars": len("Here you go. The Q3 numbers are in."),
        "tools": [],
        "questions": [],
        "approvals": [],
    }
    # And the bytes are the body serialised once: compact, keys sorted
    assert got.raw == json.dumps(got.body, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    # And the attempt is in the deliveries log
    eventually(lambda: attempts(api, scripted_project), what="the logged attempt")
    (logged,) = attempts(api, scripted_project)
    assert logged["delivery_id"] == got.header("X-Delivery-Id")
    assert logged["outcome"] == "delivered" and logged["status_code"] == 200 and logged["attempt"] == 1
    assert logged["url"] == receiver.url and logged["event"] == "turn.stopped" and logged["reason"] == "completed"


def test_a_long_answer_is_previewed_by_its_first_280_characters(
    api: Api, scripted_project: Project, token: str, provider: ScriptedProvider, receiver: Receiver
):
    hook(api, scripted_project, receiver)
    answer = "Résumé: " + "x" * 600
    provider.script(Reply(text=answer))
    api.chat(token, message="tell me everything")
    (got,) = receiver.wait_for(1)
    assert got.body["preview"] == answer[:280] and got.body["preview_truncated"] is True
    assert got.body["content_chars"] == len(answer)


def test_a_turn_that_says_nothing_is_delivered_as_no_answer(
    api: Api, scripted_project: Project, token: str, provider: ScriptedProvider, receiver: Receiver
):
    hook(api, scripted_project, receiver)
    provider.script(Reply(text=""), Reply(text=""))  # an empty answer is asked for once more
    api.chat(token, message="hello?")
    (got,) = receiver.wait_for(1)
    assert got.body["reason"] == "no_answer" and got.body["preview"] is None
    assert got.body["needs_input"] is False and got.body["complete"] is False


def test_a_turn_that_runs_out_of_steps_is_delivered_as_hit_tool_limit(
    api: Api,
    scripted_project: Project,
    token: str,
    provider: ScriptedProvider,
    receiver: Receiver,
    monkeypatch: pytest.MonkeyPatch,
):
    # Given a turn allowed one model call, which spends it on a tool
    hook(api, scripted_project, receiver)
    monkeypatch.setenv("OBERIK_MAX_STEPS", "1")
    from oberik.settings import get_settings

    get_settings.cache_clear()
    provider.script(Reply(text="Checking the clock.", tool_calls=[call("current_time", "c1")]))
    api.chat(token, message="what time is it?")
    (got,) = receiver.wait_for(1)
    assert got.body["reason"] == "hit_tool_limit"
    assert got.body["complete"] is False and got.body["needs_input"] is False


def test_a_failed_turn_sends_nothing(
    api: Api, scripted_project: Project, token: str, provider: ScriptedProvider, receiver: Receiver
):
    # Given a provider that refuses the request, so the turn fails
    hook(api, scripted_project, receiver)
    provider.script(Fail(400, "bad request"))
    r = api.chat(token, message="hi")
    assert r.status_code >= 400
    # Then nothing is queued, so nothing can arrive
    time.sleep(0.5)
    assert receiver.requests == [] and attempts(api, scripted_project) == []


def test_without_a_webhook_nothing_is_queued(
    aws: LocalStack, api: Api, token: str, provider: ScriptedProvider, receiver: Receiver
):
    provider.script(Reply(text="ok"))
    api.chat(token, message="hi")
    assert queue_depth(aws, "DeliveryQueue") == 0 and receiver.requests == []


# --- pauses ---------------------------------------------------------------------------------------------


def test_a_pause_nobody_answers_arrives_after_the_grace_period(
    api: Api, scripted_project: Project, token: str, provider: ScriptedProvider, receiver: Receiver
):
    # Given an interactive turn that pauses on a client tool
    hook(api, scripted_project, receiver)
    provider.script(Reply(text="Let me look.", tool_calls=[call("lookup_order", "c1", order_id="o_7")]))
    stopped = time.monotonic()
    paused = api.chat(token, message="where is o_7?", client_tools=[LOOKUP]).json()
    assert paused["requires_action"] is True

    # When nobody answers it
    (got,) = receiver.wait_for(1)

    # Then it arrives once the grace period has passed, saying who must act and which tool is why
    assert got.at - stopped >= deliveries.PAUSE_GRACE_SECONDS
    assert got.body["reason"] == "needs_client_tool" and got.body["tools"] == ["lookup_order"]
    assert got.body["needs_input"] is True and got.body["complete"] is False
    assert got.body["preview"] is None and got.body["content_chars"] == len("Let me look.")


def test_a_pause_the_client_answers_at_once_is_not_delivered(
    api: Api, scripted_project: Project, token: str, provider: ScriptedProvider, receiver: Receiver
):
    # Given a turn that pauses on a client tool, and a connected client that answers it straight away
    hook(api, scripted_project, receiver)
    provider.script(Reply(tool_calls=[call("lookup_order", "c1", order_id="o_7")]), Reply(text="It shipped."))
    sid = api.chat(token, message="where is o_7?", client_tools=[LOOKUP]).json()["session_id"]
    done = api.chat(token, session_id=sid, tool_results=[{"tool_call_id": "c1", "content": "shipped"}])
    assert done.json()["content"] == "It shipped."

    # When the pause notification comes due
    eventually(
        lambda: any(a["outcome"] == "skipped" for a in attempts(api, scripted_project)),
        timeout=10,
        what="the pause notification to be looked at again",
    )

    # Then only the turn's end was delivered; the answered pause was dropped, and the log says why
    assert [r.body["reason"] for r in receiver.wait_for(1)] == ["completed"]
    (skipped,) = [a for a in attempts(api, scripted_project) if a["outcome"] == "skipped"]
    assert skipped["reason"] == "needs_client_tool" and "answered" in skipped["error"]
    time.sleep(0.3)
    assert len(receiver.requests) == 1


def test_questions_and_approvals_say_what_is_asked(
    api: Api,
    scripted_project: Project,
    token: str,
    provider: ScriptedProvider,
    receiver: Receiver,
    monkeypatch: pytest.MonkeyPatch,
):
    # Given pause notifications sent without a grace period
    monkeypatch.setattr(deliveries, "PAUSE_GRACE_SECONDS", 0)
    hook(api, scripted_project, receiver)
    provider.script(
        Reply(tool_calls=[call("ask_user", "q1", questions=[QUESTION])]),
        Reply(tool_calls=[call("request_approval", "r1", action="Email the Q3 numbers to finance")]),
    )

    # When a turn asks a question, and after the answer asks for an approval
    sid = api.chat(token, message="migrate the fetchers").json()["session_id"]
    (asked,) = receiver.wait_for(1)
    api.chat(
        token, session_id=sid, answers={"tool_call_id": "q1", "answers": [{"question_id": "Scope", "text": "all"}]}
    )
    _, approval = receiver.wait_for(2)

    # Then each names what it waits on
    assert asked.body["reason"] == "needs_answer" and asked.body["needs_input"] is True
    assert asked.body["questions"] == [{"tool_call_id": "q1", "headers": ["Scope"]}]
    assert approval.body["reason"] == "needs_approval" and approval.body["needs_input"] is True
    assert approval.body["approvals"] == [{"tool_call_id": "r1", "action": "Email the Q3 numbers to finance"}]
    assert asked.header("X-Delivery-Id") != approval.header("X-Delivery-Id")


def test_a_scheduled_turns_pause_is_delivered_at_once(
    api: Api,
    scripted_project: Project,
    token: str,
    provider: ScriptedProvider,
    receiver: Receiver,
    monkeypatch: pytest.MonkeyPatch,
):
    # Given a paused turn nobody is watching (scheduled turns are unattended), and a long grace period
    monkeypatch.setattr(deliveries, "PAUSE_GRACE_SECONDS", 60)
    provider.script(Reply(tool_calls=[call("request_approval", "r1", action="Pay the invoice")]))
    sid = api.chat(token, message="pay it").json()["session_id"]
    store = DynamoStore()
    session = store.get_session(sid)
    assert session is not None and session.paused_turn
    turn = store.get_turn(session.paused_turn)
    assert turn is not None
    store.update_turn(turn.id, plan=turn.plan.model_copy(update={"unattended": True}).model_dump(mode="json"))
    hook(api, scripted_project, receiver)

    # When it announces its stop
    started = time.monotonic()
    note = deliveries.turn_stopped(store, turn.id)

    # Then it is not held back: it arrives at once, marked scheduled
    assert note is not None and note.hold is False
    (got,) = receiver.wait_for(1, timeout=10)
    assert got.at - started < 5
    assert got.body["scheduled"] is True and got.body["reason"] == "needs_approval"


# --- reliability ----------------------------------------------------------------------------------------


def test_a_turn_never_waits_for_its_delivery(
    api: Api,
    scripted_project: Project,
    token: str,
    provider: ScriptedProvider,
    receiver: Receiver,
    monkeypatch: pytest.MonkeyPatch,
):
    # Given a receiver that takes five seconds to answer (and a sender patient enough to wait for it)
    monkeypatch.setattr(deliveries, "DELIVERY_TIMEOUT_SECONDS", 8.0)
    hook(api, scripted_project, receiver)
    receiver.script(Answer(200, sleep=5))
    provider.script(Reply(text="one"))

    # When a blocking turn runs
    started = time.monotonic()
    r = api.chat(token, message="hi")
    took = time.monotonic() - started

    # Then it answered without waiting on the receiver
    assert r.status_code == 200
    assert took < 3, f"the turn took {took:.1f} s"
    # And the receiver was still reached, and took its five seconds
    logged = eventually(lambda: attempts(api, scripted_project), timeout=15, what="the slow delivery")
    assert logged[0]["outcome"] == "delivered" and logged[0]["duration_ms"] >= 5000


def test_a_receiver_that_fails_three_times_gets_one_notification(
    aws: LocalStack,
    api: Api,
    scripted_project: Project,
    token: str,
    provider: ScriptedProvider,
    receiver: Receiver,
):
    # Given a receiver that answers 500 three times, then 200
    hook(api, scripted_project, receiver)
    receiver.script(500, 500, 500, 200)
    provider.script(Reply(text="done"))

    # When a turn finishes
    api.chat(token, message="hi")

    # Then it receives the same notification four times: one delivery id, the same bytes, each signed
    got = receiver.wait_for(4)
    secret = secret_of(api, scripted_project)
    assert len({r.header("X-Delivery-Id") for r in got}) == 1
    assert len({r.raw for r in got}) == 1
    assert all(r.header("X-Signature") == signed_by(secret, r.raw) for r in got)

    # And the log holds four attempts, the last delivered; nothing is left in either queue
    delivery_id = got[0].header("X-Delivery-Id")
    logged = eventually(lambda: (a := attempts(api, scripted_project, delivery_id=delivery_id)) and len(a) == 4 and a)
    assert [(a["attempt"], a["status_code"], a["outcome"]) for a in reversed(logged)] == [
        (1, 500, "failed"),
        (2, 500, "failed"),
        (3, 500, "failed"),
        (4, 200, "delivered"),
    ]
    assert all("500" in a["error"] for a in logged[1:])
    eventually(lambda: queue_depth(aws, "DeliveryQueue") == 0, what="the delivered message to leave the queue")
    time.sleep(0.3)
    assert len(receiver.requests) == 4 and queue_depth(aws, "DeliveryDeadLetterQueue") == 0


def test_a_receiver_that_never_answers_ends_in_the_dead_letter_queue(
    aws: LocalStack,
    api: Api,
    scripted_project: Project,
    token: str,
    provider: ScriptedProvider,
    receiver: Receiver,
    monkeypatch: pytest.MonkeyPatch,
):
    # Given a receiver that never answers in time
    monkeypatch.setattr(deliveries, "DELIVERY_TIMEOUT_SECONDS", 0.3)
    hook(api, scripted_project, receiver)
    receiver.default = Answer(200, sleep=30)
    provider.script(Reply(text="done"))

    # When a turn finishes
    api.chat(token, message="hi")

    # Then after the queue's five receives the notification is in the dead-letter queue
    eventually(lambda: queue_depth(aws, "DeliveryDeadLetterQueue") == 1, timeout=30, what="the dead-letter queue")
    dead = client("sqs").receive_message(QueueUrl=aws.queues["DeliveryDeadLetterQueue"][0])["Messages"]
    delivery_id = json.loads(dead[0]["Body"])["delivery_id"]
    # And each attempt is in the log, failed with the reason
    logged = attempts(api, scripted_project, delivery_id=delivery_id)
    assert sorted(a["attempt"] for a in logged) == [1, 2, 3, 4, 5]
    assert all(a["outcome"] == "failed" and "no answer" in a["error"] for a in logged)
    assert len(receiver.requests) == 5 and queue_depth(aws, "DeliveryQueue") == 0


def test_failed_attempts_are_retried_later_and_later(
    api: Api,
    scripted_project: Project,
    token: str,
    provider: ScriptedProvider,
    receiver: Receiver,
    monkeypatch: pytest.MonkeyPatch,
):
    # Given retries that back off from one second
    monkeypatch.setattr(deliveries, "RETRY_BASE_SECONDS", 1.0)
    hook(api, scripted_project, receiver)
    receiver.script(500, 500, 200)
    provider.script(Reply(text="done"))

    # When a turn finishes and its first two attempts fail
    api.chat(token, message="hi")
    first, second, third = receiver.wait_for(3, timeout=20)

    # Then the second attempt came about 1 s after the first, and the third about 4 s after the second
    assert 0.9 <= second.at - first.at < 3
    assert 3.9 <= third.at - second.at < 7


def test_rotating_the_key_signs_the_next_delivery_with_the_new_one(
    api: Api, scripted_project: Project, token: str, provider: ScriptedProvider, receiver: Receiver
):
    # Given a project whose key has been read, then rotated
    hook(api, scripted_project, receiver)
    old = secret_of(api, scripted_project)
    assert secret_of(api, scripted_project) == old  # made once, then stable
    rotated = api.client.post(
        f"/api/projects/{scripted_project.id}/webhook-secret/rotate", headers=scripted_project.headers
    )
    assert rotated.status_code == 200
    new = rotated.json()["secret"]
    assert new != old and secret_of(api, scripted_project) == new

    # When a turn finishes
    provider.script(Reply(text="ok"))
    api.chat(token, message="hi")

    # Then the delivery is signed with the new key only
    (got,) = receiver.wait_for(1)
    assert got.header("X-Signature") == signed_by(new, got.raw) != signed_by(old, got.raw)


def test_a_target_that_became_internal_is_refused_at_delivery_and_not_retried(
    api: Api,
    scripted_project: Project,
    token: str,
    provider: ScriptedProvider,
    receiver: Receiver,
    monkeypatch: pytest.MonkeyPatch,
):
    # Given a webhook accepted while private targets were allowed, which then no longer are
    hook(api, scripted_project, receiver)
    monkeypatch.setenv("OBERIK_ALLOW_PRIVATE_WEBHOOKS", "0")
    from oberik.settings import get_settings

    get_settings.cache_clear()
    provider.script(Reply(text="ok"))

    # When a turn finishes
    api.chat(token, message="hi")

    # Then the delivery is refused before anything is sent, once
    eventually(lambda: attempts(api, scripted_project), what="the refused attempt")
    time.sleep(0.3)
    (logged,) = attempts(api, scripted_project)
    assert logged["outcome"] == "refused" and "loopback" in logged["error"] and logged["status_code"] is None
    assert receiver.requests == []


def test_every_turn_stopped_is_also_published_to_the_events_topic(
    aws: LocalStack, api: Api, scripted_project: Project, token: str, provider: ScriptedProvider
):
    # Given a queue subscribed to the events topic (and no webhook at all)
    sqs, sns = client("sqs"), client("sns")
    inbox = sqs.create_queue(QueueName="events-inbox")["QueueUrl"]
    inbox_arn = sqs.get_queue_attributes(QueueUrl=inbox, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    sns.subscribe(TopicArn=aws.topics["EventsTopic"], Protocol="sqs", Endpoint=inbox_arn)
    provider.script(Reply(text="published"))

    # When a turn finishes
    sid = api.chat(token, message="hi").json()["session_id"]

    # Then the topic carried the same body, with event, reason and tenant_id as message attributes
    messages = eventually(lambda: sqs.receive_message(QueueUrl=inbox).get("Messages"), what="the SNS message")
    envelope = json.loads(messages[0]["Body"])
    body = json.loads(envelope["Message"])
    assert body["event"] == "turn.stopped" and body["session_id"] == sid and body["preview"] == "published"
    assert {k: v["Value"] for k, v in envelope["MessageAttributes"].items()} == {
        "event": "turn.stopped",
        "reason": "completed",
        "tenant_id": scripted_project.id,
    }
