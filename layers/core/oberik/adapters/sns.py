"""The events topic: every turn.stopped is published here too, for consumers inside AWS (SNS)."""

from __future__ import annotations

from typing import Any

from oberik.adapters.aws import client
from oberik.settings import Settings, get_settings


class EventsTopic:
    def __init__(self, arn: str, settings: Settings | None = None) -> None:
        self.arn = arn
        self.settings = settings or get_settings()

    def publish(self, message: str, attributes: dict[str, str]) -> str:
        """Publish `message` with string message attributes (subscribers filter on them); empty ones are left out."""
        r: Any = client("sns", self.settings).publish(
            TopicArn=self.arn,
            Message=message,
            MessageAttributes={k: {"DataType": "String", "StringValue": v} for k, v in attributes.items() if v},
        )
        return str(r["MessageId"])
