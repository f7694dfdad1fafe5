"""template.yaml wires deliveries as designed: queue, dead-letter queue, consumer, topic, least privilege."""

from __future__ import annotations

from typing import Any

from oberik.local.template import load_template

ENQUEUERS = ("ParkFunction", "FinishFunction", "ApiFunction", "StreamFunction", "ScheduledFunction")


def _resources() -> dict[str, Any]:
    resources: dict[str, Any] = load_template()["Resources"]
    return resources


def _policy_names(function: dict[str, Any]) -> set[str]:
    return {next(iter(p)) for p in function["Properties"].get("Policies", []) if isinstance(p, dict)}


def test_the_delivery_queue_retries_five_times_then_dead_letters():
    resources = _resources()
    queue = resources["DeliveryQueue"]["Properties"]
    assert queue["RedrivePolicy"] == {
        "deadLetterTargetArn": {"Fn::GetAtt": ["DeliveryDeadLetterQueue", "Arn"]},
        "maxReceiveCount": 5,
    }
    assert resources["DeliveryDeadLetterQueue"]["Type"] == "AWS::SQS::Queue"
    # Lambda refuses an SQS source whose visibility timeout is shorter than the function's timeout
    assert queue["VisibilityTimeout"] >= 6 * resources["DeliverFunction"]["Properties"]["Timeout"]


def test_the_deliver_function_consumes_the_queue_reporting_partial_failures():
    deliver = _resources()["DeliverFunction"]["Properties"]
    (event,) = deliver["Events"].values()
    assert event["Type"] == "SQS"
    assert event["Properties"]["Queue"] == {"Fn::GetAtt": ["DeliveryQueue", "Arn"]}
    assert event["Properties"]["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
    assert deliver["CodeUri"] == "functions/deliver" and deliver["Handler"] == "app.handler"
    # And it may use the table and postpone its own retries, nothing more
    assert _policy_names(_resources()["DeliverFunction"]) == {"DynamoDBCrudPolicy", "Statement"}
    (statement,) = next(p["Statement"] for p in deliver["Policies"] if "Statement" in p)
    assert statement["Action"] == ["sqs:ChangeMessageVisibility"]
    assert statement["Resource"] == {"Fn::GetAtt": ["DeliveryQueue", "Arn"]}


def test_every_function_where_a_turn_stops_may_queue_and_publish_and_is_told_where():
    resources = _resources()
    for name in ENQUEUERS:
        function = resources[name]["Properties"]
        policies = function["Policies"]
        assert {"SQSSendMessagePolicy": {"QueueName": {"Fn::GetAtt": ["DeliveryQueue", "QueueName"]}}} in policies
        assert {"SNSPublishMessagePolicy": {"TopicName": {"Fn::GetAtt": ["EventsTopic", "TopicName"]}}} in policies
        variables = function["Environment"]["Variables"]
        assert variables["OBERIK_DELIVERY_QUEUE_URL"] == {"Ref": "DeliveryQueue"}, name
        assert variables["OBERIK_EVENTS_TOPIC_ARN"] == {"Ref": "EventsTopic"}, name


def test_functions_that_never_stop_a_turn_cannot_queue_or_publish():
    resources = _resources()
    for name, resource in resources.items():
        if resource["Type"] != "AWS::Serverless::Function" or name in ENQUEUERS:
            continue
        assert not _policy_names(resource) & {"SQSSendMessagePolicy", "SNSPublishMessagePolicy"}, name
    assert resources["EventsTopic"]["Type"] == "AWS::SNS::Topic"
