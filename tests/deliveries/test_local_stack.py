"""The embedded stack's side of deliveries: queues and topic from template.yaml, and the SQS event source it runs."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from oberik.adapters.aws import client
from oberik.local.stack import FakeLambdaContext, LocalStack, load_handler
from tests.deliveries.conftest import eventually

ROOT = Path(__file__).resolve().parents[2]


def test_the_queues_and_topic_come_from_the_template(aws: LocalStack):
    # Given the embedded stack
    sqs = client("sqs")
    queue_url, _ = aws.queues["DeliveryQueue"]
    dlq_url, dlq_arn = aws.queues["DeliveryDeadLetterQueue"]
    # Then the delivery queue has the template's visibility timeout and redrives to the dead-letter queue
    attributes = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["All"])["Attributes"]
    assert attributes["VisibilityTimeout"] == "360"
    assert json.loads(attributes["RedrivePolicy"]) == {"deadLetterTargetArn": dlq_arn, "maxReceiveCount": 5}
    assert sqs.get_queue_attributes(QueueUrl=dlq_url, AttributeNames=["MessageRetentionPeriod"])["Attributes"] == {
        "MessageRetentionPeriod": "1209600"
    }
    # And the functions are told where the queue and the topic are, as the template tells them
    assert os.environ["OBERIK_DELIVERY_QUEUE_URL"] == queue_url
    assert os.environ["OBERIK_EVENTS_TOPIC_ARN"] == aws.topics["EventsTopic"]
    assert aws.topics["EventsTopic"] in [t["TopicArn"] for t in client("sns").list_topics()["Topics"]]


def test_the_queue_is_handed_to_its_function_as_lambda_would(mocked_aws: None):
    # Given a stack whose deliver function reports its first attempt at each message as failed
    seen: list[dict[str, Any]] = []

    def deliver(event: dict[str, Any]) -> dict[str, Any]:
        seen.append(event)
        failures = []
        for record in event["Records"]:
            if record["attributes"]["ApproximateReceiveCount"] == "1":
                client("sqs").change_message_visibility(
                    QueueUrl=os.environ["OBERIK_DELIVERY_QUEUE_URL"],
                    ReceiptHandle=record["receiptHandle"],
                    VisibilityTimeout=0,
                )
                failures.append({"itemIdentifier": record["messageId"]})
        return {"batchItemFailures": failures}

    with LocalStack.in_process(overrides={"DeliverFunction": deliver}) as stack:
        url, arn = stack.queues["DeliveryQueue"]

        # When a message is queued
        client("sqs").send_message(
            QueueUrl=url,
            MessageBody='{"hello": 1}',
            MessageAttributes={"event": {"DataType": "String", "StringValue": "x"}},
        )

        # Then the function gets it in an SQS event, again after it failed, and then it is gone from the queue
        eventually(lambda: len(seen) >= 2, what="two deliveries of the message")
        first, second = (e["Records"][0] for e in seen[:2])
        assert first["body"] == '{"hello": 1}' and first["eventSource"] == "aws:sqs"
        assert first["eventSourceARN"] == arn and first["awsRegion"] == "us-east-1"
        assert first["messageAttributes"]["event"]["stringValue"] == "x"
        assert first["messageId"] == second["messageId"] and second["attributes"]["ApproximateReceiveCount"] == "2"

        def left() -> int:
            attrs = client("sqs").get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
            return int(attrs["ApproximateNumberOfMessages"]) + int(attrs["ApproximateNumberOfMessagesNotVisible"])

        eventually(lambda: left() == 0, what="the message to be deleted")
        pollers = list(stack._pollers)
        assert pollers and all(p._thread.is_alive() for p in pollers)

    # And stopping the stack stops its pollers
    assert all(not p._thread.is_alive() for p in pollers)


def test_the_sample_deliver_event_runs_through_the_real_handler(aws: LocalStack):
    # Given the sample SQS event, for a project that does not exist here
    event = json.loads((ROOT / "events" / "deliver.json").read_text())
    handler = load_handler(ROOT / "functions" / "deliver" / "app.py", "oberik_fn_deliver_sample")
    context = FakeLambdaContext(
        function_name="oberik-deliver",
        invoked_function_arn="arn:aws:lambda:us-east-1:123456789012:function:oberik-deliver",
        memory_limit_in_mb=512,
        timeout_seconds=60,
    )
    # When the deliver function's adapter handles it
    result = handler(event, context)
    # Then it reads every record, skips the one with nowhere to go, and asks for no retries
    assert result == {"batchItemFailures": []}
