"""Queues, topics and SQS event sources of template.yaml, for the embedded stack.

moto creates queues and topics but never runs a Lambda function's SQS event source by itself. `QueuePoller`
does what the Lambda service does for one: it receives from the queue, hands the batch to the function's
handler in the event shape Lambda uses, and deletes what the handler did not report as failed
(`batchItemFailures`). Delays, visibility timeouts and the redrive to a dead-letter queue are moto's own, so
they behave as SQS's do.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any, TypedDict

from oberik.adapters import aws
from oberik.local.template import arn_reference, function_name, properties_of_type
from oberik.observability import logger

QUEUE_TYPE = "AWS::SQS::Queue"
TOPIC_TYPE = "AWS::SNS::Topic"

# AWS::SQS::Queue properties that create_queue takes as attributes under the same name.
_QUEUE_ATTRIBUTES = (
    "DelaySeconds",
    "MaximumMessageSize",
    "MessageRetentionPeriod",
    "ReceiveMessageWaitTimeSeconds",
    "VisibilityTimeout",
    "SqsManagedSseEnabled",
    "FifoQueue",
    "ContentBasedDeduplication",
)


class QueueSource(TypedDict):
    function: str  # logical id
    queue: str  # logical id
    batch_size: int
    report_failures: bool  # FunctionResponseTypes includes ReportBatchItemFailures


def queues(template: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Every AWS::SQS::Queue's properties by logical id."""
    return properties_of_type(template, QUEUE_TYPE)


def topics(template: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Every AWS::SNS::Topic's properties by logical id."""
    return properties_of_type(template, TOPIC_TYPE)


def sqs_event_sources(template: dict[str, Any]) -> list[QueueSource]:
    """Every SQS event of every function, pointing at a queue of this template."""
    defined = set(queues(template))
    found: list[QueueSource] = []
    for logical_id, props in properties_of_type(template, "AWS::Serverless::Function").items():
        for event in (props.get("Events") or {}).values():
            if (event or {}).get("Type") != "SQS":
                continue
            properties = event.get("Properties") or {}
            queue = arn_reference(properties.get("Queue"))
            if queue is None or queue not in defined:
                raise ValueError(
                    f"{logical_id}: an SQS event must name a queue of this template as !GetAtt <Queue>.Arn"
                )
            found.append(
                {
                    "function": logical_id,
                    "queue": queue,
                    "batch_size": int(properties.get("BatchSize") or 10),
                    "report_failures": "ReportBatchItemFailures" in (properties.get("FunctionResponseTypes") or []),
                }
            )
    return found


def environment_references(template: dict[str, Any]) -> dict[str, str]:
    """Function environment variables set to `!Ref` a queue (its URL) or a topic (its ARN): name -> logical id."""
    targets = set(queues(template)) | set(topics(template))
    functions = properties_of_type(template, "AWS::Serverless::Function")
    defaults = ((template.get("Globals") or {}).get("Function") or {}).get("Environment") or {}
    found: dict[str, str] = {}
    for environment in [defaults, *(props.get("Environment") or {} for props in functions.values())]:
        for name, value in (environment.get("Variables") or {}).items():
            if isinstance(value, dict) and list(value) == ["Ref"] and value["Ref"] in targets:
                if found.get(name, value["Ref"]) != value["Ref"]:
                    raise ValueError(f"{name} refers to {found[name]} in one function and {value['Ref']} in another")
                found[name] = value["Ref"]
    return found


def create_queues(sqs: Any, template: dict[str, Any]) -> dict[str, tuple[str, str]]:
    """Create the template's queues (dead-letter targets first); logical id -> (URL, ARN)."""
    pending = queues(template)
    made: dict[str, tuple[str, str]] = {}
    while pending:
        progressed = False
        for logical_id, props in list(pending.items()):
            redrive = dict(props.get("RedrivePolicy") or {})
            target = arn_reference(redrive.get("deadLetterTargetArn")) if redrive else None
            if target is not None and target not in made:
                continue
            attributes = {key: _text(props[key]) for key in _QUEUE_ATTRIBUTES if key in props}
            if redrive:
                if target is not None:
                    redrive["deadLetterTargetArn"] = made[target][1]
                attributes["RedrivePolicy"] = json.dumps(redrive)
            name = function_name(logical_id) + (".fifo" if _text(props.get("FifoQueue", False)) == "true" else "")
            url = sqs.create_queue(QueueName=name, Attributes=attributes)["QueueUrl"]
            arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
            made[logical_id] = (url, arn)
            del pending[logical_id]
            progressed = True
        if not progressed:
            raise ValueError(f"queues whose dead-letter targets are not queues of this template: {sorted(pending)}")
    return made


def create_topics(sns: Any, template: dict[str, Any]) -> dict[str, str]:
    """Create the template's topics; logical id -> ARN."""
    return {
        logical_id: sns.create_topic(Name=str(props.get("TopicName") or function_name(logical_id)))["TopicArn"]
        for logical_id, props in topics(template).items()
    }


def _text(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def _record(message: dict[str, Any], queue_arn: str, region: str) -> dict[str, Any]:
    """One received message as a record of the event Lambda hands an SQS-triggered function."""
    return {
        "messageId": message["MessageId"],
        "receiptHandle": message["ReceiptHandle"],
        "body": message["Body"],
        "attributes": dict(message.get("Attributes") or {}),
        "messageAttributes": {
            name: {
                "stringValue": value.get("StringValue"),
                "binaryValue": value.get("BinaryValue"),
                "stringListValues": [],
                "binaryListValues": [],
                "dataType": value.get("DataType", "String"),
            }
            for name, value in (message.get("MessageAttributes") or {}).items()
        },
        "md5OfBody": message.get("MD5OfBody", ""),
        "eventSource": "aws:sqs",
        "eventSourceARN": queue_arn,
        "awsRegion": region,
    }


class PollingThread:
    """A local event source's thread: poll, hand over, and when a poll found nothing wait `idle_seconds` (or until
    woken). A failing poll is logged and tried again; `stop` finishes the poll in hand first."""

    idle_seconds = 0.5

    def __init__(self, thread_name: str) -> None:
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=thread_name, daemon=True)

    def poll_once(self) -> int:
        raise NotImplementedError

    def _poked(self, **_: Any) -> None:
        self._wake.set()

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 30.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                handled = self.poll_once()
            except Exception:
                if self._stop.is_set():
                    return
                logger.exception("local event source failed", poller=self._thread.name)
                handled = 0
            if not handled:
                self._wake.wait(self.idle_seconds)
                self._wake.clear()


class QueuePoller(PollingThread):
    """One SQS event source, run in a thread: receive a batch, call the handler, delete what succeeded."""

    # Between empty receives. A message sent from this process wakes the poller at once (a botocore hook on
    # SendMessage), so the wait only bounds how late a message sent from elsewhere, or one whose delay has
    # just run out, is picked up; polling less often leaves the two cores to the platform.
    idle_seconds = 0.5

    def __init__(
        self,
        sqs: Any,
        queue_url: str,
        queue_arn: str,
        handler: Callable[[dict[str, Any]], Any],
        *,
        batch_size: int,
        report_failures: bool,
        region: str,
        name: str,
    ) -> None:
        self.sqs = sqs
        self.queue_url = queue_url
        self.queue_arn = queue_arn
        self.handler = handler
        self.batch_size = max(1, min(10, batch_size))
        self.report_failures = report_failures
        self.region = region
        super().__init__(f"sqs-poller-{name}")

    def start(self) -> None:
        aws.register_hook("after-call.sqs.SendMessage", self._poked)
        aws.register_hook("after-call.sqs.SendMessageBatch", self._poked)
        super().start()

    def stop(self, timeout: float = 30.0) -> None:
        """Stop receiving; a batch being handled is finished first (up to `timeout` seconds)."""
        aws.unregister_hook("after-call.sqs.SendMessage", self._poked)
        aws.unregister_hook("after-call.sqs.SendMessageBatch", self._poked)
        super().stop(timeout)

    def poll_once(self) -> int:
        """Receive one batch and hand it to the handler; returns how many messages it received."""
        messages = self.sqs.receive_message(
            QueueUrl=self.queue_url,
            MaxNumberOfMessages=self.batch_size,
            AttributeNames=["All"],
            MessageAttributeNames=["All"],
            WaitTimeSeconds=0,
        ).get("Messages", [])
        if not messages:
            return 0
        event = {"Records": [_record(m, self.queue_arn, self.region) for m in messages]}
        try:
            result = self.handler(event)
            failed = (
                {str(f.get("itemIdentifier")) for f in (result or {}).get("batchItemFailures") or []}
                if self.report_failures
                else set()
            )
        except Exception:
            # As on Lambda: a handler that raises fails the whole batch, which comes back after the
            # visibility timeout.
            logger.exception("local SQS handler raised", queue=self.queue_url)
            failed = {m["MessageId"] for m in messages}
        for message in messages:
            if message["MessageId"] not in failed:
                self.sqs.delete_message(QueueUrl=self.queue_url, ReceiptHandle=message["ReceiptHandle"])
        return len(messages)
