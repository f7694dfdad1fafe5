"""The delivery queue: notifications go in here, and the deliver function takes them out (SQS)."""

from __future__ import annotations

from typing import Any

from pydantic_settings import BaseSettings, SettingsConfigDict

from oberik.adapters.aws import client
from oberik.settings import Settings, get_settings


class StackResources(BaseSettings):
    """Where the stack's own queue and topic are, as template.yaml tells the functions that use them.

    Read from the environment like `oberik.settings.Settings` (same prefix), at the moment they are needed.
    Empty when the function was not given them: nothing is queued or published then.
    """

    model_config = SettingsConfigDict(env_prefix="OBERIK_", extra="ignore")

    delivery_queue_url: str = ""
    events_topic_arn: str = ""


def stack_resources() -> StackResources:
    return StackResources()


class DeliveryQueue:
    def __init__(self, url: str, settings: Settings | None = None) -> None:
        self.url = url
        self.settings = settings or get_settings()

    @property
    def sqs(self) -> Any:
        return client("sqs", self.settings)

    def send(self, body: str, *, delay_seconds: int = 0, attributes: dict[str, str] | None = None) -> str:
        """Queue one message; SQS holds it back `delay_seconds` (at most 900) before any consumer sees it."""
        kwargs: dict[str, Any] = {
            "QueueUrl": self.url,
            "MessageBody": body,
            "DelaySeconds": max(0, min(900, int(delay_seconds))),
        }
        if attributes:
            kwargs["MessageAttributes"] = {
                k: {"DataType": "String", "StringValue": v} for k, v in attributes.items() if v
            }
        return str(self.sqs.send_message(**kwargs)["MessageId"])

    def retry_later(self, receipt_handle: str, seconds: int) -> None:
        """Keep a failed message hidden `seconds` (at most 12 hours) before SQS hands it out again."""
        self.sqs.change_message_visibility(
            QueueUrl=self.url, ReceiptHandle=receipt_handle, VisibilityTimeout=max(0, min(43_200, int(seconds)))
        )
